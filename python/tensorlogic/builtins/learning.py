"""Learning builtins: learnable tensors, gradients, dropout, optimizers and learning-rate schedules.

Invariant: these only translate TL values; the tape, the rules and the optimizer updates live in
`builtins/autograd/`. Inside a `learn` block `backward(loss)` is a whole training step; outside it
only accumulates gradients (`grad(W)` reads them, `zero_grad()` clears them).
"""
from __future__ import annotations

from . import learn_progress
from .autograd import session as learn_session
from .autograd import tape
from .autograd.optimizers import (SGD, Adagrad, Adam, AdamW, LRScheduler, OneCycleLR, Optimizer, ParamGroup,
                                  ReduceLROnPlateau, RMSprop, clip_grad_norm)
from .autograd.session import LearnSession
from .autograd.tape import AutogradError
from .convert import BuiltinArgError, Tensor, core, to_bool, to_float, to_int, to_tensor, type_name
from .registry import REQUIRED, bind_keywords, builtin

C = "learning"


def make_learnable(value, what: str = "value"):
    """A fresh float tensor registered as learnable (a copy, so no other binding aliases it)."""
    t = to_tensor(value, what)
    if t.dtype not in ("f32", "f16", "bf16"):
        t = core.astype(t, "f32")
    with tape.no_recording():
        fresh = core.add(t, 0.0)
    tape.mark_learnable(fresh)
    return fresh


def _bind(params, args):
    try:
        return bind_keywords(params, args)
    except ValueError as e:
        raise BuiltinArgError(str(e)) from None


@builtin("learnable", "learnable(t)", "a copy of t whose gradients are tracked (a parameter learn blocks train)",
         min_args=1, max_args=1, category=C)
def learnable(t):
    return make_learnable(t, "t")


@builtin("backward", "backward(loss)",
         "gradients of loss for every learnable; inside learn {} also one optimizer step", min_args=1,
         max_args=1, category=C)
def backward(loss):
    if not isinstance(loss, Tensor):
        raise BuiltinArgError(f"loss must be a tensor computed from learnable tensors, got {type_name(loss)}")
    session = learn_session.current()
    try:
        if session is not None:
            session.step(loss)
        else:
            tape.backward(loss)
    except AutogradError as e:
        raise BuiltinArgError(str(e)) from None
    return None


@builtin("grad", "grad(W)", "the gradient accumulated for learnable W (zeros if none)", min_args=1, max_args=1,
         category=C)
def grad(w):
    if not isinstance(w, Tensor):
        raise BuiltinArgError(f"W must be a learnable tensor, got {type_name(w)}")
    try:
        return tape.grad_of(w)
    except AutogradError as e:
        raise BuiltinArgError(str(e)) from None


@builtin("zero_grad", "zero_grad([W])", "clear the gradients of W, or of every learnable", min_args=0, max_args=1,
         category=C)
def zero_grad(w=None):
    if w is None:
        tape.zero_grad()
        return None
    param = tape.param_of(w) if isinstance(w, Tensor) else None
    if param is None:
        raise BuiltinArgError(f"W must be a learnable tensor, got {type_name(w)}")
    param.grad = None
    return None


@builtin("detach", "detach(x)", "x's values with no gradient flowing back through them", min_args=1, max_args=1,
         category=C)
def detach(x):
    if isinstance(x, Tensor):
        return tape.detach(x)
    return x


@builtin("is_learnable", "is_learnable(x)", "true if x is a learnable tensor", min_args=1, max_args=1, category=C)
def is_learnable(x):
    return isinstance(x, Tensor) and tape.param_of(x) is not None


@builtin("dropout", "dropout(x, p)",
         "inside learn {}: zero each element with probability p and scale the rest by 1/(1-p); else x",
         min_args=2, max_args=2, needs_ctx=True, category=C)
def dropout(ctx, x, p):
    rate = to_float(p, "p")
    if not 0 <= rate < 1:
        raise BuiltinArgError(f"p must be in [0, 1), got {rate}")
    t = to_tensor(x, "x")
    if not tape.training() or rate == 0:
        return t
    seed = int(ctx.rng.integers(0, 2 ** 62))  # the run's generator: `tl run --seed N` repeats the masks
    keep = core.astype(core.ge(core.rand(list(t.shape), seed), rate), t.dtype)
    return core.mul(t, core.mul(keep, 1.0 / (1.0 - rate)))


# ---------------------------------------------------------------- optimizers

