"""`tl check`: everything that can be found without running a program.

Finds syntax errors, import errors (missing files, cycles), compile errors (`break` outside a loop,
unknown cast types, bad logic statements), calls with the wrong number of arguments to builtins and
user functions, names or functions defined nowhere, unknown type names, unsafe rules and rules
without a stratification; and warns (TLWarning, not an error) where `x = e` declares a name no `let`
declared. Every problem is reported, in source order. Invariant: nothing of the program runs
(no top-level statement, no main), so checking has no side effects.
"""
from __future__ import annotations

import io

from ..lang.errors import TLError, TLRuntimeError
from .interpreter import Interpreter


def check_file(path: str, source: str | None = None) -> list[TLError]:
    """Every problem found in the program at `path` (its text is `source` when given)."""
    interp = Interpreter(out=io.StringIO())
    interp.collect_errors = True
    try:
        interp.load_file(path, source)
    except TLError as e:
        e.__traceback__ = None
        return [e]
    errors: list[TLError] = list(interp.static_errors) + list(interp.type_errors) + list(interp.warnings)
    known = set(interp.functions) | set(interp.global_names) | set(interp.structs)
    seen: set[tuple[str, int, int]] = set()
    for name, span in interp.unresolved_calls:
        if name not in known and (name, span.line, span.column) not in seen:
            seen.add((name, span.line, span.column))
            errors.append(TLRuntimeError(f"undefined function '{name}'", span))
    for name, span in interp.unresolved_names:
        if name not in known and (name, span.line, span.column) not in seen:
            seen.add((name, span.line, span.column))
            errors.append(TLRuntimeError(f"undefined name '{name}'", span))
    errors += _logic_errors(interp)
    errors.sort(key=lambda e: (e.span.filename, e.span.line, e.span.column) if e.span else ("", 0, 0))
    interp.close()
    return errors


def _logic_errors(interp: Interpreter) -> list[TLError]:
    """Unsafe rules (each) and a missing stratification, from the rules' text alone."""
    if not interp.static_rules:
        return []
    from ..logic import LogicError
    from ..logic.safety import check_safety, check_stratified
    errors = []
    for rule in interp.static_rules:
        try:
            check_safety(rule)
        except LogicError as e:
            errors.append(TLRuntimeError(e.message, e.pos))
    try:
        check_stratified(interp.static_rules)
    except LogicError as e:
        errors.append(TLRuntimeError(e.message, e.pos))
    return errors
