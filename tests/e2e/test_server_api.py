"""`tl serve`'s OpenAI and llama-server features as a client sees them (issue 26): routes without
/v1, /tokenize and /detokenize, a list of prompts, n > 1, CORS, the request log, /metrics, and the
sampling features (logit_bias, logprobs, response_format). A real server process on the real
SmolLM2 model (the Server helper of test_server.py); every check compares with what the model or
its tokenizer computes independently."""
from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("tensorlogic._core")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from test_server import KEY, QUESTION, RAW, Server, smollm2_path  # noqa: E402,F401 (tests/e2e is on sys.path; the fixture too)


@pytest.fixture(scope="module")
def server(smollm2_path, tmp_path_factory):
    s = Server(smollm2_path, tmp_path_factory.mktemp("serve_api"), "--api-key", KEY, "--context", "256",
               "--cors-origin", "http://app.test")
    yield s
    s.close()
    assert "Traceback" not in s.log.read_text(), s.log.read_text()


@pytest.fixture(scope="module")
def tok(smollm2_path):
    from tensorlogic.models.tokenizer import Tokenizer

    return Tokenizer.from_file(smollm2_path)


def _chat_body(**kw) -> dict:
    return {"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 6, "temperature": 0, **kw}


# ---------------------------------------------------------------------- item 1: routes and server features

def test_routes_answer_with_and_without_v1(server):
    with_v1 = server.post("/v1/chat/completions", _chat_body()).json()
    without = server.post("/chat/completions", _chat_body()).json()
    assert without["choices"][0]["message"]["content"] == with_v1["choices"][0]["message"]["content"] != ""
    a = server.post("/v1/completions", {"prompt": RAW, "max_tokens": 4}).json()
    b = server.post("/completions", {"prompt": RAW, "max_tokens": 4}).json()
    assert a["choices"][0]["text"] == b["choices"][0]["text"]
    headers = {"Authorization": f"Bearer {KEY}"}
    assert httpx.get(server.url + "/models", headers=headers).json()["data"][0]["id"] == \
        httpx.get(server.url + "/v1/models", headers=headers).json()["data"][0]["id"]
    assert httpx.get(server.url + "/models").status_code == 401  # the key guards both
    # an OpenAI client whose base URL lacks /v1
    client = openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=120)
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}], max_tokens=6,
                                       temperature=0)
    assert r.choices[0].message.content == with_v1["choices"][0]["message"]["content"]


