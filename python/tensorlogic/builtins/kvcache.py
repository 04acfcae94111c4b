"""KVCache: per-layer key/value storage for attention, one class with two method sets.

* Position style (what stdlib/llama.tl and gemma3.tl use): `.write(layer, pos, K, V)` stores K/V [S, ...] at
  positions pos..pos+S-1 and makes pos+S the layer's length; `.keys(layer, [n])`/`.values(layer, [n])`
  are views of the first n positions.
* Sequence style: `.set(layer, K, V)` replaces a layer's contents (a write at 0), `.append(layer, K, V)`
  adds after what the layer holds (a write at its length), `.get_k(layer)`/`.get_v(layer)` read it all.

Built by `KVCache::with_capacity(n_layers, capacity, n_kv_heads, head_dim, [dtype])` or
`kv_cache(model, capacity)` (preallocated: one [capacity, heads, head_dim] buffer per layer for
K and V, written in place, no allocation per token), or `KVCache::new_f32(n_layers)`/`new_f16`
(growing: allocated on the first write, moved to a buffer twice the size when it runs out, rare).
Invariants: every read returns a view of the filled prefix, never a copy; a write never leaves a gap
(pos <= length); K and V always have one shape; `release()` drops the device buffers.
"""
from __future__ import annotations

from typing import Any

from .convert import BuiltinArgError, Tensor, core, to_bool, to_float, to_int, to_tensor, type_name
from .dtypes import dtype_of
from .memory import track_open
from . import symbolic
from .registry import TLObject, builtin
from .symbolic import Symbolic


# kinds of a replay check (KVCache._on_replay)
_WRITE, _VIEW_K, _VIEW_V = "write", "keys", "values"


