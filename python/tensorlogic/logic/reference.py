"""A plain-Python semi-naive Datalog evaluator over sets of tuples: the oracle the tests compare the
tensor engine with, and the baseline `bench/logic_closure.py` measures against.

Invariant: it shares nothing with the engine's evaluation code (only the Rule/Atom data model), so
agreement between the two is evidence, not tautology. Boolean semantics only (no weights).
"""
from __future__ import annotations

from .terms import Atom, Comparison, Const, Name, Rule, Var


def _is_var(term, constants: set) -> bool:
    if isinstance(term, Var):
        return True
    if isinstance(term, Const):
        return False
    return term.text == "_" or ((term.text[0].isupper() or term.text[0] == "_")
                                and term.text not in constants)


def _value(term):
    return term.value if isinstance(term, Const) else term.text


def _order_key(value):
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, value)


def _compare(comparison: Comparison, binding: dict, constants: set) -> bool:
    def value(term):
        if _is_var(term, constants):
            return binding[term.name if isinstance(term, Var) else term.text]
        return _value(term)

    a, b = _order_key(value(comparison.left)), _order_key(value(comparison.right))
    return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[comparison.op]


def _strata(rules: list[Rule]) -> list[list[Rule]]:
    """Assign each head a level: >= the level of positive body relations, > that of negated ones."""
    level = {r.head.relation: 0 for r in rules}
    heads = set(level)
    for _ in range(len(heads) + 2):
        changed = False
        for rule in rules:
            for atom in rule.body:
                if not isinstance(atom, Atom) or atom.relation not in heads:
                    continue
                need = level[atom.relation] + (1 if atom.negated else 0)
                if level[rule.head.relation] < need:
                    level[rule.head.relation] = need
                    changed = True
        if not changed:
            break
    else:
        raise ValueError("program is not stratifiable")
    if any(v > len(heads) for v in level.values()):
        raise ValueError("program is not stratifiable")
    return [[r for r in rules if level[r.head.relation] == k] for k in range(max(level.values(), default=-1) + 1)]


class ReferenceDatalog:
    def __init__(self):
        self.facts: dict[str, set] = {}
        self.rules: list[Rule] = []

    def add_fact(self, relation: str, row: tuple) -> None:
        self.facts.setdefault(relation, set()).add(tuple(row))

    def add_rule(self, rule: Rule) -> None:
        self.rules.append(rule)

    def _constants(self) -> set:
        values = {v for rows in self.facts.values() for row in rows for v in row}
        return values

    @staticmethod
    def _term_key(term, constants):
        """("v", name) for a variable (None for `_`), ("c", value) for a constant."""
        if _is_var(term, constants):
            name = term.name if isinstance(term, Var) else term.text
            return ("v", None if name == "_" else name)
        return ("c", _value(term))

    def _matches(self, atom: Atom, rows: set, binding: dict, constants: set, indexes: dict):
        """Extended bindings for every row consistent with `binding`, via a hash index on the
        positions already bound (built once per (rows, positions) and reused)."""
        keys = [self._term_key(t, constants) for t in atom.args]
        bound = tuple(i for i, (kind, v) in enumerate(keys) if kind == "c" or (v is not None and v in binding))
        probe = tuple(v if kind == "c" else binding[v] for kind, v in (keys[i] for i in bound))
        index_key = (atom.relation, id(rows), bound)
        index = indexes.get(index_key)
        if index is None:
            index = {}
            for row in rows:
                index.setdefault(tuple(row[i] for i in bound), []).append(row)
            indexes[index_key] = index
        for row in index.get(probe, ()):
            new = dict(binding)
            ok = True
            for (kind, name), value in zip(keys, row):
                if kind == "v" and name is not None:
                    if new.setdefault(name, value) != value:
                        ok = False
                        break
            if ok:
                yield new

    def _fire(self, rule: Rule, db: dict, delta: dict | None, delta_index: int | None, constants,
              indexes: dict):
        positives = [(i, a) for i, a in enumerate(rule.body) if isinstance(a, Atom) and not a.negated]
        negatives = [a for a in rule.body if isinstance(a, Atom) and a.negated]
        comparisons = [c for c in rule.body if isinstance(c, Comparison)]
        if delta_index is not None:  # start from the small delta side
            positives.sort(key=lambda item: item[0] != delta_index)
        bindings = [{}]
        for i, atom in positives:
            source = (delta if i == delta_index else db).get(atom.relation, set())
            bindings = [b2 for b in bindings for b2 in self._matches(atom, source, b, constants, indexes)]
        out = set()
        for b in bindings:
            if not all(_compare(c, b, constants) for c in comparisons):
                continue
            if any(any(True for _ in self._matches(a, db.get(a.relation, set()), b, constants, indexes))
                   for a in negatives):
                continue
            out.add(tuple(b[t.name if isinstance(t, Var) else t.text] if _is_var(t, constants)
                          else _value(t) for t in rule.head.args))
        return out

    def run(self) -> dict[str, set]:
        constants = self._constants()
        for rule in self.rules:
            for atom in (rule.head,) + rule.body:
                for t in (atom.args if isinstance(atom, Atom) else (atom.left, atom.right)):
                    if not _is_var(t, constants):
                        constants.add(_value(t))
        db = {name: set(rows) for name, rows in self.facts.items()}
        for stratum in _strata(self.rules):
            heads = {r.head.relation for r in stratum}
            for name in heads:
                db.setdefault(name, set())
            delta = {name: set() for name in heads}
            indexes: dict = {}
            for rule in stratum:
                delta[rule.head.relation] |= self._fire(rule, db, None, None, constants, indexes)
            for name in heads:
                delta[name] -= db[name]
                db[name] |= delta[name]
            while any(delta.values()):
                new = {name: set() for name in heads}
                # relations of this stratum changed: drop their indexes, keep the lower strata's
                indexes = {k: v for k, v in indexes.items() if k[0] not in heads}
                for rule in stratum:
                    for i, atom in enumerate(rule.body):
                        if isinstance(atom, Atom) and not atom.negated and atom.relation in heads and delta[atom.relation]:
                            new[rule.head.relation] |= self._fire(rule, db, delta, i, constants, indexes)
                for name in heads:
                    new[name] -= db[name]
                    db[name] |= new[name]
                delta = new
        return db