def test_tokenize_and_detokenize_as_llama_server(server, tok):
    text = "Hello wörld <|im_start|>"
    r = server.post("/tokenize", {"content": text}).json()
    assert r == {"tokens": tok.encode(text, add_special=False)}
    pieces = server.post("/tokenize", {"content": text, "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == r["tokens"]
    assert "".join(p["piece"] for p in pieces) == text  # every piece here is whole UTF-8
    assert server.post("/detokenize", {"tokens": r["tokens"]}).json() == {"content": text}
    # a token that is part of a character comes back as its bytes
    emoji = server.post("/tokenize", {"content": "🎉", "with_pieces": True}).json()["tokens"]
    assert b"".join(bytes(p["piece"]) if isinstance(p["piece"], list) else p["piece"].encode() for p in emoji) \
        == "🎉".encode()
    assert any(isinstance(p["piece"], list) for p in emoji)
    for body, param in (({"content": 5}, "content"), ({}, "content"), ({"content": "a", "parse_special": False},
                                                                        "parse_special"),
                        ({"content": "a", "x": 1}, "x")):
        e = server.post("/tokenize", body)
        assert e.status_code == 400 and e.json()["error"]["param"] == param, e.text
    for body in ({"tokens": [1, 10 ** 9]}, {"tokens": "1"}, {}):
        e = server.post("/detokenize", body)
        assert e.status_code == 400 and e.json()["error"]["param"] == "tokens", e.text


def test_a_list_of_prompts_gives_one_choice_each_in_order(server):
    prompts = [RAW, "1, 2, 3, 4,"]
    singles = [server.post("/v1/completions", {"prompt": p, "max_tokens": 5}).json() for p in prompts]
    both = server.post("/v1/completions", {"prompt": prompts, "max_tokens": 5}).json()
    assert [c["index"] for c in both["choices"]] == [0, 1]
    assert [c["text"] for c in both["choices"]] == [s["choices"][0]["text"] for s in singles]
    assert both["usage"]["prompt_tokens"] == sum(s["usage"]["prompt_tokens"] for s in singles)
    assert both["usage"]["completion_tokens"] == sum(s["usage"]["completion_tokens"] for s in singles)
    ids = server.post("/v1/completions", {"prompt": [[1, 2, 3], RAW], "max_tokens": 2}).json()
    assert len(ids["choices"]) == 2
    streamed = server.post("/v1/completions", {"prompt": prompts, "max_tokens": 5, "stream": True})
    texts = ["", ""]
    for line in streamed.text.splitlines():
        if line.startswith("data: {"):
            for c in json.loads(line[6:])["choices"]:
                texts[c["index"]] += c["text"]
    assert texts == [s["choices"][0]["text"] for s in singles]
    for prompt in ([], [RAW] * 17, [RAW, 5], [[]]):
        e = server.post("/v1/completions", {"prompt": prompt})
        assert e.status_code == 400 and e.json()["error"]["param"] == "prompt", (prompt, e.text)


def test_n_gives_independent_choices_that_a_seed_reproduces(server):
    body = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 1.0, "n": 3, "seed": 11}
    r = server.post("/v1/completions", body).json()
    texts = [c["text"] for c in r["choices"]]
    assert [c["index"] for c in r["choices"]] == [0, 1, 2]
    assert len(set(texts)) == 3  # each choice has its own seed (11, 12, 13)
    assert [c["text"] for c in server.post("/v1/completions", body).json()["choices"]] == texts
    one = server.post("/v1/completions", {**body, "n": 1, "seed": 12}).json()
    assert one["choices"][0]["text"] == texts[1]
    assert r["usage"]["completion_tokens"] == 24 and r["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]
    chat = server.client().chat.completions.create(model="m", messages=[{"role": "user", "content": "Tell a joke"}],
                                                   max_tokens=6, temperature=1.0, n=2, seed=5)
    assert [c.index for c in chat.choices] == [0, 1] and all(c.message.content for c in chat.choices)
    streamed = server.client().chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}],
                                                       max_tokens=6, temperature=1.0, n=2, seed=5, stream=True)
    finished = sorted(c.choices[0].index for c in streamed if c.choices and c.choices[0].finish_reason)
    assert finished == [0, 1]
    for n in (0, 17, "2"):
        e = server.post("/v1/chat/completions", _chat_body(n=n))
        assert e.status_code == 400 and e.json()["error"]["param"] == "n", e.text


def test_cors_origin(server):
    pre = httpx.options(server.url + "/v1/chat/completions",
                        headers={"Origin": "http://app.test", "Access-Control-Request-Method": "POST",
                                 "Access-Control-Request-Headers": "authorization, content-type"})
    assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "http://app.test"
    for origin, allowed in (("http://app.test", True), ("http://evil.test", False)):
        r = httpx.post(server.url + "/v1/completions", json={"prompt": RAW, "max_tokens": 1}, timeout=60,
                       headers={"Origin": origin, "Authorization": f"Bearer {KEY}"})
        assert r.status_code == 200
        assert r.headers.get("access-control-allow-origin") == (origin if allowed else None)


