"""Issue 22.1: JSON from outside nested deeper than any real file is a one-line error, never a
segfault (Python's json parser recursed on the C stack under a recursion limit raised to ~252,000);
TL code keeps its 10,000-deep calls on deep threads (interp/deep_stack.py) while Python's limit stays
normal elsewhere, and the C stack of a deep thread holds the worst C recursion that limit allows."""
from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import tensorlogic
from tensorlogic.models import bounded_json

ROOT = Path(__file__).resolve().parents[2]
# the package under test (the installed one in CI, whose _core the source tree lacks)
ENV = dict(os.environ, PYTHONPATH=str(Path(tensorlogic.__file__).resolve().parent.parent))


def tl(*args, stdin="", timeout=300, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "tensorlogic", *args], capture_output=True, text=True,
                          input=stdin, env=ENV, timeout=timeout, cwd=cwd)


def _deep_safetensors(path: Path, depth: int = 200_000) -> Path:
    header = b'{"w": ' + b"[" * depth + b"]" * depth + b"}"  # an object, so the depth is what fails
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    return path


def test_bounded_loads_measures_depth_outside_strings_and_refuses_deep_or_large_input():
    assert bounded_json.loads('{"a": [1, {"b": "[[[[\\"{"}]}') == {"a": [1, {"b": '[[[["{'}]}
    assert bounded_json.nesting_depth(b'{"a": [1, {"b": "[[[[\\"{"}]}') == 3
    assert bounded_json.loads("[" * 128 + "]" * 128) is not None
    with pytest.raises(bounded_json.JsonLimitError, match="nests 129 levels deep"):
        bounded_json.loads("[" * 129 + "]" * 129)
    with pytest.raises(ValueError, match="nests 200000 levels"):
        bounded_json.loads(b"{" * 200_000)
    with pytest.raises(bounded_json.JsonLimitError, match="more than the 10 allowed"):
        bounded_json.loads('"' + "x" * 20 + '"', max_bytes=10)
    with pytest.raises(json.JSONDecodeError):  # bad JSON is still json's own error
        bounded_json.loads('{"a": }')


def test_tl_run_on_a_safetensors_file_with_a_deep_header_is_an_error_not_a_segfault(tmp_path):
    f = _deep_safetensors(tmp_path / "deep.safetensors")
    prog = tmp_path / "p.tl"
    prog.write_text(f'main {{ let m = load("{f.name}")\nprint(m) }}\n')  # short: the message is not elided
    r = tl("run", "p.tl", cwd=tmp_path)
    assert r.returncode == 1, (r.returncode, r.stderr[-300:])
    assert "is not a valid .safetensors file" in r.stderr and "nests 200001 levels deep" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) <= 3  # the error, its line, ^


def test_chat_load_of_a_deep_file_keeps_the_conversation(tmp_path):
    pytest.importorskip("tensorlogic._core")
    if os.environ.get("TL_SKIP_REAL_MODEL") == "1":
        pytest.skip("TL_SKIP_REAL_MODEL=1")
    from tensorlogic.models.fetch import fetch_model

    model = fetch_model(progress=False)
    deep = tmp_path / "deep.json"
    deep.write_text('{"messages": ' + "[" * 200_000 + "]" * 200_000 + "}")
    saved = tmp_path / "saved.json"
    r = tl("chat", "--model", str(model), "--max-tokens", "3",
           stdin=f"/system Be brief.\n/load {deep}\n/save {saved}\n/stats\n")
    assert r.returncode == 0, r.stderr[-500:]
    assert f"tl: error: {deep} is not a saved conversation: the JSON text nests 200001 levels deep" in r.stderr
    assert "[saved 1 messages" in r.stderr, r.stderr  # the system message set before it survived
    assert json.loads(saved.read_text())["messages"][0]["content"] == "Be brief."


def test_tl_code_gets_its_depth_while_the_callers_recursion_limit_stays_normal():
    from tensorlogic.interp import deep_stack
    from tensorlogic.interp.interpreter import Interpreter
    import io

    before = sys.getrecursionlimit()
    out = io.StringIO()
    interp = Interpreter(out=out)
    loaded = interp.load_source("fn d(n) { if n == 0 { 0 } else { 1 + d(n - 1) } }\nmain { print(d(9000)) }")
    interp.run_main(loaded)
    assert out.getvalue() == "9000\n"
    assert sys.getrecursionlimit() == before and before < 10_000
    assert deep_stack.run_deep(sys.getrecursionlimit) == deep_stack.RECURSION_LIMIT
    assert deep_stack.run_deep(deep_stack.on_deep_thread) and not deep_stack.on_deep_thread()
    with pytest.raises(ZeroDivisionError):  # exceptions reach the caller
        deep_stack.run_deep(lambda: 1 / 0)


def test_c_recursion_up_to_the_deep_limit_fits_the_deep_stack():
    # sorted() with a key that calls back is the heaviest C recursion measured (2.6 KB per level of
    # the limit): under the old scheme (limit ~252,000 on the 8 MiB main thread) it segfaulted at
    # about 3,000 levels; on a deep thread it must end in RecursionError at the limit.
    code = textwrap.dedent("""
        import json, sys
        from tensorlogic.interp import deep_stack
        def f(n):
            return sorted([n + 1], key=f)
        def nested():
            try:
                f(0)
            except RecursionError:
                print("RecursionError")
            print(len(json.loads("[" * 200000 + "]" * 200000)))
        deep_stack.run_deep(nested)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode == 0 and r.stdout.split() == ["RecursionError", "1"], (r.returncode, r.stderr[-300:])


def test_ctrl_c_stops_a_tl_program_running_on_its_deep_thread(tmp_path):
    prog = tmp_path / "spin.tl"
    prog.write_text('main { print("started")\nlet i = 0\nwhile true { i = i + 1 } }\n')
    p = subprocess.Popen([sys.executable, "-m", "tensorlogic", "run", str(prog)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
    try:
        assert p.stdout.readline() == "started\n"
        p.send_signal(signal.SIGINT)
        t0 = time.time()
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 130 and err.strip().splitlines()[-1] == "tl: interrupted", (p.returncode, err)
    assert "Traceback" not in err and time.time() - t0 < 10
