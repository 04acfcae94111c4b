"""Entity types: each maps its constants to dense indices 0..n-1 in the order they first appear.

Invariant: an index, once given, never changes, so tensors built earlier stay valid as a domain
grows (they are only padded). A domain declared with members is closed: adding any other
constant is a LogicTypeError; a domain declared without members (or implied) grows freely.
"""
from __future__ import annotations

from typing import Any, Union

from .errors import LogicTypeError

ConstValue = Union[str, int, float]


def constant_sort_key(value: ConstValue):
    """Sort numbers numerically before names alphabetically; stable across runs."""
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


class EntityDomain:
    def __init__(self, name: str, members: list[ConstValue] | None = None):
        self.name = name
        self.closed = members is not None
        self.values: list[ConstValue] = []
        self.index_of: dict[ConstValue, int] = {}
        for member in members or []:
            self._append(member)

    def _append(self, value: ConstValue) -> int:
        index = self.index_of.get(value)
        if index is None:
            index = len(self.values)
            self.values.append(value)
            self.index_of[value] = index
        return index

    def add(self, value: ConstValue, pos: Any = None) -> int:
        """Index of `value`, adding it if the domain is open."""
        index = self.index_of.get(value)
        if index is not None:
            return index
        if self.closed:
            members = ", ".join(str(v) for v in self.values[:8])
            more = ", ..." if len(self.values) > 8 else ""
            raise LogicTypeError(f"{value} is not a {self.name} (the {self.name} type is declared "
                                 f"with members {{{members}{more}}})", pos)
        return self._append(value)

    def add_distinct(self, values: list, pos: Any = None) -> list[int]:
        """Indices of distinct `values`, adding the new ones in order (bulk form of `add`: dict
        operations run in C, no Python loop per value on the common path)."""
        found = list(map(self.index_of.get, values))
        if None not in found:
            return found
        missing = [v for v, f in zip(values, found) if f is None]
        if self.closed:
            self.add(missing[0], pos)  # raises the usual error
        start = len(self.values)
        self.values.extend(missing)
        self.index_of.update(zip(missing, range(start, start + len(missing))))
        return list(map(self.index_of.__getitem__, values))

    def lookup(self, value: ConstValue) -> int | None:
        return self.index_of.get(value)

    def __len__(self) -> int:
        return len(self.values)
