"""Backward rules of the differentiable `_core` ops, each composed of traced `_core` ops.

A rule is `rule(g, out, needs, *args, **kw) -> list` with one entry per positional argument of the op:
the gradient for that argument (a tensor of its shape, a list for list arguments such as `concat`'s),
or None. `needs[i]` says whether argument i leads to a learnable; rules skip the work for the others.
Invariant: rules run with recording off and use only `core` ops (so they run on the device that holds
`g`), except `prod`'s, whose forward runs on the host and whose rule reads x there too; a gradient
always has its input's shape (broadcast dimensions are summed back by `unbroadcast`). Which op has
which rule is optable.py's table.
"""
from __future__ import annotations

import math

from ..core import Tensor, core

RULES: dict[str, object] = {}
FLOAT_DTYPES = ("f32", "f16", "bf16")


def rule(*names: str):
    def register(fn):
        for n in names:
            RULES[n] = fn
        return fn
    return register


def _t(v) -> bool:
    return v.__class__ is Tensor


def unbroadcast(g, shape):
    """Sum g over the dimensions NumPy broadcasting added or stretched to reach g.shape from `shape`."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    extra = g.ndim - len(shape)
    for _ in range(extra):
        g = core.sum(g, 0)
    for i, s in enumerate(shape):
        if s == 1 and g.shape[i] != 1:
            g = core.sum(g, i, True)
    if tuple(g.shape) != shape:
        g = core.reshape(g, list(shape))
    return g


def _float_grad(g, x):
    """g shaped and typed for x, or None when x is not a float tensor (no gradient flows to ints)."""
    if not _t(x) or x.dtype not in FLOAT_DTYPES:
        return None
    g = unbroadcast(g, x.shape)
    return g if g.dtype == x.dtype else core.astype(g, x.dtype)


# ---------------------------------------------------------------- elementwise binary

@rule("add")
def _add(g, out, needs, a, b):
    return [_float_grad(g, a) if needs[0] else None, _float_grad(g, b) if needs[1] else None]


@rule("sub")
def _sub(g, out, needs, a, b):
    return [_float_grad(g, a) if needs[0] else None, _float_grad(core.neg(g), b) if needs[1] else None]


@rule("mul")
def _mul(g, out, needs, a, b):
    return [_float_grad(core.mul(g, b), a) if needs[0] else None,
            _float_grad(core.mul(g, a), b) if needs[1] else None]


@rule("div")
def _div(g, out, needs, a, b):
    ga = _float_grad(core.div(g, b), a) if needs[0] else None
    gb = _float_grad(core.neg(core.div(core.mul(g, out), b)), b) if needs[1] else None
    return [ga, gb]


@rule("pow")
def _pow(g, out, needs, a, b):
    ga = gb = None
    if needs[0]:
        if _t(b):
            ga = core.mul(core.mul(g, b), core.pow(a, core.sub(b, 1.0)))
        elif b == 0:
            ga = core.mul(g, 0.0)
        else:
            ga = core.mul(core.mul(g, float(b)), core.pow(a, float(b) - 1.0))
        ga = _float_grad(ga, a)
    if needs[1]:
        base = a if _t(a) else float(a)
        log_a = core.log(base) if _t(base) else math.log(base) if base > 0 else math.nan
        gb = _float_grad(core.mul(core.mul(g, out), log_a), b)
    return [ga, gb]


def _pick(g, mask_tensor):
    return core.mul(g, core.astype(mask_tensor, g.dtype))


@rule("maximum")
def _maximum(g, out, needs, a, b):
    return [_float_grad(_pick(g, core.ge(a, b)), a) if needs[0] else None,
            _float_grad(_pick(g, core.lt(a, b)), b) if needs[1] else None]


@rule("minimum")
def _minimum(g, out, needs, a, b):
    return [_float_grad(_pick(g, core.le(a, b)), a) if needs[0] else None,
            _float_grad(_pick(g, core.gt(a, b)), b) if needs[1] else None]


@rule("mod")
def _mod(g, out, needs, a, b):
    ga = _float_grad(g, a) if needs[0] else None
    gb = _float_grad(core.neg(core.mul(g, core.floor(core.div(a, b)))), b) if needs[1] else None
    return [ga, gb]


@rule("where")
def _where(g, out, needs, cond, a, b):
    zero = core.zeros([], g.dtype)
    return [None,
            _float_grad(core.where(cond, g, zero), a) if needs[1] else None,
            _float_grad(core.where(cond, zero, g), b) if needs[2] else None]


# ---------------------------------------------------------------- elementwise unary

def _unary(name):
    def register(fn):
        def r(g, out, needs, x, *rest, **kw):
            return [_float_grad(fn(g, out, x, *rest, **kw), x)]
        RULES[name] = r
        return fn
    return register


@_unary("neg")
def _neg(g, out, x):
    return core.neg(g)


@_unary("abs")
def _abs(g, out, x):
    return core.mul(g, core.sub(core.step(x), core.step(core.neg(x))))


@_unary("exp")
def _exp(g, out, x):
    return core.mul(g, out)


@_unary("log")
def _log(g, out, x):
    return core.div(g, x)


@_unary("sqrt")
def _sqrt(g, out, x):
    return core.div(core.mul(g, 0.5), out)


@_unary("rsqrt")
def _rsqrt(g, out, x):
    return core.mul(core.mul(g, -0.5), core.mul(core.mul(out, out), out))


@_unary("square")
def _square(g, out, x):
    return core.mul(core.mul(g, x), 2.0)


@_unary("sin")
def _sin(g, out, x):
    return core.mul(g, core.cos(x))


@_unary("cos")
def _cos(g, out, x):
    return core.neg(core.mul(g, core.sin(x)))


@_unary("tan")
def _tan(g, out, x):
    return core.mul(g, core.add(core.mul(out, out), 1.0))


@_unary("tanh")
def _tanh(g, out, x):
    return core.mul(g, core.sub(1.0, core.mul(out, out)))


@_unary("sigmoid")
def _sigmoid(g, out, x):
    return core.mul(g, core.mul(out, core.sub(1.0, out)))


@_unary("relu")
def _relu(g, out, x):
    return core.mul(g, core.step(x))


@_unary("silu")
def _silu(g, out, x):
    s = core.sigmoid(x)
    return core.mul(g, core.mul(s, core.add(core.mul(x, core.sub(1.0, s)), 1.0)))


_GELU_C = math.sqrt(2.0 / math.pi)


@_unary("gelu")
def _gelu(g, out, x, approximate="tanh"):
    if approximate == "none":
        # d/dx x*Phi(x) = Phi(x) + x*phi(x); Phi = out / x away from 0, its Taylor series near 0
        small = core.lt(core.abs(x), 1e-3)
        safe_x = core.where(small, core.full([], 1.0, x.dtype), x)
        phi_cdf = core.where(small, core.add(core.mul(x, 1.0 / math.sqrt(2 * math.pi)), 0.5), core.div(out, safe_x))
        pdf = core.mul(core.exp(core.mul(core.mul(x, x), -0.5)), 1.0 / math.sqrt(2 * math.pi))
        return core.mul(g, core.add(phi_cdf, core.mul(x, pdf)))
    inner = core.mul(core.add(x, core.mul(core.mul(core.mul(x, x), x), 0.044715)), _GELU_C)
    th = core.tanh(inner)
    d_inner = core.mul(core.add(core.mul(core.mul(x, x), 3 * 0.044715), 1.0), _GELU_C)
    left = core.mul(core.add(th, 1.0), 0.5)
    right = core.mul(core.mul(core.mul(x, 0.5), core.sub(1.0, core.mul(th, th))), d_inner)
    return core.mul(g, core.add(left, right))


@rule("floor", "ceil", "round", "step")
def _piecewise_constant(g, out, needs, x, *rest, **kw):
    """Zero almost everywhere (PyTorch's floor/ceil/round/sign give zeros too)."""
    return [_float_grad(core.mul(g, 0.0), x)] + [None] * len(rest)


@rule("astype")
def _astype(g, out, needs, x, dtype=None):
    return [_float_grad(g, x)]


@rule("contiguous")
def _contiguous(g, out, needs, x):
    return [g]


# ---------------------------------------------------------------- reductions

def _dims(dim, ndim):
    if dim is None:
        return list(range(ndim))
    if isinstance(dim, (list, tuple)):
        return sorted(d % ndim for d in dim)
    return [dim % max(ndim, 1)]


def _expand_back(g, x, dim, keepdim):
    """g of a reduction over `dim` broadcast back to x's shape."""
    if dim is None:
        return core.expand(core.reshape(g, [1] * x.ndim), list(x.shape)) if x.ndim else g
    if not keepdim:
        for d in _dims(dim, x.ndim):
            g = core.unsqueeze(g, d)
    return core.expand(g, list(x.shape))


@rule("sum")
def _sum(g, out, needs, x, dim=None, keepdim=False):
    return [_float_grad(_expand_back(g, x, dim, keepdim), x)]


@rule("mean")
def _mean(g, out, needs, x, dim=None, keepdim=False):
    count = 1
    for d in _dims(dim, x.ndim):
        count *= x.shape[d]
    return [_float_grad(core.div(_expand_back(g, x, dim, keepdim), float(max(count, 1))), x)]


@rule("max", "min")
def _extreme(g, out, needs, x, dim=None, keepdim=False):
    """Ties share the gradient equally."""
    hit = core.astype(core.eq(x, _expand_back(out, x, dim, keepdim)), g.dtype)
    count = core.sum(hit, dim, True) if dim is not None else core.sum(hit)
    share = core.div(hit, _expand_back(count, x, dim, True) if dim is not None else count)
    return [_float_grad(core.mul(_expand_back(g, x, dim, keepdim), share), x)]


@rule("prod")
def _prod(g, out, needs, x, dim=None, keepdim=False):
    """d prod / d x_i = the product of the other elements along dim (exact with zeros among them)."""
    import numpy as np  # noqa: PLC0415 - only this host-side rule needs it
    arr = x.numpy().astype(np.float64)
    axis = -1 if dim is None else dim % x.ndim
    moved = arr.reshape(-1) if dim is None else np.moveaxis(arr, axis, -1)
    ones = np.ones(moved.shape[:-1] + (1,))
    left = np.concatenate([ones, np.cumprod(moved, -1)[..., :-1]], -1)
    right = np.concatenate([np.cumprod(moved[..., ::-1], -1)[..., :-1][..., ::-1], ones], -1)
    others = left * right
    others = others.reshape(arr.shape) if dim is None else np.moveaxis(others, -1, axis)
    others_t = core.from_numpy(np.ascontiguousarray(others.astype(np.float32)))
    if x.dtype != "f32":
        others_t = core.astype(others_t, x.dtype)
    return [_float_grad(core.mul(_expand_back(g, x, dim, keepdim), others_t), x), None, None]


@rule("softmax")
def _softmax(g, out, needs, x, dim=-1):
    inner = core.sum(core.mul(g, out), dim, True)
    return [_float_grad(core.mul(out, core.sub(g, inner)), x)]


@rule("log_softmax")
def _log_softmax(g, out, needs, x, dim=-1):
    total = core.sum(g, dim, True)
    return [_float_grad(core.sub(g, core.mul(core.exp(out), total)), x)]


# ---------------------------------------------------------------- linear algebra

@rule("matmul")
def _matmul(g, out, needs, a, b):
    a2 = core.unsqueeze(a, 0) if a.ndim == 1 else a
    b2 = core.unsqueeze(b, -1) if b.ndim == 1 else b
    g2 = g
    if a.ndim == 1:
        g2 = core.unsqueeze(g2, -2 if b.ndim > 1 else 0)
    if b.ndim == 1:
        g2 = core.unsqueeze(g2, -1)
    ga = gb = None
    if needs[0]:
        ga = core.matmul(g2, core.transpose(b2, -2, -1))
        ga = _float_grad(ga, a2)
        if a.ndim == 1:
            ga = core.reshape(ga, list(a.shape))
    if needs[1]:
        gb = core.matmul(core.transpose(a2, -2, -1), g2)
        gb = _float_grad(gb, b2)
        if b.ndim == 1:
            gb = core.reshape(gb, list(b.shape))
    return [ga, gb]


@rule("linear")
def _linear(g, out, needs, x, w, bias=None):
    gx = gw = gb = None
    if needs[0]:
        gx = _float_grad(core.matmul(g, core.astype(w, g.dtype) if w.dtype != g.dtype else w), x)
    if needs[1] and w.dtype in FLOAT_DTYPES:
        g2 = core.reshape(g, [-1, g.shape[-1]])
        x2 = core.reshape(core.contiguous(x), [-1, x.shape[-1]])
        gw = _float_grad(core.matmul(core.transpose(g2, 0, 1), x2), w)
    if len(needs) > 2 and needs[2]:
        gb = _float_grad(g, bias)
    return [gx, gw, gb]


# ---------------------------------------------------------------- shape

def _reshaped(g, x):
    return [_float_grad(core.reshape(core.contiguous(g), list(x.shape)), x)]


@rule("reshape", "flatten", "squeeze", "unsqueeze")
def _reshape_like(g, out, needs, x, *rest, **kw):
    return _reshaped(g, x)


@rule("expand")
def _expand(g, out, needs, x, shape):
    return [_float_grad(g, x)]


@rule("transpose")
def _transpose(g, out, needs, x, d0=-2, d1=-1):
    return [_float_grad(core.transpose(g, d0, d1), x)]


@rule("permute")
def _permute(g, out, needs, x, dims):
    dims = [d % x.ndim for d in dims]
    inverse = [0] * len(dims)
    for i, d in enumerate(dims):
        inverse[d] = i
    return [_float_grad(core.permute(g, inverse), x)]


def _scatter_into_zeros(x, place, g):
    """zeros of x's shape with g written into the view `place(zeros)`."""
    z = core.zeros(list(x.shape), g.dtype)
    core.copy_(place(z), g)
    return z


@rule("slice")
def _slice(g, out, needs, x, dim, start=None, stop=None, step=1):
    return [_float_grad(_scatter_into_zeros(x, lambda z: core.slice(z, dim, start, stop, step), g), x)]


@rule("select")
def _select(g, out, needs, x, dim, index):
    return [_float_grad(_scatter_into_zeros(x, lambda z: core.select(z, dim, index), g), x)]


@rule("getitem")
def _getitem(g, out, needs, x, key):
    def place(z):
        return z[key]
    return [_float_grad(_scatter_into_zeros(x, place, g), x), None]


@rule("concat")
def _concat(g, out, needs, tensors, dim=0):
    d = dim % out.ndim
    parts, start = [], 0
    for t in tensors:
        n = t.shape[d]
        parts.append(_float_grad(core.slice(g, d, start, start + n), t) if _t(t) else None)
        start += n
    return [parts, None]


@rule("stack")
def _stack(g, out, needs, tensors, dim=0):
    d = dim % out.ndim
    return [[_float_grad(core.select(g, d, i), t) if _t(t) else None for i, t in enumerate(tensors)], None]


def _scatter_add_rows(ids, g2, rows: int):
    """[rows, D] sums of the rows of g2 [n, D] by their integer ids [n] (np.add.at), in g2's dtype: one
    runtime op whose kernel adds repeated ids in id order (deterministic)."""
    total = core.scatter_add_rows(ids, g2, rows)
    return total if g2.dtype == "f32" else core.astype(total, g2.dtype)


@rule("scatter_add_rows")
def _scatter_add_rows_rule(g, out, needs, ids, src, rows):
    if not needs[1]:
        return [None, None, None]
    return [None, _float_grad(core.embedding(g, ids), src), None]


@rule("embedding")
def _embedding(g, out, needs, table, ids):
    if not needs[0]:
        return [None, None]
    g2 = core.reshape(core.contiguous(g), [-1, table.shape[1]])
    return [_float_grad(_scatter_add_rows(ids, g2, table.shape[0]), table), None]


@rule("index_select")
def _index_select(g, out, needs, x, dim, ids):
    d = dim % x.ndim
    moved = core.contiguous(core.transpose(g, 0, d)) if d else core.contiguous(g)
    rest = list(moved.shape[1:])
    g2 = core.reshape(moved, [moved.shape[0], -1])
    gx = core.reshape(_scatter_add_rows(ids, g2, x.shape[d]), [x.shape[d]] + rest)
    if d:
        gx = core.transpose(gx, 0, d)
    return [_float_grad(core.contiguous(gx), x), None, None]
