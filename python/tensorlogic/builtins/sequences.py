"""Arrays and ranges: range, range_i, len, append, push, pop, reverse, sort, contains, join; sorting of
tensors (sort, argsort, topk).

Invariant: `append(xs, v)` adds v to xs in place AND returns xs, so both `append(xs, v)` and
`xs = append(xs, v)` (the forms existing programs use) work.
"""
from __future__ import annotations

import numpy as np

from . import symbolic
from .autograd import tape
from .operators import key_value, map_key, map_keys
from .convert import BuiltinArgError, Tensor, core, to_bool, to_dim, to_int, to_list, to_str, to_tensor, type_name
from .registry import builtin

C = "arrays"


@builtin("range", "range(n) | range(a, b, [step])", "the ints a, a+1, ... below b (for loops)", min_args=1,
         max_args=3, category=C)
def range_(a, b=None, step=1):
    if b is None:
        return range(to_int(a, "n"))
    s = to_int(step, "step")
    if s == 0:
        raise BuiltinArgError("step must not be 0")
    return range(to_int(a, "start"), to_int(b, "stop"), s)


@builtin("range_i", "range_i(n) | range_i(a, b)", "integer range, same as range", min_args=1, max_args=3,
         category=C)
def range_i(a, b=None, step=1):
    return range_(a, b, step)


@builtin("len", "len(x)", "length of an array or string, or the first dim of a tensor", min_args=1, max_args=1,
         category=C)
def len_(x):
    if isinstance(x, (list, str, range, tuple, dict)):
        return len(x)
    if isinstance(x, Tensor):
        if x.ndim == 0:
            raise BuiltinArgError("len of a 0-d tensor")
        return int(x.shape[0])
    n = getattr(x, "__len__", None)
    if n is not None:
        return len(x)
    raise BuiltinArgError(f"len needs an array, string or tensor, got {type_name(x)}")


@builtin("append", "append(xs, v)", "add v at the end of array xs (in place) and return xs", min_args=2,
         max_args=2, category=C)
def append(xs, v):
    if isinstance(xs, str) and isinstance(v, str):
        return xs + v
    mirror = symbolic.note_mutation(xs, "an array")
    to_list(xs, "xs").append(v)
    if mirror is not None:  # xs is a compiled function's copy of its argument: the caller's grows too
        mirror[0].append(mirror[1](v))
    return xs


@builtin("push", "push(xs, v)", "same as append", min_args=2, max_args=2, category=C)
def push(xs, v):
    return append(xs, v)


@builtin("pop", "pop(xs)", "remove and return the last element of xs", min_args=1, max_args=1, category=C)
def pop(xs):
    xs = to_list(xs, "xs")
    if not xs:
        raise BuiltinArgError("pop from an empty array")
    return xs.pop()


@builtin("reverse", "reverse(xs)", "a reversed copy of an array or string", min_args=1, max_args=1, category=C)
def reverse(xs):
    if isinstance(xs, str):
        return xs[::-1]
    return list(reversed(to_list(xs, "xs")))


@builtin("sort", "sort(xs) | sort(t, [dim], [descending])",
         "a sorted copy of an array of numbers or strings; a tensor sorted along dim (default the last)",
         min_args=1, max_args=3, category=C)
def sort(xs, dim=-1, descending=False):
    if isinstance(xs, Tensor):
        arr, d = _sortable(xs, dim)
        order = _order(arr, d, descending)
        if tape.tracking(xs):
            return take_along(xs, order, d)
        return core.from_numpy(np.ascontiguousarray(np.take_along_axis(arr, order, d)), xs.dtype)
    try:
        return sorted(to_list(xs, "xs"), reverse=to_bool(descending, "descending"))
    except TypeError:
        raise BuiltinArgError("needs an array of only numbers or only strings") from None


# Sorting has no device kernel: it runs on the host (exact; not a per-token path).
def _sortable(t, dim):
    if t.ndim == 0:
        raise BuiltinArgError("cannot sort a 0-d tensor")
    arr = t.numpy()
    if arr.dtype == np.float16:
        arr = arr.astype(np.float32)
    return arr, to_dim(dim, t.ndim)


def _order(arr, d, descending):
    if to_bool(descending, "descending"):  # stable: equal values keep their order
        key = ~arr if arr.dtype == np.bool_ else (-arr.astype(np.float64) if arr.dtype.kind == "f" else -arr)
        return np.argsort(key, axis=d, kind="stable")
    return np.argsort(arr, axis=d, kind="stable")


@builtin("argsort", "argsort(t, [dim], [descending])", "indices (i64) that sort t along dim (default the last)",
         min_args=1, max_args=3, category=C)
