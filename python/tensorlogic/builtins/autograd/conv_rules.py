"""Forwards and backward rules of conv2d and the 2-D pools (builtins/conv.py), written like rules.py's
and registered in the same RULES table.

conv2d is im2col + the runtime's linear: one row gather of the channels-last input builds the columns
[N*Ho*Wo, kh*kw*C], one linear with the reordered kernel gives the output; its backward is two
matmuls and col2im, one scatter_add_rows of the column gradients back onto the input's rows (no
atomics: deterministic). max_pool2d stacks
the window's views and takes the max; its gradient goes to the first maximum of each window, as
PyTorch's CPU kernel does. Everything is a composition of `_core` ops (so it runs on every backend
with no kernel of its own). Invariant: forwards run with recording off, and the builtin records one
node whose rule gets the forward's saved columns / argmax as extra (untracked) arguments.
"""
from __future__ import annotations

import contextlib

import numpy as np

from .. import symbolic
from ..core import core
from .rules import RULES, _float_grad, rule

__all__ = ["RULES", "conv2d_forward", "max_pool2d_forward", "avg_pool2d_forward", "out_size"]


def out_size(size: int, k: int, stride: int, padding: int, dilation: int = 1) -> int:
    return (size + 2 * padding - dilation * (k - 1) - 1) // stride + 1


def _padded(x, padding: int, value: float = 0.0):
    if not padding:
        return x
    n, c, h, w = x.shape
    xp = core.full([n, c, h + 2 * padding, w + 2 * padding], value, x.dtype)
    core.copy_(_view(xp, padding, padding, h, w, 1), x)
    return xp


def _view(t, i: int, j: int, ho: int, wo: int, stride: int):
    """The strided view t[:, :, i : i + stride*ho : stride, j : j + stride*wo : stride]."""
    v = core.slice(t, 2, i, i + stride * (ho - 1) + 1, stride)
    return core.slice(v, 3, j, j + stride * (wo - 1) + 1, stride)


def _windows(xp, kh: int, kw: int, ho: int, wo: int, stride: int):
    """[N, C, kh*kw, Ho, Wo]: the k*k strided views stacked (one copy)."""
    return core.stack([_view(xp, i, j, ho, wo, stride) for i in range(kh) for j in range(kw)], 2)


_INDEX_CACHE: dict[tuple, object] = {}


def _im2col_ids(n: int, h: int, w: int, kh: int, kw: int, stride: int, padding: int):
    """i64 [N*Ho*Wo*kh*kw]: for each output position and kernel offset, the row of the input's
    [N*H*W (+1), C] channels-last table it reads; padding reads row N*H*W (a zero row). Cached per shape."""
    key = (n, h, w, kh, kw, stride, padding)
    ids = _INDEX_CACHE.get(key)
    if ids is None:
        ho, wo = out_size(h, kh, stride, padding), out_size(w, kw, stride, padding)
        r = np.arange(ho)[:, None, None, None] * stride + np.arange(kh)[None, None, :, None] - padding
        c = np.arange(wo)[None, :, None, None] * stride + np.arange(kw)[None, None, None, :] - padding
        r, c = np.broadcast_arrays(r, c)  # [Ho, Wo, kh, kw]
        inside = (r >= 0) & (r < h) & (c >= 0) & (c < w)
        base = (np.arange(n) * h * w)[:, None, None, None, None]
        rows = np.where(inside[None], base + r[None] * w + c[None], n * h * w)
        if len(_INDEX_CACHE) > 64:
            _INDEX_CACHE.clear()
        trace = symbolic.active()  # cached across calls: made outside a compiled function's recording
        with trace.outside() if trace is not None else contextlib.nullcontext():
            ids = core.from_numpy(np.ascontiguousarray(rows.reshape(-1).astype(np.int64)))
        _INDEX_CACHE[key] = ids
    return ids


def conv2d_forward(x, w, b, stride: int, padding: int):
    """(out [N, O, Ho, Wo], saved) with saved = (cols [N*Ho*Wo, kh*kw*C], ids, w2 [O, kh*kw*C]).

    im2col as one row gather: x goes channels-last ([N*H*W, C] rows, plus a zero row that padding
    reads), the runtime's gather_rows kernel picks each output position's kh*kw rows, and one linear
    with the kernel reordered to [O, kh, kw, C] gives the output; strided views of NCHW data would
    be copied element by element, rows of C are copied as rows."""
    n, c, h, wd = x.shape
    o, _c, kh, kw = w.shape
    ho, wo = out_size(h, kh, stride, padding), out_size(wd, kw, stride, padding)
    ids = _im2col_ids(n, h, wd, kh, kw, stride, padding)
    rows = core.reshape(core.contiguous(core.permute(x, [0, 2, 3, 1])), [n * h * wd, c])
    table = core.concat([rows, core.zeros([1, c], x.dtype)], 0)
    cols = core.reshape(core.embedding(table, ids), [n * ho * wo, kh * kw * c])
    w2 = core.reshape(core.contiguous(core.permute(w, [0, 2, 3, 1])), [o, kh * kw * c])
    out = core.linear(cols, w2) if b is None else core.add(core.linear(cols, w2), b)  # [N*Ho*Wo, O]
    out = core.contiguous(core.permute(core.reshape(out, [n, ho, wo, o]), [0, 3, 1, 2]))
    return out, (cols, ids, w2)


