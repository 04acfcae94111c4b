"""The autograd and tracing state of one run: its tape, the compiled function recording now and the
learn block running now. The run's RunContext owns it (run_context.py); no module holds any.

Invariants:
- Ops, the tape and the tracing helpers reach the state of the run executing on this thread through
  `current()`; `entered(state)` makes a state current for its extent (the interpreter enters its
  run's state around every entry into TL code), so two runs on two threads never see each other's
  tape, trace or learn block.
- `_CURRENT` is a `ContextVar`: the variable is fixed at import; its value is per thread (a new
  thread starts with none). Code outside any run (tests driving the tape directly, the Python API
  before a run) gets a state of its own thread, made on first use.
- This module imports nothing of the package, so every layer that needs the state can import it.
"""
from __future__ import annotations

from contextvars import ContextVar
from typing import Any


class RunState:
    """`tape`: the run's autograd tape (autograd/tape.py), None until its first learnable tensor;
    `trace`: the compiled function's recording in progress (symbolic.Trace) or None; `learn`: the
    learn block running (autograd/session.py) or None."""

    __slots__ = ("tape", "trace", "learn")

    def __init__(self):
        self.tape: Any = None
        self.trace: Any = None
        self.learn: Any = None


_CURRENT: ContextVar[RunState] = ContextVar("tensorlogic_run_state")
get = _CURRENT.get  # get(None): the current state or None, without making one (the ops' fast path)


def current() -> RunState:
    """The state of the run executing here (one made for this thread if no run is entered)."""
    state = _CURRENT.get(None)
    if state is None:
        state = RunState()
        _CURRENT.set(state)
    return state


class entered:
    """`with entered(state):` state is current for the block (re-entrant: nested runs restore)."""

    __slots__ = ("state", "token")

    def __init__(self, state: RunState):
        self.state = state

    def __enter__(self) -> RunState:
        self.token = _CURRENT.set(self.state)
        return self.state

    def __exit__(self, *exc) -> None:
        _CURRENT.reset(self.token)
