"""`tl serve --parallel N` as a client sees it (real server process, real SmolLM2): concurrent
greedy requests of different lengths, chat and raw, streamed and not, get token for token the reply
`tl generate --json` gives each alone; a second chat turn reports the cached prefix in
usage.prompt_tokens_details.cached_tokens and answers as without the cache; /health reports the
slots and their bounded KV memory; a client leaving mid-stream frees its slot while others go on."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("tensorlogic._core")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from test_server import KEY, ROOT, Server, _env, smollm2_path  # noqa: E402,F401 - the fixture too

PARALLEL = 3
SLOT_CONTEXT = 384
REQUESTS = [  # (kind, prompt, max_tokens, stream)
    ("chat", "What is the capital of France?", 12, False),
    ("chat", "Write a haiku about the sea.", 30, True),
    ("raw", "The capital of France is", 20, False),
    ("chat", "List three fruits, one per line.", 24, True),
    ("chat", "Hi", 6, False),
]


@pytest.fixture(scope="module")
def server(smollm2_path, tmp_path_factory):
    s = Server(smollm2_path, tmp_path_factory.mktemp("serve_batch"), "--api-key", KEY, "--parallel",
               str(PARALLEL), "--context", str(PARALLEL * SLOT_CONTEXT))
    yield s
    s.close()
    assert "Traceback" not in s.log.read_text(), s.log.read_text()


def _generate(model, prompt: str, max_tokens: int, raw: bool) -> dict:
    args = ["--prompt", prompt, "--max-tokens", str(max_tokens)] + (["--raw"] if raw else [])
    r = subprocess.run([sys.executable, "-m", "tensorlogic", "generate", "--model", str(model), "--json", *args],
                       capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def expected(smollm2_path) -> list[dict]:
    return [_generate(smollm2_path, p, n, kind == "raw") for kind, p, n, _ in REQUESTS]


def _ask(client, kind: str, prompt: str, max_tokens: int, stream: bool) -> tuple[str, int]:
    """(text, completion tokens)"""
    common = dict(model="smollm2", max_tokens=max_tokens, temperature=0)
    if kind == "raw":
        if stream:
            chunks = list(client.completions.create(prompt=prompt, stream=True,
                                                    stream_options={"include_usage": True}, **common))
            return "".join(c.choices[0].text for c in chunks if c.choices), chunks[-1].usage.completion_tokens
        r = client.completions.create(prompt=prompt, **common)
        return r.choices[0].text, r.usage.completion_tokens
    messages = [{"role": "user", "content": prompt}]
    if stream:
        chunks = list(client.chat.completions.create(messages=messages, stream=True,
                                                     stream_options={"include_usage": True}, **common))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return text, chunks[-1].usage.completion_tokens
    r = client.chat.completions.create(messages=messages, **common)
    return r.choices[0].message.content, r.usage.completion_tokens


def _ask_concurrently(server, requests: list) -> list:
    """Each request of `requests` from a thread of its own, all at once: their (text, tokens)."""
    replies: list = [None] * len(requests)
    errors: list = []

    def run(i):
        try:
            replies[i] = _ask(server.client(), *requests[i])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    return replies


def test_concurrent_requests_equal_tl_generate_alone(server, expected):
    for attempt in range(2):  # the second round: slots whose caches hold earlier prompts
        replies = _ask_concurrently(server, REQUESTS)
        assert [r[0] for r in replies] == [e["text"] for e in expected]
        assert [r[1] for r in replies] == [len(e["ids"]) for e in expected]
    h = server.health()
    assert h["slots"]["parallel"] == PARALLEL and h["slots"]["slot_context"] == SLOT_CONTEXT
    assert h["context"] == SLOT_CONTEXT
    assert h["slots"]["mean_batch"] > 1.0  # requests really decoded together
    assert h["requests"]["served"] >= 2 * len(REQUESTS) and h["queue"]["running"] == 0


def test_second_turn_reports_cached_tokens_and_answers_as_without_cache(server, smollm2_path):
    client = server.client()
    system = {"role": "system", "content": "You are a helpful assistant who answers in one short sentence."}
    turn1 = [system, {"role": "user", "content": "What is the capital of Italy?"}]
    r1 = client.chat.completions.create(model="smollm2", messages=turn1, max_tokens=16, temperature=0)
    turn2 = turn1 + [{"role": "assistant", "content": r1.choices[0].message.content},
                     {"role": "user", "content": "And of Spain?"}]
    r2 = client.chat.completions.create(model="smollm2", messages=turn2, max_tokens=16, temperature=0)
    cached = r2.usage.prompt_tokens_details.cached_tokens
    assert r1.usage.prompt_tokens < cached < r2.usage.prompt_tokens  # turn 1 and (part of) its reply
    # the same request again: everything but its last token comes from the cache
    r3 = client.chat.completions.create(model="smollm2", messages=turn2, max_tokens=16, temperature=0)
    assert r3.usage.prompt_tokens_details.cached_tokens == r2.usage.prompt_tokens - 1
    assert r3.choices[0].message.content == r2.choices[0].message.content
    # as without any cache: a fresh process rendering the same conversation
    from tensorlogic.apps.llm_session import LlmSession

    with LlmSession(smollm2_path, context=SLOT_CONTEXT) as s:
        alone = s.generate(s.chat_prompt_ids(turn2), 16)
    assert r2.choices[0].message.content == alone.text
    assert r2.usage.prompt_tokens == len(alone.prompt_ids)


def test_health_reports_bounded_kv_memory_per_slot(server):
    slots = server.health()["slots"]
    per_slot = 2 * 30 * SLOT_CONTEXT * 3 * 64 * 4  # K and V, 30 layers, 3 KV heads of 64, f32
    assert slots["kv_bytes_per_slot"] == per_slot and slots["kv_bytes"] == PARALLEL * per_slot
    assert len(slots["slots"]) == PARALLEL
    assert all(0 <= s["cached_tokens"] <= SLOT_CONTEXT for s in slots["slots"])


def test_health_reports_the_memory_the_server_holds(server):
    mem = server.health()["memory"]
    kv = PARALLEL * 2 * 30 * SLOT_CONTEXT * 3 * 64 * 4
    assert mem["live_bytes"] > kv  # the slots' caches and the weights, at least
    assert mem["pool_bytes"] == mem["live_bytes"] + mem["cached_bytes"]
    assert 0 <= mem["recordings_bytes"] < mem["live_bytes"] < mem["rss_bytes"]
    assert mem["cache_limit_bytes"] > 0


def test_a_client_leaving_mid_stream_frees_its_slot_and_others_go_on(server, expected):
    long_body = {"messages": [{"role": "user", "content": "Tell me a very long story."}], "max_tokens": 300,
                 "stream": True, "temperature": 0}
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=long_body, headers=headers,
                      timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and '"content"' in line and '""' not in line:
                break  # one token arrived: leave
    text, _ = _ask(server.client(), *REQUESTS[0])  # served alongside (or after) the departed one
    assert text == expected[0]["text"]
    deadline = time.time() + 30
    while server.health()["queue"]["running"] and time.time() < deadline:
        time.sleep(0.2)
    h = server.health()
    assert h["queue"]["running"] == 0 and all(s["state"] == "idle" for s in h["slots"]["slots"])
    assert h["requests"]["cancelled"] >= 1


def test_a_context_too_small_for_the_slots_is_one_line(smollm2_path):
    r = subprocess.run([sys.executable, "-m", "tensorlogic", "serve", "--model", str(smollm2_path), "--port", "0",
                        "--parallel", "8", "--context", "64"], capture_output=True, text=True, env=_env(), cwd=ROOT,
                       timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == ("tl: error: --context 64 leaves 8 positions to each of 8 slots "
                                                 "(at least 16): raise --context or lower --parallel")
    assert "Traceback" not in r.stderr


def test_guided_requests_run_alone_and_keep_what_they_asked_for(server, expected):
    """logprobs, logit_bias and response_format need the guided sampler, which the slots do not run:
    such a request takes the one-at-a-time path while the slots wait, and gets its logprobs, its
    bias and its JSON; a plain request sent at the same time still answers as `tl generate` alone."""
    client = server.client()
    plain: list = []
    t = threading.Thread(target=lambda: plain.append(_ask(server.client(), *REQUESTS[0])))
    t.start()
    r = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Say hi."}],
                                       max_tokens=5, temperature=0, logprobs=True, top_logprobs=2)
    t.join(300)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens and all(len(c.top_logprobs) == 2 for c in content)
    assert all(c.logprob <= 0.0 for c in content)
    j = client.chat.completions.create(model="smollm2", max_tokens=40, temperature=0,
                                       messages=[{"role": "user", "content": "Give a JSON object."}],
                                       response_format={"type": "json_object"})
    if j.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(j.choices[0].message.content), dict)
    else:  # cut by max_tokens: still a prefix of an object
        assert j.choices[0].message.content.lstrip().startswith("{")
    assert plain and plain[0][0] == expected[0]["text"]
