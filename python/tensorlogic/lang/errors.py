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
            lines += collapse_cycles(entries)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


MAX_CYCLE = 16  # longest run of frames recognised as one repeating cycle (mutual recursion)


def collapse_cycles(entries: list[str]) -> list[str]:
    """Traceback lines with runs of a repeating cycle (one frame for plain recursion, several for
    mutual recursion) shown three times and then counted: a 1,000-deep f -> g -> f -> ... is a
    few lines, not a thousand."""
    out: list[str] = []
    i, n = 0, len(entries)
    while i < n:
        for k in range(1, min(MAX_CYCLE, (n - i) // 4) + 1):
            block = entries[i:i + k]
            copies = 1
            while entries[i + copies * k:i + (copies + 1) * k] == block:
                copies += 1
            if copies > 3:
                out += block * 3
                what = "previous line" if k == 1 else f"previous {k} lines"
                out.append(f"  [{what} repeated {copies - 3} more times]")
                i += copies * k
                break
        else:
            out.append(entries[i])
            i += 1
    return out


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


class TLWarning(TLError):
    """Not an error: something `tl check` points out that runs but is likely a mistake."""

    kind = "warning"
