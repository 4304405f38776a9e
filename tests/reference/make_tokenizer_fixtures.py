#!/usr/bin/env python3
"""Writes the tokenizer reference fixtures (tests/reference/fixtures/tokenizer/*.json).

Expected ids and decodes come from Hugging Face `tokenizers` (PyPI) run on the same tokenizer.json
files the C++ tests load. Also writes two synthetic tokenizer.json files trained here: one
byte-level BPE with `ignore_merges` (Llama-3 style) and one SentencePiece-style BPE with a
Metaspace pre-tokenizer and byte fallback.

Usage: python tests/reference/make_tokenizer_fixtures.py [--testdata ../shared/testdata]
Run from the project root. The encodings are deterministic, but the BPE trainer may break ties
differently from run to run, so the synthetic tokenizer files are always rewritten together with
the fixtures that refer to them: commit them together.
"""
import argparse
import json
import random
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Regex

OUT = Path(__file__).resolve().parent / "fixtures" / "tokenizer"

CORPUS = [
    "Hello world",
    "Hello, world! How are you doing today?",
    " leading space",
    "trailing space ",
    "   three leading spaces",
    "tabs\tand\tnewlines\nline two\r\nwindows line\n\n\nthree blank",
    "          ten spaces then text",
    "a" * 300,
    "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "1234567890 0.5 3.14159 1,000,000 2024-01-31 007 99999999999999",
    "x = [i**2 for i in range(10) if i % 2 == 0]\nprint(f\"{x!r:>10}\")",
    "int main(int argc, char** argv) {\n    return argc > 1 ? 0 : 1;\n}\n",
    "    def forward(self, x):\n        return self.linear(x)  # comment\n",
    "<html><body class=\"a\">&amp; &lt;tag&gt;</body></html>",
    "Ünïcödé façade naïve coöperate résumé",
    "Der schnelle braune Fuchs springt über den faulen Hund. Straße Größe",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "快速的棕色狐狸跳过了懒狗。我爱北京天安门。",
    "素早い茶色の狐がのろまな犬を飛び越える。カタカナとひらがな",
    "빠른 갈색 여우가 게으른 개를 뛰어넘는다.",
    "الثعلب البني السريع يقفز فوق الكلب الكسول",
    "השועל החום המהיר קופץ מעל הכלב העצלן",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है",
    "สุนัขจิ้งจอกสีน้ำตาลกระโดดข้ามสุนัขขี้เกียจ",
    "Tiếng Việt có dấu: Trường Đại học",
    "emoji 😀😃😄 👍🏽 🇫🇷 🇯🇵",
    "family 👨‍👩‍👧‍👦 and 🧑🏿‍🚀 and 🏳️‍🌈",
    "combining: e\u0301 a\u0308 n\u0303 \u1e9b\u0323 Z\u0351\u0358\u0362 ḁ̈",
    "decomposed cafe\u0301 vs composed café",
    "fullwidth ＡＢＣ １２３ ligature ﬁ ﬂ ① ㎞ ½",
    "zero\u200bwidth\u200cjoin\u200dnon\ufeffbom",
    "nbsp\u00a0here and\u3000ideographic space",
    "mixed: hello世界123abc!@#$%^&*()_+-=",
    "'s 't 're 've 'm 'll 'd 'S 'RE I'm you're THEY'LL",
    "!!!??? ... --- *** ___ ~~~ ```python\n```",
    "\n",
    " ",
    "",
    "\t\t\t",
    "A" * 50 + " " + "B" * 50,
    "https://example.com/path?query=1&b=two#frag user@example.org",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙 ∀x∈ℝ: x²≥0 ∑ ∫ √ ∞",
    "\u0000 control \u0001\u0002 chars \u007f",
    "case: İstanbul ΣΑΣ ǅ Ⅻ ẞ ＡＢ",
]

INVALID_UTF8 = [
    b"abc\xffdef",
    b"\xc3\x28 bad two-byte",
    b"truncated \xe2\x82",
    b"\xe2\x82\xac euro then bad \xf0\x9f\x98",
    b"\xed\xa0\x80 surrogate",
    b"\xc0\xaf overlong",
    b"\x80\x80\x80 lone continuation",
]


