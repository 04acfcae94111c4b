"""Errors a TL user sees: `file:line:col: error: message`, the source line, a caret, and (for
runtime errors) a TL traceback of function names and `file:line`.

Invariant: a TLError never holds references to runtime values (tensors) or Python frames, so an
error kept around (by the REPL, by tests) cannot keep device memory alive.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceSpan:
    filename: str
    line: int
    column: int
    source_line: str = ""


class TLError(Exception):
    """Base of every error shown to a TL user."""

    kind = "error"

    def __init__(self, message: str, span: SourceSpan | None = None, note: str | None = None):
        super().__init__(message)
        self.message = message
        self.span = span
        self.note = note
        # TL traceback, innermost last: (description, span) pairs added as the error unwinds calls.
        self.trace: list[tuple[str, SourceSpan]] = []

    def with_span(self, span: SourceSpan) -> "TLError":
        if self.span is None:
            self.span = span
        return self

    def format(self, show_trace: bool = True) -> str:
        lines = []
        if self.span is not None:
            sp = self.span
            lines.append(f"{sp.filename}:{sp.line}:{sp.column}: {self.kind}: {self.message}")
            if sp.source_line:
                text = sp.source_line.rstrip("\r\n").expandtabs(4)
                raw = sp.source_line.rstrip("\r\n")
                caret_col = len(raw[: max(sp.column - 1, 0)].expandtabs(4))
                lines.append(f"    {text}")
                lines.append("    " + " " * caret_col + "^")
        else:
            lines.append(f"{self.kind}: {self.message}")
        if self.note:
            lines.append(f"note: {self.note}")
        if show_trace and self.trace:
            lines.append("TL traceback (most recent call last):")
            entries = [f"  {sp.filename}:{sp.line}: {desc}" for desc, sp in reversed(self.trace)]
            repeats = 0
            for i, entry in enumerate(entries):
                if i > 0 and entry == entries[i - 1]:
                    repeats += 1
                    if repeats >= 3:
                        continue
                elif repeats >= 3:
                    lines.append(f"  [previous line repeated {repeats - 2} more times]")
                    repeats = 0
                else:
                    repeats = 0
                lines.append(entry)
            if repeats >= 3:
                lines.append(f"  [previous line repeated {repeats - 2} more times]")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


class TLSyntaxError(TLError):
    """The program text does not follow grammar.lark."""


class TLRuntimeError(TLError):
    """A TL program failed while running (bad value, shape mismatch, undefined name...)."""


class TLTestFailure(TLRuntimeError):
    """An assertion failed (assert, assert_eq, assert_about_eq) or panic was called."""


class TLInternalError(TLError):
    """A bug in TensorLogic, not in the program: a Python exception (KeyError, TypeError, ...) escaped
    from builtin or interpreter code. Shown as an internal error (exit status 4, docs/exit-codes.md);
    `python_traceback` keeps the Python traceback as text (never frames) for `--debug`."""

    kind = "internal error"

    def __init__(self, message: str, span: SourceSpan | None = None, python_traceback: str = ""):
        super().__init__(message, span, note="this is a bug in TensorLogic; run with --debug for the Python "
                                             "traceback")
        self.python_traceback = python_traceback


class TLImportError(TLError):
    """An import could not be resolved (missing file, cycle)."""
