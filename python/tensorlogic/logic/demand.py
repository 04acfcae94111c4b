"""Demand-driven answers for queries with constants: the magic-set rewriting.

`Path(0, Y)?` does not need the whole fixpoint of Path, only the tuples reachable from the
binding X = 0. The rules the query depends on are rewritten (`magic_program`): each derived
relation p is used in an adorned copy `p@bf...` (b: the argument is bound when p is called, f:
free), every rule of p gets a guard atom `$magic:p@ad(bound arguments)` first in its body, and
for each derived body atom a magic rule passes the bindings known before it (the guard and the
atoms to its left, comparisons whose variables they bind) on to that atom's magic relation.
The query's constants are the one seed fact. The rewritten program is evaluated by a second
engine that shares this engine's domains, facts and types (`answer_on_demand`).

Invariant: the rewriting is used only for positive Boolean programs (no negation, soft rules,
weights, arithmetic or aggregate rules in what the query depends on); then the adorned relation
holds exactly the query's answers of the full fixpoint (the classic magic-sets theorem), so the
result equals full evaluation. Anything else returns None and the caller evaluates fully.
"""
from __future__ import annotations

from .errors import LogicError
from .query import QueryResult
from .rule_types import resolve_term
from .terms import Atom, Comparison, Const, Rule, Var


def _depends(engine, relation: str) -> tuple[set, list]:
    """Relations `relation` depends on (itself included) and the rules defining them."""
    by_head: dict[str, list] = {}
    for rule in engine.rules:
        by_head.setdefault(rule.head.relation, []).append(rule)
    seen, stack, rules = {relation}, [relation], []
    while stack:
        name = stack.pop()
        for rule in by_head.get(name, []):
            rules.append(rule)
            for item in rule.body:
                if isinstance(item, Atom) and item.relation not in seen:
                    seen.add(item.relation)
                    stack.append(item.relation)
    return seen, rules


def supported(engine, atom: Atom, known: set) -> bool:
    if not any(not isinstance(resolve_term(t, known), Var) for t in atom.args):
        return False  # no constant: every answer is needed anyway
    names, rules = _depends(engine, atom.relation)
    if not rules or any(name.startswith("$") for name in names):
        return False  # a base relation (a scan), or arithmetic / aggregate rules
    for rule in rules:
        if rule.temperature or any(isinstance(i, Atom) and i.negated for i in rule.body):
            return False
        for item in rule.body:
            terms = item.args if isinstance(item, Atom) else (item.left, item.right)
            if any(not isinstance(t, (Var, Const)) and not hasattr(t, "text") for t in terms):
                return False
    return not any(w != 1.0 for name in names for w in engine.facts.get(name, {}).values())


def _resolved(rule: Rule, known: set) -> Rule:
    def atom(a: Atom) -> Atom:
        return Atom(a.relation, tuple(resolve_term(t, known) for t in a.args), a.negated, a.pos)
    body = tuple(atom(i) if isinstance(i, Atom) else
                 Comparison(i.op, resolve_term(i.left, known), resolve_term(i.right, known), i.pos)
                 for i in rule.body)
    return Rule(atom(rule.head), body, rule.temperature, rule.pos, rule.evaluation)


def _names(term) -> set:
    return {term.name} if isinstance(term, Var) and term.name != "_" else set()


def adorned(name: str, adornment: str) -> str:
    return f"{name}@{adornment}"


def magic(name: str, adornment: str) -> str:
    return f"$magic:{name}@{adornment}"


