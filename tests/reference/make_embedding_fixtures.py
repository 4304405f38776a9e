#!/usr/bin/env python3
"""Writes the embedding and cross-encoder reference fixtures (tests/reference/fixtures/embedding/):
tiny random encoder models as sentence-transformers folders, with the vectors and scores that
sentence-transformers (and transformers) compute for them.

Each fixture folder is a model folder the server loads as it is (config.json, model.safetensors,
tokenizer.json, modules.json and the modules' configs), plus expected.json:
  - embedding models: {"texts": [...], "ids": [[...]], "embeddings": [[...]]} from
    SentenceTransformer.encode over all texts in one batch (mixed lengths, padded there);
  - cross-encoders: {"pairs": [[q, d]], "ids", "token_type_ids", "logits" (the model's raw
    outputs), "scores" (CrossEncoder.predict: a sigmoid over one label)}.

The tokenizers are the synthetic WordPiece (BERT-style) and Unigram (XLM-RoBERTa-style) ones of
tests/reference/fixtures/tokenizer/ (make_tokenizer_fixtures.py). Weights are random (seeded) and
stored in float32, except where a fixture says bf16 (stored in bfloat16, the reference then
computing in float32 from the same rounded values).

usage: make_embedding_fixtures.py [--only NAME ...]
needs: torch, transformers, sentence-transformers, tokenizers (PyPI); run from the project root.
"""
import argparse
import json
import shutil
import tempfile
from pathlib import Path

import torch
from sentence_transformers import CrossEncoder, SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
from transformers import (AutoConfig, AutoModel, AutoModelForSequenceClassification,
                          PreTrainedTokenizerFast)

ROOT = Path(__file__).resolve().parent
OUT = ROOT / "fixtures" / "embedding"
TOKENIZERS = ROOT / "fixtures" / "tokenizer"

TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "a",
    "Embeddings map text to vectors; similar meanings land close together.",
    "naïve café — déjà vu, 42 times",
    "tabs\tand\nnewlines  and   spaces",
]

PAIRS = [
    ["what is a fox?", "The quick brown fox jumps over the lazy dog."],
    ["what is a fox?", "Embeddings map text to vectors."],
    ["capital of France", "Paris is the capital and largest city of France."],
    ["capital of France", "a"],
]

# BERT's tokenizers hand the model token type ids (a pair's second text: 1); XLM-R's do not.
WORDPIECE = dict(tokenizer="synthetic-wordpiece", unk="[UNK]", cls="[CLS]", sep="[SEP]",
                 pad="[PAD]", mask="[MASK]", types=True)
UNIGRAM = dict(tokenizer="synthetic-unigram", unk="<unk>", cls="<s>", sep="</s>", pad="<unk>",
               mask=None, bos="<s>", eos="</s>")

# A byte-level BPE (Llama-3 style) for the decoder.
BYTE_BPE = dict(tokenizer="synthetic-ignore-merges", unk=None, cls=None, sep=None, pad="<|eot_id|>", mask=None)

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)

FIXTURES = {
    # BERT, mean pooling and Normalize as current sentence-transformers releases write them.
    "bert-mean-normalize": dict(kind="embed", tok=WORDPIECE, seed=31, pooling="mean",
                                normalize=True, config=dict(model_type="bert", **SMALL,
                                                            max_position_embeddings=64)),
    # BERT with the tanh GELU, first-token pooling, no Normalize, the classic modules.json layout
    # (sentence_transformers.models.*, pooling_mode_* flags), bf16 weights, three token types.
    "bert-cls-classic-bf16": dict(kind="embed", tok=WORDPIECE, seed=32, pooling="cls",
                                  normalize=False, classic=True, bf16=True,
                                  config=dict(model_type="bert", hidden_act="gelu_new",
                                              type_vocab_size=3, **SMALL,
                                              max_position_embeddings=64)),
    # XLM-RoBERTa (positions from pad_token_id + 1), last-token pooling and Normalize, and
    # sentence_bert_config.json's max_seq_length below the position table.
    "xlmr-last-normalize": dict(kind="embed", tok=UNIGRAM, seed=33, pooling="lasttoken",
                                normalize=True, max_seq_length=60,
                                config=dict(model_type="xlm-roberta", pad_token_id=3,
                                            type_vocab_size=1, **SMALL,
                                            max_position_embeddings=68)),
    # A decoder embedding model as Qwen3-Embedding is one: a Qwen3 base model's checkpoint (tensors
    # without "model.", no lm_head) under Qwen3ForCausalLM, last-token pooling and Normalize.
    "qwen3-last-normalize": dict(kind="embed", tok=BYTE_BPE, seed=36, pooling="lasttoken",
                                 normalize=True, architecture="Qwen3ForCausalLM",
                                 config=dict(model_type="qwen3", hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                             intermediate_size=64, max_position_embeddings=128,
                                             tie_word_embeddings=True, rope_theta=10000.0)),
    # Cross-encoders with one label: BERT (pooler + classifier) and XLM-R (classifier.dense +
    # out_proj).
    "bert-cross-encoder": dict(kind="score", tok=WORDPIECE, seed=34,
                               config=dict(model_type="bert", num_labels=1, **SMALL,
                                           max_position_embeddings=64)),
    "xlmr-cross-encoder": dict(kind="score", tok=UNIGRAM, seed=35,
                               config=dict(model_type="xlm-roberta", pad_token_id=3,
                                           type_vocab_size=1, num_labels=1, **SMALL,
                                           max_position_embeddings=68)),
}