# Where Hugging Face's components differ from a plain reading: a first character NFKC expands,
# leading whitespace a normalizer strips, Oniguruma's word and space classes (superscripts,
# circled digits, marks, connector punctuation, U+180E), single_word next to them, inverted splits.
EDGE_TEXTS = ["\u00bd cup", "\u00bd4 and \u2460\u2461", "  leading spaces", "\n\tx", "x\u00b2+y\u00b3=\u00bc",
              "e\u0301te\u0301 na\u0308ive", "\u24b6\u203fb a_b", "\u01c5emal \u2160\u2161", "\u00a0nbsp\u180emvs",
              "magic\u2460 magic\u00b2 magic\u0301", "hello, world!! (x) [y] {z} $5 \u00a7 \u00bf?",
              "Magic Word, magic word", "lollipop hello", "xoxo exe"]


def random_texts(seed: int, n: int):
    rng = random.Random(seed)
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
              (0x900, 0x97F), (0x3040, 0x30FF), (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0x1F300, 0x1F64F),
              (0x300, 0x36F)]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            lo, hi = rng.choice(ranges)
            parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8))))
            parts.append(rng.choice(["", " ", "  ", "\n", "\t", " \n ", "0", "42", "   "]))
        out.append("".join(parts))
    return out


def special_texts(tok: Tokenizer):
    added = [t for t in tok.get_added_tokens_decoder().values() if t.content.strip()][:4]
    out = []
    for t in added:
        c = t.content
        out += [f"Hello{c}world", f"{c} starts", f"ends {c}", f"a {c} b {c}{c}\n{c}  c", f"{c}"]
    return out


def cases_for(tok: Tokenizer, texts):
    cases = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_special = tok.encode(text, add_special_tokens=True).ids
        cases.append({
            "text": text,
            "ids": ids,
            "ids_special": ids_special,
            "decode": tok.decode(ids_special, skip_special_tokens=False),
            "decode_skip": tok.decode(ids_special, skip_special_tokens=True),
        })
    return cases


def invalid_cases(tok: Tokenizer):
    return [{"hex": raw.hex(), "ids": tok.encode(raw.decode("utf-8", "replace"), add_special_tokens=False).ids}
            for raw in INVALID_UTF8]


def train_synthetic():
    """Two small tokenizers trained on the corpus; written next to the fixtures."""
    texts = CORPUS * 3 + random_texts(7, 200)
    # Llama-3 style: Split regex + ByteLevel(use_regex=False), ignore_merges.
    llama3_regex = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                    r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    bl = Tokenizer(models.BPE(ignore_merges=True))
    bl.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(llama3_regex), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    bl.decoder = decoders.ByteLevel()
    bl.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=1200, special_tokens=["<|begin_of_text|>", "<|eot_id|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    bl.post_processor = __import__("tokenizers").processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bl.token_to_id("<|begin_of_text|>"))])
    # Make sure ignore_merges matters: the model must keep it after training.
    data = json.loads(bl.to_str())
    data["model"]["ignore_merges"] = True
    (OUT / "synthetic-ignore-merges.tokenizer.json").write_text(json.dumps(data, ensure_ascii=False, indent=1))

    ms = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    ms.normalizer = normalizers.NFKC()
    ms.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)])
    ms.decoder = decoders.Sequence([decoders.Metaspace(replacement="\u2581", prepend_scheme="first"),
                                    decoders.ByteFallback(), decoders.Fuse()])
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    ms.train_from_iterator(CORPUS[:20] * 3, trainers.BpeTrainer(
        vocab_size=700, special_tokens=specials, show_progress=False, limit_alphabet=120))
    ms.add_tokens([__import__("tokenizers").AddedToken("<|tool|>", lstrip=True, rstrip=True, normalized=False),
                   __import__("tokenizers").AddedToken("magic", single_word=True, normalized=True)])
    ms.post_processor = __import__("tokenizers").processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", ms.token_to_id("<s>")), ("</s>", ms.token_to_id("</s>"))])
    (OUT / "synthetic-metaspace.tokenizer.json").write_text(ms.to_str(pretty=True))


