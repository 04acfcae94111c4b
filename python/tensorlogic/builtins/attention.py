"""TL builtins for attention over a model's KV cache: kv_cache (a KVCache sized to the model,
preallocated and written in place), rope_kv_write, cache_attention and causal_attention (with a
sliding window).

Invariant: a position that a compiled step passes as a live symbolic scalar stays symbolic (so the
replay follows it); a value that decides a slice is read as a plain int, which keeps the call eager.
"""
from __future__ import annotations

from .convert import BuiltinArgError, Tensor, core, to_float, to_int, type_name
from .dtypes import dtype_of
from .kvcache import KVCache
from .models import _as_model
from .registry import builtin
from .symbolic import Symbolic


@builtin("kv_cache", "kv_cache(model, capacity, dtype=\"f32\")",
         "a KV cache for the model, preallocated to `capacity` positions and written in place",
         min_args=2, max_args=3, category="models")
def _kv_cache(model, capacity, dtype="f32"):
    return _llama_kv_cache(model, capacity, dtype)


@builtin("llama_kv_cache", "llama_kv_cache(model, capacity, dtype=\"f32\")",
         "kv_cache under its earlier name (any architecture)", min_args=2, max_args=3, category="models")
def _llama_kv_cache(model, capacity, dtype="f32"):
    cfg = _as_model(model).cfg
    cap = to_int(capacity, "capacity")
    if not 0 < cap <= cfg.context_length:
        raise BuiltinArgError(f"kv_cache: capacity {cap} must be in 1..{cfg.context_length} "
                              "(the model's context length)")
    return KVCache(cfg.n_layers, cap, cfg.n_kv_heads, cfg.head_dim, dtype_of(dtype))


@builtin("rope_kv_write", "rope_kv_write(cache, layer, pos, q, k, v, [base], [neox])",
         "RoPE of q and k at positions pos.. plus the write of rope(k) and v into the KV cache, as one kernel; "
         "returns rope(q) [seq, heads, head_dim] (q, k, v: [seq, heads, head_dim] or [seq, heads * head_dim])",
         min_args=6, max_args=8, category="models")
def _rope_kv_write(cache, layer, pos, q, k, v, base=10000.0, neox=False):
    if not isinstance(cache, KVCache):
        raise BuiltinArgError(f"cache must be a KV cache (llama_kv_cache), got {type_name(cache)}")
    return cache.write_rope(layer, pos, q, k, v, base, neox)


@builtin("cache_attention", "cache_attention(q, cache, layer, pos, scale=1/sqrt(head_dim), window=0, softcap=0)",
         "causal_attention of q [n, heads, d] at positions pos.. over what a KV cache layer holds at "
         "positions 0..pos+n-1 (the last `window` of them when window > 0). In a compiled decode step "
         "the position follows each replay, sliding window included",
         min_args=4, max_args=7, category="models")
def _cache_attention(q, cache, layer, pos, scale=None, window=0, softcap=0.0):
    if not isinstance(cache, KVCache):
        raise BuiltinArgError(f"cache must be a KV cache (kv_cache), got {type_name(cache)}")
    w = to_int(window, "window")
    if not isinstance(q, Tensor) or q.ndim != 3:
        raise BuiltinArgError(f"q must be a tensor [seq, heads, head_dim], got {type_name(q)}")
    n = q.shape[0]
    if not (pos.__class__ is Symbolic and pos.live and n == 1 and w > 0):
        end = pos + n
        return _causal_attention(q, cache.keys(layer, end), cache.values(layer, end), pos, scale, window, softcap)
    # one query in a compiled step with a sliding window: the views follow the position
    k, v, offset = cache.decode_window(layer, pos, w)
    s = None if scale is None else to_float(scale, "scale")
    return core.attention(q, k, v, scale=s, causal=True, pos_offset=offset, softcap=_softcap(softcap))


def _softcap(v) -> float:
    c = to_float(v, "softcap")
    if not c >= 0.0 or c == float("inf"):
        raise BuiltinArgError(f"softcap must be finite and >= 0 (0: none), got {c}")
    return c


@builtin("causal_attention", "causal_attention(q, k, v, pos_offset=0, scale=1/sqrt(head_dim), window=0, softcap=0)",
         "softmax(q·kᵀ·scale + causal mask)·v with q [n, heads, d] at positions pos_offset.., "
         "k/v [t, kv_heads, d] (grouped-query when kv_heads divides heads); window > 0 is sliding-window "
         "attention: the query at position p sees only the keys at p-window+1..p; softcap > 0 caps each "
         "scaled score at softcap·tanh(score / softcap) before the mask (Gemma 2)",
         min_args=3, max_args=7, category="models")
def _causal_attention(q, k, v, pos_offset=0, scale=None, window=0, softcap=0.0):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.ndim != 3:
            raise BuiltinArgError(f"{name} must be a tensor [seq, heads, head_dim], got {type_name(t)}")
    s = None if scale is None else to_float(scale, "scale")
    w = to_int(window, "window")
    cap = _softcap(softcap)
    if w < 0:
        raise BuiltinArgError(f"window must be >= 0 (0: no window), got {w}")
    if w == 0 and pos_offset.__class__ is Symbolic:  # a compiled step: the offset follows the replay
        return core.attention(q, k, v, scale=s, causal=True, pos_offset=pos_offset, softcap=cap)
    pos = to_int(pos_offset, "pos_offset")  # a window's slice depends on the value: no replay
    if w == 0 or pos < 0 or k.shape[0] != v.shape[0]:
        return core.attention(q, k, v, scale=s, causal=True, pos_offset=pos, softcap=cap)
    # Keys before `first` are outside every query's window: leave them out (a view, no copy). The
    # first query (position pos) then sees all it may; later ones of a long block also need the
    # far edge of their window masked.
    first = min(max(0, pos - w + 1), k.shape[0])
    if first:
        k, v, pos = k[first:], v[first:], pos - first
    n, t = q.shape[0], k.shape[0]
    mask = None
    if pos + n - 1 >= w:
        too_old = core.causal_mask(n, t, pos - w)  # 0 exactly where key <= query - window
        mask = core.where(core.eq(too_old, 0.0), float("-inf"), 0.0)
    return core.attention(q, k, v, mask, s, causal=True, pos_offset=pos, softcap=cap)
