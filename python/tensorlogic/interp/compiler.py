"""Compiles AST nodes once into Python closures; running a program only calls closures.

An expression compiles to `ev(frame) -> value`, a statement to `ex(frame) -> signal` where the
signal is None (go on), BREAK, CONTINUE or a `Ret`/`Val` carrying a value. Builtins, user
functions and local variable slots are resolved at compile time.

Invariants: closures capture AST nodes and compile-time facts only, never runtime values, so a
finished frame (a list) is the only owner of the values it held; every Python exception leaving a
call or operator closure is turned into a TLError that points at the node (no Python traceback
reaches a TL user): a TLRuntimeError when the program is at fault, a TLInternalError when Python code
of TensorLogic failed (builtins/convert.py's is_program_error decides); block exit clears the slots
the block declared.

The Compiler is assembled from one mixin per kind of node: statements.py, expressions.py, calls.py,
logic_bridge.py, learn_block.py; declared types are checked by type_check.py, and what operators do to values is
builtins/operators.py. The interpreter never touches the device: no module here imports `_core`.
"""
from __future__ import annotations

import traceback

from ..builtins import registry
from ..builtins.convert import BuiltinArgError, is_earlier_kernel_failure, is_program_error, to_bool
from ..lang.errors import SourceSpan, TLError, TLInternalError, TLRuntimeError
from .calls import CallCompiler
from .control import CompileError
from .expressions import ExpressionCompiler
from .learn_block import LearnCompiler
from .logic_bridge import LogicCompiler
from .statements import StatementCompiler
from .type_check import unknown_type


class Compiler(StatementCompiler, ExpressionCompiler, CallCompiler, LogicCompiler, LearnCompiler):
    """Compiles the items of one source file; shares program state with the Interpreter."""

    def __init__(self, interp, filename: str, source: str):
        self.interp = interp
        self.filename = filename
        self.lines = source.split("\n")

    # ------------------------------------------------------------ positions and errors

    def span(self, node) -> SourceSpan | None:
        """Where `node` is; None for a call made by a builtin (no node of this program)."""
        if node is None:
            return None
        line = getattr(node, "line", 0)
        column = getattr(node, "column", 0)
        text = self.lines[line - 1] if 1 <= line <= len(self.lines) else ""
        return SourceSpan(self.filename, line, column, text)

    def error(self, message: str, node, cls=TLRuntimeError) -> TLError:
        return cls(message, self.span(node))

    def convert(self, exc: BaseException, node, what: str | None = None) -> TLError:
        """Any exception raised while running `node` as a TLError pointing at it."""
        if isinstance(exc, TLError):
            exc.with_span(self.span(node))
            exc.__traceback__ = None
            return exc
        prefix = f"{what}: " if what else ""
        if isinstance(exc, (KeyboardInterrupt, BrokenPipeError)):
            raise exc  # not the program's fault: the CLI handles both
        if not is_program_error(exc):
            err = TLInternalError(f"{prefix}{type(exc).__name__}: {exc}", self.span(node),
                                  "".join(traceback.format_exception(exc)))
            exc.__traceback__ = None
            return err
        if isinstance(exc, BuiltinArgError):
            msg = _prefixed(what, str(exc))
        elif isinstance(exc, ZeroDivisionError):
            msg = prefix + "division by zero"
        elif isinstance(exc, RecursionError):
            msg = "maximum recursion depth exceeded (a function calls itself without end?)"
        elif isinstance(exc, MemoryError):
            msg = prefix + "out of host memory"
        else:
            text = str(exc) or type(exc).__name__
            head = text.split(":", 1)[0]
            if what and head.isidentifier() and ":" in text and (
                    what.startswith("'") or is_earlier_kernel_failure(exc)):
                # an operator's error that a named op raised ("matmul: shapes ..."), or an earlier
                # op's kernel failure reported at this read ("embedding: id 100 ...")
                msg = text
            else:
                msg = _prefixed(what, text)
        err = TLRuntimeError(msg, self.span(node))
        exc.__traceback__ = None
        return err

    def check_declared_type(self, typ, generics=()) -> None:
        """Record a declared type that names nothing TL knows (`tl check` lists them all; `tl run`
        stops before running)."""
        why = unknown_type(typ, self.interp.structs, generics)
        if why is not None:
            self.interp.type_errors.append(self.error(why, typ, CompileError))

    def truth_at(self, v, node) -> bool:
        """The truth value of a condition, or a TLError at `node`."""
        try:
            return to_bool(v)
        except BuiltinArgError as e:
            raise self.error(str(e), node) from None


def _prefixed(what: str | None, text: str) -> str:
    """`what: text`, said once: no second prefix when the text already starts with `what`, and an
    inner builtin's own prefix ("full: ..." raised inside zeros) gives way to the one the user called."""
    if not what:
        return text
    if text.startswith(what + ":") or text.startswith(what + " "):
        return text
    head, sep, rest = text.partition(": ")
    if sep and head != what and head in registry.BUILTINS:
        text = rest
    return f"{what}: {text}"
