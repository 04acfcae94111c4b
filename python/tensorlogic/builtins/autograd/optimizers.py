"""Optimizers (SGD with momentum/Nesterov/weight decay, Adam, AdamW), gradient clipping, lr schedules.

Update rules follow the published forms (PyTorch's documentation states the same ones):
  SGD:   g += wd*p; b = mu*b + g (b = 0 before the first step); g = g + mu*b (Nesterov) or b; p -= lr*g
  Adam:  g += wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; p -= lr * m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps)
  AdamW: p *= 1 - lr*wd, then Adam without the wd term.
  (PyTorch's further options and optimizers, SGD dampening, Adam amsgrad, RMSprop, Adagrad, are
  compositions of runtime ops written into the state in place: see `_ComposedUpdate`.)
Parameter groups (`param_group(params, lr, weight_decay)`) give some parameters their own rate and
decay; a schedule sets every group's rate from the group's own base rate, as PyTorch's do.
Invariants: a step runs with recording off and is one fused runtime op per parameter
(`adam_update_` / `sgd_update_`; an f16 or strided parameter is updated through an f32 copy written
back), which writes the parameter and its state in place, so every TL
variable bound to a learnable sees the new value and a training loop's allocations stop after the
first step. Optimizer state has the parameter's shape in f32, starts at zeros (which makes the first
step equal to the textbook's m = (1-b1)*g, b = g) and is created outside any compiled-function
recording: it is the optimizer's, not the recording's. The per-step scalars (the rate, the bias
corrections) are passed to the op as replay inputs of a compiled training step (`_step_scalars`),
so a replay uses each step's own values.
"""
from __future__ import annotations

import bisect
import contextlib
import math

from .tape import AutogradError, Param, no_recording
from .. import symbolic
from ..core import core

FLOAT32 = "f32"


