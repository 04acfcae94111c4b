"""`tl repl`: an interactive prompt whose bindings persist across inputs.

Input continues over several lines while the parser reports an unexpected end of input (open
braces, an unfinished expression). A bare expression prints its value; relations, facts, rules and
queries work as in a program (a query prints its answers). `:help`, `:vars`, `:quit`.
Piped input works the same, without prompts. Invariant: an error in one input never ends the
session and never loses bindings made by earlier inputs.
"""
from __future__ import annotations

import sys
from typing import TextIO

from .lang import ast
from .lang.errors import TLError, TLSyntaxError

HELP = """Type TL statements or declarations; a bare expression prints its value.
  :vars    list the bindings made so far
  :help    this text
  :quit    leave (also Ctrl-D)
Multi-line input continues while braces are open. `tl help builtins` lists the builtins."""


def run_repl(seed: int | None = None, stdin: TextIO | None = None, out: TextIO | None = None) -> int:
    from .builtins.formatting import format_value
    from .interp.deep_stack import run_deep
    from .interp.interpreter import Interpreter
    from .lang.parser import parse

    stdin = stdin or sys.stdin
    out = out or sys.stdout
    interactive = stdin.isatty()
    interp = Interpreter(out=out, stdin=stdin, seed=seed)
    count = 0
    status = 0
    if interactive:
        out.write("TensorLogic REPL — :help for help, :quit to leave\n")
    try:
        while True:
            buffer = ""
            prompt = "tl> "
            while True:
                if interactive:
                    out.write(prompt)
                    out.flush()
                try:
                    line = stdin.readline()
                except KeyboardInterrupt:  # Ctrl-C at the prompt drops the pending input
                    out.write("\n")
                    buffer = ""
                    prompt = "tl> "
                    continue
                if not line:
                    if buffer.strip():
                        run_deep(_run_input, interp, parse, buffer, count, out, format_value, final=True)
                    return status
                buffer += line
                stripped = buffer.strip()
                if not stripped:
                    buffer = ""
                    continue
                if stripped.startswith(":") and "\n" not in stripped:
                    cmd = stripped
                    if cmd in (":quit", ":q", ":exit"):
                        return status
                    if cmd in (":help", ":h"):
                        out.write(HELP + "\n")
                    elif cmd == ":vars":
                        for name in sorted(interp.globals):
                            out.write(f"{name} = {_short(format_value(interp.globals[name], True))}\n")
                        for name in sorted(interp.functions):
                            out.write(f"fn {name}\n")
                    else:
                        out.write(f"unknown command {cmd} (:help, :vars, :quit)\n")
                    buffer = ""
                    break
                count += 1
                # on a deep thread: parsing and running recurse with the nesting (interp/deep_stack.py)
                done = run_deep(_run_input, interp, parse, buffer, count, out, format_value, final=False)
                if done:
                    break
                prompt = "... "
    finally:
        interp.close()


def _short(text: str, limit: int = 200) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


def _run_input(interp, parse, source: str, count: int, out, format_value, final: bool) -> bool:
    """Run one input; returns False when more lines are needed."""
    filename = f"<repl:{count}>"
    try:
        program = parse(source, filename)
    except TLSyntaxError as e:
        if not final and e.message.startswith("unexpected end of file"):
            return False
        out.write(e.format() + "\n")
        return True
    items = list(program.items)
    show = False
    if items and isinstance(items[-1], ast.ExprStmt) and not _is_print_call(items[-1].expr) \
            and not _is_logic_statement(interp, items[-1].expr):
        last = items[-1]
        items[-1] = ast.Assign(last.line, last.column, ast.Name(last.line, last.column, "_"), None, last.expr)
        show = True
    program = ast.Program(tuple(items), program.filename, program.source)
    try:
        loaded = interp.load(program)
        interp.run_top_level(loaded)
        interp.run_main(loaded)
        if show:
            value = interp.globals.get("_")
            if value is not None:
                out.write(format_value(value, True) + "\n")
    except TLError as e:
        e.__traceback__ = None
        e.__context__ = None
        out.write(e.format() + "\n")
    except KeyboardInterrupt:  # Ctrl-C cancels this statement; the session and its variables stay
        out.write("interrupted\n")
    except Exception as e:  # noqa: BLE001 - a bug must not end the session
        out.write(f"internal error: {type(e).__name__}: {e}\n")
    return True


def _is_print_call(expr) -> bool:
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in (
        "print", "println")


def _is_logic_statement(interp, expr) -> bool:
    """A query (it prints its answers as in a program) or a fact `Rel(a, b)`: a call of a relation,
    or of a capitalised name that is no function, builtin or variable."""
    from .builtins.registry import BUILTINS
    if isinstance(expr, ast.Query):
        return True
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name)):
        return False
    name = expr.func.id
    if interp.is_relation(name):
        return True
    return name[:1].isupper() and name not in interp.functions and name not in interp.global_names \
        and name not in BUILTINS
