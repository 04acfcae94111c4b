"""Tensor creation and shape builtins: zeros, ones, full, arange, rand, reshape, transpose, concat,
slicing helpers, typed constructors (`f32::zeros`, `f16::from_array`, ...).

Invariant: shape arguments accept lists of integral numbers (`[2.0, 3]`) and a flat numeric list is
a 1-D tensor wherever a tensor is expected (convert.py); the default dtype is f32.
"""
from __future__ import annotations

import math

import numpy as np

from .autograd import tape
from .convert import (INT_RANGES, BuiltinArgError, Tensor, check_int_range, core, list_to_numpy,
                      tensor_of_dtype, to_axis, to_dim, to_float, to_int, to_list, to_shape, to_tensor, type_name)
from .dtypes import dtype_of
from .registry import builtin

C = "tensor"


def _seed_from(ctx) -> int:
    return int(ctx.rng.integers(0, 2**31 - 1))


@builtin("zeros", "zeros(shape, [dtype])", "tensor of zeros (default f32)", min_args=1, max_args=2, category=C)
def zeros(shape, dtype="f32"):
    return core.zeros(to_shape(shape), dtype_of(dtype))


@builtin("ones", "ones(shape, [dtype])", "tensor of ones (default f32)", min_args=1, max_args=2, category=C)
def ones(shape, dtype="f32"):
    return core.ones(to_shape(shape), dtype_of(dtype))


@builtin("full", "full(shape, value, [dtype])", "tensor filled with value", min_args=2, max_args=3, category=C)
def full(shape, value, dtype="f32"):
    return _full(to_shape(shape), value, dtype_of(dtype))


def _full(dims, value, dt: str):
    """core.full, exact for integer dtypes: a value that does not fit is an error (never a
    saturation), and an int beyond 2^53 (which a double cannot hold) is filled exactly."""
    if dt in INT_RANGES and isinstance(value, (int, float)) and not isinstance(value, bool):
        check_int_range(value, dt)
        if isinstance(value, int) and abs(value) > 2 ** 53:
            return core.from_numpy(np.full(dims, value, dtype=np.int64), dt)
    return core.full(dims, to_float(value, "value"), dt)


@builtin("arange", "arange(n) | arange(start, stop, [step])", "evenly spaced values (f32)",
         min_args=1, max_args=3, category=C)
def arange(a, b=None, step=1):
    if b is None:
        return core.arange(0, to_float(a, "n"), 1, "f32")
    s = to_float(step, "step")
    if s == 0:
        raise BuiltinArgError("step must not be 0")
    return core.arange(to_float(a, "start"), to_float(b, "stop"), s, "f32")


def _creation_dims(shape) -> list[int]:
    dims = to_shape(shape)
    if any(d < 0 for d in dims):
        raise BuiltinArgError(f"shape {dims} has a negative dimension")
    return dims


@builtin("rand", "rand(shape)", "uniform random values in [0, 1) from the program's seeded generator",
         min_args=1, max_args=1, needs_ctx=True, category=C)
def rand(ctx, shape):
    dims = _creation_dims(shape)
    return core.from_numpy(ctx.rng.random(dims, dtype=np.float32))


@builtin("randn", "randn(shape)", "standard normal random values from the program's seeded generator",
         min_args=1, max_args=1, needs_ctx=True, category=C)
def randn(ctx, shape):
    dims = _creation_dims(shape)
    return core.from_numpy(ctx.rng.standard_normal(dims, dtype=np.float32))


@builtin("from_array", "from_array(array, [dtype])", "a tensor from a (nested) numeric array",
         min_args=1, max_args=2, category=C)
def from_array(values, dtype=None):
    return tensor_of_dtype(values, dtype_of(dtype)) if dtype is not None else to_tensor(values)


@builtin("shape", "shape(t)", "the shape of t as an int array", min_args=1, max_args=1, category=C)
def shape(t):
    if isinstance(t, list):
        return list(list_to_numpy(t).shape)
    return list(to_tensor(t, "t").shape)


