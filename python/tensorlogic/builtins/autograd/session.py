"""A running `learn` block: its optimizer, schedule, clipping and the step `backward(loss)` takes.

Invariants: at most one learn block runs at a time in a run (the run's state holds it: run_state.py
`learn`); while it runs the run's tape trains (dropout is active) and every `backward(loss)` is one
full step: gradients of every live learnable, optional clipping, one optimizer update in place,
gradients cleared. When the block ends, however it ends, the optimizer's state is dropped and
training is off again, so nothing of it outlives the block.
With `accumulation_steps: N` a step is taken every N-th backward, on the mean of the N gradients
(N micro-batches of a mean loss equal one batch N times larger); backwards left over when the block
ends are dropped, as a PyTorch loop that never calls optimizer.step() for them. A schedule sets the
rate at each epoch's start (`begin_epoch`) or, for per-step schedules (one_cycle_lr), before each
optimizer step (`before_step`). A step taken while a compiled function records (a compiled training step) adds a guard (a replay
runs only inside this same block) and a replay hook doing the step's host bookkeeping; the
optimizer adds its per-step scalars itself (optimizers.py).
"""
from __future__ import annotations

from . import tape
from ..core import core
from .. import run_state, symbolic
from .optimizers import LRScheduler, Optimizer, clip_grad_norm, clip_grad_value
from .tape import AutogradError


class LearnSession:
    def __init__(self, optimizer: Optimizer, epochs: int, clip: float | None, scheduler: LRScheduler | None,
                 accumulation_steps: int = 1, clip_value: float | None = None):
        self.optimizer = optimizer
        self.epochs = epochs
        self.clip = clip
        self.clip_value = clip_value
        self.scheduler = scheduler
        self.accumulation_steps = accumulation_steps
        self.micro = 0  # backwards since the last optimizer step
        self.steps = 0
        self.epoch = 0
        self.epoch_base = 0  # the first epoch of the block's epoch loop (load_checkpoint sets it to resume)
        self.progress = None  # a learn_progress.Progress when a terminal shows the progress line
        if scheduler is not None:
            scheduler.attach(optimizer)

    def begin_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if self.scheduler is not None:
            self.scheduler.begin_epoch(self.optimizer, epoch)

    def step(self, loss) -> None:
        params = tape.live_params()
        if not params:
            raise AutogradError("learn block: there is no learnable tensor to train "
                                "(make one with learnable(...) or `tensor w: f32[..] learnable`)")
        trace = symbolic.active()
        if trace is not None:
            if self.accumulation_steps > 1 or (self.scheduler is not None and self.scheduler.per_step):
                # whether this call steps (or what rate it uses) depends on host counters a replay would not see
                symbolic.abandon("backward with accumulation_steps or a per-step schedule")
            trace.guards.append(self._replays_here)
            trace.hooks.append(self._replayed_step)
        tape.backward(loss)
        self.micro += 1
        if self.micro < self.accumulation_steps:
            return
        self.micro = 0
        self.optimizer.attach(params)
        if self.accumulation_steps > 1:
            with tape.no_recording():
                for p in params:
                    if p.grad is not None:
                        p.grad = core.mul(p.grad, 1.0 / self.accumulation_steps)
        if self.clip_value is not None:
            clip_grad_value(params, self.clip_value)
        if self.clip is not None:
            clip_grad_norm(params, self.clip)
        if self.scheduler is not None:
            self.scheduler.before_step(self.optimizer, self.optimizer.steps)
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.steps += 1
        if self.progress is not None:
            self.progress.step(self.steps, self.epoch, loss)

    def _replays_here(self, _scalars) -> bool:
        return current() is self

    def _replayed_step(self, _scalars) -> None:
        self.optimizer.attach(tape.live_params())
        self.steps += 1
        if self.progress is not None:  # a replay's loss is not read back here: the line shows "-"
            self.progress.step(self.steps, self.epoch, None)


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
        if self.session.progress is not None:
            self.session.progress.close()
        self.state.learn = None
        self.state.tape.training = False
        self.session.optimizer.release()
        tape.zero_grad()
