"""Math builtins: elementwise arithmetic and functions, reductions, softmax, matmul and linear.

Invariant: every builtin takes tensors, numeric lists (as 1-D tensors) or numbers and hands the work
to `_core` (asynchronous); only `argmax`/`argmin` without a dim read a value back to the host (they
return an int, what sampling code and `shape`-style code expect).
"""
from __future__ import annotations

import math

from .convert import BuiltinArgError, Tensor, core, tensor_or_scalar, to_bool, to_dim, to_float, to_tensor
from .registry import builtin

C = "math"


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
        if b == 0:
            raise BuiltinArgError("division by zero")
        return a / b
    if name == "pow":
        return a ** b
    if name == "maximum":
        return max(a, b)
    if name == "minimum":
        return min(a, b)
    raise BuiltinArgError(f"{name} needs a tensor")


def _lazy_binary(name):
    return _binary(name, lambda a, b: getattr(core, name)(a, b))


for _name in ("add", "sub", "mul", "div", "pow", "maximum", "minimum"):
    _lazy_binary(_name)

_SCALAR_UNARY = {
    "exp": math.exp, "log": math.log, "sqrt": math.sqrt, "sin": math.sin, "cos": math.cos, "tan": math.tan,
    "tanh": math.tanh, "abs": abs, "neg": lambda x: -x, "floor": math.floor, "ceil": math.ceil,
    "round": round, "square": lambda x: x * x,
    "sigmoid": lambda x: 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0,
    "relu": lambda x: x if x > 0 else 0.0 * x,
    "rsqrt": lambda x: 1.0 / math.sqrt(x),
}

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
            try:
                return scalar(x)
            except (ValueError, OverflowError):
                return math.nan if name in ("log", "sqrt", "rsqrt") else math.inf
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
    if isinstance(x, (int, float)):
        return min(max(x, lo), hi)
    return core.minimum(core.maximum(to_tensor(x, "x"), to_float(lo, "lo")), to_float(hi, "hi"))


def _reduction(name: str, doc: str):
    @builtin(name, f"{name}(t, [dim], [keepdim])", doc, min_args=1, max_args=3, category=C)
    def fn(t, dim=None, keepdim=False):
        t = to_tensor(t, "t")
        if dim is None:
            if t.numel == 0 and name in ("max", "min"):
                raise BuiltinArgError(f"{name} of an empty tensor")
            return getattr(core, name)(t)
        return getattr(core, name)(t, to_dim(dim, t.ndim), to_bool(keepdim, "keepdim"))
    return fn


_reduction("sum", "sum of all elements (a 0-d tensor), or along dim")
_reduction("mean", "mean of all elements (a 0-d tensor), or along dim")
_reduction("max", "largest element, or the largest along dim")
_reduction("min", "smallest element, or the smallest along dim")


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