@builtin("numel", "numel(t)", "number of elements of t", min_args=1, max_args=1, category=C)
def numel(t):
    return int(to_tensor(t, "t").numel)


@builtin("ndim", "ndim(t)", "rank of t", min_args=1, max_args=1, category=C)
def ndim(t):
    return int(to_tensor(t, "t").ndim)


@builtin("dtype", "dtype(t)", "element type of t as a string (f32, f16, i64, ...)", min_args=1, max_args=1,
         category=C)
def dtype(t):
    return to_tensor(t, "t").dtype


@builtin("astype", "astype(t, dtype)", "t converted to dtype", min_args=2, max_args=2, category=C)
def astype(t, dt):
    return core.astype(to_tensor(t, "t"), dtype_of(dt))


@builtin("reshape", "reshape(t, shape)", "t with a new shape (-1 infers one dim); a view when contiguous",
         min_args=2, max_args=2, category=C)
def reshape(t, new_shape):
    t = to_tensor(t, "t")
    dims = to_shape(new_shape)
    if dims.count(-1) > 1:
        raise BuiltinArgError(f"shape {dims} has more than one -1")
    return core.reshape(t, dims)  # the runtime checks the element count and names both shapes


@builtin("transpose", "transpose(t, [d0, d1])", "swap two dims (default: the last two)",
         min_args=1, max_args=3, category=C)
def transpose(t, d0=-2, d1=-1):
    t = to_tensor(t, "t")
    if t.ndim < 2:
        return t
    return core.transpose(t, to_dim(d0, t.ndim, "d0"), to_dim(d1, t.ndim, "d1"))


@builtin("permute", "permute(t, dims)", "reorder dims", min_args=2, max_args=2, category=C)
def permute(t, dims):
    t = to_tensor(t, "t")
    order = [to_dim(d, t.ndim) for d in to_list(dims, "dims")]
    if sorted(d % t.ndim for d in order) != list(range(t.ndim)):
        raise BuiltinArgError(f"dims {order} are not a permutation of {t.ndim} dims")
    return core.permute(t, order)


@builtin("flatten", "flatten(t, [start, end])", "merge dims start..end into one", min_args=1, max_args=3,
         category=C)
def flatten(t, start=0, end=-1):
    t = to_tensor(t, "t")
    if t.ndim == 0:
        return core.reshape(t, [1])
    return core.flatten(t, to_dim(start, t.ndim, "start"), to_dim(end, t.ndim, "end"))


@builtin("squeeze", "squeeze(t, [dim])", "drop size-1 dims (or only dim)", min_args=1, max_args=2, category=C)
def squeeze(t, dim=None):
    t = to_tensor(t, "t")
    if dim is None:
        return core.squeeze(t)
    d = to_axis(dim, t.ndim)
    if t.shape[d] != 1:
        raise BuiltinArgError(f"dim {d} of tensor {list(t.shape)} has size {t.shape[d]}, not 1")
    return core.squeeze(t, d)


@builtin("unsqueeze", "unsqueeze(t, dim)", "insert a size-1 dim", min_args=2, max_args=2, category=C)
def unsqueeze(t, dim):
    t = to_tensor(t, "t")
    d = to_int(dim, "dim")
    if not -(t.ndim + 1) <= d <= t.ndim:
        raise BuiltinArgError(f"dim {d} is out of range for unsqueeze of a rank-{t.ndim} tensor")
    return core.unsqueeze(t, d)


@builtin("broadcast_to", "broadcast_to(t, shape)", "t broadcast to shape (NumPy rules)", min_args=2,
         max_args=2, category=C)
def broadcast_to(t, new_shape):
    return core.expand(to_tensor(t, "t"), to_shape(new_shape))


@builtin("concat", "concat(a, b, [dim]) | concat([tensors], dim)", "join tensors along dim (default 0)",
         min_args=1, max_args=3, category=C)
