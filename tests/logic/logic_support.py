"""Shared helpers for the logic tests: build one program on the dense and the sparse evaluator, and
run the plain-Python reference. (Not named conftest.py: tests/models has one, and both are
imported as top-level modules.)"""
from __future__ import annotations

import pytest
from hypothesis import strategies as st

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


# Random safe, stratified programs over base relations E/2, F/2, U/1 (property tests).
BASE = {"E": 2, "F": 2, "U": 1}
DERIVED = {"P": 2, "Q": 1, "R": 2}
VARIABLES = ["X", "Y", "Z"]


@st.composite
def programs(draw):
    rules = []
    for head, head_arity in DERIVED.items():
        for _ in range(draw(st.integers(1, 2))):
            body, bound = [], []
            for _ in range(draw(st.integers(1, 3))):
                relation = draw(st.sampled_from(sorted(BASE) + sorted(DERIVED)))
                arity = {**BASE, **DERIVED}[relation]
                args = [draw(st.sampled_from(VARIABLES * 3 + ["0", "_"])) for _ in range(arity)]
                body.append(f"{relation}({', '.join(args)})")
                bound += [a for a in args if a in VARIABLES]
            if not bound:
                bound = ["X"]
                body.append("U(X)")
            if draw(st.booleans()):
                relation = draw(st.sampled_from(sorted(BASE)))
                args = [draw(st.sampled_from(bound * 2 + ["_", "1"])) for _ in range(BASE[relation])]
                body.append(f"not {relation}({', '.join(args)})")
            if draw(st.integers(0, 3)) == 0:
                left = draw(st.sampled_from(bound))
                right = draw(st.sampled_from(bound + ["2"]))
                body.append(f"{left} {draw(st.sampled_from(['!=', '<', '==', '>=']))} {right}")
            head_args = [draw(st.sampled_from(bound * 3 + ["3"])) for _ in range(head_arity)]
            rules.append(f"{head}({', '.join(head_args)}) <- {', '.join(body)}")
    return rules