def _positive(v, what):
    f = to_float(v, what)
    if not f > 0:
        raise BuiltinArgError(f"{what} must be positive, got {f}")
    return f


def _nonneg(v, what):
    f = to_float(v, what)
    if f < 0:
        raise BuiltinArgError(f"{what} must be >= 0, got {f}")
    return f


def _make(cls, **kw):
    try:
        return cls(**kw)
    except AutogradError as e:
        raise BuiltinArgError(str(e)) from None


def _with_groups(opt, groups):
    """opt with its parameter groups (a list of param_group(...)), or opt unchanged for none."""
    if groups is None:
        return opt
    if isinstance(groups, ParamGroup):
        groups = [groups]
    if not isinstance(groups, list) or not all(isinstance(g, ParamGroup) for g in groups):
        raise BuiltinArgError(f"groups must be a list of param_group(...), got {type_name(groups)}")
    try:
        opt.set_groups(groups)
    except AutogradError as e:
        raise BuiltinArgError(str(e)) from None
    return opt


@builtin("sgd", "sgd(lr, [momentum], [nesterov], [weight_decay], [dampening], [groups])",
         "stochastic gradient descent; arguments by position or name (sgd(lr = 0.1, momentum = 0.9))",
         min_args=1, max_args=6, category=C)
def sgd(*args):
    a = _bind([("lr", REQUIRED), ("momentum", 0.0), ("nesterov", False), ("weight_decay", 0.0), ("dampening", 0.0),
               ("groups", None)], args)
    opt = _make(SGD, lr=_positive(a["lr"], "lr"), momentum=_nonneg(a["momentum"], "momentum"),
                nesterov=to_bool(a["nesterov"], "nesterov"), weight_decay=_nonneg(a["weight_decay"], "weight_decay"),
                dampening=_nonneg(a["dampening"], "dampening"))
    return _with_groups(opt, a["groups"])


def _adam_args(args, default_wd):
    a = _bind([("lr", 0.001), ("beta1", 0.9), ("beta2", 0.999), ("eps", 1e-8), ("weight_decay", default_wd),
               ("amsgrad", False), ("groups", None)], args)
    return dict(lr=_positive(a["lr"], "lr"), beta1=to_float(a["beta1"], "beta1"), beta2=to_float(a["beta2"], "beta2"),
                eps=_positive(a["eps"], "eps"), weight_decay=_nonneg(a["weight_decay"], "weight_decay"),
                amsgrad=to_bool(a["amsgrad"], "amsgrad")), a["groups"]


@builtin("adam", "adam([lr], [beta1], [beta2], [eps], [weight_decay], [amsgrad], [groups])",
         "Adam (L2 weight decay added to the gradient); defaults lr 0.001, betas 0.9/0.999, eps 1e-8",
         min_args=0, max_args=7, category=C)
def adam(*args):
    kw, groups = _adam_args(args, 0.0)
    return _with_groups(_make(Adam, **kw), groups)


@builtin("adamw", "adamw([lr], [beta1], [beta2], [eps], [weight_decay], [amsgrad], [groups])",
         "AdamW (decoupled weight decay, default 0.01); other defaults as adam", min_args=0, max_args=7, category=C)
def adamw(*args):
    kw, groups = _adam_args(args, 0.01)
    return _with_groups(_make(AdamW, **kw), groups)


@builtin("rmsprop", "rmsprop([lr], [alpha], [eps], [weight_decay], [momentum], [centered], [groups])",
         "RMSprop as PyTorch's (defaults lr 0.01, alpha 0.99, eps 1e-8)", min_args=0, max_args=7, category=C)
def rmsprop(*args):
    a = _bind([("lr", 0.01), ("alpha", 0.99), ("eps", 1e-8), ("weight_decay", 0.0), ("momentum", 0.0),
               ("centered", False), ("groups", None)], args)
    opt = _make(RMSprop, lr=_positive(a["lr"], "lr"), alpha=to_float(a["alpha"], "alpha"), eps=_positive(a["eps"], "eps"),
                weight_decay=_nonneg(a["weight_decay"], "weight_decay"), momentum=_nonneg(a["momentum"], "momentum"),
                centered=to_bool(a["centered"], "centered"))
    return _with_groups(opt, a["groups"])


@builtin("adagrad", "adagrad([lr], [lr_decay], [weight_decay], [initial_accumulator_value], [eps], [groups])",
         "Adagrad as PyTorch's (defaults lr 0.01, eps 1e-10)", min_args=0, max_args=6, category=C)
