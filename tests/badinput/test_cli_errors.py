"""The `tl` command given bad input: each case prints one clear line (no traceback) and exits with the
status docs/exit-codes.md documents: 1 a TL or model error, 2 a usage error (bad option, missing,
directory, unreadable or non-UTF-8 file), 3 a leak found by --memory-check (tests/e2e/test_failures.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def tl(*args: str, cwd: Path = ROOT):
    import tensorlogic

    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(tensorlogic.__file__).resolve().parent.parent)
    return subprocess.run([sys.executable, "-m", "tensorlogic", *args], capture_output=True, text=True,
                          env=env, timeout=120, cwd=cwd, stdin=subprocess.DEVNULL)


def one_line(r) -> str:
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("tl")]   # the usage text aside
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_missing_file(tmp_path):
    r = tl("run", str(tmp_path / "nope.tl"))
    assert r.returncode == 2 and one_line(r) == f"tl: {tmp_path / 'nope.tl'}: no such file"


def test_directory_instead_of_file(tmp_path):
    r = tl("run", str(tmp_path))
    assert r.returncode == 2 and one_line(r) == f"tl: {tmp_path}: is a directory, not a .tl file"


def test_unreadable_file(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("running as root: permission bits do not stop root from reading a file")
    p = tmp_path / "secret.tl"
    p.write_text("main { print(1) }")
    p.chmod(0)
    r = tl("run", str(p))
    assert r.returncode == 2 and one_line(r) == f"tl: {p}: permission denied"


def test_not_utf8_file(tmp_path):
    p = tmp_path / "latin1.tl"
    p.write_bytes(b"main { print(\"caf\xe9\") }")
    r = tl("run", str(p))
    assert r.returncode == 2 and one_line(r) == f"tl: {p}: not UTF-8 text (bad byte at offset 17)"


@pytest.mark.parametrize("args, needle", [
    (("run", "--bogus", "x.tl"), "unrecognized arguments: --bogus"),
    (("--bogus",), "unrecognized arguments: --bogus"),
    (("run",), "the following arguments are required: file"),
    (("frobnicate",), "invalid choice: 'frobnicate'"),
    (("run", "--seed", "abc", "x.tl"), "--seed must be a whole number, got 'abc'"),
    (("generate", "--max-tokens", "many"), "expected an integer, got 'many'"),
])
def test_usage_errors(args, needle):
    r = tl(*args)
    assert r.returncode == 2 and needle in one_line(r)


def test_model_that_is_not_gguf(tmp_path):
    p = tmp_path / "notes.gguf"
    p.write_text("these are my notes, not a model\n")
    r = tl("generate", "--model", str(p), "--prompt", "hi")
    assert r.returncode == 1
    line = one_line(r)
    assert line.startswith("tl: error: ") and str(p) in line and "not a valid GGUF file" in line


def test_model_that_is_not_gguf_from_a_program(tmp_path):
    p = tmp_path / "notes.gguf"
    p.write_text("these are my notes, not a model\n")
    prog = tmp_path / "load.tl"
    prog.write_text(f'main {{ let m = load_model("{p}") }}\n')
    r = tl("run", str(prog))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert str(p) in r.stderr and "not a valid GGUF file" in r.stderr


def test_tl_errors_exit_1_and_point_at_the_line(tmp_path):
    prog = tmp_path / "bad.tl"
    prog.write_text("main {\n    let x = ones([2, 3]) + ones([4])\n}\n")
    r = tl("run", str(prog))
    assert r.returncode == 1 and "bad.tl:2:" in r.stderr and "[2, 3] and [4]" in r.stderr
    prog.write_text("main {\n    let x = (1 +\n}\n")
    r = tl("run", str(prog))
    assert r.returncode == 1 and "bad.tl:3:" in r.stderr and "Traceback" not in r.stderr


def test_exit_codes_are_documented():
    from tensorlogic.apps import console
    from tensorlogic.cli import build_parser

    text = (ROOT / "docs" / "exit-codes.md").read_text()
    codes = {v for k, v in vars(console).items() if k.startswith("EXIT_")}
    assert codes == {0, 1, 2, 3, 4, 130}
    for code in codes:
        assert f"| {code} |" in text, code
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, parser in sub.choices.items():
        nested = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
        for full in ([f"{name} {n}" for n in nested[0].choices] if nested else [name]):
            assert f"`tl {full}" in text, f"tl {full} is missing from docs/exit-codes.md"


# ---------------------------------------------------------------- issue 14.7: one line, not a traceback


def _tl_fds(args, close_stdin=False, close_stdout=False):
    """Runs tl with stdin and/or stdout closed (the shell's `<&-` / `>&-`)."""
    import tensorlogic

    env = dict(os.environ, PYTHONPATH=str(Path(tensorlogic.__file__).resolve().parent.parent))
    redirect = (" <&-" if close_stdin else "") + (" >&-" if close_stdout else "")
    cmd = " ".join(f"'{a}'" for a in [sys.executable, "-m", "tensorlogic", *args]) + redirect
    return subprocess.run(["bash", "-c", cmd], capture_output=not close_stdout, text=True, env=env,
                          timeout=120, stderr=subprocess.PIPE if close_stdout else None)


def test_closed_stdout_is_one_line(tmp_path):
    f = tmp_path / "p.tl"
    f.write_text('print("hi")\n')
    r = _tl_fds(["run", str(f)], close_stdout=True)
    assert r.returncode == 2 and one_line(r) == "tl: error: standard output is closed", r.stderr


def test_closed_stdin_reads_as_empty_input(tmp_path):
    from tensorlogic.models.testing import write_tiny_llama

    f = tmp_path / "p.tl"
    f.write_text('let s = input("name? ")\nprint("got [" + s + "]")\n')
    r = _tl_fds(["run", str(f)], close_stdin=True)
    assert r.returncode == 0 and "got []" in r.stdout and "Traceback" not in r.stderr, r.stderr
    model = write_tiny_llama(tmp_path / "tiny.gguf")
    r = _tl_fds(["chat", "--model", str(model)], close_stdin=True)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr


@pytest.mark.parametrize("args", [["run", "--seed", "-5", "X"], ["repl", "--seed", "-1"],
                                  ["generate", "--seed", "-5", "--prompt", "x"],
                                  ["run", "--seed", "abc", "X"], ["run", "--seed", str(2**64), "X"]])
def test_bad_seed_is_a_usage_error(args, tmp_path):
    f = tmp_path / "p.tl"
    f.write_text('print("hi")\n')
    r = tl(*[str(f) if a == "X" else a for a in args])
    assert r.returncode == 2 and "--seed must be" in one_line(r), r.stderr


@pytest.mark.parametrize("command", ["run", "check"])
def test_long_expressions_run_and_a_too_deep_one_is_one_line(tmp_path, command):
    # 12,000 terms compile and run (the sum is exact); 200,000 exceed the compiler's depth and are one
    # TL error, never a RecursionError traceback or an internal error.
    f = tmp_path / "deep.tl"
    f.write_text("main { print(" + "+".join(["1"] * 12000) + ") }\n")
    r = tl(command, str(f))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ("12000" if command == "run" else f"{f}: ok"), r.stdout
    f.write_text("main { print(" + "+".join(["1"] * 200000) + ") }\n")
    r = tl(command, str(f))
    assert r.returncode == 1 and "nested too deeply" in r.stderr and "internal error" not in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_deeply_nested_list_literal_is_linear_and_one_line(tmp_path):
    # 4,000 levels took minutes (every level converted its whole sub-literal) and then reported a
    # "ragged" literal; now it is a quick, accurate error.
    f = tmp_path / "nest.tl"
    f.write_text("main { let x = " + "[" * 4000 + "1" + "]" * 4000 + "\nprint(x) }\n")
    r = tl("run", str(f))
    assert r.returncode == 1 and "nested 4000 levels deep" in r.stderr, r.stderr
    f.write_text("main { let x = " + "[" * 8 + "1" + "]" * 8 + "\nprint(shape(x)) }\n")
    r = tl("run", str(f))
    assert r.returncode == 0 and r.stdout.strip() == "[1, 1, 1, 1, 1, 1, 1, 1]", r.stderr


@pytest.mark.parametrize("args", [
    ("generate", "--prompt", "x", "--temperature", "-1"),
    ("generate", "--prompt", "x", "--top-p", "1.5"),
    ("generate", "--prompt", "x", "--context", "0"),
    ("chat", "--context", "0"),
    ("generate", "--prompt", "x", "--backend", "metal"),
    ("chat", "--backend", "metal"),
    ("run", "--backend", "metal", "examples/hello.tl"),
    ("repl", "--backend", "metal"),
])
def test_invalid_option_values_and_unavailable_backends_are_usage_errors(args):
    import tensorlogic._core as core
    if "metal" in args and "metal" in core.available_backends():
        pytest.skip("this build has a Metal backend")
    r = tl(*args)
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("tl: ") and "metal: metal:" not in line
