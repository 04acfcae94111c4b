"""`tl serve --parallel N --fast` as a client sees it (real server process, real SmolLM2): 8-bit
activations batch too (each row of a batched decode step is bitwise its one-row product, and
prompts, prefilled through the 8-bit path, come out the same however they are cut), so concurrent
greedy requests get token for token the reply `tl generate --fast --json` gives each alone, and
/health shows steps of several rows and prompts cut at the budget."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("tensorlogic._core")
pytest.importorskip("openai")
pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from test_server import KEY, ROOT, Server, _env, smollm2_path  # noqa: E402,F401 - the fixture too
from test_server_batching import _ask_concurrently  # noqa: E402

PARALLEL = 3
REQUESTS = [  # (kind, prompt, max_tokens, stream)
    ("chat", "Write a haiku about the sea.", 24, True),
    ("raw", "The capital of France is", 16, False),
    ("chat", "List three fruits, one per line.", 20, False),
    ("chat", "What is the capital of France?", 12, True),
    # over the server's 64-token prompt budget: prefilled in pieces (tl generate's is one piece of
    # 512), which under --fast changes no bit
    ("chat", "Summarize in one sentence: " + " ".join(["The lighthouse keeper climbed the stairs at dusk, "
                                                      "lit the lamp, and watched the ships pass."] * 5), 16, True),
]


@pytest.fixture(scope="module")
def fast_server(smollm2_path, tmp_path_factory):
    s = Server(smollm2_path, tmp_path_factory.mktemp("serve_fast"), "--api-key", KEY, "--parallel",
               str(PARALLEL), "--context", str(PARALLEL * 256), "--fast")
    yield s
    s.close()
    assert "Traceback" not in s.log.read_text(), s.log.read_text()


def _generate_fast(model, prompt: str, max_tokens: int, raw: bool) -> dict:
    args = ["--prompt", prompt, "--max-tokens", str(max_tokens), "--fast"] + (["--raw"] if raw else [])
    r = subprocess.run([sys.executable, "-m", "tensorlogic", "generate", "--model", str(model), "--json", *args],
                       capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_fast_concurrent_requests_equal_tl_generate_fast_alone(fast_server, smollm2_path):
    expected = [_generate_fast(smollm2_path, p, n, kind == "raw") for kind, p, n, _ in REQUESTS]
    replies = _ask_concurrently(fast_server, REQUESTS)
    assert [r[0] for r in replies] == [e["text"] for e in expected]
    assert [r[1] for r in replies] == [len(e["ids"]) for e in expected]
    slots = fast_server.health()["slots"]
    assert slots["batched"] and slots["mean_batch"] > 1.0  # the requests really decoded together
    assert slots["prefill_pieces"] > len(REQUESTS)  # the long prompt was cut
