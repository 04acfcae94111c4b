"""Declared types (`let x: int`, `fn f(x: f32[n, 4])`) turned into run-time checks.

Invariant: a check either returns the value (converted where TL converts silently: 2.0 to an int
slot, a numeric list to a tensor slot in the declared element type, an int to a float slot) or
raises TLRuntimeError naming what was declared and what came; a tensor's element kind must be the
declared one (`i32[2]` refuses an f32 tensor: no silent float where ints were declared; widths of
one kind are interchangeable, f16 in a float32 slot, i64 in an int32 slot, the value unchanged);
named dims (`n`) must agree across the arguments of one call.
Every type name must be known (`unknown_type` says why not, at compile time): a scalar or tensor
element type, a struct of the program, a generic parameter in scope, or a host type (HOST_TYPES:
values the builtins make, checked no further).
"""
from __future__ import annotations

import difflib

from ..builtins import dtypes, operators
from ..builtins.convert import Tensor, to_int, type_name
from ..builtins.symbolic import Symbolic
from ..lang import ast
from ..lang.errors import TLRuntimeError
from .values import StructValue


def type_checker(typ: ast.TypeRef, what: str, structs: dict):
    """A function `check(value, named_dims) -> value` for a declared type, or None (no check)."""
    name = typ.name
    if typ.dims is not None:
        dims = typ.dims
        want = dtypes.DTYPES.get(name)  # None for Tensor[...]: any element type

        def check_tensor(v, named):
            if v.__class__ is list:
                v = _list_tensor(v, want, typ, what)
            if not isinstance(v, Tensor):
                raise TLRuntimeError(f"{what} expects {_type_text(typ)}, got {type_name(v)}")
            shape = v.shape
            if len(shape) != len(dims):
                raise TLRuntimeError(f"{what} expects {_type_text(typ)} (rank {len(dims)}), "
                                     f"got tensor {list(shape)} (rank {len(shape)})")
            for d, s in zip(dims, shape):
                if d is None:
                    continue
                if d.__class__ is int:
                    if d != s:
                        raise TLRuntimeError(f"{what} expects {_type_text(typ)}, got tensor {list(shape)}")
                else:
                    seen = named.get(d)
                    if seen is None:
                        named[d] = s
                    elif seen != s:
                        raise TLRuntimeError(f"{what} expects {_type_text(typ)} with {d} = {seen} "
                                             f"(from an earlier argument), got tensor {list(shape)}")
            if want is not None and dtypes.KIND.get(v.dtype, "float") != dtypes.KIND[want]:
                raise TLRuntimeError(f"{what} expects {_type_text(typ)} ({dtypes.KIND[want]} elements), got "
                                     f"tensor {list(shape)} {v.dtype} (convert it with `as {name}`)")
            return v
        return check_tensor
    if name in dtypes.INT_NAMES:
        def check_int(v, named):
            if v.__class__ is int:
                return v
            if v.__class__ is Symbolic and isinstance(v.value, int):  # a compiled function's argument
                return v
            if isinstance(v, float) and v == int(v) or isinstance(v, Tensor) and v.numel == 1:
                return to_int(v, limit64=False)
            if isinstance(v, bool):
                return int(v)
            raise TLRuntimeError(f"{what} expects an int, got {type_name(v)}")
        return check_int
    if name in dtypes.FLOAT_NAMES:
        def check_float(v, named):
            if v.__class__ is float or isinstance(v, Tensor):
                return v
            if v.__class__ is Symbolic:
                return v if isinstance(v.value, float) else v * 1.0
            if isinstance(v, int) and not isinstance(v, bool):
                return float(v)
            raise TLRuntimeError(f"{what} expects a float, got {type_name(v)}")
        return check_float
    if name == "bool":
        def check_bool(v, named):
            if isinstance(v, bool) or isinstance(v, Tensor):
                return v
            raise TLRuntimeError(f"{what} expects a bool, got {type_name(v)}")
        return check_bool
    if name in dtypes.STRING_NAMES:
        def check_str(v, named):
            if isinstance(v, str):
                return v
            raise TLRuntimeError(f"{what} expects a string, got {type_name(v)}")
        return check_str
    if name in ("Tensor", "tensor"):
        def check_any_tensor(v, named):
            if v.__class__ is list:
                return operators.tensor_from_list(v)
            if isinstance(v, Tensor):
                return v
            raise TLRuntimeError(f"{what} expects a tensor, got {type_name(v)}")
        return check_any_tensor
    def check_struct(v, named):
        st = structs.get(name)
        if st is None:
            return v  # generic parameter or host type: not checked
        if v.__class__ is StructValue and v.type is st:
            return v
        raise TLRuntimeError(f"{what} expects a {name}, got {type_name(v)}")
    if name in structs:
        return check_struct
    return None


def _list_tensor(v: list, want: str | None, typ: ast.TypeRef, what: str) -> Tensor:
    """A numeric array literal in a slot declared with an element type: made in that type where
    the literal's numbers fit it as a literal's would (ints in any numeric type, floats in float
    types, bools in bool); a float array for an int type is refused, never truncated."""
    t = operators.tensor_from_list(v)
    if want is None or t.dtype == want:
        return t
    have, need = dtypes.KIND[t.dtype], dtypes.KIND[want]
    if have == need or (have == "int" and need == "float"):
        return t.astype(want)
    raise TLRuntimeError(f"{what} expects {_type_text(typ)} ({want} elements), got an array of "
                         f"{have}s (convert it with `as {typ.name}`)")


def _type_text(typ: ast.TypeRef) -> str:
    if typ.dims is None:
        return typ.name
    dims = ", ".join("?" if d is None else str(d) for d in typ.dims)
    return f"{typ.name}[{dims}]"



TENSOR_ELEMENT_TYPES = set(dtypes.DTYPES) | {"Tensor", "tensor"}
HOST_TYPES = {"Model", "Tokenizer", "KVCache", "Sampler", "Config", "Record", "TextStream", "Map", "Dict",
              "Array", "Vec", "List", "Any", "any", "array", "list", "map", "dict", "Fn", "Function", "Option"}
_SCALAR_TYPES = (dtypes.INT_NAMES | dtypes.FLOAT_NAMES | dtypes.STRING_NAMES
                 | {"bool", "Tensor", "tensor"})


def unknown_type(typ: ast.TypeRef, structs: dict, generics=()) -> str | None:
    """Why a declared type names nothing TL knows (with a suggestion), or None when it is fine."""
    name = typ.name
    if typ.dims is not None:
        if name not in TENSOR_ELEMENT_TYPES:
            close = difflib.get_close_matches(name, sorted(TENSOR_ELEMENT_TYPES), n=1)
            return (f"unknown tensor element type '{name}' ({dtypes.explain(name)})"
                    + (f"; did you mean '{close[0]}'?" if close else ""))
    elif name not in _SCALAR_TYPES and name not in HOST_TYPES and name not in structs and name not in generics:
        return _unknown(f"unknown type '{name}'", name, _SCALAR_TYPES | HOST_TYPES | set(structs),
                        "int, float, bool, string, a tensor type like float32[?, ?], or a struct")
    for arg in typ.args:
        why = unknown_type(arg, structs, generics)
        if why is not None:
            return why
    return None


def _unknown(message: str, name: str, known, hint: str) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return message + (f" (did you mean '{close[0]}'?)" if close else f" (use {hint})")
