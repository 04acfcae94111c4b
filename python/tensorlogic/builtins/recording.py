"""The device side of compiled functions (`@compile fn`, interp/compiled.py): the native recording
and what the driver needs to know about tensors, so that the interpreter never touches the device.

Invariant: a recording made here is the only thing the driver replays; `ReplayRefused` is the
runtime's refusal (a buffer it used was released), after which the driver records anew.
"""
from __future__ import annotations

from typing import Any

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