@rule("conv2d")
def _conv2d(g, out, needs, x, w, b, stride, padding, saved):
    cols, ids, w2 = saved
    n, o, ho, wo = g.shape
    _o, c, kh, kw = w.shape
    gm = core.reshape(core.contiguous(core.permute(g, [0, 2, 3, 1])), [n * ho * wo, o])
    if g.dtype != "f32":
        gm = core.astype(gm, "f32")
    gx = gw = gb = None
    if needs[1]:
        gw2 = core.matmul(core.transpose(gm, 0, 1), cols)  # [O, kh*kw*C]
        gw = core.contiguous(core.permute(core.reshape(gw2, [o, kh, kw, c]), [0, 3, 1, 2]))
        gw = _float_grad(gw, w)
    if needs[2]:
        gb = _float_grad(core.sum(gm, 0), b)
    if needs[0]:
        _n, _c, h, wd = x.shape
        gcols = core.reshape(core.matmul(gm, w2), [n * ho * wo * kh * kw, c])
        gtable = core.scatter_add_rows(ids, gcols, n * h * wd + 1)  # col2im: the zero row takes padding's share
        gx = core.reshape(core.slice(gtable, 0, 0, n * h * wd), [n, h, wd, c])
        gx = _float_grad(core.contiguous(core.permute(gx, [0, 3, 1, 2])), x)
    return [gx, gw, gb, None, None, None]


def _col2im(gcols, x_shape, kh: int, kw: int, ho: int, wo: int, stride: int, padding: int):
    """The adjoint of _windows o _padded: each window block added back into its view of zeros."""
    n, c, h, wd = x_shape
    g = core.zeros([n, c, h + 2 * padding, wd + 2 * padding], gcols.dtype)
    blocks = core.reshape(gcols, [n, c, kh * kw, ho, wo])
    for idx in range(kh * kw):
        view = _view(g, idx // kw, idx % kw, ho, wo, stride)
        core.copy_(view, core.add(view, core.select(blocks, 2, idx)))
    if padding:
        g = core.contiguous(_view(g, padding, padding, h, wd, 1))
    return g


def _channels_last_table(x, pad_value: float):
    """x [N, C, H, W] as rows [N*H*W + 1, C] (channels last), the extra row pad_value (what padding reads)."""
    n, c, h, w = x.shape
    rows = core.reshape(core.contiguous(core.permute(x, [0, 2, 3, 1])), [n * h * w, c])
    return core.concat([rows, core.full([1, c], pad_value, x.dtype)], 0)


def _to_nchw(rows, n: int, h: int, w: int, c: int):
    return core.contiguous(core.permute(core.reshape(rows, [n, h, w, c]), [0, 3, 1, 2]))


def max_pool2d_forward(x, k: int, stride: int, padding: int):
    """(out [N, C, Ho, Wo], saved (argmax [N*Ho*Wo, C] of the window position, first on ties in row-major
    window order, as PyTorch's CPU kernel; ids)): the windows are one row gather of the channels-last
    input (padding reads a -inf row)."""
    n, c, h, w = x.shape
    ho, wo = out_size(h, k, stride, padding), out_size(w, k, stride, padding)
    ids = _im2col_ids(n, h, w, k, k, stride, padding)
    win = core.reshape(core.embedding(_channels_last_table(x, float("-inf")), ids), [n * ho * wo, k * k, c])
    return _to_nchw(core.max(win, 1), n, ho, wo, c), (core.argmax(win, 1), ids)


@rule("max_pool2d")
def _max_pool2d(g, out, needs, x, k, stride, padding, saved):
    arg, ids = saved
    n, c, ho, wo = g.shape
    _n, _c, h, w = x.shape
    gm = core.reshape(core.contiguous(core.permute(g, [0, 2, 3, 1])), [n * ho * wo, 1, c])
    slots = core.reshape(core.arange(0, k * k), [1, k * k, 1])
    gcols = core.where(core.eq(core.unsqueeze(arg, 1), slots), gm, core.zeros([], g.dtype))
    gtable = core.scatter_add_rows(ids, core.reshape(gcols, [n * ho * wo * k * k, c]), n * h * w + 1)
    gx = _to_nchw(core.slice(gtable, 0, 0, n * h * w), n, h, w, c)
    return [_float_grad(gx, x), None, None, None, None]


def avg_pool2d_forward(x, k: int, stride: int, padding: int):
    n, c, h, w = x.shape
    ho, wo = out_size(h, k, stride, padding), out_size(w, k, stride, padding)
    return core.mean(_windows(_padded(x, padding), k, k, ho, wo, stride), 2)


@rule("avg_pool2d")
def _avg_pool2d(g, out, needs, x, k, stride, padding):
    n, c, ho, wo = g.shape
    share = core.mul(g, 1.0 / (k * k))  # count_include_pad: every window divides by k*k
    gx = _col2im(core.stack([share] * (k * k), 2), x.shape, k, k, ho, wo, stride, padding)
    return [_float_grad(gx, x), None, None, None]
