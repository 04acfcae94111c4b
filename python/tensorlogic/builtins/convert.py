"""Conversions from TL values to what `_core` takes: tensors, ints, floats, shapes, dtypes.

Invariants: a flat numeric list becomes a 1-D tensor wherever a tensor is expected (a nested one an
N-D tensor); an integral float (2.0) or a one-element integer tensor is accepted wherever an int is;
every rejection raises BuiltinArgError naming what was expected and what came. `core` and `Tensor`
are re-exported from builtins/core.py, the one module that imports the runtime.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..lang.errors import TLError
from ..logic.errors import LogicError
from ..models.errors import ModelError
from .core import Tensor, core  # noqa: F401 - re-exported for the builtin modules


class BuiltinArgError(Exception):
    """A builtin got a value it cannot use; the interpreter adds the builtin's name and the line."""


def is_program_error(exc: BaseException) -> bool:
    """Whether `exc`, raised by a builtin or an operator, is the program's fault (a bad argument, a
    shape the runtime refuses, a bad model file, a logic error, arithmetic or resource limits) rather
    than a bug in TensorLogic (a KeyError, TypeError, AttributeError... from Python code)."""
    return isinstance(exc, (TLError, BuiltinArgError, core.TLRuntimeError, ModelError, LogicError,
                            ZeroDivisionError, OverflowError, RecursionError, MemoryError))


def type_name(v: Any) -> str:
    """The TL name of a value's type, for error messages."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, Tensor):
        return f"tensor {list(v.shape)} {v.dtype}"
    if v is None:
        return "nothing"
    tl_name = getattr(v, "tl_type_name", None)
    if tl_name:
        return tl_name
    struct_type = getattr(v, "type", None)
    if struct_type is not None and hasattr(struct_type, "field_names"):
        return struct_type.name
    return type(v).__name__


def is_numeric_list(v: Any) -> bool:
    return isinstance(v, list) and all(
        isinstance(x, (int, float)) or (isinstance(x, list) and is_numeric_list(x)) for x in v)


def list_to_numpy(v: list) -> np.ndarray:
    try:
        arr = np.array(v)
    except ValueError:
        raise BuiltinArgError("array literal is ragged (rows have different lengths)") from None
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise BuiltinArgError("expected a numeric array")
    if arr.dtype.kind == "f":
        arr = arr.astype(np.float32)
    elif arr.dtype.kind in "iu":
        arr = arr.astype(np.int64)
    return arr


def to_tensor(v: Any, what: str = "argument", *, float_default: bool = True) -> Any:
    """A Tensor from a tensor, numeric list or scalar. Python scalars become 0-d f32 (or i64/bool)."""
    if isinstance(v, Tensor):
        return v
    if isinstance(v, list):
        if not v:
            return core.from_numpy(np.zeros((0,), dtype=np.float32))
        if all(isinstance(x, Tensor) for x in v):
            return core.stack(v, 0)
        arr = list_to_numpy(v)
        return core.from_numpy(arr)
    if isinstance(v, bool):
        return core.from_numpy(np.array(v))
    if isinstance(v, int):
        return core.from_numpy(np.array(v, dtype=np.float32 if float_default else np.int64))
    if isinstance(v, float):
        return core.from_numpy(np.array(v, dtype=np.float32))
    raise BuiltinArgError(f"{what} must be a tensor, got {type_name(v)}")


def tensor_or_scalar(v: Any) -> Any:
    """For elementwise ops: tensors and Python numbers pass; lists become tensors."""
    if isinstance(v, (Tensor, int, float)):
        return v
    if isinstance(v, list):
        return to_tensor(v)
    raise BuiltinArgError(f"expected a tensor or a number, got {type_name(v)}")


def to_int(v: Any, what: str = "argument") -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if math.isfinite(v) and v == int(v):
            return int(v)
        raise BuiltinArgError(f"{what} must be an integer, got {v!r}")
    if isinstance(v, Tensor) and v.numel == 1:
        item = v.item()
        return to_int(item, what)
    raise BuiltinArgError(f"{what} must be an integer, got {type_name(v)}")


def to_float(v: Any, what: str = "argument") -> float:
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, Tensor) and v.numel == 1:
        return float(v.item())
    raise BuiltinArgError(f"{what} must be a number, got {type_name(v)}")


def to_bool(v: Any, what: str = "condition") -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return v != 0
    if isinstance(v, Tensor):
        if v.numel != 1:
            raise BuiltinArgError(f"{what} must be a single value, got {type_name(v)}")
        return bool(v.item())
    raise BuiltinArgError(f"{what} must be a bool, got {type_name(v)}")


def to_shape(v: Any, what: str = "shape") -> list[int]:
    """A shape from a list of (integral) numbers, a single int, or a 1-D integer tensor."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        dims = [to_int(v, what)]
    elif isinstance(v, list):
        dims = [to_int(d, f"{what} entry") for d in v]
    elif isinstance(v, Tensor) and v.ndim <= 1:
        dims = [to_int(d, f"{what} entry") for d in np.atleast_1d(v.numpy()).tolist()]
    else:
        raise BuiltinArgError(f"{what} must be a list of integers like [2, 3], got {type_name(v)}")
    for d in dims:
        if d < -1:
            raise BuiltinArgError(f"{what} {dims} has a negative dimension")
    return dims


def to_dim(v: Any, ndim: int, what: str = "dim") -> int:
    d = to_int(v, what)
    if not -max(ndim, 1) <= d < max(ndim, 1):
        raise BuiltinArgError(f"{what} {d} is out of range for a tensor of rank {ndim}")
    return d


def to_str(v: Any, what: str = "argument") -> str:
    if isinstance(v, str):
        return v
    raise BuiltinArgError(f"{what} must be a string, got {type_name(v)}")


def to_list(v: Any, what: str = "argument") -> list:
    if isinstance(v, list):
        return v
    raise BuiltinArgError(f"{what} must be an array, got {type_name(v)}")
