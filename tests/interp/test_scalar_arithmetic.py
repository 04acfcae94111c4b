"""Scalar arithmetic follows one rule set, the tensors' IEEE f32/f64 rules: `/` always gives a float,
`floor_div` and `%` agree, results that are not real numbers are NaN (never complex), overflow is inf,
and f32 scalars print as tensors do."""
from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest

import tensorlogic


def out(src: str) -> str:
    result = tensorlogic.run(textwrap.dedent(src), filename="prog.tl")
    assert result.error is None, result.error_text
    return result.output


def value(expr: str):
    result = tensorlogic.run(f"let v = {expr}\n", filename="prog.tl")
    assert result.error is None, result.error_text
    return result.env["v"]


def test_true_division_always_gives_a_float():
    assert out("print(7 / 2, 6 / 3, 1 / 4)") == "3.5 2.0 0.25\n"
    assert isinstance(value("6 / 3"), float)


def test_power_with_a_halved_exponent_works_for_odd_and_even_n():
    assert out("""
        fn power(x: float, n: int) -> float {
            if n == 0 { return 1.0 }
            let half = power(x, floor_div(n, 2))
            if n % 2 == 0 { half * half } else { half * half * x }
        }
        print(power(2.0, 10), power(2.0, 5))""") == "1024.0 32.0\n"


@pytest.mark.parametrize("a,b", [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3), (0, 5)])
def test_floor_div_and_mod_of_ints_agree_with_each_other(a, b):
    q, r = value(f"floor_div({a}, {b})"), value(f"{a} % {b}")
    assert isinstance(q, int) and (q, r) == (a // b, a % b) and q * b + r == a


def test_floor_div_of_tensors_is_elementwise_and_keeps_int_dtype():
    got = value("floor_div([7, -7, 9] as i64, 2)")
    assert got.dtype == "i64" and got.numpy().tolist() == [3, -4, 4]
    np.testing.assert_array_equal(value("floor_div([7.5, -7.5], 2.0)").numpy(), [3.0, -4.0])
    big = 2 ** 40 + 1  # exact beyond f32's 24 bits
    assert value(f"floor_div([{big}] as i64, 1)").numpy().tolist() == [big]


def test_integer_division_by_zero_is_an_error():
    for expr in ("1 / 0", "1 % 0", "floor_div(1, 0)", "floor_div([1, 2] as i64, 0)"):
        result = tensorlogic.run(f"print({expr})\n", filename="prog.tl")
        assert result.error is not None and "division by zero" in result.error.message, expr


@pytest.mark.parametrize("expr,tensor_expr", [
    ("log(0.0)", "log([0.0])"), ("log(-1.0)", "log([-1.0])"), ("sqrt(-1.0)", "sqrt([-1.0])"),
    ("exp(1000.0)", "exp([1000.0])"), ("(-8.0) ** (1.0 / 3.0)", "pow([-8.0], 1.0 / 3.0)"),
    ("1.0 / 0.0", "[1.0] / 0.0"), ("0.0 / 0.0", "[0.0] / 0.0"), ("5.0 % 0.0", "[5.0] % 0.0"),
])
def test_scalars_follow_the_same_ieee_rules_as_tensors(expr, tensor_expr):
    scalar = value(expr)
    tensor = float(value(tensor_expr).numpy()[0])
    assert isinstance(scalar, float)
    assert (math.isnan(scalar) and math.isnan(tensor)) or scalar == tensor


def test_non_finite_values_print_the_same_as_scalars_and_in_tensors():
    assert out("print(log(0.0), log([0.0]), sqrt(-1.0), sqrt([-1.0]))") == "-inf [-inf] nan [nan]\n"


def test_f32_scalars_print_like_tensors():
    assert out("let t = ones([3]) * 0.1\nprint(t[0], sum([0.1, 0.2]), [0.1])") == "0.1 0.3 [0.1]\n"
    # item() is the f32's value as a float, as to_float() and PyTorch's .item() give it (issue 21)
    assert out("let t = ones([3]) * 0.1\nprint(item(t[0]))") == "0.10000000149011612\n"
