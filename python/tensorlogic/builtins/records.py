"""Record: a read-only name -> value table TL can print, index and read fields of
(`stats.hit_rate`, `stats["live_bytes"]`). Used for memory statistics and other host summaries.

Invariant: a Record holds plain values (numbers, strings, lists, other Records), never tensors.
"""
from __future__ import annotations

from typing import Any

from .registry import TLObject


class Record(TLObject):
    tl_type_name = "record"

    def __init__(self, values: dict[str, Any], type_name: str = "record"):
        self._values = dict(values)
        self.tl_type_name = type_name

    def tl_get_field(self, name: str) -> Any:
        if name in self._values:
            return self._values[name]
        raise AttributeError(name)

    def tl_call_method(self, name: str, args: list) -> Any:
        if name == "keys" and not args:
            return list(self._values)
        if name == "get" and len(args) == 1 and isinstance(args[0], str):
            return self.tl_get_field(args[0])
        raise AttributeError(name)

    def tl_iter(self):
        return iter(list(self._values))

    def keys(self) -> list[str]:
        return list(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def tl_repr(self) -> str:
        from .formatting import format_value
        inner = ", ".join(f"{k}: {format_value(v, True)}" for k, v in self._values.items())
        return "{" + inner + "}"
