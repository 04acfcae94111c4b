"""`%` on integer tensors refuses a zero divisor as floor_div does (docs/language.md: `a % b` is
`a - floor_div(a, b) * b`, and dividing an int by the int 0 is an error): before, `t % 0` and
`t % [0, 1]` gave 0 silently while floor_div(t, 0) was an error. Float tensors keep IEEE (NaN)."""
from __future__ import annotations

import numpy as np
import pytest

import tensorlogic


@pytest.mark.parametrize("expr", ["t % 0", "t % i64::from_array([0, 1])", "7 % i64::from_array([0, 2])",
                                  "i32::from_array([7, 8]) % 0", "floor_div(t, 0)"])
def test_an_integer_zero_divisor_is_an_error(expr):
    r = tensorlogic.run(f"let t = i64::from_array([7, -8])\nlet x = {expr}\n", filename="p.tl")
    assert r.error is not None, "expected an error"
    assert "division by zero" in r.error_text.splitlines()[0]


def test_nonzero_integer_divisors_and_float_tensors_match_numpy():
    r = tensorlogic.run("let t = i64::from_array([7, -8])\nlet a = t % 3\nlet b = t % i64::from_array([-3, 5])\n"
                        "let c = from_array([7.0, -8.0]) % 0\nlet d = 7 % i64::from_array([3, -2])\n")
    assert r.error is None, r.error_text
    t = np.array([7, -8], np.int64)
    assert r.env["a"].numpy().tolist() == np.mod(t, 3).tolist()
    assert r.env["b"].numpy().tolist() == np.mod(t, np.array([-3, 5])).tolist()
    assert np.isnan(r.env["c"].numpy()).all()
    assert r.env["d"].numpy().tolist() == np.mod(7, np.array([3, -2])).tolist()
