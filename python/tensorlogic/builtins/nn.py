"""Neural-network builtins: normalization, embedding, RoPE, masks and attention.

Invariant: argument orders follow the existing TL programs (docs/language.md); shapes are checked here
with messages naming both shapes before `_core` sees them.
"""
from __future__ import annotations

import math

import numpy as np

from .convert import BuiltinArgError, Tensor, core, to_bool, to_float, to_int, to_tensor
from . import symbolic
from .symbolic import Symbolic
from .registry import builtin

C = "nn"


@builtin("rms_norm", "rms_norm(x, w, [eps])", "x / sqrt(mean(x^2) + eps) * w over the last dim",
         min_args=1, max_args=3, category=C)
def rms_norm(x, w=None, eps=1e-5):
    eps_f = eps if eps.__class__ is float else to_float(eps, "eps")
    if x.__class__ is Tensor and (w is None or w.__class__ is Tensor):
        return core.rms_norm(x, w, eps_f)  # the runtime checks that w matches x's last dim
    return core.rms_norm(to_tensor(x, "x"), to_tensor(w, "w") if w is not None else None, eps_f)


@builtin("rms_norm_linear", "rms_norm_linear(x, norm_w, W, [eps], [residual])",
         "linear(rms_norm(x, norm_w, eps), W) (+ residual) as one kernel: the norm is folded into the "
         "matrix product", min_args=3, max_args=5, category=C)
def rms_norm_linear(x, norm_w, w, eps=1e-5, residual=None):
    eps_f = eps if eps.__class__ is float else to_float(eps, "eps")
    nw = to_tensor(norm_w, "norm_w") if norm_w is not None else None
    res = to_tensor(residual, "residual") if residual is not None else None
    return core.rms_norm_linear(to_tensor(x, "x"), nw, to_tensor(w, "W"), eps_f, res)


@builtin("swiglu", "swiglu(gate, [up])",
         "silu(gate) * up as one kernel; with one argument the last dim holds [gate | up] halves "
         "(a fused gate/up projection's output)", min_args=1, max_args=2, category=C)
def swiglu(gate, up=None):
    return core.swiglu(to_tensor(gate, "gate"), to_tensor(up, "up") if up is not None else None)


@builtin("swiglu_linear", "swiglu_linear(gate_up, W, [residual])",
         "linear(swiglu(gate_up), W) (+ residual) as one kernel: gate_up's last dim holds the [gate | up] "
         "halves (twice W's input size)", min_args=2, max_args=3, category=C)
def swiglu_linear(gate_up, w, residual=None):
    res = to_tensor(residual, "residual") if residual is not None else None
    return core.swiglu_linear(to_tensor(gate_up, "gate_up"), to_tensor(w, "W"), res)


@builtin("layer_norm", "layer_norm(x, [w], [b], [eps])", "(x - mean) / sqrt(var + eps) * w + b over the last dim",
         min_args=1, max_args=4, category=C)
def layer_norm(x, w=None, b=None, eps=1e-5):
    x = to_tensor(x, "x")
    wt = to_tensor(w, "w") if w is not None else None
    bt = to_tensor(b, "b") if b is not None else None
    for name, p in (("w", wt), ("b", bt)):
        if p is not None and (p.ndim != 1 or x.ndim == 0 or p.shape[0] != x.shape[-1]):
            raise BuiltinArgError(f"{name} {list(p.shape)} must be 1-D with the size of x's last dim "
                                  f"({list(x.shape)})")
    return core.layer_norm(x, wt, bt, to_float(eps, "eps"))


@builtin("expert_linear", "expert_linear(x, W, ids, [experts])",
         "a mixture-of-experts layer's expert products: x [T, in] (or [T, k, in]), ids [T, k] -> [T, k, out] "
         "with row (t, j) = x[t] @ W_e^T, e = ids[t, j]; W is [experts, out, in] or, given experts, "
         "[experts * out, in] (may be quantized)", min_args=3, max_args=4, category=C)
def expert_linear(x, w, ids, experts=0):
    return core.expert_linear(to_tensor(x, "x"), to_tensor(w, "W"), to_tensor(ids, "ids"), to_int(experts, "experts"))


@builtin("embedding", "embedding(table, ids, [padding_idx])",
         "rows of table for integer ids (ids.shape + [D]); the row padding_idx gets no gradient (PyTorch's)",
         min_args=2, max_args=3, category=C)
def embedding(table, ids, padding_idx=None):
    rows = _embedding_rows(table, ids)
    if padding_idx is None:
        return rows
    from .autograd import tape  # noqa: PLC0415 - nn does not otherwise touch the tape
    pad = to_int(padding_idx, "padding_idx")
    ids_t = ids if isinstance(ids, Tensor) else to_tensor(ids if isinstance(ids, list) else [ids], "ids",
                                                          float_default=False)
    keep = core.unsqueeze(core.ne(ids_t, pad), -1)
    return core.where(keep, rows, tape.detach(rows))  # the padding rows' values, cut from the graph


