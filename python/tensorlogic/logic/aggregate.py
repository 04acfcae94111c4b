"""Aggregates in rule heads: `Deg(X, count(Y)) <- Edge(X, Y)`, `Total(G, sum(V)) <- Item(G, _, V)`.

A rule with aggregate head arguments is split (`split_aggregate`): an ordinary rule binds every
named variable of its body into a hidden relation; once that relation's stratum is complete,
`derive_aggregates` groups its rows by the head's other arguments and computes count / sum / min /
max over each group's rows, i.e. over the distinct assignments of the body's variables (set
semantics: `sum(V) <- Item(G, I, V)` adds V once per item I). Groups without rows give no tuple.

Invariants: an aggregate reads only a completed stratum (the head may not depend on its own
aggregate: checked by stratification, `aggregate_edges`), and is computed once per inference,
after the hidden relation's stratum has reached its fixpoint, so its value is final.
Vectorised: groups by sorting keys; values are int64 (or float64) arrays, exact Python ints only
when a sum might leave int64.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .arithmetic import evaluate
from .errors import LogicError
from .relation_table import encode
from .terms import Aggregate, Arith, Atom, Comparison, Const, Name, Rule, Var


@dataclass
class AggregateRule:
    rule: Rule
    head: Atom
    body_rule: Rule  # binds `variables` into the hidden relation
    variables: tuple  # the hidden relation's arguments, in order


class AggregateEdge:
    """Stratification edge: `head` aggregates over `on`, so `on` must be complete first (an edge
    inside one component is an error, like negation)."""
    aggregate = True

    def __init__(self, head: str, on: str, source: Rule):
        self.head = Atom(head, ())
        self.body = (Atom(on, ()),)
        self.source = source


def split_aggregate(rule: Rule, index: int, is_variable) -> AggregateRule | None:
    """None for a rule without aggregates; else its halves. Refuses aggregates outside the head,
    and head arguments next to an aggregate that are not variables or constants."""
    for item in rule.body:
        terms = item.args if isinstance(item, Atom) else (item.left, item.right)
        for term in terms:
            if isinstance(term, Aggregate):
                raise LogicError(f"aggregate `{term}` in the body of rule `{rule}`: aggregates go in the "
                                 f"head, like Deg(X, count(Y)) <- Edge(X, Y)", term.pos or rule.pos)
    if not any(isinstance(t, Aggregate) for t in rule.head.args):
        return None
    if rule.temperature:
        raise LogicError(f"rule `{rule}` aggregates and cannot be soft (@temperature)", rule.pos)
    for term in rule.head.args:
        if isinstance(term, Arith):
            raise LogicError(f"rule `{rule}`: next to an aggregate, head arguments are variables or "
                             f"constants (compute `{term}` in another rule)", term.pos or rule.pos)
        if isinstance(term, Aggregate) and isinstance(term.term, Const) and term.op != "count":
            raise LogicError(f"`{term}` in rule `{rule}` aggregates a constant: give a variable",
                             term.pos or rule.pos)
    names: list[str] = []
    for item in rule.body:
        if isinstance(item, Atom) and not item.negated:
            for term in item.args:
                text = term.name if isinstance(term, Var) else term.text if isinstance(term, Name) else None
                if text and text != "_" and text not in names and is_variable(term):
                    names.append(text)
    hidden = Atom(f"${rule.head.relation}#agg{index}", tuple(Var(n) for n in names), False, rule.head.pos)
    return AggregateRule(rule, rule.head, Rule(hidden, rule.body, None, rule.pos, rule.evaluation),
                         tuple(names))


def aggregate_edges(rules: list) -> list:
    return [AggregateEdge(a.head.relation, a.body_rule.head.relation, a.rule) for a in rules]


def _numbers(values: np.ndarray, rule: Rule, term) -> np.ndarray:
    """int64 or float64 array of the aggregated values; an error for a name."""
    kinds = {type(v) for v in values.tolist()} if values.dtype == object else set()
    if values.dtype != object:
        return values
    if kinds <= {int}:
        as_list = values.tolist()
        if not as_list or (max(as_list) < 1 << 62 and min(as_list) > -(1 << 62)):
            return np.array(as_list, np.int64)
        return values  # exact Python ints
    if kinds <= {int, float}:
        return values.astype(np.float64)
    bad = next(v for v in values.tolist() if not isinstance(v, (int, float)))
    raise LogicError(f"rule `{rule}` aggregates {term} over {bad!r}, which is not a number", rule.pos)


def derive_aggregates(engine, component, tables: dict, derived: dict) -> bool:
    """Compute the heads of the aggregate rules whose hidden relation is in `component` (complete)
    and add them to `derived`; True if any tuple was added. New numbers join their domains."""
    grew = False
    known = engine._known_constants()
    for agg in engine._aggregates:
        hidden = agg.body_rule.head.relation
        if hidden not in component:
            continue
        table = tables[hidden]
        rows = len(table)
        if not rows:
            continue
        columns = table.columns()
        types = engine._types_of(hidden)
        domain_values = [np.array(engine._domain(t).values + [None], dtype=object)[:-1] for t in types]
        position = {name: i for i, name in enumerate(agg.variables)}
        # Groups: the head's non-aggregate arguments (variables by their index columns).
        group_vars = []
        for term in agg.head.args:
            if not isinstance(term, Aggregate) and not isinstance(term, Const):
                name = term.name if isinstance(term, Var) else term.text
                if name in position:
                    group_vars.append(name)
        group_vars = list(dict.fromkeys(group_vars))
        if group_vars:
            sizes = tuple(len(domain_values[position[n]]) for n in group_vars)
            keys = encode([columns[position[n]] for n in group_vars], sizes, rows)
            order = np.argsort(keys, kind="stable")
            keys = keys[order]
            starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
        else:
            order = np.arange(rows)
            starts = np.zeros(1, np.int64)
        groups = len(starts)
        counts = np.diff(np.append(starts, rows))
        head_columns = []
        for term in agg.head.args:
            if isinstance(term, Const):
                head_columns.append([term.value] * groups)
            elif not isinstance(term, Aggregate):
                name = term.name if isinstance(term, Var) else term.text
                first = order[starts]
                head_columns.append(domain_values[position[name]][columns[position[name]][first]].tolist())
            elif term.op == "count":
                head_columns.append(counts.tolist())
            else:
                head_columns.append(_reduce(term, agg, columns, domain_values, position, order, starts,
                                            rows, known).tolist())
        head_types = engine._types_of(agg.head.relation)
        have = derived.setdefault(agg.head.relation, set())
        per_column = []
        for values, type_name in zip(head_columns, head_types):
            distinct = list(dict.fromkeys(values))
            index = dict(zip(distinct, engine._domain(type_name).add_distinct(distinct, agg.rule.pos)))
            per_column.append([index[v] for v in values])  # once per group
        for key in zip(*per_column):
            if key not in have:
                have.add(key)
                grew = True
    return grew


def _reduce(term: Aggregate, agg: AggregateRule, columns, domain_values, position, order, starts,
            rows: int, known) -> np.ndarray:
    inner = term.term
    if isinstance(inner, Arith):
        values = {name: domain_values[i][columns[i]] for name, i in position.items()}
        raw = evaluate(inner, values, rows, known, agg.rule)
    else:
        name = inner.name if isinstance(inner, Var) else inner.text
        raw = domain_values[position[name]][columns[position[name]]]
    numbers = _numbers(raw, agg.rule, term)[order]
    if term.op == "sum" and numbers.dtype == np.int64 and len(numbers):
        bound = int(np.abs(numbers).max()) * len(numbers)
        if bound >= 1 << 62:
            numbers = numbers.astype(object)  # exact, as TL's ints are
    reducer = {"sum": np.add, "min": np.minimum, "max": np.maximum}[term.op]
    out = reducer.reduceat(numbers, starts)
    if out.dtype == np.float64:
        return np.array([int(v) if float(v).is_integer() and abs(v) < 1 << 53 else float(v)
                         for v in out.tolist()] + [None], dtype=object)[:-1]
    return out
