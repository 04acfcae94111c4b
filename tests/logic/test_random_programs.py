"""Property-based: random safe, stratified Datalog programs (recursion, repeated variables,
constants, negation of base relations, comparisons) give the same answers on the dense and sparse
evaluators as on the plain-Python reference."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from logic_support import DERIVED, build, programs, reference

from tensorlogic.logic import parse_atom

pairs = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=3, max_size=12)


@settings(max_examples=60, deadline=None)
@given(rules=programs(), e=pairs, f=pairs, u=st.lists(st.integers(0, 4), min_size=1, max_size=4))
def test_random_programs_match_the_reference(rules, e, f, u):
    facts = {"E": sorted(set(e)) or [(0, 1)], "F": sorted(set(f)) or [(1, 2)],
             "U": [(x,) for x in sorted(set(u))] or [(0,)]}
    expected = reference(facts, rules)
    for mode in ("dense", "sparse"):
        engine = build(mode, facts, rules)
        for head, arity in DERIVED.items():
            query = f"{head}({', '.join(f'V{i}' for i in range(arity))})"
            got = engine.query(parse_atom(query)).value
            assert sorted(got) == sorted(expected.get(head, set())), (mode, head, rules)
