"""The builtins users reach for first, each against NumPy: max/min of two values, prod, cumsum, var,
std, norm, any, all, sign, isnan, isinf, eye, linspace, tril, triu, one_hot, flip, pad, repeat, tile,
sort, argsort and topk on tensors."""
from __future__ import annotations

import numpy as np
import pytest

import tensorlogic

M = np.array([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0], [0.5, 9.0, -1.0]], np.float32)
M_TL = "[[1.0, -2.0, 3.0], [4.0, 5.0, -6.0], [0.5, 9.0, -1.0]]"


def value(expr: str):
    result = tensorlogic.run(f"let m = {M_TL}\nlet v = {expr}\n", filename="p.tl")
    assert result.error is None, result.error_text
    v = result.env["v"]
    return v.numpy() if hasattr(v, "numpy") else v


CASES = [
    ("max(m, 0.0)", np.maximum(M, 0)), ("min(m, [0.0, 1.0, 2.0])", np.minimum(M, [0, 1, 2])),
    ("max(m, 1)", M.max(1)), ("prod(m)", np.prod(M)), ("prod(m, 0)", M.prod(0)),
    ("cumsum(m)", np.cumsum(M, -1)), ("cumsum(m, 0)", np.cumsum(M, 0)),
    ("var(m)", M.var()), ("var(m, 1)", M.var(1)), ("std(m, 0, false, 1)", M.std(0, ddof=1)),
    ("norm(m)", np.linalg.norm(M)), ("norm(m, 1)", np.linalg.norm(M, axis=1)),
    ("all(m, 1)", (M != 0).all(1)), ("any(m > 8.0, 0)", (M > 8).any(0)),
    ("sign(m)", np.sign(M)), ("isnan([1.0, 0.0 / 0.0])", [False, True]), ("isinf([1.0, -1.0 / 0.0])", [False, True]),
    ("eye(3)", np.eye(3)), ("eye(2, 3)", np.eye(2, 3)), ("linspace(-1.0, 1.0, 5)", np.linspace(-1, 1, 5)),
    ("tril(m)", np.tril(M)), ("triu(m, 1)", np.triu(M, 1)), ("tril(m, -1)", np.tril(M, -1)),
    ("one_hot([0, 2, 1], 3)", np.eye(3)[[0, 2, 1]]), ("flip(m)", M[:, ::-1]), ("flip(m, 0)", M[::-1]),
    ("pad([1.0, 2.0], [1, 2])", np.pad([1.0, 2.0], (1, 2))),
    ("pad(m, [[1, 0], [0, 2]], 7.0)", np.pad(M, ((1, 0), (0, 2)), constant_values=7)),
    ("repeat([1.0, 2.0], 3)", np.repeat([1.0, 2.0], 3)), ("repeat(m, 2, 1)", np.repeat(M, 2, 1)),
    ("tile([1.0, 2.0], 3)", np.tile([1.0, 2.0], 3)), ("tile(m, [2, 1])", np.tile(M, (2, 1))),
    ("sort(m)", np.sort(M, -1)), ("sort(m, 0, true)", -np.sort(-M, 0)), ("argsort(m)", np.argsort(M, -1, kind="stable")),
    ("topk(m, 2)", -np.sort(-M, -1)[:, :2]), ("topk([1.0, 5.0, 3.0], 1, 0)", [5.0]),
]


@pytest.mark.parametrize("expr,expected", CASES, ids=[c[0] for c in CASES])
def test_builtin_matches_numpy(expr, expected):
    got = value(expr)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64),
                               rtol=1e-5, atol=1e-6)


def test_max_and_min_of_two_numbers():
    assert value("max(2, 3)") == 3 and value("min(2.5, 1)") == 1 and value("max(-1.5, -2.0)") == -1.5


def test_any_and_all_of_a_whole_tensor_are_bools():
    assert value("any([0, 0, 1])") is True and value("all([1, 0])") is False and value("all(m)") is True


def test_sign_isnan_isinf_of_scalars():
    assert value("sign(-3)") == -1 and value("sign(2.5)") == 1.0
    assert value("isnan(log(-1.0))") is True and value("isinf(1.0 / 0.0)") is True


@pytest.mark.parametrize("expr,needle", [("topk(m, 4)", "k must be between 0 and 3"), ("eye(-1)", "sizes >= 0"),
                                         ("pad(m, [1])", "widths must be"), ("var([1.0], 0, false, 1)", "needs more")])
def test_bad_arguments_are_one_line_errors(expr, needle):
    result = tensorlogic.run(f"let m = {M_TL}\nprint({expr})\n", filename="p.tl")
    assert result.error is not None and needle in result.error.message


@pytest.mark.parametrize("spec,shapes", [
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (3, 5, 6)]), ("...ij,...jk", [(2, 3, 4, 5), (3, 5, 6)]),
    ("i...->...", [(3, 4, 5)]), ("...i->...", [(2, 3, 4)]), ("ij...,jk->ik...", [(2, 3, 4), (3, 5)]),
])
def test_einsum_ellipsis_matches_numpy(spec, shapes):
    from tensorlogic.builtins.core import core
    from tensorlogic.builtins.einsum import einsum
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    got = einsum(spec, *[core.from_numpy(x) for x in ops]).numpy()
    np.testing.assert_allclose(got, np.einsum(spec, *ops), rtol=1e-4, atol=1e-4)