def test_request_log_and_metrics(server):
    before = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    r = server.post("/v1/completions", {"prompt": RAW, "max_tokens": 3}).json()
    server.post("/v1/completions", {"prompt": 5})
    text = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    assert httpx.get(server.url + "/metrics").status_code == 401

    def value(t: str, name: str) -> float:
        m = re.search(rf"^{re.escape(name)} (\S+)$", t, re.M)
        return float(m.group(1)) if m else 0.0

    key = 'tl_requests_total{method="POST",route="/v1/completions",status="200"}'
    assert value(text, key) == value(before, key) + 1
    bad = 'tl_requests_total{method="POST",route="/v1/completions",status="400"}'
    assert value(text, bad) == value(before, bad) + 1
    assert value(text, "tl_completion_tokens_total") == value(before, "tl_completion_tokens_total") + \
        r["usage"]["completion_tokens"]
    assert value(text, "tl_prompt_tokens_total") == value(before, "tl_prompt_tokens_total") + r["usage"]["prompt_tokens"]
    assert "# TYPE tl_request_duration_seconds histogram" in text and "tl_requests_waiting 0" in text
    assert 0 < value(text, "tl_memory_live_bytes") < value(text, "tl_memory_rss_bytes")
    assert value(text, "tl_memory_pool_bytes") == value(text, "tl_memory_live_bytes") + \
        value(text, "tl_memory_cached_bytes")
    assert "# TYPE tl_memory_recordings_bytes gauge" in text
    log = server.log.read_text()
    assert re.search(r"^tl serve: 127\.0\.0\.1 POST /v1/completions 200 \d+\.\d{3}s prompt=\d+ completion=3$", log, re.M)
    assert re.search(r"^tl serve: 127\.0\.0\.1 POST /v1/completions 400 \d+\.\d{3}s$", log, re.M)


# ---------------------------------------------------------------------- item 2: logit_bias, logprobs

@pytest.fixture(scope="module")
def session(smollm2_path):
    """The same model in this process: the reference each step's logits come from."""
    from tensorlogic.apps.llm_session import LlmSession

    s = LlmSession(smollm2_path, context=256)
    yield s
    s.close()


def _log_softmax(x):
    import numpy as np

    x = np.asarray(x, dtype=np.float64).reshape(-1)
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))


def test_logprobs_are_log_softmax_of_each_steps_logits(server, session, tok):
    import numpy as np

    prompt_ids = tok.encode(RAW)
    want = session.generate(prompt_ids, 4)  # greedy
    r = server.post("/v1/completions", {"prompt": prompt_ids, "max_tokens": 4, "logprobs": 3}).json()
    lp = r["choices"][0]["logprobs"]
    assert r["choices"][0]["text"] == want.text  # recording does not change the greedy choice
    assert lp["tokens"] == [tok.token_bytes(t).decode() for t in want.ids]
    assert lp["text_offset"] == list(np.cumsum([0] + [len(t) for t in lp["tokens"]])[:-1])
    chat = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": QUESTION}],
                                                "max_tokens": 4, "temperature": 0, "logprobs": True,
                                                "top_logprobs": 2}).json()
    chat_ids = session.chat_prompt_ids([{"role": "user", "content": QUESTION}])
    chat_want = session.generate(chat_ids, 4)
    content = chat["choices"][0]["logprobs"]["content"]
    assert "".join(c["token"] for c in content) == chat["choices"][0]["message"]["content"] == chat_want.text
    for ids, gen, token_lps, tops in ((prompt_ids, want.ids, lp["token_logprobs"], lp["top_logprobs"]),
                                      (chat_ids, chat_want.ids, [c["logprob"] for c in content],
                                       [{t["token"]: t["logprob"] for t in c["top_logprobs"]} for c in content])):
        for k, tid in enumerate(gen):
            logits = session.generate(ids + gen[:k], 0, keep_logits=True).prompt_logits
            ref = _log_softmax(logits)
            assert token_lps[k] == pytest.approx(ref[tid], abs=2e-4)
            best = np.argsort(-ref, kind="stable")[:len(tops[k])]
            assert list(tops[k]) == [tok.token_bytes(int(i)).decode("utf-8", "replace") for i in best]
            assert list(tops[k].values()) == pytest.approx(ref[best], abs=2e-4)
    # streamed: each chunk carries its tokens' log probabilities
    streamed = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": QUESTION}],
                                                    "max_tokens": 4, "temperature": 0, "logprobs": True,
                                                    "stream": True})
    got = []
    for line in streamed.text.splitlines():
        if line.startswith("data: {"):
            c = json.loads(line[6:])["choices"][0]
            if c.get("logprobs"):
                got += c["logprobs"]["content"]
    assert [g["logprob"] for g in got] == pytest.approx([c["logprob"] for c in content], abs=2e-4)  # (the prompt cache: float rounding)


