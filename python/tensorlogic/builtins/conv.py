"""Convolution, pooling and batch normalization under PyTorch's names (torch.nn.functional): conv2d,
max_pool2d, avg_pool2d, batch_norm, in NCHW layout.

Invariant: shapes are checked here with one-line errors naming the builtin; the forwards and backward
rules are autograd/conv_rules.py's (compositions of runtime ops, so they run on every backend);
conv2d and the pools are taped as one node each (one rule), batch_norm is a composition of
differentiable ops. batch_norm uses batch statistics and updates the running ones in place only while
training (inside a learn block, outside `eval { }`), as a module in train() mode does; otherwise it
normalizes with the running statistics (eval() mode).
"""
from __future__ import annotations

from .autograd import tape
from .autograd.conv_rules import RULES, avg_pool2d_forward, conv2d_forward, max_pool2d_forward, out_size
from .convert import BuiltinArgError, Tensor, core, to_float, to_int, to_tensor
from .registry import REQUIRED, bind_keywords, builtin

C = "nn"


def _bind(params, args):
    try:
        return bind_keywords(params, args)
    except ValueError as e:
        raise BuiltinArgError(str(e)) from None


def _float(v, what):
    t = to_tensor(v, what)
    if t.dtype not in ("f32", "f16", "bf16"):
        t = core.astype(t, "f32")
    return t


def _size(v, what, minimum):
    if isinstance(v, list):
        if len(v) != 2 or v[0] != v[1]:
            raise BuiltinArgError(f"{what} must be one int (the same for height and width), got {v}")
        v = v[0]
    n = to_int(v, what)
    if n < minimum:
        raise BuiltinArgError(f"{what} must be >= {minimum}, got {n}")
    return n


def _nchw(x, name):
    """x as [N, C, H, W] and whether it was unbatched [C, H, W]."""
    if x.ndim == 3:
        return core.unsqueeze(x, 0), True
    if x.ndim != 4:
        raise BuiltinArgError(f"{name}: input must be [N, C, H, W] (or [C, H, W]), got {list(x.shape)}")
    return x, False


def _taped(name, forward_out, args):
    """Record forward_out as one node of rule `name` when an input is tracked."""
    if tape.tracking(*[a for a in args if a is not None and not isinstance(a, (int, float))]):
        tape.record(RULES[name], args, {}, forward_out)
    return forward_out


@builtin("conv2d", "conv2d(input, weight, [bias], [stride], [padding])",
         "2-D convolution (cross-correlation, as PyTorch's): input [N, C, H, W], weight [O, C, kh, kw], bias [O]",
         min_args=2, max_args=5, category=C)
def conv2d(*args):
    a = _bind([("input", REQUIRED), ("weight", REQUIRED), ("bias", None), ("stride", 1), ("padding", 0)], args)
    x, unbatched = _nchw(_float(a["input"], "input"), "conv2d")
    w = _float(a["weight"], "weight")
    b = _float(a["bias"], "bias") if a["bias"] is not None else None
    stride, padding = _size(a["stride"], "stride", 1), _size(a["padding"], "padding", 0)
    if w.ndim != 4 or w.shape[1] != x.shape[1]:
        raise BuiltinArgError(f"conv2d: weight {list(w.shape)} must be [O, C, kh, kw] with C = {x.shape[1]} "
                              f"(input {list(x.shape)})")
    if b is not None and tuple(b.shape) != (w.shape[0],):
        raise BuiltinArgError(f"conv2d: bias {list(b.shape)} must be [{w.shape[0]}]")
    for d, k in ((2, w.shape[2]), (3, w.shape[3])):
        if out_size(x.shape[d], k, stride, padding) < 1:
            raise BuiltinArgError(f"conv2d: a {w.shape[2]}x{w.shape[3]} kernel does not fit input {list(x.shape)} "
                                  f"with padding {padding}")
    with tape.no_recording():
        out, saved = conv2d_forward(x, w, b, stride, padding)
    out = _taped("conv2d", out, (x, w, b, stride, padding, saved))
    return core.squeeze(out, 0) if unbatched else out


