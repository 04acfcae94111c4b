"""Math builtins: elementwise arithmetic and functions, reductions, softmax, matmul and linear.

Invariant: every builtin takes tensors, numeric lists (as 1-D tensors) or numbers and hands the work
to `_core` (asynchronous); only `argmax`/`argmin` without a dim read a value back to the host (they
return an int, what sampling code and `shape`-style code expect).
"""
from __future__ import annotations

import math

import numpy as np

from .autograd import tape
from .autograd.rules import RULES
from .convert import BuiltinArgError, Tensor, core, tensor_or_scalar, to_axis, to_bool, to_dim, to_float, to_int, to_tensor
from .registry import builtin

C = "math"


# ---------------------------------------------------------------- scalar arithmetic
# Scalars follow the tensors' IEEE rules: true division always gives a float, a float result that
# is not a real number is NaN (never a Python complex), overflow is ±inf, a float divided by zero is
# ±inf or NaN. Integer division by zero (`/`, `%`, floor_div of two ints) is an error.

def _is_number(v) -> bool:
    return (v.__class__ is int or v.__class__ is float) or (
        isinstance(v, (int, float)) and not isinstance(v, bool))


def scalar_div(a, b):
    """`a / b` of two numbers: always a float."""
    if b == 0 and isinstance(a, int) and isinstance(b, int):
        raise ZeroDivisionError
    with np.errstate(all="ignore"):
        return float(np.float64(a) / np.float64(b))


def scalar_floor_div(a, b):
    """floor(a / b): an int for two ints, else a float."""
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError
        return a // b
    with np.errstate(all="ignore"):
        return float(np.floor_divide(np.float64(a), np.float64(b)))


def scalar_mod(a, b):
    """a - floor_div(a, b) * b: the sign of b, as Python and the tensors' mod."""
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError
        return a % b
    with np.errstate(all="ignore"):
        return float(np.mod(np.float64(a), np.float64(b)))


def scalar_pow(a, b):
    """a ** b: an int for ints with b >= 0, else an IEEE float (NaN, ±inf, never complex)."""
    if isinstance(a, int) and isinstance(b, int) and b >= 0:
        return a ** b
    with np.errstate(all="ignore"):
        return float(np.power(np.float64(a), np.float64(b)))


def _binary(name: str, op):
    @builtin(name, f"{name}(a, b)", f"elementwise {name} with broadcasting", min_args=2, max_args=2, category=C)
    def fn(a, b):
        a, b = tensor_or_scalar(a), tensor_or_scalar(b)
        if not isinstance(a, Tensor) and not isinstance(b, Tensor):
            return _scalar_binary(name, a, b)
        return op(a, b)
    return fn


def _scalar_binary(name, a, b):
    if name == "add":
        return a + b
    if name == "sub":
        return a - b
    if name == "mul":
        return a * b
    if name == "div":
        return scalar_div(a, b)
    if name == "pow":
        return scalar_pow(a, b)
    if name == "maximum":
        return max(a, b)
    if name == "minimum":
        return min(a, b)
    raise BuiltinArgError(f"{name} needs a tensor")


def _lazy_binary(name):
    return _binary(name, lambda a, b: getattr(core, name)(a, b))


for _name in ("add", "sub", "mul", "div", "pow", "maximum", "minimum"):
    _lazy_binary(_name)

def _ieee(fn):
    """A float function with IEEE results (log(0) = -inf, sqrt(-1) = NaN, exp(1000) = inf)."""
    def apply(x):
        with np.errstate(all="ignore"):
            return float(fn(np.float64(x)))
    return apply


def _integral(fn):
    """floor/ceil/round: an int for a finite value (an index), the value itself for inf and NaN."""
    def apply(x):
        return fn(x) if math.isfinite(x) else float(x)
    return apply


_SCALAR_UNARY = {
    "exp": _ieee(np.exp), "log": _ieee(np.log), "sqrt": _ieee(np.sqrt), "sin": _ieee(np.sin),
    "cos": _ieee(np.cos), "tan": _ieee(np.tan), "tanh": _ieee(np.tanh), "abs": abs, "neg": lambda x: -x,
    "floor": _integral(math.floor), "ceil": _integral(math.ceil), "round": _integral(round),
    "square": lambda x: x * x,
    "sigmoid": _ieee(lambda x: 1.0 / (1.0 + np.exp(-x))),
    "relu": lambda x: x if x > 0 else 0.0 * x,
    "rsqrt": _ieee(lambda x: 1.0 / np.sqrt(x)),
}

@builtin("floor_div", "floor_div(a, b)",
         "floor(a / b): ints stay ints (an error for b = 0), tensors elementwise; a % b is a - floor_div(a, b) * b",
         min_args=2, max_args=2, category=C)
