"""Loss functions and activations under their PyTorch names and definitions (torch.nn.functional).

Invariant: each is a composition of traced `_core` ops (so its gradient is the composition's, checked
against float64 finite differences in tests/learning/test_losses.py), except `softplus`, whose
forward is a stable formula of raw ops taped with one rule of its own (autograd/loss_rules.py) so the
gradient is exactly sigmoid(beta x), also at x = 0 where the stable formula's pieces have kinks.
Arguments follow PyTorch's order and names; `reduction` is "mean" (default), "sum" or "none".
Integer class targets are compared with the class index on the device (a one-hot mask): no host
round trip, and an `ignore_index` target contributes nothing (mean divides by the count of the others).
"""
from __future__ import annotations

from .autograd import tape
from .autograd.loss_rules import RULES, softplus_forward
from .autograd.optimizers import clip_grad_value
from .convert import BuiltinArgError, core, to_float, to_int, to_str, to_tensor
from .registry import REQUIRED, bind_keywords, builtin

C = "learning"
_REDUCTIONS = ("mean", "sum", "none")
_INT_DTYPES = ("i32", "i64", "u8", "i8", "i16", "u32", "u64")


def _bind(params, args):
    try:
        return bind_keywords(params, args)
    except ValueError as e:
        raise BuiltinArgError(str(e)) from None


def _reduction(v) -> str:
    r = to_str(v, "reduction")
    if r not in _REDUCTIONS:
        raise BuiltinArgError(f"reduction must be \"mean\", \"sum\" or \"none\", got \"{r}\"")
    return r


def _float(x, what):
    t = to_tensor(x, what)
    if t.dtype not in ("f32", "f16", "bf16"):
        t = core.astype(t, "f32")
    return t


def _reduce(loss, reduction: str):
    if reduction == "mean":
        return core.mean(loss)
    if reduction == "sum":
        return core.sum(loss)
    return loss


def _same_shape(a, b, what_a, what_b):
    if tuple(a.shape) != tuple(b.shape):
        raise BuiltinArgError(f"{what_a} {list(a.shape)} and {what_b} {list(b.shape)} must have the same shape")


# ---------------------------------------------------------------- activations

@builtin("softplus", "softplus(x, [beta], [threshold])",
         "log(1 + exp(beta x)) / beta, x itself where beta x > threshold (PyTorch's defaults 1 and 20)",
         min_args=1, max_args=3, category=C)
def softplus(*args):
    a = _bind([("x", REQUIRED), ("beta", 1.0), ("threshold", 20.0)], args)
    x = _float(a["x"], "x")
    beta, threshold = to_float(a["beta"], "beta"), to_float(a["threshold"], "threshold")
    if not beta > 0:
        raise BuiltinArgError(f"beta must be positive, got {beta}")
    return softplus_t(x, beta, threshold)


def softplus_t(x, beta: float = 1.0, threshold: float = 20.0):
    """softplus of a float tensor, taped with its own rule when x is tracked."""
    with tape.no_recording():
        out = softplus_forward(x, beta, threshold)
    if tape.tracking(x):
        tape.record(RULES["softplus"], (x, beta, threshold), {}, out)
    return out


@builtin("leaky_relu", "leaky_relu(x, [negative_slope])", "x where x > 0, else negative_slope * x (0.01)",
         min_args=1, max_args=2, category=C)
def leaky_relu(*args):
    a = _bind([("x", REQUIRED), ("negative_slope", 0.01)], args)
    x = _float(a["x"], "x")
    slope = to_float(a["negative_slope"], "negative_slope")
    # where(x > 0, ...) gives x = 0 the slope's gradient, as PyTorch's leaky_relu_backward does
    return core.where(core.gt(x, 0.0), x, core.mul(x, slope))


@builtin("logsumexp", "logsumexp(x, [dim], [keepdim])",
         "log(sum(exp(x))) over dim (all elements if dim is omitted), computed without overflow",
         min_args=1, max_args=3, category=C)
def logsumexp(*args):
    a = _bind([("x", REQUIRED), ("dim", None), ("keepdim", False)], args)
    x = _float(a["x"], "x")
    keep = bool(a["keepdim"])
    if a["dim"] is None:
        return _logsumexp(core.reshape(x, [-1]), 0, False) if not keep else \
            core.reshape(_logsumexp(core.reshape(x, [-1]), 0, False), [1] * x.ndim)
    d = to_int(a["dim"], "dim")
    if not -max(x.ndim, 1) <= d < max(x.ndim, 1):
        raise BuiltinArgError(f"dim {d} is out of range for a tensor of rank {x.ndim}")
    return _logsumexp(x, d % max(x.ndim, 1), keep)