def adagrad(*args):
    a = _bind([("lr", 0.01), ("lr_decay", 0.0), ("weight_decay", 0.0), ("initial_accumulator_value", 0.0),
               ("eps", 1e-10), ("groups", None)], args)
    opt = _make(Adagrad, lr=_positive(a["lr"], "lr"), lr_decay=_nonneg(a["lr_decay"], "lr_decay"),
                weight_decay=_nonneg(a["weight_decay"], "weight_decay"),
                initial_accumulator_value=_nonneg(a["initial_accumulator_value"], "initial_accumulator_value"),
                eps=_positive(a["eps"], "eps"))
    return _with_groups(opt, a["groups"])


@builtin("param_group", "param_group(params, [lr], [weight_decay])",
         "learnables trained with their own rate / weight decay: pass a list of these as an optimizer's groups",
         min_args=1, max_args=3, category=C)
def param_group(*args):
    a = _bind([("params", REQUIRED), ("lr", None), ("weight_decay", None)], args)
    tensors = a["params"] if isinstance(a["params"], list) else [a["params"]]
    params = []
    for t in tensors:
        p = tape.param_of(t) if isinstance(t, Tensor) else None
        if p is None:
            raise BuiltinArgError(f"params must be learnable tensors, got {type_name(t)}")
        params.append(p)
    lr = _positive(a["lr"], "lr") if a["lr"] is not None else None
    wd = _nonneg(a["weight_decay"], "weight_decay") if a["weight_decay"] is not None else None
    return ParamGroup(params, lr, wd)


@builtin("set_lr", "set_lr(optimizer, lr)", "change the optimizer's learning rate (a schedule restarts from it)",
         min_args=2, max_args=2, category=C)
def set_lr(opt, lr):
    if not isinstance(opt, Optimizer):
        raise BuiltinArgError(f"optimizer must be an optimizer (sgd/adam/adamw/rmsprop/adagrad), got {type_name(opt)}")
    opt.lr = opt.base_lr = _positive(lr, "lr")  # the default group's rate; param_group rates keep theirs
    return None


@builtin("get_lr", "get_lr(optimizer)", "the optimizer's current learning rate", min_args=1, max_args=1, category=C)
def get_lr(opt):
    if not isinstance(opt, Optimizer):
        raise BuiltinArgError(f"optimizer must be an optimizer (sgd/adam/adamw/rmsprop/adagrad), got {type_name(opt)}")
    return opt.lr


@builtin("clip_grad_norm", "clip_grad_norm(max_norm)",
         "scale the gradients of every learnable to a joint L2 norm of at most max_norm; returns the norm before",
         min_args=1, max_args=1, category=C)
def clip_grad_norm_builtin(max_norm):
    return clip_grad_norm(tape.live_params(), _positive(max_norm, "max_norm"))


# ---------------------------------------------------------------- learning-rate schedules

@builtin("step_lr", "step_lr(step_size, [gamma])", "lr * gamma ** (epoch / step_size, rounded down); gamma 0.1",
         min_args=1, max_args=2, category=C)
def step_lr(*args):
    a = _bind([("step_size", REQUIRED), ("gamma", 0.1)], args)
    size = to_int(a["step_size"], "step_size")
    if size <= 0:
        raise BuiltinArgError(f"step_size must be positive, got {size}")
    return LRScheduler("step_lr", step_size=size, gamma=_positive(a["gamma"], "gamma"))


@builtin("exponential_lr", "exponential_lr(gamma)", "lr * gamma ** epoch", min_args=1, max_args=1, category=C)
def exponential_lr(*args):
    a = _bind([("gamma", REQUIRED)], args)
    return LRScheduler("exponential_lr", gamma=_positive(a["gamma"], "gamma"))


@builtin("cosine_lr", "cosine_lr(t_max, [eta_min])", "cosine annealing from lr down to eta_min over t_max epochs",
         min_args=1, max_args=2, category=C)
def cosine_lr(*args):
    a = _bind([("t_max", REQUIRED), ("eta_min", 0.0)], args)
    t_max = to_int(a["t_max"], "t_max")
    if t_max <= 0:
        raise BuiltinArgError(f"t_max must be positive, got {t_max}")
    return LRScheduler("cosine_lr", t_max=t_max, eta_min=_nonneg(a["eta_min"], "eta_min"))


@builtin("multistep_lr", "multistep_lr(milestones, [gamma])",
         "lr * gamma ** (number of milestones <= epoch) (PyTorch's MultiStepLR); gamma 0.1", min_args=1, max_args=2,
         category=C)