class LRScheduler:
    """Learning rate as a function of the epoch; `lr(base_lr, epoch)`, the closed forms of PyTorch's
    StepLR, ExponentialLR, CosineAnnealingLR, MultiStepLR and LinearLR (epoch 0 trains at the rate of
    PyTorch's first epoch, before any `scheduler.step()`). The cosine is not clamped at t_max: past it
    the rate follows the cosine back up (epoch 15 of t_max 10 is halfway again), exactly as
    CosineAnnealingLR does. Subclasses with state (one_cycle_lr, reduce_lr_on_plateau) override the hooks."""

    tl_type_name = "scheduler"
    per_step = False  # True: the rate is set before every optimizer step, not at epoch starts

    def __init__(self, kind: str, **params):
        self.kind = kind
        self.params = params

    def attach(self, optimizer) -> None:
        """The learn block starts with this schedule on `optimizer`."""

    def begin_epoch(self, optimizer, epoch: int) -> None:
        optimizer.set_scheduled_lr(lambda base: self.lr(base, epoch))

    def before_step(self, optimizer, step: int) -> None:
        """Before optimizer step number `step` (0 for the first)."""

    def lr(self, base_lr: float, epoch: int) -> float:
        p = self.params
        if self.kind == "step_lr":
            return base_lr * p["gamma"] ** (epoch // p["step_size"])
        if self.kind == "exponential_lr":
            return base_lr * p["gamma"] ** epoch
        if self.kind == "cosine_lr":
            return p["eta_min"] + (base_lr - p["eta_min"]) * (1 + math.cos(math.pi * epoch / p["t_max"])) / 2
        if self.kind == "multistep_lr":
            return base_lr * p["gamma"] ** bisect.bisect_right(p["milestones"], epoch)
        if self.kind == "linear_lr":
            start, end, total = p["start_factor"], p["end_factor"], p["total_iters"]
            return base_lr * (start + (end - start) * min(epoch, total) / total)
        raise AutogradError(f"unknown scheduler {self.kind}")

    def state(self) -> dict:
        """What a checkpoint keeps (closed forms keep nothing: the epoch decides)."""
        return {}

    def load_state(self, state: dict) -> None:
        pass

    def describe(self) -> str:
        args = ", ".join(f"{k} = {v}" for k, v in self.params.items())
        return f"{self.kind}({args})"

    def tl_repr(self) -> str:
        return self.describe()

    def tl_get_field(self, name: str):
        raise AttributeError(name)

    def tl_call_method(self, name: str, args: list):
        raise AttributeError(name)


class OneCycleLR(LRScheduler):
    """PyTorch's OneCycleLR, stepped per optimizer step: the rate rises from max_lr/div_factor to max_lr
    over pct_start of total_steps, then anneals to max_lr/div_factor/final_div_factor (cosine or
    linear); with cycle_momentum the momentum (SGD) or beta1 (Adam) moves inversely between
    max_momentum and base_momentum. Step number total_steps and beyond is an error, as in PyTorch."""

    per_step = True

    def __init__(self, max_lr, total_steps, pct_start=0.3, anneal_strategy="cos", div_factor=25.0,
                 final_div_factor=1e4, three_phase=False, cycle_momentum=True, base_momentum=0.85,
                 max_momentum=0.95):
        super().__init__("one_cycle_lr", max_lr=max_lr, total_steps=total_steps, pct_start=pct_start,
                         anneal_strategy=anneal_strategy)
        initial = max_lr / div_factor
        low = initial / final_div_factor
        self.total_steps = total_steps
        self.cos = anneal_strategy == "cos"
        self.cycle_momentum = cycle_momentum
        if three_phase:
            self.phases = [(float(pct_start * total_steps) - 1, initial, max_lr, max_momentum, base_momentum),
                           (float(2 * pct_start * total_steps) - 2, max_lr, initial, base_momentum, max_momentum),
                           (total_steps - 1, initial, low, max_momentum, max_momentum)]
        else:
            self.phases = [(float(pct_start * total_steps) - 1, initial, max_lr, max_momentum, base_momentum),
                           (total_steps - 1, max_lr, low, base_momentum, max_momentum)]

    def _anneal(self, start, end, pct):
        if self.cos:
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def at(self, step: int) -> tuple[float, float]:
        """(rate, momentum) of optimizer step `step` (0-based), PyTorch's get_lr() at last_epoch = step."""
        if step >= self.total_steps:
            raise AutogradError(f"one_cycle_lr: optimizer step {step + 1} is past total_steps = {self.total_steps}")
        start = 0.0
        for i, (end, lr0, lr1, m0, m1) in enumerate(self.phases):
            if step <= end or i == len(self.phases) - 1:
                pct = (step - start) / (end - start)
                return self._anneal(lr0, lr1, pct), self._anneal(m0, m1, pct)
            start = end
        raise AutogradError("one_cycle_lr: no phase")  # unreachable: the last phase takes every step

    def begin_epoch(self, optimizer, epoch: int) -> None:
        pass

    def before_step(self, optimizer, step: int) -> None:
        lr, momentum = self.at(step)
        optimizer.set_scheduled_lr(lambda _base: lr)
        if self.cycle_momentum:
            optimizer.set_momentum(momentum)


class ReduceLROnPlateau(LRScheduler):
    """PyTorch's ReduceLROnPlateau: `sched.step(metric)` (a method the program calls, typically with a
    validation loss once per epoch) multiplies every group's rate by factor after more than
    `patience` calls without an improvement beyond threshold (rel or abs, mode min or max), then
    waits `cooldown` calls; rates never go below min_lr, and a change under eps is skipped."""

    def __init__(self, mode="min", factor=0.1, patience=10, threshold=1e-4, threshold_mode="rel", cooldown=0,
                 min_lr=0.0, eps=1e-8):
        super().__init__("reduce_lr_on_plateau", mode=mode, factor=factor, patience=patience, threshold=threshold,
                         threshold_mode=threshold_mode, cooldown=cooldown, min_lr=min_lr)
        self.mode, self.factor, self.patience = mode, factor, patience
        self.threshold, self.threshold_mode, self.cooldown = threshold, threshold_mode, cooldown
        self.min_lr, self.eps = min_lr, eps
        self.optimizer = None
        self._reset()

    def _reset(self):
        self.best = math.inf if self.mode == "min" else -math.inf
        self.num_bad = 0
        self.cooldown_counter = 0

    def attach(self, optimizer) -> None:
        self.optimizer = optimizer

    def begin_epoch(self, optimizer, epoch: int) -> None:
        pass

    def _better(self, a: float) -> bool:
        rel = self.threshold_mode == "rel"
        if self.mode == "min":
            return a < (self.best * (1 - self.threshold) if rel else self.best - self.threshold)
        return a > (self.best * (self.threshold + 1) if rel else self.best + self.threshold)

    def step(self, metric: float) -> None:
        if self.optimizer is None:
            raise AutogradError("reduce_lr_on_plateau: step(metric) is called inside the learn block whose "
                                "scheduler it is")
        if self._better(metric):
            self.best = metric
            self.num_bad = 0
        else:
            self.num_bad += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad = 0
        if self.num_bad > self.patience:
            def reduced(old):
                new = max(old * self.factor, self.min_lr)
                return new if old - new > self.eps else old
            self.optimizer.map_lr(reduced)
            self.cooldown_counter = self.cooldown
            self.num_bad = 0

    def state(self) -> dict:
        return {"best": self.best, "num_bad": self.num_bad, "cooldown_counter": self.cooldown_counter}

    def load_state(self, state: dict) -> None:
        self.best, self.num_bad, self.cooldown_counter = state["best"], state["num_bad"], state["cooldown_counter"]

    def tl_get_field(self, name: str):
        if name == "best":
            return self.best
        raise AttributeError(name)

    def tl_call_method(self, name: str, args: list):
        if name == "step" and len(args) == 1:
            from ..convert import to_float  # noqa: PLC0415 - convert imports the runtime; keep this module light
            self.step(to_float(args[0], "metric"))
            return None
        raise AttributeError(name)


class ParamGroup:
    """Parameters with their own rate and weight decay (PyTorch's optimizer param_groups)."""

    tl_type_name = "param_group"

    def __init__(self, params: list[Param], lr: float | None, weight_decay: float | None):
        self.params = params
        self.lr = self.base_lr = lr
        self.weight_decay = weight_decay

    def tl_repr(self) -> str:
        return f"param_group({len(self.params)} tensors, lr = {self.lr}, weight_decay = {self.weight_decay})"


class Optimizer:
    """Common part: the parameters, the rate, the step counter, optional clipping."""

    kind = "optimizer"
    tl_type_name = "optimizer"

    def __init__(self, lr: float, weight_decay: float = 0.0):
        if not lr > 0:
            raise AutogradError(f"learning rate must be positive, got {lr}")
        self.lr = float(lr)
        self.base_lr = float(lr)
        self.weight_decay = float(weight_decay)
        self.params: list[Param] = []
        self.steps = 0
        self.groups: list[ParamGroup] = []

    def set_groups(self, groups: list[ParamGroup]) -> None:
        seen = set()
        for g in groups:
            if g.lr is None:
                g.lr = g.base_lr = self.lr
            if g.weight_decay is None:
                g.weight_decay = self.weight_decay
            for p in g.params:
                if p in seen:
                    raise AutogradError("a learnable is in two parameter groups")
                seen.add(p)
        self.groups = list(groups)

    def set_scheduled_lr(self, fn) -> None:
        """Every rate from its own base rate: fn(base) (a schedule)."""
        self.lr = fn(self.base_lr)
        for g in self.groups:
            g.lr = fn(g.base_lr)

    def map_lr(self, fn) -> None:
        """Every rate from its current value: fn(lr) (reduce_lr_on_plateau)."""
        self.lr = fn(self.lr)
        for g in self.groups:
            g.lr = fn(g.lr)

    def set_momentum(self, value: float) -> None:
        """one_cycle_lr's momentum cycling: SGD's momentum or Adam's beta1 (subclasses)."""
        raise AutogradError(f"{self.kind} has no momentum for one_cycle_lr to cycle (pass cycle_momentum = false)")

    def _group_of(self, p: Param):
        for i, g in enumerate(self.groups):
            if p in g.params:
                return i, g
        return None, None

    def attach(self, params: list[Param]) -> None:
        """Train `params` (every live learnable); state of parameters no longer alive is dropped."""
        if params != self.params:
            self.params = list(params)
            self._keep_state(set(self.params))

    def _keep_state(self, alive: set) -> None:
        for state in self._state_dicts():
            for p in [p for p in state if p not in alive]:
                del state[p]

    def _state_dicts(self) -> list[dict]:
        return []

    def release(self) -> None:
        """Drop the parameters and state (end of a learn block)."""
        self.params = []
        self._release_state()

    def _release_state(self) -> None:
        pass

    def step(self) -> None:
        self.steps += 1
        scalars = self._step_scalars()
        trace = symbolic.active()
        if trace is not None and self._composed():
            _not_recorded(self.describe())
        if trace is not None:  # a compiled training step: each replay computes its own step's scalars
            scalars = trace.host_scalars(self._replayed_step, scalars)
        base = scalars[:3]
        with no_recording():
            for p in self.params:
                tensor = p.tensor
                if tensor is None or p.grad is None:
                    continue
                direct = tensor.dtype == FLOAT32 and tensor.is_contiguous()
                w = tensor if direct else core.contiguous(core.astype(tensor, FLOAT32))
                i, group = self._group_of(p) if self.groups else (None, None)
                lr = scalars[3 + i] if group is not None else base[0]
                wd = group.weight_decay if group is not None else self.weight_decay
                self._update(p, w, p.grad, lr, base[1], base[2], wd)
                if not direct:
                    core.copy_(tensor, w if tensor.dtype == FLOAT32 else core.astype(w, tensor.dtype))

    def _composed(self) -> bool:
        """Whether the update is a composition of ops with host-computed constants (not one fused op)."""
        return False

    def _step_scalars(self) -> list[float]:
        """The scalars of step `self.steps` that the update op takes at run time: [lr, bias1, bias2,
        each group's lr]."""
        return [self.lr, 1.0, 1.0] + self._group_lrs()

    def _group_lrs(self) -> list[float]:
        return [g.lr for g in self.groups]

    def _replayed_step(self) -> list[float]:
        """A replay of a compiled training step: the host side of step() and its scalars."""
        self.steps += 1
        return self._step_scalars()

    def _state(self, states: dict, p: Param, like):
        """p's state tensor in `states` (f32 zeros of p's shape, made outside any recording)."""
        t = states.get(p)
        if t is None:
            trace = symbolic.active()
            with trace.outside() if trace is not None else contextlib.nullcontext():
                t = core.zeros(list(like.shape), FLOAT32)
            states[p] = t
        return t

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def _update(self, p: Param, w, g, lr, bias1, bias2, wd) -> None:
        """Write parameter p's new value into w (f32, contiguous) from its gradient g with rate lr and
        weight decay wd; subclasses define it."""
        raise AutogradError(f"{self.kind} has no update rule")

    def describe(self) -> str:
        return f"{self.kind}(lr = {self.lr:g})"

    def tl_get_field(self, name: str):
        if name == "lr":
            return self.lr
        if name == "steps":
            return self.steps
        raise AttributeError(name)

    def state_tensors(self) -> dict[str, dict]:
        """{state name: {Param: tensor}} of what a checkpoint saves (subclasses list their dicts)."""
        return dict(zip(self._state_names(), self._state_dicts()))

    def _state_names(self) -> list[str]:
        return []

    def tl_call_method(self, name: str, args: list):
        raise AttributeError(name)

    def tl_repr(self) -> str:
        return self.describe()


class SGD(Optimizer):
    kind = "sgd"

    def __init__(self, lr: float, momentum: float = 0.0, nesterov: bool = False, weight_decay: float = 0.0,
                 dampening: float = 0.0):
        super().__init__(lr, weight_decay)
        if momentum < 0:
            raise AutogradError(f"momentum must be >= 0, got {momentum}")
        if nesterov and (momentum == 0 or dampening != 0):
            raise AutogradError("nesterov needs a momentum > 0 and no dampening")
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)
        self.dampening = float(dampening)
        self.buffers: dict[Param, object] = {}

    def _release_state(self) -> None:
        self.buffers = {}

    def _state_dicts(self) -> list[dict]:
        return [self.buffers]

    def _state_names(self) -> list[str]:
        return ["momentum_buffer"]

    def set_momentum(self, value: float) -> None:
        self.momentum = float(value)

    def _composed(self) -> bool:
        return bool(self.dampening and self.momentum)

    def _update(self, p, w, g, lr, bias1, bias2, wd):
        if self.dampening and self.momentum:
            # PyTorch: the first step's buffer is g itself (undamped), later b = mu b + (1 - dampening) g
            _not_recorded("sgd with dampening")
            if wd:
                g = core.add(g, core.mul(w, wd))
            first = p not in self.buffers
            buf = self._state(self.buffers, p, w)
            core.copy_(buf, g if first else core.add(core.mul(buf, self.momentum), core.mul(g, 1.0 - self.dampening)))
            core.copy_(w, core.sub(w, core.mul(buf, lr)))
            return
        buf = self._state(self.buffers, p, w) if self.momentum else None
        core.sgd_update_(w, g, buf, lr, self.momentum, self.nesterov, wd)

    def describe(self) -> str:
        extra = f", momentum = {self.momentum:g}" if self.momentum else ""
        extra += f", dampening = {self.dampening:g}" if self.dampening else ""
        extra += ", nesterov = true" if self.nesterov else ""
        extra += f", weight_decay = {self.weight_decay:g}" if self.weight_decay else ""
        return f"sgd(lr = {self.lr:g}{extra})"


