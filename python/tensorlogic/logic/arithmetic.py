"""Integer arithmetic in logic rules (`Next(N + 1) <- Num(N), N < 5`, `A + B > C`).

A rule with arithmetic terms in its head or in a comparison is split in two (`split_arithmetic`):
an ordinary rule binds its variables into a hidden relation, and `derive_arithmetic` computes the
head from that relation's rows with exact Python integers. LogicEngine.infer (engine.py) runs a
stratum again while its arithmetic rules derive new tuples, at most ROUND_LIMIT times, and stops
when an entity type would hold more than DOMAIN_LIMIT constants.

Invariant: arithmetic sees only rows of completed strata (so what it derives is sound), and each
body row is evaluated once per inference (`processed`), whatever the number of rounds.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import LogicError
from .terms import Arith, Atom, Comparison, Const, Name, Rule, Var

ROUND_LIMIT = 5_000  # re-runs of a stratum whose arithmetic rules derive new tuples (a chain N -> N + 1 takes one each)
DOMAIN_LIMIT = 1 << 20  # constants an entity type may reach through arithmetic


@dataclass
class ArithRule:
    """A rule with arithmetic terms, split in two: `body_rule` (an ordinary rule) binds the variables
    into a hidden relation; the head and the arithmetic comparisons are computed from its rows."""
    rule: Rule
    head: Atom
    body_rule: Rule
    variables: tuple  # names, the hidden relation's arguments in order
    comparisons: tuple  # Comparison with an Arith side


class DependencyEdge:
    """A stratification edge without a compiled rule: `head` depends on `on` (positively)."""

    def __init__(self, head: str, on: str, source: Rule):
        self.head = Atom(head, ())
        self.body = (Atom(on, ()),)
        self.source = source


def split_arithmetic(rule: Rule, index: int) -> ArithRule | None:
    """None for a rule without arithmetic terms; else its two halves (see ArithRule)."""
    arith_comparisons = tuple(b for b in rule.body if isinstance(b, Comparison)
                              and (isinstance(b.left, Arith) or isinstance(b.right, Arith)))
    if not arith_comparisons and not any(isinstance(t, Arith) for t in rule.head.args):
        for atom in rule.body:
            if isinstance(atom, Atom) and any(isinstance(t, Arith) for t in atom.args):
                break
        else:
            return None
    for atom in rule.body:
        if isinstance(atom, Atom) and any(isinstance(t, Arith) for t in atom.args):
            raise LogicError(f"arithmetic in the body atom `{atom}` of rule `{rule}`: bind a variable and "
                             f"compare it, like `Edge(X, Y), Y == X + 1`", atom.pos or rule.pos)
    names: list[str] = []
    for term in list(rule.head.args) + [side for c in arith_comparisons for side in (c.left, c.right)]:
        leaves = term.variables() if isinstance(term, Arith) else (
            [term.name] if isinstance(term, Var) else [term.text] if isinstance(term, Name) else [])
        for name in leaves:
            if name not in names and name != "_" and (name[:1].isupper() or name[:1] == "_"):
                names.append(name)
    hidden = Atom(f"${rule.head.relation}#{index}", tuple(Name(n) for n in names), False, rule.head.pos)
    body = tuple(b for b in rule.body if b not in arith_comparisons)
    return ArithRule(rule, rule.head, Rule(hidden, body, None, rule.pos, rule.evaluation), tuple(names), arith_comparisons)


COMPARE = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
            ">=": np.greater_equal}


def evaluate(term, values: dict, rows: int, known: set, rule: Rule, numeric: bool = True) -> np.ndarray:
    """A term's value for every row: when numeric an object array of Python ints (arithmetic needs
    integers, and TL's ints are exact: int64 would wrap), else the constants as they are."""
    if isinstance(term, Arith):
        left = evaluate(term.left, values, rows, known, rule)
        if term.op == "neg":
            return -left
        right = evaluate(term.right, values, rows, known, rule)
        if term.op in ("%", "/"):
            if np.any(right == 0):
                raise LogicError(f"rule `{rule}` divides by zero in `{term}`", term.pos or rule.pos)
            if term.op == "/":
                return np.array([a / b for a, b in zip(left.tolist(), right.tolist())] + [None],
                                dtype=object)[:-1]  # Python's true division: exact ints in, float out
            return np.mod(left, right)
        return {"+": np.add, "-": np.subtract, "*": np.multiply}[term.op](left, right)
    if isinstance(term, Const):
        column = np.full(rows, term.value, dtype=object)
    else:
        name = term.name if isinstance(term, Var) else term.text
        if name in values:
            column = values[name]
        else:
            column = np.full(rows, name, dtype=object)
    if not numeric:
        return column
    values = column.tolist()
    if not all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in values):
        bad = next(v for v in values if not isinstance(v, (int, float, np.integer, np.floating)))
        raise LogicError(f"rule `{rule}` computes with {bad!r}, which is not a number (not an integer "
                         f"or a float)", rule.pos)
    return np.array([float(v) if isinstance(v, (float, np.floating)) else int(v) for v in values] + [None],
                    dtype=object)[:-1]  # 1-D even if empty


