"""The llama-cli / ollama style pieces of `tl generate`, `tl chat` and `tl model` (issue 18):
prompts from standard input or a file, --system, --stop, --repeat-penalty, --min-p, --threads,
the chat /commands and its context-full notice, and what `tl model info/list` report. Separate
processes with the real SmolLM2 model and few tokens; the sampler's arithmetic is checked
directly."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorlogic._core")

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "What is the capital of France?"


def _env() -> dict:
    import tensorlogic

    env = dict(os.environ)
    parent = str(Path(tensorlogic.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [parent, env.get("PYTHONPATH", "")] if p)
    return env


def tl(*args: str, stdin: str = "", env: dict | None = None, cwd: Path = ROOT):
    full = _env()
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "tensorlogic", *args], capture_output=True, text=True,
                          input=stdin, env=full, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def model() -> str:
    if os.environ.get("TL_SKIP_REAL_MODEL") == "1":
        pytest.skip("TL_SKIP_REAL_MODEL=1")
    from tensorlogic.models.fetch import fetch_model

    return str(fetch_model(progress=False))


def _json(r) -> dict:
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def plain(model) -> dict:
    return _json(tl("generate", "--model", model, "--prompt", QUESTION, "--json", "--max-tokens", "8"))


# ------------------------------------------------------------------ tl generate


def test_prompt_from_stdin_and_from_a_file(model, plain, tmp_path):
    assert _json(tl("generate", "--model", model, "--prompt", "-", "--json", "--max-tokens", "8",
                    stdin=QUESTION + "\n")) == plain  # `echo ... |`: the final newline is not part of it
    f = tmp_path / "prompt.txt"
    f.write_text(QUESTION)
    assert _json(tl("generate", "--model", model, "--prompt-file", str(f), "--json", "--max-tokens", "8")) == plain
    for args, stdin, needle in (
            (["--prompt", "-"], "  \n", "the prompt from standard input is empty"),
            (["--prompt-file", str(tmp_path / "missing.txt")], "", "No such file"),
            (["--prompt-file", str(tmp_path)], "", "is a directory"),
            (["--prompt", "x", "--prompt-file", str(f)], "", "not allowed with argument")):
        r = tl("generate", "--model", model, *args, stdin=stdin)
        assert r.returncode == 2 and needle in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"caf\xe9")
    r = tl("generate", "--model", model, "--prompt-file", str(bad))
    assert r.returncode == 2 and "not UTF-8" in r.stderr


def test_system_message_goes_through_the_template(model, plain):
    out = _json(tl("generate", "--model", model, "--prompt", QUESTION, "--system", "Answer in French.",
                   "--json", "--max-tokens", "8"))
    from tensorlogic.models.tokenizer import Tokenizer

    prompt = Tokenizer.from_file(model).decode(out["prompt_ids"])
    assert prompt.startswith("<|im_start|>system\nAnswer in French.<|im_end|>") and QUESTION in prompt
    assert out["prompt_ids"] != plain["prompt_ids"]
    r = tl("generate", "--model", model, "--prompt", "x", "--raw", "--system", "y")
    assert r.returncode == 2 and "--system" in r.stderr


def test_stop_strings_cut_the_reply(model, plain):
    assert "Paris" in plain["text"]
    out = _json(tl("generate", "--model", model, "--prompt", QUESTION, "--json", "--max-tokens", "8",
                   "--stop", "nowhere", "--stop", "Paris"))
    assert out["text"] == plain["text"].split("Paris")[0] and out["stopped_by"] == "stop"
    assert out["ids"] == plain["ids"][:len(out["ids"])] and len(out["ids"]) < len(plain["ids"])
    streamed = tl("generate", "--model", model, "--prompt", QUESTION, "--max-tokens", "8", "--stop", "Paris")
    assert streamed.returncode == 0 and streamed.stdout == plain["text"].split("Paris")[0] + "\n"
    # a stop string across tokens; one that only begins to match is held back, then printed whole
    spans = tl("generate", "--model", model, "--prompt", QUESTION, "--max-tokens", "8", "--stop", "ital of Fr")
    assert spans.stdout == plain["text"].split("ital of Fr")[0] + "\n"
    partial = tl("generate", "--model", model, "--prompt", QUESTION, "--max-tokens", "8", "--stop", "Paris!")
    assert partial.returncode == 0 and partial.stdout == plain["text"] + "\n"
    r = tl("generate", "--model", model, "--prompt", "x", "--stop", "")
    assert r.returncode == 2 and "must not be empty" in r.stderr


def test_repeat_penalty_and_min_p(model):
    args = ("generate", "--model", model, "--raw", "--prompt", "one one one one one one", "--json",
            "--max-tokens", "10")
    base = _json(tl(*args))
    assert _json(tl(*args, "--repeat-penalty", "1.0", "--min-p", "0.5")) == base  # greedy: bit for bit
    penalized = _json(tl(*args, "--repeat-penalty", "1.5"))
    assert penalized["ids"] != base["ids"]
    assert len(set(penalized["ids"])) > len(set(base["ids"]))  # fewer repeats
    sampled = [_json(tl(*args, "--temperature", "1.0", "--min-p", "0.2", "--seed", "7"))["ids"] for _ in range(2)]
    assert sampled[0] == sampled[1]
    for flag, value, needle in (("--repeat-penalty", "0", "must be a positive number"),
                                ("--repeat-penalty", "-1", "must be >= 0"),
                                ("--min-p", "1.5", "must be in [0, 1]"), ("--min-p", "x", "expected a number")):
        r = tl("generate", "--model", model, "--prompt", "x", flag, value)
        assert r.returncode == 2 and needle in r.stderr, (flag, value, r.stderr)


def test_threads_set_the_cpu_kernel_threads(model, plain):
    r = tl("generate", "--model", model, "--prompt", QUESTION, "--json", "--max-tokens", "8", "--threads", "1",
           "--stats")
    assert _json(r) == plain
    assert r.stderr.startswith("[1 thread | "), r.stderr
    r = tl("chat", "--model", model, "--prompt", "Hi", "--max-tokens", "2", "--threads", "3", "--stats")
    assert r.returncode == 0 and "[3 threads | " in r.stderr, r.stderr
    for value in ("0", "-2", "many", "5000"):
        r = tl("generate", "--model", model, "--prompt", "x", "--threads", value)
        assert r.returncode == 2 and "--threads" in r.stderr, (value, r.stderr)


def test_sampler_repeat_penalty_and_min_p_arithmetic():
    from tensorlogic.builtins.sampling import REPEAT_LAST_N, apply_repeat_penalty, choose_token

    x = np.array([2.0, -1.0, 0.5, 3.0])
    np.testing.assert_array_equal(apply_repeat_penalty(x, [0, 1, 1], 2.0), [1.0, -2.0, 0.5, 3.0])
    np.testing.assert_array_equal(apply_repeat_penalty(x, [0, 1], 1.0), x)
    assert REPEAT_LAST_N == 64
    rng = np.random.default_rng(0)
    # min_p 0.5 keeps only the logits within log(2) of the best (3.0): ids 3 and 1
    logits = np.array([0.0, 2.6, 1.0, 3.0])
    drawn = {choose_token(logits, 1.0, 0, 1.0, rng, min_p=0.5) for _ in range(200)}
    assert drawn == {1, 3}
    assert {choose_token(logits, 1.0, 0, 1.0, rng) for _ in range(400)} == {0, 1, 2, 3}
    with pytest.raises(Exception, match="min_p"):
        choose_token(logits, 1.0, 0, 1.0, rng, min_p=2.0)


def test_token_sampler_takes_min_p_and_repeat_penalty_in_tl():
    import tensorlogic

    program = """
        let greedy = token_sampler(0.0, 0, 1.0, -1, 0.0, 4.0)
        let logits = from_array([[1.0, 3.0, 2.5, -1.0]])
        print([greedy.sample(logits), greedy.sample(logits), greedy.sample(logits)])
        let picky = token_sampler(1.0, 0, 1.0, 3, 0.9)
        let ids = []
        for i in range(30) { ids.push(picky.sample(logits)) }
        print(ids)
        """
    result = tensorlogic.run(program)
    assert result.error is None, result.error_text
    first, second = result.output.splitlines()
    # 3.0 / 4 = 0.75 after id 1 is chosen; then 2.5 / 4 = 0.625 after id 2; then 1.0 is the largest
    assert first == "[1, 2, 0]"
    assert set(json.loads(second)) == {1}  # min_p 0.9: only the best token (exp(-0.5) < 0.9) is kept
    bad = tensorlogic.run("let s = token_sampler(1.0, 0, 1.0, -1, 0.0, 0.0)")
    assert bad.error is not None and "repeat_penalty must be a positive number" in bad.error_text


# ------------------------------------------------------------------ tl chat


def test_chat_commands(model, tmp_path):
    saved = tmp_path / "conv.json"
    script = "\n".join([QUESTION, "/stats", f"/save {saved}", "/clear", "/stats", "/system Be brief.",
                        f"/load {saved}", "/bogus", f"/load {tmp_path / 'missing.json'}", "/help", ""])
    r = tl("chat", "--model", model, "--max-tokens", "8", stdin=script)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith("The capital of France is")
    err = r.stderr
    assert "[conversation: 2 turns, " in err and "[conversation: 0 turns, 0 of 2048 context tokens]" in err
    assert f"[saved 2 messages to {saved}]" in err and "[conversation cleared]" in err
    assert "[system message set: Be brief.]" in err and f"[loaded 2 messages from {saved}]" in err
    assert "tl: error: unknown command /bogus" in err and "cannot read" in err and "/save FILE" in err
    data = json.loads(saved.read_text())
    assert [m["role"] for m in data["messages"]] == ["user", "assistant"]
    assert data["messages"][0]["content"] == QUESTION
    assert data["messages"][1]["content"] == r.stdout.splitlines()[0]


@pytest.mark.parametrize("command", ["/exit", "/quit"])
def test_chat_exit_command_ends_the_chat(model, command):
    r = tl("chat", "--model", model, "--max-tokens", "4", stdin=f"/stats\n{command}\n{QUESTION}\n/bogus\n")
    assert r.returncode == 0, r.stderr
    assert "[conversation: 0 turns" in r.stderr  # the command before it ran
    assert r.stdout == "" and "unknown command" not in r.stderr  # nothing after it did


def test_chat_load_then_continue_and_system(model, tmp_path):
    conv = tmp_path / "c.json"
    conv.write_text(json.dumps({"messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "The capital of France is Paris."}]}))
    bad = tmp_path / "bad.json"
    bad.write_text('{"messages": [{"role": "wizard", "content": "x"}]}')
    r = tl("chat", "--model", model, "--max-tokens", "12", stdin=f"/load {bad}\n/load {conv}\nAnd of Italy?\n")
    assert r.returncode == 0, r.stderr
    assert "is not a saved conversation" in r.stderr and "[loaded 3 messages" in r.stderr
    assert "Rome" in r.stdout


def test_chat_says_when_the_context_fills(model):
    r = tl("chat", "--model", model, "--max-tokens", "10", "--context", "80",
           stdin="What is the capital of France?\nAnd of Italy?\nAnd of Spain?\n")
    assert r.returncode == 0, r.stderr
    notes = [line for line in r.stderr.splitlines() if "context full" in line]
    assert notes and notes[0] == ("[context full (80 tokens): dropped the oldest exchange; "
                                  "1 earlier exchange kept]"), r.stderr
    assert len(r.stdout.splitlines()) == 3 and "Madrid" in r.stdout.splitlines()[2]


# ------------------------------------------------------------------ tl model


def test_model_info_reports_parameters_quantization_context_and_template(model):
    r = tl("model", "info", model)
    assert r.returncode == 0, r.stderr
    for needle in ("parameters:    134.5M (134,515,008)", "quantization:  Q4_1 78.9%, Q8_0 21.0%, F32 <0.1%",
                   "context:       8192", "chat template: yes"):
        assert needle in r.stdout, r.stdout
    info = json.loads(tl("model", "info", "--json", model).stdout)
    assert info["parameters"] == 134515008 and sum(info["parameters_by_type"].values()) == info["parameters"]


def test_model_list_shows_sizes_and_other_cached_files(model, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "mine.gguf").write_bytes(b"GGUF" + b"\0" * 2_000_000)
    r = tl("model", "list", env={"TL_MODEL_CACHE": str(cache)})
    assert r.returncode == 0, r.stderr
    assert ("not downloaded (98.4 MB to fetch: tl model fetch smollm2-135m-instruct)" in r.stdout
            and "not downloaded (253.1 MB to fetch: tl model fetch gemma-3-270m)" in r.stdout), r.stdout
    assert f"mine.gguf: a GGUF file in the cache (2.0 MB); use --model {cache / 'mine.gguf'}" in r.stdout
    r = tl("model", "list", env={"TL_MODEL_CACHE": str(Path(model).parent)})
    assert f"cached at {model} (98.4 MB)" in r.stdout
