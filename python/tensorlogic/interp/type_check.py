"""Declared types (`let x: int`, `fn f(x: f32[n, 4])`) turned into run-time checks.

Invariant: a check either returns the value (converted where TL converts silently: 2.0 to an int
slot, a numeric list to a tensor slot, an int to a float slot) or raises TLRuntimeError naming what
was declared and what came; named dims (`n`) must agree across the arguments of one call.
Unknown type names (generic parameters, host types) are not checked.
"""
from __future__ import annotations

from ..builtins import dtypes, operators
from ..builtins.convert import Tensor, to_int, type_name
from ..lang import ast
from ..lang.errors import TLRuntimeError
from .values import StructValue


def type_checker(typ: ast.TypeRef, what: str, structs: dict):
    """A function `check(value, named_dims) -> value` for a declared type, or None (no check)."""
    name = typ.name
    if typ.dims is not None:
        dims = typ.dims

        def check_tensor(v, named):
            if v.__class__ is list:
                v = operators.tensor_from_list(v)
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
            return v
        return check_tensor
    if name in dtypes.INT_NAMES:
        def check_int(v, named):
            if v.__class__ is int:
                return v
            if isinstance(v, float) and v == int(v) or isinstance(v, Tensor) and v.numel == 1:
                return to_int(v)
            if isinstance(v, bool):
                return int(v)
            raise TLRuntimeError(f"{what} expects an int, got {type_name(v)}")
        return check_int
    if name in dtypes.FLOAT_NAMES:
        def check_float(v, named):
            if v.__class__ is float or isinstance(v, Tensor):
                return v
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


def _type_text(typ: ast.TypeRef) -> str:
    if typ.dims is None:
        return typ.name
    dims = ", ".join("?" if d is None else str(d) for d in typ.dims)
    return f"{typ.name}[{dims}]"