def concat(a, b=None, dim=None):
    if isinstance(a, list) and a and all(isinstance(x, Tensor) for x in a):
        tensors = list(a)
        dim = b if b is not None else 0
    else:
        if b is None:
            raise BuiltinArgError("concat needs two tensors (or an array of tensors)")
        tensors = [to_tensor(a, "a"), to_tensor(b, "b")]
        dim = 0 if dim is None else dim
    d = to_axis(dim, tensors[0].ndim)
    return core.concat(tensors, d)


@builtin("stack", "stack(tensors, [dim])", "stack equal-shaped tensors along a new dim", min_args=1,
         max_args=2, category=C)
def stack(tensors, dim=0):
    ts = [to_tensor(t) for t in to_list(tensors, "tensors")]
    if not ts:
        raise BuiltinArgError("stack needs at least one tensor")
    return core.stack(ts, to_int(dim, "dim"))


@builtin("slice", "slice(t, dim, start, end) | slice(t, start, end)",
         "elements start..end (exclusive) along dim (default 0); a view", min_args=3, max_args=4, category=C)
def slice_(t, a, b, c=None):
    t = to_tensor(t, "t")
    if c is None:
        dim, start, stop = 0, a, b
    else:
        dim, start, stop = a, b, c
    d = to_axis(dim, t.ndim)
    n = t.shape[d]
    s, e = to_int(start, "start"), to_int(stop, "end")
    s, e, _ = slice(s, e).indices(n)
    return core.slice(t, d, s, max(s, e), 1)


@builtin("slice_last", "slice_last(t, axis)", "the last element along axis (that axis removed)",
         min_args=1, max_args=2, category=C)
def slice_last(t, axis=0):
    t = to_tensor(t, "t")
    d = to_axis(axis, t.ndim)
    return core.select(t, d, t.shape[d] - 1)


@builtin("select", "select(t, dim, index)", "the slice at index along dim (dim removed)", min_args=3,
         max_args=3, category=C)
def select(t, dim, index):
    t = to_tensor(t, "t")
    d = to_axis(dim, t.ndim)
    i = to_int(index, "index")
    n = t.shape[d]
    if not -n <= i < n:
        raise BuiltinArgError(f"index {i} is out of range for dim {d} of size {n}")
    return core.select(t, d, i % n)


@builtin("gather", "gather(t, ids, [dim])", "rows (or entries along dim) of t picked by integer ids",
         min_args=2, max_args=3, category=C)
def gather(t, ids, dim=0):
    t = to_tensor(t, "t")
    idx = ids if isinstance(ids, Tensor) else core.from_numpy(np.asarray(
        [to_int(i, "id") for i in (ids if isinstance(ids, list) else [ids])], dtype=np.int64))
    d = to_axis(dim, t.ndim)
    n = t.shape[d]
    host = idx.numpy()
    if host.size and (host.min() < -n or host.max() >= n):
        raise BuiltinArgError(f"ids out of range for dim {d} of size {n}")
    if host.size and host.min() < 0:
        idx = core.from_numpy(np.where(host < 0, host + n, host).astype(np.int64))
    if t.dtype.startswith(("i", "u")):
        # integer entries (token ids, labels): taken on the host, exactly (the device gather moves float
        # and bool rows); the ids are read on the host here anyway
        taken = core.from_numpy(np.take(t.numpy(), host, axis=d))  # (negative ids count from the end, checked above)
        return taken if taken.dtype == t.dtype else core.astype(taken, t.dtype)  # (from_numpy widens to i64)
    return core.index_select(t, d, idx)


@builtin("index_select", "index_select(t, dim, ids)", "entries of t along dim picked by ids", min_args=3,
         max_args=3, category=C)
def index_select(t, dim, ids):
    return gather(t, ids, dim)


@builtin("scatter", "scatter(t, dim, ids, src)", "copy of t with slices along dim at ids replaced by src",
         min_args=4, max_args=4, category=C)
