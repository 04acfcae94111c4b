"""Python API: `tensorlogic.run(path_or_source, *, backend=None) -> Result`.

Runs a TL program (a path to a .tl file, or source text) in this process with its output captured.
Invariant: a TL error never escapes as an exception; it is returned in `Result.error` (with the
text a user would see in `Result.error_text`) next to the output printed before it.
"""
from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from typing import Any

from .lang.errors import TLError, TLInternalError


@dataclass
class Result:
    output: str
    env: dict[str, Any] = field(default_factory=dict)  # top-level bindings after the run
    error: TLError | None = None
    tests_passed: int = 0
    tests_failed: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None and self.tests_failed == 0

    @property
    def internal_error(self) -> bool:
        """The error is a bug in TensorLogic (a Python exception inside a builtin), not the program's."""
        return isinstance(self.error, TLInternalError)

    @property
    def error_text(self) -> str:
        return self.error.format() if self.error is not None else ""


def _looks_like_path(text: str) -> bool:
    return "\n" not in text and text.endswith(".tl") and len(text) < 4096


def run(path_or_source: str | os.PathLike, *, backend: str | None = None, seed: int | None = None,
        test: bool = False, stdin: str | None = None, filename: str | None = None) -> Result:
    """Run a TL program and return its captured output and final top-level environment.

    `path_or_source`: a path to a `.tl` file (str ending in .tl, or PathLike) or TL source text.
    `backend`: "cpu", "cuda" or "metal" (initializes `_core` on it); `seed` seeds the generator;
    `test=True` runs the test blocks instead of main; `stdin` feeds `input()`.
    """
    from .interp.interpreter import Interpreter
    if backend is not None:
        from .builtins.convert import core
        core.init(backend)
    out = io.StringIO()
    interp = Interpreter(out=out, stdin=io.StringIO(stdin) if stdin is not None else None, seed=seed)
    result = Result(output="")
    try:
        if isinstance(path_or_source, os.PathLike) or _looks_like_path(str(path_or_source)):
            loaded = interp.load_file(os.fspath(path_or_source))
        else:
            loaded = interp.load_source(str(path_or_source), filename or "<source>")
        interp.run_top_level(loaded)
        if test:
            outcomes = interp.run_tests(loaded)
            result.tests_passed = sum(o.passed for o in outcomes)
            result.tests_failed = len(outcomes) - result.tests_passed
            failures = [o.error for o in outcomes if not o.passed]
            if failures:
                for f in failures:
                    f.__traceback__ = None
                result.error = failures[0]
        else:
            interp.run_main(loaded)
    except TLError as e:
        e.__traceback__ = None
        e.__context__ = None
        result.error = e
    result.output = out.getvalue()
    result.env = dict(interp.globals)
    interp.close()
    return result