def test_logit_bias_bans_and_forces_tokens(server, tok):
    base = server.post("/v1/completions", {"prompt": RAW, "max_tokens": 4}).json()["choices"][0]["text"]
    first = tok.encode(base, add_special=False)[0]
    banned = server.post("/v1/completions", {"prompt": RAW, "max_tokens": 4,
                                             "logit_bias": {str(first): -100}, "logprobs": 0}).json()["choices"][0]
    ids = [tok.encode(t, add_special=False) for t in banned["logprobs"]["tokens"]]
    assert banned["text"] and not banned["text"].startswith(tok.decode([first]))
    assert all(first not in i for i in ids)
    # sampled too: the banned id never comes, whatever the seed
    for seed in range(3):
        r = server.post("/v1/completions", {"prompt": RAW, "max_tokens": 6, "temperature": 1.5, "seed": seed,
                                            "logit_bias": {str(first): -100}, "logprobs": 0}).json()
        assert first not in [tok.encode(t, add_special=False)[0] for t in r["choices"][0]["logprobs"]["tokens"]]
    x = tok.encode(" banana", add_special=False)
    assert len(x) == 1
    forced = server.post("/v1/completions", {"prompt": RAW, "max_tokens": 3, "logit_bias": {str(x[0]): 100}}).json()
    assert forced["choices"][0]["text"] == " banana" * 3
    for bias in ({"x": 1}, {"1": 101}, {"1": "1"}, [1], {"999999": 1}):
        e = server.post("/v1/completions", {"prompt": RAW, "max_tokens": 1, "logit_bias": bias})
        assert e.status_code == 400 and e.json()["error"]["param"] == "logit_bias", (bias, e.text)
    for body, param in (({"logprobs": 21}, "logprobs"), ({"logprobs": True}, "logprobs")):
        e = server.post("/v1/completions", {"prompt": RAW, "max_tokens": 1, **body})
        assert e.status_code == 400 and e.json()["error"]["param"] == param, e.text
    for body, param in (({"logprobs": True, "top_logprobs": 21}, "top_logprobs"), ({"logprobs": 1}, "logprobs")):
        e = server.post("/v1/chat/completions", _chat_body(**body))
        assert e.status_code == 400 and e.json()["error"]["param"] == param, e.text


# ---------------------------------------------------------------------- item 3: response_format

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                           "city": {"enum": ["Paris", "Rome", "Oslo"]},
                                           "pets": {"type": "array", "items": {"type": "string"}},
                                           "member": {"type": "boolean"}},
          "required": ["name", "age", "city"], "additionalProperties": False}