def floor_div(a, b):
    a, b = tensor_or_scalar(a), tensor_or_scalar(b)
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        return scalar_floor_div(a, b)
    ta = a if isinstance(a, Tensor) else None
    tb = b if isinstance(b, Tensor) else None
    ints = all(t is None or t.dtype in ("i32", "i64", "i16") for t in (ta, tb)) and not any(
        isinstance(v, float) for v in (a, b))
    if ints:  # exact on the host: f32 division would round integers above 2**24
        na = ta.numpy() if ta is not None else np.int64(a)
        nb = tb.numpy() if tb is not None else np.int64(b)
        if np.any(np.asarray(nb) == 0):
            raise ZeroDivisionError
        result = np.floor_divide(na, nb)
        dtype = "i64" if result.dtype == np.int64 else "i32"
        return core.from_numpy(np.array(result, order="C"), dtype=dtype)
    return core.floor(core.div(a, b))


_UNARY_DOCS = {
    "exp": "e ** x", "log": "natural logarithm", "sqrt": "square root", "rsqrt": "1 / sqrt(x)",
    "sin": "sine", "cos": "cosine", "tan": "tangent", "tanh": "hyperbolic tangent",
    "sigmoid": "1 / (1 + exp(-x))", "relu": "max(x, 0)", "silu": "x * sigmoid(x)", "abs": "absolute value",
    "neg": "-x", "floor": "round down", "ceil": "round up", "round": "round to nearest",
    "square": "x * x",
}


def _unary(name: str):
    scalar = _SCALAR_UNARY.get(name)

    @builtin(name, f"{name}(x)", f"elementwise {_UNARY_DOCS[name]}", min_args=1, max_args=1, category=C)
    def fn(x):
        if scalar is not None and isinstance(x, (int, float)) and not isinstance(x, bool):
            return scalar(x)
        return getattr(core, name)(to_tensor(x, "x"))
    return fn


for _name in _UNARY_DOCS:
    _unary(_name)


@builtin("gelu", "gelu(x, [approximate])", "GELU (tanh approximation unless approximate = \"none\")",
         min_args=1, max_args=2, category=C)
def gelu(x, approximate="tanh"):
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        if approximate == "none":
            return 0.5 * x * (1 + math.erf(x / math.sqrt(2)))
        return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    if approximate not in ("tanh", "none"):
        raise BuiltinArgError('approximate must be "tanh" or "none"')
    return core.gelu(to_tensor(x, "x"), approximate)


@builtin("where", "where(cond, a, b)", "elementwise a where cond is true, else b", min_args=3, max_args=3,
         category=C)
def where(cond, a, b):
    c = to_tensor(cond, "cond")
    if c.dtype != "bool":
        c = core.ne(c, 0)
    return core.where(c, tensor_or_scalar(a), tensor_or_scalar(b))


@builtin("clamp", "clamp(x, lo, hi)", "elementwise min(max(x, lo), hi)", min_args=3, max_args=3, category=C)
def clamp(x, lo, hi):
    if isinstance(x, (int, float)) and isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
        return min(max(x, lo), hi)
    return core.minimum(core.maximum(to_tensor(x, "x"), to_float(lo, "lo")), to_float(hi, "hi"))


def _is_value_operand(a, b) -> bool:
    """`max(a, b)` / `min(a, b)` compares two values (elementwise) unless b is an int dim of tensor a:
    two numbers, a tensor or array on either side with the other not an int, or a float b."""
    def tensorish(v):
        return isinstance(v, (Tensor, list))
    if isinstance(b, bool) or isinstance(a, bool):
        return False
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return True
    if tensorish(b):
        return True
    return isinstance(b, float) or (isinstance(a, (int, float)) and tensorish(b))


def _reduction(name: str, doc: str):
    pairwise = {"max": "maximum", "min": "minimum"}.get(name)
    signature = f"{name}(t, [dim], [keepdim])" if pairwise is None else f"{name}(t, [dim], [keepdim]) | {name}(a, b)"

    @builtin(name, signature, doc, min_args=1, max_args=3, category=C)
    def fn(t, dim=None, keepdim=False):
        if pairwise is not None and dim is not None and keepdim is False and _is_value_operand(t, dim):
            a, b = tensor_or_scalar(t), tensor_or_scalar(dim)
            if not isinstance(a, Tensor) and not isinstance(b, Tensor):
                return _scalar_binary(pairwise, a, b)
            return getattr(core, pairwise)(a, b)
        t = to_tensor(t, "t")
        if dim is None:
            if t.numel == 0 and name in ("max", "min"):
                raise BuiltinArgError(f"{name} of an empty tensor")
            return getattr(core, name)(t)
        return getattr(core, name)(t, to_dim(dim, t.ndim), to_bool(keepdim, "keepdim"))
    return fn


