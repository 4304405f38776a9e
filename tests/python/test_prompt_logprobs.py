"""Prompt log-probabilities (vLLM's `prompt_logprobs`, and `echo` with `logprobs` on
/v1/completions, what lm-evaluation-harness's loglikelihood requests send) against `coserve serve
--demo`. The values are checked against transformers offline (docs/agent-api.md); here against
the server's own next-token logprobs: the prompt entry at position p must equal the top logprobs
a greedy completion of the first p tokens reports, across prefill chunks and with the prefix
cache in play."""
import random

import httpx
import pytest


def post(server, path, body):
    r = httpx.post(server.url + path, json={"model": server.model, **body}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def prompt():
    rng = random.Random(11)
    return [rng.randrange(50000) for _ in range(700)]  # more than one 512-token prefill chunk


def test_prompt_logprobs_match_next_token_logprobs(server, prompt):
    r = post(server, "/v1/completions", {"prompt": prompt, "max_tokens": 1, "prompt_logprobs": 5, "temperature": 0})
    pl = r["choices"][0]["prompt_logprobs"]
    assert len(pl) == len(prompt) and pl[0] is None
    for p, entry in enumerate(pl[1:], start=1):
        mine = entry[str(prompt[p])]
        assert mine["rank"] >= 1 and mine["logprob"] <= 0
        # The top 5 with ranks 1..5, plus the prompt token when it is not among them.
        others = sorted(v["rank"] for k, v in entry.items() if int(k) != prompt[p])
        if mine["rank"] <= 5:
            assert len(entry) == 5 and sorted(others + [mine["rank"]]) == [1, 2, 3, 4, 5]
        else:
            assert len(entry) == 6 and others == [1, 2, 3, 4, 5]
    # Position p's entry is the distribution a completion of prompt[:p] samples from.
    for p in (1, 200, 511, 512, 513, 699):
        c = post(server, "/v1/completions", {"prompt": prompt[:p], "max_tokens": 1, "logprobs": 5, "temperature": 0})
        top = c["choices"][0]["logprobs"]["top_logprobs"][0]
        by_text = {v["decoded_token"]: v["logprob"] for k, v in pl[p].items() if v["rank"] <= 5}
        common = set(top) & set(by_text)
        assert len(common) >= 4, (p, top, by_text)
        for t in common:
            assert top[t] == pytest.approx(by_text[t], abs=2e-2), (p, t)


def test_echo_logprobs_cover_the_prompt_and_repeat_with_the_prefix_cache(server, prompt):
    body = {"prompt": prompt[:300], "max_tokens": 2, "echo": True, "logprobs": 2, "temperature": 0}
    first = post(server, "/v1/completions", body)
    again = post(server, "/v1/completions", body)  # the prompt's blocks are cached now
    lp = first["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == 302
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(isinstance(x, float) for x in lp["token_logprobs"][1:])
    for tok, x, top in zip(lp["tokens"][1:], lp["token_logprobs"][1:], lp["top_logprobs"][1:]):
        assert top[tok] == pytest.approx(x) and len(top) <= 3
    assert lp["text_offset"][0] == 0
    assert all(b - a == len(t) for a, b, t in zip(lp["text_offset"], lp["text_offset"][1:], lp["tokens"]))
    assert first["choices"][0]["text"].startswith("".join(lp["tokens"][:300])[:10])
    assert again["choices"][0]["logprobs"]["token_logprobs"][0] is None
    assert again["choices"][0]["logprobs"]["token_logprobs"][1:] == pytest.approx(lp["token_logprobs"][1:], abs=1e-3)
    assert again["usage"]["prompt_tokens"] == 300


def test_every_sample_of_a_prompt_carries_its_prompt_logprobs(server, prompt):
    r = post(server, "/v1/completions", {"prompt": [prompt[:20], prompt[20:50]], "n": 2, "max_tokens": 2,
                                         "prompt_logprobs": 0, "temperature": 1, "seed": 3})
    choices = r["choices"]
    assert len(choices) == 4
    assert choices[0]["prompt_logprobs"] == choices[1]["prompt_logprobs"]
    assert choices[2]["prompt_logprobs"] == choices[3]["prompt_logprobs"]
    assert len(choices[0]["prompt_logprobs"]) == 20 and len(choices[2]["prompt_logprobs"]) == 30
    assert all(len(e) == 1 for e in choices[2]["prompt_logprobs"][1:])  # prompt_logprobs 0: the token only


def test_chat_prompt_logprobs_on_the_response(server):
    r = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi there"}],
                                              "max_tokens": 1, "prompt_logprobs": 1})
    pl = r["prompt_logprobs"]
    assert pl[0] is None and len(pl) == r["usage"]["prompt_tokens"]
    assert all(1 <= len(e) <= 2 for e in pl[1:])
