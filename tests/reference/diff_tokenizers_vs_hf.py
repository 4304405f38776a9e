#!/usr/bin/env python3
"""Random tokenizer.json files encoded and decoded by coserve and by Hugging Face `tokenizers` side by side.

Each case builds a tokenizer from random components: a Sequence of normalizers (NFC, NFD, NFKC,
Lowercase, Strip, Prepend, Replace with strings and regexes), a Sequence of pre-tokenizers (Split
with regexes using \\w, \\s, \\p{..} and POSIX classes, every behaviour, inverted or not; Digits,
Punctuation, Whitespace, WhitespaceSplit, CharDelimiterSplit, BertPreTokenizer; Metaspace with each
prepend scheme, or ByteLevel last), a BPE model trained on a random corpus (byte fallback on the
Metaspace side, ignore_merges sometimes), a ByteLevel decoder or a random Sequence of Metaspace,
ByteFallback, Fuse, Strip, Replace and BPEDecoder, added tokens with random flags (special or not,
normalized, lstrip, rstrip, single_word) and sometimes a TemplateProcessing post-processor. It
then encodes random texts (with and without special tokens) and decodes the ids (with and
without skipping special tokens) through `coserve tokenize` / `coserve detokenize` and through
`tokenizers`. Differences are printed with the file kept for a look; the run ends with a summary
line and exits non-zero when anything differed.

Known differences: characters assigned after Unicode 14 (PCRE2 10.42's tables) in regex classes;
a negated class escape (\\W, \\S) inside a bracket follows PCRE2.

usage: tests/reference/diff_tokenizers_vs_hf.py [--bin build/bin/coserve] [--seed S] [--cases N]
needs: tokenizers (PyPI); run from the project root.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

from tokenizers import AddedToken, Regex, Tokenizer, decoders as D, models, normalizers as N, processors
from tokenizers import pre_tokenizers as P, trainers

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default="build/bin/coserve")
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--cases", type=int, default=100)
args = ap.parse_args()
R = random.Random(args.seed)

PIECES = [" ", "  ", "\t", "\n", "\r\n", "hello", "Hello", "WORLD", "the", " the", "ing", "tion", "  def", "()",
          "½", "①", "ﬁ", "e\u0301", "é", "İ", "ß", "日本", "🙂", "12", "3.5", "x²", "'s", " a", "ab", "▁", "Ａ",
          "\u00a0", "\u180e", "\u200d", "-", "!?", ",", "Ⅻ", "Ⓐ", "‿", "ǅ", "<x>", "[SEP]", "<|im_end|>",
          "مرحبا", "Привет", "lol", "xo"]
REGEXES = [r"\w+", r"\s+", r"\s?\w+", r"\W", r"\p{P}", r"\p{N}{1,2}", r"[[:punct:]]", r"[[:alpha:]]+",
           r"[^\s\p{L}\p{N}]+", r"\d", r"(?i:'s|'t)", r"[\w\-]+", r"\p{Han}+"]
BEHAVIOURS = ["removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"]


def text():
    return "".join(R.choice(PIECES) for _ in range(R.randint(0, 10)))


def normalizer():
    opts = [N.NFC, N.NFD, N.NFKC, N.Lowercase,
            lambda: N.Strip(left=R.random() < 0.7, right=R.random() < 0.7),
            lambda: N.Prepend("▁"), lambda: N.Replace(" ", "▁"), lambda: N.Replace(Regex(r" {2,}"), " "),
            lambda: N.Replace("l", "LL")]
    k = R.choice([0, 0, 1, 1, 2, 3])
    return None if k == 0 else N.Sequence([R.choice(opts)() for _ in range(k)])


def pre_steps():
    opts = [lambda: P.Digits(individual_digits=R.random() < 0.5),
            lambda: P.Split(Regex(R.choice(REGEXES)), R.choice(BEHAVIOURS), invert=R.random() < 0.2),
            lambda: P.Split(R.choice([" ", "l", "o"]), R.choice(BEHAVIOURS), invert=R.random() < 0.3),
            lambda: P.Punctuation(R.choice(BEHAVIOURS)), P.Whitespace, P.WhitespaceSplit,
            lambda: P.CharDelimiterSplit("x"), P.BertPreTokenizer]
    return [R.choice(opts)() for _ in range(R.choice([0, 1, 1, 2]))]


def build():
    steps = pre_steps()
    corpus = [text() for _ in range(300)] + ["the quick brown fox jumps over the lazy dog " * 3]
    if R.random() < 0.5:
        steps.append(P.ByteLevel(add_prefix_space=R.random() < 0.5, use_regex=R.random() < 0.7))
        tok = Tokenizer(models.BPE(ignore_merges=R.random() < 0.3))
        tok.decoder = D.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=P.ByteLevel.alphabet(), show_progress=False)
    else:
        steps.append(P.Metaspace(prepend_scheme=R.choice(["first", "always", "never"]), split=R.random() < 0.7))
        tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, ignore_merges=R.random() < 0.3))
        opts = [lambda: D.Metaspace(prepend_scheme=R.choice(["first", "always", "never"]), split=R.random() < 0.5),
                D.ByteFallback, D.Fuse, lambda: D.Strip(R.choice([" ", "▁", "a"]), R.randint(0, 2), R.randint(0, 2)),
                lambda: D.Replace(R.choice(["▁", Regex("▁+"), "l"]), R.choice([" ", "", "_"])),
                lambda: D.BPEDecoder(suffix=R.choice(["</w>", "l"]))]
        tok.decoder = D.Sequence([R.choice(opts)() for _ in range(R.randint(1, 5))])
        trainer = trainers.BpeTrainer(vocab_size=400, show_progress=False,
                                      special_tokens=["<unk>"] + [f"<0x{i:02X}>" for i in range(256)])
    norm = normalizer()
    if norm is not None:
        tok.normalizer = norm
    tok.pre_tokenizer = steps[0] if len(steps) == 1 else P.Sequence(steps)
    tok.train_from_iterator(corpus, trainer)
    specials = [AddedToken(c, special=True, normalized=False, lstrip=R.random() < 0.2, rstrip=R.random() < 0.2)
                for c in ["<|im_end|>", "[SEP]"] if R.random() < 0.7]
    plain = [AddedToken(c, special=False, normalized=R.random() < 0.5, single_word=R.random() < 0.3,
                        lstrip=R.random() < 0.2, rstrip=R.random() < 0.2)
             for c in ["<x>", "the", "hello", "Magic Word"] if R.random() < 0.4]
    tok.add_special_tokens(specials)
    tok.add_tokens(plain)
    if specials and R.random() < 0.7:
        first = specials[0].content
        tok.post_processor = processors.TemplateProcessing(
            single=f"{first} $A", pair=f"{first} $A $B", special_tokens=[(first, tok.token_to_id(first))])
    return tok


def run(argv, lines):
    p = subprocess.run(argv, input="\n".join(json.dumps(x) for x in lines) + "\n", capture_output=True, text=True)
    out = p.stdout.split("\n")[:-1]  # JSON strings may hold U+2028 and other line breaks
    if p.returncode != 0 or len(out) != len(lines):
        raise RuntimeError(p.stderr.strip()[:300])
    return [json.loads(o) for o in out]


workdir = tempfile.mkdtemp(prefix="coserve-tokdiff-")
failed = encodes = decodes = 0
for case in range(args.cases):
    tok = build()
    path = os.path.join(workdir, f"case{case}.json")
    tok.save(path)
    texts = [text() for _ in range(40)]
    bad = 0
    try:
        for special in (False, True):
            got = run([args.bin, "tokenize", path] + (["--add-special-tokens"] if special else []), texts)
            expected = [tok.encode(x, add_special_tokens=special) for x in texts]
            for x, e, g in zip(texts, expected, got):
                encodes += 1
                if e.ids != g:
                    bad += 1
                    if bad <= 2:
                        print(f"ENCODE {path} special={special} {x!r}\n  tokenizers {e.tokens}\n"
                              f"  coserve    {[tok.id_to_token(i) for i in g]}")
            for skip in (False, True):
                ids = [e.ids for e in expected]
                got = run([args.bin, "detokenize", path] + (["--skip-special-tokens"] if skip else []), ids)
                for i, g in zip(ids, got):
                    decodes += 1
                    try:
                        want = tok.decode(i, skip_special_tokens=skip)
                    except BaseException:  # tokenizers panics on some chains (BPEDecoder of nothing)
                        continue
                    if want != g:
                        bad += 1
                        if bad <= 4:
                            print(f"DECODE {path} skip={skip} {[tok.id_to_token(k) for k in i]}\n"
                                  f"  tokenizers {want!r}\n  coserve    {g!r}")
    except RuntimeError as err:
        bad += 1
        print(f"ERROR {path}: {err}")
    if bad:
        failed += 1
    else:
        os.remove(path)
print(json.dumps({"seed": args.seed, "cases": args.cases, "cases_differing": failed, "encodes": encodes,
                  "decodes": decodes, "kept_in": workdir if failed else None}))
sys.exit(1 if failed else 0)