_reduction("sum", "sum of all elements (a 0-d tensor), or along dim")
_reduction("mean", "mean of all elements (a 0-d tensor), or along dim")
_reduction("max", "largest element, or the largest along dim; max(a, b) of two numbers or tensors is "
                  "elementwise (b an int is a dim of tensor a)")
_reduction("min", "smallest element, or the smallest along dim; min(a, b) of two numbers or tensors is "
                  "elementwise (b an int is a dim of tensor a)")


def _floating(t):
    return t if t.dtype in ("f32", "f16", "bf16") else core.astype(t, "f32")


@builtin("prod", "prod(t, [dim], [keepdim])", "product of all elements (a 0-d tensor), or along dim",
         min_args=1, max_args=3, category=C)
def prod(t, dim=None, keepdim=False):
    t = to_tensor(t, "t")  # no product kernel: exact on the host (reductions are not a per-token path)
    arr = t.numpy()
    d = None if dim is None else to_dim(dim, t.ndim)
    keep = to_bool(keepdim, "keepdim")
    out = np.prod(arr) if d is None else np.prod(arr, axis=d, keepdims=keep)
    result = core.from_numpy(np.array(out, dtype=arr.dtype, order="C"))
    if tape.tracking(t):  # the host product is taped with its rule (rules.py)
        tape.record(RULES["prod"], (t, d, keep), {}, result)
    return result


@builtin("cumsum", "cumsum(t, [dim])", "running sums along dim (default the last)", min_args=1, max_args=2,
         category=C)
def cumsum(t, dim=-1):
    t = to_tensor(t, "t")
    if tape.tracking(t):
        return _cumsum_differentiable(t, to_dim(dim, max(t.ndim, 1)) if t.ndim else 0)
    arr = t.numpy()
    if t.ndim == 0:
        return core.from_numpy(arr.copy())
    return core.from_numpy(np.ascontiguousarray(np.cumsum(arr, axis=to_dim(dim, t.ndim), dtype=arr.dtype)))


def _cumsum_differentiable(t, d):
    """cumsum of a tracked tensor as taped device ops: x @ U along dim d, U[j, i] = 1 for j <= i (its
    gradient is then the reversed running sum, from matmul's rule)."""
    if t.ndim == 0:
        return core.mul(t, 1.0)
    n = t.shape[d]
    upper = core.from_numpy(np.triu(np.ones((n, n), dtype=np.float32)))
    if t.dtype != "f32":
        upper = core.astype(upper, t.dtype)
    last = t.ndim - 1
    moved = core.transpose(t, d, last) if d != last else t
    out = core.matmul(moved, upper)
    return core.contiguous(core.transpose(out, d, last)) if d != last else out


def _var(t, dim, keepdim, correction):
    t = _floating(to_tensor(t, "t"))
    c = to_int(correction, "correction")
    if dim is None:
        n = t.numel
        centered = core.sub(t, core.mean(t))
        total = core.sum(core.square(centered))
    else:
        d = to_axis(dim, t.ndim)
        n = t.shape[d]
        centered = core.sub(t, core.mean(t, d, True))
        total = core.sum(core.square(centered), d, to_bool(keepdim, "keepdim"))
    if n - c <= 0:
        raise BuiltinArgError(f"needs more than {c} element{'s' if c != 1 else ''} (correction {c}), got {n}")
    return core.div(total, float(n - c))


@builtin("var", "var(t, [dim], [keepdim], [correction])",
         "variance (mean squared deviation; correction 1 divides by n - 1), of all elements or along dim",
         min_args=1, max_args=4, category=C)
def var(t, dim=None, keepdim=False, correction=0):
    return _var(t, dim, keepdim, correction)


@builtin("std", "std(t, [dim], [keepdim], [correction])", "standard deviation: sqrt(var(...))",
         min_args=1, max_args=4, category=C)
def std(t, dim=None, keepdim=False, correction=0):
    return core.sqrt(_var(t, dim, keepdim, correction))


@builtin("norm", "norm(t, [dim], [keepdim])", "Euclidean (L2) norm of all elements, or along dim",
         min_args=1, max_args=3, category=C)
def norm(t, dim=None, keepdim=False):
    t = _floating(to_tensor(t, "t"))
    if dim is None:
        return core.sqrt(core.sum(core.square(t)))
    return core.sqrt(core.sum(core.square(t), to_dim(dim, t.ndim), to_bool(keepdim, "keepdim")))


