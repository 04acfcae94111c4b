"""`tl serve` where llama.cpp's server test suite (bench/server_suite.py) found it lacking: each test
here states the behaviour a client of llama-server or OpenAI relies on, checked on a real server
process with the real SmolLM2 model against what the model or its tokenizer computes independently
(the suite itself is not run here: it is downloaded, so it stays a benchmark)."""
from __future__ import annotations

import pytest

pytest.importorskip("tensorlogic._core")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from test_server import KEY, Server, smollm2_path  # noqa: E402,F401 (tests/e2e is on sys.path; the fixture too)


@pytest.fixture(scope="module")
def tok(smollm2_path):
    from tensorlogic.models.tokenizer import Tokenizer

    return Tokenizer.from_file(smollm2_path)


@pytest.fixture(scope="module")
def server(smollm2_path, tmp_path_factory):
    """A server with two slots (continuous batching) and last-token pooling (llama-server's --pooling last)."""
    s = Server(smollm2_path, tmp_path_factory.mktemp("serve_compat"), "--api-key", KEY, "--context", "512",
               "--parallel", "2", "--pooling", "last")
    yield s
    s.close()
    assert "Traceback" not in s.log.read_text(), s.log.read_text()


def test_last_token_pooling_is_the_normalized_last_hidden_state(server, smollm2_path, tok):
    import sys
    from pathlib import Path

    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
    from numpy_llama import NumpyLlama  # the NumPy oracle of the forward pass

    from tensorlogic.models.gguf_file import GGUFFile

    texts = ["The cat sat on the mat.", "Stock prices fell sharply today."]
    r = server.client().embeddings.create(model="m", input=texts)
    with GGUFFile(smollm2_path) as g:
        oracle = NumpyLlama(g)
    oracle.out = np.eye(oracle.cfg.d_model, dtype=np.float32)  # "logits" = the normed hidden states
    for text, d in zip(texts, r.data):
        oracle.reset()
        hidden = oracle.forward(tok.encode(text))
        last, mean = hidden[-1] / np.linalg.norm(hidden[-1]), hidden.mean(axis=0)
        v = np.array(d.embedding)
        assert float(v @ last) > 0.9999
        assert float(v @ (mean / np.linalg.norm(mean))) < 0.99  # not the mean


def test_embeddings_with_parallel_slots_run_between_batched_steps(server, tok):
    """With --parallel, an embedding runs alone between the slots' steps: it answers 200 while a
    stream decodes in a slot, the same vector as when the server is idle, and the stream goes on."""
    import threading

    import numpy as np

    text = "The cat sat on the mat."
    idle = np.array(server.post("/v1/embeddings", {"input": text}).json()["data"][0]["embedding"])
    streamed: list[str] = []

    def stream() -> None:
        with httpx.stream("POST", server.url + "/v1/completions", timeout=120,
                          headers={"Authorization": f"Bearer {KEY}"},
                          json={"prompt": "Once upon a time", "max_tokens": 40, "stream": True}) as r:
            streamed.extend(line for line in r.iter_lines() if line.startswith("data: "))

    t = threading.Thread(target=stream)
    t.start()
    busy = server.post("/v1/embeddings", {"input": [text, tok.encode(text)]})
    t.join(120)
    assert busy.status_code == 200, busy.text
    for d in busy.json()["data"]:
        assert np.allclose(np.array(d["embedding"]), idle, atol=1e-5)
    assert streamed and streamed[-1] == "data: [DONE]"


def test_a_streamed_chat_sends_its_role_with_null_content_and_no_empty_text(server):
    """The first chunk carries the role and no text (content null, as llama-server: a client that
    joins the deltas' content never sees an empty piece); every later content delta has text."""
    import json

    with httpx.stream("POST", server.url + "/v1/chat/completions", timeout=120,
                      headers={"Authorization": f"Bearer {KEY}"},
                      json={"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8,
                            "stream": True}) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
    first = chunks[0]["choices"][0]
    assert first["delta"] == {"role": "assistant", "content": None} and first["finish_reason"] is None
    texts = [c["choices"][0]["delta"]["content"] for c in chunks[1:] if "content" in c["choices"][0]["delta"]]
    assert texts and all(isinstance(t, str) and t for t in texts)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_over_the_context_is_400_with_its_token_count_and_the_slot_context(server, tok, stream):
    """OpenAI's error (context_length_exceeded) plus llama-server's n_prompt_tokens and n_ctx (here a
    slot's context: --context 512 shared by --parallel 2), so that a client can cut its prompt."""
    prompt = "The cat sat on the mat. " * 60
    r = server.post("/v1/completions", {"prompt": prompt, "max_tokens": 4, "stream": stream})
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert e["type"] == "invalid_request_error" and e["code"] == "context_length_exceeded" and e["param"] == "prompt"
    assert e["n_prompt_tokens"] == len(tok.encode(prompt)) > 256 and e["n_ctx"] == 256
    assert "too large" in e["message"]


def test_several_listen_addresses_serve_alike(smollm2_path, tmp_path):
    """--host A,B (llama-server's form) listens on each address, one port: IPv4 and IPv6 loopback."""
    import socket

    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    s = Server(smollm2_path, tmp_path, "--api-key", KEY, "--context", "128", "--host", "127.0.0.1,::1")
    try:
        assert f"(also http://[::1]:{s.port}/v1)" in s.log.read_text()
        body = {"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}
        texts = []
        for base in (s.url, f"http://[::1]:{s.port}"):
            assert httpx.get(base + "/health", timeout=30).status_code == 200
            assert httpx.post(base + "/v1/completions", json=body, timeout=30).status_code == 401
            r = httpx.post(base + "/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"},
                           timeout=120)
            texts.append(r.json()["choices"][0]["text"])
        assert texts[0] == texts[1] != ""
    finally:
        s.close()


def test_a_host_that_cannot_be_bound_is_a_one_line_error(smollm2_path):
    import subprocess
    import sys

    from test_server import ROOT, _env

    r = subprocess.run([sys.executable, "-m", "tensorlogic", "serve", "--model", str(smollm2_path), "--port", "0",
                        "--host", "127.0.0.1,192.0.2.1"], capture_output=True, text=True, env=_env(), cwd=ROOT,
                       timeout=120)
    assert r.returncode == 1 and r.stderr.startswith("tl: error: cannot listen on 192.0.2.1:"), r.stderr
    assert "Traceback" not in r.stderr