class KVCache(TLObject):
    tl_type_name = "KVCache"
    # compiled functions (interp/compiled.py) may call these: with a symbolic position or length
    # they record the write/view with dynamic bounds and register a replay hook for the lengths
    tl_recordable_methods = frozenset({"write", "keys", "values", "get_k", "get_v"})
    tl_volatile_fields = frozenset({"len", "length"})

    def __init__(self, n_layers: int, capacity: int | None = None, n_kv_heads: int | None = None,
                 head_dim: int | None = None, dtype: str = "f32"):
        if n_layers <= 0:
            raise BuiltinArgError(f"KVCache needs at least one layer, got {n_layers}")
        if capacity is not None and capacity <= 0:
            raise BuiltinArgError(f"KVCache capacity must be positive, got {capacity}")
        if capacity is not None and ((n_kv_heads is not None and n_kv_heads <= 0)
                                     or (head_dim is not None and head_dim <= 0)):
            raise BuiltinArgError("KVCache n_kv_heads and head_dim must be positive")
        self.n_layers = n_layers
        self.capacity = capacity
        self.dtype = dtype
        self.k: list[Any] = [None] * n_layers
        self.v: list[Any] = [None] * n_layers
        self.lengths = [0] * n_layers
        track_open(self)
        if capacity is not None and n_kv_heads is not None and head_dim is not None:
            for i in range(n_layers):
                self._allocate(i, capacity, (n_kv_heads, head_dim))

    def _allocate(self, layer: int, rows: int, tail: tuple) -> None:
        self.k[layer] = core.zeros([rows, *tail], self.dtype)
        self.v[layer] = core.zeros([rows, *tail], self.dtype)

    def _layer(self, layer: Any) -> int:
        i = to_int(layer, "layer")
        if not 0 <= i < self.n_layers:
            raise BuiltinArgError(f"KVCache layer {i} is out of range (0..{self.n_layers - 1})")
        return i

    # ------------------------------------------------------------------ position style
    def write(self, layer: Any, pos: Any, k: Any, v: Any) -> None:
        i = self._layer(layer)
        dynamic = pos.__class__ is Symbolic and pos.live
        p = pos.value if dynamic else to_int(pos, "position")
        k, v = to_tensor(k, "K"), to_tensor(v, "V")
        if k.ndim == 0 or tuple(k.shape) != tuple(v.shape):
            raise BuiltinArgError(f"KVCache expects K and V of one shape [seq, kv_heads, head_dim], got "
                                  f"{type_name(k)} and {type_name(v)}")
        s, tail = k.shape[0], tuple(k.shape[1:])
        if p < 0 or p > self.lengths[i]:
            raise BuiltinArgError(f"KVCache write at position {p} would leave a gap "
                                  f"(layer {i} holds {self.lengths[i]} positions)")
        buf = self.k[i]
        if buf is not None and tuple(buf.shape[1:]) != tail:
            if self.capacity is not None or p != 0:
                raise BuiltinArgError(f"KVCache layer {i} holds [?, {', '.join(str(d) for d in buf.shape[1:])}], "
                                      f"got K {list(k.shape)}")
            buf = self.k[i] = self.v[i] = None  # a growing layer set anew with another shape
        if buf is None or p + s > buf.shape[0]:
            self._grow(i, p, s, tail)
        if k.dtype != self.dtype:
            k, v = k.astype(self.dtype), v.astype(self.dtype)
        if dynamic:
            # inside a compiled function: the write position is recomputed at each replay, and the
            # hook keeps the lengths (host state) and the eager checks
            core.copy_(core.slice(self.k[i], 0, pos, pos + s, 1), k)
            core.copy_(core.slice(self.v[i], 0, pos, pos + s, 1), v)
            self._on_replay((_WRITE, i, pos, s))
        else:
            self.k[i][p:p + s] = k
            self.v[i][p:p + s] = v
        self.lengths[i] = p + s

    def _on_replay(self, check: tuple) -> None:
        """Registers one replay check of the recording in progress: (_WRITE, layer, position, rows) sets
        the layer's length after checking the write as eager would; (_VIEW_K or _VIEW_V, layer, count,
        0) checks a view's bounds. All of a recording's checks on this cache run in one hook
        (symbolic.add_batched_hook), in recording order; a symbolic value shared by many layers (the
        step's position) is evaluated once per replay. The check names the store, never holds its
        list: a replay must not keep buffers alive that the cache released (it is refused instead)."""
        symbolic.add_batched_hook(("kvcache", id(self)), self._replay_checks, check)

    def _replay_checks(self, checks: list, scalars: list) -> None:
        # The checks' positions and counts are a few distinct expressions (the step's position and
        # position + 1, the latter a new Symbolic in every layer): the plan, made once per
        # recording (kept on the hook's item list), evaluates each once per replay.
        plan = getattr(checks, "plan", None)
        if plan is None or plan[0] != len(checks):
            values, index = _value_table()
            plan = (len(checks), values, [(kind, i, index(value), s) for kind, i, value, s in checks])
            if isinstance(checks, symbolic.HookBatch):
                checks.plan = plan
        _, values, entries = plan
        vals = [symbolic.evaluate(v, scalars) for v in values]
        # The usual case is decided inline (a preallocated layer, the write extending it without a
        # gap, a view within it); anything else goes through the eager checks and their errors.
        lengths, cap = self.lengths, self.capacity
        for kind, i, xi, s in entries:
            x = vals[xi]
            if kind is _WRITE:
                if cap is not None and self.k[i] is not None and 0 <= x <= lengths[i] and x + s <= cap:
                    lengths[i] = x + s
                else:
                    self._replayed_write(i, x, s)
            else:
                bufs = self.k if kind is _VIEW_K else self.v
                if bufs[i] is None or not 0 < x <= lengths[i]:
                    self._check_view(bufs, i, x)

    def _replayed_write(self, i: int, p: int, s: int) -> None:
        if p < 0 or p > self.lengths[i]:
            raise BuiltinArgError(f"KVCache write at position {p} would leave a gap "
                                  f"(layer {i} holds {self.lengths[i]} positions)")
        rows = self.k[i].shape[0] if self.k[i] is not None else 0
        if p + s > rows:
            raise BuiltinArgError(f"KV cache is full: layer {i} holds {p} of {rows} positions, cannot add {s}")
        self.lengths[i] = p + s

    def write_rope(self, layer: Any, pos: Any, q: Any, k: Any, v: Any, base: Any = 10000.0,
                   neox: Any = False) -> Any:
        """RoPE of q and k at positions pos.. and the write of rope(k) and v, as one kernel; returns
        rope(q) [S, heads, head_dim]. q, k, v: [S, heads, head_dim] or [S, heads * head_dim]."""
        i = self._layer(layer)
        dynamic = pos.__class__ is Symbolic and pos.live
        p = pos.value if dynamic else to_int(pos, "position")
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, Tensor) or t.ndim not in (2, 3):
                raise BuiltinArgError(f"{name} must be a tensor [seq, heads, head_dim] or "
                                      f"[seq, heads * head_dim], got {type_name(t)}")
        s = k.shape[0]
        if p < 0 or p > self.lengths[i]:
            raise BuiltinArgError(f"KVCache write at position {p} would leave a gap "
                                  f"(layer {i} holds {self.lengths[i]} positions)")
        buf = self.k[i]
        if buf is None or p + s > buf.shape[0]:
            if k.ndim == 3:
                tail = (k.shape[1], k.shape[2])
            elif buf is not None:
                tail = tuple(buf.shape[1:])
            else:
                raise BuiltinArgError("the first write to an empty cache layer needs k as "
                                      "[seq, kv_heads, head_dim]")
            self._grow(i, p, s, tail)
        # inside a compiled function the position stays symbolic: each replay writes at its own
        # position, and the hook keeps the lengths (host state) and the eager checks
        q_out = core.rope_kv_write(q, k, v, self.k[i], self.v[i], pos if dynamic else p,
                                   to_float(base, "base"), to_bool(neox, "neox"))
        if dynamic:
            self._on_replay((_WRITE, i, pos, s))
        self.lengths[i] = p + s
        return q_out

    def _grow(self, layer: int, pos: int, added: int, tail: tuple) -> None:
        needed = pos + added
        if self.capacity is not None:  # preallocated: fixed size
            if needed > self.capacity:
                raise BuiltinArgError(f"KV cache is full: layer {layer} holds {pos} of {self.capacity} "
                                      f"positions, cannot add {added}")
            self._allocate(layer, self.capacity, tail)
            return
        old_k, old_v, n = self.k[layer], self.v[layer], min(self.lengths[layer], pos)
        self._allocate(layer, max(needed, 2 * (old_k.shape[0] if old_k is not None else 128)), tail)
        if old_k is not None and n:
            self.k[layer][0:n] = old_k[0:n]
            self.v[layer][0:n] = old_v[0:n]

    def keys(self, layer: Any, n: Any | None = None) -> Any:
        return self._view(self.k, self._layer(layer), n)

    def values(self, layer: Any, n: Any | None = None) -> Any:
        return self._view(self.v, self._layer(layer), n)

    def _view(self, bufs: list, i: int, n: Any | None) -> Any:
        if n is None:
            symbolic.abandon("it reads a KV cache's current length (pass the length explicitly)")
        dynamic = n.__class__ is Symbolic and n.live
        count = self.lengths[i] if n is None else (n.value if dynamic else to_int(n, "length"))
        self._check_view(bufs, i, count)
        if dynamic:
            # the hook names the store ("k" or "v"), never holds its list: a replay must not keep
            # buffers alive that the cache released (it is refused instead)
            self._on_replay((_VIEW_K if bufs is self.k else _VIEW_V, i, n, 0))
            return core.slice(bufs[i], 0, 0, n, 1)
        return bufs[i][0:count]

    def decode_window(self, layer: Any, pos: Symbolic, window: int) -> tuple:
        """(K, V, query offset) for one query at the symbolic position `pos` of a compiled step that
        attends over the last `window` (> 0) positions up to pos: before the window fills the views
        are the growing prefix and the query sits at pos; after, they keep `window` rows and move
        with pos, the query last among them. A guard makes a replay in the other regime record anew."""
        i = self._layer(layer)
        end = pos + 1
        if end.value <= window:
            symbolic.add_guard(lambda scalars: symbolic.evaluate(end, scalars) <= window)
            return self._view(self.k, i, end), self._view(self.v, i, end), pos
        self._check_view(self.k, i, end.value)
        symbolic.add_guard(lambda scalars: symbolic.evaluate(end, scalars) > window)
        self._on_replay((_VIEW_K, i, end, 0))
        start = end - window
        return core.slice(self.k[i], 0, start, end, 1), core.slice(self.v[i], 0, start, end, 1), window - 1

    def _check_view(self, bufs: list, i: int, count: int) -> None:
        if bufs[i] is None or count <= 0:
            raise BuiltinArgError(f"KVCache layer {i} is empty")
        if count > self.lengths[i]:
            raise BuiltinArgError(f"KVCache layer {i} holds {self.lengths[i]} positions, {count} requested")

    # ------------------------------------------------------------------ sequence style
    def set(self, layer: Any, k: Any, v: Any) -> None:
        self.write(layer, 0, k, v)

    def append(self, layer: Any, k: Any, v: Any) -> None:
        i = self._layer(layer)
        self.write(i, self.lengths[i], k, v)

    # ------------------------------------------------------------------ lifetime
    def reset(self) -> None:
        """Forget the contents (the buffers stay for the next sequence)."""
        self.lengths = [0] * self.n_layers

    def release(self) -> None:
        self.k = [None] * self.n_layers
        self.v = [None] * self.n_layers
        self.lengths = [0] * self.n_layers

    release_device_memory = release

    # ------------------------------------------------------------------ TLObject protocol
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

    def tl_call_method(self, name: str, args: list[Any]) -> Any:
        if name == "write" and len(args) == 4:
            return self.write(*args)
        if name == "write_rope" and 5 <= len(args) <= 7:
            return self.write_rope(*args)
        if name in ("set", "append") and len(args) == 3:
            return getattr(self, name)(*args)
        if name in ("get_k", "keys") and 1 <= len(args) <= 2:
            return self.keys(*args)
        if name in ("get_v", "values") and 1 <= len(args) <= 2:
            return self.values(*args)
        if name in ("len", "length") and len(args) <= 1:
            return self.lengths[self._layer(args[0]) if args else 0]
        if name in ("reset", "clear") and not args:
            return self.reset()
        if name in ("release", "close") and not args:
            return self.release()
        raise AttributeError(name)

    def tl_repr(self) -> str:
        cap = f", capacity {self.capacity}" if self.capacity is not None else ", growing"
        return f"KVCache({self.n_layers} layers, {self.dtype}, length {self.lengths[0]}{cap})"

    __repr__ = tl_repr


