"""Memory builtins: buffer reservations (R7) and the runtime's ledger as printable records; the
registry of open values (models, KV caches) that own device memory.

Invariant: these only read or configure the runtime's pool; they never hold tensors, so calling them
cannot keep device memory alive. Every value that owns device buffers registers itself with
`track_open`, so `release_all()` (called by `tl run` after the program) can drop them (R6).
"""
from __future__ import annotations

import weakref
from typing import Any

from .convert import BuiltinArgError, core, to_int, to_shape
from .records import Record
from .dtypes import dtype_of
from .registry import builtin

C = "memory"

_OPEN_VALUES: "weakref.WeakSet[Any]" = weakref.WeakSet()


def track_open(value: Any) -> None:
    """Remember `value` (it has `release_device_memory()`) until it is garbage."""
    _OPEN_VALUES.add(value)


def release_all() -> None:
    """Release the device memory of every open model and KV cache."""
    for value in list(_OPEN_VALUES):
        value.release_device_memory()


@builtin("buffer_reserve", "buffer_reserve(shape, count, [dtype])",
         "pre-allocate count buffers for tensors of exactly this shape and dtype (taken first, returned on release)",
         min_args=2, max_args=3, category=C)
def buffer_reserve(shape, count, dtype="f32"):
    n = to_int(count, "count")
    if n < 0:
        raise BuiltinArgError(f"count must be >= 0, got {n}")
    core.buffer_reserve(to_shape(shape), n, dtype_of(dtype), False)
    return None


@builtin("buffer_reserve_learnable", "buffer_reserve_learnable(shape, count, [dtype])",
         "like buffer_reserve, for learnable parameters (kept for the whole run)", min_args=2, max_args=3,
         category=C)
def buffer_reserve_learnable(shape, count, dtype="f32"):
    n = to_int(count, "count")
    if n < 0:
        raise BuiltinArgError(f"count must be >= 0, got {n}")
    core.buffer_reserve(to_shape(shape), n, dtype_of(dtype), True)
    return None


def _stats_record(entries: list[dict]) -> Record:
    per_shape = [Record({k: list(v) if isinstance(v, tuple) else v for k, v in e.items()}, "buffer_stats_entry")
                 for e in entries]
    reserved = sum(int(e.get("reserved", 0)) for e in entries)
    taken = sum(int(e.get("taken", 0)) for e in entries)
    hits = sum(int(e.get("hits", 0)) for e in entries)
    misses = sum(int(e.get("misses", 0)) for e in entries)
    total = hits + misses
    return Record({
        "reserved": reserved, "taken": taken, "hits": hits, "misses": misses,
        "hit_rate": (hits / total) if total else 0.0, "shapes": per_shape,
    }, "buffer_stats")


@builtin("buffer_stats", "buffer_stats()",
         "reservation statistics: reserved, taken, hits, misses, hit_rate, and per-shape entries in .shapes",
         min_args=0, max_args=0, category=C)
def buffer_stats():
    return _stats_record(list(core.buffer_stats()))


@builtin("memory_stats", "memory_stats()",
         "the device memory ledger: live_bytes, peak_bytes, cached_bytes, allocations, pool_hits, ...",
         min_args=0, max_args=0, category=C)
def memory_stats():
    stats = dict(core.memory_stats())
    hits = int(stats.get("pool_hits", 0))
    misses = int(stats.get("pool_misses", 0))
    stats.setdefault("hit_rate", hits / (hits + misses) if hits + misses else 0.0)
    return Record(stats, "memory_stats")


@builtin("clear_cache", "clear_cache()", "wait for the device, then free every cached (pooled) buffer",
         min_args=0, max_args=0, category=C)
def clear_cache():
    core.clear_cache()
    return None


@builtin("reset_peak_memory", "reset_peak_memory()", "start peak_bytes again from the live bytes",
         min_args=0, max_args=0, category=C)
def reset_peak_memory():
    core.reset_peak_memory()
    return None


@builtin("synchronize", "synchronize()", "wait until the device has finished all queued work (never needed "
         "for correctness; useful for timing)", min_args=0, max_args=0, category=C)
def synchronize():
    core.synchronize()
    return None
