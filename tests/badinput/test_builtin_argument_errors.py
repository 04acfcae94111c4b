"""Wrong arguments to builtins are the program's errors (status 1, one line naming the builtin),
never internal errors ("this is a bug in TensorLogic", status 4). Each case below was an internal
error (an IndexError, ValueError, TypeError or pybind11 cast failure escaping the builtin), found
by calling every builtin with odd arguments: 0-d tensors where a dim is indexed, sizes beyond 64
bits, negative shapes for rand, a negative seed, lists and tensors where numbers were expected."""
from __future__ import annotations

import pytest

import tensorlogic

CASES = [
    "gather(-1, 0)", "index_select(2.5, 0, [1, 2])", "select(2.5, 0, -1)", "slice(0, 0, 0, 1)",
    "slice_last(0)", "split(-1, [1, 2])", "squeeze(-1, 0)", "std(-1, 0)", "var(-1, 0)",
    "repeat(2.5, 0, -1)", "pad(-1, [1, 2])", "chunk(0, 1e300)", "causal_mask(1e300)",
    "rope(0, 1e300)", "stack([1, 2], 1e300)", "eye(1e300)", "linspace(2.5, 1.0, 1e300)",
    "positional_encoding(0, 1e300)", "rand(-1)", "randn(-1)", "f32::rand(-1)", "seed(-1)",
    "buffer_reserve(0, 1e300)", "clamp(1e300, [1, 2], [1, 2])", "clamp(0, i64::from_array([1, 0]), 0)",
    'sigmoid_t("s", 0)', "to_int(1e308 * 10)",
]


@pytest.mark.parametrize("call", CASES)
def test_odd_arguments_are_a_tl_error_not_an_internal_one(call):
    r = tensorlogic.run(f"let r = {call}\n", filename="p.tl")
    if r.error is None:
        return  # a value is fine too (clamp of a number by tensors broadcasts)
    first = r.error_text.splitlines()[0]
    assert "internal error" not in r.error_text and "bug in TensorLogic" not in r.error_text, first
    assert first.startswith("p.tl:1:9: error: "), first


def test_contains_compares_arrays_as_values():
    r = tensorlogic.run('let a = contains([1, 2], ones([2, 3]))\nlet b = contains([[1, "x"], 2], [1, "x"])\n'
                        'let c = contains([1, 2], 2)\n')
    assert r.error is None, r.error_text
    assert (r.env["a"], r.env["b"], r.env["c"]) == (False, True, True)


def test_sizes_within_64_bits_and_big_ints_where_ints_are_values_still_work():
    r = tensorlogic.run("let a = to_int(1e30)\nlet x: int = 1e30\nlet e = eye(2)\nlet s = seed(0)\n")
    assert r.error is None, r.error_text
    assert r.env["a"] == int(1e30) and r.env["x"] == int(1e30)
