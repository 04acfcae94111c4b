"""Property test: the example programs (examples/*.tl, examples/logic/*.tl; not chat.tl, which loads a
model), mutated at the token level (delete, duplicate, swap, replace with another token of the file,
cut), through the parser and the interpreter: only TL errors come out, never another exception type,
never a hang. Loops a mutation makes endless are stopped by a per-case time budget (a Python-level
alarm); a case that does not return even then (a hang in native code) fails through faulthandler."""
from __future__ import annotations

import faulthandler
import re
import signal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlogic

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p for p in [*ROOT.glob("examples/*.tl"), *ROOT.glob("examples/logic/*.tl")]
                  if not p.name.startswith(("chat", "llm")))
# a token with the blanks before it, so that mutated programs keep their spacing (`@name`, `+=`)
TOKEN = re.compile(r'[ \t]*(?:"(?:[^"\\\n]|\\.)*"|//[^\n]*|\d+\.\d*|\d+|\w+|::|->|<-|[-+*/=!<>]=|&&|\|\||\*\*|\S)|\n')
SOFT_BUDGET_S = 5       # a mutated program may loop for ever: that is the program, not a hang
HARD_BUDGET_S = 60      # no return even after the alarm: a hang in native code


class CaseTimeout(BaseException):
    """Raised by the alarm; a BaseException so no `except Exception` in the interpreter can hide it."""


def _tokens(path: Path) -> list[str]:
    return TOKEN.findall(path.read_text())


SOURCES = {p.name: _tokens(p) for p in EXAMPLES}


NUMBERS = ["0", "1", "-1", "2", "3", "7", "0.0", "0.5", "-2.5", "1e308", "100000", "4611686018427387904"]


def _kind(token: str) -> str:
    token = token.lstrip(" \t")
    if token[:1].isdigit():
        return "number"
    if token[:1] == '"':
        return "string"
    if token[:1].isalpha() or token[:1] == "_":
        return "name"
    return "punct"


@st.composite
def mutated_program(draw):
    """Structural mutations (delete, duplicate, swap, replace, cut: mostly syntax errors) one time in
    three; otherwise names, numbers and strings replaced by others of the file (or odd numbers), which
    keeps the syntax and sends the program into the interpreter with wrong values."""
    name = draw(st.sampled_from(sorted(SOURCES)))
    toks = list(SOURCES[name])
    structural = draw(st.integers(0, 2)) == 0
    for _ in range(draw(st.integers(1, 4 if structural else 3))):
        if not toks:
            break
        i = draw(st.integers(0, len(toks) - 1))
        if not structural:
            kind = _kind(toks[i])
            if kind == "punct":
                continue
            lead = toks[i][:len(toks[i]) - len(toks[i].lstrip(" \t"))]
            pool = [t.lstrip(" \t") for t in SOURCES[name] if _kind(t) == kind]
            if kind == "number":
                pool += NUMBERS
            toks[i] = lead + draw(st.sampled_from(pool))
            continue
        kind = draw(st.sampled_from(["delete", "duplicate", "swap", "replace", "cut"]))
        if kind == "delete":
            del toks[i]
        elif kind == "duplicate":
            toks.insert(i, toks[i])
        elif kind == "swap":
            j = draw(st.integers(0, len(toks) - 1))
            toks[i], toks[j] = toks[j], toks[i]
        elif kind == "replace":
            toks[i] = draw(st.sampled_from(SOURCES[name] + [" 0", " -1", " []", " 1e308", ' ""', "(", "}", "?"]))
        else:
            toks = toks[:i]
    return name, "".join(toks)


def _alarm(signum, frame):
    raise CaseTimeout()


@pytest.fixture(autouse=True)
def watchdog():
    old = signal.signal(signal.SIGALRM, _alarm)
    faulthandler.dump_traceback_later(HARD_BUDGET_S * 4, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()
    signal.signal(signal.SIGALRM, old)


def test_examples_found():
    assert len(SOURCES) >= 6 and all(SOURCES.values())


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(mutated_program())
def test_mutated_examples_fail_only_with_tl_errors(case):
    name, source = case
    faulthandler.dump_traceback_later(HARD_BUDGET_S, exit=True)
    signal.alarm(SOFT_BUDGET_S)
    try:
        result = tensorlogic.run(source, filename=name, stdin="")
    except CaseTimeout:
        # only a program that can loop may run out of time
        assert re.search(r"\b(while|loop|for|fn)\b", source), f"{name} mutation ran past {SOFT_BUDGET_S}s"
        return
    finally:
        signal.alarm(0)
        faulthandler.cancel_dump_traceback_later()
    # a KeyError, TypeError, AttributeError... from inside a builtin is a bug shown to the user as if it
    # were theirs: the interpreter reports it as an internal error (builtins/convert.py's is_program_error)
    assert not result.internal_error, f"{result.error_text}\n{source}"
