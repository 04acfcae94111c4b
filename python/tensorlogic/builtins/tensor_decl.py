"""`tensor name: dtype[dims] [learnable|frozen] = value`: build and check a declared tensor.

Invariant: the result has exactly the declared rank and fixed dims and the declared dtype; a flat
literal whose element count matches is reshaped; any other mismatch names both shapes.
"""
from __future__ import annotations

import numpy as np

from .convert import BuiltinArgError, Tensor, core, list_to_numpy, type_name
from .dtypes import dtype_of


def declare_tensor(name: str, dtype_name: str, dims, value, mode):
    dt = dtype_of(dtype_name)
    declared = [d if isinstance(d, int) else None for d in dims]
    text = "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
    if value is None:
        if any(d is None for d in declared):
            raise BuiltinArgError(f"tensor {name}: {dtype_name}{text} has unknown dims; give it a value")
        return core.zeros(declared, dt)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if any(d is None for d in declared):
            raise BuiltinArgError(f"tensor {name}: a scalar fills only a fully known shape")
        return core.full(declared, float(value), dt)
    if isinstance(value, list):
        arr = list_to_numpy(value)
        if arr.ndim != len(declared) and all(d is not None for d in declared) and arr.size == int(
                np.prod(declared)):
            arr = arr.reshape(declared)
        value = core.from_numpy(arr)
    if not isinstance(value, Tensor):
        raise BuiltinArgError(f"tensor {name}: value must be a tensor, got {type_name(value)}")
    shape = list(value.shape)
    if len(shape) != len(declared) and all(d is not None for d in declared) and value.numel == int(
            np.prod(declared)) and value.is_contiguous():
        value = core.reshape(value, declared)
        shape = declared
    if len(shape) != len(declared) or any(d is not None and d != s for d, s in zip(declared, shape)):
        raise BuiltinArgError(f"tensor {name}: declared {dtype_name}{text} but the value is {shape}")
    if value.dtype != dt:
        value = value.astype(dt)
    if mode == "learnable":
        from .learning import make_learnable  # noqa: PLC0415
        value = make_learnable(value)
    return value
