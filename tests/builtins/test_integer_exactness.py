"""Integers next to integer tensors are exact or refused, never silently changed.

TL's `int` is exact (arbitrary precision, as on the host). Where an int meets an i64 or i32 tensor
(an operator with a scalar, `from_array`, `full`), the result is the exact value NumPy gives, or an
error naming the value and the element type when the value does not fit it (NumPy 2 refuses those
too). Before: a scalar beyond 2^53 travelled as a double (`t + 9007199254740993` was off by one,
`u == 9007199254740993` false for the element equal to it), and out-of-range values wrapped
(`from_array([3000000000], "i32")`) or saturated (`i64_tensor + 2^63`, `full(.., 3000000000, "i32")`).
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorlogic

BIG = 2 ** 53 + 1  # the first int a double cannot hold


def run_ok(src: str):
    r = tensorlogic.run(src)
    assert r.error is None, r.error_text
    return r


def run_err(src: str) -> str:
    r = tensorlogic.run(src)
    assert r.error is not None, "expected an error"
    return r.error_text


def values(r, name):
    return r.env[name].numpy().tolist()


def test_i64_tensor_and_a_scalar_beyond_2_53_are_exact():
    r = run_ok(f"""
        let t = i64::from_array([0, 1])
        let u = i64::from_array([{BIG}, {BIG + 2}])
        let a = t + {BIG}
        let b = {BIG} + t
        let c = u - {BIG}
        let d = u == {BIG}
        let e = t * 3 + {BIG}
        let f = {BIG} - t
        let g = maximum(u, {BIG + 1})
        """)
    t = np.array([0, 1], np.int64)
    u = np.array([BIG, BIG + 2], np.int64)
    assert values(r, "a") == (t + BIG).tolist() == [BIG, BIG + 1]
    assert values(r, "b") == (BIG + t).tolist()
    assert values(r, "c") == (u - BIG).tolist() == [0, 2]
    assert values(r, "d") == (u == BIG).tolist() == [True, False]
    assert values(r, "e") == (t * 3 + BIG).tolist()
    assert values(r, "f") == (BIG - t).tolist()
    assert values(r, "g") == np.maximum(u, BIG + 1).tolist()
    for k in "abcef":
        assert r.env[k].dtype == "i64"


@pytest.mark.parametrize("expr", ["t + 9223372036854775808", "t * 100000000000000000000",
                                  "t - 9223372036854775809", "9223372036854775808 + t"])
def test_an_int_beyond_i64_next_to_an_i64_tensor_is_an_error(expr):
    err = run_err(f"let t = i64::from_array([1, 2])\nlet x = {expr}")
    assert "out of the range of i64" in err and ":2:" in err and "Traceback" not in err


def test_an_int_beyond_i32_next_to_an_i32_tensor_is_an_error_not_a_wrap():
    err = run_err("let t = i32::from_array([1, 2])\nlet x = t + 3000000000")
    assert "3000000000" in err and "out of the range of i32" in err
    r = run_ok("let t = i32::from_array([1, 2])\nlet x = t + 2147483646\nlet y = t / 3000000000")
    assert values(r, "x") == (np.array([1, 2], np.int32) + np.int32(2147483646)).tolist()
    assert r.env["x"].dtype == "i32"
    assert np.allclose(values(r, "y"), np.array([1, 2]) / 3000000000)


def test_from_array_keeps_big_i64_values_and_refuses_what_does_not_fit():
    r = run_ok(f"let a = i64::from_array([{BIG}, -{BIG}])\nlet b = from_array([{BIG}])")
    assert values(r, "a") == [BIG, -BIG]
    assert values(r, "b") == [BIG]
    for src in ['let a = from_array([3000000000], "i32")', "let a = i32::from_array([3000000000])",
                'let a = from_array([9223372036854775808], "i64")', "let a = sum([9223372036854775808, 1])",
                "let a = i64::from_array([-9223372036854775809])",
                "let a = from_array([18446744073709551621])"]:
        err = run_err(src)
        assert "out of the range of" in err and "Traceback" not in err, (src, err)


def test_full_is_exact_for_ints_and_refuses_what_does_not_fit():
    r = run_ok(f'let a = full([2], {BIG}, "i64")\nlet b = i64::full([2], {BIG})\nlet c = full([1], 7, "i32")')
    assert values(r, "a") == [BIG, BIG]
    assert values(r, "b") == [BIG, BIG]
    assert values(r, "c") == [7] and r.env["c"].dtype == "i32"
    for src in ['let a = full([2], 3000000000, "i32")', 'let a = i32::full([2], 1e10)',
                'let a = full([2], 9223372036854775808, "i64")']:
        err = run_err(src)
        assert "out of the range of" in err and "Traceback" not in err, (src, err)
