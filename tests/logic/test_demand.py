"""Demand-driven (magic-set) answers to queries with constants equal full evaluation and the
reference evaluator, and derive only what the query can reach."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from logic_support import MODES, programs, reference

from tensorlogic.logic import LogicEngine, parse_atom, parse_rule

CLOSURE = ["Path(X, Y) <- Edge(X, Y)", "Path(X, Z) <- Path(X, Y), Edge(Y, Z)"]
PROGRAMS = {
    "left": CLOSURE,
    "right": ["Path(X, Y) <- Edge(X, Y)", "Path(X, Z) <- Edge(X, Y), Path(Y, Z)"],
    "doubling": ["Path(X, Y) <- Edge(X, Y)", "Path(X, Z) <- Path(X, Y), Path(Y, Z)"],
    "same_generation": ["SG(X, Y) <- Edge(P, X), Edge(P, Y), X != Y",
                        "SG(X, Y) <- Edge(P, X), SG(P, Q), Edge(Q, Y)"],
    "mutual": ["Even(X, Y) <- Edge(X, Y), Mark(X)", "Odd(X, Z) <- Even(X, Y), Edge(Y, Z)",
               "Even(X, Z) <- Odd(X, Y), Edge(Y, Z)", "Both(X, Y) <- Even(X, Y), Odd(Y, X)"],
    "constants": ["Reach(X, Y) <- Edge(X, Y), Y != 3", "Reach(X, Z) <- Reach(X, Y), Edge(Y, Z), Z > 1",
                  "From2(Y) <- Reach(2, Y)", "Pair(X, Y) <- Reach(X, Y), Reach(Y, X)"],
}


def _engine(mode, facts, rules, demand):
    engine = LogicEngine(**MODES[mode], demand=demand)
    for relation, rows in facts.items():
        engine.add_facts(relation, rows)
    for rule in rules:
        engine.add_rule(parse_rule(rule))
    return engine


@settings(max_examples=60, deadline=None)
@given(program=st.sampled_from(sorted(PROGRAMS)),
       edges=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=18),
       marks=st.lists(st.integers(0, 6), max_size=3), constant=st.integers(0, 7),
       mode=st.sampled_from(sorted(MODES)))
def test_demand_answers_equal_full_evaluation_and_the_reference(program, edges, marks, constant, mode):
    facts = {"Edge": sorted(set(edges)) or [(0, 0)], "Mark": [(m,) for m in sorted(set(marks))] or [(0,)]}
    rules = PROGRAMS[program]
    expected = reference(facts, rules)
    heads = {r.split("(")[0]: len(r.split("<-")[0].split(",")) for r in rules}
    for head, arity in heads.items():
        for position in range(arity):
            args = [f"V{i}" for i in range(arity)]
            args[position] = str(constant)
            query = f"{head}({', '.join(args)})"
            demand = _engine(mode, facts, rules, True)
            got = demand.query(parse_atom(query)).value
            assert demand.last_query_demand
            full = _engine(mode, facts, rules, False).query(parse_atom(query)).value
            assert got == full, (program, query)
            want = sorted(tuple(v for i, v in enumerate(row) if i != position)
                          for row in expected.get(head, set()) if row[position] == constant)
            if arity == 1:
                assert got == bool(want), (program, query)
            else:
                assert sorted(got) == want, (program, query)


@settings(max_examples=40, deadline=None)
@given(rules=programs(), edges=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), max_size=10),
       constant=st.integers(0, 4))
def test_random_programs_with_negation_fall_back_or_agree(rules, edges, constant):
    facts = {"E": sorted(set(edges)) or [(0, 1)], "F": [(1, 2), (2, 3)], "U": [(0,), (2,)]}
    for query in (f"P({constant}, Y)", f"R(X, {constant})", f"Q({constant})"):
        got = _engine("sparse", facts, rules, True).query(parse_atom(query)).value
        assert got == _engine("sparse", facts, rules, False).query(parse_atom(query)).value


def test_demand_derives_only_what_the_query_reaches():
    rng = np.random.default_rng(0)
    edges = list(zip(rng.integers(0, 3000, 3000).tolist(), rng.integers(0, 3000, 3000).tolist()))
    engine = _engine("sparse", {"Edge": edges}, CLOSURE, True)
    answers = engine.query(parse_atom("Path(0, Y)")).value
    assert engine.last_query_demand
    assert max(s.iterations for s in engine.last_stats) <= len(answers) + 2
    assert engine._tables is None  # the full fixpoint was never computed
    full = _engine("sparse", {"Edge": edges}, CLOSURE, False)
    assert full.query(parse_atom("Path(0, Y)")).value == answers
    assert len(full.query(parse_atom("Path(X, Y)")).value) > 50 * max(len(answers), 1)


def test_an_unknown_constant_has_no_answers_and_weights_fall_back():
    engine = _engine("sparse", {"Edge": [(0, 1)]}, CLOSURE, True)
    assert engine.query(parse_atom("Path(zebra, Y)")).value == []
    answers = []
    for demand in (True, False):
        weighted = LogicEngine(demand=demand)
        weighted.add_fact(parse_atom("Edge(0, 1)"), weight=0.5)
        weighted.add_fact(parse_atom("Edge(1, 2)"), weight=0.25)
        weighted.add_rule(parse_rule("Path(X, Y) <- Edge(X, Y)", temperature=0.5))
        weighted.add_rule(parse_rule("Path(X, Z) <- Path(X, Y), Edge(Y, Z)", temperature=0.5))
        answers.append(weighted.query(parse_atom("Path(0, Y)")).value)
        assert not weighted.last_query_demand
    assert answers[0] == answers[1] and len(answers[0][0]) == 2  # (value, truth) rows
