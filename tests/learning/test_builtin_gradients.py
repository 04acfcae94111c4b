"""The TL builtins that are compositions of runtime ops (einsum, clamp, dot, gather, slice,
broadcast_to, the nn builtins, tensor equations) differentiate like the ops they are made of: each
against float64 finite differences, called through the builtin table as a TL program calls them."""
from __future__ import annotations

import math

import numpy as np

import tensorlogic
from gradcheck import check, rand
from tensorlogic.builtins.registry import BUILTINS


def b(name):
    return BUILTINS[name].fn


def test_einsum_contractions_and_diagonals():
    check(lambda x, y: b("einsum")("ij,jk->ik", x, y), lambda x, y: x @ y, [rand(3, 4), rand(4, 2)])
    check(lambda x, y: b("einsum")("bij,bkj->bik", x, y), lambda x, y: np.einsum("bij,bkj->bik", x, y),
          [rand(2, 3, 4), rand(2, 5, 4)])
    check(lambda x: b("einsum")("ii->i", x), lambda x: np.diagonal(x).copy(), [rand(3, 3)])
    check(lambda x, y: b("einsum")("i,j->ij", x, y), np.outer, [rand(3), rand(4)])


def test_clamp_dot_gather_slice_broadcast():
    x = rand(3, 4)
    x[np.abs(np.abs(x) - 0.5) < 0.05] += 0.2  # no element at the clamp bounds
    check(lambda t: b("clamp")(t, -0.5, 0.5), lambda a: np.clip(a, -0.5, 0.5), [x])
    check(lambda p, q: b("dot")(p, q), lambda p, q: np.sum(p * q), [rand(5), rand(5)])
    check(lambda t: b("gather")(t, [2, 0, 2], 0), lambda a: a[[2, 0, 2]], [rand(3, 4)])
    check(lambda t: b("slice")(t, 1, 1, 3), lambda a: a[:, 1:3], [rand(2, 4)])
    check(lambda t: b("broadcast_to")(t, [2, 3, 4]), lambda a: np.broadcast_to(a, (2, 3, 4)), [rand(3, 1)])
    check(lambda t: b("slice_last")(t, 1), lambda a: a[:, -1], [rand(2, 4)])


def test_nn_builtins():
    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * w
    check(lambda x, w: b("rms_norm")(x, w), rms, [rand(2, 5), rand(5)])
    check(lambda t: b("embedding")(t, [1, 1, 0]), lambda t: t[[1, 1, 0]], [rand(3, 2)])
    check(lambda s: b("scatter_add_rows")([2, 0, 2], s, 4),
          lambda s: np.stack([s[1], np.zeros(2), s[0] + s[2], np.zeros(2)]), [rand(3, 2)])
    check(lambda s: b("softmax")(s, 0), lambda s: np.exp(s) / np.exp(s).sum(0, keepdims=True), [rand(3, 2)])
    check(lambda x: b("gelu")(x), lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
          [rand(3, 3)])


def test_tensor_equation_gradients_reach_learnable_factors():
    result = tensorlogic.run("""
    let W = learnable([[1.0, 2.0], [3.0, 4.0]])
    let X = [[1.0, 0.0], [2.0, 1.0]]
    Y[i, k] = relu(W[i, j] X[j, k])
    backward(sum(Y * Y))
    print(grad(W))
    """, filename="<test>")
    assert result.error is None, result.error_text
    w = np.array([[1.0, 2.0], [3.0, 4.0]])
    x = np.array([[1.0, 0.0], [2.0, 1.0]])
    want = (2 * np.maximum(w @ x, 0)) @ x.T
    got = np.array(eval(result.output.strip().replace("\n", "")))
    np.testing.assert_allclose(got, want, rtol=1e-5)