class Adam(Optimizer):
    kind = "adam"
    decoupled = False

    def __init__(self, lr: float = 0.001, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False):
        super().__init__(lr, weight_decay)
        for name, b in (("beta1", beta1), ("beta2", beta2)):
            if not 0 <= b < 1:
                raise AutogradError(f"{name} must be in [0, 1), got {b}")
        self.beta1, self.beta2, self.eps = float(beta1), float(beta2), float(eps)
        self.amsgrad = bool(amsgrad)
        self.m: dict[Param, object] = {}
        self.v: dict[Param, object] = {}
        self.v_max: dict[Param, object] = {}

    def _release_state(self) -> None:
        self.m, self.v, self.v_max = {}, {}, {}

    def _state_dicts(self) -> list[dict]:
        return [self.m, self.v, self.v_max]

    def _state_names(self) -> list[str]:
        return ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"]

    def set_momentum(self, value: float) -> None:
        self.beta1 = float(value)

    def _composed(self) -> bool:
        return self.amsgrad

    def _step_scalars(self) -> list[float]:
        t = self.steps
        return [self.lr, 1 - self.beta1 ** t, 1 - self.beta2 ** t] + self._group_lrs()

    def _update(self, p, w, g, lr, bias1, bias2, wd):
        m = self._state(self.m, p, w)
        v = self._state(self.v, p, w)
        if not self.amsgrad:
            core.adam_update_(w, g, m, v, lr, bias1, bias2, self.beta1, self.beta2, self.eps, wd, self.decoupled)
            return
        # PyTorch's amsgrad: the denominator uses the running maximum of v (not bias-corrected in the max)
        _not_recorded("adam with amsgrad")
        if wd and self.decoupled:
            core.copy_(w, core.mul(w, 1.0 - lr * wd))
        elif wd:
            g = core.add(g, core.mul(w, wd))
        core.copy_(m, core.add(core.mul(m, self.beta1), core.mul(g, 1.0 - self.beta1)))
        core.copy_(v, core.add(core.mul(v, self.beta2), core.mul(core.mul(g, g), 1.0 - self.beta2)))
        v_max = self._state(self.v_max, p, w)
        core.copy_(v_max, core.maximum(v_max, v))
        denom = core.add(core.div(core.sqrt(v_max), math.sqrt(bias2)), self.eps)
        core.copy_(w, core.sub(w, core.mul(core.div(m, denom), lr / bias1)))

    def describe(self) -> str:
        wd = f", weight_decay = {self.weight_decay:g}" if self.weight_decay else ""
        wd += ", amsgrad = true" if self.amsgrad else ""
        return f"{self.kind}(lr = {self.lr:g}, beta1 = {self.beta1:g}, beta2 = {self.beta2:g}{wd})"


