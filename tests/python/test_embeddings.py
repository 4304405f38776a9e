"""Embedding, score and rerank routes over real HTTP, against sentence-transformers' numbers.

The servers load the fixture folders of tests/reference/fixtures/embedding/ (tiny random BERT and
XLM-R encoders saved by sentence-transformers, with the vectors and cross-encoder scores it
computed: tests/reference/make_embedding_fixtures.py). The official openai client asks for
embeddings as floats and as base64; score and rerank are plain HTTP, as their clients send them.
"""
import base64
import json
import math
import os
import struct

import httpx
import numpy as np
import openai
import pytest

from conftest import Server, metric_value

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference", "fixtures", "embedding")


def fixture(name):
    with open(os.path.join(FIXTURES, name, "expected.json")) as f:
        return json.load(f)


def cosine(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def bert():
    s = Server(model=os.path.join(FIXTURES, "bert-mean-normalize"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def cross():
    s = Server(model=os.path.join(FIXTURES, "bert-cross-encoder"))
    yield s
    s.stop()


@pytest.mark.parametrize("name,args", [("bert-mean-normalize", ()), ("bert-cls-classic-bf16", ()),
                                       ("xlmr-last-normalize", ()),
                                       # A decoder (Qwen3-Embedding's layout), its prompts chunked
                                       # over several steps.
                                       ("qwen3-last-normalize", ("--task", "embed", "--max-num-batched-tokens", "16"))])
def test_openai_client_embeddings_equal_sentence_transformers(name, args):
    exp = fixture(name)
    s = Server(*args, model=os.path.join(FIXTURES, name))
    try:
        c = s.client()
        r = c.embeddings.create(model=s.model, input=exp["texts"], encoding_format="float")
        assert [d.index for d in r.data] == list(range(len(exp["texts"])))
        for got, want in zip(r.data, exp["embeddings"]):
            assert len(got.embedding) == len(want)
            assert cosine(got.embedding, want) >= 0.99999
        assert r.usage.prompt_tokens == sum(len(ids) for ids in exp["ids"])
        assert r.usage.total_tokens == r.usage.prompt_tokens
        # The client's default asks for base64 and decodes float32 bytes: the same vectors.
        b = c.embeddings.create(model=s.model, input=exp["texts"][1])
        assert np.allclose(b.data[0].embedding, r.data[1].embedding, atol=1e-7)
        # Token ids in, as the tokenizer made them.
        t = c.embeddings.create(model=s.model, input=exp["ids"], encoding_format="float")
        for got, want in zip(t.data, exp["embeddings"]):
            assert cosine(got.embedding, want) >= 0.99999
    finally:
        s.stop()


def test_base64_is_little_endian_float32(bert):
    exp = fixture("bert-mean-normalize")
    r = httpx.post(bert.url + "/v1/embeddings", json={"input": exp["texts"][0], "encoding_format": "base64"})
    assert r.status_code == 200, r.text
    raw = base64.b64decode(r.json()["data"][0]["embedding"])
    vec = struct.unpack("<%df" % (len(raw) // 4), raw)
    assert cosine(vec, exp["embeddings"][0]) >= 0.99999


def test_embedding_bad_inputs_are_400s_and_lose_nothing(bert):
    c = bert.client()
    cases = [
        ({"input": []}, "input"),
        ({"input": [[]]}, "input"),
        ({"input": [1, "a"]}, "input"),
        ({"input": ["a", 1]}, "input"),
        ({"input": [5, 100000]}, "input"),
        ({"input": 3}, "input"),
        ({}, "input"),
        ({"input": "a", "encoding_format": "hex"}, "encoding_format"),
        ({"input": "a", "dimensions": 8}, "dimensions"),  # not a Matryoshka model
        ({"input": "a", "dimensions": 0}, "dimensions"),
        ({"input": "a", "truncate_prompt_tokens": -2}, "truncate_prompt_tokens"),
        ({"input": "word " * 200}, "input"),  # longer than max_model_len, no truncation
        ({"input": ["a"] * 2049}, "input"),
    ]
    for body, param in cases:
        r = httpx.post(bert.url + "/v1/embeddings", json=body, timeout=60)
        assert r.status_code == 400, (body, r.text)
        err = r.json()["error"]
        assert err["type"] == "BadRequestError" and err["param"] == param, (body, err)
    r = httpx.post(bert.url + "/v1/embeddings", json={"input": "a", "model": "nope"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = httpx.post(bert.url + "/v1/embeddings", content=b"{not json")
    assert r.status_code == 400
    with pytest.raises(openai.BadRequestError) as e:
        c.embeddings.create(model=bert.model, input="word " * 200)
    assert "maximum context length is 64 tokens" in str(e.value)
    # Truncated to the last 64 tokens, the same text is accepted.
    ok = httpx.post(bert.url + "/v1/embeddings", json={"input": "word " * 200, "truncate_prompt_tokens": 64})
    assert ok.status_code == 200 and ok.json()["usage"]["prompt_tokens"] == 64
    # A generation request on an embedding model says what the model does.
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=bert.model, prompt="hi", max_tokens=2)
    assert "/v1/embeddings" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model=bert.model, messages=[{"role": "user", "content": "hi"}])
    # Nothing leaked: every request ended, no KV block held, and the server still answers.
    m = httpx.get(bert.url + "/metrics").text
    assert metric_value(m, "coserve_num_requests_open") == 0
    assert metric_value(m, "coserve_kv_cache_usage_perc") == 0
    assert c.embeddings.create(model=bert.model, input="still here").data[0].embedding


def test_many_concurrent_inputs_in_one_request(bert):
    """Inputs of one request and of concurrent requests batch together; each vector is its own."""
    import concurrent.futures
    exp = fixture("bert-mean-normalize")
    texts = exp["texts"] * 20

    def one(i):
        r = httpx.post(bert.url + "/v1/embeddings", json={"input": texts[i:] + texts[:i], "encoding_format": "float"},
                       timeout=120)
        assert r.status_code == 200, r.text
        data = r.json()["data"]
        for k, d in enumerate(data):
            want = exp["embeddings"][(k + i) % len(exp["texts"])]
            assert cosine(d["embedding"], want) >= 0.99999

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(8)))


def test_score_and_rerank_with_a_cross_encoder(cross):
    exp = fixture("bert-cross-encoder")
    pairs = exp["pairs"]
    r = httpx.post(cross.url + "/v1/score", json={"text_1": [p[0] for p in pairs], "text_2": [p[1] for p in pairs]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and len(body["data"]) == len(pairs)
    for d, want in zip(body["data"], exp["scores"]):
        assert d["object"] == "score" and abs(d["score"] - want) < 1e-4
    assert body["usage"]["prompt_tokens"] == sum(len(ids) for ids in exp["ids"])
    # One text_1 against several text_2.
    q = pairs[0][0]
    docs = [p[1] for p in pairs if p[0] == q]
    one = httpx.post(cross.url + "/v1/score", json={"text_1": q, "text_2": docs}).json()
    assert [abs(d["score"] - w) < 1e-4 for d, w in zip(one["data"], exp["scores"])] == [True] * len(docs)
    # Rerank: the documents by decreasing score, top_n of them, with or without their text.
    q2 = pairs[2][0]
    docs2 = [p[1] for p in pairs if p[0] == q2]
    want = [exp["scores"][i] for i, p in enumerate(pairs) if p[0] == q2]
    for path in ["/v1/rerank", "/v2/rerank"]:
        rr = httpx.post(cross.url + path, json={"query": q2, "documents": docs2, "top_n": 1})
        assert rr.status_code == 200, rr.text
        res = rr.json()["results"]
        best = max(range(len(want)), key=lambda i: want[i])
        assert len(res) == 1 and res[0]["index"] == best
        assert abs(res[0]["relevance_score"] - want[best]) < 1e-4
        assert res[0]["document"]["text"] == docs2[best]
    rr = httpx.post(cross.url + "/v1/rerank", json={"query": q2, "documents": [{"text": d} for d in docs2],
                                                    "return_documents": False}).json()
    assert [x["index"] for x in rr["results"]] == sorted(range(len(want)), key=lambda i: -want[i])
    assert all("document" not in x for x in rr["results"])
    # Bad inputs, and the embedding route on a cross-encoder.
    for path, body, param in [("/v1/score", {"text_1": ["a", "b"], "text_2": ["c"]}, "text_1"),
                              ("/v1/score", {"text_1": "a"}, "text_2"),
                              ("/v1/rerank", {"query": "a", "documents": []}, "documents"),
                              ("/v1/rerank", {"query": "a", "documents": [3]}, "documents"),
                              ("/v1/rerank", {"documents": ["a"]}, "query"),
                              ("/v1/rerank", {"query": "a", "documents": ["b"], "top_n": -1}, "top_n"),
                              ("/v1/embeddings", {"input": "a"}, "model")]:
        r = httpx.post(cross.url + path, json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, (path, body, r.text)


def test_score_by_cosine_with_an_embedding_model(bert):
    exp = fixture("bert-mean-normalize")
    t = exp["texts"]
    r = httpx.post(bert.url + "/v1/score", json={"text_1": t[0], "text_2": [t[1], t[0]]})
    assert r.status_code == 200, r.text
    s = [d["score"] for d in r.json()["data"]]
    assert abs(s[0] - cosine(exp["embeddings"][0], exp["embeddings"][1])) < 1e-5
    assert abs(s[1] - 1.0) < 1e-5


def test_pooling_routes_on_a_generation_model_say_what_it_serves(server):
    for path, body in [("/v1/embeddings", {"input": "hi"}), ("/v1/score", {"text_1": "a", "text_2": "b"}),
                       ("/v1/rerank", {"query": "a", "documents": ["b"]})]:
        r = httpx.post(server.url + path, json=body)
        assert r.status_code == 400, r.text
        assert "generate" in r.json()["error"]["message"]


def test_decoder_embedding_model_serves_embeddings_only():
    exp = fixture("qwen3-last-normalize")
    s = Server("--task", "embed", model=os.path.join(FIXTURES, "qwen3-last-normalize"))
    try:
        c = s.client()
        with pytest.raises(openai.BadRequestError) as e:
            c.completions.create(model=s.model, prompt="hi", max_tokens=2)
        assert "task 'embed'" in str(e.value)
        # Cosine scores from its vectors; the same prompt twice (the second from the prefix cache
        # but its last token) gives the same vector.
        r = httpx.post(s.url + "/v1/score", json={"text_1": exp["texts"][1], "text_2": exp["texts"][1:3]})
        assert r.status_code == 200, r.text
        got = [d["score"] for d in r.json()["data"]]
        assert abs(got[0] - 1.0) < 1e-5
        # (the bf16 KV cache, the default, moves each vector by ~1e-5 of cosine)
        assert abs(got[1] - cosine(exp["embeddings"][1], exp["embeddings"][2])) < 1e-3
        with pytest.raises(openai.BadRequestError):
            c.embeddings.create(model=s.model, input="x", dimensions=4)  # not Matryoshka
    finally:
        s.stop()


def test_task_flag_is_checked_at_start(coserve_bin):
    import subprocess
    for model, task in [(os.path.join(FIXTURES, "bert-mean-normalize"), "generate"),
                        (os.path.join(FIXTURES, "bert-cross-encoder"), "embed")]:
        p = subprocess.run([coserve_bin, "serve", model, "--port", "0", "--task", task],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode != 0 and "--task " + task in p.stderr, p.stderr
    p = subprocess.run([coserve_bin, "serve", "--demo", "--port", "0", "--task", "score"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "--task score" in p.stderr, p.stderr
    p = subprocess.run([coserve_bin, "serve", os.path.join(FIXTURES, "xlmr-last-normalize"), "--port", "0",
                        "--device", "cuda"], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "CPU executor" in p.stderr, p.stderr


ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
QWEN3_RERANKER_TEMPLATE = os.path.join(ROOT, "examples", "score-templates", "qwen3_reranker.jinja")
# How vLLM reads Qwen3-Reranker's checkpoint (a language model) as a reranker; the fixture's
# vocabulary has "n" and "y" where the real one has "no" and "yes".
YES_NO_OVERRIDES = json.dumps({"architectures": ["Qwen3ForSequenceClassification"],
                               "classifier_from_token": ["n", "y"], "is_original_qwen3_reranker": True})


def check_scores(s, exp):
    pairs = exp["pairs"]
    r = httpx.post(s.url + "/v1/score", json={"text_1": [p[0] for p in pairs], "text_2": [p[1] for p in pairs]})
    assert r.status_code == 200, r.text
    got = [d["score"] for d in r.json()["data"]]
    assert max(abs(g - w) for g, w in zip(got, exp["scores"])) < 1e-4, (got, exp["scores"])
    # The prompts are the reference's token for token.
    assert r.json()["usage"]["prompt_tokens"] == sum(len(ids) for ids in exp["ids"])
    q = pairs[2][0]
    docs = [p[1] for p in pairs if p[0] == q]
    want = [exp["scores"][i] for i, p in enumerate(pairs) if p[0] == q]
    rr = httpx.post(s.url + "/v1/rerank", json={"query": q, "documents": docs})
    assert rr.status_code == 200, rr.text
    res = rr.json()["results"]
    assert [x["index"] for x in res] == sorted(range(len(want)), key=lambda i: -want[i])
    assert all(abs(x["relevance_score"] - want[x["index"]]) < 1e-4 for x in res)


def test_decoder_sequence_classifier_scores_equal_transformers():
    """Qwen3ForSequenceClassification: the score head on the last token of each pair's joined
    texts, prompts chunked over 16-token steps."""
    exp = fixture("qwen3-seq-cls-reranker")
    s = Server("--kv-cache-dtype", "fp32", "--max-num-batched-tokens", "16",
               model=os.path.join(FIXTURES, "qwen3-seq-cls-reranker"))
    try:
        assert any("sequence classifier Qwen3ForSequenceClassification: 1 label from score.weight" in l
                   for l in s.log), "".join(s.log)
        check_scores(s, exp)
        c = s.client()
        with pytest.raises(openai.BadRequestError) as e:
            c.embeddings.create(model=s.model, input="x")
        assert "task 'score'" in str(e.value)
        with pytest.raises(openai.BadRequestError) as e:
            c.completions.create(model=s.model, prompt="hi", max_tokens=2)
        assert "task 'score'" in str(e.value)
        # A pair longer than the context, without truncation: a 400 naming the field.
        r = httpx.post(s.url + "/v1/score", json={"text_1": "word " * 600, "text_2": "x"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "text_1", r.text
        assert metric_value(httpx.get(s.url + "/metrics").text, "coserve_num_requests_open") == 0
    finally:
        s.stop()


def test_language_model_read_as_yes_no_reranker_with_a_score_template():
    """Qwen3-Reranker's way: --hf-overrides reads a causal checkpoint as a classifier whose one
    label is the second token's LM-head row minus the first's; --chat-template renders the model
    card's prompt around each (query, document). Scores equal softmax([no, yes])[yes] of
    transformers' logits over the card's prompt."""
    exp = fixture("qwen3-yes-no-reranker")
    s = Server("--hf-overrides", YES_NO_OVERRIDES, "--chat-template", QWEN3_RERANKER_TEMPLATE,
               "--kv-cache-dtype", "fp32", model=os.path.join(FIXTURES, "qwen3-yes-no-reranker"))
    try:
        ids = exp["token_ids"]
        assert any(f"'n' ({ids[0]}), 'y' ({ids[1]}), second minus first" in l for l in s.log), "".join(s.log)
        check_scores(s, exp)
        # The default bf16 KV cache stays close.
    finally:
        s.stop()
    s = Server("--hf-overrides", YES_NO_OVERRIDES, "--chat-template", QWEN3_RERANKER_TEMPLATE,
               model=os.path.join(FIXTURES, "qwen3-yes-no-reranker"))
    try:
        pairs = exp["pairs"]
        r = httpx.post(s.url + "/v1/score", json={"text_1": [p[0] for p in pairs], "text_2": [p[1] for p in pairs]})
        got = [d["score"] for d in r.json()["data"]]
        assert max(abs(g - w) for g, w in zip(got, exp["scores"])) < 5e-3, (got, exp["scores"])
    finally:
        s.stop()


def test_decoder_reranker_refusals_at_start(coserve_bin):
    import subprocess
    yes_no = os.path.join(FIXTURES, "qwen3-yes-no-reranker")

    def fails(model, *args, says):
        p = subprocess.run([coserve_bin, "serve", model, "--port", "0", *args],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode != 0 and says in p.stderr, p.stderr

    fails(yes_no, "--hf-overrides", "[1]", says="--hf-overrides must be a JSON object")
    fails(yes_no, "--task", "score", says="is not a sequence classifier")
    fails(yes_no, "--hf-overrides", json.dumps({"architectures": ["Qwen3ForSequenceClassification"],
                                                "classifier_from_token": ["n", "not-a-token"]}),
          says="'not-a-token' is not a token of the model's vocabulary")
    fails(yes_no, "--hf-overrides", json.dumps({"architectures": ["Qwen3ForSequenceClassification"],
                                                "classifier_from_token": ["n", "y", "a"],
                                                "method": "from_2_way_softmax"}),
          says="from_2_way_softmax takes two tokens")
    fails(os.path.join(FIXTURES, "qwen3-seq-cls-reranker"), "--task", "generate",
          says="is a sequence classifier")
    fails(os.path.join(FIXTURES, "bert-cross-encoder"), "--hf-overrides", "{}",
          says="--hf-overrides applies to decoders")


def test_pairs_truncated_longest_first_equal_a_cross_encoder_with_max_length(cross):
    """truncate_prompt_tokens on a pair: the tokenizer's longest_first to that many ids, its
    template kept, as CrossEncoder(max_length=k) reads the pairs."""
    exp = fixture("bert-cross-encoder")
    pairs = exp["pairs"]
    for t in exp["truncated"]:
        r = httpx.post(cross.url + "/v1/score", json={"text_1": [p[0] for p in pairs], "text_2": [p[1] for p in pairs],
                                                      "truncate_prompt_tokens": t["max_length"]})
        assert r.status_code == 200, r.text
        got = [d["score"] for d in r.json()["data"]]
        assert max(abs(g - w) for g, w in zip(got, t["scores"])) < 1e-4, (t["max_length"], got, t["scores"])
        assert r.json()["usage"]["prompt_tokens"] == sum(len(i) for i in t["ids"])
    # Rerank takes the field too.
    t = exp["truncated"][0]
    rr = httpx.post(cross.url + "/v1/rerank", json={"query": pairs[0][0], "documents": [pairs[0][1]],
                                                    "truncate_prompt_tokens": t["max_length"]})
    assert rr.status_code == 200, rr.text
    assert abs(rr.json()["results"][0]["relevance_score"] - t["scores"][0]) < 1e-4


def test_do_lower_case_lowercases_input_texts(tmp_path):
    """sentence_bert_config.json's do_lower_case (XLM-R's Unigram tokenizer is cased): the vectors
    of the lowercased texts, as sentence-transformers computes them."""
    import shutil
    exp = fixture("xlmr-last-normalize")
    folder = tmp_path / "xlmr-lower"
    shutil.copytree(os.path.join(FIXTURES, "xlmr-last-normalize"), folder)
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": exp["max_seq_length"],
                                                                  "do_lower_case": True}))
    s = Server(model=folder)
    try:
        assert any("lowercased before tokenizing" in l for l in s.log), "".join(s.log)
        r = s.client().embeddings.create(model=s.model, input=exp["texts"])
        for got, want in zip(r.data, exp["lowercased"]["embeddings"]):
            assert cosine(got.embedding, want) >= 0.99999
        assert r.usage.prompt_tokens == sum(len(i) for i in exp["lowercased"]["ids"])
        toks = httpx.post(s.url + "/tokenize", json={"prompt": exp["texts"][0]}).json()["tokens"]
        assert toks == exp["lowercased"]["ids"][0]
    finally:
        s.stop()


CHAT_TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}" \
                "{% if add_generation_prompt %}assistant:{% endif %}"


def test_embeddings_of_chat_messages():
    """vLLM's chat embedding request: messages rendered by the chat template (no generation
    prompt unless asked, no special tokens beyond the template's), one vector."""
    s = Server("--task", "embed", "--kv-cache-dtype", "fp32", "--chat-template", CHAT_TEMPLATE,
               model=os.path.join(FIXTURES, "qwen3-last-normalize"))
    try:
        msgs = [{"role": "user", "content": "Hello world"},
                {"role": "assistant", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]}]

        def embed(body):
            r = httpx.post(s.url + "/v1/embeddings", json=body)
            assert r.status_code == 200, r.text
            return r.json()

        chat = embed({"messages": msgs})
        text = embed({"input": "user: Hello world\nassistant: Hi\nthere\n", "add_special_tokens": False})
        assert len(chat["data"]) == 1
        assert cosine(chat["data"][0]["embedding"], text["data"][0]["embedding"]) >= 0.999999
        assert chat["usage"]["prompt_tokens"] == text["usage"]["prompt_tokens"]
        prompt = embed({"messages": msgs, "add_generation_prompt": True})
        text = embed({"input": "user: Hello world\nassistant: Hi\nthere\nassistant:", "add_special_tokens": False})
        assert cosine(prompt["data"][0]["embedding"], text["data"][0]["embedding"]) >= 0.999999
        # The tokenizer's BOS on top, when asked.
        bos = embed({"messages": msgs, "add_special_tokens": True})
        assert bos["usage"]["prompt_tokens"] == chat["usage"]["prompt_tokens"] + 1
        for body, param in [({"messages": msgs, "input": "x"}, "messages"),
                            ({"messages": []}, "messages"),
                            ({"messages": [{"content": "no role"}]}, "messages"),
                            ({"messages": msgs, "add_generation_prompt": True, "continue_final_message": True},
                             "continue_final_message"),
                            ({"messages": msgs, "chat_template": "{{ 1 }}"}, "chat_template")]:
            r = httpx.post(s.url + "/v1/embeddings", json=body)
            assert r.status_code == 400 and r.json()["error"]["param"] == param, (body, r.text)
    finally:
        s.stop()


def test_chat_messages_on_a_model_without_a_chat_template(bert):
    r = httpx.post(bert.url + "/v1/embeddings", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text
    assert "chat template" in r.json()["error"]["message"]