def magic_program(rules: list[Rule], derived: set, query: Atom) -> tuple[list[Rule], str, str]:
    """The rewritten rules, the query's adornment and its adorned relation name."""
    by_head: dict[str, list] = {}
    for rule in rules:
        by_head.setdefault(rule.head.relation, []).append(rule)
    start = "".join("f" if isinstance(t, Var) else "b" for t in query.args)
    out: list[Rule] = []
    todo, done = [(query.relation, start)], set()
    while todo:
        name, adornment = todo.pop()
        if (name, adornment) in done:
            continue
        done.add((name, adornment))
        for rule in by_head.get(name, []):
            head = rule.head
            guard_args = tuple(t for t, a in zip(head.args, adornment) if a == "b")
            guard = Atom(magic(name, adornment), guard_args, False, head.pos)
            bound = set().union(*[_names(t) for t in guard_args]) if guard_args else set()
            prefix: list = [guard]
            body: list = [guard]
            pending = [i for i in rule.body if isinstance(i, Comparison)]
            remaining = [i for i in rule.body if isinstance(i, Atom)]
            while remaining:
                # sideways information passing: next the atom with the most bound arguments
                # (base relations first among equals, then body order)
                item = max(remaining, key=lambda a: (
                    sum(isinstance(t, Const) or bool(_names(t) and _names(t) <= bound) for t in a.args),
                    a.relation not in derived, -remaining.index(a)))
                remaining.remove(item)
                if item.relation in derived:
                    sub = "".join("b" if isinstance(t, Const) or (_names(t) and _names(t) <= bound) else "f"
                                  for t in item.args)
                    magic_args = tuple(t for t, a in zip(item.args, sub) if a == "b")
                    magic_head = Atom(magic(item.relation, sub), magic_args, False, item.pos)
                    if not (len(prefix) == 1 and prefix[0] == magic_head):  # m(X) <- m(X) adds nothing
                        out.append(Rule(magic_head, tuple(prefix), None, rule.pos, rule.evaluation))
                    todo.append((item.relation, sub))
                    new = Atom(adorned(item.relation, sub), item.args, False, item.pos)
                else:
                    new = item
                body.append(new)
                prefix.append(new)
                for t in item.args:
                    bound |= _names(t)
                ready = [c for c in pending if (_names(c.left) | _names(c.right)) <= bound]
                prefix += ready
                pending = [c for c in pending if c not in ready]
            body += [c for c in rule.body if isinstance(c, Comparison)]  # (order is the join planner's)
            out.append(Rule(Atom(adorned(name, adornment), head.args, False, head.pos), tuple(body),
                            None, rule.pos, rule.evaluation))
    return out, start, adorned(query.relation, start)


def answer_on_demand(engine, atom: Atom) -> QueryResult | None:
    """The query's answers by the magic-set rewriting, or None where it does not apply (then the
    caller runs the full fixpoint). Raises LogicError like a full evaluation would."""
    engine._compile()  # rule constants join their domains; slot types are known
    known = engine._known_constants()
    if not supported(engine, atom, known):
        return None
    names, rules = _depends(engine, atom.relation)
    derived = {r.head.relation for r in rules}
    query = Atom(atom.relation, tuple(resolve_term(t, known) for t in atom.args), False, atom.pos)
    types = engine._types_of(atom.relation)
    for term, type_name in zip(query.args, types):
        if isinstance(term, Const) and engine._domain(type_name).lookup(term.value) is None:
            engine.last_query_demand = True  # a constant nothing mentions: no answers, nothing to derive
            return QueryResult(atom=atom, variables=tuple(dict.fromkeys(
                t.name for t in query.args if isinstance(t, Var) and t.name != "_")), rows=[], weights=None)
    program, adornment, target = magic_program([_resolved(r, known) for r in rules], derived, query)
    sub = type(engine)(  # a LogicEngine (engine.py imports this module, not the other way)
        dense_limit=engine.dense_limit, tolerance=engine.tolerance,
        max_soft_iterations=engine.max_soft_iterations, dense_evaluator=engine._dense_evaluator)
    sub.domains = engine.domains  # shared: indices agree, and nothing new is added to them
    for name in names - derived:
        info = engine.relations[name]
        sub.declare_relation(name, engine._types_of(name), info.pos)
        if name in engine.facts:
            sub.facts[name] = engine.facts[name]
        if name in engine.bulk:
            sub.bulk[name] = engine.bulk[name]
    declared = set()
    for rule in program:
        for item in (rule.head,) + tuple(i for i in rule.body if isinstance(i, Atom)):
            if item.relation in declared or item.relation in names - derived:
                continue
            original, _, ad = item.relation.rpartition("@")
            base = original.split(":", 1)[1] if original.startswith("$magic:") else original
            slot_types = engine._types_of(base)
            if original.startswith("$magic:"):
                slot_types = tuple(t for t, a in zip(slot_types, ad) if a == "b")
            sub.declare_relation(item.relation, slot_types)
            declared.add(item.relation)
    for rule in program:
        sub.add_rule(rule)
    seed = Atom(magic(atom.relation, adornment), tuple(t for t in query.args if isinstance(t, Const)),
                False, atom.pos)
    sub.add_fact(seed)
    result = sub.query(Atom(target, query.args, False, atom.pos))
    engine.last_stats = sub.last_stats
    engine.last_query_demand = True
    return QueryResult(atom=atom, variables=result.variables, rows=result.rows, weights=result.weights)
