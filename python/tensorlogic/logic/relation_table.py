"""A relation's contents as sorted, unique flat keys (mixed radix over its domain sizes) + values.

Invariants: `keys` is strictly increasing int64; `values` is None for a Boolean relation (every
stored tuple is true, value 1) or a float32 array aligned with `keys` holding values in (0, 1];
tuples with value 0 are never stored. Keys are only comparable between tables with equal `sizes`.
"""
from __future__ import annotations

import numpy as np

from .errors import LogicError

KEY_LIMIT = 1 << 62


def key_space(sizes: tuple[int, ...]) -> int:
    total = 1
    for size in sizes:
        total *= max(int(size), 1)
    return total


def check_key_space(sizes: tuple[int, ...], what: str) -> None:
    if key_space(sizes) >= KEY_LIMIT:
        dims = " x ".join(str(s) for s in sizes)
        raise LogicError(f"{what} spans {dims} tuples, more than the engine can index (2^62)")


def sorted_unique(keys: np.ndarray) -> np.ndarray:
    """np.unique for int64 keys by sorting (faster than NumPy 2's hash-based unique here)."""
    if len(keys) == 0:
        return keys.astype(np.int64)
    ordered = np.sort(keys)
    keep = np.empty(len(ordered), bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def encode(columns: list[np.ndarray], sizes: tuple[int, ...], rows: int) -> np.ndarray:
    """Flat row-major keys of the coordinate columns (caller checked the key space); a
    zero-arity relation has the single key 0."""
    if not columns:
        return np.zeros(rows, np.int64)
    key = columns[0].astype(np.int64, copy=True)
    for column, size in zip(columns[1:], sizes[1:]):
        key *= int(size)
        key += column
    return key


def decode(keys: np.ndarray, sizes: tuple[int, ...]) -> list[np.ndarray]:
    """Inverse of `encode`: one int64 column per dimension."""
    columns = []
    rest = keys.astype(np.int64, copy=True)
    for size in reversed(sizes[1:]):
        columns.append(rest % int(size))
        rest //= int(size)
    columns.append(rest)
    columns.reverse()
    return columns[:len(sizes)]


class RelationTable:
    __slots__ = ("sizes", "keys", "values", "_columns")

    def __init__(self, sizes: tuple[int, ...], keys: np.ndarray, values: np.ndarray | None):
        self.sizes = tuple(int(s) for s in sizes)
        self.keys = keys
        self.values = values
        self._columns = None

    @staticmethod
    def empty(sizes: tuple[int, ...], weighted: bool = False) -> "RelationTable":
        return RelationTable(sizes, np.zeros(0, np.int64), np.zeros(0, np.float32) if weighted else None)

    @staticmethod
    def from_unsorted(sizes, keys: np.ndarray, values: np.ndarray | None) -> "RelationTable":
        """Sort and deduplicate; duplicate keys keep their largest value (logical or)."""
        if values is None:
            return RelationTable(sizes, sorted_unique(keys), None)
        order = np.lexsort((-values, keys))  # by key, largest value first
        keys, values = keys[order], values[order]
        first = np.ones(len(keys), bool)
        first[1:] = keys[1:] != keys[:-1]
        keys, values = keys[first], values[first].astype(np.float32)
        keep = values > 0
        return RelationTable(sizes, keys[keep], values[keep])

    @property
    def is_weighted(self) -> bool:
        return self.values is not None

    def __len__(self) -> int:
        return len(self.keys)

    def columns(self) -> list[np.ndarray]:
        if self._columns is None:
            self._columns = decode(self.keys, self.sizes) if self.sizes else []
        return self._columns

    def value_array(self) -> np.ndarray:
        return self.values if self.values is not None else np.ones(len(self.keys), np.float32)

    def true_keys(self) -> np.ndarray:
        """Keys of tuples with value 1 (certainly true)."""
        if self.values is None:
            return self.keys
        return self.keys[self.values >= 1.0]

    def lookup_values(self, keys: np.ndarray) -> np.ndarray:
        """Value of each key (0 where absent)."""
        out = np.zeros(len(keys), np.float32)
        if len(self.keys) == 0 or len(keys) == 0:
            return out
        at = np.searchsorted(self.keys, keys)
        at_clipped = np.minimum(at, len(self.keys) - 1)
        found = self.keys[at_clipped] == keys
        out[found] = self.value_array()[at_clipped[found]]
        return out

    def union_max(self, other: "RelationTable") -> "RelationTable":
        if self.values is None and other.values is None:
            return RelationTable(self.sizes, sorted_unique(np.concatenate([self.keys, other.keys])), None)
        return RelationTable.from_unsorted(self.sizes, np.concatenate([self.keys, other.keys]),
                                           np.concatenate([self.value_array(), other.value_array()]))

    def to_dense(self) -> np.ndarray:
        dense = np.zeros(self.sizes, np.float32)
        dense.reshape(-1)[self.keys] = self.value_array()
        return dense

    @staticmethod
    def from_dense(dense: np.ndarray, boolean: bool) -> "RelationTable":
        flat = dense.reshape(-1)
        keys = np.flatnonzero(flat > 0).astype(np.int64)
        values = None if boolean else np.minimum(flat[keys], 1.0).astype(np.float32)
        return RelationTable(dense.shape, keys, values)


class KeySet:
    """A growing set of int64 keys with fast batch membership: a log-structured list of sorted runs
    (merged when a run is at most twice the next) while it is small, then, for key spaces up to
    BITMAP_LIMIT, a packed bitmap (one bit per key: 8x less memory to allocate and fault in than a
    bool array) once it holds at least 1 / BITMAP_FILL of its space (a bitmap's allocation and page
    faults would dominate a small set)."""

    BITMAP_LIMIT = 1 << 28  # keys: a bitmap of at most 32 MiB
    BITMAP_FILL = 1 << 12

    def __init__(self, space: int):
        self.space = space
        self.count = 0
        self.bits = None
        self.runs: list[np.ndarray] = []

    def contains(self, keys: np.ndarray) -> np.ndarray:
        if self.bits is not None:
            return (self.bits[keys >> 3] & _BIT[keys & 7]).astype(bool)
        found = np.zeros(len(keys), bool)
        for run in self.runs:
            at = np.minimum(np.searchsorted(run, keys), len(run) - 1)
            found |= run[at] == keys
        return found

    def add(self, new_sorted_unique: np.ndarray) -> None:
        """Add keys that are sorted, unique and not yet present."""
        if len(new_sorted_unique) == 0:
            return
        self.count += len(new_sorted_unique)
        if (self.bits is None and self.space <= self.BITMAP_LIMIT
                and self.count * self.BITMAP_FILL >= self.space):
            self.bits = np.zeros((self.space + 7) >> 3, np.uint8)
            for run in self.runs:
                self._set(run)
            self.runs = []
        if self.bits is not None:
            self._set(new_sorted_unique)
            return
        self.runs.append(new_sorted_unique)
        while len(self.runs) >= 2 and len(self.runs[-2]) <= 2 * len(self.runs[-1]):
            last = self.runs.pop()
            merged = np.concatenate([self.runs.pop(), last])
            merged.sort(kind="stable")
            self.runs.append(merged)

    def _set(self, keys: np.ndarray) -> None:
        """Set the bits of sorted keys (a byte's bits are neighbours: one reduceat, no ufunc.at)."""
        where = keys >> 3
        first = np.empty(len(keys), bool)
        first[0] = True
        np.not_equal(where[1:], where[:-1], out=first[1:])
        starts = np.flatnonzero(first)
        self.bits[where[starts]] |= np.bitwise_or.reduceat(_BIT[keys & 7], starts)


_BIT = (1 << np.arange(8)).astype(np.uint8)  # the mask of bit i of a byte
