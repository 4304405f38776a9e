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

# Lengths the cross-encoders' pairs are truncated to (longest_first): the first cuts the longer
# text of most pairs, the second both texts of the longest ones.
TRUNCATE_PAIRS_TO = [14, 8]

# BERT's tokenizers hand the model token type ids (a pair's second text: 1); XLM-R's do not.
WORDPIECE = dict(tokenizer="synthetic-wordpiece", unk="[UNK]", cls="[CLS]", sep="[SEP]",
                 pad="[PAD]", mask="[MASK]", types=True)
UNIGRAM = dict(tokenizer="synthetic-unigram", unk="<unk>", cls="<s>", sep="</s>", pad="<unk>",
               mask=None, bos="<s>", eos="</s>")

# A byte-level BPE (Llama-3 style) for the decoder.
BYTE_BPE = dict(tokenizer="synthetic-ignore-merges", unk=None, cls=None, sep=None, pad="<|eot_id|>", mask=None)

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
DECODER = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
               head_dim=16, intermediate_size=64, max_position_embeddings=512, rope_theta=10000.0)

# Qwen3-Reranker's prompt as its model card formats it (prefix, instruction, query, document,
# suffix); examples/score-templates/qwen3_reranker.jinja renders the same text.
QWEN3_RERANKER_INSTRUCTION = \
    "Given a web search query, retrieve relevant passages that answer the query"


def qwen3_reranker_prompt(query, doc):
    prefix = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the "
              "Query and the Instruct provided. Note that the answer can only be \"yes\" or "
              "\"no\".<|im_end|>\n<|im_start|>user\n")
    suffix = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    return prefix + (f"<Instruct>: {QWEN3_RERANKER_INSTRUCTION}\n<Query>: {query}\n"
                     f"<Document>: {doc}") + suffix

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
                                normalize=True, max_seq_length=60, lowercased=True,
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
    # Decoder rerankers. A Qwen3ForSequenceClassification checkpoint (a `score` head of one label,
    # as tomaarsen/Qwen3-Reranker-0.6B-seq-cls ships it), each pair's texts joined into one prompt
    # as vLLM encodes them for a decoder; and a Qwen3ForCausalLM checkpoint read as Qwen3-Reranker
    # is, by the softmax of two tokens' logits at the last position (the model card's
    # compute_logits) over its prompt template. The synthetic vocabulary has no "yes" / "no"
    # tokens: "y" and "n" stand in for them.
    "qwen3-seq-cls-reranker": dict(kind="decoder-score", tok=BYTE_BPE, seed=37,
                                   config=dict(model_type="qwen3", num_labels=1, **DECODER)),
    "qwen3-yes-no-reranker": dict(kind="decoder-yes-no", tok=BYTE_BPE, seed=38,
                                  tokens=["n", "y"],
                                  config=dict(model_type="qwen3", **DECODER,
                                              tie_word_embeddings=False)),
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


