"""The differentiable compositions that stand for fused ops without a backward kernel.

When an input of rms_norm, layer_norm, rope, attention, swiglu, swiglu_linear or rms_norm_linear is
tracked, builtins/core.py's `core` runs the op as its composition here (differentiable `core` ops,
each taped on the run's tape) instead of the fused kernel; with no tracked input the kernel runs.
Which op is taped how is optable.py's CORE_OPS (the one table of ops and gradients).
Invariants: a composition computes what its fused op computes (tests/learning compare them); it
uses only `core` ops, so it runs on the device that holds its inputs; this module holds no state.
"""
from __future__ import annotations

import math

import numpy as np

from ..core import core
from ..core import runtime as raw_core
from . import optable


# ---------------------------------------------------------------- composite forwards (fused op, no backward kernel)

def _rms_norm(x, w=None, eps=1e-5):
    y = core.mul(x, core.rsqrt(core.add(core.mean(core.mul(x, x), -1, True), float(eps))))
    return core.mul(y, w) if w is not None else y


def _layer_norm(x, w=None, b=None, eps=1e-5):
    centered = core.sub(x, core.mean(x, -1, True))
    var = core.mean(core.mul(centered, centered), -1, True)
    y = core.mul(centered, core.rsqrt(core.add(var, float(eps))))
    if w is not None:
        y = core.mul(y, w)
    if b is not None:
        y = core.add(y, b)
    return y


def _rope_tables(seq: int, half: int, offset: int, base: float, ndim_after_seq: int, dtype: str):
    pos = np.arange(offset, offset + seq, dtype=np.float64)[:, None]
    inv = base ** (-np.arange(half, dtype=np.float64) * 2.0 / (2 * half))
    ang = pos * inv[None, :]
    shape = [seq] + [1] * ndim_after_seq + [half]
    cos = raw_core.from_numpy(np.cos(ang).astype(np.float32).reshape(shape))
    sin = raw_core.from_numpy(np.sin(ang).astype(np.float32).reshape(shape))
    if dtype != "f32":
        cos, sin = raw_core.astype(cos, dtype), raw_core.astype(sin, dtype)
    return cos, sin


def _rope(x, pos_offset=0, base=10000.0, neox=False):
    d = x.shape[-1]
    half = d // 2
    cos, sin = _rope_tables(x.shape[-3], half, int(pos_offset), float(base), 1, x.dtype)
    if neox:
        a, b = core.slice(x, -1, 0, half), core.slice(x, -1, half, d)
    else:
        a, b = core.slice(x, -1, 0, d, 2), core.slice(x, -1, 1, d, 2)
    ra = core.sub(core.mul(a, cos), core.mul(b, sin))
    rb = core.add(core.mul(a, sin), core.mul(b, cos))
    if neox:
        return core.concat([ra, rb], -1)
    return core.reshape(core.stack([ra, rb], -1), list(x.shape))


def _attention(q, k, v, mask=None, scale=None, causal=False, pos_offset=0, softcap=0.0):
    sq, hq, dh = q.shape
    sk, hkv, _ = k.shape
    group = hq // hkv
    qh = core.permute(q, [1, 0, 2])
    kh, vh = core.permute(k, [1, 0, 2]), core.permute(v, [1, 0, 2])
    if group > 1:
        kh = core.reshape(core.expand(core.unsqueeze(kh, 1), [hkv, group, sk, dh]), [hq, sk, dh])
        vh = core.reshape(core.expand(core.unsqueeze(vh, 1), [hkv, group, sk, v.shape[2]]), [hq, sk, v.shape[2]])
    s = float(scale) if scale is not None else 1.0 / math.sqrt(dh)
    scores = core.mul(core.matmul(qh, core.transpose(kh, -2, -1)), s)
    if softcap:  # as the kernel: cap * tanh(scores / cap) before the mask
        scores = core.mul(core.tanh(core.mul(scores, 1.0 / float(softcap))), float(softcap))
    if mask is not None:
        scores = core.add(scores, mask)
    if causal:
        scores = core.add(scores, raw_core.causal_mask(sq, sk, int(pos_offset)))
    weights = core.softmax(scores, -1)
    return core.permute(core.matmul(weights, vh), [1, 0, 2])


def _swiglu(gate, up=None):
    if up is None:  # one tensor whose last dim holds the [gate | up] halves
        half = gate.shape[-1] // 2
        gate, up = core.slice(gate, -1, 0, half), core.slice(gate, -1, half, 2 * half)
    return core.mul(core.silu(gate), up)


def _swiglu_linear(gate_up, w, residual=None):
    return core.linear(_swiglu(gate_up), w, residual)


def _rms_norm_linear(x, norm_w, w, eps=1e-5, residual=None):
    return core.linear(_rms_norm(x, norm_w, eps), w, residual)


COMPOSITES = {"rms_norm": _rms_norm, "layer_norm": _layer_norm, "rope": _rope, "attention": _attention,
              "swiglu": _swiglu, "swiglu_linear": _swiglu_linear, "rms_norm_linear": _rms_norm_linear}
assert set(COMPOSITES) == set(optable.core_ops("composite"))