def test_json_object_and_json_schema_replies_parse_and_validate(server):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
    from test_json_grammar import validate  # the independent checker of the grammar's unit tests

    client = server.client()
    plain = client.chat.completions.create(model="m", max_tokens=40, temperature=0,
                                           messages=[{"role": "user", "content": "Describe a cat as JSON."}])
    obj = client.chat.completions.create(model="m", max_tokens=80, temperature=0,
                                         messages=[{"role": "user", "content": "Describe a cat as JSON."}],
                                         response_format={"type": "json_object"})
    assert obj.choices[0].message.content != plain.choices[0].message.content  # the mask did change the reply
    if obj.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(obj.choices[0].message.content), dict)
    else:  # cut by max_tokens: a prefix of an object
        assert obj.choices[0].message.content.lstrip().startswith("{")
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    for temperature, seed in ((0, None), (1.0, 1), (1.0, 2), (1.0, 3)):
        r = client.chat.completions.create(model="m", max_tokens=120, temperature=temperature, seed=seed,
                                           messages=[{"role": "user", "content": "Give me a person as JSON."}],
                                           response_format=fmt)
        c = r.choices[0]
        assert c.finish_reason == "stop", c.message.content
        value = json.loads(c.message.content)
        assert validate(value, PERSON), value
    # raw completions too (llama-server's schema form), streamed
    s = server.post("/v1/completions", {"prompt": "A list of three numbers:", "max_tokens": 60, "stream": True,
                                        "response_format": {"type": "json_object",
                                                            "schema": {"type": "array", "items": {"type": "number"}}}})
    text = "".join(json.loads(line[6:])["choices"][0]["text"] for line in s.text.splitlines()
                   if line.startswith("data: {") and json.loads(line[6:])["choices"])
    assert isinstance(json.loads(text), list) and all(isinstance(x, (int, float)) for x in json.loads(text))


@pytest.mark.parametrize("fmt,param", [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "a"}}},
     "response_format.json_schema.schema.pattern"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"properties": {"a": {"anyOf": []}}}}},
     "response_format.json_schema.schema.properties.a.anyOf"),
    ({"type": "json_schema"}, "response_format.json_schema"),
    ({"type": "json_schema", "json_schema": {"schema": {}, "extra": 1}}, "response_format.json_schema.extra"),
    ({"type": "yaml"}, "response_format.type"),
    ({"type": "text", "x": 1}, "response_format.x"),
    ("json", "response_format"),
])
def test_unsupported_response_formats_are_400_naming_the_field(server, fmt, param):
    e = server.post("/v1/chat/completions", _chat_body(response_format=fmt))
    assert e.status_code == 400 and e.json()["error"]["param"] == param, e.text


# ---------------------------------------------------------------------- item 4: embeddings

def test_embeddings_are_the_normalized_mean_of_the_final_hidden_states(server, smollm2_path, tok):
    import base64
    import sys
    from pathlib import Path

    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
    from numpy_llama import NumpyLlama  # the NumPy oracle of the forward pass

    from tensorlogic.models.gguf_file import GGUFFile

    texts = ["The cat sat on the mat.", "A cat was sitting on a rug.", "Stock prices fell sharply today."]
    server.post("/v1/completions", {"prompt": "Unrelated words", "max_tokens": 1})
    before = server.post("/v1/completions", {"prompt": texts[0], "max_tokens": 4}).json()["choices"][0]["text"]
    r = server.client().embeddings.create(model="m", input=texts)
    vecs = np.array([d.embedding for d in r.data])
    assert [d.index for d in r.data] == [0, 1, 2] and vecs.shape == (3, 576)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    with GGUFFile(smollm2_path) as g:
        oracle = NumpyLlama(g)
    oracle.out = np.eye(oracle.cfg.d_model, dtype=np.float32)  # "logits" = the normed hidden states
    for text, v in zip(texts, vecs):
        oracle.reset()
        h = oracle.forward(tok.encode(text)).mean(axis=0)
        assert float(v @ (h / np.linalg.norm(h))) > 0.9999
    assert r.usage.prompt_tokens == sum(len(tok.encode(t)) for t in texts)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2]  # closer in meaning, closer in direction
    b64 = server.post("/v1/embeddings", {"input": [tok.encode(texts[0])], "encoding_format": "base64"}).json()
    assert np.allclose(np.frombuffer(base64.b64decode(b64["data"][0]["embedding"]), "<f4"), vecs[0], atol=1e-6)
    # the KV cache the embedding wrote is reused correctly by a following generation
    after = server.post("/v1/completions", {"prompt": texts[0], "max_tokens": 4}).json()["choices"][0]["text"]
    assert after == before
    for body, param in (({}, "input"), ({"input": ""}, "input"), ({"input": 5}, "input"),
                        ({"input": "a", "dimensions": 8}, "dimensions"), ({"input": "a", "encoding_format": "x"},
                                                                           "encoding_format"),
                        ({"input": "word " * 400}, "input")):
        e = server.post("/v1/embeddings", body)
        assert e.status_code == 400 and e.json()["error"]["param"] == param, e.text


