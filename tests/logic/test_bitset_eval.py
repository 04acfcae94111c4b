"""The bitset-row evaluator (bitset_eval.py): on the programs whose recursive rules are row updates
H(X, Z) |= B(Y, Z) it is chosen automatically, and its answers equal the plain-Python reference's
and the forced sparse path's; programs outside that shape keep the sparse path."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from logic_support import build, reference

from tensorlogic.logic import parse_atom, parse_rule

PROGRAMS = {
    "andersen": ["Pt(P, O) <- Addr(P, O)", "Pt(P, O) <- Copy(P, Q), Pt(Q, O)",
                 "Pt(P, O) <- Load(P, Q), Pt(Q, R), Pt(R, O)",
                 "Pt(R, O) <- Store(P, Q), Pt(P, R), Pt(Q, O)"],
    "doubling": ["Path(X, Y) <- Edge(X, Y)", "Path(X, Z) <- Path(X, Y), Path(Y, Z)"],
    "left-linear": ["Path(X, Y) <- Edge(X, Y)", "Path(X, Z) <- Edge(X, Y), Path(Y, Z)"],
    "mutual": ["A(X, Y) <- Edge(X, Y)", "B(X, Z) <- A(X, Y), A(Y, Z)", "A(X, Z) <- Copy(X, Y), B(Y, Z)"],
    "filters": ["Block(X, Y) <- Load(X, Y)",
                "Path(X, Y) <- Edge(X, Y)",
                "Path(X, Z) <- Edge(X, Y), Path(Y, Z), X != Y, not Block(X, Y)"],
    "long-rest": ["R(X, Y) <- Addr(X, Y)", "R(X, Z) <- Edge(X, Y), Copy(Y, W), R(W, Z)",
                  "R(X, Z) <- R(X, Y), Store(Y, W), R(W, Z)"],
    "constant": ["Path(X, Y) <- Edge(X, Y)", "Path(X, Z) <- Edge(X, Y), Edge(Y, 0), Path(Y, Z)"],
}

pairs = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=14)


def _facts(draw_pairs: dict) -> dict:
    return {name: sorted(set(rows)) or [(0, 1)] for name, rows in draw_pairs.items()}


@settings(max_examples=40, deadline=None)
@given(program=st.sampled_from(sorted(PROGRAMS)), edge=pairs, addr=pairs, copy=pairs, load=pairs,
       store=pairs)
def test_bitset_answers_equal_the_reference_and_the_sparse_path(program, edge, addr, copy, load, store):
    facts = _facts({"Edge": edge, "Addr": addr, "Copy": copy, "Load": load, "Store": store})
    rules = PROGRAMS[program]
    engine = build("sparse", facts, rules)
    expected = reference(facts, rules)
    forced = build("sparse", facts, [dataclasses.replace(parse_rule(r), evaluation="sparse") for r in rules])
    heads = sorted({parse_rule(r).head.relation for r in rules})
    for head in heads:
        got = sorted(engine.query(parse_atom(f"{head}(X, Y)")).value)
        assert got == sorted(expected.get(head, []))
        assert got == sorted(forced.query(parse_atom(f"{head}(X, Y)")).value)
    assert "bitset" in {s.mode for s in engine.last_stats}


@pytest.mark.parametrize("rules", [
    ["Path(X, Y) <- Edge(X, Y)", "Path(X, Z) <- Path(X, Y), Edge(Y, Z)"],  # B is an input: sparse
    ["T(X, Y, Z) <- Edge(X, Y), Edge(Y, Z)", "T(X, Y, Z) <- T(X, Y, W), Edge(W, Z)"],  # ternary head
])
def test_other_shapes_keep_the_sparse_path(rules):
    facts = {"Edge": [(0, 1), (1, 2), (2, 3)]}
    engine = build("sparse", facts, rules)
    engine.infer()
    assert {s.mode for s in engine.last_stats} == {"sparse"}


def test_key_set_answers_the_same_before_and_after_it_turns_into_a_bitmap():
    import numpy as np

    from tensorlogic.logic.relation_table import KeySet
    rng = np.random.default_rng(5)
    space = 1 << 20
    keys = KeySet(space)
    added = set()
    kinds = []
    for _ in range(24):  # 16 new keys a round: runs first, the bitmap from space / BITMAP_FILL keys
        fresh = np.setdiff1d(rng.integers(0, space, 16), np.fromiter(added, np.int64, len(added)))
        keys.add(fresh)
        added.update(fresh.tolist())
        probe = np.concatenate([rng.integers(0, space, 200), fresh])
        assert keys.contains(probe).tolist() == [int(k) in added for k in probe]
        kinds.append(keys.bits is not None)
    assert kinds[0] is False and kinds[-1] is True and not keys.runs
