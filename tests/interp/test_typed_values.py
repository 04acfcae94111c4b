"""Values keep their type (issue 21, item 3): map keys `true` and `1` (and `false`, `0`) are distinct;
float keys are refused everywhere (`has_key(m, 1.0)` too); a declared tensor element type is
checked at run time (`let`, parameters, return values; a `tensor` declaration converts) and by `tl check`
where the value's type is certain; `x.item()` of an f32 is the f32's value, as `to_float(x)` and
PyTorch's `.item()` give it."""
from __future__ import annotations

import io

import numpy as np
import pytest

pytest.importorskip("tensorlogic._core")

from tensorlogic.interp.interpreter import Interpreter  # noqa: E402
from tensorlogic.interp.static_check import check_file  # noqa: E402
from tensorlogic.lang.errors import TLError  # noqa: E402


def out(source: str) -> str:
    buf = io.StringIO()
    interp = Interpreter(out=buf)
    try:
        interp.run_top_level(interp.load_source(source, "t.tl"))
    finally:
        interp.close()
    return buf.getvalue()


def err(source: str) -> TLError:
    with pytest.raises(TLError) as info:
        out(source)
    return info.value


def check(tmp_path, source: str) -> list[str]:
    path = tmp_path / "p.tl"
    path.write_text(source)
    return [e.message for e in check_file(str(path))]


def test_bool_and_int_map_keys_are_distinct():
    text = out("""
let m = map()
m[true] = "t"
m[1] = "one"
m[false] = "f"
m[0] = "zero"
print(len(m), m[true], m[1], m[false], m[0])
print(keys(m))
print(m)
for k in m { print(k) }
print(has_key(m, true), has_key(m, 1), contains(m, false), remove(m, true), len(m), has_key(m, true))
let n = map([true, 1], ["a", "b"])
print(len(n), n[true], n[1])
""")
    assert text.splitlines() == [
        "4 t one f zero",
        "[true, 1, false, 0]",
        '{true: "t", 1: "one", false: "f", 0: "zero"}',
        "true", "1", "false", "0",
        "true true true t 3 false",
        "2 a b",
    ]


@pytest.mark.parametrize("use", ["has_key(m, 1.0)", "m[1.0]", "contains(m, 1.0)", "remove(m, 1.0)"])
def test_float_map_keys_are_refused_even_when_integral(use):
    e = err(f'let m = map([1], ["one"])\nprint({use})')
    assert "a map key is a string, int or bool, got float 1.0" in e.message


def test_let_with_an_int_element_type_refuses_a_float_tensor(tmp_path):
    source = "let t: i32[2] = ones([2])\nprint(t)\n"
    e = err(source)
    assert "let t expects i32[2] (int elements), got tensor [2] f32" in e.message
    assert any("let t is declared i32[...] (int elements) but the value is a tensor of f32" in m
               for m in check(tmp_path, source))


def test_an_int_return_type_refuses_a_float_result(tmp_path):
    source = "fn f(x: int32[?]) -> int32[?] { x * 2.5 }\nprint(f(zeros([2], \"i32\")))\n"
    e = err(source)
    assert "f: return value expects int32[?] (int elements), got tensor [2] f32" in e.message
    assert any("f: the return value is declared int32[...] (int elements) but is a tensor of f32" in m
               for m in check(tmp_path, source))
    # the same with an int factor keeps i32 (NumPy: int32 * 2 is int32): no error, statically or at run time
    fine = "fn g(x: int32[?]) -> int32[?] { x * 2 }\nprint(g(zeros([2], \"i32\")).dtype)\n"
    assert out(fine) == "i32\n"
    assert check(tmp_path, fine) == []


def test_int_parameters_refuse_float_tensors():
    e = err("fn f(x: i64[?]) { x }\nprint(f(ones([3])))")
    assert "f: parameter 'x' expects i64[?] (int elements), got tensor [3] f32" in e.message


def test_array_literals_take_the_declared_element_type():
    text = out("let u: i32[2] = [1, 2]\nprint(u.dtype)\nlet w: f32[2] = [1, 2]\nprint(w.dtype, w)\n")
    assert text.splitlines() == ["i32", "f32 [1., 2.]"]
    e = err("let u: i32[2] = [1.5, 2.0]")
    assert "let u expects i32[2] (i32 elements), got an array of floats" in e.message


def test_tensor_declarations_convert_to_the_declared_type():
    """A `tensor` declaration converts like `as` (tests/builtins/test_dtypes.py): its value always has
    the declared element type."""
    assert out("tensor t: i32[2] = zeros([2], \"i64\")\nprint(t.dtype)\ntensor h: f16[2] = ones([2])\n"
               "print(h.dtype)\n") == "i32\nf16\n"


def test_checker_passes_what_it_cannot_be_sure_of(tmp_path):
    """No false alarms: a reassigned parameter, a user function named like a builtin, unknown calls."""
    source = """
fn ones(shape) { zeros(shape, "i32") }
let a: i32[2] = ones([2])
fn f(x: int32[?]) -> int32[?] {
    x = x as f32
    x = x as i32
    x * 2.5 as i32
}
fn g(x: f32[?]) -> f32[?] { x * 2 }
fn h(x) -> i32[?] { x * 2.5 }
"""
    assert check(tmp_path, source) == []


def test_item_of_an_f32_equals_to_float():
    text = out("""
let x = ones([1]) * 0.1
print(x.item() == to_float(x), item(x) == to_float(x))
print(x.item())
let h = (ones([1]) * 0.1) as f16
print(h.item() == to_float(h), h.item())
let i = zeros([1], "i32") + 7
print(i.item())
""")
    lines = text.splitlines()
    assert lines[0] == "true true"
    assert float(lines[1]) == float(np.float32(0.1))  # 0.10000000149011612, as torch.tensor([0.1]).item()
    assert lines[2].split() == ["true", repr(float(np.float16(np.float32(0.1))))]
    assert lines[3] == "7"
