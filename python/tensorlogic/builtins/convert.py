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
from .symbolic import Symbolic, active as _tracing


class BuiltinArgError(Exception):
    """A builtin got a value it cannot use; the interpreter adds the builtin's name and the line."""


def is_program_error(exc: BaseException) -> bool:
    """Whether `exc`, raised by a builtin or an operator, is the program's fault (a bad argument, a
    shape the runtime refuses, a bad model file, a logic error, arithmetic or resource limits) rather
    than a bug in TensorLogic (a KeyError, TypeError, AttributeError... from Python code)."""
    return isinstance(exc, (TLError, BuiltinArgError, core.TLRuntimeError, ModelError, LogicError,
                            ZeroDivisionError, OverflowError, RecursionError, MemoryError))


def is_earlier_kernel_failure(exc: BaseException) -> bool:
    """Whether `exc` is a failure the runtime reports for an op that ran earlier (a kernel error
    raised at a later wait or read): its message names that op, not the builtin that read it."""
    return isinstance(exc, core.KernelFailure)


def type_name(v: Any) -> str:
    """The TL name of a value's type, for error messages."""
    if v.__class__ is Symbolic:
        return "float" if isinstance(v.value, float) else "int"
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
    if isinstance(v, dict):
        return "map"
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


MAX_TENSOR_RANK = 8  # the runtime's kMaxDims


def is_numeric_list(v: Any) -> bool:
    """A (nested) list of numbers only; iterative, so that deep nesting costs linear time."""
    if not isinstance(v, list):
        return False
    stack = [v]
    while stack:
        for x in stack.pop():
            if isinstance(x, list):
                stack.append(x)
            elif not isinstance(x, (int, float, Symbolic)):
                return False
    return True


def list_depth(v: Any) -> int:
    depth = 0
    while isinstance(v, list):
        depth += 1
        v = v[0] if v else None
    return depth


def _concrete_list(v: list) -> list:
    return [x.concrete("an array element") if x.__class__ is Symbolic else
            (_concrete_list(x) if x.__class__ is list else x) for x in v]


def _symbolic_list_tensor(v: list) -> Any:
    """A flat list holding a compiled function's symbolic scalars: the numbers upload as a constant
    and each symbolic element is written with a recorded `fill_`, recomputed at every replay."""
    arr = list_to_numpy([x.value if x.__class__ is Symbolic else x for x in v])
    t = core.from_numpy(arr)
    for i, x in enumerate(v):
        if x.__class__ is Symbolic:
            core.fill_(core.slice(t, 0, i, i + 1, 1), x)
    return t


def list_to_numpy(v: list, keep_float64: bool = False) -> np.ndarray:
    depth = list_depth(v)
    if depth > MAX_TENSOR_RANK:
        raise BuiltinArgError(f"nested {depth} levels deep (a tensor has at most {MAX_TENSOR_RANK} dimensions)")
    if any(x.__class__ is Symbolic or x.__class__ is list for x in v):
        v = _concrete_list(v)
    try:
        arr = np.array(v)
    except ValueError:
        raise BuiltinArgError("array literal is ragged (rows have different lengths)") from None
    except OverflowError:  # an int beyond int64 next to a negative one
        arr = np.array(v, dtype=object)
    if arr.dtype.kind == "u" or arr.dtype == object or (
            arr.dtype.kind == "f" and arr.size and float(np.abs(arr).max()) >= 2.0 ** 63):
        # ints beyond int64 (NumPy made them uint64, float64 or objects): an error, never a wrap
        for x in np.array(v, dtype=object).flat:
            if isinstance(x, int) and not isinstance(x, bool):
                check_int_range(x, "i64", "array element")
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise BuiltinArgError("expected a numeric array")
    if arr.dtype.kind == "f":
        if not keep_float64:
            arr = arr.astype(np.float32)
    elif arr.dtype.kind in "iu":
        arr = arr.astype(np.int64)
    return arr


