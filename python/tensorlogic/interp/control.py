"""The signals compiled code passes back instead of raising: how a statement closure ends.

A statement closure returns None (go on), BREAK, CONTINUE, a `Ret` (`return value`) or a `Val` (the
value of a block's last expression). Only `NonLocalReturn` travels as an exception: a `return` inside
an `if` used as a value, unwinding to the enclosing call.
"""
from __future__ import annotations

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


MAX_CALL_DEPTH = 900