def multistep_lr(*args):
    a = _bind([("milestones", REQUIRED), ("gamma", 0.1)], args)
    ms = a["milestones"] if isinstance(a["milestones"], list) else [a["milestones"]]
    milestones = sorted(to_int(m, "milestones") for m in ms)
    return LRScheduler("multistep_lr", milestones=milestones, gamma=_positive(a["gamma"], "gamma"))


@builtin("linear_lr", "linear_lr([start_factor], [end_factor], [total_iters])",
         "linear warm-up: lr * factor, the factor going from start_factor (1/3) to end_factor (1) over "
         "total_iters (5) epochs, then held (PyTorch's LinearLR)", min_args=0, max_args=3, category=C)
def linear_lr(*args):
    a = _bind([("start_factor", 1.0 / 3), ("end_factor", 1.0), ("total_iters", 5)], args)
    start, end = to_float(a["start_factor"], "start_factor"), to_float(a["end_factor"], "end_factor")
    total = to_int(a["total_iters"], "total_iters")
    if not 0 < start <= 1 or not 0 <= end <= 1:
        raise BuiltinArgError(f"start_factor must be in (0, 1] and end_factor in [0, 1], got {start} and {end}")
    if total <= 0:
        raise BuiltinArgError(f"total_iters must be positive, got {total}")
    return LRScheduler("linear_lr", start_factor=start, end_factor=end, total_iters=total)


@builtin("one_cycle_lr", "one_cycle_lr(max_lr, total_steps, [pct_start], [anneal_strategy], [div_factor], "
         "[final_div_factor], [three_phase], [cycle_momentum], [base_momentum], [max_momentum])",
         "PyTorch's OneCycleLR, set before every optimizer step (not per epoch)", min_args=2, max_args=10, category=C)
def one_cycle_lr(*args):
    a = _bind([("max_lr", REQUIRED), ("total_steps", REQUIRED), ("pct_start", 0.3), ("anneal_strategy", "cos"),
               ("div_factor", 25.0), ("final_div_factor", 1e4), ("three_phase", False), ("cycle_momentum", True),
               ("base_momentum", 0.85), ("max_momentum", 0.95)], args)
    total = to_int(a["total_steps"], "total_steps")
    if total <= 0:
        raise BuiltinArgError(f"total_steps must be positive, got {total}")
    pct = to_float(a["pct_start"], "pct_start")
    if not 0 <= pct <= 1:
        raise BuiltinArgError(f"pct_start must be in [0, 1], got {pct}")
    strategy = a["anneal_strategy"]
    if strategy not in ("cos", "linear"):
        raise BuiltinArgError(f"anneal_strategy must be \"cos\" or \"linear\", got {strategy!r}")
    return OneCycleLR(_positive(a["max_lr"], "max_lr"), total, pct, strategy, _positive(a["div_factor"], "div_factor"),
                      _positive(a["final_div_factor"], "final_div_factor"), to_bool(a["three_phase"], "three_phase"),
                      to_bool(a["cycle_momentum"], "cycle_momentum"), to_float(a["base_momentum"], "base_momentum"),
                      to_float(a["max_momentum"], "max_momentum"))


@builtin("reduce_lr_on_plateau", "reduce_lr_on_plateau([mode], [factor], [patience], [threshold], [threshold_mode], "
         "[cooldown], [min_lr], [eps])",
         "PyTorch's ReduceLROnPlateau: bind it, pass it as the scheduler, call sched.step(metric) each epoch",
         min_args=0, max_args=8, category=C)
def reduce_lr_on_plateau(*args):
    a = _bind([("mode", "min"), ("factor", 0.1), ("patience", 10), ("threshold", 1e-4), ("threshold_mode", "rel"),
               ("cooldown", 0), ("min_lr", 0.0), ("eps", 1e-8)], args)
    if a["mode"] not in ("min", "max") or a["threshold_mode"] not in ("rel", "abs"):
        raise BuiltinArgError("mode must be \"min\" or \"max\" and threshold_mode \"rel\" or \"abs\"")
    factor = to_float(a["factor"], "factor")
    if not 0 < factor < 1:
        raise BuiltinArgError(f"factor must be in (0, 1), got {factor}")
    return ReduceLROnPlateau(a["mode"], factor, to_int(a["patience"], "patience"), _nonneg(a["threshold"], "threshold"),
                             a["threshold_mode"], to_int(a["cooldown"], "cooldown"), _nonneg(a["min_lr"], "min_lr"),
                             _nonneg(a["eps"], "eps"))


