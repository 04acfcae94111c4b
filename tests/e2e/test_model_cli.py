"""`tl model`, `tl generate`, `tl chat` and examples/chat.tl as a user runs them: separate
processes, real exit codes, one-line errors, output checked against the reference."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_DIR = Path(os.environ.get("TL_REFERENCE_DIR", ROOT / "tests" / "reference"))

pytest.importorskip("tensorlogic._core")


def _package_parent() -> str:
    """Where this process imports tensorlogic from (the source tree or site-packages): the
    subprocesses must run the same build."""
    import tensorlogic

    return str(Path(tensorlogic.__file__).resolve().parent.parent)


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [_package_parent(), env.get("PYTHONPATH", "")] if p)
    return env


def tl(*args: str, env: dict | None = None, stdin: str | None = None, timeout: int = 300):
    full_env = _env()
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "tensorlogic", *args], capture_output=True, text=True,
                          env=full_env, input=stdin if stdin is not None else "", timeout=timeout, cwd=ROOT)


@pytest.fixture(scope="module")
def model_path() -> Path:
    if os.environ.get("TL_SKIP_REAL_MODEL") == "1":
        pytest.skip("TL_SKIP_REAL_MODEL=1")
    from tensorlogic.models.fetch import fetch_model

    return fetch_model(progress=False)


@pytest.fixture(scope="module")
def reference() -> dict:
    path = REFERENCE_DIR / "smollm2.json"
    if not path.is_file():
        pytest.skip(f"no reference outputs at {REFERENCE_DIR}")
    return json.loads(path.read_text())


def _prompt(reference, name):
    return next(p for p in reference["prompts"] if p["name"] == name)


def test_model_info(model_path):
    r = tl("model", "info", str(model_path))
    assert r.returncode == 0, r.stderr
    for needle in ("architecture:  llama", "layers:        30", "heads:         9 query, 3 key/value",
                   "Q4_1 210", "Q8_0 1", "gpt2 (pre: smollm)", "chat template: yes", "tied to token_embd.weight"):
        assert needle in r.stdout
    j = tl("model", "info", "--json", str(model_path))
    info = json.loads(j.stdout)
    assert info["config"]["n_kv_heads"] == 3 and info["tensor_types"] == {"Q4_1": 210, "F32": 61, "Q8_0": 1}


def test_model_fetch_prints_cached_path(model_path):
    r = tl("model", "fetch")
    assert r.returncode == 0 and Path(r.stdout.strip()) == model_path
    r = tl("model", "fetch", "gpt-17")
    assert r.returncode == 1 and r.stderr.strip().startswith("tl: error: unknown model 'gpt-17'")


def test_model_list(model_path):
    r = tl("model", "list", env={"TL_MODEL_CACHE": str(model_path.parent)})
    assert r.returncode == 0
    assert r.stdout.startswith("smollm2-135m-instruct (default):") and f"cached at {model_path}" in r.stdout
    r = tl("model", "list", env={"TL_MODEL_CACHE": "/nonexistent/cache"})
    assert "not downloaded" in r.stdout


def test_bad_model_files_give_one_line_errors(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 8)
    for args in (("model", "info", str(bad)), ("generate", "--model", str(bad), "--prompt", "hi"),
                 ("generate", "--model", str(tmp_path / "nope.gguf"), "--prompt", "hi"),
                 ("chat", "--model", str(bad), "--prompt", "hi")):
        r = tl(*args)
        assert r.returncode == 1, args
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tl: error: "), r.stderr
        assert "Traceback" not in r.stderr


def test_generate_json_greedy_ids_raw(model_path, reference):
    p = _prompt(reference, "raw_capital")
    r = tl("generate", "--model", str(model_path), "--prompt", p["prompt_text"], "--raw", "--json",
           "--max-tokens", "48", "--ignore-eos")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["prompt_ids"] == p["prompt_ids"]
    assert out["ids"] == p["greedy_ids"]
    assert out["text"] == _decode_skip_special(model_path, p["greedy_ids"])


def _decode_skip_special(model_path, ids):
    from tensorlogic.models.tokenizer import Tokenizer

    return Tokenizer.from_file(model_path).decode(ids, skip_special=True)


def test_generate_chat_with_poison_and_delay(model_path, reference):
    p = _prompt(reference, "chat_capital")
    r = tl("generate", "--model", str(model_path), "--prompt", p["messages"][0]["content"], "--json",
           "--max-tokens", "48", "--ignore-eos", env={"TL_DEBUG_POISON": "1", "TL_DEBUG_DELAY_US": "200"})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["prompt_ids"] == p["prompt_ids"]
    assert out["ids"] == p["greedy_ids"]


def test_generate_streams_and_stops_at_eos(model_path, reference):
    p = _prompt(reference, "chat_capital")
    r = tl("generate", "--prompt", p["messages"][0]["content"], "--max-tokens", "48",
           env={"TL_MODEL_CACHE": str(model_path.parent)})  # no --model: the default model
    assert r.returncode == 0, r.stderr
    assert r.stdout == p["greedy_text_up_to_eos"] + "\n"


def test_dump_logits_and_max_tokens_zero(model_path, reference, tmp_path):
    p = _prompt(reference, "raw_capital")
    dump = tmp_path / "logits.npy"
    r = tl("generate", "--model", str(model_path), "--prompt", p["prompt_text"], "--raw", "--json",
           "--max-tokens", "0", "--dump-logits", str(dump))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"prompt_ids": p["prompt_ids"], "ids": [], "text": "",
                                    "stopped_by": "max_tokens", "interrupted": False}
    logits = np.load(dump)
    assert logits.dtype == np.float32 and logits.shape == (49152,)
    assert np.abs(logits - np.load(REFERENCE_DIR / p["last_logits_npy"])).max() < 1e-3


def test_raw_mode_recognises_special_tokens(model_path):
    r = tl("generate", "--model", str(model_path), "--raw", "--json", "--max-tokens", "0",
           "--prompt", "<|im_start|>user\nHello<|im_end|>\n")
    assert json.loads(r.stdout)["prompt_ids"] == [1, 4093, 198, 19556, 2, 198]


def test_sampling_is_seeded(model_path):
    args = ("generate", "--model", str(model_path), "--prompt", "Tell me a story.", "--json",
            "--max-tokens", "12", "--temperature", "0.9", "--top-k", "40", "--top-p", "0.95")
    a = json.loads(tl(*args, "--seed", "5").stdout)["ids"]
    b = json.loads(tl(*args, "--seed", "5").stdout)["ids"]
    assert a == b and len(a) >= 1


def test_bad_sampling_arguments(model_path):
    r = tl("generate", "--model", str(model_path), "--prompt", "x", "--top-p", "0")
    assert r.returncode == 2 and "--top-p: must be in (0, 1]" in r.stderr
    r = tl("generate", "--model", str(model_path), "--prompt", "x", "--max-tokens", "-3")
    assert r.returncode == 2 and "must be >= 0" in r.stderr


def test_chat_prompt_answers_once(model_path):
    r = tl("chat", "--model", str(model_path), "--prompt", "What is the capital of France?")
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout


def test_chat_multi_turn_from_stdin_until_eof(model_path):
    r = tl("chat", "--model", str(model_path), "--max-tokens", "24",
           stdin="What is the capital of France?\nAnd of Italy?\n")
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    assert len(lines) == 2 and "Paris" in lines[0] and "Rome" in lines[1]


def test_example_chat_program(model_path):
    r = tl("run", "--memory-check", "examples/chat.tl", env={"TL_MODEL": str(model_path)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "The capital of France is Paris." in r.stdout
    assert "Rome" in r.stdout
    assert "memory check passed: 0 live bytes" in r.stdout


def test_tiny_spm_model_generates(tmp_path):
    from tensorlogic.models.testing import write_tiny_llama

    path = write_tiny_llama(tmp_path / "spm.gguf", tokenizer="llama", chat_template=None)
    r = tl("generate", "--model", str(path), "--prompt", "Hello world", "--json", "--max-tokens", "4",
           "--ignore-eos")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["prompt_ids"][0] == 1 and len(out["ids"]) == 4


def test_chat_ctrl_c_stops_a_reply_and_chat_goes_on(model_path):
    import select
    import signal
    import time

    env = _env()
    proc = subprocess.Popen([sys.executable, "-m", "tensorlogic", "chat", "--model", str(model_path),
                             "--max-tokens", "1500"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=ROOT)
    try:
        proc.stdin.write(b"Write a very long story about a dragon who learns to cook.\n")
        proc.stdin.flush()
        got = b""
        deadline = time.time() + 120
        while len(got) < 40 and time.time() < deadline:  # the reply is streaming
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                got += os.read(proc.stdout.fileno(), 4096)
        assert len(got) >= 40, "no streamed output"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(b"What is the capital of France?\n", timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = (got + out).decode()
    assert proc.returncode == 0, err.decode()
    assert "[stopped]" in text
    assert "Paris" in text.split("[stopped]", 1)[1]
    assert "Traceback" not in err.decode()


# ------------------------------------------------------------------------------ Gemma 3 270M


@pytest.fixture(scope="module")
def gemma3_path() -> Path:
    if os.environ.get("TL_SKIP_REAL_MODEL") == "1":
        pytest.skip("TL_SKIP_REAL_MODEL=1")
    from tensorlogic.models.errors import ModelError
    from tensorlogic.models.fetch import fetch_model

    try:
        return fetch_model("gemma-3-270m", progress=False)
    except ModelError as e:
        pytest.skip(f"gemma-3-270m is not cached and cannot be fetched: {e}")


def test_gemma3_by_name_generates_the_reference_raw(gemma3_path):
    ref_path = REFERENCE_DIR / "gemma3.json"
    if not ref_path.is_file():
        pytest.skip(f"no reference outputs at {REFERENCE_DIR}")
    p = json.loads(ref_path.read_text())["prompts"][0]
    n = p["first_gap_below_0.01"]
    r = tl("generate", "--model", "gemma-3-270m", "--raw", "--prompt", p["prompt_text"], "--json",
           "--max-tokens", str(n), "--ignore-eos", env={"TL_MODEL_CACHE": str(gemma3_path.parent)})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["prompt_ids"] == p["prompt_ids"] and out["ids"] == p["greedy_ids"][:n]
    listed = tl("model", "list", env={"TL_MODEL_CACHE": str(gemma3_path.parent)}).stdout
    assert "gemma-3-270m: Gemma 3 270M (base), Q4_K_M, 253 MB" in listed and f"cached at {gemma3_path}" in listed
    info = tl("model", "info", "gemma-3-270m", env={"TL_MODEL_CACHE": str(gemma3_path.parent)}).stdout
    for needle in ("architecture:  gemma3", "heads:         4 query, 1 key/value (head dim 256)",
                   "every 6th layer global, the others over the last 512 positions (rope base 10000)",
                   "chat template: no"):
        assert needle in info


def test_model_without_chat_template_says_so_and_completes_raw(tmp_path):
    from tensorlogic.models.testing import write_tiny_gemma3

    path = write_tiny_gemma3(tmp_path / "base.gguf")
    r = tl("chat", "--model", str(path), "--max-tokens", "3",
           "--system", "Be brief.", stdin="Hello world\nThe capital\n")
    assert r.returncode == 0, r.stderr
    note = [line for line in r.stderr.splitlines() if "no chat template" in line]
    assert note == ["tl: tiny-gemma3-test has no chat template (a base model): each message is completed as "
                    "raw text, without history; --system is ignored"]
    assert len(r.stdout.splitlines()) == 2  # one reply per line typed
    g = tl("generate", "--model", str(path), "--prompt", "Hello world", "--json", "--max-tokens", "2",
           "--ignore-eos")
    raw = tl("generate", "--model", str(path), "--prompt", "Hello world", "--json", "--max-tokens", "2",
             "--ignore-eos", "--raw")
    assert g.returncode == 0 and "completing the prompt as raw text" in g.stderr
    assert raw.stderr == "" and json.loads(g.stdout) == json.loads(raw.stdout)
