"""Index-notation contraction and tensor equations agree with NumPy's einsum."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tensorlogic.logic.contraction import contract
from tensorlogic.logic.dense_ops import NumpyOps
from tensorlogic.logic.tensor_equation import (IndexEquationError, einsum_indexed,
                                               evaluate_tensor_equation)

ast = pytest.importorskip("tensorlogic.lang.ast")


def idx(name, *indices):
    return ast.IndexedTensor(1, 1, name, tuple(indices))


def equation(name, indices, value):
    return ast.TensorEquation(1, 1, name, tuple(indices), value)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_contract_matches_numpy_einsum(data):
    letters = "abcde"
    sizes = {c: data.draw(st.integers(1, 4)) for c in letters}
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    factors = []
    for _ in range(data.draw(st.integers(1, 4))):
        indices = data.draw(st.lists(st.sampled_from(letters), max_size=3, unique=True))
        factors.append((rng.standard_normal([sizes[c] for c in indices]).astype(np.float32), tuple(indices)))
    used = sorted({c for _, ix in factors for c in ix})
    out = tuple(data.draw(st.lists(st.sampled_from(used), unique=True)) if used else [])
    expected = np.einsum(",".join("".join(ix) for _, ix in factors) + "->" + "".join(out),
                         *[f for f, _ in factors])
    got = contract(NumpyOps(), factors, out, sizes)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_matrix_vector_equation():
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = np.array([1.0, 2.0, 3.0], np.float32)
    eq = equation("Y", ["i"], ast.JuxtProduct(1, 1, (idx("W", "i", "j"), idx("X", "j"))))
    y = evaluate_tensor_equation(eq, {"W": w, "X": x}.__getitem__, ops=NumpyOps())
    np.testing.assert_allclose(y, w @ x)


def test_nonlinearity_applies_after_the_sum_and_bias_adds_by_index():
    w = np.array([[1.0, -2.0], [0.5, 0.5]], np.float32)
    x = np.array([1.0, 1.0], np.float32)
    b = np.array([0.25, -2.0], np.float32)
    inner = ast.BinOp(1, 1, "+", ast.JuxtProduct(1, 1, (idx("W", "i", "j"), idx("X", "j"))), idx("B", "i"))
    eq = equation("H", ["i"], ast.Call(1, 1, ast.Name(1, 1, "relu"), (inner,)))
    h = evaluate_tensor_equation(eq, {"W": w, "X": x, "B": b}.__getitem__, ops=NumpyOps())
    np.testing.assert_allclose(h, np.maximum(w @ x + b, 0))


def test_outer_product_transpose_and_trace():
    a = np.array([1.0, 2.0], np.float32)
    m = np.arange(9, dtype=np.float32).reshape(3, 3)
    outer = equation("O", ["i", "j"], ast.JuxtProduct(1, 1, (idx("A", "i"), idx("A", "j"))))
    np.testing.assert_allclose(evaluate_tensor_equation(outer, {"A": a}.__getitem__, ops=NumpyOps()),
                               np.outer(a, a))
    transpose = equation("T", ["j", "i"], idx("M", "i", "j"))
    np.testing.assert_allclose(evaluate_tensor_equation(transpose, {"M": m}.__getitem__, ops=NumpyOps()), m.T)
    diagonal = equation("D", ["i"], idx("M", "i", "i"))
    np.testing.assert_allclose(evaluate_tensor_equation(diagonal, {"M": m}.__getitem__, ops=NumpyOps()),
                               np.diag(m))


def test_logic_rule_as_tensor_equation_matches_the_engine():
    parent = np.zeros((4, 4), np.float32)
    for a, b in [(0, 1), (1, 2), (2, 3)]:
        parent[a, b] = 1
    eq = equation("G", ["x", "z"], ast.Call(1, 1, ast.Name(1, 1, "step"), (
        ast.JuxtProduct(1, 1, (idx("P", "x", "y"), idx("P", "y", "z"))),)))
    grand = evaluate_tensor_equation(eq, {"P": parent}.__getitem__, ops=NumpyOps())
    np.testing.assert_array_equal(grand, ((parent @ parent) > 0).astype(np.float32))


def test_equation_errors_name_the_problem():
    m = np.zeros((2, 3), np.float32)
    with pytest.raises(IndexEquationError, match="index k of Y does not occur"):
        evaluate_tensor_equation(equation("Y", ["k"], idx("M", "i", "j")), {"M": m}.__getitem__, ops=NumpyOps())
    with pytest.raises(IndexEquationError, match="M has 2 dimensions but is indexed with 1"):
        evaluate_tensor_equation(equation("Y", ["i"], idx("M", "i")), {"M": m}.__getitem__, ops=NumpyOps())
    with pytest.raises(IndexEquationError, match="index i has size 2 elsewhere but 3"):
        evaluate_tensor_equation(equation("Y", ["i"], idx("M", "i", "i")), {"M": m}.__getitem__, ops=NumpyOps())


def test_einsum_indexed_python_api():
    a = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(einsum_indexed(("i",), [(a, ("i", "j"))]), [3.0, 3.0])


def test_scalars_broadcast_and_extra_function_arguments():
    w = np.array([[1.0, 0.5], [-1.0, 2.0]], np.float32)
    x = np.array([2.0, 1.0], np.float32)
    doubled = equation("D", ["i"], ast.BinOp(1, 1, "*", ast.FloatLit(1, 1, 2.0), idx("X", "i")))
    np.testing.assert_allclose(evaluate_tensor_equation(doubled, {"X": x}.__getitem__, ops=NumpyOps()), 2 * x)
    soft = equation("H", ["i"], ast.Call(1, 1, ast.Name(1, 1, "sigmoid_t"), (
        ast.JuxtProduct(1, 1, (idx("W", "i", "j"), idx("X", "j"))), ast.FloatLit(1, 1, 0.5))))
    h = evaluate_tensor_equation(soft, {"W": w, "X": x}.__getitem__, ops=NumpyOps())
    np.testing.assert_allclose(h, 1 / (1 + np.exp(-(w @ x) / 0.5)), rtol=1e-6)


def test_one_factor_equations_transpose_and_sum_in_a_program():
    import tensorlogic
    result = tensorlogic.run("let A = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]\nT[j, i] = A[i, j]\nS[i] = A[i, j]\n"
                             "let x = [5.0, 6.0]\nlet k = 1\nx[k] = A[0, 2]\nprint(x)\n")
    assert result.error is None, result.error_text
    a = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    np.testing.assert_array_equal(result.env["T"].numpy(), a.T)
    np.testing.assert_array_equal(result.env["S"].numpy(), a.sum(axis=1))
    assert result.output == "[5.0, 3.0]\n"  # an element assignment with bound indices stays one