def spread_weights(model, heads):
    """Spreads the weights wider than the init's 0.02 so the layers move the vectors visibly, and
    scales up the parameters whose names hold one of `heads`, so that scores differ from pair to
    pair by more than the comparison's tolerance."""
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() >= 1:
                p.add_(torch.randn_like(p) * 0.05)
            if any(h in pname for h in heads):
                p.mul_(8.0)


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
    spread_weights(model, ("classifier", "pooler"))
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
    out = {"model": name, "pooling": spec["pooling"], "normalize": spec["normalize"],
           "max_seq_length": st.max_seq_length,
           "texts": TEXTS, "ids": ids, "embeddings": [[float(x) for x in v] for v in emb]}
    if spec.get("lowercased"):
        # What a folder whose sentence_bert_config.json sets do_lower_case computes:
        # sentence-transformers (the releases that write the field) lowercases each text with
        # str.lower() before tokenizing it.
        with torch.no_grad():
            low = st.encode([t.lower() for t in TEXTS], batch_size=len(TEXTS), convert_to_numpy=True)
        out["lowercased"] = {"ids": [tok(t.lower())["input_ids"] for t in TEXTS],
                             "embeddings": [[float(x) for x in v] for v in low]}
    return out


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
    out = {"model": name, "pairs": PAIRS, "ids": ids, "token_type_ids": types,
           "logits": [[float(x) for x in row] for row in logits],
           "scores": [float(s) for s in scores]}
    # Truncated pairs: the tokenizer's longest_first to max_length ids (the template's included), as
    # a CrossEncoder with that max_length reads them.
    out["truncated"] = []
    for max_length in TRUNCATE_PAIRS_TO:
        short = CrossEncoder(str(folder), device="cpu", max_length=max_length,
                             model_kwargs={"dtype": torch.float32})
        with torch.no_grad():
            s = short.predict(PAIRS, batch_size=len(PAIRS), convert_to_numpy=True)
        t_ids = [tok(q, d, truncation="longest_first", max_length=max_length)["input_ids"]
                 for q, d in PAIRS]
        out["truncated"].append({"max_length": max_length, "ids": t_ids,
                                 "scores": [float(x) for x in s]})
    return out


def make_decoder_model(spec, folder, cls):
    tok = hf_tokenizer(spec["tok"])
    cfg = dict(spec["config"])
    cfg["vocab_size"] = len(tok)
    cfg["pad_token_id"] = tok.pad_token_id
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    torch.manual_seed(spec["seed"])
    model = cls.from_config(config)
    spread_weights(model, ("score", "lm_head"))
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    model.eval()
    return tok, model


def make_decoder_score(name, spec, folder):
    """A decoder sequence classifier: transformers' logits for each pair's joined texts, one
    pair at a time and in one padded batch (the head reads the last non-pad token)."""
    tok, model = make_decoder_model(spec, folder, AutoModelForSequenceClassification)
    texts = [q + d for q, d in PAIRS]
    ids = [tok(t)["input_ids"] for t in texts]
    with torch.no_grad():
        one = [model(input_ids=torch.tensor([i])).logits[0] for i in ids]
        enc = tok(texts, padding=True, return_tensors="pt")
        batch = model(**enc).logits
    assert torch.allclose(torch.stack(one), batch, atol=1e-5)
    return {"model": name, "pairs": PAIRS, "texts": texts, "ids": ids,
            "logits": [[float(x) for x in row] for row in one],
            "scores": [float(torch.sigmoid(row[0])) for row in one]}


def make_decoder_yes_no(name, spec, folder):
    """A language model scoring by two tokens' logits at the last position: p = softmax([logit
    of the first token, logit of the second])[1], over the model card's prompt."""
    from transformers import AutoModelForCausalLM
    tok, model = make_decoder_model(spec, folder, AutoModelForCausalLM)
    false_id, true_id = (tok.convert_tokens_to_ids(t) for t in spec["tokens"])
    prompts = [qwen3_reranker_prompt(q, d) for q, d in PAIRS]
    ids = [tok(p)["input_ids"] for p in prompts]
    scores = []
    with torch.no_grad():
        for i in ids:
            last = model(input_ids=torch.tensor([i])).logits[0, -1]
            pair = torch.stack([last[false_id], last[true_id]])
            scores.append(float(torch.softmax(pair, dim=0)[1]))
    return {"model": name, "pairs": PAIRS, "prompts": prompts, "ids": ids,
            "classifier_from_token": spec["tokens"], "token_ids": [false_id, true_id],
            "scores": scores}


MAKERS = {"embed": make_embedding, "score": make_score, "decoder-score": make_decoder_score,
          "decoder-yes-no": make_decoder_yes_no}


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
        expected = MAKERS[spec["kind"]](name, spec, folder)
        for junk in ("README.md",):
            (folder / junk).unlink(missing_ok=True)
        (folder / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False))
        print(f"{name}: {folder}")


if __name__ == "__main__":
    main()
