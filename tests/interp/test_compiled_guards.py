"""Compiled functions never replay stale host values (issue 21, item 2): a `@compile fn` that reads a
global array, map or struct records what it read (interp/compiled.py `_fingerprint`), and a program
changing it in place between calls (`append(L, t)`, `coeffs[0] = 5.0`, `m["k"] = 7.0`, a key added
to a map the body iterates, `cfg.scale = 3.0`) makes the next call record anew; a result that is an
argument is that argument, on the recording call and on replays, as uncompiled. Every case prints the
same as `TL_COMPILE=0`, also with the runtime's debug switches on (poisoned fresh buffers, delayed
kernels, no buffer cache), in-process and under the environment variables themselves."""
from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

core = pytest.importorskip("tensorlogic._core")

from tensorlogic.interp import compiled  # noqa: E402
from tensorlogic.interp.interpreter import Interpreter  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# name -> (program, what it prints with TL_COMPILE=0: the values NumPy gives for the same steps)
CASES = {
    "append_to_global_array": ("""
let L = [ones([2])]
@compile
fn f(x) {
    let s = x
    for t in L { s = s + t }
    s
}
print(f(zeros([2])))
print(f(zeros([2])))
append(L, ones([2]) * 10.0)
print(f(zeros([2])))
print(f(zeros([2])))
""", ["[1., 1.]", "[1., 1.]", "[11., 11.]", "[11., 11.]"]),
    "assign_global_array_element": ("""
let coeffs = [1.0, 2.0]
@compile
fn g(x) { x * coeffs[0] + coeffs[1] }
print(g(ones([2])))
print(g(ones([2])))
coeffs[0] = 5.0
print(g(ones([2])))
print(g(ones([2])))
""", ["[3., 3.]", "[3., 3.]", "[7., 7.]", "[7., 7.]"]),
    "replace_a_tensor_in_a_global_array": ("""
let Ws = [ones([2]), ones([2])]
@compile
fn f(x) { x + Ws[0] + Ws[1] }
print(f(zeros([2])))
print(f(zeros([2])))
let kept = Ws[1]  // the replaced tensor stays alive: only the guard can see the change
Ws[1] = ones([2]) * 5.0
print(f(zeros([2])))
print(f(zeros([2])))
""", ["[2., 2.]", "[2., 2.]", "[6., 6.]", "[6., 6.]"]),
    "assign_global_map_value": ("""
let m = map(["k"], [1.0])
@compile
fn h(x) { x * m["k"] }
print(h(ones([2])))
print(h(ones([2])))
m["k"] = 7.0
print(h(ones([2])))
print(h(ones([2])))
""", ["[1., 1.]", "[1., 1.]", "[7., 7.]", "[7., 7.]"]),
    "key_added_to_iterated_map": ("""
let m = map(["a"], [1.0])
@compile
fn total(x) {
    let s = x
    for k in m { s = s + m[k] }
    s
}
print(total(zeros([2])))
print(total(zeros([2])))
m["b"] = 100.0
print(total(zeros([2])))
print(total(zeros([2])))
""", ["[1., 1.]", "[1., 1.]", "[101., 101.]", "[101., 101.]"]),
    "assign_global_struct_field": ("""
struct Cfg { scale: float }
let cfg = Cfg { scale: 2.0 }
@compile
fn c(x) { x * cfg.scale }
print(c(ones([2])))
print(c(ones([2])))
cfg.scale = 3.0
print(c(ones([2])))
print(c(ones([2])))
""", ["[2., 2.]", "[2., 2.]", "[3., 3.]", "[3., 3.]"]),
    "map_argument_changed_in_place": ("""
@compile
fn h(x, m) { x * m["k"] }
let m = map(["k"], [2.0])
print(h(ones([2]), m))
print(h(ones([2]), m))
m["k"] = 4.0
print(h(ones([2]), m))
""", ["[2., 2.]", "[2., 2.]", "[4., 4.]"]),
    "typed_keys_of_a_global_map": ("""
let m = map([1], [2.0])
@compile
fn h(x) { x * m[1] }
print(h(ones([2])))
print(h(ones([2])))
m[1] = 2.5
print(h(ones([2])))
""", ["[2., 2.]", "[2., 2.]", "[2.5, 2.5]"]),
    "identity_aliases_its_argument": ("""
@compile
fn ident(x) { x }
let a = ones([2])
let b = ident(a)
a[0] = 9.0
print(b)
let a2 = ones([2])
let b2 = ident(a2)
a2[0] = 9.0
print(b2)
let a3 = ones([2])
let b3 = ident(a3)
b3[1] = 5.0
print(a3)
""", ["[9., 1.]", "[9., 1.]", "[1., 5.]"]),
    "views_of_arguments_and_globals_alias_them": ("""
let G = ones([2, 2])
@compile
fn first(x) { [x[0], G[1]] }
let a = ones([2, 2])
let r = first(a)
a[0, 0] = 9.0
G[1, 1] = 4.0
print(r[0])
print(r[1])
let a2 = ones([2, 2])
let r2 = first(a2)
a2[0, 0] = 7.0
print(r2[0])
""", ["[9., 1.]", "[1., 4.]", "[7., 1.]"]),
    "global_array_holding_itself": ("""
let L = [1.0]
append(L, L)
@compile
fn f(x) { x * L[0] }
print(f(ones([2])))
print(f(ones([2])))
L[0] = 3.0
print(f(ones([2])))
""", ["[1., 1.]", "[1., 1.]", "[3., 3.]"]),
    "returned_global_is_the_global": ("""
let W = ones([2])
@compile
fn getw(x) { [W, x + 1.0] }
let r = getw(zeros([2]))
let r2 = getw(zeros([2]))
W[0] = 3.0
print(r[0])
print(r2[0])
""", ["[3., 1.]", "[3., 1.]"]),
    "append_inside_the_body_to_a_global": ("""
let L = []
@compile
fn f(x) {
    append(L, x * 2.0)
    len(L)
}
f(ones([2]))
f(ones([2]))
f(ones([2]))
print(len(L))
print(L[2])
""", ["3", "[2., 2.]"]),
    "body_changes_its_argument_containers": ("""
@compile
fn addto(L, x) {
    append(L, x * 2.0)
    0
}
let L = []
addto(L, ones([1]))
addto(L, ones([1]))
print(len(L))
print(L)
struct S { a: float, b: int }
@compile
fn setf(s, x) {
    s.a = 4.0
    s.b = 2
    x
}
let s = S { a: 1.0, b: 1 }
setf(s, ones([1]))
print(s)
@compile
fn seti(L, x) {
    L[0] = 7.0
    x
}
let L2 = [1.0, 2.0]
seti(L2, ones([1]))
print(L2)
""", ["2", "[[2.], [2.]]", "S { a: 4.0, b: 2 }", "[7.0, 2.0]"]),
}