def scatter(t, dim, ids, src):
    t = to_tensor(t, "t")
    d = to_axis(dim, t.ndim)
    arr = t.numpy().copy()
    id_list = ids.numpy().reshape(-1).tolist() if isinstance(ids, Tensor) else (
        ids if isinstance(ids, list) else [ids])
    n = t.shape[d]
    positions = []
    for i in id_list:
        i = to_int(i, "id")
        if not -n <= i < n:
            raise BuiltinArgError(f"id {i} out of range for dim {d} of size {n}")
        positions.append(i % n)
    src_t = to_tensor(src, "src")
    src_arr = src_t.numpy()
    moved = np.moveaxis(arr, d, 0)
    try:
        moved[positions] = np.moveaxis(src_arr, d, 0) if src_arr.ndim == arr.ndim else src_arr
    except ValueError:
        raise BuiltinArgError(f"src {list(src_arr.shape)} does not fit {len(positions)} slices of "
                              f"tensor {list(t.shape)} along dim {d}") from None
    if tape.tracking(t, src_t):
        return _scatter_differentiable(t, d, positions, src_t, src_arr.ndim == arr.ndim)
    return core.from_numpy(arr, t.dtype)


def _scatter_differentiable(t, d, positions, src, same_rank):
    """scatter of tracked tensors as taped ops: where(written, src's slice that wrote last, t), so t's
    gradient skips the overwritten slices and src's reaches only the slices that were kept."""
    if not positions:
        return core.mul(t, 1.0)
    perm = [d] + [i for i in range(t.ndim) if i != d]
    inverse = [perm.index(i) for i in range(t.ndim)]
    tm = core.permute(t, perm)
    sm = core.permute(src, perm) if same_rank else src
    if sm.dtype != t.dtype:
        sm = core.astype(sm, t.dtype)
    slices = [len(positions)] + list(tm.shape[1:])
    if list(sm.shape) != slices:
        sm = core.expand(sm, slices)
    n = t.shape[d]
    pick = np.zeros(n, dtype=np.int64)
    written = np.zeros([n] + [1] * (t.ndim - 1), dtype=bool)
    for j, p in enumerate(positions):  # a later write of the same slice wins, as in the host copy
        pick[p] = j
        written.flat[p] = True
    placed = core.index_select(core.contiguous(sm), 0, core.from_numpy(pick))
    out = core.where(core.from_numpy(written), placed, tm)
    return core.contiguous(core.permute(out, inverse))


@builtin("chunk", "chunk(t, n, [dim])", "split t into n nearly equal parts (an array)", min_args=2,
         max_args=3, category=C)
def chunk(t, n, dim=0):
    t = to_tensor(t, "t")
    k = to_int(n, "n")
    if k <= 0:
        raise BuiltinArgError("n must be positive")
    return list(core.chunk(t, k, to_axis(dim, t.ndim)))


@builtin("split", "split(t, size_or_sizes, [dim])", "split t into pieces of a size (or a list of sizes)",
         min_args=2, max_args=3, category=C)
def split(t, sizes, dim=0):
    if isinstance(t, str):
        return t.split(sizes) if isinstance(sizes, str) else t.split()
    t = to_tensor(t, "t")
    d = to_axis(dim, t.ndim)
    if isinstance(sizes, list):
        parts = [to_int(s, "size") for s in sizes]
        if sum(parts) != t.shape[d]:
            raise BuiltinArgError(f"sizes {parts} do not add up to {t.shape[d]}")
        return list(core.split(t, parts, d))
    size = to_int(sizes, "size")
    if size <= 0:
        raise BuiltinArgError("size must be positive")
    n = t.shape[d]
    return list(core.split(t, [min(size, n - s) for s in range(0, n, size)], d))


@builtin("contiguous", "contiguous(t)", "a contiguous copy of t (t itself if already contiguous)",
         min_args=1, max_args=1, category=C)
