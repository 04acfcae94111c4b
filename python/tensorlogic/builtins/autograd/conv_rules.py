"""Forwards and backward rules of conv2d and the 2-D pools (builtins/conv.py), written like rules.py's
and registered in the same RULES table.

Every window op is one element gather (the runtime's gather_rows over x's elements as rows of one,
plus a pad element and a 1.0) with an index map cached per shape, laid out so that nothing is
permuted: conv2d gathers the columns [N, C*kh*kw, Ho*Wo] and multiplies them by the kernel as it
lies ([O, C*kh*kw], the bias appended as a column that meets a row of ones), one batched matmul
whose result is already NCHW; its backward is two matmuls (the weight and bias gradients in one,
against the columns gathered a window per row) and col2im, itself a gather: each element of x
collects the column gradients of the window positions that read it (an inverse index map, summed
in position order: deterministic, no atomics, parallel on every backend). The pools gather the windows
as [k*k, N*C*Ho*Wo] and reduce over the first axis; max_pool2d's gradient goes to the first maximum
of each window (row-major window order), as PyTorch's CPU kernel does. Everything is a composition of
`_core` ops (so it runs on every backend with no kernel of its own); the CPU kernels have fast paths
for these shapes (one-element gather rows, row-major B in matmul, vectorized max/argmax). Invariant: forwards
run with recording off, and the builtin records one node whose rule gets the forward's saved
tensors (the gathered table, the flattened kernel / the argmax) as extra (untracked) arguments.
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


_CACHE: dict[tuple, object] = {}


def _cached(key: tuple, make):
    """A device tensor (or a tuple holding one) made once per key: index maps, table tails, slot
    numbers, zeros. Made outside a compiled function's recording, so a replay reads it as a constant
    rather than re-making it. Only shapes and dtypes are keys: never a value that a program changes."""
    t = _CACHE.get(key)
    if t is None:
        if len(_CACHE) > 128:
            _CACHE.clear()
        trace = symbolic.active()
        with trace.outside() if trace is not None else contextlib.nullcontext():
            t = make()
        _CACHE[key] = t
    return t


# The layouts _window_ids builds, as the order of the axes (n, c, ho, wo, i, j) of the window
# elements and the shape they are read in.
_LAYOUTS = {
    "kn": (0, 1, 4, 5, 2, 3),       # [N, C*kh*kw, Ho*Wo]: conv2d's columns, one [K, Ho*Wo] matrix per image
    "rows": (0, 2, 3, 1, 4, 5),     # [N*Ho*Wo, C*kh*kw]: the same, a kernel window per row (the weight gradient)
    "windows": (4, 5, 0, 1, 2, 3),  # [kh*kw, N*C*Ho*Wo]: the pools, one row per window position
}


def _window_ids_np(shape, kh: int, kw: int, stride: int, padding: int, layout: str, ones: bool):
    """_window_ids as a flat NumPy int64 array."""
    n, c, h, w = shape
    ho, wo = out_size(h, kh, stride, padding), out_size(w, kw, stride, padding)
    r = (np.arange(ho)[:, None, None, None] * stride + np.arange(kh)[None, None, :, None] - padding)
    q = (np.arange(wo)[None, :, None, None] * stride + np.arange(kw)[None, None, None, :] - padding)
    r, q = np.broadcast_arrays(r, q)  # [Ho, Wo, kh, kw]
    inside = (r >= 0) & (r < h) & (q >= 0) & (q < w)
    plane = (np.arange(n * c) * h * w).reshape(n, c, 1, 1, 1, 1)
    ids = np.where(inside[None, None], plane + (r * w + q)[None, None], n * c * h * w)
    ids = ids.transpose(_LAYOUTS[layout])
    if ones:  # K is axis 1 of both [N, K, Ho*Wo] ("kn") and [N*Ho*Wo, K] ("rows")
        lead = (n, c * kh * kw, ho * wo) if layout == "kn" else (n * ho * wo, c * kh * kw)
        ids = ids.reshape(lead)
        ids = np.concatenate([ids, np.full(lead[:1] + (1,) + lead[2:], n * c * h * w + 1)], 1)
    return ids.reshape(-1).astype(np.int64)


def _col2im_ids(shape, kh: int, kw: int, stride: int, padding: int, layout: str):
    """(ids i32/i64 [J * N*C*H*W], J, needs_zero): the adjoint of _window_ids as a gather. For each
    element e of x, the positions t of the window gradients (layout's order) that read it, J rows of
    them (J: the most windows any element is read by), in increasing t; where an element is read by
    fewer, a position holding zero. Layout "kn" reads conv2d's column gradients [N, C*kh*kw + 1,
    Ho*Wo] whose last row is zero (the matmul that makes them has a zero row appended), so that is
    the zero; "windows" reads position T, one past the windows, which _col2im appends as a zero
    (`needs_zero`) unless every element is read by exactly J windows (pools whose windows tile x)."""
    n, c, h, w = shape

    def make():
        kn = layout == "kn"
        ids = _window_ids_np(shape, kh, kw, stride, padding, layout, kn)
        count, total = n * c * h * w, ids.size
        t = np.arange(total)
        keep = ids < count  # drop the padding reads (and the bias row)
        ids, t = ids[keep], t[keep]
        order = np.argsort(ids, kind="stable")  # by element, then by position
        ids, t = ids[order], t[order]
        reads = np.bincount(ids, minlength=count)
        rows = int(reads.max()) if count else 0
        start = np.concatenate([[0], np.cumsum(reads)[:-1]])
        rank = np.arange(ids.size) - start[ids]
        k = c * kh * kw
        zero_at = k * out_size(h, kh, stride, padding) * out_size(w, kw, stride, padding) if kn else total
        inv = np.full((rows, count), zero_at, np.int64)
        inv[rank, ids] = t
        flat = np.ascontiguousarray(inv.reshape(-1).astype(np.int32 if total + 1 < 2**31 else np.int64))
        needs_zero = not kn and not (count and reads.min() == rows)
        return core.from_numpy(flat), rows, needs_zero
    return _cached(("col2im", n, c, h, w, kh, kw, stride, padding, layout), make)


def _window_ids(shape, kh: int, kw: int, stride: int, padding: int, layout: str, ones: bool = False):
    """i32 (i64 for inputs of 2**31 elements or more) [N*C*Ho*Wo*kh*kw]: for each element of every
    kh x kw window (in `layout`'s order; a window's elements in row-major (i, j) order), its index in
    x [N, C, H, W] flattened, or N*C*H*W (the pad element _element_table appends) where the window
    reads padding. `ones` (layouts "kn" and "rows"): one more K entry per window reading N*C*H*W + 1
    (the table's 1.0), so a matmul with the bias appended to the kernel adds the bias."""
    n, c, h, w = shape

    def make():
        ids = _window_ids_np(shape, kh, kw, stride, padding, layout, ones)
        small = n * c * h * w + 2 < 2**31  # i32 ids halve the index traffic of the gather
        return core.from_numpy(np.ascontiguousarray(ids.astype(np.int32 if small else np.int64)))
    return _cached(("ids", n, c, h, w, kh, kw, stride, padding, layout, ones), make)


def _element_table(x, pad_value: float, tail: bool = True):
    """x's elements as rows of one [N*C*H*W + 2, 1], then pad_value (what padding reads) and 1.0
    (what the bias column reads): the table an element gather (the runtime's gather_rows) reads.
    Without `tail` (windows that read no padding and no bias), x itself as [N*C*H*W, 1]: no copy."""
    rows = core.reshape(core.contiguous(x), [x.numel, 1])
    if not tail:
        return rows
    end = _cached(("tail", pad_value, x.dtype),
                  lambda: core.astype(core.from_numpy(np.array([[pad_value], [1.0]], np.float32)), x.dtype))
    return core.concat([rows, end], 0)


def _gather(table, ids, shape):
    return core.reshape(core.embedding(table, ids), shape)


def _col2im(gwin, shape, kh: int, kw: int, stride: int, padding: int, layout: str):
    """The adjoint of the element gather (col2im): each element of x gets the sum of the gradients
    of the window positions that read it, as a gather of those positions (_col2im_ids) and a sum
    over its J rows, in increasing position order: deterministic, no atomics, and parallel on every
    backend (a scatter of one-element rows walks its ids on one thread on the GPUs); padding's
    share is dropped."""
    ids, rows, needs_zero = _col2im_ids(shape, kh, kw, stride, padding, layout)
    if rows == 0:  # an empty x: nothing reads it
        return core.zeros(list(shape), "f32")
    table = core.reshape(gwin, [gwin.numel, 1])
    if needs_zero:  # position T reads a zero
        zero = _cached(("zero_row", gwin.dtype), lambda: core.zeros([1, 1], gwin.dtype))
        table = core.concat([table, zero], 0)
    g = core.reshape(core.embedding(table, ids), [rows, ids.numel // rows])
    if rows > 1:
        g = core.sum(g, 0)
    return core.reshape(g, list(shape))


def conv2d_forward(x, w, b, stride: int, padding: int):
    """(out [N, O, Ho, Wo], saved (table, w2 [O, C*kh*kw])).

    im2col as one element gather of x (cached index map, layout "kn": [N, C*kh*kw (+1), Ho*Wo]) and
    one batched matmul with the kernel flattened as it lies ([O, C, kh, kw] -> [O, C*kh*kw], a view),
    the bias appended as one more column that meets a row of ones in the columns: out[n] = w2 . cols[n]
    has B row-major (the matmul kernel's outer-product path, no packing) and comes out
    [N, O, Ho*Wo], already NCHW: no permute of the input, the kernel or the output, no bias add."""
    n, c, h, wd = x.shape
    o, _c, kh, kw = w.shape
    ho, wo = out_size(h, kh, stride, padding), out_size(wd, kw, stride, padding)
    k = c * kh * kw
    table = _element_table(x, 0.0)
    w2 = core.reshape(w, [o, k])
    wb = w2 if b is None else core.concat([w2, core.reshape(b, [o, 1])], 1)
    ids = _window_ids(x.shape, kh, kw, stride, padding, "kn", ones=b is not None)
    cols = _gather(table, ids, [n, wb.shape[1], ho * wo])
    return core.reshape(core.matmul(wb, cols), [n, o, ho, wo]), (table, w2)


@rule("conv2d")
def _conv2d(g, out, needs, x, w, b, stride, padding, saved):
    table, w2 = saved
    n, o, ho, wo = g.shape
    _o, c, kh, kw = w.shape
    k = c * kh * kw
    g3 = core.reshape(g, [n, o, ho * wo])
    if g.dtype != "f32":
        g3 = core.astype(g3, "f32")
    gx = gw = gb = None
    if needs[1] or needs[2]:
        # [gw2 | gb] = go . [cols | 1]: the columns gathered again a window per row (B row-major),
        # with the ones column when there is a bias, so one matmul gives both gradients.
        go = core.reshape(core.contiguous(core.permute(g3, [1, 0, 2])), [o, n * ho * wo])  # rows of Ho*Wo moved
        with_b = b is not None
        ids = _window_ids(x.shape, kh, kw, stride, padding, "rows", ones=with_b)
        gwb = core.matmul(go, _gather(table, ids, [n * ho * wo, k + with_b]))
        if needs[1]:
            gw2 = core.contiguous(core.slice(gwb, 1, 0, k)) if with_b else gwb
            gw = _float_grad(core.reshape(gw2, [o, c, kh, kw]), w)
        if needs[2]:
            gb = _float_grad(core.contiguous(core.select(gwb, 1, k)), b)
    if needs[0]:
        # [N, K + 1, Ho*Wo] = [w2^T; 0] . g[n] (B row-major): the zero last row is what col2im's
        # gather reads for the windows an element is not in
        zero = _cached(("zero_cols", o), lambda: core.zeros([1, o], "f32"))
        gcols = core.matmul(core.concat([core.transpose(w2, 0, 1), zero], 0), g3)
        gx = _float_grad(_col2im(gcols, x.shape, kh, kw, stride, padding, "kn"), x)
    return [gx, gw, gb, None, None, None]


def max_pool2d_forward(x, k: int, stride: int, padding: int, need_arg: bool = True):
    """(out [N, C, Ho, Wo], saved (argmax [N*C*Ho*Wo] of the window position, first on ties in
    row-major window order, as PyTorch's CPU kernel)): the windows are one element gather of x
    (layout "windows", padding reads -inf) reduced over their first axis, NCHW in and out: every
    op runs over rows of N*C*Ho*Wo elements, not over windows of k*k. Without `need_arg` (nothing
    to differentiate) the argmax is None."""
    n, c, h, w = x.shape
    ho, wo = out_size(h, k, stride, padding), out_size(w, k, stride, padding)
    win = _gather(_element_table(x, float("-inf"), padding > 0),
                  _window_ids(x.shape, k, k, stride, padding, "windows"), [k * k, n * c * ho * wo])
    return core.reshape(core.max(win, 0), [n, c, ho, wo]), core.argmax(win, 0) if need_arg else None


@rule("max_pool2d")
def _max_pool2d(g, out, needs, x, k, stride, padding, arg):
    n, c, ho, wo = g.shape
    slots = _cached(("slots", k * k), lambda: core.reshape(core.arange(0, k * k), [k * k, 1]))
    zero = _cached(("zero", g.dtype), lambda: core.zeros([], g.dtype))
    gwin = core.where(core.eq(arg, slots), core.reshape(g, [n * c * ho * wo]), zero)
    gx = _col2im(gwin, x.shape, k, k, stride, padding, "windows")
    return [_float_grad(gx, x), None, None, None, None]


def avg_pool2d_forward(x, k: int, stride: int, padding: int):
    """The windows gathered as max_pool2d's (padding reads 0) and averaged: count_include_pad."""
    n, c, h, w = x.shape
    ho, wo = out_size(h, k, stride, padding), out_size(w, k, stride, padding)
    win = _gather(_element_table(x, 0.0, padding > 0), _window_ids(x.shape, k, k, stride, padding, "windows"),
                  [k * k, n * c * ho * wo])
    return core.reshape(core.mean(win, 0), [n, c, ho, wo])


@rule("avg_pool2d")
def _avg_pool2d(g, out, needs, x, k, stride, padding):
    n, c, ho, wo = g.shape
    share = core.mul(core.reshape(g, [1, n * c * ho * wo]), 1.0 / (k * k))  # every window divides by k*k
    gwin = core.contiguous(core.expand(share, [k * k, n * c * ho * wo]))
    gx = _col2im(gwin, x.shape, k, k, stride, padding, "windows")
    return [_float_grad(gx, x), None, None, None]
