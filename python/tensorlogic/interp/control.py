"""The signals compiled code passes back instead of raising: how a statement closure ends.

A statement closure returns None (go on), BREAK, CONTINUE, a `Ret` (`return value`) or a `Val` (the
value of a block's last expression). Only `NonLocalReturn` travels as an exception: a `return` inside
an `if` used as a value, unwinding to the enclosing call.
"""
from __future__ import annotations

import os

from ..lang.errors import TLError

class _Signal:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


BREAK = _Signal("break")
CONTINUE = _Signal("continue")


class Ret:
    """`return value` leaving a function."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class Val:
    """The value of a block's last expression (function bodies, if-expressions)."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value



class NonLocalReturn(Exception):
    """`return` inside an `if` used as a value: unwinds to the enclosing function call."""

    def __init__(self, value):
        super().__init__()
        self.value = value


class CompileError(TLError):
    """A static error found while compiling (e.g. `break` outside a loop)."""


def _max_call_depth() -> int:
    text = os.environ.get("TL_MAX_CALL_DEPTH", "")
    try:
        return max(int(text), 1) if text else 10_000
    except ValueError:
        return 10_000


# TL calls that may be active at once. A TL call takes about 6 Python frames (more in deep
# expressions), and Python 3.11 runs Python-to-Python calls without using the C stack: 50,000 nested
# TL calls ran on an 8 MiB main-thread stack (measured), so 10,000 leaves a wide margin. The
# interpreter runs TL code on deep threads (deep_stack.py) whose recursion limit is
# PYTHON_FRAMES_PER_CALL times this, with a C stack sized for that limit.
MAX_CALL_DEPTH = _max_call_depth()
PYTHON_FRAMES_PER_CALL = 25
