"""Optimizers (SGD with momentum/Nesterov/weight decay, Adam, AdamW), gradient clipping, lr schedules.

Update rules follow the published forms (PyTorch's documentation states the same ones):
  SGD:   g += wd*p; b = mu*b + g (b = 0 before the first step); g = g + mu*b (Nesterov) or b; p -= lr*g
  Adam:  g += wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; p -= lr * m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps)
  AdamW: p *= 1 - lr*wd, then Adam without the wd term.
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

import contextlib
import math

from .tape import AutogradError, Param, no_recording
from .. import symbolic
from ..core import core

FLOAT32 = "f32"


class LRScheduler:
    """Learning rate as a function of the epoch; `lr(base_lr, epoch)`, the closed forms of PyTorch's
    StepLR, ExponentialLR and CosineAnnealingLR (epoch 0 trains at base_lr, as PyTorch's first epoch
    before any `scheduler.step()`). The cosine is not clamped at t_max: past it the rate follows the
    cosine back up (epoch 15 of t_max 10 is halfway again), exactly as CosineAnnealingLR does."""

    tl_type_name = "scheduler"

    def __init__(self, kind: str, **params):
        self.kind = kind
        self.params = params

    def lr(self, base_lr: float, epoch: int) -> float:
        p = self.params
        if self.kind == "step_lr":
            return base_lr * p["gamma"] ** (epoch // p["step_size"])
        if self.kind == "exponential_lr":
            return base_lr * p["gamma"] ** epoch
        if self.kind == "cosine_lr":
            return p["eta_min"] + (base_lr - p["eta_min"]) * (1 + math.cos(math.pi * epoch / p["t_max"])) / 2
        raise AutogradError(f"unknown scheduler {self.kind}")

    def describe(self) -> str:
        args = ", ".join(f"{k} = {v}" for k, v in self.params.items())
        return f"{self.kind}({args})"

    def tl_repr(self) -> str:
        return self.describe()


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
        if trace is not None:  # a compiled training step: each replay computes its own step's scalars
            scalars = trace.host_scalars(self._replayed_step, scalars)
        with no_recording():
            for p in self.params:
                tensor = p.tensor
                if tensor is None or p.grad is None:
                    continue
                direct = tensor.dtype == FLOAT32 and tensor.is_contiguous()
                w = tensor if direct else core.contiguous(core.astype(tensor, FLOAT32))
                self._update(p, w, p.grad, *scalars)
                if not direct:
                    core.copy_(tensor, w if tensor.dtype == FLOAT32 else core.astype(w, tensor.dtype))

    def _step_scalars(self) -> list[float]:
        """The scalars of step `self.steps` that the update op takes at run time: [lr, bias1, bias2]."""
        return [self.lr, 1.0, 1.0]

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

    def _update(self, p: Param, w, g, lr, bias1, bias2) -> None:
        """Write parameter p's new value into w (f32, contiguous) from its gradient g; subclasses define it."""
        raise AutogradError(f"{self.kind} has no update rule")

    def describe(self) -> str:
        return f"{self.kind}(lr = {self.lr:g})"

    def tl_get_field(self, name: str):
        if name == "lr":
            return self.lr
        if name == "steps":
            return self.steps
        raise AttributeError(name)

    def tl_call_method(self, name: str, args: list):
        raise AttributeError(name)

    def tl_repr(self) -> str:
        return self.describe()


class SGD(Optimizer):
    kind = "sgd"

    def __init__(self, lr: float, momentum: float = 0.0, nesterov: bool = False, weight_decay: float = 0.0):
        super().__init__(lr, weight_decay)
        if momentum < 0:
            raise AutogradError(f"momentum must be >= 0, got {momentum}")
        if nesterov and momentum == 0:
            raise AutogradError("nesterov needs a momentum > 0")
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)
        self.buffers: dict[Param, object] = {}

    def _release_state(self) -> None:
        self.buffers = {}

    def _state_dicts(self) -> list[dict]:
        return [self.buffers]

    def _update(self, p, w, g, lr, bias1, bias2):
        buf = self._state(self.buffers, p, w) if self.momentum else None
        core.sgd_update_(w, g, buf, lr, self.momentum, self.nesterov, self.weight_decay)

    def describe(self) -> str:
        extra = f", momentum = {self.momentum:g}" if self.momentum else ""
        extra += ", nesterov = true" if self.nesterov else ""
        extra += f", weight_decay = {self.weight_decay:g}" if self.weight_decay else ""
        return f"sgd(lr = {self.lr:g}{extra})"


class Adam(Optimizer):
    kind = "adam"
    decoupled = False

    def __init__(self, lr: float = 0.001, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                 weight_decay: float = 0.0):
        super().__init__(lr, weight_decay)
        for name, b in (("beta1", beta1), ("beta2", beta2)):
            if not 0 <= b < 1:
                raise AutogradError(f"{name} must be in [0, 1), got {b}")
        self.beta1, self.beta2, self.eps = float(beta1), float(beta2), float(eps)
        self.m: dict[Param, object] = {}
        self.v: dict[Param, object] = {}

    def _release_state(self) -> None:
        self.m, self.v = {}, {}

    def _state_dicts(self) -> list[dict]:
        return [self.m, self.v]

    def _step_scalars(self) -> list[float]:
        t = self.steps
        return [self.lr, 1 - self.beta1 ** t, 1 - self.beta2 ** t]

    def _update(self, p, w, g, lr, bias1, bias2):
        m = self._state(self.m, p, w)
        v = self._state(self.v, p, w)
        core.adam_update_(w, g, m, v, lr, bias1, bias2, self.beta1, self.beta2, self.eps, self.weight_decay,
                          self.decoupled)

    def describe(self) -> str:
        wd = f", weight_decay = {self.weight_decay:g}" if self.weight_decay else ""
        return f"{self.kind}(lr = {self.lr:g}, beta1 = {self.beta1:g}, beta2 = {self.beta2:g}{wd})"


class AdamW(Adam):
    kind = "adamw"
    decoupled = True

    def __init__(self, lr: float = 0.001, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                 weight_decay: float = 0.01):
        super().__init__(lr, beta1, beta2, eps, weight_decay)


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
