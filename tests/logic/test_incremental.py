"""Facts asserted after a query continue from the last fixpoint (when that is sound) and give the
same answers as recomputing everything."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from logic_support import DERIVED, build, programs, reference

from tensorlogic.logic import LogicEngine, parse_atom, parse_rule

CLOSURE = ["Path(X, Y) <- Edge(X, Y)", "Path(X, Z) <- Path(X, Y), Edge(Y, Z)"]


def test_new_facts_continue_the_fixpoint_and_new_constants_widen_the_domain():
    engine = LogicEngine(dense_limit=0)
    engine.add_facts("Edge", [(1, 2), (2, 3)])
    for rule in CLOSURE + ["FromOne(Y) <- Path(1, Y)"]:
        engine.add_rule(parse_rule(rule))
    assert engine.query(parse_atom("FromOne(Y)")).value == [(2,), (3,)]
    engine.add_facts("Edge", [(3, 4), (4, 1000)])  # 1000 is a new constant: the domain grows
    assert engine.query(parse_atom("FromOne(Y)")).value == [(2,), (3,), (4,), (1000,)]
    assert {s.mode for s in engine.last_stats} == {"incremental"}
    assert engine.query(parse_atom("Path(X, 1000)")).value == [(1,), (2,), (3,), (4,)]


def test_negation_downstream_of_new_facts_recomputes():
    engine = LogicEngine(dense_limit=0)
    engine.add_facts("Edge", [(1, 2)])
    engine.add_facts("Node", [(1,), (2,), (3,)])
    for rule in CLOSURE + ["Isolated(X) <- Node(X), not Path(X, _), not Path(_, X)"]:
        engine.add_rule(parse_rule(rule))
    assert engine.query(parse_atom("Isolated(X)")).value == [(3,)]
    engine.add_facts("Edge", [(2, 3)])
    assert engine.query(parse_atom("Isolated(X)")).value == []
    assert "incremental" not in {s.mode for s in engine.last_stats}


def test_a_repeated_fact_changes_nothing():
    engine = LogicEngine(dense_limit=0)
    engine.add_facts("Edge", [(1, 2)])
    for rule in CLOSURE:
        engine.add_rule(parse_rule(rule))
    engine.infer()
    before = engine.last_stats
    engine.add_fact(parse_atom("Edge(1, 2)"))
    assert engine.infer() is before


pairs = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=10)


@settings(max_examples=40, deadline=None)
@given(rules=programs(), first=pairs, second=pairs, units=st.lists(st.integers(0, 6), min_size=1, max_size=3))
def test_adding_facts_after_a_query_matches_a_fresh_run(rules, first, second, units):
    base = {"E": sorted(set(first)), "F": [(1, 2)], "U": [(u,) for u in sorted(set(units))]}
    more_edges = sorted(set(second))
    for mode in ("dense", "sparse"):
        engine = build(mode, base, rules)
        engine.infer()
        engine.add_facts("E", more_edges)
        engine.add_facts("F", more_edges[:2])
        everything = {"E": sorted(set(first) | set(second)), "F": sorted({(1, 2)} | set(more_edges[:2])),
                      "U": base["U"]}
        expected = reference(everything, rules)
        for head, arity in DERIVED.items():
            query = f"{head}({', '.join(f'V{i}' for i in range(arity))})"
            assert sorted(engine.query(parse_atom(query)).value) == sorted(expected.get(head, set())), (mode, head)