def write_variants():
    """Component variants on the two trained models: normalizers, pre-tokenizers, decoders and
    post-processors the real files in testdata do not use (Lowercase, Strip, NFKD, regex Replace,
    Metaspace schemes, Whitespace, Digits, Split behaviours and invert, ByteLevel add_prefix_space,
    Sequence post-processors, Strip/Replace decoders). Returns their names."""
    base = json.loads((OUT / "synthetic-metaspace.tokenizer.json").read_text())
    bl = json.loads((OUT / "synthetic-ignore-merges.tokenizer.json").read_text())
    V = {}

    def var(name, src, **kw):
        j = json.loads(json.dumps(src))
        j.update(kw)
        V[name] = j

    var('ms_always_lower', base, normalizer={"type":"Sequence","normalizers":[{"type":"NFKD"},{"type":"Lowercase"},{"type":"Strip","strip_left":True,"strip_right":True}]},
        pre_tokenizer={"type":"Metaspace","replacement":"\u2581","prepend_scheme":"always","split":True})
    var('ms_never_nosplit', base, normalizer={"type":"NFC"}, pre_tokenizer={"type":"Metaspace","replacement":"\u2581","prepend_scheme":"never","split":False},
        decoder={"type":"Sequence","decoders":[{"type":"Metaspace","replacement":"\u2581","prepend_scheme":"never","split":False},{"type":"ByteFallback"},{"type":"Fuse"}]})
    var('ms_old_addprefix', base, pre_tokenizer={"type":"Metaspace","replacement":"\u2581","add_prefix_space":True}, decoder={"type":"Metaspace","replacement":"\u2581","add_prefix_space":True})
    var('ws_digits', base, normalizer={"type":"Replace","pattern":{"Regex":"\\s+"},"content":" "},
        pre_tokenizer={"type":"Sequence","pretokenizers":[{"type":"Whitespace"},{"type":"Digits","individual_digits":False}]}, decoder=None)
    var('split_behaviors', base, normalizer=None, pre_tokenizer={"type":"Sequence","pretokenizers":[
        {"type":"Split","pattern":{"String":" "},"behavior":"MergedWithPrevious","invert":False},
        {"type":"Split","pattern":{"Regex":"[,.!?]"},"behavior":"MergedWithNext","invert":False},
        {"type":"Split","pattern":{"Regex":"\\p{N}"},"behavior":"Contiguous","invert":False},
        {"type":"Split","pattern":{"Regex":"\\p{Han}+"},"behavior":"Removed","invert":True},
        {"type":"WhitespaceSplit"}]}, decoder={"type":"Sequence","decoders":[{"type":"Replace","pattern":{"Regex":"a+"},"content":"A"},{"type":"Strip","content":"A","start":2,"stop":1}]})
    var('bytelevel_prefix', bl, pre_tokenizer={"type":"ByteLevel","add_prefix_space":True,"trim_offsets":True,"use_regex":True},
        post_processor={"type":"Sequence","processors":[{"type":"ByteLevel","add_prefix_space":False,"trim_offsets":False,"use_regex":True},{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<|begin_of_text|>","type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"<|eot_id|>","type_id":0}}],"pair":[{"Sequence":{"id":"A","type_id":0}},{"Sequence":{"id":"B","type_id":1}}],"special_tokens":{"<|begin_of_text|>":{"id":"<|begin_of_text|>","ids":[0],"tokens":["<|begin_of_text|>"]},"<|eot_id|>":{"id":"<|eot_id|>","ids":[1],"tokens":["<|eot_id|>"]}}}]})
    var('bytelevel_nfkc_merged', bl, normalizer={"type":"NFKC"}, pre_tokenizer={"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":True},{"type":"ByteLevel","add_prefix_space":False,"trim_offsets":True,"use_regex":True}]})
    # The input's first character, as Hugging Face's alignments see it: Strip moving the start,
    # NFKC expanding it before a Digits split (prepend_scheme "first").
    var('strip_nfkc_first', base, normalizer={"type":"Sequence","normalizers":[{"type":"Strip","strip_left":True,"strip_right":False},{"type":"NFKC"}]},
        pre_tokenizer={"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":True},{"type":"Metaspace","replacement":"\u2581","prepend_scheme":"first","split":True}]})
    # Oniguruma's \w, \s and POSIX classes in Split patterns; the Rust regex \w of Whitespace.
    var('onig_classes', base, normalizer=None, pre_tokenizer={"type":"Sequence","pretokenizers":[
        {"type":"Split","pattern":{"Regex":"\\w+"},"behavior":"Isolated","invert":False},
        {"type":"Split","pattern":{"Regex":"[[:punct:]]|[[:alpha:]]{3}|\\s"},"behavior":"Isolated","invert":False},
        {"type":"Whitespace"},
        {"type":"Metaspace","replacement":"\u2581","prepend_scheme":"always","split":False}]})
    # Punctuation, BertPreTokenizer and CharDelimiterSplit; merged behaviours over an inverted pattern.
    var('punct_inverted', base, normalizer=None, pre_tokenizer={"type":"Sequence","pretokenizers":[
        {"type":"CharDelimiterSplit","delimiter":"x"},
        {"type":"Punctuation","behavior":"Contiguous"},
        {"type":"Split","pattern":{"String":"l"},"behavior":"MergedWithNext","invert":True},
        {"type":"Split","pattern":{"String":"o"},"behavior":"MergedWithPrevious","invert":True},
        {"type":"Split","pattern":{"String":"e"},"behavior":"Contiguous","invert":True},
        {"type":"Metaspace","replacement":"\u2581","prepend_scheme":"always","split":False}]})
    var('bert_pre', base, normalizer={"type":"Lowercase"}, pre_tokenizer={"type":"Sequence","pretokenizers":[
        {"type":"BertPreTokenizer"},
        {"type":"Metaspace","replacement":"\u2581","prepend_scheme":"always","split":False}]})
    # A normalized added token whose normal form differs decodes as that form (tokenizers 0.23+).
    legacy = json.loads(json.dumps(base))
    legacy["added_tokens"] = legacy["added_tokens"] + [
        {"id":max(list(legacy["model"]["vocab"].values()) + [a["id"] for a in legacy["added_tokens"]]) + 1,"content":"Magic Word","single_word":False,"lstrip":False,"rstrip":False,"normalized":True,"special":False}]
    var('legacy_added_normalized', legacy, normalizer={"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"\u2581"},{"type":"Replace","pattern":{"String":" "},"content":"\u2581"},{"type":"Lowercase"}]},
        pre_tokenizer=None, decoder={"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"\u2581"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]})
    names = []
    for k, j in V.items():
        name = "variant-" + k.replace("_", "-")
        (OUT / f"{name}.tokenizer.json").write_text(json.dumps(j, ensure_ascii=False))
        names.append(name)
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--testdata", default="../shared/testdata")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    train_synthetic()
    sources = {name: Path(args.testdata) / "tokenizers" / name / "tokenizer.json"
               for name in ["gpt2", "qwen2", "qwen2.5", "phi-3-mini", "phi-2", "roberta-base"]}
    sources["synthetic-ignore-merges"] = OUT / "synthetic-ignore-merges.tokenizer.json"
    sources["synthetic-metaspace"] = OUT / "synthetic-metaspace.tokenizer.json"
    for name in write_variants():
        sources[name] = OUT / f"{name}.tokenizer.json"
    for i, (name, path) in enumerate(sources.items()):
        tok = Tokenizer.from_file(str(path))
        extra = ["magic word, magicword, a magic", "x <|tool|>  y\n<|tool|>z"] if name == "synthetic-metaspace" else []
        if name.startswith("variant-") or name.startswith("synthetic-"):
            extra += EDGE_TEXTS
        n_random = 10 if name.startswith("variant-") else 25
        texts = CORPUS + special_texts(tok) + extra + random_texts(100 + i, n_random)
        fixture = {
            "tokenizer": name,
            "generated_by": "tests/reference/make_tokenizer_fixtures.py with tokenizers "
                            + __import__("tokenizers").__version__,
            "cases": cases_for(tok, texts),
            "invalid_utf8": invalid_cases(tok),
        }
        (OUT / f"{name}.json").write_text(json.dumps(fixture, ensure_ascii=False, indent=None, separators=(",", ":")))
        print(name, len(fixture["cases"]), "cases")


if __name__ == "__main__":
    main()
