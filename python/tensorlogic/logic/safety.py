"""Rule checks that need no facts: safety (range restriction) and stratification of a rule set.

Run when a rule is defined (and by `tl check`), not when something first queries it, so a bad rule
is an error even if nothing reads its relation. A rule is safe when every variable of its head, of a
comparison and of a negated atom occurs in a positive body atom — except a variable that occurs in
one negated atom and nowhere else: that one (like `_`) reads as existential, "no value with ...".
A rule set is stratified when no relation depends on its own negation through a cycle.
"""
from __future__ import annotations

from typing import Callable, Iterable

from .errors import StratificationError, UnsafeRuleError
from .terms import AGGREGATE_OPS, Atom, Comparison, Const, Name, Rule, Var


def default_is_variable(term) -> bool:
    """The engine's reading of a term without facts: Var, or a Name starting upper-case or `_`."""
    if isinstance(term, Var):
        return True
    if isinstance(term, Name):
        return term.text[:1].isupper() or term.text[:1] == "_"
    return False


def term_variables(term, is_variable: Callable) -> list[str]:
    """Names of the variables a term mentions (an arithmetic term may mention several)."""
    if isinstance(term, Const):
        return []
    parts = getattr(term, "variables", None)
    if parts is not None:
        return [name for name in parts() if is_variable(Name(name))]
    if is_variable(term):
        return [term.name if isinstance(term, Var) else term.text]
    return []


def existential_variables(rule: Rule, is_variable: Callable = default_is_variable) -> set[str]:
    """Named variables that occur only inside one negated atom: read as `_` there."""
    where: dict[str, set[int]] = {}
    negated_at: set[int] = set()
    items = (rule.head,) + tuple(rule.body)
    for i, item in enumerate(items):
        if isinstance(item, Atom):
            terms = item.args
            if item.negated:
                negated_at.add(i)
        else:
            terms = (item.left, item.right)
        for term in terms:
            for name in term_variables(term, is_variable):
                where.setdefault(name, set()).add(i)
    return {name for name, at in where.items()
            if name != "_" and len(at) == 1 and next(iter(at)) in negated_at}


def check_safety(rule: Rule, is_variable: Callable = default_is_variable) -> None:
    """Raise UnsafeRuleError for the first variable of the head, a comparison or a negated atom that
    no positive body atom binds (existential variables of a negated atom excepted)."""
    bound: set[str] = set()
    for item in rule.body:
        if isinstance(item, Atom) and not item.negated:
            for term in item.args:
                if not hasattr(term, "variables"):  # an arithmetic term binds nothing
                    bound.update(term_variables(term, is_variable))
    existential = existential_variables(rule, is_variable) | {"_"}
    for term in rule.head.args:
        for name in term_variables(term, is_variable):
            if name == "_":
                raise UnsafeRuleError(f"the head of rule `{rule}` has `_`: every head argument must be "
                                      f"a constant or a variable bound in the body", rule.head.pos or rule.pos)
            if name not in bound:
                raise UnsafeRuleError(f"variable {name} in the head of rule `{rule}` does not occur in a "
                                      f"positive body atom", rule.head.pos or rule.pos)
    for item in rule.body:
        if isinstance(item, Atom) and item.negated:
            for term in item.args:
                for name in term_variables(term, is_variable):
                    if name not in bound and name not in existential:
                        raise UnsafeRuleError(f"variable {name} of `{item}` in rule `{rule}` does not occur "
                                              f"in a positive body atom (a variable only in this negated "
                                              f"atom would mean 'no {name} with ...', like `_`)",
                                              item.pos or rule.pos)
        elif isinstance(item, Comparison):
            for term in (item.left, item.right):
                for name in term_variables(term, is_variable):
                    if name == "_" or name not in bound:
                        raise UnsafeRuleError(f"variable {name} of `{item}` in rule `{rule}` does not occur "
                                              f"in a positive body atom", item.pos or rule.pos)


def check_stratified(rules: Iterable[Rule]) -> None:
    """Raise StratificationError when a relation depends on its own negation through the rules."""
    from .stratify import strongly_connected_components
    rules = list(rules)
    edges: dict[str, list[str]] = {}
    for rule in rules:
        edges.setdefault(rule.head.relation, [])
        for item in rule.body:
            if isinstance(item, Atom):
                edges.setdefault(item.relation, []).append(rule.head.relation)
    component_of = {}
    for i, component in enumerate(strongly_connected_components(sorted(edges), edges)):
        for name in component:
            component_of[name] = i
    from .stratify import aggregate_cycle
    for rule in rules:
        head = rule.head.relation
        aggregates = any(getattr(t, "op", None) in AGGREGATE_OPS and hasattr(t, "term") for t in rule.head.args)
        for item in rule.body:
            if (aggregates and isinstance(item, Atom) and not item.negated
                    and component_of[item.relation] == component_of[head]):
                raise StratificationError(aggregate_cycle(head, rule), rule.pos)
            if isinstance(item, Atom) and item.negated and component_of[item.relation] == component_of[head]:
                cycle = ("its own negation" if item.relation == head else
                         f"the negation of {item.relation}, which depends on {head}")
                raise StratificationError(f"{head} depends on {cycle} (rule `{rule}`): the program has no "
                                          f"stratification", rule.pos)