def contiguous(t):
    return core.contiguous(to_tensor(t, "t"))


@builtin("copy_", "copy_(dst, src)", "write src into dst (a tensor or a view) in place; returns dst",
         min_args=2, max_args=2, category=C)
def copy_(dst, src):
    if not isinstance(dst, Tensor):
        raise BuiltinArgError(f"dst must be a tensor, got {type_name(dst)}")
    core.copy_(dst, to_tensor(src, "src"))
    return dst


@builtin("to_int", "to_int(x)", "an int from a number or a one-element tensor", min_args=1, max_args=1,
         category=C)
def to_int_builtin(x):
    if isinstance(x, float):
        if not math.isfinite(x):
            raise BuiltinArgError(f"cannot convert {x!r} to int")
        return int(x)
    if isinstance(x, Tensor):
        if x.numel != 1:
            raise BuiltinArgError(f"to_int needs one element, got tensor {list(x.shape)}")
        return int(x.item())
    if isinstance(x, str):
        try:
            return int(x.strip())
        except ValueError:
            raise BuiltinArgError(f"cannot convert {x!r} to int") from None
    return to_int(x, "x", limit64=False)


@builtin("to_float", "to_float(x)", "a float from a number or a one-element tensor", min_args=1, max_args=1,
         category=C)
def to_float_builtin(x):
    if isinstance(x, str):
        try:
            return float(x.strip())
        except ValueError:
            raise BuiltinArgError(f"cannot convert {x!r} to float") from None
    return to_float(x, "x")


@builtin("item", "item(t)", "the single value of a one-element tensor as a number", min_args=1, max_args=1,
         category=C)
def item(t):
    t = to_tensor(t, "t")
    if t.numel != 1:
        raise BuiltinArgError(f"needs one element, got tensor {list(t.shape)}")
    # The element's exact value, as to_float and PyTorch's .item() give it: an f32 0.1 is
    # 0.10000000149011612 (rounding it to its shortest decimal, 0.1, made x.item() != to_float(x)).
    return t.item()


@builtin("to_list", "to_list(t)", "the values of a tensor as a (nested) array", min_args=1, max_args=1,
         category=C)
def to_list_builtin(t):
    arr = to_tensor(t, "t").numpy()
    if arr.dtype == np.float16:
        arr = arr.astype(np.float32)
    return arr.tolist()


@builtin("positional_encoding", "positional_encoding(seq_len, d_model)",
         "sinusoidal position encodings [seq_len, d_model] (sin on even, cos on odd columns)",
         min_args=2, max_args=2, category=C)
