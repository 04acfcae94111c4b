"""KVCache: per-layer key/value storage for attention, in two forms.

* Growing (`KVCache::new_f32(n_layers)` / `new_f16`): `.append(layer, K, V)` concatenates along the
  sequence dim (dim 0 of [seq, heads, head_dim]) — what existing programs use.
* Preallocated (`KVCache::with_capacity(n_layers, capacity, n_kv_heads, head_dim, [dtype])`): one
  [capacity, heads, head_dim] buffer per layer made once; `.append` writes in place with `copy_`
  into a view, and `.get_k/.get_v` return views of the filled prefix — no allocation per token (R7).
Invariants: every layer's K and V hold the same number of positions; `.set` replaces a layer's
contents; reading a layer never copies in the preallocated form; `.clear()` drops the contents.
"""
from __future__ import annotations

from typing import Any

from .convert import BuiltinArgError, Tensor, core, dtype_of, to_int, to_tensor
from .records import Record
from .registry import TLObject, builtin


class KVCache(TLObject):
    tl_type_name = "KVCache"

    def __init__(self, n_layers: int, dtype: str, capacity: int | None = None, heads: int | None = None,
                 head_dim: int | None = None):
        if n_layers <= 0:
            raise BuiltinArgError(f"n_layers must be positive, got {n_layers}")
        self.n_layers = n_layers
        self.dtype = dtype
        self.capacity = capacity
        self.lengths = [0] * n_layers
        if capacity is not None:
            if capacity <= 0 or not heads or not head_dim or heads <= 0 or head_dim <= 0:
                raise BuiltinArgError("capacity, n_kv_heads and head_dim must be positive")
            self.k: list[Any] = [core.zeros([capacity, heads, head_dim], dtype) for _ in range(n_layers)]
            self.v: list[Any] = [core.zeros([capacity, heads, head_dim], dtype) for _ in range(n_layers)]
        else:
            self.k = [None] * n_layers
            self.v = [None] * n_layers

    def _layer(self, layer) -> int:
        i = to_int(layer, "layer")
        if not 0 <= i < self.n_layers:
            raise BuiltinArgError(f"layer {i} is out of range for a cache of {self.n_layers} layers")
        return i

    def _kv(self, k, v):
        kt, vt = to_tensor(k, "K"), to_tensor(v, "V")
        if list(kt.shape) != list(vt.shape):
            raise BuiltinArgError(f"K {list(kt.shape)} and V {list(vt.shape)} must have the same shape")
        if kt.ndim == 0:
            raise BuiltinArgError("K and V need a sequence dim")
        if kt.dtype != self.dtype:
            kt, vt = kt.astype(self.dtype), vt.astype(self.dtype)
        return kt, vt

    def set(self, layer, k, v) -> None:
        i = self._layer(layer)
        kt, vt = self._kv(k, v)
        if self.capacity is None:
            self.k[i], self.v[i] = kt, vt
            self.lengths[i] = kt.shape[0]
            return
        self.lengths[i] = 0
        self.append(i, kt, vt)

    def append(self, layer, k, v) -> None:
        i = self._layer(layer)
        kt, vt = self._kv(k, v)
        n = kt.shape[0]
        if self.capacity is None:
            if self.k[i] is None:
                self.k[i], self.v[i] = kt, vt
            else:
                if list(self.k[i].shape[1:]) != list(kt.shape[1:]):
                    raise BuiltinArgError(f"K {list(kt.shape)} does not match the cached "
                                          f"{list(self.k[i].shape)} of layer {i}")
                self.k[i] = core.concat([self.k[i], kt], 0)
                self.v[i] = core.concat([self.v[i], vt], 0)
            self.lengths[i] += n
            return
        start = self.lengths[i]
        if start + n > self.capacity:
            raise BuiltinArgError(f"KV cache is full: layer {i} holds {start} of {self.capacity} positions, "
                                  f"cannot add {n}")
        if list(self.k[i].shape[1:]) != list(kt.shape[1:]):
            raise BuiltinArgError(f"K {list(kt.shape)} does not match the cache's [{self.capacity}, "
                                  f"{', '.join(str(d) for d in self.k[i].shape[1:])}]")
        core.copy_(core.slice(self.k[i], 0, start, start + n, 1), kt)
        core.copy_(core.slice(self.v[i], 0, start, start + n, 1), vt)
        self.lengths[i] = start + n

    def get(self, which: str, layer):
        i = self._layer(layer)
        store = self.k if which == "k" else self.v
        if self.capacity is None:
            if store[i] is None:
                raise BuiltinArgError(f"layer {i} of the KV cache is empty")
            return store[i]
        if self.lengths[i] == 0:
            raise BuiltinArgError(f"layer {i} of the KV cache is empty")
        return core.slice(store[i], 0, 0, self.lengths[i], 1)

    def clear(self) -> None:
        self.lengths = [0] * self.n_layers
        if self.capacity is None:
            self.k = [None] * self.n_layers
            self.v = [None] * self.n_layers

    # TLObject protocol
    def tl_call_method(self, name: str, args: list) -> Any:
        if name in ("set", "append") and len(args) == 3:
            getattr(self, name)(*args)
            return None
        if name in ("get_k", "get_v") and len(args) == 1:
            return self.get(name[-1], args[0])
        if name == "len" and len(args) <= 1:
            return self.lengths[self._layer(args[0])] if args else self.lengths[0]
        if name == "clear" and not args:
            self.clear()
            return None
        raise AttributeError(name)

    def tl_get_field(self, name: str) -> Any:
        if name == "n_layers":
            return self.n_layers
        if name == "capacity":
            return self.capacity if self.capacity is not None else -1
        if name in ("len", "length"):
            return self.lengths[0]
        if name == "dtype":
            return self.dtype
        raise AttributeError(name)

    def tl_repr(self) -> str:
        cap = f", capacity {self.capacity}" if self.capacity is not None else ""
        return f"KVCache({self.n_layers} layers, {self.dtype}, length {self.lengths[0]}{cap})"


@builtin("KVCache::new_f32", "KVCache::new_f32(n_layers)", "growing f32 KV cache (append concatenates)",
         min_args=1, max_args=1, category="nn")
def kv_new_f32(n_layers):
    return KVCache(to_int(n_layers, "n_layers"), "f32")


@builtin("KVCache::new_f16", "KVCache::new_f16(n_layers)", "growing f16 KV cache (append concatenates)",
         min_args=1, max_args=1, category="nn")
def kv_new_f16(n_layers):
    return KVCache(to_int(n_layers, "n_layers"), "f16")


@builtin("KVCache::with_capacity", "KVCache::with_capacity(n_layers, capacity, n_kv_heads, head_dim, [dtype])",
         "preallocated KV cache written in place (no allocation per token)", min_args=4, max_args=5,
         category="nn")
def kv_with_capacity(n_layers, capacity, heads, head_dim, dtype="f32"):
    return KVCache(to_int(n_layers, "n_layers"), dtype_of(dtype), to_int(capacity, "capacity"),
                   to_int(heads, "n_kv_heads"), to_int(head_dim, "head_dim"))


_ = (Tensor, Record)