def argsort(t, dim=-1, descending=False):
    arr, d = _sortable(to_tensor(t, "t"), dim)
    return core.from_numpy(np.ascontiguousarray(_order(arr, d, descending).astype(np.int64)), "i64")


@builtin("topk", "topk(t, k, [dim])", "the k largest values along dim (default the last), largest first",
         min_args=2, max_args=3, category=C)
def topk(t, k, dim=-1):
    t = to_tensor(t, "t")
    arr, d = _sortable(t, dim)
    kk = to_int(k, "k")
    if not 0 <= kk <= arr.shape[d]:
        raise BuiltinArgError(f"k must be between 0 and {arr.shape[d]}, got {kk}")
    order = np.take(_order(arr, d, True), np.arange(kk), axis=d)
    if tape.tracking(t):
        return take_along(t, order, d)
    return core.from_numpy(np.ascontiguousarray(np.take_along_axis(arr, order, d)), t.dtype)


def take_along(t, order, d):
    """np.take_along_axis(t, order, d) as taped device ops (a tracked t: sort and topk): one
    index_select of the flat tensor, whose rule scatters the gradient back to the picked places."""
    last = t.ndim - 1
    moved = core.contiguous(core.transpose(t, d, last) if d != last else t)
    n = moved.shape[-1]
    order_m = np.moveaxis(order, d, -1)
    rows = int(np.prod(order_m.shape[:-1], dtype=np.int64))
    flat_ids = (np.arange(rows, dtype=np.int64)[:, None] * n + order_m.reshape(rows, -1)).reshape(-1)
    if flat_ids.size == 0:
        return core.from_numpy(np.ascontiguousarray(np.take_along_axis(t.numpy(), order, d)), t.dtype)
    picked = core.index_select(core.reshape(moved, [-1]), 0, core.from_numpy(np.ascontiguousarray(flat_ids)))
    out = core.reshape(picked, list(order_m.shape))
    return core.contiguous(core.transpose(out, d, last)) if d != last else out


@builtin("contains", "contains(xs, v)", "whether array/string xs contains v", min_args=2, max_args=2, category=C)
def contains(xs, v):
    if isinstance(xs, dict):
        return map_key(v) in xs
    if isinstance(xs, str):
        return to_str(v, "v") in xs
    if isinstance(v, (Tensor, list)):  # an element that is an array: compared as a value, never elementwise
        return any(x.__class__ is list and x == v for x in to_list(xs, "xs")) if isinstance(v, list) else False
    return any(x == v if not isinstance(x, (Tensor, list)) else False for x in to_list(xs, "xs"))


@builtin("join", "join(xs, sep)", "the strings of xs joined with sep", min_args=2, max_args=2, category=C)
def join(xs, sep):
    from .formatting import format_value
    return to_str(sep, "sep").join(format_value(x) for x in to_list(xs, "xs"))


# ---------------------------------------------------------------- maps (dict values)

@builtin("map", "map() | map(keys, values)", "a map (dictionary) from string/int/bool keys (true and 1 are "
         "distinct keys; floats are refused) to values; "
         "m[k] reads, m[k] = v writes, for k in m walks the keys in insertion order", min_args=0, max_args=2,
         category=C)
def map_(keys=None, values=None):
    if keys is None:
        return {}
    ks, vs = to_list(keys, "keys"), to_list(values, "values") if values is not None else None
    if vs is None or len(ks) != len(vs):
        raise BuiltinArgError("needs as many values as keys")
    return {map_key(k): v for k, v in zip(ks, vs)}


def _map(m, what="m") -> dict:
    if not isinstance(m, dict):
        raise BuiltinArgError(f"{what} must be a map, got {type_name(m)}")
    return m


@builtin("keys", "keys(m)", "the keys of map m, in insertion order", min_args=1, max_args=1, category=C)
def keys(m):
    return map_keys(_map(m))


@builtin("values", "values(m)", "the values of map m, in key insertion order", min_args=1, max_args=1, category=C)
def values(m):
    return list(_map(m).values())


@builtin("has_key", "has_key(m, k)", "whether map m has key k", min_args=2, max_args=2, category=C)
def has_key(m, k):
    return map_key(k) in _map(m)


@builtin("remove", "remove(m, k)", "remove key k from map m and return its value (an error if absent)",
         min_args=2, max_args=2, category=C)
def remove(m, k):
    key = map_key(k)
    if key not in _map(m):
        from .formatting import format_value
        raise BuiltinArgError(f"no key {format_value(key_value(key), True)} in the map")
    symbolic.note_mutation(m, "a map")  # maps are passed as themselves: no copy to mirror
    return m.pop(key)