def _run(source: str) -> tuple[list[str], dict]:
    out = io.StringIO()
    interp = Interpreter(out=out)
    interp.run_top_level(interp.load_source(source, "t.tl"))
    stats = {cf.name: (cf.records, cf.replays) for cf in interp.compiled_functions}
    interp.close()
    return out.getvalue().splitlines(), stats


@pytest.fixture
def restore_debug():
    saved = core.get_debug()
    yield
    core.set_debug(poison=saved["poison"], delay_us=saved["delay_us"], no_cache=saved["no_cache"])


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "poison_delay_nocache"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_compiled_call_sees_host_values_changed_in_place(case, debug, restore_debug, monkeypatch):
    source, expected = CASES[case]
    if debug:
        core.set_debug(poison=True, delay_us=200, no_cache=True)
    monkeypatch.setattr(compiled, "ENABLED", False)
    eager, _ = _run(source)
    monkeypatch.setattr(compiled, "ENABLED", True)
    got, stats = _run(source)
    assert eager == expected
    assert got == expected
    if case not in ("append_inside_the_body_to_a_global", "body_changes_its_argument_containers",
                    "views_of_arguments_and_globals_alias_them"):
        # (those two run eagerly: they change host state)
        assert sum(replays for _, replays in stats.values()) >= 1, stats  # replays still happen


def test_a_changed_guard_records_again_and_says_why_under_debug(capsys, monkeypatch):
    monkeypatch.setattr(compiled, "DEBUG", True)
    _, stats = _run(CASES["assign_global_struct_field"][0])
    assert stats["c"] == (2, 2)  # recorded, replayed, recorded again after the change, replayed
    err = capsys.readouterr().err
    assert "c: the contents of global 'cfg' changed since it was recorded; recording again" in err


def test_unchanged_containers_keep_replaying():
    source = CASES["append_to_global_array"][0] + "\nprint(f(zeros([2])))\nprint(f(zeros([2])))\n"
    _, stats = _run(source)
    assert stats["f"] == (2, 4)


def test_under_the_debug_environment_variables():
    """The same cases in fresh processes with TL_DEBUG_POISON=1 TL_DEBUG_DELAY_US=200 TL_NO_CACHE=1
    (cpp/runtime/debug_config.h), compiled and with TL_COMPILE=0."""
    source = "\n".join(f"fn __case_{i}() {{ 0 }}\n" for i in range(1))  # a valid preamble
    programs = [CASES[name][0] for name in ("append_to_global_array", "assign_global_struct_field",
                                             "identity_aliases_its_argument")]
    expected = sum((CASES[name][1] for name in ("append_to_global_array", "assign_global_struct_field",
                                                  "identity_aliases_its_argument")), [])
    # the three programs use distinct global names, so they run as one
    source += "\n".join(programs).replace("let a = ones", "let a0 = ones").replace("a[0] = 9.0", "a0[0] = 9.0") \
        .replace("ident(a)", "ident(a0)")
    base = {**os.environ, "PYTHONPATH": str(Path(core.__file__).resolve().parent.parent), "TL_DEBUG_POISON": "1",
            "TL_DEBUG_DELAY_US": "200", "TL_NO_CACHE": "1"}
    for compile_flag in ("1", "0"):
        proc = subprocess.run([sys.executable, "-m", "tensorlogic", "run", "-"], input=source, text=True,
                              capture_output=True, env={**base, "TL_COMPILE": compile_flag}, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines() == expected, compile_flag