def _pool_args(args, name):
    a = _bind([("input", REQUIRED), ("kernel_size", REQUIRED), ("stride", None), ("padding", 0)], args)
    x, unbatched = _nchw(_float(a["input"], "input"), name)
    k = _size(a["kernel_size"], "kernel_size", 1)
    stride = _size(a["stride"], "stride", 1) if a["stride"] is not None else k
    padding = _size(a["padding"], "padding", 0)
    if padding * 2 > k:
        raise BuiltinArgError(f"{name}: padding {padding} must be at most half of kernel_size {k}")
    if min(out_size(x.shape[2], k, stride, padding), out_size(x.shape[3], k, stride, padding)) < 1:
        raise BuiltinArgError(f"{name}: a {k}x{k} window does not fit input {list(x.shape)}")
    return x, unbatched, k, stride, padding


@builtin("max_pool2d", "max_pool2d(input, kernel_size, [stride], [padding])",
         "maximum over k x k windows (stride defaults to kernel_size); the gradient goes to each window's "
         "first maximum", min_args=2, max_args=4, category=C)
def max_pool2d(*args):
    x, unbatched, k, stride, padding = _pool_args(args, "max_pool2d")
    need_arg = tape.tracking(x)  # the argmax only feeds the gradient
    with tape.no_recording():
        out, arg = max_pool2d_forward(x, k, stride, padding, need_arg)
    out = _taped("max_pool2d", out, (x, k, stride, padding, arg))
    return core.squeeze(out, 0) if unbatched else out


@builtin("avg_pool2d", "avg_pool2d(input, kernel_size, [stride], [padding])",
         "mean over k x k windows (stride defaults to kernel_size; padding counts as zeros)",
         min_args=2, max_args=4, category=C)
def avg_pool2d(*args):
    x, unbatched, k, stride, padding = _pool_args(args, "avg_pool2d")
    with tape.no_recording():
        out = avg_pool2d_forward(x, k, stride, padding)
    out = _taped("avg_pool2d", out, (x, k, stride, padding))
    return core.squeeze(out, 0) if unbatched else out


@builtin("batch_norm", "batch_norm(input, running_mean, running_var, [weight], [bias], [momentum], [eps])",
         "normalize over the batch (and H, W) per channel (dim 1); while training the batch statistics are "
         "used and the running ones updated in place, else the running ones (PyTorch's momentum 0.1, eps 1e-5)",
         min_args=3, max_args=7, category=C)
def batch_norm(*args):
    a = _bind([("input", REQUIRED), ("running_mean", REQUIRED), ("running_var", REQUIRED), ("weight", None),
               ("bias", None), ("momentum", 0.1), ("eps", 1e-5)], args)
    x = _float(a["input"], "input")
    if x.ndim not in (2, 3, 4):
        raise BuiltinArgError(f"batch_norm: input must be [N, C], [N, C, L] or [N, C, H, W], got {list(x.shape)}")
    ch = x.shape[1]
    rm, rv = a["running_mean"], a["running_var"]
    for name, t in (("running_mean", rm), ("running_var", rv)):
        if not isinstance(t, Tensor) or tuple(t.shape) != (ch,) or t.dtype != "f32":
            raise BuiltinArgError(f"batch_norm: {name} must be an f32 tensor [{ch}] (it is updated in place)")
        if tape.tracking(t):
            raise BuiltinArgError(f"batch_norm: {name} must not be learnable (it is a statistic, not a parameter)")
    momentum, eps = to_float(a["momentum"], "momentum"), to_float(a["eps"], "eps")
    shape = [1, ch] + [1] * (x.ndim - 2)
    dims = [0] + list(range(2, x.ndim))
    if tape.training():
        mean = x
        for d in reversed(dims):
            mean = core.mean(mean, d, True)
        centered = core.sub(x, mean)
        var = core.mul(centered, centered)
        for d in reversed(dims):
            var = core.mean(var, d, True)
        count = x.numel // ch
        with tape.no_recording():  # the running statistics: var unbiased, as PyTorch keeps it
            m = core.reshape(mean, [ch])
            v = core.mul(core.reshape(var, [ch]), count / max(count - 1, 1))
            core.copy_(rm, core.add(core.mul(rm, 1.0 - momentum), core.mul(m, momentum)))
            core.copy_(rv, core.add(core.mul(rv, 1.0 - momentum), core.mul(v, momentum)))
        y = core.mul(centered, core.rsqrt(core.add(var, eps)))
    else:
        y = core.mul(core.sub(x, core.reshape(rm, shape)), core.reshape(core.rsqrt(core.add(rv, eps)), shape))
    if a["weight"] is not None:
        y = core.mul(y, core.reshape(_float(a["weight"], "weight"), shape))
    if a["bias"] is not None:
        y = core.add(y, core.reshape(_float(a["bias"], "bias"), shape))
    return y