def _embedding_rows(table, ids):
    table = to_tensor(table, "table")
    if table.ndim != 2:
        raise BuiltinArgError(f"table must be [vocab, dim], got {list(table.shape)}")
    rows = table.shape[0]
    if isinstance(ids, Tensor):
        ids_t = ids if ids.dtype in ("i32", "i64") else ids.astype("i64")
        return core.embedding(table, ids_t)  # the kernel reports out-of-range ids
    raw = ids if isinstance(ids, list) else [ids]
    if symbolic.active() is not None and any(i.__class__ is Symbolic for i in raw):
        # a compiled function's token argument: recorded as a fill, range-checked by the kernel
        for i in raw:
            if i.__class__ is not Symbolic and not 0 <= to_int(i, "id") < rows:
                raise BuiltinArgError(f"token id {i} is out of range for a table of {rows} rows")
        return core.embedding(table, to_tensor(raw, "ids", float_default=False))
    id_list = [to_int(i, "id") for i in raw]
    for i in id_list:
        if not 0 <= i < rows:
            raise BuiltinArgError(f"token id {i} is out of range for a table of {rows} rows")
    return core.embedding(table, core.from_numpy(np.array(id_list, dtype=np.int64)))


@builtin("scatter_add_rows", "scatter_add_rows(ids, src, rows)",
         "[rows, D] zeros with src[i] added into row ids[i] for each i (np.add.at: repeated ids add up, "
         "deterministically); the gradient of embedding", min_args=3, max_args=3, category=C)
def scatter_add_rows(ids, src, rows):
    src = to_tensor(src, "src")
    n_rows = to_int(rows, "rows")
    if src.ndim != 2:
        raise BuiltinArgError(f"src must be [n, D], got {list(src.shape)}")
    if isinstance(ids, Tensor):
        ids_t = ids if ids.dtype in ("i32", "i64") else ids.astype("i64")
        return core.scatter_add_rows(ids_t, src, n_rows)  # the kernel reports out-of-range ids
    id_list = [to_int(i, "id") for i in (ids if isinstance(ids, list) else [ids])]
    for pos, i in enumerate(id_list):
        if not 0 <= i < n_rows:
            raise BuiltinArgError(f"id {i} (position {pos} of {len(id_list)} ids) is out of range for "
                                  f"{n_rows} rows (src {list(src.shape)})")
    return core.scatter_add_rows(core.from_numpy(np.array(id_list, dtype=np.int64)), src, n_rows)


@builtin("rope", "rope(x, position_offset, [base], [neox])",
         "rotary position embedding of x [..., seq, heads, head_dim] (adjacent pairs unless neox)",
         min_args=1, max_args=4, category=C)
def rope(x, pos_offset=0, base=10000.0, neox=False):
    x = to_tensor(x, "x")  # the runtime checks x is [..., seq, heads, head_dim] with an even head_dim
    pos = pos_offset if pos_offset.__class__ is Symbolic else to_int(pos_offset, "position_offset")
    return core.rope(x, pos, to_float(base, "base"), to_bool(neox, "neox"))


@builtin("causal_mask", "causal_mask(n, [m], [offset])", "[n, m] f32 mask: 0 where key <= query + offset, else -inf",
         min_args=1, max_args=3, category=C)
def causal_mask(n, m=None, offset=0):
    n_ = to_int(n, "n")
    m_ = to_int(m, "m") if m is not None else None
    return core.causal_mask(n_, m_, to_int(offset, "offset"))


@builtin("apply_attention_mask", "apply_attention_mask(scores, mask)", "scores + mask (broadcast over heads)",
         min_args=2, max_args=2, category=C)
def apply_attention_mask(scores, mask):
    return core.add(to_tensor(scores, "scores"), to_tensor(mask, "mask"))


@builtin("attention", "attention(q, k, v, [mask], [scale])",
         "softmax(q k^T * scale + mask) v with q [Sq, Hq, D], k/v [Sk, Hkv, D] (grouped-query aware)",
         min_args=3, max_args=5, category=C)
def attention(q, k, v, mask=None, scale=None):
    q, k, v = to_tensor(q, "q"), to_tensor(k, "k"), to_tensor(v, "v")
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
        raise BuiltinArgError(f"q, k, v must be [seq, heads, head_dim], got {list(q.shape)}, {list(k.shape)}, "
                              f"{list(v.shape)}")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise BuiltinArgError(f"query heads ({q.shape[1]}) must be a multiple of key heads ({k.shape[1]})")
    mask_t = to_tensor(mask, "mask") if mask is not None else None
    s = to_float(scale, "scale") if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    return core.attention(q, k, v, mask_t, s)


