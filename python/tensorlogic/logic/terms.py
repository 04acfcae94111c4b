"""Terms, atoms and rules: the engine's own small data model, independent of the TL AST.

A `Name` is a bare identifier whose role is decided by the engine: in facts it is a constant;
in rules and queries it is a variable when it starts with an upper-case letter or `_` and is not
already a known constant of any entity type, else a constant. `Var`/`Const` force the role.
`pos` is an opaque source position carried into errors; it never takes part in equality.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union


@dataclass(frozen=True)
class Var:
    name: str
    pos: Any = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Const:
    value: Union[str, int]
    pos: Any = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class Name:
    text: str
    pos: Any = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return self.text


ARITH_OPS = ("+", "-", "*", "/", "%")


@dataclass(frozen=True)
class Arith:
    """An arithmetic term over numbers, `N + 1` (op in + - * / %; `neg` negates `left`; `/` is true
    division, a float, as everywhere in TL; integers stay exact otherwise): in a rule's
    head or in a comparison of its body, computed from the body's bindings."""
    op: str
    left: Any
    right: Any = None
    pos: Any = field(default=None, compare=False, repr=False)

    def variables(self) -> list[str]:
        """Names of the Name/Var leaves (whether each is a variable is the engine's reading)."""
        out: list[str] = []
        for side in (self.left, self.right):
            if isinstance(side, Arith):
                out += side.variables()
            elif isinstance(side, Var):
                out.append(side.name)
            elif isinstance(side, Name):
                out.append(side.text)
        return out

    def __str__(self) -> str:
        if self.op == "neg":
            return f"-{_operand_text(self.left)}"
        return f"{_operand_text(self.left)} {self.op} {_operand_text(self.right)}"


def _operand_text(term) -> str:
    return f"({term})" if isinstance(term, Arith) and term.op != "neg" else str(term)


AGGREGATE_OPS = ("count", "sum", "min", "max")


@dataclass(frozen=True)
class Aggregate:
    """`count(Y)`, `sum(V)`, `min(V)`, `max(V)` as a head argument: computed per group (the head's
    other arguments) over the distinct assignments of the body's variables (aggregate.py)."""
    op: str
    term: Any  # Name / Var / Arith over body variables
    pos: Any = field(default=None, compare=False, repr=False)

    def variables(self) -> list[str]:
        if isinstance(self.term, Arith):
            return self.term.variables()
        if isinstance(self.term, Var):
            return [self.term.name]
        if isinstance(self.term, Name):
            return [self.term.text]
        return []

    def __str__(self) -> str:
        return f"{self.op}({self.term})"


Term = Union[Var, Const, Name, Arith, Aggregate]


@dataclass(frozen=True)
class Atom:
    relation: str
    args: tuple  # tuple[Term, ...]
    negated: bool = False
    pos: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "args", tuple(self.args))

    def __str__(self) -> str:
        text = f"{self.relation}({', '.join(str(a) for a in self.args)})"
        return f"not {text}" if self.negated else text


COMPARISON_OPS = ("==", "!=", "<", "<=", ">", ">=")


@dataclass(frozen=True)
class Comparison:
    """A body constraint `X != Y`, `X < 3`: compares constants (numbers numerically, names
    alphabetically); both sides must be constants or variables bound by positive atoms."""
    op: str
    left: Term
    right: Term
    pos: Any = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right}"


@dataclass(frozen=True)
class Rule:
    head: Atom
    body: tuple  # tuple[Atom | Comparison, ...]
    temperature: float | None = None  # None or 0: hard step; > 0: soft step
    pos: Any = field(default=None, compare=False, repr=False)
    evaluation: str | None = None  # "dense" / "sparse" (`@dense`, `@sparse`): force its stratum's path

    def __post_init__(self):
        object.__setattr__(self, "body", tuple(self.body))

    def __str__(self) -> str:
        return f"{self.head} <- {', '.join(str(a) for a in self.body)}"


def parse_atom(text: str, pos: Any = None) -> Atom:
    """Build an Atom from `Rel(a, X)` or `not Rel(a, X)` text (tests and the Python API)."""
    text = text.strip()
    negated = False
    if text.startswith("not "):
        negated, text = True, text[4:].strip()
    open_at = text.find("(")
    if open_at <= 0 or not text.endswith(")"):
        raise ValueError(f"not an atom: {text!r}")
    relation = text[:open_at].strip()
    inner = text[open_at + 1:-1].strip()
    args = []
    for part in (inner.split(",") if inner else []):
        args.append(_parse_term(part))
    return Atom(relation, tuple(args), negated, pos)


def parse_rule(text: str, temperature: float | None = None, pos: Any = None,
               evaluation: str | None = None) -> Rule:
    """Build a Rule from `Head(X) <- A(X, Y), not B(Y)` text (tests and the Python API)."""
    head_text, sep, body_text = text.partition("<-")
    if not sep:
        raise ValueError(f"not a rule: {text!r}")
    parts, depth, current = [], 0, ""
    for ch in body_text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    body = []
    for part in parts:
        if not part.strip():
            continue
        for op in ("!=", "==", "<=", ">=", "<", ">"):
            if op in part and "(" not in part:
                left, right = part.split(op, 1)
                body.append(Comparison(op, _parse_term(left), _parse_term(right)))
                break
        else:
            body.append(parse_atom(part))
    return Rule(parse_atom(head_text), tuple(body), temperature, pos, evaluation)


def _parse_term(text: str):
    text = text.strip()
    for op in AGGREGATE_OPS:
        if text.startswith(op + "(") and text.endswith(")"):
            return Aggregate(op, _parse_term(text[len(op) + 1:-1]))
    if text.lstrip("-").isdigit():
        return Const(int(text))
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return Const(text[1:-1])
    return Name(text)
