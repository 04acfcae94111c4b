"""Every `_core` op and every builtin is in builtins/autograd/optable.py's table, and does what the table says
with a gradient: a differentiable one has a case here checked against float64 finite differences of a
NumPy reference, a refusing one stops with an error naming it, a no-gradient one never hands back a
float tensor that silently lost a learnable input's gradient. So a new op cannot cut the graph
unnoticed: adding it without a table entry (and, if differentiable, a gradcheck case) fails here."""
from __future__ import annotations

import io
import math
import re
from pathlib import Path

import numpy as np
import pytest

import tensorlogic
from gradcheck import check, rand
from tensorlogic.builtins import convert
from tensorlogic.builtins.autograd import optable, tape
from tensorlogic.builtins.autograd.traced_core import core, raw_core
from tensorlogic.builtins.registry import BUILTINS
from tensorlogic.interp.interpreter import Interpreter
from tensorlogic.lang.errors import TLError

ROOT = Path(__file__).resolve().parents[2]


def b(name):
    return BUILTINS[name].fn


def softmax_np(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def silu_np(x):
    return x / (1 + np.exp(-x))


def gelu_np(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def rms_np(x, w):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * w


def layer_norm_np(x, w, bias):
    c = x - x.mean(-1, keepdims=True)
    return c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * w + bias


def rope_np(x, offset=0, base=10000.0):
    seq, _, d = x.shape
    pos = np.arange(offset, offset + seq)[:, None, None]
    inv = base ** (-np.arange(d // 2) * 2.0 / d)
    ang = pos * inv
    a, c = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * np.cos(ang) - c * np.sin(ang)
    out[..., 1::2] = a * np.sin(ang) + c * np.cos(ang)
    return out


def attention_np(q, k, v, causal=False, mask=None):
    s = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s + mask
    if causal:
        s = s + np.where(np.arange(k.shape[0])[None, :] <= np.arange(q.shape[0])[:, None], 0, -np.inf)
    return np.einsum("hqk,khd->qhd", softmax_np(s), v)


def distinct(*shape):
    """Values far apart (sort and topk are differentiable away from ties)."""
    n = int(np.prod(shape))
    return (np.random.default_rng(3).permutation(n) * 0.37 - 1.0).reshape(shape)


def away_from_integers(*shape):
    x = rand(*shape) * 3
    return np.where(np.abs(x - np.round(x)) < 0.1, x + 0.25, x)


def scatter_np(t, src):
    out = t.copy()
    out[:, [2, 0, 2]] = src
    return out


def dropout_case():
    class Ctx:  # the same seed on every call: the same mask, so finite differences see one function
        @property
        def rng(self):
            return np.random.default_rng(11)
    run_tape = tape.ensure()
    saved = run_tape.training
    run_tape.training = True
    try:
        with tape.no_recording():
            keep = raw_core.ne(b("dropout")(Ctx(), raw_core.from_numpy(np.ones((3, 4), np.float32)), 0.5), 0.0)
        mask = keep.numpy().astype(np.float64) * 2.0
        check(lambda x: b("dropout")(Ctx(), x, 0.5), lambda x: x * mask, [rand(3, 4)])
    finally:
        run_tape.training = saved


def _unary(name, ref, **kw):
    return lambda: check(b(name), ref, [rand(2, 3, **kw)])


# One case per differentiable builtin, called through the builtin table as a TL program calls it.
BUILTIN_CASES = {
    "add": lambda: check(b("add"), np.add, [rand(2, 3), rand(3)]),
    "sub": lambda: check(b("sub"), np.subtract, [rand(2, 3), rand(2, 1)]),
    "mul": lambda: check(b("mul"), np.multiply, [rand(2, 3), rand(3)]),
    "div": lambda: check(b("div"), np.divide, [rand(2, 3), rand(3, low=0.5, high=2.0)]),
    "pow": lambda: check(b("pow"), np.power, [rand(2, 3, low=0.5, high=2.0), rand(3)]),
    "maximum": lambda: check(b("maximum"), np.maximum, [rand(2, 3), rand(2, 3)]),
    "minimum": lambda: check(b("minimum"), np.minimum, [rand(2, 3), rand(2, 3)]),
    "neg": _unary("neg", np.negative),
    "abs": _unary("abs", np.abs, away_from_zero=True),
    "square": _unary("square", np.square),
    "sqrt": lambda: check(b("sqrt"), np.sqrt, [rand(2, 3, low=0.5, high=2.0)]),
    "rsqrt": lambda: check(b("rsqrt"), lambda x: 1 / np.sqrt(x), [rand(2, 3, low=0.5, high=2.0)]),
    "exp": _unary("exp", np.exp),
    "log": lambda: check(b("log"), np.log, [rand(2, 3, low=0.5, high=2.0)]),
    "sin": _unary("sin", np.sin),
    "cos": _unary("cos", np.cos),
    "tan": lambda: check(b("tan"), np.tan, [rand(2, 3, low=-1.0, high=1.0)]),
    "tanh": _unary("tanh", np.tanh),
    "sigmoid": _unary("sigmoid", lambda x: 1 / (1 + np.exp(-x))),
    "relu": _unary("relu", lambda x: np.maximum(x, 0), away_from_zero=True),
    "silu": _unary("silu", silu_np),
    "gelu": _unary("gelu", gelu_np),
    "sigmoid_t": lambda: check(lambda x: b("sigmoid_t")(x, 0.5), lambda x: 1 / (1 + np.exp(-x / 0.5)), [rand(2, 3)]),
    "where": lambda: check(lambda x, y: b("where")([True, False, True], x, y),
                           lambda x, y: np.where([True, False, True], x, y), [rand(2, 3), rand(3)]),
    "clamp": lambda: check(lambda x: b("clamp")(x, -0.5, 0.5), lambda x: np.clip(x, -0.5, 0.5),
                           [np.array([-1.2, -0.3, 0.1, 0.4, 0.9, 1.3])]),
    "floor": lambda: check(b("floor"), np.floor, [away_from_integers(2, 3)]),
    "ceil": lambda: check(b("ceil"), np.ceil, [away_from_integers(2, 3)]),
    "round": lambda: check(b("round"), np.round, [away_from_integers(2, 3) + 0.0]),
    "sign": lambda: check(b("sign"), np.sign, [rand(2, 3, away_from_zero=True)]),
    "step": lambda: check(b("step"), lambda x: (x > 0).astype(np.float64), [rand(2, 3, away_from_zero=True)]),
    "floor_div": lambda: check(lambda x: b("floor_div")(x, 0.7), lambda x: np.floor(x / 0.7),
                               [away_from_integers(2, 3) * 0.7]),
    "sum": lambda: check(lambda x: b("sum")(x, 1), lambda x: x.sum(1), [rand(2, 3)]),
    "mean": lambda: check(lambda x: b("mean")(x, 0, True), lambda x: x.mean(0, keepdims=True), [rand(2, 3)]),
    "max": lambda: check(lambda x: b("max")(x, 1), lambda x: x.max(1), [distinct(2, 3)]),
    "min": lambda: check(lambda x: b("min")(x), lambda x: x.min(), [distinct(2, 3)]),
    "prod": lambda: check(lambda x: b("prod")(x, 1), lambda x: x.prod(1), [rand(2, 3)]),
    "cumsum": lambda: check(lambda x: b("cumsum")(x, 0), lambda x: np.cumsum(x, 0), [rand(3, 2)]),
    "var": lambda: check(lambda x: b("var")(x, 1, False, 1), lambda x: x.var(1, ddof=1), [rand(2, 4)]),
    "std": lambda: check(lambda x: b("std")(x), lambda x: x.std(), [rand(2, 4)]),
    "norm": lambda: check(lambda x: b("norm")(x, -1), lambda x: np.sqrt((x * x).sum(-1)), [rand(2, 4)]),
    "dot": lambda: check(b("dot"), lambda x, y: np.sum(x * y), [rand(4), rand(4)]),
    "softmax": lambda: check(lambda x: b("softmax")(x, 0), lambda x: softmax_np(x, 0), [rand(3, 2)]),
    "log_softmax": lambda: check(b("log_softmax"), lambda x: np.log(softmax_np(x)), [rand(2, 3)]),
    "matmul": lambda: check(b("matmul"), np.matmul, [rand(2, 3), rand(3, 4)]),
    "linear": lambda: check(b("linear"), lambda x, w, c: x @ w.T + c, [rand(2, 3), rand(4, 3), rand(4)]),
    "einsum": lambda: check(lambda x, y: b("einsum")("ij,jk->ik", x, y), np.matmul, [rand(2, 3), rand(3, 2)]),
    "astype": lambda: check(lambda x: b("astype")(x, "f16"), lambda x: x, [rand(2, 3)], rtol=1e-2, atol=1e-2),
    "reshape": lambda: check(lambda x: b("reshape")(x, [3, 2]), lambda x: x.reshape(3, 2), [rand(2, 3)]),
    "transpose": lambda: check(b("transpose"), lambda x: x.T, [rand(2, 3)]),
    "permute": lambda: check(lambda x: b("permute")(x, [2, 0, 1]), lambda x: x.transpose(2, 0, 1), [rand(2, 3, 4)]),
    "flatten": lambda: check(b("flatten"), lambda x: x.reshape(-1), [rand(2, 3)]),
    "squeeze": lambda: check(b("squeeze"), np.squeeze, [rand(2, 1, 3)]),
    "unsqueeze": lambda: check(lambda x: b("unsqueeze")(x, 1), lambda x: x[:, None], [rand(2, 3)]),
    "broadcast_to": lambda: check(lambda x: b("broadcast_to")(x, [2, 3]), lambda x: np.broadcast_to(x, (2, 3)),
                                  [rand(1, 3)]),
    "concat": lambda: check(lambda x, y: b("concat")(x, y, 1), lambda x, y: np.concatenate([x, y], 1),
                            [rand(2, 3), rand(2, 1)]),
    "stack": lambda: check(lambda x, y: b("stack")([x, y], 1), lambda x, y: np.stack([x, y], 1),
                           [rand(2, 3), rand(2, 3)]),
    "slice": lambda: check(lambda x: b("slice")(x, 1, 1, 3), lambda x: x[:, 1:3], [rand(2, 4)]),
    "slice_last": lambda: check(lambda x: b("slice_last")(x, 1), lambda x: x[:, -1], [rand(2, 4)]),
    "select": lambda: check(lambda x: b("select")(x, 1, 2), lambda x: x[:, 2], [rand(2, 4)]),
    "gather": lambda: check(lambda x: b("gather")(x, [2, 0, 2], 1), lambda x: x[:, [2, 0, 2]], [rand(2, 3)]),
    "index_select": lambda: check(lambda x: b("index_select")(x, 0, [1, 1]), lambda x: x[[1, 1]], [rand(2, 3)]),
    "scatter": lambda: check(lambda t, s: b("scatter")(t, 1, [2, 0, 2], s), scatter_np, [rand(2, 4), rand(2, 3)]),
    "chunk": lambda: check(lambda x: b("chunk")(x, 2, 1)[1], lambda x: x[:, 2:], [rand(2, 4)]),
    "split": lambda: check(lambda x: b("split")(x, [1, 3], 1)[1], lambda x: x[:, 1:], [rand(2, 4)]),
    "contiguous": lambda: check(lambda x: b("contiguous")(b("transpose")(x)), lambda x: x.T, [rand(2, 3)]),
    "flip": lambda: check(b("flip"), lambda x: x[:, ::-1], [rand(2, 3)]),
    "pad": lambda: check(lambda x: b("pad")(x, [1, 2], 0.5), lambda x: np.pad(x, [(0, 0), (1, 2)], constant_values=0.5),
                         [rand(2, 3)]),
    "repeat": lambda: check(lambda x: b("repeat")(x, 2, 1), lambda x: np.repeat(x, 2, 1), [rand(2, 3)]),
    "tile": lambda: check(lambda x: b("tile")(x, [2, 1]), lambda x: np.tile(x, (2, 1)), [rand(2, 3)]),
    "tril": lambda: check(b("tril"), np.tril, [rand(3, 3)]),
    "triu": lambda: check(lambda x: b("triu")(x, 1), lambda x: np.triu(x, 1), [rand(3, 3)]),
    "sort": lambda: check(lambda x: b("sort")(x, 0, True), lambda x: -np.sort(-x, 0), [distinct(3, 2)]),
    "topk": lambda: check(lambda x: b("topk")(x, 2), lambda x: -np.sort(-x, -1)[:, :2], [distinct(2, 4)]),
    "rms_norm": lambda: check(b("rms_norm"), rms_np, [rand(2, 4), rand(4)]),
    "rms_norm_linear": lambda: check(b("rms_norm_linear"), lambda x, nw, w: rms_np(x, nw) @ w.T,
                                     [rand(2, 4), rand(4), rand(3, 4)]),
    "layer_norm": lambda: check(b("layer_norm"), layer_norm_np, [rand(2, 4), rand(4), rand(4)]),
    "swiglu": lambda: check(b("swiglu"), lambda g, u: silu_np(g) * u, [rand(2, 3), rand(2, 3)]),
    "swiglu_linear": lambda: check(b("swiglu_linear"), lambda gu, w, r: (silu_np(gu[:, :3]) * gu[:, 3:]) @ w.T + r,
                                   [rand(2, 6), rand(4, 3), rand(2, 4)]),
    "embedding": lambda: check(lambda t: b("embedding")(t, [1, 1, 0]), lambda t: t[[1, 1, 0]], [rand(3, 2)]),
    "scatter_add_rows": lambda: check(lambda s: b("scatter_add_rows")([2, 0, 2], s, 3),
                                      lambda s: np.stack([s[1], np.zeros(2), s[0] + s[2]]), [rand(3, 2)]),
    "rope": lambda: check(lambda x: b("rope")(x, 2), lambda x: rope_np(x, 2), [rand(3, 2, 4)]),
    "attention": lambda: check(b("attention"), attention_np, [rand(3, 2, 4), rand(5, 2, 4), rand(5, 2, 4)]),
    "causal_attention": lambda: check(b("causal_attention"), lambda q, k, v: attention_np(q, k, v, causal=True),
                                      [rand(3, 2, 4), rand(3, 1, 4), rand(3, 1, 4)]),
    "apply_attention_mask": lambda: check(b("apply_attention_mask"), np.add, [rand(2, 3, 3), rand(3, 3)]),
    "dropout": dropout_case,
    "conv2d": lambda: check(lambda x, w, c: b("conv2d")(x, w, c, 1, 1), conv_np, [rand(2, 2, 4, 3), rand(3, 2, 3, 3), rand(3)]),
    "max_pool2d": lambda: check(lambda x: b("max_pool2d")(x, 2), lambda x: x.reshape(1, 2, 2, 2, 2, 2).max((3, 5)),
                                [distinct(1, 2, 4, 4)]),
    "avg_pool2d": lambda: check(lambda x: b("avg_pool2d")(x, 2), lambda x: x.reshape(1, 2, 2, 2, 2, 2).mean((3, 5)),
                                [rand(1, 2, 4, 4)]),
    "batch_norm": lambda: check(lambda x: b("batch_norm")(x, raw_core.zeros([3], "f32"), raw_core.ones([3], "f32")),
                                lambda x: x / np.sqrt(1 + 1e-5), [rand(2, 3)]),
    "softplus": lambda: check(b("softplus"), lambda x: np.log1p(np.exp(x)), [rand(2, 3)]),
    "leaky_relu": lambda: check(b("leaky_relu"), lambda x: np.where(x > 0, x, 0.01 * x), [rand(2, 3, away_from_zero=True)]),
    "logsumexp": lambda: check(lambda x: b("logsumexp")(x, 1), lambda x: np.log(np.exp(x).sum(1)), [rand(2, 3)]),
    "mse_loss": lambda: check(b("mse_loss"), lambda x, y: ((x - y) ** 2).mean(), [rand(2, 3), rand(2, 3)]),
    "l1_loss": lambda: check(b("l1_loss"), lambda x, y: np.abs(x - y).mean(), [rand(2, 3), rand(2, 3) + 3.0]),
    "binary_cross_entropy_with_logits": lambda: check(
        b("binary_cross_entropy_with_logits"), lambda x, y: (np.log1p(np.exp(-x)) + (1 - y) * x).mean(),
        [rand(2, 3), rand(2, 3, low=0.0, high=1.0)]),
    "nll_loss": lambda: check(lambda x: b("nll_loss")(x, [2, 0]), lambda x: -(x[0, 2] + x[1, 0]) / 2, [rand(2, 3)]),
    "cross_entropy": lambda: check(lambda x: b("cross_entropy")(x, [2, 0]),
                                   lambda x: -np.log(softmax_np(x))[[0, 1], [2, 0]].mean(), [rand(2, 3)]),
}


def conv_np(x, w, c):
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])
    out = np.zeros((x.shape[0], w.shape[0]) + x.shape[2:])
    for i in range(x.shape[2]):
        for j in range(x.shape[3]):
            out[:, :, i, j] = np.einsum("nckl,ockl->no", xp[:, :, i:i + 3, j:j + 3], w)
    return out + c[None, :, None, None]


def _core_case(op, ref, arrays, *consts, **kw):
    return lambda: check(lambda *ts: getattr(core, op)(*ts, *consts), lambda *a: ref(*a, *consts), arrays, **kw)


# One case per differentiable `_core` op, called as builtins and rules call it.
CORE_CASES = {name: _core_case(name, ref, [rand(2, 3), rand(2, 3, low=0.5, high=2.0)]) for name, ref in (
    ("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("div", np.divide), ("maximum", np.maximum),
    ("minimum", np.minimum))}
CORE_CASES.update({name: _core_case(name, ref, [rand(2, 3, low=0.5, high=2.0)]) for name, ref in (
    ("neg", np.negative), ("abs", np.abs), ("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt),
    ("rsqrt", lambda x: 1 / np.sqrt(x)), ("square", np.square), ("sin", np.sin), ("cos", np.cos),
    ("tan", np.tan), ("tanh", np.tanh), ("sigmoid", lambda x: 1 / (1 + np.exp(-x))),
    ("relu", lambda x: np.maximum(x, 0)), ("silu", silu_np), ("gelu", gelu_np),
    ("floor", np.floor), ("ceil", np.ceil), ("round", np.round), ("step", lambda x: (x > 0) * 1.0),
    ("contiguous", lambda x: x))})
for _name in ("floor", "ceil", "round"):
    CORE_CASES[_name] = _core_case(_name, getattr(np, _name), [away_from_integers(2, 3)])
CORE_CASES.update({
    "pow": _core_case("pow", np.power, [rand(2, 3, low=0.5, high=2.0), rand(2, 3)]),
    "mod": _core_case("mod", np.mod, [np.array([[0.3, 1.1, 2.6]]), np.array([[0.7, 0.8, 0.9]])]),
    "where": lambda: check(lambda x, y: core.where(raw_core.from_numpy(np.array([True, False, True])), x, y),
                           lambda x, y: np.where([True, False, True], x, y), [rand(2, 3), rand(2, 3)]),
    "astype": _core_case("astype", lambda x, dt: x, [rand(2, 3)], "f16", rtol=1e-2, atol=1e-2),
    "sum": _core_case("sum", lambda x, d, k: x.sum(d, keepdims=k), [rand(2, 3)], 1, True),
    "mean": _core_case("mean", lambda x: x.mean(), [rand(2, 3)]),
    "max": _core_case("max", lambda x, d, k: x.max(d, keepdims=k), [distinct(2, 3)], 0, False),
    "min": _core_case("min", lambda x: x.min(), [distinct(2, 3)]),
    "softmax": _core_case("softmax", softmax_np, [rand(2, 3)], -1),
    "log_softmax": _core_case("log_softmax", lambda x, d: np.log(softmax_np(x, d)), [rand(2, 3)], 0),
    "matmul": _core_case("matmul", np.matmul, [rand(2, 2, 3), rand(3, 4)]),
    "linear": _core_case("linear", lambda x, w: x @ w.T, [rand(2, 3), rand(4, 3)]),
    "reshape": _core_case("reshape", lambda x, s: x.reshape(s), [rand(2, 3)], [6]),
    "flatten": _core_case("flatten", lambda x, s, e: x.reshape(2, -1), [rand(2, 3, 2)], 1, 2),
    "squeeze": _core_case("squeeze", lambda x, d: x.squeeze(d), [rand(2, 1, 3)], 1),
    "unsqueeze": _core_case("unsqueeze", lambda x, d: np.expand_dims(x, d), [rand(2, 3)], 0),
    "expand": _core_case("expand", lambda x, s: np.broadcast_to(x, s), [rand(2, 1)], [2, 3]),
    "transpose": _core_case("transpose", lambda x, a, c: np.swapaxes(x, a, c), [rand(2, 3, 4)], 0, 2),
    "permute": _core_case("permute", lambda x, p: x.transpose(p), [rand(2, 3, 4)], [1, 2, 0]),
    "slice": _core_case("slice", lambda x, d, s, e, st: x[:, s:e:st], [rand(2, 5)], 1, 0, 5, 2),
    "select": _core_case("select", lambda x, d, i: x[i], [rand(2, 5)], 0, 1),
    "concat": lambda: check(lambda x, y: core.concat([x, y], 0), lambda x, y: np.concatenate([x, y]),
                            [rand(2, 3), rand(1, 3)]),
    "stack": lambda: check(lambda x, y: core.stack([x, y], 0), lambda x, y: np.stack([x, y]), [rand(3), rand(3)]),
    "embedding": lambda: check(lambda t: core.embedding(t, raw_core.from_numpy(np.array([2, 0, 2]))),
                               lambda t: t[[2, 0, 2]], [rand(3, 2)]),
    "index_select": lambda: check(lambda t: core.index_select(t, 1, raw_core.from_numpy(np.array([1, 1]))),
                                  lambda t: t[:, [1, 1]], [rand(2, 3)]),
    "scatter_add_rows": lambda: check(lambda s: core.scatter_add_rows(raw_core.from_numpy(np.array([1, 1])), s, 2),
                                      lambda s: np.stack([np.zeros(3), s[0] + s[1]]), [rand(2, 3)]),
    "rms_norm": _core_case("rms_norm", rms_np, [rand(2, 4), rand(4)]),
    "layer_norm": _core_case("layer_norm", layer_norm_np, [rand(2, 4), rand(4), rand(4)]),
    "rope": _core_case("rope", lambda x: rope_np(x), [rand(2, 2, 4)]),
    "attention": lambda: check(lambda q, k, v: core.attention(q, k, v, causal=True),
                               lambda q, k, v: attention_np(q, k, v, causal=True),
                               [rand(3, 2, 4), rand(3, 2, 4), rand(3, 2, 4)]),
    "swiglu": _core_case("swiglu", lambda gu: silu_np(gu[:, :2]) * gu[:, 2:], [rand(3, 4)]),
    "swiglu_linear": _core_case("swiglu_linear", lambda gu, w: (silu_np(gu[:, :2]) * gu[:, 2:]) @ w.T,
                                [rand(3, 4), rand(3, 2)]),
    "rms_norm_linear": _core_case("rms_norm_linear", lambda x, nw, w, eps, r: rms_np(x, nw) @ w.T + r,
                                  [rand(2, 4), rand(4), rand(3, 4)], 1e-5, None),
    "split": lambda: check(lambda x: core.split(x, [1, 2], 1)[0], lambda x: x[:, :1], [rand(2, 3)]),
    "chunk": lambda: check(lambda x: core.chunk(x, 2, 0)[1], lambda x: x[1:], [rand(2, 3)]),
})
CORE_CASES["rms_norm_linear"] = lambda: check(
    lambda x, nw, w, r: core.rms_norm_linear(x, nw, w, 1e-5, r), lambda x, nw, w, r: rms_np(x, nw) @ w.T + r,
    [rand(2, 4), rand(4), rand(3, 4), rand(2, 3)])


def _kind(table, kind):
    return sorted(n for n, (k, _) in table.items() if k == kind)


def test_every_core_op_is_in_the_table():
    ops = {k for k, v in vars(raw_core).items() if not k.startswith("_") and callable(v) and not isinstance(v, type)}
    assert ops - set(optable.CORE_OPS) == set(), "a _core op the gradient table does not list"
    assert set(optable.CORE_OPS) - ops == set(), "the gradient table lists an op _core does not have"


def test_every_builtin_is_in_the_table():
    assert set(BUILTINS) - set(optable.BUILTIN_OPS) == set(), "a builtin the gradient table does not list"
    assert set(optable.BUILTIN_OPS) - set(BUILTINS) == set(), "the gradient table lists a builtin that does not exist"


def test_every_differentiable_op_has_a_gradcheck_case():
    assert set(BUILTIN_CASES) == set(_kind(optable.BUILTIN_OPS, optable.DIFFERENTIABLE))
    assert set(CORE_CASES) == set(_kind(optable.CORE_OPS, optable.DIFFERENTIABLE))


@pytest.mark.parametrize("name", sorted(BUILTIN_CASES))
def test_builtin_gradient(name):
    BUILTIN_CASES[name]()


@pytest.mark.parametrize("name", sorted(CORE_CASES))
def test_core_op_gradient(name):
    CORE_CASES[name]()


def learnable(*shape):
    t = raw_core.from_numpy(np.arange(1, 1 + int(np.prod(shape)), dtype=np.float32).reshape(shape) / 4)
    tape.mark_learnable(t)
    return t


@pytest.mark.parametrize("name", _kind(optable.CORE_OPS, optable.REFUSES))
def test_refusing_core_ops_name_themselves(name):
    w = learnable(2, 3)
    args = {"copy_": (raw_core.zeros([2, 3], "f32"), w),
            "rope_kv_write": (w, w, w, raw_core.zeros([4, 2, 3], "f32"), raw_core.zeros([4, 2, 3], "f32"), 0,
                              10000.0, False),
            "attention_rows": (w, raw_core.zeros([4, 1, 3], "f32"), raw_core.zeros([4, 1, 3], "f32"), [0, 2], [1, 2]),
            "expert_linear": (w, raw_core.zeros([2, 4, 3], "f32"), raw_core.zeros([2, 1], "i64"))}[name]
    with pytest.raises(tape.AutogradError, match=rf"^{name} has no gradient"):
        getattr(core, name)(*args)


def run_error(source: str) -> str:
    result = tensorlogic.run(source, filename="<test>")
    assert result.error is not None, result.output
    return result.error_text


REFUSING_PROGRAMS = {
    "copy_": "let w = learnable([1.0, 2.0])\nlet z = zeros([2])\ncopy_(z, w * 2.0)",
    "cache_attention": "let q = learnable(ones([1, 2, 4]))\ncache_attention(q, KVCache::new_f32(1), 0, 0)",
    "rope_kv_write": "let q = learnable(ones([1, 2, 4]))\nrope_kv_write(KVCache::new_f32(1), 0, 0, q, q, q)",
    "one_hot": "let w = learnable([0.0, 1.0])\none_hot(w, 3)",
    "expert_linear": "let w = learnable(ones([2, 3]))\nexpert_linear(w, zeros([2, 4, 3]), zeros([2, 1]) as i64)",
}


@pytest.mark.parametrize("name", _kind(optable.BUILTIN_OPS, optable.REFUSES))
def test_refusing_builtins_name_themselves(name):
    text = run_error(REFUSING_PROGRAMS[name])
    assert f"{name} has no gradient" in text
    assert "Traceback" not in text


def test_a_learnable_copied_into_place_is_refused_but_a_parameter_update_is_not():
    text = run_error("let w = learnable([1.0, 2.0])\nlet z = zeros([2])\nz[0] = w[1]")
    assert "assigning into a tensor" in text
    out = tensorlogic.run("let w = learnable([1.0, 2.0])\ncopy_(w, [3.0, 4.0])\nw[0] = 5.0\nprint(w)\n"
                          "let z = zeros([2])\nz[0] = detach(w)[1]\nprint(z)", filename="<test>")
    assert out.error is None, out.error_text
    assert out.output.split() == ["[5.,", "4.]", "[4.,", "0.]"]


# Probes for no-gradient builtins whose first argument is not the tensor; the rest get (w,) plus
# fillers up to their minimum arity.
_PROBES = {
    "contains": lambda w: ([w], w),
    "append": lambda w: ([], w), "push": lambda w: ([], w), "pop": lambda w: ([w],), "reverse": lambda w: ([w],),
    "values": lambda w: ({"a": w},), "remove": lambda w: ({"a": w}, "a"), "join": lambda w: ([w], ","),
    "format": lambda w: ("{}", w), "assert_eq": lambda w: (w, w), "assert_about_eq": lambda w: (w, w, 0.1),
    "map": lambda w: (["a"], [w]), "save": lambda w: (w, "/dev/null"),
}
# stdin, exits, or the gradient bookkeeping itself (tested in test_learn_blocks.py and below)
_NOT_PROBED = {"input", "panic", "args", "backward", "learnable", "detach", "text_stream"}


class _Ctx:
    rng = np.random.default_rng(0)

    def write(self, text):
        pass

    def wait_for_device(self):
        pass


def _float_tensors(value):
    if value.__class__ is raw_core.Tensor:
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _float_tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _float_tensors(v)


@pytest.mark.parametrize("name", sorted(set(_kind(optable.BUILTIN_OPS, optable.NO_GRADIENT)) - _NOT_PROBED))
def test_no_gradient_builtins_never_drop_a_gradient(name):
    """Called with a learnable input, the builtin refuses it, or returns values with no float tensor
    that is not the learnable itself or a tensor the tape tracks."""
    w = learnable(2, 3)
    spec = BUILTINS[name]
    args = _PROBES[name](w) if name in _PROBES else (w,) + (1,) * max(spec.min_args - 1, 0)
    if spec.max_args is not None:
        args = args[:spec.max_args]
    try:
        out = spec.fn(_Ctx(), *args) if spec.needs_ctx else spec.fn(*args)
    except Exception as exc:  # noqa: BLE001 - the claim is only about what comes back
        assert convert.is_program_error(exc), f"{name}: {type(exc).__name__}: {exc}"
        return
    for t in _float_tensors(out):
        assert t.dtype not in ("f32", "f16", "bf16") or tape.is_tracked(t), f"{name} dropped a gradient"


def test_no_gradient_core_ops_give_no_float_result_of_a_learnable():
    w = learnable(2, 3)
    for name in optable._CORE_NO_GRADIENT["integer or bool result"].split():
        args = (w,) if name.startswith(("arg", "logical_not")) else (w, w)
        if name.startswith("logical"):
            args = tuple(raw_core.gt(a, 1.0) for a in args)
        assert getattr(core, name)(*args).dtype not in ("f32", "f16", "bf16"), name


def test_docs_list_the_table():
    doc = (ROOT / "docs" / "learning.md").read_text()
    found = re.search(r"<!-- differentiable ops: generated from optable.doc_list\(\) -->\n(.*?)\n<!-- end -->",
                      doc, re.S)
    assert found, "docs/learning.md lost its generated list of differentiable ops"
    assert found.group(1) == optable.doc_list(), "docs/learning.md's list differs from optable.doc_list()"


# ---------------------------------------------------------------- the examples of issue 21


def run_ok(source: str) -> str:
    result = tensorlogic.run(source, filename="<test>")
    assert result.error is None, result.error_text
    return result.output


def values(text: str) -> np.ndarray:
    return np.array(eval(text.strip().replace("\n", "")), dtype=np.float64)  # noqa: S307 - our own output


def test_cumsum_gradient_is_the_reversed_running_sum():
    out = run_ok("let w = learnable([1.0, 2.0, 3.0])\nbackward(sum(cumsum(w) * [1.0, 10.0, 100.0]))\nprint(grad(w))")
    weights = np.array([1.0, 10.0, 100.0])
    np.testing.assert_allclose(values(out), np.cumsum(weights[::-1])[::-1])  # [111, 110, 100]


def test_prod_sort_topk_scatter_swiglu_gradients_in_a_program():
    out = run_ok("""
    let w = learnable([1.0, 2.0, 3.0])
    backward(prod(w))
    println(grad(w))
    zero_grad()
    backward(sum(sort(w * [3.0, -1.0, 1.0]) * [1.0, 10.0, 100.0]))
    println(grad(w))
    zero_grad()
    backward(sum(topk(w, 2) * [1.0, 10.0]))
    println(grad(w))
    zero_grad()
    backward(sum(scatter(w, 0, [0, 2, 0], [5.0, 6.0, 7.0] * w) * [1.0, 10.0, 100.0]))
    println(grad(w))
    zero_grad()
    backward(sum(swiglu(w, [1.0, 2.0, 3.0])))
    println(grad(w))
    """)
    rows = [values(line) for line in out.strip().split("\n")]
    w = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(rows[0], [6.0, 3.0, 2.0])
    np.testing.assert_allclose(rows[1], [30.0, -1.0, 100.0])  # sorted [-2 (w1), 3 (w0), 3 (w2)], stable
    np.testing.assert_allclose(rows[2], [0.0, 10.0, 1.0])
    np.testing.assert_allclose(rows[3], [0.0, 610.0, 7.0])  # slot 0 keeps the last write (7 w2)
    s = 1 / (1 + np.exp(-w))
    np.testing.assert_allclose(rows[4], (s * (1 + w * (1 - s))) * w, rtol=1e-5)


def test_a_learn_block_whose_loss_goes_through_cumsum_moves():
    out = run_ok("""
    let w = learnable([0.0, 0.0, 0.0])
    let target = [1.0, 3.0, 6.0]
    learn {
        optimizer: adam(lr = 0.1)
        epochs: 300
        for epoch in range(epochs) { backward(sum((cumsum(w) - target) ** 2)) }
    }
    print(w)
    """)
    np.testing.assert_allclose(values(out), [1.0, 2.0, 3.0], atol=0.05)


def test_backward_of_a_loss_with_no_learnable_is_an_error():
    text = run_error("let w = learnable([1.0, 2.0, 3.0])\nbackward(sum(detach(w) * 2.0))")
    assert "backward: the loss does not depend on any learnable tensor" in text
    text = run_error("let w = learnable([1.0, 2.0])\nbackward(sum(astype(astype(w, \"i32\"), \"f32\")))")
    assert "does not depend on any learnable tensor" in text
    text = run_error("let w = learnable([1.0, 2.0])\nlearn { lr: 0.1\n epochs: 2\n for e in range(epochs) { backward(sum(detach(w))) } }")
    assert "does not depend on any learnable tensor" in text


def test_a_gradient_of_grad_is_an_error_and_detach_makes_it_a_constant():
    text = run_error("let W = learnable([1.0, 2.0])\nbackward(sum(W * W))\nbackward(sum(grad(W) * grad(W)))")
    assert "second-order gradients" in text and "grad(" in text
    interp = Interpreter(out=io.StringIO())
    with pytest.raises(TLError, match="second-order"):
        interp.run_top_level(interp.load_source("let W = learnable([1.0, 2.0])\nbackward(sum(W * W))\n"
                                                "let g = grad(W)\nbackward(sum(W * W) + sum(g * g))", "<test>"))
    with interp.ctx.entered():  # the run's tape
        np.testing.assert_allclose(tape.grad_of(interp.globals["W"]).numpy(), [2.0, 4.0])  # nothing half-added
    interp.close()
    out = run_ok("let W = learnable([1.0, 2.0])\nbackward(sum(W * W))\nlet g = detach(grad(W))\nzero_grad()\n"
                 "backward(sum(W * g))\nprint(grad(W))")
    np.testing.assert_allclose(values(out), [2.0, 4.0])


def test_piecewise_constant_ops_give_zero_gradients_like_pytorch():
    out = run_ok("let w = learnable([0.3, 1.7, -2.2])\nbackward(sum(floor(w) + round(w) + sign(w) + w))\nprint(grad(w))")
    np.testing.assert_allclose(values(out), [1.0, 1.0, 1.0])
