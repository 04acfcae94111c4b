"""What builtins declared with `needs_ctx=True` receive: the program's output and input, its seeded
random generator, and a way back into the program (calling TL functions, the logic engine).

Invariants: every random draw of a program (rand, randn, sampling, token samplers) comes from
`rng`, so `tl run --seed N` or `seed(n)` makes the whole program reproducible. The run's autograd
and tracing state (its tape, the compiled function recording, the learn block: run_state.py) is
`state`, owned here; the interpreter runs every entry into TL code inside `run`, which makes that
state the current one on the running thread for the call's extent.
"""
from __future__ import annotations

import os
from typing import Any, TextIO

import numpy as np

from . import run_state
from .core import synchronize


class RunContext:
    """What builtins with `needs_ctx=True` receive: output, input, the seeded generator, the program."""

    def __init__(self, interp, out: TextIO, stdin: TextIO | None, seed: int | None):
        self.interp = interp
        self.out = out
        self.stdin = stdin
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.base_dir = os.getcwd()
        self.args: list[str] = []  # `tl run FILE ARGS...`: what args() returns
        self.state = run_state.RunState()

    def run(self, fn, *args) -> Any:
        """fn(*args) with this run's state current (see the module docstring)."""
        with run_state.entered(self.state):
            return fn(*args)

    def entered(self) -> run_state.entered:
        """`with ctx.entered():` this run's state is current (Python code driving a run's tape)."""
        return run_state.entered(self.state)

    @property
    def logic_engine(self):
        """The run's LogicEngine (created on first use); logic builtins reach it here."""
        return self.interp.logic_engine()

    def write(self, text: str) -> None:
        self.out.write(text)

    def reseed(self, seed: int | None) -> None:
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def wait_for_device(self) -> None:
        """Wait until the device has finished the program's queued work (bench timings)."""
        synchronize()

    def call(self, fn, args: list) -> Any:
        """Call a TL function value (user function or builtin) from a builtin."""
        return self.interp.call_value(fn, list(args))
