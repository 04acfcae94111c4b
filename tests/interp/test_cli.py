"""The `tl` command: exit codes (0 ok, 1 TL error or failed test, 2 usage, 3 leak), one-line errors for
bad files, test/bench/check/repl/help subcommands, and no Python traceback for TL errors."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import tensorlogic

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# the subprocess imports the same tensorlogic as this process (the source tree or the installed one)
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(tensorlogic.__file__)))
ENV = dict(os.environ, PYTHONPATH=PACKAGE_PARENT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def tl(*args, stdin: str | None = None, timeout: int = 120):
    return subprocess.run([sys.executable, "-m", "tensorlogic", *args], capture_output=True, text=True, env=ENV,
                          input=stdin, timeout=timeout)


@pytest.fixture()
def program(tmp_path):
    def write(text: str, name: str = "p.tl"):
        path = tmp_path / name
        path.write_text(text)
        return str(path)
    return write


def test_run_ok_and_runtime_error_exit_codes(program):
    ok = tl("run", program('main { print("hi") }'))
    assert (ok.returncode, ok.stdout) == (0, "hi\n")
    bad = tl("run", program('fn f(x) { x @ x }\nmain {\n f(ones([2, 3])) }'))
    assert bad.returncode == 1
    assert "p.tl:1:13: error: matmul" in bad.stderr  # at the `@` and "TL traceback" in bad.stderr
    assert "Traceback (most recent call last)" not in bad.stderr


def test_syntax_error_exit_code_and_format(program):
    proc = tl("run", program("let x = (1 +\n"))
    assert proc.returncode == 1
    first = proc.stderr.splitlines()[0]
    assert "p.tl:1:" in first and "error: unexpected end of file" in first


@pytest.mark.parametrize("kind", ["missing", "directory", "not_utf8"])
def test_bad_files_give_one_line_and_exit_2(tmp_path, kind):
    if kind == "missing":
        path = str(tmp_path / "nope.tl")
    elif kind == "directory":
        path = str(tmp_path)
    else:
        path = str(tmp_path / "bin.tl")
        with open(path, "wb") as f:
            f.write(b"main { \xff\xfe }")
    proc = tl("run", path)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("tl: ")


def test_usage_error_exit_2():
    assert tl("run").returncode == 2
    assert tl("frobnicate").returncode == 2
    assert tl("run", "--seed", "x", "f.tl").returncode == 2


def test_test_mode_reports_each_test_and_exits_1_on_failure(program):
    path = program("fn add(a, b) { a + b }\ntest adds { assert_eq(add(1, 2), 3) }\n"
                   "test breaks { assert_eq(add(1, 1), 3) }\nmain { print(\"main must not run\") }")
    proc = tl("run", "--test", path)
    assert proc.returncode == 1
    assert "test adds ... ok" in proc.stdout and "test breaks ... FAILED" in proc.stdout
    assert proc.stdout.rstrip().endswith("1 passed, 1 failed")
    assert "main must not run" not in proc.stdout
    ok = tl("test", program("test one { assert(true) }", "q.tl"))
    assert ok.returncode == 0 and "1 passed, 0 failed" in ok.stdout


def test_bench_mode_prints_timings(program):
    proc = tl("run", "--bench", program("bench small_matmul { let x = ones([8, 8]) @ ones([8, 8]) }"))
    assert proc.returncode == 0 and proc.stdout.startswith("bench small_matmul: mean ")


def test_memory_check_passes_and_prints_the_ledger(program):
    proc = tl("run", "--memory-check", program("let w = ones([64, 64])\nmain { let y = w @ w }"))
    assert proc.returncode == 0
    assert "live_bytes" in proc.stdout and "memory check passed: 0 live bytes" in proc.stdout


def test_seed_makes_sampling_reproducible(program):
    path = program("main { print(rand([3]), temperature_sample([1.0, 1.0, 1.0], 1.0)) }")
    assert tl("run", "--seed", "4", path).stdout == tl("run", "--seed", "4", path).stdout


def test_backend_option(program):
    proc = tl("run", "--backend", "cpu", program('main { print(sum(ones([3]))) }'))
    assert (proc.returncode, proc.stdout) == (0, "3.0\n")


def test_debug_shows_the_python_traceback(program):
    proc = tl("run", "--debug", program("main { 1 / 0 }"))
    assert proc.returncode == 1 and "division by zero" in proc.stderr


def test_check_reports_static_errors_without_running(program):
    path = program('print("side effect")\nfn f() {\n  break\n}')
    proc = tl("check", path)
    assert proc.returncode == 1 and "p.tl:3:3: error: 'break' outside a loop" in proc.stderr
    assert "side effect" not in proc.stdout
    path = program("main {\n undefined_fn(1)\n print(len(1, 2))\n let z = nowhere }", "q.tl")
    proc = tl("check", path)
    assert proc.returncode == 1
    assert "q.tl:2:2: error: undefined function 'undefined_fn'" in proc.stderr
    assert "len takes 1 argument, got 2" in proc.stderr
    assert "undefined name 'nowhere'" in proc.stderr
    assert tl("check", program("fn f(x) { x }\nmain { f(1) }", "r.tl")).returncode == 0


def test_repl_with_piped_input_keeps_bindings_and_survives_errors():
    proc = tl("repl", stdin="let x = 2\nfn sq(a) {\n  a * a\n}\nsq(x)\nnope\n:vars\nx + 1\n:quit\nprint(99)\n")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[0] == "4"
    assert any("undefined name 'nope'" in line for line in lines)
    assert "x = 2" in lines and "fn sq" in lines
    assert lines[-1] == "3" and "99" not in lines


def test_help_and_version():
    proc = tl("help", "builtins")
    assert proc.returncode == 0 and "softmax(x, [dim])" in proc.stdout and "einsum" in proc.stdout
    one = tl("help", "rms_norm")
    assert one.returncode == 0 and one.stdout.startswith("rms_norm(x, w, [eps])")
    assert tl("help", "no_such_builtin").returncode == 1
    version = tl("--version")
    assert version.returncode == 0 and version.stdout.startswith("tl ")


def test_memory_check_exits_3_when_device_bytes_stay_live(tmp_path, monkeypatch, capsys):
    from tensorlogic import cli
    kept = []
    monkeypatch.setattr(cli, "_release_everything", lambda interp: kept.append(interp))
    path = tmp_path / "leak.tl"
    path.write_text("let w = ones([32, 32])\n")
    status = cli.main(["run", "--memory-check", str(path)])
    out = capsys.readouterr().out
    assert status == 3 and "memory check FAILED" in out
    kept[0].close()


def test_run_and_check_read_a_pipe_once():
    ran = tl("run", "/dev/stdin", stdin='print("from a pipe")\n')
    assert (ran.returncode, ran.stdout) == (0, "from a pipe\n")
    dash = tl("run", "-", stdin="print(1 + 1)\n")
    assert (dash.returncode, dash.stdout) == (0, "2\n")
    checked = tl("check", "-", stdin="print(undefined_thing)\n")
    assert checked.returncode == 1 and "<stdin>:1:7: error: undefined name 'undefined_thing'" in checked.stderr


def test_run_passes_the_arguments_after_the_file_to_args(program):
    proc = tl("run", program('print(args())\nprint(len(args()))'), "one", "--two", "3")
    assert (proc.returncode, proc.stdout) == (0, '["one", "--two", "3"]\n3\n')


def test_test_k_runs_only_the_matching_tests(program):
    path = program('test alpha_one { assert(true) }\ntest beta { assert(false) }\ntest alpha_two { assert(true) }\n')
    proc = tl("test", "-k", "alpha", path)
    assert proc.returncode == 0 and proc.stdout.splitlines() == [
        "test alpha_one ... ok", "test alpha_two ... ok", "2 passed, 0 failed"]
    assert tl("test", path).returncode == 1
    assert "no tests named like 'gamma'" in tl("test", "-k", "gamma", path).stdout


def test_repl_accepts_relations_facts_rules_and_queries():
    proc = tl("repl", stdin="relation Edge(a: node, b: node)\nEdge(1, 2)\nEdge(2, 3)\nPath(X, Y) <- Edge(X, Y)\n"
                            "Path(X, Z) <- Path(X, Y), Edge(Y, Z)\nPath(1, Y)?\nParent(alice, bob)\nParent(X, bob)?\n")
    assert proc.returncode == 0 and proc.stdout == "Path(1, Y): 2, 3\nParent(X, bob): alice\n", proc.stdout


def test_recursion_goes_deep_and_its_limit_is_configurable(program):
    path = program("fn d(n: int) -> int { if n == 0 { 0 } else { 1 + d(n - 1) } }\nprint(d(5000))\n"
                   "fn forever(n) { forever(n + 1) }\nforever(0)\n")
    deep = tl("run", path)
    assert deep.stdout == "5000\n" and deep.returncode == 1
    assert "maximum call depth (10000) exceeded in 'forever'" in deep.stderr
    limited = subprocess.run([sys.executable, "-m", "tensorlogic", "run", path], capture_output=True, text=True,
                             env=dict(ENV, TL_MAX_CALL_DEPTH="100"), timeout=120)
    assert limited.stdout == "" and "maximum call depth (100) exceeded in 'd'" in limited.stderr