def _value_table() -> tuple:
    """(values, index) for a replay-check plan: index(v) is v's position in `values`, where
    structurally equal symbolic expressions (the same constant, terms and kind: the same value at
    every replay) are listed once; plain numbers are listed as they are."""
    values: list = []
    where: dict = {}

    def index(v: Any) -> int:
        if v.__class__ is Symbolic:
            key = (v.constant, v.terms, isinstance(v.value, int))
            if key not in where:
                where[key] = len(values)
                values.append(v)
            return where[key]
        values.append(v)
        return len(values) - 1

    return values, index


def _check_plan(checks: list) -> tuple:
    """(len(checks), values, entries) for SlotStore._replay_checks: each check's slot and value as an
    index into `values` (_value_table)."""
    values, index = _value_table()
    entries = [(kind, i, index(slot), index(x)) for kind, i, slot, x in checks]
    return len(checks), values, entries


class SlotStore(TLObject):
    """The KV caches of `tl serve --parallel`'s slots as one storage: per layer one K and one V
    buffer [slots * capacity, kv_heads, head_dim], slot s owning rows s*capacity.. . `cache(s)` is
    slot s's KVCache, whose buffers are views of its rows (a prompt's prefill writes through it as
    through any cache); `write`, `keys` and `values` take the slot as a number, so in a compiled
    batched step (stdlib/batch.tl) the slots are scalar inputs like the positions: one recording
    serves every set of slots with as many rows, where a list of caches (part of the signature by
    identity) recorded each new set anew.
    Invariants: slot s's rows are only ever written at s*capacity + pos with 0 <= pos <= its
    cache's length (no gap) and pos < capacity; the slot caches' lengths are the bookkeeping, kept
    by replay hooks as KVCache.write keeps its own."""

    tl_type_name = "KV slot store"
    tl_recordable_methods = frozenset({"write", "write_rope", "keys", "values", "write_rope_rows", "attention_rows"})

    def __init__(self, slots: int, n_layers: int, capacity: int, n_kv_heads: int, head_dim: int,
                 dtype: str = "f32"):
        if min(slots, n_layers, capacity, n_kv_heads, head_dim) <= 0:
            raise BuiltinArgError("a KV slot store needs positive slots, layers, capacity, heads and head_dim")
        self.n_slots, self.n_layers, self.capacity, self.dtype = slots, n_layers, capacity, dtype
        self.k = [core.zeros([slots * capacity, n_kv_heads, head_dim], dtype) for _ in range(n_layers)]
        self.v = [core.zeros([slots * capacity, n_kv_heads, head_dim], dtype) for _ in range(n_layers)]
        self.caches = []
        for s in range(slots):
            c = KVCache(n_layers, capacity, dtype=dtype)  # no buffers of its own: views of its rows
            rows = slice(s * capacity, (s + 1) * capacity)
            c.k = [k[rows] for k in self.k]
            c.v = [v[rows] for v in self.v]
            self.caches.append(c)
        track_open(self)

    def cache(self, slot: int) -> KVCache:
        return self.caches[slot]

    def _index(self, s: int) -> int:
        if not 0 <= s < self.n_slots:
            raise BuiltinArgError(f"slot {s} is out of range (0..{self.n_slots - 1})")
        return s

    def _slot(self, slot: Any) -> int:
        """The slot's number now (a recording's symbolic slot: this call's value), checked."""
        return self._index(slot.value if slot.__class__ is Symbolic else to_int(slot, "slot"))

    def write(self, layer: Any, slot: Any, pos: Any, k: Any, v: Any) -> None:
        """K and V [1, kv_heads, head_dim] at position pos of the slot (a decode step's token)."""
        s = self._slot(slot)
        cache = self.caches[s]
        i = cache._layer(layer)
        k, v = to_tensor(k, "K"), to_tensor(v, "V")
        if k.ndim != 3 or k.shape[0] != 1 or tuple(k.shape) != tuple(v.shape):
            raise BuiltinArgError(f"a slot store takes one position's K and V [1, kv_heads, head_dim], got "
                                  f"{type_name(k)} and {type_name(v)}")
        if k.dtype != self.dtype:
            k, v = k.astype(self.dtype), v.astype(self.dtype)
        p = pos.value if pos.__class__ is Symbolic else to_int(pos, "position")
        cache._replayed_write(i, p, 1)  # the eager checks (gap, capacity) and the length
        dynamic = any(x.__class__ is Symbolic and x.live for x in (slot, pos))
        row = slot * self.capacity + pos if dynamic else s * self.capacity + p
        core.copy_(core.slice(self.k[i], 0, row, row + 1, 1), k)
        core.copy_(core.slice(self.v[i], 0, row, row + 1, 1), v)
        if dynamic:
            self._on_replay((_WRITE, i, slot, pos))

    def write_rope(self, layer: Any, slot: Any, pos: Any, q: Any, k: Any, v: Any, base: Any = 10000.0,
                   neox: Any = False) -> Any:
        """RoPE of q and k at position pos and the write of rope(k) and v into the slot, as one
        kernel (rope_kv_write, KVCache.write_rope's); returns rope(q) [1, heads, head_dim]. q
        [1, heads, head_dim], k and v [1, kv_heads, head_dim]: a decode step's token."""
        s = self._slot(slot)
        cache = self.caches[s]
        i = cache._layer(layer)
        q, k, v = to_tensor(q, "Q"), to_tensor(k, "K"), to_tensor(v, "V")
        if k.ndim != 3 or k.shape[0] != 1 or tuple(k.shape) != tuple(v.shape) or q.ndim != 3 or q.shape[0] != 1:
            raise BuiltinArgError(f"a slot store takes one position's Q [1, heads, head_dim] and K and V "
                                  f"[1, kv_heads, head_dim], got {type_name(q)}, {type_name(k)} and {type_name(v)}")
        p = pos.value if pos.__class__ is Symbolic else to_int(pos, "position")
        cache._replayed_write(i, p, 1)  # the eager checks (gap, capacity) and the length
        dynamic = any(x.__class__ is Symbolic and x.live for x in (slot, pos))
        # the slot's rows of the layer's buffers: row slot * capacity + pos (RoPE at pos)
        q_out = core.rope_kv_write(q, k, v, self.k[i], self.v[i], pos if dynamic else p, to_float(base, "base"),
                                   to_bool(neox, "neox"), slot * self.capacity if dynamic else s * self.capacity)
        if dynamic:
            self._on_replay((_WRITE, i, slot, pos))
        return q_out

    def _rows(self, layer: Any, slots: Any, positions: Any, n: int) -> tuple[int, list, list, bool]:
        """The layer's index, the slots and positions of a batched step's n rows, checked (their
        values now), and whether any is a live symbolic input (a recording in progress)."""
        i = self.caches[0]._layer(layer)  # every slot's cache has the store's layers
        if not isinstance(slots, (list, tuple)) or not isinstance(positions, (list, tuple)) or \
                not len(slots) == len(positions) == n:
            raise BuiltinArgError(f"a batched step needs one slot and one position per row ({n} rows), got "
                                  f"{type_name(slots)} and {type_name(positions)}")
        slots, positions = list(slots), list(positions)
        for x in slots:
            self._slot(x)
        dynamic = any(x.__class__ is Symbolic and x.live for x in slots + positions)
        return i, slots, positions, dynamic

    def write_rope_rows(self, layer: Any, slots: Any, positions: Any, q: Any, k: Any, v: Any,
                        base: Any = 10000.0, neox: Any = False) -> Any:
        """write_rope for a batched step's B rows at once (one kernel call a layer): row b of q
        [B, heads, head_dim] and k, v [B, kv_heads, head_dim] (or [B, heads * head_dim], as the
        projections give them) at positions[b] of slot slots[b];
        returns rope(q) [B, heads, head_dim], each row what write_rope gives it alone."""
        q, k, v = to_tensor(q, "Q"), to_tensor(k, "K"), to_tensor(v, "V")
        if k.ndim not in (2, 3) or q.ndim != k.ndim or tuple(k.shape) != tuple(v.shape) or k.shape[0] != q.shape[0]:
            raise BuiltinArgError(f"a batched write takes Q [B, heads, head_dim] and K and V [B, kv_heads, "
                                  f"head_dim] (or each [B, heads * head_dim]), got {type_name(q)}, {type_name(k)} "
                                  f"and {type_name(v)}")
        i, slots, positions, dynamic = self._rows(layer, slots, positions, q.shape[0])
        # the eager checks (gap, capacity) and the lengths, all of them or none (a refused row leaves
        # every slot as it was: nothing is written)
        touched = [self.caches[self._slot(s)] for s in slots]
        saved = [c.lengths[i] for c in touched]
        try:
            for c, p in zip(touched, positions):
                c._replayed_write(i, p.value if p.__class__ is Symbolic else to_int(p, "position"), 1)
        except BaseException:
            for c, n in zip(touched, saved):
                c.lengths[i] = n
            raise
        firsts = [s * self.capacity if dynamic else self._slot(s) * self.capacity for s in slots]
        pos = positions if dynamic else [p.value if p.__class__ is Symbolic else to_int(p, "position") for p in positions]
        q_out = core.rope_kv_write(q, k, v, self.k[i], self.v[i], pos, to_float(base, "base"), to_bool(neox, "neox"),
                                   firsts)
        if dynamic:
            for s, p in zip(slots, positions):
                self._on_replay((_WRITE, i, s, p))
        return q_out

    def attention_rows(self, layer: Any, slots: Any, positions: Any, q: Any) -> Any:
        """Causal attention of a batched step's B query rows, one kernel call a layer: row b of q
        [B, heads, head_dim] (its token at positions[b]) over slot slots[b]'s first positions[b] + 1
        keys; each row what causal_attention gives it alone over that slot."""
        q = to_tensor(q, "Q")
        if q.ndim != 3:
            raise BuiltinArgError(f"batched attention takes Q [B, heads, head_dim], got {type_name(q)}")
        i, slots, positions, dynamic = self._rows(layer, slots, positions, q.shape[0])
        counts = [p + 1 for p in positions]
        for s, n in zip(slots, counts):
            c = self.caches[self._slot(s)]
            c._check_view(c.k, i, n.value if n.__class__ is Symbolic else to_int(n, "length"))
        if dynamic:
            starts = [s * self.capacity for s in slots]
            for s, n in zip(slots, counts):
                self._on_replay((_VIEW_K, i, s, n))
        else:
            starts = [self._slot(s) * self.capacity for s in slots]
            counts = [n.value if n.__class__ is Symbolic else to_int(n, "length") for n in counts]
        return core.attention_rows(q, self.k[i], self.v[i], starts, counts)

    def _on_replay(self, check: tuple) -> None:
        """One replay check of the recording in progress, (_WRITE, layer, slot, position) or
        (_VIEW_K, layer, slot, count): all of a recording's checks on this store run in one hook,
        in recording order (as KVCache._on_replay; a batched step has three per row and layer)."""
        symbolic.add_batched_hook(("slots", id(self)), self._replay_checks, check)

    def _replay_checks(self, checks: list, scalars: list) -> None:
        # A batched step has three checks a row and layer, run before each replay is queued. Their
        # slots and positions are a few distinct expressions (each row's slot, position and
        # position + 1, repeated per layer): the plan, made once per recording, evaluates each
        # once. The usual case (the slot in range, its rows there, the write extending the layer
        # by one, the view within it) is decided inline; anything else goes through the eager
        # checks, which raise the same errors as an eager call (or, where they pass, do the same).
        plan = getattr(checks, "plan", None)
        if plan is None or plan[0] != len(checks):
            plan = _check_plan(checks)
            if isinstance(checks, symbolic.HookBatch):
                checks.plan = plan
        _, values, entries = plan
        vals = [symbolic.evaluate(v, scalars) for v in values]
        caches, n_slots, capacity = self.caches, self.n_slots, self.capacity
        undo = []  # (lengths, layer, old length) of each write so far: a refused check restores them
        try:
            for kind, i, si, xi in entries:
                s, v = vals[si], vals[xi]
                if 0 <= s < n_slots:
                    c = caches[s]
                    lengths = c.lengths
                    if c.k[i] is not None:
                        if kind is _WRITE:
                            if 0 <= v <= lengths[i] and v < capacity:
                                undo.append((lengths, i, lengths[i]))
                                lengths[i] = v + 1
                                continue
                        elif 0 < v <= lengths[i]:
                            continue
                if kind is _WRITE:
                    lengths = caches[self._index(s)].lengths
                    old = lengths[i]
                    self._replayed_write(i, s, v)
                    undo.append((lengths, i, old))
                else:
                    self._check_replayed_view(i, s, v)
        except BaseException:
            # nothing of the step runs: every slot keeps the length it had
            for lengths, i, old in reversed(undo):
                lengths[i] = old
            raise

    def _replayed_write(self, i: int, slot: int, pos: int) -> None:
        self.caches[self._index(slot)]._replayed_write(i, pos, 1)

    def keys(self, layer: Any, slot: Any, n: Any) -> Any:
        return self._view(self.k, layer, slot, n)

    def values(self, layer: Any, slot: Any, n: Any) -> Any:
        return self._view(self.v, layer, slot, n)

    def _view(self, bufs: list, layer: Any, slot: Any, n: Any) -> Any:
        """The slot's first n positions of a layer (a view; its start and length follow the slot
        and n at each replay)."""
        s = self._slot(slot)
        cache = self.caches[s]
        i = cache._layer(layer)
        count = n.value if n.__class__ is Symbolic else to_int(n, "length")
        cache._check_view(cache.k, i, count)
        if not any(x.__class__ is Symbolic and x.live for x in (slot, n)):
            return bufs[i][s * self.capacity:s * self.capacity + count]
        self._on_replay((_VIEW_K, i, slot, n))
        start = slot * self.capacity
        return core.slice(bufs[i], 0, start, start + n, 1)

    def _check_replayed_view(self, i: int, slot: int, count: int) -> None:
        c = self.caches[self._index(slot)]
        c._check_view(c.k, i, count)

    def release(self) -> None:
        for c in self.caches:
            c.release()
        self.k = [None] * self.n_layers
        self.v = [None] * self.n_layers

    release_device_memory = release

    def tl_call_method(self, name: str, args: list[Any]) -> Any:
        if name == "write" and len(args) == 5:
            return self.write(*args)
        if name == "write_rope" and 6 <= len(args) <= 8:
            return self.write_rope(*args)
        if name in ("keys", "values") and len(args) == 3:
            return getattr(self, name)(*args)
        if name == "write_rope_rows" and 6 <= len(args) <= 8:
            return self.write_rope_rows(*args)
        if name == "attention_rows" and len(args) == 4:
            return self.attention_rows(*args)
        if name == "cache" and len(args) == 1:
            return self.caches[self._slot(args[0])]
        raise AttributeError(name)

    def tl_repr(self) -> str:
        return f"KV slot store({self.n_slots} slots of {self.capacity} positions, {self.n_layers} layers, {self.dtype})"

    __repr__ = tl_repr


@builtin("KVCache::new_f32", "KVCache::new_f32(n_layers)", "growing f32 KV cache (allocated on first write)",
         min_args=1, max_args=1, category="nn")
def kv_new_f32(n_layers):
    return KVCache(to_int(n_layers, "n_layers"), dtype="f32")


@builtin("KVCache::new_f16", "KVCache::new_f16(n_layers)", "growing f16 KV cache (allocated on first write)",
         min_args=1, max_args=1, category="nn")
def kv_new_f16(n_layers):
    return KVCache(to_int(n_layers, "n_layers"), dtype="f16")


@builtin("KVCache::with_capacity", "KVCache::with_capacity(n_layers, capacity, n_kv_heads, head_dim, [dtype])",
         "preallocated KV cache written in place (no allocation per token)", min_args=4, max_args=5,
         category="nn")
def kv_with_capacity(n_layers, capacity, heads, head_dim, dtype="f32"):
    return KVCache(to_int(n_layers, "n_layers"), to_int(capacity, "capacity"), to_int(heads, "n_kv_heads"),
                   to_int(head_dim, "head_dim"), dtype_of(dtype))


_ = Tensor
