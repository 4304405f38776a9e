"""GET /openapi.json: a valid OpenAPI 3.1 document, and the live server conforms to it.

Schemathesis generates valid and invalid requests for every operation in the document and checks
that no answer is a 5xx, that every status code is one the document lists and that every JSON
answer matches its response schema.
"""
import os
import subprocess
import sys

import httpx
import pytest

from conftest import Server

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def small_server():
    # A short context keeps generated prompts and completions small on the CPU.
    s = Server("--max-model-len", "128")
    yield s
    s.stop()


def test_openapi_document_is_valid_and_lists_every_route(server):
    from openapi_spec_validator import validate
    r = httpx.get(server.url + "/openapi.json")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    doc = r.json()
    validate(doc)
    assert doc["openapi"].startswith("3.1")
    assert set(doc["paths"]) == {"/v1/completions", "/v1/chat/completions", "/v1/models", "/v1/models/{model}",
                                 "/health", "/metrics", "/tokenize", "/detokenize", "/version", "/openapi.json",
                                 "/v1/responses", "/v1/responses/input_tokens", "/v1/messages",
                                 "/v1/messages/count_tokens", "/api/status", "/api/trace", "/v1/embeddings",
                                 "/v1/score", "/v1/rerank", "/v2/rerank", "/api/prefix_cache", "/reset_prefix_cache"}
    assert server.model in doc["components"]["schemas"]["Sampling"]["properties"]["model"]["enum"]
    max_model_len = httpx.get(server.url + "/v1/models").json()["data"][0]["max_model_len"]
    assert doc["components"]["schemas"]["Sampling"]["properties"]["max_tokens"]["maximum"] == max_model_len - 1


def test_every_route_answered_is_documented(server):
    """Each path the document lists is answered (not 404 for an unknown route), and a path outside
    it is not: the router and the document come from one route table."""
    doc = httpx.get(server.url + "/openapi.json").json()
    for path, item in doc["paths"].items():
        url = server.url + path.replace("{model}", server.model)
        for method in item:
            r = httpx.request(method.upper(), url, json={} if method == "post" else None, timeout=60)
            assert not (r.status_code == 404 and "route" in r.text), (method, path, r.text)
    assert httpx.get(server.url + "/v1/not-a-route").status_code == 404


def test_every_request_field_read_is_documented(server):
    """Fields the parsers read (each refused with a 400 when malformed: 12.5 fits none of them) are
    in the document's schema of the request that reads them."""
    schemas = httpx.get(server.url + "/openapi.json").json()["components"]["schemas"]

    def props(name):
        s = schemas[name]
        out = dict(s.get("properties", {}))
        for branch in s.get("allOf", []) + s.get("anyOf", []):
            ref = branch.get("$ref")
            out.update(props(ref.rsplit("/", 1)[1]) if ref else branch.get("properties", {}))
        return out

    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    completion = {"prompt": "hi", "max_tokens": 2}
    cases = [
        ("/v1/chat/completions", "ChatCompletionRequest", chat,
         ["truncate_prompt_tokens", "return_tokens_as_token_ids", "guided_regex", "guided_choice",
          "guided_grammar", "guided_json", "allowed_token_ids", "use_beam_search", "bad_words",
          "chat_template", "temperature", "add_generation_prompt"]),
        ("/v1/completions", "CompletionRequest", completion,
         ["truncate_prompt_tokens", "allowed_token_ids", "guided_regex", "response_format", "suffix", "echo"]),
        ("/v1/responses", "ResponsesRequest", {"input": "hi", "max_output_tokens": 2},
         ["instructions", "max_output_tokens", "temperature", "reasoning", "tools"]),
        ("/v1/messages", "MessagesRequest", dict(chat),
         ["system", "max_tokens", "temperature", "stop_sequences", "thinking", "tools"]),
    ]
    for path, schema, body, fields in cases:
        documented = props(schema)
        for field in fields:
            assert field in documented, (schema, field)
            sent = dict(body, **{field: 12.5 if field != "suffix" else "x"})
            r = httpx.post(server.url + path, json=sent, timeout=60)
            assert r.status_code == 400, (path, field, r.status_code, r.text)


def test_openapi_needs_no_api_key():
    s = Server("--api-key", "sekrit")
    try:
        assert httpx.get(s.url + "/openapi.json").status_code == 200
        assert httpx.get(s.url + "/v1/models").status_code == 401
    finally:
        s.stop()


def run_schemathesis(server, tmp_path, *extra):
    cli = os.path.join(os.path.dirname(sys.executable), "schemathesis")
    if not os.access(cli, os.X_OK):
        pytest.skip("schemathesis is not installed (scripts/pyenv)")
    max_model_len = httpx.get(server.url + "/v1/models").json()["data"][0]["max_model_len"]
    env = dict(os.environ, SCHEMATHESIS_HOOKS="schemathesis_hooks", COSERVE_MAX_TOKENS_MAX=str(max_model_len - 1),
               PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [cli, "run", server.url + "/openapi.json", *extra,
           "--checks", "not_a_server_error,status_code_conformance,response_schema_conformance,"
                       "content_type_conformance,negative_data_rejection",
           "--phases", "examples,coverage,fuzzing", "--max-examples", "50", "--seed", "1",
           "--workers", "1", "--request-timeout", "60", "--suppress-health-check", "all",
           "--report", "junit", "--report-dir", str(tmp_path)]
    p = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-20000:] + p.stderr[-5000:]
    assert "No issues found" in p.stdout or "passed" in p.stdout, p.stdout[-5000:]


def test_schemathesis_finds_no_server_error_or_nonconformance(small_server, tmp_path):
    run_schemathesis(small_server, tmp_path)


def test_schemathesis_on_an_embedding_model(tmp_path):
    """The pooling routes where they answer 200 (an embedding model: vectors, cosine scores)."""
    model = os.path.join(HERE, "..", "reference", "fixtures", "embedding", "bert-mean-normalize")
    s = Server(model=model)
    try:
        run_schemathesis(s, tmp_path, "--include-path-regex", "^/v[12]/(embeddings|score|rerank)$")
    finally:
        s.stop()


def test_several_served_model_names_are_each_answered_and_listed():
    """vLLM's --served-model-name A B: requests may name either (responses repeat it; A when none),
    /v1/models lists both, and the OpenAPI document says so (its schemas validate the live answers)."""
    import jsonschema
    import openai
    s = Server("--served-model-name", "first-name", "org/second")
    try:
        c = s.client()
        assert [m.id for m in c.models.list().data] == ["first-name", "org/second"]
        assert c.models.retrieve("org/second").root == "first-name"
        for name in ["first-name", "org/second"]:  # the name used comes back, as vLLM echoes it
            r = c.chat.completions.create(model=name, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
            assert r.model == name
        r = httpx.post(s.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                             "max_tokens": 2})
        assert r.json()["model"] == "first-name"
        with pytest.raises(openai.NotFoundError):
            c.completions.create(model="third", prompt="x", max_tokens=2)
        doc = httpx.get(s.url + "/openapi.json").json()
        listed = httpx.get(s.url + "/v1/models").json()
        schema = dict(doc["paths"]["/v1/models"]["get"]["responses"]["200"]["content"]["application/json"]["schema"],
                      components=doc["components"])
        jsonschema.validate(listed, schema)
        assert doc["components"]["schemas"]["Sampling"]["properties"]["model"]["enum"][:2] == ["first-name",
                                                                                             "org/second"]
    finally:
        s.stop()
