"""The device side of compiled functions (`@compile fn`, interp/compiled.py): the native recording
and what the driver needs to know about tensors, so that the interpreter never touches the device.

Invariant: a recording made here is the only thing the driver replays; `ReplayRefused` is the
runtime's refusal (a buffer it used was released), after which the driver records anew.
Autograd (a compiled training step): a tensor argument that takes part in differentiation would be
replaced by an untracked slot, so it abandons the recording (`argument_problem`); the results'
tape entries are dropped before the recording finishes (`detach_results`), so a returned loss does
not keep the step's graph alive (results of a compiled function carry no gradient).
"""
from __future__ import annotations

from typing import Any

from .autograd import tape
from .core import Tensor, core

ReplayRefused = core.ReplayRefused


def new_recording(n_scalars: int) -> Any:
    """A `_core.Recording` with `n_scalars` scalar inputs (see cpp/runtime/recording.h)."""
    return core.Recording(n_scalars)


def is_tensor(v: Any) -> bool:
    return isinstance(v, Tensor)


def tensor_key(t: Any) -> tuple:
    """What of a tensor argument goes into a compiled function's signature."""
    return (tuple(t.shape), t.dtype)


def argument_problem(tensors: list) -> str | None:
    """Why these tensor arguments cannot be recorded (None if they can)."""
    if any(tape.is_tracked(t) for t in tensors):
        return ("a learnable tensor, or one computed from one, is passed as an argument (its gradient "
                "would not flow through the recording's copy): read learnables as globals")
    return None


def detach_results(outs: list) -> None:
    """Forget the tape entries of a recorded call's results (see the module docstring)."""
    for t in outs:
        tape.forget(t)


def note_gradients(trace) -> None:
    """Remember which gradients exist before a recording starts: a recorded backward adding to one of
    them abandons the recording (a replay would not see the host's gradient of that later call)."""
    trace.outside_grads = {id(p.grad) for p in tape.live_params() if p.grad is not None}
