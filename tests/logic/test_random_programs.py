"""Property-based: random safe, stratified Datalog programs (recursion, repeated variables,
constants, negation of base relations, comparisons) give the same answers on the dense and sparse
evaluators as on the plain-Python reference."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from logic_support import build, reference

from tensorlogic.logic import parse_atom

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