def hf_tokenizer(tok):
    kw = {k + "_token": v for k, v in tok.items() if k not in ("tokenizer", "types") and v is not None}
    names = ["input_ids", "token_type_ids", "attention_mask"] if tok.get("types") else \
        ["input_ids", "attention_mask"]
    return PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZERS / (tok["tokenizer"] + ".tokenizer.json")),
                                   model_input_names=names, **kw)


def make_hf_model(name, spec, folder):
    tok = hf_tokenizer(spec["tok"])
    cfg = dict(spec["config"])
    vocab = len(tok)
    cfg["vocab_size"] = vocab
    model_type = cfg.pop("model_type")
    num_labels = cfg.pop("num_labels", None)
    config = AutoConfig.for_model(model_type, **cfg)
    torch.manual_seed(spec["seed"])
    if num_labels is not None:
        config.num_labels = num_labels
        model = AutoModelForSequenceClassification.from_config(config)
    else:
        model = AutoModel.from_config(config)
    # Spread the weights wider than the init's 0.02 so the layers move the vectors visibly.
    # A cross-encoder's head is scaled up too, so that its scores differ from pair to pair by more
    # than the comparison's tolerance.
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() >= 1:
                p.add_(torch.randn_like(p) * 0.05)
            if "classifier" in pname or "pooler" in pname:
                p.mul_(8.0)
    if spec.get("bf16"):
        model = model.to(torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return tok


def write_classic_modules(folder, pooling):
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules, indent=2))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    flags = {"word_embedding_dimension": 32, "pooling_mode_cls_token": pooling == "cls",
             "pooling_mode_mean_tokens": pooling == "mean", "pooling_mode_max_tokens": False,
             "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
             "pooling_mode_lasttoken": pooling == "lasttoken"}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(flags, indent=2))
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": 64, "do_lower_case": False}, indent=2))


def make_embedding(name, spec, folder):
    with tempfile.TemporaryDirectory() as tmp:
        tok = make_hf_model(name, spec, tmp)
        t = Transformer(tmp, max_seq_length=spec.get("max_seq_length", 64),
                        model_kwargs={"dtype": torch.float32})
        mods = [t, Pooling(t.get_embedding_dimension(), pooling_mode=spec["pooling"])]
        if spec["normalize"]:
            mods.append(Normalize())
        st = SentenceTransformer(modules=mods, device="cpu")
        st.save(str(folder))
        if spec.get("bf16"):  # the saved copy went through float32: keep the bf16 originals
            for f in ("model.safetensors", "config.json"):
                shutil.copy(Path(tmp) / f, folder / f)
    if spec.get("architecture"):
        cfg = json.loads((folder / "config.json").read_text())
        cfg["architectures"] = [spec["architecture"]]
        (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    if spec.get("classic"):
        write_classic_modules(folder, spec["pooling"])
    # Reload from the folder as a user would, and encode the texts in one batch.
    st = SentenceTransformer(str(folder), device="cpu", model_kwargs={"dtype": torch.float32})
    with torch.no_grad():
        emb = st.encode(TEXTS, batch_size=len(TEXTS), convert_to_numpy=True)
    ids = [tok(t)["input_ids"] for t in TEXTS]
    return {"model": name, "pooling": spec["pooling"], "normalize": spec["normalize"],
            "max_seq_length": st.max_seq_length,
            "texts": TEXTS, "ids": ids, "embeddings": [[float(x) for x in v] for v in emb]}


def make_score(name, spec, folder):
    tok = make_hf_model(name, spec, folder)
    ce = CrossEncoder(str(folder), device="cpu", model_kwargs={"dtype": torch.float32})
    with torch.no_grad():
        scores = ce.predict(PAIRS, batch_size=len(PAIRS), convert_to_numpy=True)
        model = AutoModelForSequenceClassification.from_pretrained(folder, dtype=torch.float32)
        model.eval()
        enc = tok([p[0] for p in PAIRS], [p[1] for p in PAIRS], padding=True, return_tensors="pt")
        logits = model(**enc).logits
    ids, types = [], []
    for q, d in PAIRS:
        e = tok(q, d)
        ids.append(e["input_ids"])
        types.append(e.get("token_type_ids", [0] * len(e["input_ids"])))
    return {"model": name, "pairs": PAIRS, "ids": ids, "token_type_ids": types,
            "logits": [[float(x) for x in row] for row in logits],
            "scores": [float(s) for s in scores]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for name, spec in FIXTURES.items():
        if args.only and name not in args.only:
            continue
        folder = OUT / name
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        expected = make_embedding(name, spec, folder) if spec["kind"] == "embed" else \
            make_score(name, spec, folder)
        for junk in ("README.md",):
            (folder / junk).unlink(missing_ok=True)
        (folder / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False))
        print(f"{name}: {folder}")


if __name__ == "__main__":
    main()