# ---------------------------------------------------------------------- item 4: the Responses API

def test_responses_basic_text_form(server):
    client = server.client()
    chat = server.post("/v1/chat/completions", {"messages": [{"role": "system", "content": "Be brief."},
                                                             {"role": "user", "content": QUESTION}],
                                                "max_tokens": 8, "temperature": 0}).json()
    r = client.responses.create(model="m", input=QUESTION, instructions="Be brief.", max_output_tokens=8,
                                temperature=0)
    assert r.output_text == chat["choices"][0]["message"]["content"]
    assert r.output[0].role == "assistant" and r.output[0].content[0].type == "output_text"
    assert r.status == ("incomplete" if chat["choices"][0]["finish_reason"] == "length" else "completed")
    assert r.usage.input_tokens == chat["usage"]["prompt_tokens"]
    assert r.usage.output_tokens == chat["usage"]["completion_tokens"]
    parts = server.post("/responses", {"input": [{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": [{"type": "input_text",
                                                                               "text": QUESTION}]}],
                                       "max_output_tokens": 8, "temperature": 0}).json()
    assert parts["output"][0]["content"][0]["text"] == r.output_text
    js = server.post("/v1/responses", {"input": "Give me a person as JSON.", "max_output_tokens": 120,
                                       "text": {"format": {"type": "json_schema", "name": "p", "schema": PERSON}}})
    assert js.status_code == 200, js.text
    assert set(json.loads(js.json()["output_text"])) >= {"name", "age", "city"}
    # streamed: the API's typed events, the deltas adding up to the text
    with client.responses.stream(model="m", input=QUESTION, instructions="Be brief.", max_output_tokens=8,
                                 temperature=0) as stream:
        kinds, deltas = [], []
        for ev in stream:
            kinds.append(ev.type)
            if ev.type == "response.output_text.delta":
                deltas.append(ev.delta)
        final = stream.get_final_response()
    assert "".join(deltas) == r.output_text == final.output_text and len(deltas) >= 3
    assert kinds[0] == "response.created" and kinds[-1] in ("response.completed", "response.incomplete")
    assert "response.output_text.done" in kinds and final.usage.output_tokens == r.usage.output_tokens
    for body, param in (({}, "input"), ({"input": "hi", "stream": "yes"}, "stream"),
                        ({"input": "hi", "store": True}, "store"), ({"input": "hi", "tools": []}, "tools"),
                        ({"input": [{"type": "function_call"}]}, "input[0].type"),
                        ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
                        ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x",
                                                             "schema": {"type": "string", "pattern": "a"}}}},
                         "text.format.schema.pattern")):
        e = server.post("/v1/responses", body)
        assert e.status_code == 400 and e.json()["error"]["param"] == param, (body, e.text)