class AdamW(Adam):
    kind = "adamw"
    decoupled = True

    def __init__(self, lr: float = 0.001, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                 weight_decay: float = 0.01, amsgrad: bool = False):
        super().__init__(lr, beta1, beta2, eps, weight_decay, amsgrad)


def _not_recorded(what: str) -> None:
    """A composed update is host-parameterized per step (its rate is a Python float): a compiled
    training step cannot replay it with a new rate, so the recording is abandoned (the step runs eagerly)."""
    symbolic.abandon(f"{what} is not recorded in a compiled training step")


class RMSprop(Optimizer):
    """PyTorch's RMSprop: v = a v + (1-a) g^2; centered: c = a c + (1-a) g, v - c^2 under the root;
    d = g / (sqrt(.) + eps); with momentum b = mu b + d, p -= lr b, else p -= lr d."""

    kind = "rmsprop"

    def __init__(self, lr: float = 0.01, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
                 momentum: float = 0.0, centered: bool = False):
        super().__init__(lr, weight_decay)
        if not 0 <= alpha < 1:
            raise AutogradError(f"alpha must be in [0, 1), got {alpha}")
        self.alpha, self.eps, self.momentum, self.centered = float(alpha), float(eps), float(momentum), bool(centered)
        self.square_avg: dict[Param, object] = {}
        self.grad_avg: dict[Param, object] = {}
        self.buffers: dict[Param, object] = {}

    def _release_state(self) -> None:
        self.square_avg, self.grad_avg, self.buffers = {}, {}, {}

    def _state_dicts(self) -> list[dict]:
        return [self.square_avg, self.grad_avg, self.buffers]

    def _state_names(self) -> list[str]:
        return ["square_avg", "grad_avg", "momentum_buffer"]

    def _composed(self) -> bool:
        return True

    def set_momentum(self, value: float) -> None:
        self.momentum = float(value)

    def _update(self, p, w, g, lr, bias1, bias2, wd):
        _not_recorded("rmsprop")
        if wd:
            g = core.add(g, core.mul(w, wd))
        sq = self._state(self.square_avg, p, w)
        core.copy_(sq, core.add(core.mul(sq, self.alpha), core.mul(core.mul(g, g), 1.0 - self.alpha)))
        if self.centered:
            ga = self._state(self.grad_avg, p, w)
            core.copy_(ga, core.add(core.mul(ga, self.alpha), core.mul(g, 1.0 - self.alpha)))
            avg = core.add(core.sqrt(core.sub(sq, core.mul(ga, ga))), self.eps)
        else:
            avg = core.add(core.sqrt(sq), self.eps)
        d = core.div(g, avg)
        if self.momentum > 0:
            buf = self._state(self.buffers, p, w)
            core.copy_(buf, core.add(core.mul(buf, self.momentum), d))
            d = buf
        core.copy_(w, core.sub(w, core.mul(d, lr)))

    def describe(self) -> str:
        return f"rmsprop(lr = {self.lr:g}, alpha = {self.alpha:g})"


