"""Every op of `tensorlogic._core` (docs/core-api.md) against NumPy.

Random shapes with broadcasting, non-contiguous inputs (transposed, strided, expanded views),
f32 and f16. Tolerances: f32 results within rtol 1e-5 / atol 1e-6 of NumPy computed in float64
(transcendentals 1e-5 relative); f16 results within one f16 rounding of the float32 result of the
same f16 inputs (rtol 2e-3, atol 1e-3); integer and boolean results exactly.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from tensorlogic import _core

RNG = np.random.default_rng(20251122)

F32_TOL = dict(rtol=1e-5, atol=1e-6)
F16_TOL = dict(rtol=2e-3, atol=1e-3)


def T(a, dtype=None):
    return _core.from_numpy(np.asarray(a), dtype=dtype) if dtype else _core.from_numpy(np.asarray(a))


def randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def check(got_tensor, want, dtype="f32"):
    got = got_tensor.numpy() if hasattr(got_tensor, "numpy") else np.asarray(got_tensor)
    want = np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    if want.dtype == np.bool_ or np.issubdtype(want.dtype, np.integer):
        np.testing.assert_array_equal(got, want)
    else:
        tol = F16_TOL if dtype == "f16" else F32_TOL
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **tol)


# ------------------------------------------------------------------------------ binary

BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "mod": np.mod,
}
COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
           "gt": np.greater, "ge": np.greater_equal}
SHAPE_PAIRS = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((5, 1, 3), (1, 4, 1)), ((1,), (6, 2)), ((), (3,))]


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", SHAPE_PAIRS)
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_binary_broadcasting(name, shapes, dtype):
    npdt = np.float16 if dtype == "f16" else np.float32
    a, b = randn(*shapes[0], dtype=npdt), randn(*shapes[1], dtype=npdt)
    if name in ("div", "mod"):
        b = (np.abs(b) + 0.5).astype(npdt) * np.where(RNG.random(b.shape) < 0.5, -1, 1).astype(npdt)
    got = getattr(_core, name)(T(a), T(b))
    assert got.dtype == dtype
    want = BINARY[name](a.astype(np.float32), b.astype(np.float32))
    if dtype == "f16":
        want = want.astype(np.float16)
    check(got, want, dtype)


def test_pow_positive_base():
    a, b = np.abs(randn(4, 5)) + 0.1, randn(5)
    check(_core.pow(T(a), T(b)), np.power(a.astype(np.float64), b))
    check(T(a) ** 2.0, a.astype(np.float64) ** 2)


@pytest.mark.parametrize("name", sorted(COMPARE))
def test_comparisons_return_bool(name):
    a = RNG.integers(-3, 3, (4, 6)).astype(np.float32)
    b = RNG.integers(-3, 3, (6,)).astype(np.float32)
    got = getattr(_core, name)(T(a), T(b))
    assert got.dtype == "bool"
    check(got, COMPARE[name](a, b))


def test_logical_ops():
    a = RNG.random((3, 5)) < 0.5
    b = RNG.random((5,)) < 0.5
    check(_core.logical_and(T(a), T(b)), np.logical_and(a, b))
    check(_core.logical_or(T(a), T(b)), np.logical_or(a, b))
    check(_core.logical_not(T(a)), np.logical_not(a))


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum", "minimum", "mod"])
def test_scalar_forms_both_sides(name):
    a = (np.abs(randn(3, 7)) + 0.5).astype(np.float32)
    fn = getattr(_core, name)
    check(fn(T(a), 2.5), BINARY[name](a.astype(np.float64), 2.5))
    check(fn(2.5, T(a)), BINARY[name](2.5, a.astype(np.float64)))


def test_operators_and_reflected_forms():
    a, b = randn(4, 3), np.abs(randn(4, 3)) + 0.5
    ta, tb = T(a), T(b)
    check(ta + tb, a + b)
    check(ta - 1.0, a - 1.0)
    check(1.0 - ta, 1.0 - a)
    check(2.0 * ta, 2.0 * a)
    check(ta / tb, a / b)
    check(1.0 / tb, 1.0 / b)
    check(-ta, -a)
    check(ta % tb, np.mod(a, b))
    check(ta @ tb.reshape([3, 4]), a.astype(np.float64) @ b.reshape(3, 4))
    check(ta < tb, a < b)
    check(ta == ta, np.ones_like(a, dtype=bool))


def test_integer_arithmetic_is_exact_and_int_division_is_true_division():
    a = RNG.integers(-1000, 1000, (5, 4)).astype(np.int64) * (1 << 33)
    b = RNG.integers(1, 50, (4,)).astype(np.int64)
    check(_core.add(T(a), T(b)), a + b)
    check(_core.mul(T(b), T(b)), b * b)
    check(_core.mod(T(a), T(b)), np.mod(a, b))
    q = _core.div(T(np.array([7, -7, 1], dtype=np.int64)), T(np.array([2, 2, 3], dtype=np.int64)))
    assert q.dtype == "f32"
    check(q, np.array([3.5, -3.5, 1 / 3], dtype=np.float32))


def test_type_promotion():
    i = T(np.array([1, 2, 3], dtype=np.int32))
    f = T(np.array([0.5, 0.5, 0.5], dtype=np.float32))
    h = T(np.array([0.5, 0.5, 0.5], dtype=np.float16))
    assert _core.add(i, f).dtype == "f32"
    assert _core.add(i, h).dtype == "f16"
    assert _core.add(h, f).dtype == "f32"
    check(_core.add(i, h), np.array([1.5, 2.5, 3.5], dtype=np.float16), "f16")


def test_non_contiguous_views():
    base = randn(6, 8)
    t = T(base)
    tt = _core.transpose(t)  # [8, 6] view
    check(_core.add(tt, T(np.arange(6, dtype=np.float32))), base.T + np.arange(6))
    sl = t[1:5, ::3]  # strided slice
    check(_core.mul(sl, 2.0), base[1:5, ::3] * 2)
    check(_core.exp(sl), np.exp(base[1:5, ::3].astype(np.float64)))
    ex = _core.expand(T(randn(1, 8)), [6, 8])
    check(_core.sub(ex, t), np.broadcast_to(ex.numpy(), (6, 8)) - base)
    p = _core.permute(T(randn(2, 3, 4)), [2, 0, 1])
    check(_core.contiguous(p), p.numpy())
    assert _core.contiguous(p).is_contiguous()


# ------------------------------------------------------------------------------ unary

def _gelu_erf(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


UNARY = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "sin": np.sin, "cos": np.cos,
    "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "relu": lambda x: np.maximum(x, 0),
    "silu": lambda x: x / (1 + np.exp(-x)), "square": np.square, "floor": np.floor,
    "ceil": np.ceil, "round": np.round, "step": lambda x: (x > 0).astype(np.float64),
    "tan": np.tan,
}
POSITIVE_UNARY = {"log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x)}


@pytest.mark.parametrize("name", sorted(UNARY) + sorted(POSITIVE_UNARY))
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_unary(name, dtype):
    npdt = np.float16 if dtype == "f16" else np.float32
    x = (randn(5, 7) * 2).astype(npdt)
    if name == "tan":
        x = (x * 0.5).astype(npdt)
    fn = UNARY.get(name) or POSITIVE_UNARY[name]
    if name in POSITIVE_UNARY:
        x = (np.abs(x) + 0.1).astype(npdt)
    if name == "round":
        x = np.concatenate([x.ravel()[:31], np.array([0.5, 1.5, 2.5, -0.5], dtype=npdt)]).reshape(5, 7)
    got = getattr(_core, name)(T(x))
    want = fn(x.astype(np.float64))
    if dtype == "f16":
        want = want.astype(np.float16)
    check(got, want, dtype)


@pytest.mark.parametrize("approximate,ref", [("tanh", _gelu_tanh), ("none", _gelu_erf)])
def test_gelu_forms(approximate, ref):
    x = randn(4, 33) * 3
    check(_core.gelu(T(x), approximate=approximate), ref(x.astype(np.float64)))


def test_unary_on_strided_view():
    base = randn(5, 6)
    check(_core.sigmoid(_core.transpose(T(base))), 1 / (1 + np.exp(-base.T.astype(np.float64))))


# ------------------------------------------------------------------------------ where, astype

def test_where_broadcasts():
    cond = RNG.random((4, 1)) < 0.5
    a, b = randn(4, 5), randn(5)
    check(_core.where(T(cond), T(a), T(b)), np.where(cond, a, b))


@pytest.mark.parametrize("src,dst", [("f32", "f16"), ("f16", "f32"), ("f32", "i64"), ("i64", "f32"),
                                     ("i32", "i64"), ("f32", "bool"), ("bool", "f32"), ("f32", "bf16")])
def test_astype(src, dst):
    np_of = {"f32": np.float32, "f16": np.float16, "i64": np.int64, "i32": np.int32, "bool": np.bool_}
    x = (randn(3, 4) * 10)
    x = x.astype(np_of[src]) if src != "bool" else x > 0
    y = _core.astype(T(x), dst)
    assert y.dtype == dst
    if dst == "bf16":
        got = y.numpy()
        np.testing.assert_allclose(got, x, rtol=2.0 ** -8)
        return
    want = x.astype(np.float32).astype(np_of[dst]) if dst != "bool" else x != 0
    if dst in ("i64", "i32"):
        want = np.trunc(x.astype(np.float64)).astype(np_of[dst])
    check(y, want, "f16" if dst == "f16" else "f32")


# ------------------------------------------------------------------------------ reductions

@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("dim", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions(name, dim, keepdim):
    x = randn(4, 37, 5)
    got = getattr(_core, name)(T(x), dim=dim, keepdim=keepdim)
    want = getattr(np, name)(x.astype(np.float64), axis=dim, keepdims=keepdim)
    check(got, np.asarray(want))


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("dim", [None, 0, 2])
def test_arg_reductions(name, dim):
    x = randn(3, 4, 50)
    x[1, 2, 7] = x[1, 2, 9] = 100.0 if name == "argmax" else -100.0  # ties: first index wins
    got = getattr(_core, name)(T(x), dim=dim)
    assert got.dtype == "i64"
    check(got, np.asarray(getattr(np, name)(x, axis=dim)).astype(np.int64))


def test_reduction_of_f16_and_of_view():
    x = randn(6, 300).astype(np.float16)
    check(_core.sum(T(x), dim=1), x.astype(np.float32).sum(axis=1).astype(np.float16), "f16")
    base = randn(8, 6)
    check(_core.sum(_core.transpose(T(base)), dim=1), base.T.astype(np.float64).sum(axis=1))


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_and_log_softmax(dim):
    x = randn(3, 50, 4) * 10
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=dim, keepdims=True))
    sm = e / e.sum(axis=dim, keepdims=True)
    check(_core.softmax(T(x), dim=dim), sm)
    check(_core.log_softmax(T(x), dim=dim), np.log(sm))


def test_softmax_large_values_are_stable():
    x = np.array([[1000.0, 1001.0, 1002.0]], dtype=np.float32)
    got = _core.softmax(T(x)).numpy()
    assert np.all(np.isfinite(got))
    check(got, np.exp([[-2.0, -1.0, 0.0]]) / np.exp([[-2.0, -1.0, 0.0]]).sum())


# ------------------------------------------------------------------------------ linear algebra

@pytest.mark.parametrize("sa,sb", [((5, 7), (7, 3)), ((7,), (7, 4)), ((5, 7), (7,)), ((2, 3, 5, 8), (8, 6)),
                                   ((4, 1, 3, 8), (2, 8, 5)), ((1, 64), (64, 100))])
def test_matmul_numpy_rules(sa, sb):
    a, b = randn(*sa), randn(*sb)
    check(_core.matmul(T(a), T(b)), np.matmul(a.astype(np.float64), b))


def test_matmul_transposed_and_f16():
    a, b = randn(9, 33), randn(17, 33)
    check(_core.matmul(T(a), _core.transpose(T(b))), a.astype(np.float64) @ b.T)
    ah, bh = a.astype(np.float16), b.T.astype(np.float16).copy()
    got = _core.matmul(T(ah), T(bh))
    assert got.dtype == "f16"
    check(got, (ah.astype(np.float32) @ bh.astype(np.float32)).astype(np.float16), "f16")


def test_linear_with_bias():
    x, w, b = randn(2, 3, 20), randn(7, 20), randn(7)
    check(_core.linear(T(x), T(w)), x.astype(np.float64) @ w.T)
    check(_core.linear(T(x), T(w), T(b)), x.astype(np.float64) @ w.T + b)


# ------------------------------------------------------------------------------ shape ops

def test_shape_ops_against_numpy():
    x = randn(2, 3, 4)
    t = T(x)
    check(_core.reshape(t, [4, -1]), x.reshape(4, -1))
    check(_core.transpose(t), np.swapaxes(x, -2, -1))
    check(_core.transpose(t, 0, 2), np.swapaxes(x, 0, 2))
    check(_core.permute(t, [1, 2, 0]), x.transpose(1, 2, 0))
    check(_core.expand(T(x[:1, :, :1]), [2, 3, 4]), np.broadcast_to(x[:1, :, :1], (2, 3, 4)))
    check(_core.squeeze(T(x[:, :1, :]), 1), x[:, 0, :])
    check(_core.unsqueeze(t, 1), x[:, None])
    check(_core.flatten(t), x.reshape(-1))
    check(_core.flatten(t, 1), x.reshape(2, 12))
    check(_core.slice(t, 2, 1, 4, 2), x[:, :, 1:4:2])
    check(_core.select(t, 1, -1), x[:, -1])
    check(t[1, ::2, -3:], x[1, ::2, -3:])
    check(t[..., None, 0], x[..., None, 0])


def test_concat_stack_split_chunk():
    a, b = randn(2, 3), randn(2, 5)
    check(_core.concat([T(a), T(b)], 1), np.concatenate([a, b], 1))
    check(_core.stack([T(a), T(a * 2)], 0), np.stack([a, a * 2], 0))
    x = randn(6, 4)
    parts = _core.split(T(x), [1, 2, 3], 0)
    for got, want in zip(parts, np.split(x, [1, 3], 0)):
        check(got, want)
    for got, want in zip(_core.chunk(T(x), 2, 1), np.split(x, 2, 1)):
        check(got, want)


def test_copy_into_strided_view_and_setitem():
    cache = T(np.zeros((8, 3, 4), dtype=np.float16))
    kv = randn(2, 3, 4)
    _core.copy_(cache[5:7], T(kv))
    want = np.zeros((8, 3, 4), dtype=np.float16)
    want[5:7] = kv.astype(np.float16)
    check(cache, want, "f16")
    t = T(np.zeros((3, 4), dtype=np.float32))
    t[:, 1] = 7.0
    t[0] = T(np.arange(4, dtype=np.float32))
    want = np.zeros((3, 4), dtype=np.float32)
    want[:, 1] = 7.0
    want[0] = np.arange(4)
    check(t, want)


def test_index_select():
    x = randn(5, 6)
    ids = np.array([4, 0, 4], dtype=np.int64)
    check(_core.index_select(T(x), 0, T(ids)), x[ids])
    check(_core.index_select(T(x), 1, T(ids)), x[:, ids])


def test_creation_ops():
    check(_core.zeros([2, 3]), np.zeros((2, 3), dtype=np.float32))
    check(_core.full([2, 2], 3.5), np.full((2, 2), 3.5, dtype=np.float32))
    check(_core.arange(2, 11, 3), np.arange(2, 11, 3))
    check(_core.arange(0.0, 1.0, 0.25), np.arange(0.0, 1.0, 0.25, dtype=np.float32))
    ones16 = _core.ones([4], dtype="f16")
    assert ones16.dtype == "f16"
    check(ones16, np.ones(4, dtype=np.float16), "f16")


# ------------------------------------------------------------------------------ nn

def test_embedding_plain_table():
    table = randn(10, 6)
    ids = np.array([[1, 9], [0, 1]], dtype=np.int64)
    check(_core.embedding(T(table), T(ids)), table[ids])
    check(_core.embedding(T(table.astype(np.float16)), T(ids.astype(np.int32))),
          table.astype(np.float16)[ids], "f16")


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_rms_norm(dtype):
    npdt = np.float16 if dtype == "f16" else np.float32
    x, w = randn(3, 5, 64, dtype=npdt), randn(64, dtype=npdt)
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-5) * w
    check(_core.rms_norm(T(x), T(w), eps=1e-5), want.astype(npdt), dtype)
    check(_core.rms_norm(T(x), eps=1e-6),
          (x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6)).astype(npdt), dtype)


def test_layer_norm():
    x, w, b = randn(4, 48), randn(48), randn(48)
    x64 = x.astype(np.float64)
    norm = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    check(_core.layer_norm(T(x), T(w), T(b), eps=1e-5), norm * w + b)
    check(_core.layer_norm(T(x)), norm)


def _rope_ref(x, pos_offset, base, neox):
    x = x.astype(np.float64)
    S, D = x.shape[-3], x.shape[-1]
    inv = base ** (-np.arange(0, D, 2, dtype=np.float64) / D)
    theta = (pos_offset + np.arange(S))[:, None] * inv[None, :]  # [S, D/2]
    cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]  # broadcast over heads
    out = x.copy()
    if neox:
        x0, x1 = x[..., : D // 2], x[..., D // 2:]
        out[..., : D // 2] = x0 * cos - x1 * sin
        out[..., D // 2:] = x0 * sin + x1 * cos
    else:
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
    return out


@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("shape,offset,base", [((5, 3, 8), 0, 10000.0), ((2, 4, 2, 16), 34, 100000.0),
                                                ((1, 9, 64), 127, 10000.0)])
def test_rope(neox, shape, offset, base):
    x = randn(*shape)
    check(_core.rope(T(x), pos_offset=offset, base=base, neox=neox), _rope_ref(x, offset, base, neox))


def test_rope_f16():
    x = randn(4, 2, 8).astype(np.float16)
    check(_core.rope(T(x), pos_offset=3), _rope_ref(x, 3, 10000.0, False).astype(np.float16), "f16")


def test_causal_mask():
    for n, m, off in [(4, None, 0), (3, 6, 3), (2, 5, 1)]:
        mm = n if m is None else m
        want = np.where(np.arange(mm)[None, :] <= np.arange(n)[:, None] + off, 0.0, -np.inf).astype(np.float32)
        got = _core.causal_mask(n, m, offset=off) if m is not None else _core.causal_mask(n)
        np.testing.assert_array_equal(got.numpy(), want)


def _attention_ref(q, k, v, mask, scale, causal, pos_offset, softcap=0.0):
    Sq, Hq, D = q.shape
    Sk, Hkv, _ = k.shape
    rep = Hq // Hkv
    k = np.repeat(k.astype(np.float64), rep, axis=1)
    v = np.repeat(v.astype(np.float64), rep, axis=1)
    s = np.einsum("qhd,khd->hqk", q.astype(np.float64), k) * scale
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    if mask is not None:
        s = s + mask[None]
    if causal:
        allowed = np.arange(Sk)[None, :] <= (pos_offset + np.arange(Sq))[:, None]
        s = np.where(allowed[None], s, -np.inf)
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", p, v)


@pytest.mark.parametrize("causal,use_mask,pos", [(False, False, 0), (True, False, 0), (True, False, 5),
                                                 (False, True, 0), (True, True, 2)])
@pytest.mark.parametrize("Hq,Hkv", [(9, 3), (8, 2), (4, 4)])
def test_attention_gqa(causal, use_mask, pos, Hq, Hkv):
    Sq, D = 4, 16
    Sk = Sq + pos
    q, k, v = randn(Sq, Hq, D), randn(Sk, Hkv, D), randn(Sk, Hkv, D)
    mask = randn(Sq, Sk) if use_mask else None
    got = _core.attention(T(q), T(k), T(v), mask=T(mask) if use_mask else None, causal=causal, pos_offset=pos)
    check(got, _attention_ref(q, k, v, mask, 1 / math.sqrt(D), causal, pos))


@pytest.mark.parametrize("causal,use_mask,pos,Sq,Sk", [(True, False, 0, 4, 4), (True, True, 3, 4, 7),
                                                       (True, False, 299, 1, 300), (False, False, 0, 3, 5)])
def test_attention_softcap(causal, use_mask, pos, Sq, Sk):
    """Gemma 2's capping: each scaled score s becomes cap * tanh(s / cap) before the mask; over many
    keys (300: several chunks, split over threads for one query) as over few."""
    Hq, Hkv, D, cap = 8, 2, 16, 0.7
    q, k, v = randn(Sq, Hq, D) * 3, randn(Sk, Hkv, D), randn(Sk, Hkv, D)
    mask = randn(Sq, Sk) if use_mask else None
    got = _core.attention(T(q), T(k), T(v), mask=T(mask) if use_mask else None, causal=causal, pos_offset=pos,
                          softcap=cap)
    check(got, _attention_ref(q, k, v, mask, 1 / math.sqrt(D), causal, pos, softcap=cap))
    uncapped = _attention_ref(q, k, v, mask, 1 / math.sqrt(D), causal, pos)
    assert np.abs(got.numpy() - uncapped).max() > 1e-2  # the cap matters at these scores
    with pytest.raises(Exception, match="softcap"):
        _core.attention(T(q), T(k), T(v), causal=causal, pos_offset=pos, softcap=-1.0)


@pytest.mark.parametrize("Hq,Hkv", [(9, 3), (8, 2), (4, 4)])
def test_attention_rows_are_bitwise_the_row_alone_over_many_keys(Hq, Hkv):
    """A query row's attention does not depend on how many rows came with it: a prompt prefilled
    whole, in pieces (the server's budget) or after a prompt cache hit that leaves one or two new
    tokens, and the decode step, give each row the same bits, also where one row's keys are split
    over the threads (here up to 1,300 keys). Against NumPy as well."""
    D, Sq, pos = 16, 9, 1291
    Sk = pos + Sq
    q, k, v = randn(Sq, Hq, D), randn(Sk, Hkv, D), randn(Sk, Hkv, D)
    tq, tk, tv = T(q), T(k), T(v)
    whole = _core.attention(tq, tk, tv, causal=True, pos_offset=pos)
    check(whole, _attention_ref(q, k, v, None, 1 / math.sqrt(D), True, pos))
    got = whole.numpy()
    for i in range(Sq):
        alone = _core.attention(tq[i:i + 1], tk[:pos + i + 1], tv[:pos + i + 1], causal=True, pos_offset=pos + i)
        assert np.array_equal(got[i], alone.numpy()[0]), f"row {i} differs from the row alone"
    two = _core.attention(tq[3:5], tk[:pos + 5], tv[:pos + 5], causal=True, pos_offset=pos + 3).numpy()
    assert np.array_equal(got[3:5], two), "a two-row piece differs from the whole"


def test_attention_reads_kv_cache_prefix_views_f16():
    cap, Hkv, D = 32, 2, 8
    cache_k = randn(cap, Hkv, D).astype(np.float16)
    cache_v = randn(cap, Hkv, D).astype(np.float16)
    tk, tv = T(cache_k), T(cache_v)
    q = randn(1, 4, D)
    n = 11
    got = _core.attention(T(q), tk[:n], tv[:n], scale=0.3, causal=True, pos_offset=n - 1)
    check(got, _attention_ref(q, cache_k[:n], cache_v[:n], None, 0.3, True, n - 1))