def _logsumexp(x, dim: int, keepdim: bool):
    # the shift m is a constant (detached): the gradient of log(sum(exp(x - m))) + m is softmax(x)
    # exactly, with no share of it sent through max's tie rule. An all -inf row keeps m finite.
    with tape.no_recording():
        m = core.max(x, dim, True)
        m = core.where(core.eq(core.abs(m), float("inf")), core.zeros([], x.dtype), m)
    out = core.add(core.log(core.sum(core.exp(core.sub(x, m)), dim, True)), m)
    return out if keepdim else core.squeeze(out, dim)


# ---------------------------------------------------------------- losses

@builtin("mse_loss", "mse_loss(input, target, [reduction])", "(input - target)^2, reduced (mean by default)",
         min_args=2, max_args=3, category=C)
def mse_loss(*args):
    a = _bind([("input", REQUIRED), ("target", REQUIRED), ("reduction", "mean")], args)
    x, y = _float(a["input"], "input"), _float(a["target"], "target")
    _same_shape(x, y, "input", "target")
    d = core.sub(x, y)
    return _reduce(core.mul(d, d), _reduction(a["reduction"]))


@builtin("l1_loss", "l1_loss(input, target, [reduction])", "|input - target|, reduced (mean by default)",
         min_args=2, max_args=3, category=C)
def l1_loss(*args):
    a = _bind([("input", REQUIRED), ("target", REQUIRED), ("reduction", "mean")], args)
    x, y = _float(a["input"], "input"), _float(a["target"], "target")
    _same_shape(x, y, "input", "target")
    return _reduce(core.abs(core.sub(x, y)), _reduction(a["reduction"]))


@builtin("binary_cross_entropy_with_logits",
         "binary_cross_entropy_with_logits(input, target, [reduction], [pos_weight])",
         "-(pos_weight y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))), stable for large |x|",
         min_args=2, max_args=4, category=C)
def binary_cross_entropy_with_logits(*args):
    a = _bind([("input", REQUIRED), ("target", REQUIRED), ("reduction", "mean"), ("pos_weight", None)], args)
    x, y = _float(a["input"], "input"), _float(a["target"], "target")
    _same_shape(x, y, "input", "target")
    # PyTorch's form: (1 - y) x + (1 + (pw - 1) y) softplus(-x); softplus(-x) = -log sigmoid(x)
    sp = softplus_t(core.neg(x))
    if a["pos_weight"] is not None:
        pw = _float(a["pos_weight"], "pos_weight")
        sp = core.mul(sp, core.add(core.mul(core.sub(pw, 1.0), y), 1.0))
    loss = core.add(core.mul(core.sub(1.0, y), x), sp)
    return _reduce(loss, _reduction(a["reduction"]))


def _class_targets(target, logp):
    """(one-hot float mask [N, C], valid-row float mask [N]) of integer class targets."""
    n_classes = logp.shape[-1]
    t = target if target.dtype in ("i32", "i64") else core.astype(target, "i64")
    classes = core.arange(0, n_classes)
    hot = core.astype(core.eq(core.unsqueeze(t, -1), classes), logp.dtype)
    return hot, t


def _nll(logp, target, weight, reduction: str, ignore_index: int, what: str):
    """PyTorch's nll_loss of log-probabilities [N, C] (or [C]) and integer targets [N] (or 0-d)."""
    target = to_tensor(target, "target", float_default=False)
    if target.dtype not in _INT_DTYPES:
        raise BuiltinArgError(f"{what}: integer class targets are needed here, got {target.dtype}")
    if tuple(target.shape) != tuple(logp.shape[:-1]):
        raise BuiltinArgError(f"{what}: target {list(target.shape)} must have the input's batch shape "
                              f"{list(logp.shape[:-1])} (input is [N, C], target [N])")
    hot, t = _class_targets(target, logp)
    valid = core.astype(core.ne(t, ignore_index), logp.dtype)
    w_rows = valid
    if weight is not None:  # w[target] of each row (0 for ignored rows)
        w_rows = core.mul(core.sum(core.mul(hot, weight), -1), valid)
    picked = core.sum(core.mul(logp, hot), -1)
    loss = core.neg(core.mul(picked, w_rows))
    if reduction == "mean":
        return core.div(core.sum(loss), core.sum(w_rows)), w_rows, valid
    return _reduce(loss, reduction), w_rows, valid