INT_RANGES = {"i32": (-2 ** 31, 2 ** 31 - 1), "i64": (-2 ** 63, 2 ** 63 - 1)}


def check_int_range(v: int | float, dt: str, what: str = "value") -> None:
    """BuiltinArgError unless the number `v` fits the integer dtype `dt` (a float: after truncation);
    never a silent wrap or saturation. No-op for other dtypes."""
    bounds = INT_RANGES.get(dt)
    if bounds is None:
        return
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        raise BuiltinArgError(f"{what} {repr(v)} cannot become {dt}")
    lo, hi = bounds
    if not lo <= (int(v) if isinstance(v, float) else v) <= hi:
        shown = repr(v) if isinstance(v, float) else str(v)
        raise BuiltinArgError(f"{what} {shown} is out of the range of {dt}")


def _has_symbolic(v: list) -> bool:
    stack = [v]
    while stack:
        for x in stack.pop():
            if x.__class__ is list:
                stack.append(x)
            elif x.__class__ is Symbolic:
                return True
    return False


def tensor_of_dtype(values: Any, dt: str, what: str = "array") -> Any:
    """A tensor of dtype `dt` from a tensor (cast) or a numeric (nested) list, whose ints (and
    floats) must fit an integer dtype exactly: no detour through i64 or f32 that would wrap or round."""
    if isinstance(values, list) and values and dt in INT_RANGES and is_numeric_list(values) \
            and not _has_symbolic(values):
        arr = list_to_numpy(values, keep_float64=True)
        if arr.size:
            lo, hi = (arr.min(), arr.max())
            for x in (lo, hi):
                check_int_range(float(x) if arr.dtype.kind == "f" else int(x), dt, f"{what} element")
        return core.from_numpy(arr, dt)
    return core.astype(to_tensor(values, what), dt)


def to_tensor(v: Any, what: str = "argument", *, float_default: bool = True) -> Any:
    """A Tensor from a tensor, numeric list or scalar. Python scalars become 0-d f32 (or i64/bool)."""
    if isinstance(v, Tensor):
        return v
    if isinstance(v, list):
        if not v:
            return core.from_numpy(np.zeros((0,), dtype=np.float32))
        if all(isinstance(x, Tensor) for x in v):
            return core.stack(v, 0)
        if _tracing() is not None and any(x.__class__ is Symbolic for x in v) and \
                all(x.__class__ is not list for x in v):
            return _symbolic_list_tensor(v)
        arr = list_to_numpy(v)
        return core.from_numpy(arr)
    if isinstance(v, bool):
        return core.from_numpy(np.array(v))
    if isinstance(v, int):
        return core.from_numpy(np.array(v, dtype=np.float32 if float_default else np.int64))
    if isinstance(v, float):
        with np.errstate(over="ignore"):  # beyond f32's range it is inf, as any f32 store (no stray warning)
            return core.from_numpy(np.array(v, dtype=np.float32))
    if v.__class__ is Symbolic:
        if _tracing() is not None:
            return _symbolic_list_tensor([v]).reshape([])
        return to_tensor(v.value, what, float_default=float_default)
    raise BuiltinArgError(f"{what} must be a tensor, got {type_name(v)}")


def tensor_or_scalar(v: Any) -> Any:
    """For elementwise ops: tensors and Python numbers pass; lists become tensors."""
    if isinstance(v, (Tensor, int, float, Symbolic)):
        return v
    if isinstance(v, list):
        return to_tensor(v)
    raise BuiltinArgError(f"expected a tensor or a number, got {type_name(v)}")


