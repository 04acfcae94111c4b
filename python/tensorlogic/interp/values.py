"""Runtime values of TL besides Python scalars, strings, lists and `_core.Tensor`s.

Invariant: values hold only what the program can reach (no interpreter frames, no AST caches), so
dropping a binding drops the tensors it held. `UNSET` marks a frame slot with no value; it never
escapes into TL code.
"""
from __future__ import annotations

from typing import Any


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()


class StructType:
    """A `struct` declaration plus the functions of its `impl` blocks."""

    __slots__ = ("name", "field_names", "field_types", "generics", "methods")

    def __init__(self, name: str, field_names: tuple[str, ...], field_types: tuple, generics: tuple[str, ...]):
        self.name = name
        self.field_names = field_names
        self.field_types = field_types
        self.generics = generics
        self.methods: dict[str, "FunctionValue"] = {}


class StructValue:
    __slots__ = ("type", "fields")

    def __init__(self, type_: StructType, fields: dict[str, Any]):
        self.type = type_
        self.fields = fields


class FunctionValue:
    """A user function (or impl method). `impl` is the compiled callable `impl(args, call_span)`;
    it is filled in after compilation so recursive and forward references resolve."""

    __slots__ = ("name", "decl", "impl", "owner", "filename")
    tl_type_name = "function"  # what error messages call it (type_name)

    def __init__(self, name: str, decl, filename: str, owner: StructType | None = None):
        self.name = name
        self.decl = decl
        self.impl = None
        self.owner = owner
        self.filename = filename

    @property
    def qualified_name(self) -> str:
        return f"{self.owner.name}::{self.name}" if self.owner else self.name

    @property
    def is_method(self) -> bool:
        params = self.decl.params
        return bool(params) and params[0].name == "self"


class BoundMethod:
    __slots__ = ("receiver", "function")

    def __init__(self, receiver, function: FunctionValue):
        self.receiver = receiver
        self.function = function


class BuiltinValue:
    """A builtin used as a value (`let f = relu`)."""

    __slots__ = ("builtin",)

    def __init__(self, builtin):
        self.builtin = builtin


class RelationRef:
    """A relation name used as a value (`relation_tensor(Ancestor)`)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name