def _check_input(x, what):
    if x.ndim not in (1, 2):
        raise BuiltinArgError(f"{what}: input must be [N, C] (or [C]), got {list(x.shape)}; reshape the "
                              f"class dimension last and the rest into N")


def _weight(v, n_classes):
    if v is None:
        return None
    w = _float(v, "weight")
    if tuple(w.shape) != (n_classes,):
        raise BuiltinArgError(f"weight {list(w.shape)} must be [C] with C = {n_classes} classes")
    return w


@builtin("nll_loss", "nll_loss(input, target, [weight], [ignore_index], [reduction])",
         "negative log-likelihood of log-probabilities input [N, C] at integer targets [N]; mean divides by "
         "the summed weights of the targets not equal to ignore_index (-100)", min_args=2, max_args=5, category=C)
def nll_loss(*args):
    a = _bind([("input", REQUIRED), ("target", REQUIRED), ("weight", None), ("ignore_index", -100),
               ("reduction", "mean")], args)
    logp = _float(a["input"], "input")
    _check_input(logp, "nll_loss")
    loss, _w, _v = _nll(logp, a["target"], _weight(a["weight"], logp.shape[-1]), _reduction(a["reduction"]),
                        to_int(a["ignore_index"], "ignore_index"), "nll_loss")
    return loss


@builtin("cross_entropy",
         "cross_entropy(input, target, [weight], [ignore_index], [reduction], [label_smoothing])",
         "log_softmax then nll_loss (integer targets [N]), or -sum(target log_softmax(input)) for class "
         "probabilities of the input's shape; label_smoothing mixes in the uniform distribution",
         min_args=2, max_args=6, category=C)
def cross_entropy(*args):
    a = _bind([("input", REQUIRED), ("target", REQUIRED), ("weight", None), ("ignore_index", -100),
               ("reduction", "mean"), ("label_smoothing", 0.0)], args)
    x = _float(a["input"], "input")
    _check_input(x, "cross_entropy")
    reduction = _reduction(a["reduction"])
    eps = to_float(a["label_smoothing"], "label_smoothing")
    if not 0.0 <= eps <= 1.0:
        raise BuiltinArgError(f"label_smoothing must be in [0, 1], got {eps}")
    n_classes = x.shape[-1]
    weight = _weight(a["weight"], n_classes)
    logp = core.log_softmax(x, -1)
    target = to_tensor(a["target"], "target", float_default=False)
    if target.dtype not in _INT_DTYPES:  # class probabilities (PyTorch: a float target of the input's shape)
        _same_shape(x, target, "input", "target (class probabilities)")
        y = _float(target, "target")
        if eps:
            y = core.add(core.mul(y, 1.0 - eps), eps / n_classes)
        terms = core.mul(logp, y) if weight is None else core.mul(core.mul(logp, y), weight)
        return _reduce(core.neg(core.sum(terms, -1)), reduction)  # mean: over the N rows
    ignore = to_int(a["ignore_index"], "ignore_index")
    nll, w_rows, valid = _nll(logp, target, weight, reduction, ignore, "cross_entropy")
    if not eps:
        return nll
    # PyTorch's label smoothing: (1 - eps) nll + eps / C * smooth, smooth = -sum_c w_c logp_c (ignored
    # rows zero), the mean divided by the same summed target weights as the nll
    smooth = core.sum(logp if weight is None else core.mul(logp, weight), -1)
    smooth = core.neg(core.mul(smooth, valid))
    if reduction == "mean":
        smooth = core.div(core.sum(smooth), core.sum(w_rows))
    else:
        smooth = _reduce(smooth, reduction)
    return core.add(core.mul(nll, 1.0 - eps), core.mul(smooth, eps / n_classes))


@builtin("clip_grad_value", "clip_grad_value(clip_value)",
         "clamp every learnable's gradient elementwise to [-clip_value, clip_value]",
         min_args=1, max_args=1, category=C)
def clip_grad_value_builtin(clip_value):
    c = to_float(clip_value, "clip_value")
    if not c > 0:
        raise BuiltinArgError(f"clip_value must be positive, got {c}")
    clip_grad_value(tape.live_params(), c)
    return None