# ---------------------------------------------------------------- what the interpreter's learn block calls

LEARN_SETTINGS = ("optimizer", "lr", "epochs", "clip_grad_norm", "clip_grad_value", "accumulation_steps", "scheduler",
                  "objective")


def start_learn(values: dict) -> LearnSession:
    """A session from a learn block's evaluated settings (everything but `objective`)."""
    opt = values.get("optimizer")
    if opt is None:
        if "lr" not in values:
            raise BuiltinArgError("a learn block needs `optimizer: sgd(...)/adam(...)/adamw(...)` or `lr: RATE`")
        opt = SGD(lr=_positive(values["lr"], "lr"))
    elif not isinstance(opt, Optimizer):
        raise BuiltinArgError(f"optimizer must be sgd, adam, adamw, rmsprop or adagrad (...), got {type_name(opt)}")
    elif "lr" in values:
        opt.lr = opt.base_lr = _positive(values["lr"], "lr")
    epochs = values.get("epochs")
    if epochs is not None:
        epochs = to_int(epochs, "epochs")
        if epochs < 0:
            raise BuiltinArgError(f"epochs must be >= 0, got {epochs}")
    clip = values.get("clip_grad_norm")
    if clip is not None:
        clip = _positive(clip, "clip_grad_norm")
    clip_value = values.get("clip_grad_value")
    if clip_value is not None:
        clip_value = _positive(clip_value, "clip_grad_value")
    accumulation = values.get("accumulation_steps", 1)
    accumulation = to_int(accumulation, "accumulation_steps")
    if accumulation < 1:
        raise BuiltinArgError(f"accumulation_steps must be >= 1, got {accumulation}")
    sched = values.get("scheduler")
    if sched is not None and not isinstance(sched, LRScheduler):
        raise BuiltinArgError(f"scheduler must be step_lr, exponential_lr, cosine_lr, multistep_lr, linear_lr, "
                              f"one_cycle_lr or reduce_lr_on_plateau (...), got {type_name(sched)}")
    opt.steps = 0
    session = LearnSession(opt, epochs, clip, sched, accumulation, clip_value)
    if learn_progress.enabled():
        session.progress = learn_progress.Progress(epochs)
    return session


class grad_mode:
    """`with grad_mode("no_grad" | "eval"):` the extent of a `no_grad { }` / `eval { }` block: nothing
    is recorded for gradients (PyTorch's torch.no_grad()); eval also turns training behaviour off
    (dropout is the identity, batch_norm uses its running statistics: model.eval()). Both restore the
    previous state on exit, so an eval block inside a learn block's loop validates without disturbing it."""

    def __init__(self, mode: str):
        self.mode = mode

    def __enter__(self):
        t = tape.ensure()  # made now if the run has none: a learnable made inside is not recorded either
        self.training = t.training
        self.recording = tape.no_recording()
        self.recording.__enter__()
        if self.mode == "eval":
            t.training = False
        return self

    def __exit__(self, *exc):
        tape.ensure().training = self.training
        return self.recording.__exit__(*exc)


class running_learn_block:
    """`with running_learn_block(session):` the extent of a learn block (training on, state dropped at the end)."""

    def __init__(self, session: LearnSession):
        self.running = learn_session.running(session)

    def __enter__(self):
        try:
            return self.running.__enter__()
        except AutogradError as e:
            raise BuiltinArgError(str(e)) from None

    def __exit__(self, *exc):
        return self.running.__exit__(*exc)


def learn_step(session: LearnSession, loss) -> None:
    """One training step on `loss` (form B's objective)."""
    if not isinstance(loss, Tensor):
        raise BuiltinArgError(f"the objective must be a tensor computed from learnable tensors, got "
                              f"{type_name(loss)}")
    try:
        session.step(loss)
    except AutogradError as e:
        raise BuiltinArgError(str(e)) from None


class EpochCounter:
    """The iterable of a learn block's outer `for`: each item starts an epoch of the running session."""

    tl_type_name = "range"

    def __init__(self, items):
        self.items = items

    def tl_iter(self):
        session = learn_session.current()
        base = session.epoch_base if session is not None else 0  # read at the loop's start: after a load_checkpoint
        for epoch, item in enumerate(self.items):
            if session is not None:
                session.begin_epoch(base + epoch)
            yield item
