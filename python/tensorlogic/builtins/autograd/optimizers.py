"""Optimizers (SGD with momentum/Nesterov/weight decay, Adam, AdamW), gradient clipping, lr schedules.

Update rules follow the published forms (PyTorch's documentation states the same ones):
  SGD:   g += wd*p; b = mu*b + g (b = g at the first step); g = g + mu*b (Nesterov) or b; p -= lr*g
  Adam:  g += wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; p -= lr * m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps)
  AdamW: p *= 1 - lr*wd, then Adam without the wd term.
Invariants: a step runs with recording off and writes each parameter in place (`copy_`), so every
TL variable bound to a learnable sees the new value; optimizer state has the parameter's shape in
f32 and is created at the first step (a reservation or the pool serves it, R7), then rebound each
step to same-shaped tensors, so a training loop's allocations stop after warm-up.
"""
from __future__ import annotations

import math

from .tape import AutogradError, Param, no_recording
from ..core import core

FLOAT32 = "f32"


class LRScheduler:
    """Learning rate as a function of the epoch; `lr(base_lr, epoch)`."""

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
            t_max = p["t_max"]
            e = min(epoch, t_max)
            return p["eta_min"] + (base_lr - p["eta_min"]) * (1 + math.cos(math.pi * e / t_max)) / 2
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
        with no_recording():
            for p in self.params:
                tensor = p.tensor
                if tensor is None or p.grad is None:
                    continue
                g = p.grad if p.grad.dtype == FLOAT32 else core.astype(p.grad, FLOAT32)
                w = tensor if tensor.dtype == FLOAT32 else core.astype(tensor, FLOAT32)
                new_w = self._update(p, w, g)
                core.copy_(tensor, new_w if tensor.dtype == FLOAT32 else core.astype(new_w, tensor.dtype))

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def _update(self, p: Param, w, g):
        """The new value of parameter p (f32) from its value w and gradient g; subclasses define it."""
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

    def _update(self, p, w, g):
        if self.weight_decay:
            g = core.add(g, core.mul(w, self.weight_decay))
        if self.momentum:
            prev = self.buffers.get(p)
            buf = g if prev is None else core.add(core.mul(prev, self.momentum), g)
            self.buffers[p] = buf
            g = core.add(g, core.mul(buf, self.momentum)) if self.nesterov else buf
        return core.sub(w, core.mul(g, self.lr))

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

    def _update(self, p, w, g):
        b1, b2 = self.beta1, self.beta2
        if self.weight_decay:
            if self.decoupled:
                w = core.mul(w, 1.0 - self.lr * self.weight_decay)
            else:
                g = core.add(g, core.mul(w, self.weight_decay))
        m = self.m.get(p)
        v = self.v.get(p)
        g_part = core.mul(g, 1 - b1)
        m = g_part if m is None else core.add(core.mul(m, b1), g_part)
        sq_part = core.mul(core.mul(g, g), 1 - b2)
        v = sq_part if v is None else core.add(core.mul(v, b2), sq_part)
        self.m[p], self.v[p] = m, v
        t = self.steps
        step_size = self.lr / (1 - b1 ** t)
        denom = core.add(core.sqrt(core.div(v, 1 - b2 ** t)), self.eps)
        return core.sub(w, core.mul(core.div(m, denom), step_size))

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