def positional_encoding(seq_len, d_model):
    n, d = to_int(seq_len, "seq_len"), to_int(d_model, "d_model")
    if n < 0 or d <= 0:
        raise BuiltinArgError("seq_len must be >= 0 and d_model > 0")
    pos = np.arange(n, dtype=np.float64)[:, None]
    i = np.arange(d, dtype=np.float64)[None, :]
    angle = pos / np.power(10000.0, (2 * (i // 2)) / d)
    pe = np.where(i % 2 == 0, np.sin(angle), np.cos(angle)).astype(np.float32)
    return core.from_numpy(pe)


def _register_typed(prefix: str, dt: str) -> None:
    @builtin(f"{prefix}::zeros", f"{prefix}::zeros(shape)", f"{dt} tensor of zeros", min_args=1, max_args=1,
             category=C)
    def typed_zeros(shape):
        return core.zeros(to_shape(shape), dt)

    @builtin(f"{prefix}::ones", f"{prefix}::ones(shape)", f"{dt} tensor of ones", min_args=1, max_args=1,
             category=C)
    def typed_ones(shape):
        return core.ones(to_shape(shape), dt)

    @builtin(f"{prefix}::full", f"{prefix}::full(shape, value)", f"{dt} tensor filled with value", min_args=2,
             max_args=2, category=C)
    def typed_full(shape, value):
        return _full(to_shape(shape), value, dt)

    @builtin(f"{prefix}::arange", f"{prefix}::arange(n | start, stop, [step])", f"{dt} evenly spaced values",
             min_args=1, max_args=3, category=C)
    def typed_arange(a, b=None, step=1):
        return arange(a, b, step).astype(dt)

    @builtin(f"{prefix}::from_array", f"{prefix}::from_array(array, [shape])",
             f"{dt} tensor from a (nested) numeric array, optionally reshaped", min_args=1, max_args=2,
             category=C)
    def typed_from_array(values, shape=None):
        t = tensor_of_dtype(values, dt)
        return reshape(t, shape) if shape is not None else t

    @builtin(f"{prefix}::rand", f"{prefix}::rand(shape)", f"{dt} uniform random values", min_args=1,
             max_args=1, needs_ctx=True, category=C)
    def typed_rand(ctx, shape):
        return rand(ctx, shape).astype(dt)


for _prefix, _dt in (("f32", "f32"), ("f16", "f16"), ("i32", "i32"), ("i64", "i64"), ("bf16", "bf16")):
    _register_typed(_prefix, _dt)


# ---------------------------------------------------------------- matrices, masks, reshuffles
# Made on the host where a value is built once (eye, linspace, masks, index lists) and by the
# runtime's own ops where data moves (flip, pad, repeat, tile, one_hot run on the device).

@builtin("eye", "eye(n, [m], [dtype])", "n x m identity matrix (ones on the diagonal; m defaults to n)",
         min_args=1, max_args=3, category=C)
def eye(n, m=None, dtype="f32"):
    if isinstance(m, str):
        m, dtype = None, m
    rows = to_int(n, "n")
    cols = rows if m is None else to_int(m, "m")
    if rows < 0 or cols < 0:
        raise BuiltinArgError(f"needs sizes >= 0, got {rows} x {cols}")
    return core.from_numpy(np.eye(rows, cols, dtype=np.float32), dtype_of(dtype))


@builtin("linspace", "linspace(start, stop, n)", "n evenly spaced values from start to stop (both included)",
         min_args=3, max_args=3, category=C)
def linspace(start, stop, n):
    count = to_int(n, "n")
    if count < 0:
        raise BuiltinArgError(f"needs n >= 0, got {count}")
    return core.from_numpy(np.linspace(to_float(start, "start"), to_float(stop, "stop"), count,
                                       dtype=np.float64).astype(np.float32))


def _triangle(name: str, keep_lower: bool):
    @builtin(name, f"{name}(t, [k])",
             f"the {'lower' if keep_lower else 'upper'} triangle of the last two dims (diagonal k, default 0); "
             f"the rest zero", min_args=1, max_args=2, category=C)
    def fn(t, k=0):
        t = to_tensor(t, "t")
        if t.ndim < 2:
            raise BuiltinArgError(f"needs a tensor of rank >= 2, got {type_name(t)}")
        rows, cols = t.shape[-2], t.shape[-1]
        maker = np.tri if keep_lower else (lambda r, c, k: 1 - np.tri(r, c, k - 1))
        mask = core.from_numpy(np.ascontiguousarray(maker(rows, cols, to_int(k, "k")).astype(bool)))
        return core.where(mask, t, core.zeros([1], t.dtype))
    return fn


_triangle("tril", True)
_triangle("triu", False)


@builtin("one_hot", "one_hot(ids, n)", "f32 tensor with a trailing dim of size n: 1 at each id, else 0",
         min_args=2, max_args=2, category=C)
def one_hot(ids, n):
    t = to_tensor(ids, "ids", float_default=False)
    classes = to_int(n, "n")
    if classes <= 0:
        raise BuiltinArgError(f"needs n > 0, got {classes}")
    host = t.numpy()
    if host.size:
        bad = host[(host < 0) | (host >= classes) | (host != np.floor(host))]
        if bad.size:
            shown = bad.flat[0].item()
            raise BuiltinArgError(f"id {shown} is not one of 0..{classes - 1} (n = {classes})")
    hits = core.eq(core.unsqueeze(core.astype(t, "f32"), -1), core.arange(0, classes, 1, "f32"))
    return core.astype(hits, "f32")


@builtin("flip", "flip(t, [dim])", "t reversed along dim (default the last)", min_args=1, max_args=2, category=C)
def flip(t, dim=-1):
    t = to_tensor(t, "t")
    if t.ndim == 0:
        return t
    d = to_axis(dim, t.ndim)
    size = t.shape[d]
    return core.index_select(t, d, core.from_numpy(np.arange(size - 1, -1, -1, dtype=np.int64)))


@builtin("pad", "pad(t, widths, [value])",
         "t with `value` (default 0) added around it: widths = [before, after] for the last dim, or one "
         "[before, after] pair per dim from the first", min_args=2, max_args=3, category=C)
def pad(t, widths, value=0.0):
    t = to_tensor(t, "t")
    if t.ndim == 0:
        raise BuiltinArgError("needs a tensor with at least one dimension, got a 0-d tensor")
    w = widths.numpy().tolist() if isinstance(widths, Tensor) else to_list(widths, "widths")
    if w and not isinstance(w[0], list):
        pairs, dims = [w], [t.ndim - 1]  # a flat [before, after]: the last dim
    else:
        pairs, dims = w, list(range(len(w)))  # one pair per dim from the first
    if len(pairs) > max(t.ndim, 1) or any(not isinstance(p, list) or len(p) != 2 for p in pairs):
        raise BuiltinArgError(f"widths must be [before, after] or one such pair per dim (at most {t.ndim}), "
                              f"got {widths}")
    fill = to_float(value, "value")
    out = t
    for d, (before, after) in zip(dims, pairs):
        b, a = to_int(before, "width"), to_int(after, "width")
        if b < 0 or a < 0:
            raise BuiltinArgError(f"widths must be >= 0, got {before} and {after}")
        parts = []
        for count in (b, None, a):
            if count is None:
                parts.append(out)
            elif count:
                shape = list(out.shape)
                shape[d] = count
                parts.append(core.full(shape, fill, out.dtype))
        out = core.concat(parts, d) if len(parts) > 1 else out
    return out


@builtin("repeat", "repeat(t, n, [dim])", "each element repeated n times along dim (default: the flat tensor)",
         min_args=2, max_args=3, category=C)
def repeat(t, n, dim=None):
    t = to_tensor(t, "t")
    times = to_int(n, "n")
    if times < 0:
        raise BuiltinArgError(f"needs n >= 0, got {times}")
    if dim is None:
        t, d = core.reshape(t, [t.numel]), 0
    else:
        d = to_axis(dim, t.ndim)
    ids = np.repeat(np.arange(t.shape[d], dtype=np.int64), times)
    return core.index_select(t, d, core.from_numpy(ids))


@builtin("tile", "tile(t, reps)", "t repeated whole: reps times along the first dim, or one count per dim "
         "from the first",
         min_args=2, max_args=2, category=C)
def tile(t, reps):
    t = to_tensor(t, "t")
    if isinstance(reps, Tensor):
        reps = reps.numpy().tolist()
    counts = [to_int(r, "reps") for r in reps] if isinstance(reps, list) else [to_int(reps, "reps")]
    if len(counts) > max(t.ndim, 1) or any(c < 0 for c in counts):
        raise BuiltinArgError(f"reps must be counts >= 0, at most one per dim, got {reps}")
    if t.ndim == 0:
        t = core.reshape(t, [1])
    counts = counts + [1] * (t.ndim - len(counts))  # counts for the first dims, the rest once
    out = t
    for d, c in enumerate(counts):
        if c != 1:
            ids = np.tile(np.arange(out.shape[d], dtype=np.int64), c)
            out = core.index_select(out, d, core.from_numpy(ids))
    return out