class Adagrad(Optimizer):
    """PyTorch's Adagrad: s += g^2; p -= lr / (1 + (t-1) lr_decay) * g / (sqrt(s) + eps)."""

    kind = "adagrad"

    def __init__(self, lr: float = 0.01, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10):
        super().__init__(lr, weight_decay)
        self.lr_decay, self.initial, self.eps = float(lr_decay), float(initial_accumulator_value), float(eps)
        self.sums: dict[Param, object] = {}

    def _release_state(self) -> None:
        self.sums = {}

    def _state_dicts(self) -> list[dict]:
        return [self.sums]

    def _state_names(self) -> list[str]:
        return ["sum"]

    def _composed(self) -> bool:
        return True

    def _update(self, p, w, g, lr, bias1, bias2, wd):
        _not_recorded("adagrad")
        if wd:
            g = core.add(g, core.mul(w, wd))
        first = p not in self.sums
        s = self._state(self.sums, p, w)
        if first and self.initial:
            core.copy_(s, core.add(s, self.initial))
        core.copy_(s, core.add(s, core.mul(g, g)))
        clr = lr / (1 + (self.steps - 1) * self.lr_decay)
        core.copy_(w, core.sub(w, core.mul(core.div(g, core.add(core.sqrt(s), self.eps)), clr)))

    def describe(self) -> str:
        return f"adagrad(lr = {self.lr:g})"


def clip_grad_norm(params: list[Param], max_norm: float):
    """Scale all gradients so their joint L2 norm is at most max_norm; returns the norm before clipping
    (a 0-d tensor). The scale min(1, max_norm / norm) is computed on the device: no host sync."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return core.zeros([], FLOAT32)
    with no_recording():
        total = None
        for g in grads:
            g32 = g if g.dtype == FLOAT32 else core.astype(g, FLOAT32)
            sq = core.sum(core.mul(g32, g32))
            total = sq if total is None else core.add(total, sq)
        norm = core.sqrt(total)
        scale = core.minimum(core.div(float(max_norm), core.add(norm, 1e-6)), 1.0)
        for p in params:
            if p.grad is not None:
                s = scale if p.grad.dtype == FLOAT32 else core.astype(scale, p.grad.dtype)
                p.grad = core.mul(p.grad, s)
    return norm


def clip_grad_value(params: list[Param], clip_value: float) -> None:
    """Clamp every gradient elementwise to [-clip_value, clip_value] (PyTorch's clip_grad_value_)."""
    with no_recording():
        for p in params:
            if p.grad is not None:
                p.grad = core.minimum(core.maximum(p.grad, -float(clip_value)), float(clip_value))
