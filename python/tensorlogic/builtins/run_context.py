"""What builtins declared with `needs_ctx=True` receive: the program's output and input, its seeded
random generator, and a way back into the program (calling TL functions, the logic engine).

Invariant: every random draw of a program (rand, randn, sampling, token samplers) comes from
`rng`, so `tl run --seed N` or `seed(n)` makes the whole program reproducible.
"""
from __future__ import annotations

import os
from typing import Any, TextIO

import numpy as np

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
