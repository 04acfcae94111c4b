"""Taping the runtime's ops: `enable()` turns builtins/core.py's `core` into the traced runtime.

Until the first learnable tensor exists, `core`'s attributes are `_core`'s own functions (no cost for
programs that never learn). `enable()` then replaces every differentiable op with a wrapper that runs
the op and, when recording is on and an input is tracked, records it on the tape (`tape.py`); it also
hooks `Tensor`'s arithmetic operators, `[]` and shape methods the same way, so `a + b` inside the
interpreter or a builtin is taped like `core.add(a, b)`.
Which op is taped how is optable.py's CORE_OPS (the one table of ops and gradients).
Invariants: a wrapper returns exactly what the raw op returns; ops whose fused kernel has no backward
(rms_norm, layer_norm, rope, attention, swiglu, swiglu_linear, rms_norm_linear) run as compositions of
differentiable ops, but only when an input is tracked; ops with no gradient (comparisons, argmax,
creation) are never wrapped; ops that would cut the graph (a KV-cache write, `copy_`, `t[i] = x`)
refuse a tracked input with an error naming them.
"""
from __future__ import annotations

import math

import numpy as np

from ..core import Tensor, core
from ..core import runtime as raw_core
from . import optable
from .tape import STATE, TRACKED, AutogradError, record

DIFFERENTIABLE = optable.core_ops("rule") + optable.core_ops("zero")


def _any_tracked(args) -> bool:
    tracked = TRACKED
    for a in args:
        c = a.__class__
        if c is Tensor:
            if id(a) in tracked:
                return True
        elif (c is list or c is tuple) and a:
            for t in a:
                if id(t) in tracked:
                    return True
    return False


def _wrap(raw_fn, backward_rule):
    def traced(*args, **kw):
        out = raw_fn(*args, **kw)
        if STATE.recording and _any_tracked(args):
            record(backward_rule, args, kw, out)
        return out
    traced.__name__ = raw_fn.__name__
    traced.__doc__ = raw_fn.__doc__
    return traced


def _wrap_composite(raw_fn, composite):
    def traced(*args, **kw):
        if STATE.recording and _any_tracked(args):
            return composite(*args, **kw)
        return raw_fn(*args, **kw)
    traced.__name__ = raw_fn.__name__
    traced.__doc__ = raw_fn.__doc__
    return traced


def _wrap_pieces(raw_fn, slice_rule):
    """split/chunk: each returned piece is taped as a slice of the input."""
    def traced(x, *args, **kw):
        pieces = raw_fn(x, *args, **kw)
        if STATE.recording and id(x) in TRACKED:
            dim = kw.get("dim", args[1] if len(args) > 1 else 0)
            dim = int(dim) % x.ndim
            start = 0
            for p in pieces:
                n = p.shape[dim]
                record(slice_rule, (x, dim, start, start + n, 1), {}, p)
                start += n
        return pieces
    traced.__name__ = raw_fn.__name__
    traced.__doc__ = raw_fn.__doc__
    return traced


def _wrap_refusal(raw_fn, name: str, first: int = 0):
    """An op that would cut the graph: a tracked input from position `first` on is an error."""
    def traced(*args, **kw):
        if STATE.recording and _any_tracked(args[first:]):
            raise AutogradError(optable.refusal_message(name))
        return raw_fn(*args, **kw)
    traced.__name__ = raw_fn.__name__
    traced.__doc__ = raw_fn.__doc__
    return traced


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
# copy_(dst, src): writing into a learnable is a parameter update; a tracked src would lose its gradient
_REFUSAL_FIRST = {"copy_": 1}


# ---------------------------------------------------------------- Tensor operators and methods

_BINARY_DUNDERS = {"__add__": "add", "__sub__": "sub", "__mul__": "mul", "__truediv__": "div",
                   "__pow__": "pow", "__matmul__": "matmul", "__mod__": "mod"}
_SHAPE_METHODS = ("sum", "mean", "max", "min", "transpose", "flatten", "squeeze", "unsqueeze", "expand",
                  "contiguous", "astype", "softmax")


def _hook_binary(cls, dunder: str, rule_fn):
    original = getattr(cls, dunder)
    reflected = getattr(cls, "__r" + dunder[2:])

    def forward(a, b):
        out = original(a, b)
        if out is not NotImplemented and STATE.recording and (id(a) in TRACKED or id(b) in TRACKED):
            record(rule_fn, (a, b), {}, out)
        return out

    def backward_order(a, b):  # `b op a` with a the tensor
        out = reflected(a, b)
        if out is not NotImplemented and STATE.recording and (id(a) in TRACKED or id(b) in TRACKED):
            record(rule_fn, (b, a), {}, out)
        return out
    setattr(cls, dunder, forward)
    setattr(cls, "__r" + dunder[2:], backward_order)


def _hook_method(cls, name: str, rule_fn, normalize=None):
    original = getattr(cls, name)

    def method(self, *args, **kw):
        out = original(self, *args, **kw)
        if STATE.recording and id(self) in TRACKED:
            call_args = normalize(self, args) if normalize else (self,) + args
            record(rule_fn, call_args, kw, out)
        return out
    method.__name__ = name
    method.__doc__ = original.__doc__
    setattr(cls, name, method)


def _hook_setitem(cls):
    """`t[i] = x` with x tracked would copy x's values and lose its gradient: an error instead."""
    original = cls.__setitem__

    def setitem(self, key, value):
        if STATE.recording and _any_tracked((value,)):
            raise AutogradError("assigning into a tensor (t[i] = x) records no gradient, and x is learnable or "
                                "computed from one: build the tensor with concat/stack/where instead, or "
                                "detach(x) to store its values")
        return original(self, key, value)
    setattr(cls, "__setitem__", setitem)


def _shape_args(args):
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        return list(args[0])
    return list(args)


def enable() -> None:
    """Tape differentiable ops from now on (idempotent; called when the first learnable is made)."""
    if STATE.enabled:
        return
    from .rules import RULES  # noqa: PLC0415
    for name in DIFFERENTIABLE:
        setattr(core, name, _wrap(getattr(raw_core, name), RULES[name]))
    for name, composite in COMPOSITES.items():
        setattr(core, name, _wrap_composite(getattr(raw_core, name), composite))
    for name, (kind, _why) in optable.CORE_OPS.items():
        if kind == optable.REFUSES:
            setattr(core, name, _wrap_refusal(getattr(raw_core, name), name, _REFUSAL_FIRST.get(name, 0)))
    core.split = _wrap_pieces(raw_core.split, RULES["slice"])
    core.chunk = _wrap_pieces(raw_core.chunk, RULES["slice"])
    for dunder, op in _BINARY_DUNDERS.items():
        _hook_binary(Tensor, dunder, RULES[op])
    _hook_method(Tensor, "__neg__", RULES["neg"])
    _hook_method(Tensor, "__getitem__", RULES["getitem"])
    for name in _SHAPE_METHODS:
        _hook_method(Tensor, name, RULES[name])
    _hook_method(Tensor, "reshape", RULES["reshape"])
    _hook_method(Tensor, "permute", RULES["permute"], lambda self, args: (self, _shape_args(args)))
    _hook_setitem(Tensor)
    STATE.enabled = True