def to_int(v: Any, what: str = "argument", *, limit64: bool = True) -> int:
    """An int argument (a size, dim, count, seed, ...): an integral number or one-element tensor,
    within 64 bits unless `limit64` is off (beyond them the runtime and NumPy could not take it:
    `eye(1e300)` was an internal error)."""
    if v.__class__ is Symbolic:
        return to_int(v.concrete(what), what, limit64=limit64)
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        n = v
    elif isinstance(v, float):
        if not (math.isfinite(v) and v == int(v)):
            raise BuiltinArgError(f"{what} must be an integer, got {v!r}")
        n = int(v)
    elif isinstance(v, Tensor) and v.numel == 1:
        return to_int(v.item(), what, limit64=limit64)
    else:
        raise BuiltinArgError(f"{what} must be an integer, got {type_name(v)}")
    if limit64 and not -2 ** 63 <= n < 2 ** 63:
        raise BuiltinArgError(f"{what} {v!r} is too large (it must fit in 64 bits)")
    return n


def to_float(v: Any, what: str = "argument") -> float:
    if v.__class__ is Symbolic:
        return float(v.concrete(what))
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, Tensor) and v.numel == 1:
        return float(v.item())
    raise BuiltinArgError(f"{what} must be a number, got {type_name(v)}")


def to_bool(v: Any, what: str = "condition") -> bool:
    if v.__class__ is Symbolic:
        return v.concrete(what) != 0
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
        dims = [to_int(v, what, limit64=False)]
    elif isinstance(v, list):
        dims = [to_int(d, f"{what} entry", limit64=False) for d in v]
    elif isinstance(v, Tensor) and v.ndim <= 1:
        dims = [to_int(d, f"{what} entry", limit64=False) for d in np.atleast_1d(v.numpy()).tolist()]
    else:
        raise BuiltinArgError(f"{what} must be a list of integers like [2, 3], got {type_name(v)}")
    for d in dims:
        if d < -1:
            raise BuiltinArgError(f"{what} {dims} has a negative dimension")
        if d >= 2 ** 63:  # beyond what any tensor dimension (int64) can hold
            raise BuiltinArgError(f"{what} has a dimension of {d}, too large for a tensor")
    return dims


def to_dim(v: Any, ndim: int, what: str = "dim") -> int:
    d = to_int(v, what)
    if not -max(ndim, 1) <= d < max(ndim, 1):
        raise BuiltinArgError(f"{what} {d} is out of range for a tensor of rank {ndim}")
    return d


def to_axis(v: Any, ndim: int, what: str = "dim") -> int:
    """to_dim for a builtin that indexes along the dim (gather, select, slice, split, var, ...): a
    0-d tensor has no dim to index (to_dim lets reductions take dim 0 of a scalar, as PyTorch does)."""
    if ndim == 0:
        raise BuiltinArgError(f"needs a tensor with at least one dimension, got a 0-d tensor")
    return to_dim(v, ndim, what)


def to_str(v: Any, what: str = "argument") -> str:
    if isinstance(v, str):
        return v
    raise BuiltinArgError(f"{what} must be a string, got {type_name(v)}")


def to_list(v: Any, what: str = "argument") -> list:
    if isinstance(v, list):
        return v
    raise BuiltinArgError(f"{what} must be an array, got {type_name(v)}")


# ---------------------------------------------------------------- map keys

class MapBool:
    """A bool map key as the map stores it: Python's dict takes True for 1 and False for 0, TL keeps
    them apart (`m[true]` and `m[1]` are two entries). Only the two singletons exist; `key_value`
    turns them back into bools wherever a key leaves the map (keys(), `for k in m`, printing)."""

    __slots__ = ("value",)
    tl_type_name = "bool"

    def __init__(self, value: bool):
        self.value = value

    def __repr__(self) -> str:
        return "true" if self.value else "false"


MAP_TRUE, MAP_FALSE = MapBool(True), MapBool(False)


def key_value(k):
    """A stored map key as TL sees it (MAP_TRUE -> true)."""
    return k.value if k.__class__ is MapBool else k


def map_keys(m: dict) -> list:
    """The keys of map m as TL sees them, in insertion order."""
    return [k.value if k.__class__ is MapBool else k for k in m]
