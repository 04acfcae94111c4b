"""Errors the logic engine raises; every one is a LogicError with a one-line message.

The interpreter turns a LogicError into a TL error at the source position it passed in (`pos`),
so messages never include a position themselves and never a Python traceback.
"""
from __future__ import annotations

from typing import Any


class LogicError(Exception):
    """Base class: a user mistake in a logic program (or a limit it ran into)."""

    def __init__(self, message: str, pos: Any = None):
        super().__init__(message)
        self.message = message
        self.pos = pos  # whatever position object the caller attached to the term/rule/fact


class UnknownRelationError(LogicError):
    """A rule body or query names a relation with no declaration, facts or rules."""


class ArityError(LogicError):
    """A relation is used with a different number of arguments than declared."""


class UnsafeRuleError(LogicError):
    """A head variable, or a variable of a negated atom, is not bound by a positive body atom."""


class StratificationError(LogicError):
    """A relation depends on its own negation (through a cycle), so no stratification exists."""


class LogicTypeError(LogicError):
    """A constant outside a closed entity type, or a variable used at two different entity types."""


class ConvergenceError(LogicError):
    """Soft (weighted) rules did not settle to a fixpoint within the iteration limit."""
