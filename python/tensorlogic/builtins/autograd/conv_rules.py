"""Forwards and backward rules of conv2d and the 2-D pools (builtins/conv.py), written like rules.py's
and registered in the same RULES table.

conv2d is im2col + the runtime's matmul: the k*k strided views of the (padded) input are stacked into
columns [N, C*k*k, Ho*Wo] and multiplied by the kernel [O, C*k*k]; its backward is two matmuls and
col2im (each column block added back into its strided view of one zero tensor). max_pool2d stacks
the window's views and takes the max; its gradient goes to the first maximum of each window, as
PyTorch's CPU kernel does. Everything is a composition of `_core` ops (so it runs on every backend
with no kernel of its own). Invariant: forwards run with recording off, and the builtin records one
node whose rule gets the forward's saved columns / argmax as extra (untracked) arguments.
"""
from __future__ import annotations

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


def conv2d_forward(x, w, b, stride: int, padding: int):
    """(out [N, O, Ho, Wo], cols [N, C*kh*kw, Ho*Wo])."""
    n, c, h, wd = x.shape
    o, _c, kh, kw = w.shape
    ho, wo = out_size(h, kh, stride, padding), out_size(wd, kw, stride, padding)
    cols = core.reshape(_windows(_padded(x, padding), kh, kw, ho, wo, stride), [n, c * kh * kw, ho * wo])
    out = core.matmul(core.reshape(w, [o, c * kh * kw]), cols)  # [N, O, L]
    if b is not None:
        out = core.add(out, core.reshape(b, [o, 1]))
    return core.reshape(out, [n, o, ho, wo]), cols


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


@rule("conv2d")
def _conv2d(g, out, needs, x, w, b, stride, padding, cols):
    n, o, ho, wo = g.shape
    _c, c, kh, kw = w.shape
    g2 = core.reshape(core.contiguous(g), [n, o, ho * wo])
    gx = gw = gb = None
    if needs[1]:
        gw = core.sum(core.matmul(g2, core.transpose(cols, -2, -1)), 0)  # [O, C*kh*kw]
        gw = _float_grad(core.reshape(gw, list(w.shape)), w)
    if needs[2]:
        gb = _float_grad(core.sum(core.sum(g2, 2), 0), b)
    if needs[0]:
        gcols = core.matmul(core.transpose(core.reshape(w, [o, c * kh * kw]), 0, 1), g2)  # [N, C*kh*kw, L]
        gx = _float_grad(_col2im(gcols, x.shape, kh, kw, ho, wo, stride, padding), x)
    return [gx, gw, gb, None, None, None]


def max_pool2d_forward(x, k: int, stride: int, padding: int):
    """(out [N, C, Ho, Wo], argmax [N, C, Ho, Wo] of the window position, first on ties)."""
    n, c, h, w = x.shape
    ho, wo = out_size(h, k, stride, padding), out_size(w, k, stride, padding)
    win = _windows(_padded(x, padding, float("-inf")), k, k, ho, wo, stride)
    return core.max(win, 2), core.argmax(win, 2)


@rule("max_pool2d")
def _max_pool2d(g, out, needs, x, k, stride, padding, arg):
    n, c, ho, wo = g.shape
    zero = core.zeros([], g.dtype)
    picks = [core.where(core.eq(arg, idx), g, zero) for idx in range(k * k)]
    gx = _col2im(core.stack(picks, 2), x.shape, k, k, ho, wo, stride, padding)
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
