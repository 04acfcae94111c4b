"""Shared helpers for the logic tests: build one program on the dense and the sparse evaluator, and
run the plain-Python reference. (Not named conftest.py: tests/models has one, and both are
imported as top-level modules.)"""
from __future__ import annotations

import pytest

from tensorlogic.logic import LogicEngine, parse_atom, parse_rule
from tensorlogic.logic.reference import ReferenceDatalog

MODES = {"dense": dict(dense_limit=1 << 20, dense_evaluator="numpy"),
         "sparse": dict(dense_limit=0)}


def build(mode: str, facts: dict, rules: list, **engine_options) -> LogicEngine:
    """facts: relation -> iterable of tuples of constants (all true); rules: text or Rule."""
    engine = LogicEngine(**MODES[mode], **engine_options)
    for relation, rows in facts.items():
        engine.add_facts(relation, list(rows))
    for rule in rules:
        engine.add_rule(parse_rule(rule) if isinstance(rule, str) else rule)
    return engine


def reference(facts: dict, rules: list) -> dict:
    ref = ReferenceDatalog()
    for relation, rows in facts.items():
        for row in rows:
            ref.add_fact(relation, row)
    for rule in rules:
        ref.add_rule(parse_rule(rule))
    return ref.run()


def answers(engine: LogicEngine, query: str):
    return engine.query(parse_atom(query)).value


@pytest.fixture(params=sorted(MODES))
def mode(request):
    return request.param
