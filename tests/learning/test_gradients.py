"""Every differentiable op's gradient against float64 central finite differences of a NumPy reference.

Each case: inputs made learnable, loss = sum(op(inputs) * R) for a fixed random R, backward on the
runtime; the same loss in float64 NumPy, differentiated numerically element by element. The forward
value is checked against the reference too (so a rule cannot pass by matching a wrong forward).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from gradcheck import RNG, check, rand
from tensorlogic.builtins import operators
from tensorlogic.builtins.autograd import tape
from tensorlogic.builtins.autograd.traced_core import core, raw_core

# ---------------------------------------------------------------- elementwise binary, broadcasting

BINARY = {
    "add": (core.add, np.add),
    "sub": (core.sub, np.subtract),
    "mul": (core.mul, np.multiply),
    "div": (core.div, np.divide),
    "maximum": (core.maximum, np.maximum),
    "minimum": (core.minimum, np.minimum),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3))])
def test_binary_broadcasting(name, shapes):
    op, ref = BINARY[name]
    a = rand(*shapes[0])
    b = rand(*shapes[1], away_from_zero=True) + (0.0 if name != "div" else 0.0)
    if name in ("maximum", "minimum"):
        b = a.mean() + rand(*shapes[1]) if shapes[1] else np.array(0.3)
        b = b + 0.05  # no ties
    check(op, ref, [a, b])


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div"])
def test_binary_with_scalar_on_either_side(name):
    op, ref = BINARY[name]
    check(lambda t: op(t, 2.5), lambda x: ref(x, 2.5), [rand(2, 3, away_from_zero=True)])
    check(lambda t: op(2.5, t), lambda x: ref(2.5, x), [rand(2, 3, away_from_zero=True)])


def test_pow_tensor_exponent_and_scalar_exponent():
    base = rand(3, 4, low=0.5, high=2.0)
    check(core.pow, np.power, [base, rand(3, 4)])
    check(lambda t: core.pow(t, 3.0), lambda x: x ** 3.0, [rand(3, 4)])
    check(lambda t: core.pow(2.0, t), lambda x: 2.0 ** x, [rand(3, 4)])


def test_mod_away_from_its_jumps():
    a = RNG.uniform(0.5, 2.5, size=(3, 4)) + np.arange(12).reshape(3, 4) * 3.0
    check(lambda t: core.mod(t, 3.0), lambda x: np.mod(x, 3.0), [np.floor(a / 3.0) * 3.0 + 1.5 + rand(3, 4) * 0.5])


def test_where_routes_gradients():
    cond = RNG.uniform(size=(3, 4)) > 0.5
    c = raw_core.from_numpy(cond)
    check(lambda a, b: core.where(c, a, b), lambda a, b: np.where(cond, a, b), [rand(3, 4), rand(4)])


# ---------------------------------------------------------------- elementwise unary

def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _gelu_erf(x):
    from math import erf
    return 0.5 * x * (1 + np.vectorize(erf)(x / math.sqrt(2)))


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


UNARY = {
    "neg": (np.negative, {}),
    "abs": (np.abs, {"away_from_zero": True}),
    "exp": (np.exp, {}),
    "log": (np.log, {"low": 0.3, "high": 3.0}),
    "sqrt": (np.sqrt, {"low": 0.3, "high": 3.0}),
    "rsqrt": (lambda x: 1 / np.sqrt(x), {"low": 0.3, "high": 3.0}),
    "square": (np.square, {}),
    "sin": (np.sin, {}),
    "cos": (np.cos, {}),
    "tan": (np.tan, {"low": -1.0, "high": 1.0}),
    "tanh": (np.tanh, {}),
    "sigmoid": (_sigmoid, {}),
    "relu": (lambda x: np.maximum(x, 0), {"away_from_zero": True}),
    "silu": (lambda x: x * _sigmoid(x), {}),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name):
    ref, kw = UNARY[name]
    check(getattr(core, name), ref, [rand(3, 5, **kw)])


@pytest.mark.parametrize("approximate,ref", [("tanh", _gelu_tanh), ("none", _gelu_erf)])
def test_gelu(approximate, ref):
    x = rand(4, 5)
    x[0, 0] = 1e-4  # the near-zero branch of the exact form
    check(lambda t: core.gelu(t, approximate), ref, [x])


def test_astype_and_contiguous_pass_gradients():
    check(lambda t: core.contiguous(core.transpose(t, 0, 1)), lambda x: x.T, [rand(3, 4)])
    check(lambda t: core.astype(core.astype(t, "f16"), "f32"), lambda x: x, [rand(3, 4)], atol=5e-3, rtol=5e-3)


# ---------------------------------------------------------------- reductions, softmax

@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("dim,keepdim", [(None, False), (0, False), (1, True), (-1, False)])
def test_reductions(name, dim, keepdim):
    ref = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[name]
    x = rand(3, 4) + np.arange(12).reshape(3, 4) * 0.01  # distinct values: max/min have one winner
    if dim is None:
        check(lambda t: getattr(core, name)(t), lambda a: ref(a), [x])
    else:
        check(lambda t: getattr(core, name)(t, dim, keepdim), lambda a: ref(a, axis=dim, keepdims=keepdim), [x])


def test_max_ties_share_the_gradient():
    t = raw_core.from_numpy(np.array([1.0, 3.0, 3.0, 0.0], dtype=np.float32))
    tape.mark_learnable(t)
    tape.backward(core.max(t))
    np.testing.assert_allclose(tape.grad_of(t).numpy(), [0, 0.5, 0.5, 0])


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("dim", [-1, 0])
def test_softmax_and_log_softmax(dim):
    check(lambda t: core.softmax(t, dim), lambda x: _softmax(x, dim), [rand(3, 5)])
    check(lambda t: core.log_softmax(t, dim), lambda x: np.log(_softmax(x, dim)), [rand(3, 5)])


# ---------------------------------------------------------------- linear algebra

@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 2)), ((4,), (4, 2)), ((3, 4), (4,)), ((4,), (4,)),
                                   ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((3, 4), (2, 4, 5)),
                                   ((2, 1, 3, 4), (3, 4, 2))])
def test_matmul_shapes(sa, sb):
    check(core.matmul, np.matmul, [rand(*sa), rand(*sb)])


def test_linear_with_and_without_bias():
    check(core.linear, lambda x, w: x @ w.T, [rand(2, 3, 4), rand(5, 4)])
    check(core.linear, lambda x, w, b: x @ w.T + b, [rand(3, 4), rand(5, 4), rand(5)])


# ---------------------------------------------------------------- shapes and views

def test_shape_ops():
    check(lambda t: core.reshape(t, [4, 3]), lambda x: x.reshape(4, 3), [rand(3, 4)])
    check(lambda t: core.flatten(t), lambda x: x.reshape(-1), [rand(2, 3, 2)])
    check(lambda t: core.squeeze(t, 1), lambda x: x.squeeze(1), [rand(3, 1, 2)])
    check(lambda t: core.unsqueeze(t, 0), lambda x: x[None], [rand(3, 2)])
    check(lambda t: core.expand(t, [4, 3, 2]), lambda x: np.broadcast_to(x, (4, 3, 2)), [rand(3, 1)])
    check(lambda t: core.transpose(t, 0, 2), lambda x: x.transpose(2, 1, 0), [rand(2, 3, 4)])
    check(lambda t: core.permute(t, [1, 2, 0]), lambda x: x.transpose(1, 2, 0), [rand(2, 3, 4)])


def test_slicing_views():
    check(lambda t: core.slice(t, 1, 1, 5, 2), lambda x: x[:, 1:5:2], [rand(3, 6)])
    check(lambda t: core.select(t, 0, 1), lambda x: x[1], [rand(3, 4)])
    # TL's `t[...]` (builtins/operators.py)
    check(lambda t: operators.get_item(t, (slice(1, None), slice(None, None, 2))), lambda x: x[1:, ::2],
          [rand(3, 5)])
    check(lambda t: operators.get_item(t, (-1,)), lambda x: x[-1], [rand(3, 5)])
    check(lambda t: operators.get_item(t, (slice(None), 2)), lambda x: x[:, 2], [rand(3, 5)])


def test_concat_stack_split_chunk():
    check(lambda a, b: core.concat([a, b], 1), lambda a, b: np.concatenate([a, b], 1), [rand(2, 3), rand(2, 2)])
    check(lambda a, b: core.stack([a, b], 0), lambda a, b: np.stack([a, b], 0), [rand(2, 3), rand(2, 3)])
    check(lambda t: core.mul(core.split(t, [1, 3], 1)[1], 2.0), lambda x: x[:, 1:] * 2, [rand(2, 4)])
    check(lambda t: core.add(*core.chunk(t, 2, 0)), lambda x: x[:2] + x[2:], [rand(4, 3)])


def test_a_view_of_a_learnable_gets_gradients_through_the_view():
    check(lambda t: core.matmul(core.transpose(t, 0, 1), t), lambda x: x.T @ x, [rand(3, 2)])


def test_embedding_and_index_select_scatter_add_repeated_ids():
    ids = np.array([[0, 2], [2, 3]])
    ids_t = raw_core.from_numpy(ids)
    check(lambda w: core.embedding(w, ids_t), lambda w: w[ids], [rand(5, 3)])
    idx = raw_core.from_numpy(np.array([1, 1, 0]))
    check(lambda x: core.index_select(x, 1, idx), lambda x: x[:, [1, 1, 0]], [rand(2, 3, 2)])


# ---------------------------------------------------------------- fused ops (composed forward when tracked)

def _rms(x, w, eps=1e-5):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _ln(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def test_norms():
    check(lambda x, w: core.rms_norm(x, w, 1e-5), _rms, [rand(3, 6), rand(6)])
    check(lambda x, w, b: core.layer_norm(x, w, b, 1e-5), _ln, [rand(3, 6), rand(6), rand(6)])


def _rope_ref(x, offset, base, neox):
    s, h, d = x.shape
    half = d // 2
    inv = base ** (-np.arange(half) * 2.0 / d)
    ang = (np.arange(s) + offset)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if neox:
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], -1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = a * sin + b * cos
    return out


@pytest.mark.parametrize("neox", [False, True])
def test_rope_matches_the_fused_kernel_and_differentiates(neox):
    x = rand(3, 2, 4)
    fused = raw_core.rope(raw_core.from_numpy(x.astype(np.float32)), 2, 10000.0, neox).numpy()
    np.testing.assert_allclose(fused, _rope_ref(x, 2, 10000.0, neox), rtol=1e-4, atol=1e-5)
    check(lambda t: core.rope(t, 2, 10000.0, neox), lambda a: _rope_ref(a, 2, 10000.0, neox), [x])


def _attention_ref(q, k, v, mask=None, causal=False, softcap=0.0):
    sq, hq, d = q.shape
    sk, hkv, _ = k.shape
    g = hq // hkv
    out = np.zeros((sq, hq, v.shape[2]))
    for h in range(hq):
        s = q[:, h, :] @ k[:, h // g, :].T / math.sqrt(d)
        if softcap:
            s = softcap * np.tanh(s / softcap)
        if mask is not None:
            s = s + mask
        if causal:
            s = s + np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None] + (sk - sq), -np.inf, 0.0)
        out[:, h, :] = _softmax(s, -1) @ v[:, h // g, :]
    return out


def test_attention_grouped_query_with_mask_and_causal():
    q, k, v = rand(3, 4, 2), rand(3, 2, 2), rand(3, 2, 2)
    mask = rand(3, 3)
    m = raw_core.from_numpy(mask.astype(np.float32))
    check(lambda a, b, c: core.attention(a, b, c, m), lambda a, b, c: _attention_ref(a, b, c, mask), [q, k, v])
    check(lambda a, b, c: core.attention(a, b, c, None, None, True, 0),
          lambda a, b, c: _attention_ref(a, b, c, causal=True), [q, k, v])
    check(lambda a, b, c: core.attention(a, b, c, None, None, True, 0, 0.8),
          lambda a, b, c: _attention_ref(a, b, c, causal=True, softcap=0.8), [q, k, v])


# ---------------------------------------------------------------- TL's operators (what `a + b` in TL runs)

def test_tl_operators_are_taped():
    """builtins/operators.py's binary, negate and get_item tape their tensor results (`Tensor`'s own
    Python operators tape nothing: nothing patches them)."""
    op = operators.binary
    check(lambda a, b: op("-", op("+", op("*", a, b), 2.0), op("/", b, a)), lambda a, b: a * b + 2.0 - b / a,
          [rand(2, 3, away_from_zero=True), rand(2, 3)])
    check(lambda a: op("-", 1.0, op("**", a, 2)), lambda a: 1.0 - a ** 2, [rand(2, 3)])
    check(lambda a: op("⊙", 2.0, op("**", 2.0, a)), lambda a: 2.0 * 2.0 ** a, [rand(2, 3)])
    check(lambda a, b: operators.negate(op("@", a, b)), lambda a, b: -(a @ b), [rand(2, 3), rand(3, 2)])
    check(lambda a: op("%", a, 0.7), lambda a: np.mod(a, 0.7), [rand(2, 3)])
    check(lambda a: core.add(core.sum(a, 1), core.mean(a)), lambda a: a.sum(1) + a.mean(), [rand(2, 3)])
    check(lambda a: core.transpose(core.reshape(a, [3, 2]), 0, 1), lambda a: a.reshape(3, 2).T, [rand(2, 3)])
    check(lambda a: core.softmax(core.permute(a, [1, 0]), 0), lambda a: _softmax(a.T, 0), [rand(2, 3)])


def _add_at(src, ids, rows):
    out = np.zeros((rows, src.shape[1]))
    np.add.at(out, ids, src)
    return out


def test_scatter_add_rows_gradient_gathers_rows():
    ids = np.array([3, 0, 3, 5, 3, 1, 0])
    ids_t = raw_core.from_numpy(ids)
    check(lambda s: core.scatter_add_rows(ids_t, s, 6), lambda s: _add_at(s, ids, 6), [rand(7, 3)])


def test_embedding_gradient_scatter_adds_repeated_ids_like_numpy():
    ids = np.array([4, 0, 4, 2, 1, 4, 3])
    ids_t = raw_core.from_numpy(ids)
    check(lambda w: core.embedding(w, ids_t), lambda w: w[ids], [rand(5, 3)])
