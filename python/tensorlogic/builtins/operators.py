"""What TL's operators, indexing, casts and array literals do to values: the runtime semantics the
compiled interpreter code calls, so that the interpreter itself never touches the device.

Invariants: numeric arrays act as tensors in arithmetic (a list literal of numbers becomes a
tensor), strings concatenate with `+`, `/` is true division (always a float for numbers; floor_div is integer
division) and scalars follow the tensors' IEEE rules (math_ops.py); every
rejection raises BuiltinArgError (or the runtime's own error), never a bare Python error that a
caller would have to translate, except TypeError for an operator Python itself refuses (the caller
names the operand types).
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable

from . import dtypes
from .convert import BuiltinArgError, Tensor, core, is_numeric_list, list_to_numpy, to_bool, to_int
from .core import getitem, note, setitem
from .convert import MAP_FALSE, MAP_TRUE, type_name
from .convert import MapBool, key_value, map_keys  # noqa: F401  (the map key helpers live in convert)
from .formatting import format_value
from .math_ops import scalar_div, scalar_mod, scalar_pow
from .symbolic import Symbolic


def tensor_from_list(v: list):
    """A numeric (nested) list as a tensor: f32 for floats, i64 for ints."""
    return core.from_numpy(list_to_numpy(v))


def array_value(vals: list):
    """The value of an outermost array literal (inner literals of it stay plain lists, so that a
    deep literal is converted once, in linear time): a tensor when it is a nested numeric list (a
    matrix literal), else the list itself, with its nested numeric items as tensors."""
    if not any(v.__class__ is list and v for v in vals):
        return vals
    if is_numeric_list(vals):
        return tensor_from_list(vals)
    return [tensor_from_list(v) if v.__class__ is list and v and any(x.__class__ is list for x in v)
            and is_numeric_list(v) else v for v in vals]


def is_missing_member(exc: AttributeError, name: str) -> bool:
    """The member protocol: tl_get_field / tl_call_method raise exactly AttributeError(name) for a
    member the object does not have. Any other AttributeError (a failed attribute lookup inside
    the member, say) is a fault of that member and must surface as itself, never be taken for
    "no such member" and re-dispatched to a builtin of the same name."""
    return type(exc) is AttributeError and exc.args == (name,) and getattr(exc, "obj", None) is None


def binary(op: str, a, b):
    """`a op b` for every binary operator but && and ||: lists become tensors, strings
    concatenate."""
    if a.__class__ is list or b.__class__ is list:
        if op == "+" and a.__class__ is list and b.__class__ is list and not (
                is_numeric_list(a) and is_numeric_list(b)):
            return a + b
        if op in ("==", "!=") and a.__class__ is list and b.__class__ is list:
            return (a == b) if op == "==" else (a != b)
        a = _list_operand(a)
        b = _list_operand(b)
    if op == "+" and (a.__class__ is str or b.__class__ is str):
        return (a if a.__class__ is str else format_value(a)) + (b if b.__class__ is str else format_value(b))
    out = PY_BINARY[op](a, b)
    if out.__class__ is Tensor:
        name = TAPED_BINARY.get(op)
        if name is not None:
            note(name, (a, b), out)
    return out


def _list_operand(v):
    if v.__class__ is list:
        if not is_numeric_list(v):
            raise BuiltinArgError("only numeric arrays take part in arithmetic")
        return tensor_from_list(v)
    return v


def _div(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return scalar_div(a, b)
    return a / b


def _mod(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return scalar_mod(a, b)
    if _integer(a) and _integer(b) and _has_zero(b):  # as floor_div: an error, not a silent 0
        raise ZeroDivisionError
    return a % b


def _integer(v) -> bool:
    return (v.__class__ is int) or (isinstance(v, Tensor) and v.dtype in ("i32", "i64"))


def _has_zero(v) -> bool:
    if v.__class__ is int:
        return v == 0
    return bool((v.numpy() == 0).any())  # a host read, as floor_div of integer tensors does


def _pow(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return scalar_pow(a, b)
    return a ** b


def _matmul(a, b):
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise BuiltinArgError(f"'@' multiplies tensors, got {type_name(a)} and {type_name(b)}")
    return a @ b


# Python's own operator is right for numbers, strings and tensors; the compiled code calls these
# directly on the fast path and falls back to `binary` for lists and failures.
PY_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "⊙": operator.mul,
    "/": _div,
    "%": _mod,
    "@": _matmul,
    "**": _pow,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


# The operators whose tensor result carries a gradient: the runtime op (and rules.py rule) each is.
# A tensor result of `a op b` is handed to `note` (builtins/core.py), which tapes it when the run
# has a tape and an operand is tracked; `Tensor`'s own operators tape nothing.
TAPED_BINARY: dict[str, str] = {"+": "add", "-": "sub", "*": "mul", "⊙": "mul", "/": "div", "%": "mod",
                                "@": "matmul", "**": "pow"}


def negate(v):
    """`-v`; TypeError for values that have no negation (the caller names the type)."""
    if v.__class__ is list:
        v = _list_operand(v)
    if isinstance(v, (str, bool)):
        raise TypeError
    out = -v
    return note("neg", (v,), out) if out.__class__ is Tensor else out


def is_elementwise_not(v) -> bool:
    """`!v` works elementwise (instead of on one truth value) for tensors of more than one element."""
    return isinstance(v, Tensor) and v.numel != 1


def logical_not(v):
    return core.logical_not(v)


def truth(v) -> bool:
    """The truth value of a condition (`if`, `while`, `&&`, `!`)."""
    return to_bool(v)


def index_key(v):
    """A TL index value as a Python index (int, slice)."""
    if v.__class__ is int:
        return v
    if v.__class__ is slice:
        return v
    return to_int(v, "index")


def slice_bound(v):
    if v.__class__ is int:
        return v
    return to_int(v, "slice bound")


def _is_struct(o) -> bool:
    return isinstance(getattr(o, "fields", None), dict) and hasattr(getattr(o, "type", None), "field_names")


def get_item(o, keys: tuple):
    """`o[k0, k1, ...]`."""
    if isinstance(o, Tensor):
        k = tuple(index_key(x) for x in keys)
        try:
            return getitem(o, k[0] if len(k) == 1 else k)
        except IndexError as e:  # an index out of range is the program's mistake, not a bug
            raise BuiltinArgError(str(e)) from None
    if isinstance(o, (list, str, range, tuple)):
        v = o
        for x in keys:
            if isinstance(v, Tensor):
                return get_item(v, (x,))
            if not isinstance(v, (list, str, range, tuple)):
                raise BuiltinArgError(f"cannot index {type_name(v)}")
            k = index_key(x)
            if k.__class__ is int and not -len(v) <= k < len(v):
                raise BuiltinArgError(f"index {k} is out of range for {type_name(v)} of length {len(v)}")
            v = v[k]
            if isinstance(v, range):
                v = list(v)
        return v
    if isinstance(o, dict) and len(keys) == 1 and not _is_struct(o):
        key = map_key(keys[0])
        if key in o:
            return o[key]
        raise BuiltinArgError(f"no key {format_value(key_value(key), True)} in the map")
    if len(keys) == 1 and isinstance(keys[0], str):
        key = keys[0]
        if _is_struct(o):
            if key in o.fields:
                return o.fields[key]
            raise BuiltinArgError(f"struct {o.type.name} has no field '{key}'")
        if isinstance(o, dict):
            if key in o:
                return o[key]
            raise BuiltinArgError(f"no key '{key}'")
        try:
            return get_field(o, key)
        except AttributeError as exc:
            if not is_missing_member(exc, key):
                raise
            raise BuiltinArgError(f"{type_name(o)} has no entry '{key}'") from None
    index = getattr(o, "tl_index", None)
    if index is not None:
        v = o
        for x in keys:
            v = v.tl_index(x) if hasattr(v, "tl_index") else get_item(v, (x,))
        return v
    raise BuiltinArgError(f"cannot index {type_name(o)}")


def is_tensor(v) -> bool:
    return isinstance(v, Tensor)


def set_item(container, key: list, v) -> None:
    """`container[k0, k1, ...] = v`."""
    if isinstance(container, Tensor):
        k = tuple(index_key(x) for x in key)
        if isinstance(v, list):
            v = tensor_from_list(v)
        elif v.__class__ is Symbolic:  # a compiled function's scalar: a recorded fill
            core.fill_(getitem(container, k if len(k) != 1 else k[0]), v)
            return
        elif not isinstance(v, (Tensor, int, float)):
            raise BuiltinArgError(f"cannot store {type_name(v)} into a tensor")
        try:
            setitem(container, k if len(k) != 1 else k[0], v)
        except IndexError as e:
            raise BuiltinArgError(str(e)) from None
        return
    if isinstance(container, dict) and len(key) == 1:
        container[map_key(key[0])] = v
        return
    if isinstance(container, list):
        target = get_item(container, tuple(key[:-1])) if len(key) > 1 else container
        if isinstance(target, Tensor):
            set_item(target, key[-1:], v)
            return
        if not isinstance(target, list):
            raise BuiltinArgError(f"cannot assign into {type_name(target)}")
        k = index_key(key[-1])
        if k.__class__ is not int:
            raise BuiltinArgError(f"an array index must be an integer, got {type_name(k)}")
        if not -len(target) <= k < len(target):
            raise BuiltinArgError(f"index {k} is out of range for array of length {len(target)}")
        target[k] = v
        return
    raise BuiltinArgError(f"cannot assign into {type_name(container)}")


def map_key(k):
    """A map key as stored: a string, an int, or a bool as MAP_TRUE/MAP_FALSE. Floats are refused,
    integral or not (1.0 is not the key 1: a float key would silently find an int's entry)."""
    cls = k.__class__
    if cls is bool:
        return MAP_TRUE if k else MAP_FALSE
    if cls is str or cls is int:
        return k
    if isinstance(k, bool):
        return MAP_TRUE if k else MAP_FALSE
    if isinstance(k, (str, int)):
        return k
    if isinstance(k, float):
        raise BuiltinArgError(f"a map key is a string, int or bool, got float {k!r} (use int(...) for a "
                              f"number key)")
    raise BuiltinArgError(f"a map key is a string, int or bool, got {type_name(k)}")


def get_field(o, name: str):
    """`o.name` for host values; AttributeError when there is no such field (the caller names it)."""
    getter = getattr(o, "tl_get_field", None)
    if getter is not None:
        return getter(name)
    if isinstance(o, Tensor):
        if name == "shape":
            return list(o.shape)
        if name == "dtype":
            return o.dtype
        if name == "ndim":
            return o.ndim
        if name == "numel":
            return o.numel
    if isinstance(o, dict):
        if name in o:
            return o[name]
    raise AttributeError(name)


def iterate(v):
    """What `for x in v` walks: list items, characters, a tensor's rows, a host object's items."""
    if isinstance(v, (list, range, str, tuple)):
        return list(v) if isinstance(v, list) else v
    if isinstance(v, Tensor):
        if v.ndim == 0:
            raise BuiltinArgError("cannot iterate over a 0-d tensor")
        return (getitem(v, i) for i in range(v.shape[0]))
    if isinstance(v, dict):
        return map_keys(v)  # a map's keys, in insertion order
    it = getattr(v, "tl_iter", None)
    if it is not None:
        return it()
    if isinstance(v, int):
        raise BuiltinArgError(f"cannot iterate over int {v} (use range({v}))")
    raise BuiltinArgError(f"cannot iterate over {type_name(v)}")


def is_cast_type(tname: str) -> bool:
    """`as tname` names a dtype of the one table (builtins/dtypes.py) or string."""
    return tname in dtypes.DTYPES or tname in dtypes.STRING_NAMES


def cast(v, tname: str):
    """`v as tname`: tensors and numeric lists get that dtype; a scalar becomes an int, float or bool
    by the dtype's kind; a string parses as that kind; anything `as string` is its printed form."""
    if tname in dtypes.STRING_NAMES:
        return format_value(v)
    dtype = dtypes.dtype_of(tname)
    if isinstance(v, Tensor):
        return core.astype(v, dtype)
    if v.__class__ is list:
        return core.astype(tensor_from_list(v), dtype)
    kind = dtypes.KIND[dtype]
    if kind == "int":
        if isinstance(v, str):
            try:
                return int(v.strip())
            except ValueError:
                raise BuiltinArgError(f"cannot convert string {v!r} to int") from None
        if isinstance(v, float):
            if not math.isfinite(v):
                raise BuiltinArgError(f"cannot convert {v} to int")
        return _scalar(v, int, tname)
    if kind == "float":
        if isinstance(v, str):
            try:
                return float(v.strip())
            except ValueError:
                raise BuiltinArgError(f"cannot convert string {v!r} to float") from None
        return _scalar(v, float, tname)
    if isinstance(v, str):
        raise BuiltinArgError("cannot convert a string to bool")
    return _scalar(v, bool, tname)


def _scalar(v, convert, tname: str):
    if isinstance(v, (bool, int, float)):
        return convert(v)
    raise BuiltinArgError(f"cannot convert {type_name(v)} to {tname}")