def _truth_any_all(name: str, doc: str, reduce: str):
    @builtin(name, f"{name}(t, [dim])", doc, min_args=1, max_args=2, category=C)
    def fn(t, dim=None):
        if isinstance(t, bool):
            return t
        t = to_tensor(t, "t")
        nonzero = core.astype(core.ne(t, 0), "f32")
        if dim is None:
            if t.numel == 0:
                return name == "all"
            return bool(getattr(core, reduce)(nonzero).item() > 0)
        return core.gt(getattr(core, reduce)(nonzero, to_dim(dim, t.ndim)), 0.0)
    return fn


_truth_any_all("any", "whether some element is true (non-zero): a bool, or a bool tensor along dim", "max")
_truth_any_all("all", "whether every element is true (non-zero): a bool, or a bool tensor along dim", "min")


@builtin("sign", "sign(x)", "elementwise -1, 0 or 1 (NaN stays NaN)", min_args=1, max_args=1, category=C)
def sign(x):
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return x if x != x else (x > 0) - (x < 0) if isinstance(x, int) else float((x > 0) - (x < 0))
    t = to_tensor(x, "x")
    positive = core.astype(core.gt(t, 0), t.dtype)
    negative = core.astype(core.lt(t, 0), t.dtype)
    out = core.sub(positive, negative)
    if t.dtype in ("f32", "f16", "bf16"):
        out = core.where(core.ne(t, t), t, out)
    return out


@builtin("isnan", "isnan(x)", "elementwise: is x NaN (a bool, or a bool tensor)", min_args=1, max_args=1,
         category=C)
def isnan(x):
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return x != x
    t = to_tensor(x, "x")
    return core.ne(t, t)


@builtin("isinf", "isinf(x)", "elementwise: is x +inf or -inf (a bool, or a bool tensor)", min_args=1,
         max_args=1, category=C)
def isinf(x):
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return math.isinf(x)
    t = to_tensor(x, "x")
    if t.dtype not in ("f32", "f16", "bf16"):
        return core.ne(t, t)
    return core.eq(core.abs(t), math.inf)


def _arg_reduction(name: str):
    @builtin(name, f"{name}(t, [dim], [keepdim])",
             f"index of the {'largest' if name == 'argmax' else 'smallest'} element (an int), or along dim",
             min_args=1, max_args=3, category=C)
    def fn(t, dim=None, keepdim=False):
        t = to_tensor(t, "t")
        if t.numel == 0:
            raise BuiltinArgError(f"{name} of an empty tensor")
        if dim is None:
            return int(getattr(core, name)(t).item())
        return getattr(core, name)(t, to_dim(dim, t.ndim), to_bool(keepdim, "keepdim"))
    return fn


_arg_reduction("argmax")
_arg_reduction("argmin")


@builtin("softmax", "softmax(x, [dim])", "softmax along dim (default the last)", min_args=1, max_args=2,
         category=C)
def softmax(x, dim=-1):
    t = to_tensor(x, "x")
    return core.softmax(t, to_dim(dim, t.ndim))


@builtin("log_softmax", "log_softmax(x, [dim])", "log of softmax along dim (default the last)",
         min_args=1, max_args=2, category=C)
def log_softmax(x, dim=-1):
    t = to_tensor(x, "x")
    return core.log_softmax(t, to_dim(dim, t.ndim))


@builtin("matmul", "matmul(a, b)", "matrix product (batched over leading dims, NumPy rules)", min_args=2,
         max_args=2, category=C)
def matmul(a, b):
    return core.matmul(to_tensor(a, "a"), to_tensor(b, "b"))


@builtin("linear", "linear(x, W, [b])",
         "x @ W^T (+ b) with W as [out, in] (GGUF order; may be quantized); a b of the output's shape "
         "(a residual) or [out] is added inside the kernel",
         min_args=2, max_args=3, category=C)
def linear(x, w, b=None):
    if x.__class__ is Tensor and w.__class__ is Tensor and (b is None or b.__class__ is Tensor):
        return core.linear(x, w, b)  # the runtime checks shapes and names both in its error
    return core.linear(to_tensor(x, "x"), to_tensor(w, "W"), to_tensor(b, "b") if b is not None else None)


@builtin("dot", "dot(a, b)", "sum of a * b (a 0-d tensor)", min_args=2, max_args=2, category=C)
def dot(a, b):
    return core.sum(core.mul(to_tensor(a, "a"), to_tensor(b, "b")))


@builtin("step", "step(x)", "elementwise 1 where x > 0, else 0", min_args=1, max_args=1, category=C)
def step(x):
    if isinstance(x, (int, float)):
        return 1.0 if x > 0 else 0.0
    return core.step(to_tensor(x, "x"))
