"""Property-based: on random small inputs the tensor engine (dense and sparse) derives exactly what
the plain-Python semi-naive Datalog reference derives."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from logic_support import build, reference

from tensorlogic.logic import parse_atom

PROGRAMS = {
    "closure": ["Path(X, Y) <- Edge(X, Y)", "Path(X, Z) <- Path(X, Y), Edge(Y, Z)"],
    "doubling": ["Path(X, Y) <- Edge(X, Y)", "Path(X, Z) <- Path(X, Y), Path(Y, Z)"],
    "same_generation": ["SG(X, Y) <- Edge(P, X), Edge(P, Y), X != Y",
                        "SG(X, Y) <- Edge(P, X), SG(P, Q), Edge(Q, Y)"],
    "negation": ["Path(X, Y) <- Edge(X, Y)", "Path(X, Z) <- Path(X, Y), Edge(Y, Z)",
                 "Node(X) <- Edge(X, _)", "Node(Y) <- Edge(_, Y)",
                 "Unreachable(X, Y) <- Node(X), Node(Y), not Path(X, Y)",
                 "Sink(X) <- Node(X), not Edge(X, _)"],
    "constants_and_loops": ["Reach(Y) <- Edge(0, Y)", "Reach(Y) <- Reach(X), Edge(X, Y)",
                            "Loop(X) <- Edge(X, X)", "Back(X, Y) <- Edge(X, Y), Edge(Y, X), X < Y",
                            "Tri(X, Y, Z) <- Edge(X, Y), Edge(Y, Z), Edge(Z, X)"],
    "mutual": ["Even(X, Y) <- Edge(X, Y), Mark(X)", "Odd(X, Z) <- Even(X, Y), Edge(Y, Z)",
               "Even(X, Z) <- Odd(X, Y), Edge(Y, Z)"],
}

edges = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=18)
marks = st.lists(st.integers(0, 6), max_size=4)


@settings(max_examples=60, deadline=None)
@given(program=st.sampled_from(sorted(PROGRAMS)), edge_list=edges, mark_list=marks)
def test_engine_matches_reference(program, edge_list, mark_list):
    facts = {"Edge": sorted(set(edge_list)) or [(0, 0)], "Mark": [(m,) for m in sorted(set(mark_list))] or [(0,)]}
    rules = PROGRAMS[program]
    expected = reference(facts, rules)
    heads = {r.split("(")[0] for r in rules}
    for mode in ("dense", "sparse"):
        engine = build(mode, facts, rules)
        for head in heads:
            arity = len(rules[[r.split("(")[0] for r in rules].index(head)].split("<-")[0].split(","))
            query = head + "(" + ", ".join(f"V{i}" for i in range(arity)) + ")"
            got = engine.query(parse_atom(query)).value
            assert sorted(got) == sorted(expected.get(head, set())), (mode, program, head)