# ---------------------------------------------------------------------- item 4: tools

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The time in a time zone",
                                         "parameters": {"type": "object", "properties": {"zone": {"type": "string"}},
                                                        "required": ["zone"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_tools_are_called_through_the_constrained_reply(server):
    client = server.client()
    r = client.chat.completions.create(model="m", messages=ASK, tools=[WEATHER], tool_choice="required",
                                       max_tokens=60, temperature=0)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None
    call = c.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    args = json.loads(call.function.arguments)
    assert isinstance(args, dict) and isinstance(args["city"], str)
    # a named function among two: its name, its parameters
    named = client.chat.completions.create(model="m", messages=ASK, tools=[WEATHER, TIME], max_tokens=60,
                                           temperature=0, tool_choice={"type": "function",
                                                                       "function": {"name": "get_time"}})
    call = named.choices[0].message.tool_calls[0]
    assert call.function.name == "get_time" and isinstance(json.loads(call.function.arguments)["zone"], str)
    # auto: a call or an answer, never anything else
    for seed in range(3):
        a = client.chat.completions.create(model="m", messages=ASK, tools=[WEATHER, TIME], max_tokens=80,
                                           temperature=1.0, seed=seed)
        ch = a.choices[0]
        if ch.finish_reason == "tool_calls":
            assert ch.message.tool_calls[0].function.name in ("get_weather", "get_time")
            json.loads(ch.message.tool_calls[0].function.arguments)
        else:
            assert ch.finish_reason in ("stop", "length") and isinstance(ch.message.content, str)
    # the conversation goes on with the tool's result
    history = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"}]
    again = client.chat.completions.create(model="m", messages=history, tools=[WEATHER], max_tokens=40,
                                           temperature=0)
    assert again.choices[0].finish_reason in ("tool_calls", "stop", "length")
    # streamed: the call comes whole in one delta
    chunks = list(client.chat.completions.create(model="m", messages=ASK, tools=[WEATHER], tool_choice="required",
                                                 max_tokens=60, temperature=0, stream=True))
    deltas = [ch.choices[0].delta.tool_calls for ch in chunks if ch.choices and ch.choices[0].delta.tool_calls]
    assert len(deltas) == 1 and deltas[0][0].index == 0 and deltas[0][0].function.name == "get_weather"
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices[0].finish_reason] == ["tool_calls"]
    # no tools offered with tool_choice none: an ordinary reply
    plain = server.post("/v1/chat/completions", _chat_body(tools=[WEATHER], tool_choice="none")).json()
    assert plain["choices"][0]["message"]["content"] == server.post("/v1/chat/completions", _chat_body()).json()[
        "choices"][0]["message"]["content"]


@pytest.mark.parametrize("extra,param", [
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "code"}]}, "tools[0]"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "string", "pattern": "a"}}}}}]}, "tools[0].function.parameters.properties.x.pattern"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [WEATHER], "response_format": {"type": "json_object"}}, "response_format"),
    ({"messages": [{"role": "tool", "tool_call_id": "c1"}]}, "messages[0].content"),
    ({"messages": [{"role": "assistant", "tool_calls": "x"}]}, "messages[0].tool_calls"),
    ({"functions": [{"name": "f"}]}, "functions"),
])
def test_bad_tool_requests_are_400_naming_the_field(server, extra, param):
    e = server.post("/v1/chat/completions", {**_chat_body(), **extra})
    assert e.status_code == 400 and e.json()["error"]["param"] == param, e.text
    e = server.post("/v1/completions", {"prompt": RAW, "tools": [WEATHER]})
    assert e.status_code == 400 and e.json()["error"]["param"] == "tools", e.text


def test_presence_and_frequency_penalties_follow_openais_formula(server, session, tok):
    import numpy as np

    prompt_ids = tok.encode("la la la la la la la")
    for presence, frequency in ((0.0, 2.0), (2.0, 0.0), (1.0, 0.5)):
        r = server.post("/v1/completions", {"prompt": prompt_ids, "max_tokens": 6, "logprobs": 0,
                                            "presence_penalty": presence, "frequency_penalty": frequency}).json()
        got = [tok.encode(t, add_special=False)[0] for t in r["choices"][0]["logprobs"]["tokens"]]
        ids, counts = [], np.zeros(session.config.vocab_size)
        for _ in range(6):  # greedy over logit - presence * [count > 0] - frequency * count, step by step
            x = session.generate(prompt_ids + ids, 0, keep_logits=True).prompt_logits.astype(np.float64)
            tid = int(np.argmax(x - presence * (counts > 0) - frequency * counts))
            ids.append(tid)
            counts[tid] += 1
        assert got == ids, (presence, frequency)
    plain = server.post("/v1/completions", {"prompt": prompt_ids, "max_tokens": 6}).json()["choices"][0]["text"]
    assert r["choices"][0]["text"] != plain  # the penalties changed the greedy reply