def derive_arithmetic(engine, component, tables: dict, derived: dict, processed: dict) -> bool:
    """Compute the heads of the arithmetic rules whose body relation is in `component` (just
    completed) from its rows; add the new head tuples to `derived`. True if there were any.
    Reads the engine's arithmetic rules, facts and domains; new numbers join their domains.
    Semi-naive: a body row seen in an earlier round of this inference (`processed`; rows only
    grow while a stratum repeats, and domain indices are stable) already gave its head, so
    each round costs its new rows, not all of them (a chain of n numbers was O(n^2))."""
    grew = False
    known = engine._known_constants()
    for number, arith in enumerate(engine._arith):
        if arith.body_rule.head.relation not in component:
            continue
        body_name = arith.body_rule.head.relation
        table = tables[body_name]
        if not len(table):
            continue
        columns = table.columns()
        seen = processed.setdefault(number, set())
        index_rows = list(zip(*[c.tolist() for c in columns]))
        fresh = np.fromiter((r not in seen for r in index_rows), bool, len(index_rows))
        if not fresh.any():
            continue
        seen.update(index_rows)
        columns = [c[fresh] for c in columns]
        values = {}
        for i, var in enumerate(arith.variables):
            domain = engine._domain(engine._types_of(body_name)[i])
            values[var] = np.array([domain.values[j] for j in columns[i].tolist()], dtype=object)
        rows = int(fresh.sum())
        keep = np.ones(rows, bool)
        for comparison in arith.comparisons:
            left = evaluate(comparison.left, values, rows, known, arith.rule)
            right = evaluate(comparison.right, values, rows, known, arith.rule)
            keep &= np.asarray(COMPARE[comparison.op](left, right), dtype=bool)
        if not keep.any():
            continue
        head_columns = []
        for term in arith.head.args:
            column = evaluate(term, values, rows, known, arith.rule, numeric=isinstance(term, Arith))
            head_columns.append(column[keep])
        head_types = engine._types_of(arith.head.relation)
        have = derived.setdefault(arith.head.relation, set())
        facts = engine.facts.get(arith.head.relation, {})
        for row in zip(*[c.tolist() for c in head_columns]):
            key = tuple(engine._domain(t).add(engine._const_value(v), arith.rule.pos)
                        for t, v in zip(head_types, row))
            if key not in have and facts.get(key) != 1.0:
                have.add(key)
                grew = True
    return grew


def dependency_edges(arith_rules: list) -> list:
    """For stratification: each arithmetic rule's head depends on its body rule's relation."""
    return [DependencyEdge(a.head.relation, a.body_rule.head.relation, a.rule) for a in arith_rules]
