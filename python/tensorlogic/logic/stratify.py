"""Strata: strongly connected components of the rule dependency graph, dependencies first.

Invariant: a relation is evaluated only after every relation it depends on through negation is
complete; a negated dependency inside one component means no stratification exists, reported
as a StratificationError naming the relation and the rule that closes the cycle.
"""
from __future__ import annotations

from .compiled import CompiledRule
from .errors import StratificationError


def strongly_connected_components(nodes: list[str], edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm without recursion; components come out with successors first."""
    index_of: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index_of:
            continue
        work = [(root, iter(edges.get(root, ())))]
        index_of[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index_of:
                    index_of[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(edges.get(succ, ()))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index_of[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index_of[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def aggregate_cycle(head: str, rule) -> str:
    return (f"{head} aggregates over relations that depend on {head} (rule `{rule}`): an aggregate "
            f"cannot go through recursion; the program has no stratification")


def stratify(relations: list[str], rules: list[CompiledRule]) -> list[list[str]]:
    """Components of the relations in evaluation order (each after all it depends on)."""
    edges: dict[str, list[str]] = {name: [] for name in relations}
    for rule in rules:
        for atom in rule.body:
            edges.setdefault(atom.relation, []).append(rule.head.relation)
    components = strongly_connected_components(sorted(edges), edges)
    components.reverse()  # Tarjan emits a component after everything reachable from it
    component_of = {name: i for i, comp in enumerate(components) for name in comp}
    for rule in rules:
        head = rule.head.relation
        for atom in rule.body:
            if getattr(rule, "aggregate", False) and component_of[atom.relation] == component_of[head]:
                raise StratificationError(aggregate_cycle(head, rule.source), rule.source.pos)
            if atom.negated and component_of[atom.relation] == component_of[head]:
                cycle = ("its own negation" if atom.relation == head else
                         f"the negation of {atom.relation}, which depends on {head}")
                raise StratificationError(f"{head} depends on {cycle} (rule `{rule.source}`): "
                                          f"the program has no stratification", rule.source.pos)
    return components
