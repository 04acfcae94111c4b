"""The one table of TL's element types: every spelling TL accepts for a dtype (`as T`, `astype(x, "T")`,
`zeros(shape, "T")`, `tensor W: T[...]`, type annotations) and the runtime dtype it means.

Invariants: `RUNTIME_DTYPES` equals the plain dtypes of `_core` (tests/builtins/test_dtypes.py checks
it against `core.dtypes()`); every name in `DTYPES` maps to one of them; a name not in the table
(f64, i16, ...) is the same clear error everywhere, never a quiet substitute.
"""
from __future__ import annotations

from typing import Any

from .convert import BuiltinArgError

RUNTIME_DTYPES = ("f32", "f16", "bf16", "i32", "i64", "bool")

DTYPES = {
    "f32": "f32", "float32": "f32", "float": "f32",
    "f16": "f16", "float16": "f16", "half": "f16",
    "bf16": "bf16", "bfloat16": "bf16",
    "i32": "i32", "int32": "i32",
    "i64": "i64", "int64": "i64", "int": "i64",
    "bool": "bool",
}

KIND = {"f32": "float", "f16": "float", "bf16": "float", "i32": "int", "i64": "int", "bool": "bool"}

# Scalar annotations (`x: int`) also take the index-type spellings, which name no tensor dtype.
INT_NAMES = frozenset({n for n, d in DTYPES.items() if KIND[d] == "int"} | {"usize", "isize"})
FLOAT_NAMES = frozenset(n for n, d in DTYPES.items() if KIND[d] == "float")
STRING_NAMES = frozenset({"string", "str", "String"})

USAGE = "use f32, f16, bf16, i32, i64 or bool (or float, half, int, ...)"


def dtype_of(name: Any) -> str:
    """The runtime dtype a TL spelling names; BuiltinArgError for any other value."""
    if isinstance(name, str) and name in DTYPES:
        return DTYPES[name]
    return _unknown(name)


def explain(name: Any) -> str:
    """Why `name` is no dtype, and what to use instead."""
    if name in ("f64", "float64", "double"):
        return f"tensors have no 64-bit floats; {USAGE}"
    if name in ("i16", "int16", "i8", "int8", "u8", "uint8"):
        return f"tensors have no 8- or 16-bit integers; {USAGE}"
    return USAGE


def _unknown(name: Any):
    raise BuiltinArgError(f"unknown dtype {name!r} ({explain(name)})")


def scalar_kind(name: str) -> str:
    """"int", "float" or "bool" for a dtype spelling (what `3.7 as T` gives for a number)."""
    return KIND[dtype_of(name)]
