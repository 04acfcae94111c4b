"""A running `learn` block: its optimizer, schedule, clipping and the step `backward(loss)` takes.

Invariants: at most one learn block runs at a time in a run (the run's state holds it: run_state.py
`learn`); while it runs the run's tape trains (dropout is active) and every `backward(loss)` is one
full step: gradients of every live learnable, optional clipping, one optimizer update in place,
gradients cleared. When the block ends, however it ends, the optimizer's state is dropped and
training is off again, so nothing of it outlives the block.
A step taken while a compiled function records (a compiled training step) adds a guard (a replay
runs only inside this same block) and a replay hook doing the step's host bookkeeping; the
optimizer adds its per-step scalars itself (optimizers.py).
"""
from __future__ import annotations

from . import tape
from .. import run_state, symbolic
from .optimizers import LRScheduler, Optimizer, clip_grad_norm
from .tape import AutogradError


class LearnSession:
    def __init__(self, optimizer: Optimizer, epochs: int, clip: float | None, scheduler: LRScheduler | None):
        self.optimizer = optimizer
        self.epochs = epochs
        self.clip = clip
        self.scheduler = scheduler
        self.steps = 0
        self.epoch = 0

    def begin_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if self.scheduler is not None:
            self.optimizer.lr = self.scheduler.lr(self.optimizer.base_lr, epoch)

    def step(self, loss) -> None:
        params = tape.live_params()
        if not params:
            raise AutogradError("learn block: there is no learnable tensor to train "
                                "(make one with learnable(...) or `tensor w: f32[..] learnable`)")
        trace = symbolic.active()
        if trace is not None:
            trace.guards.append(self._replays_here)
            trace.hooks.append(self._replayed_step)
        tape.backward(loss)
        self.optimizer.attach(params)
        if self.clip is not None:
            clip_grad_norm(params, self.clip)
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.steps += 1

    def _replays_here(self, _scalars) -> bool:
        return current() is self

    def _replayed_step(self, _scalars) -> None:
        self.optimizer.attach(tape.live_params())
        self.steps += 1


def current() -> LearnSession | None:
    """The learn block running in the run executing here, or None."""
    return run_state.current().learn


class running:
    """`with running(session):` — the block's extent, in the run executing here."""

    def __init__(self, session: LearnSession):
        self.session = session

    def __enter__(self):
        state = run_state.current()
        if state.learn is not None:
            raise AutogradError("learn blocks do not nest")
        self.state = state
        state.learn = self.session
        tape.ensure().training = True
        return self.session

    def __exit__(self, *exc):
        self.state.learn = None
        self.state.tape.training = False
        self.session.optimizer.release()
        tape.zero_grad()
