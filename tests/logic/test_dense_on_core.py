"""The dense evaluator on the native runtime (`tensorlogic._core`) derives exactly what it derives
on NumPy; skipped when the extension is not built."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tensorlogic.logic import LogicEngine, parse_atom, parse_rule
from tensorlogic.logic.contraction import contract
from tensorlogic.logic.dense_ops import CoreOps, NumpyOps

core = pytest.importorskip("tensorlogic._core")

RULES = ["Path(X, Y) <- Edge(X, Y)", "Path(X, Z) <- Path(X, Y), Path(Y, Z)",
         "Loop(X) <- Edge(X, X)", "Same(X, X) <- Edge(X, _)", "From0(Y) <- Path(0, Y)",
         "Sink(X) <- Edge(_, X), not Edge(X, _)", "Pair(X, Y) <- Edge(X, Y), X < Y",
         "Unreach(X, Y) <- Edge(X, _), Edge(_, Y), not Path(X, Y)"]
QUERIES = ["Path(X, Y)", "Loop(X)", "Same(X, Y)", "From0(Y)", "Sink(X)", "Pair(X, Y)", "Unreach(X, Y)"]


def run(ops, edges, soft_edges):
    engine = LogicEngine(dense_limit=1 << 20, dense_evaluator=ops)
    engine.add_facts("Edge", edges)
    engine.declare_relation("Trust", ["entity", "entity"])
    for (a, b), w in soft_edges:
        engine.add_fact(parse_atom(f"Trust({a}, {b})"), w)
    for rule in RULES:
        engine.add_rule(parse_rule(rule))
    engine.add_rule(parse_rule("Belief(Y) <- Trust(X, Y)", temperature=0.5))
    engine.add_rule(parse_rule("Belief(Y) <- Belief(X), Trust(X, Y)", temperature=0.5))
    results = [engine.query(parse_atom(q)).value for q in QUERIES]
    belief = engine.query(parse_atom("Belief(X)")) if soft_edges else None
    assert all(s.mode == "dense" for s in engine.last_stats)
    return results, belief


@settings(max_examples=15, deadline=None)
@given(edges=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=12, unique=True),
       soft=st.lists(st.tuples(st.tuples(st.integers(0, 4), st.integers(0, 4)),
                               st.floats(0.05, 1.0)), max_size=5, unique_by=lambda t: t[0]))
def test_core_and_numpy_dense_evaluation_agree(edges, soft):
    on_core, core_belief = run(CoreOps(core), edges, soft)
    on_numpy, numpy_belief = run(NumpyOps(), edges, soft)
    assert on_core == on_numpy
    if soft:
        assert core_belief.rows == numpy_belief.rows
        np.testing.assert_allclose(core_belief.weights, numpy_belief.weights, rtol=1e-5, atol=1e-6)


def test_contract_on_core_matches_einsum():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    b = rng.standard_normal((5, 4, 2)).astype(np.float32)
    ops = CoreOps(core)
    got = contract(ops, [(ops.from_numpy(a), ("i", "j", "k")), (ops.from_numpy(b), ("k", "j", "l"))],
                   ("l", "i"), {"i": 3, "j": 4, "k": 5, "l": 2})
    np.testing.assert_allclose(got.numpy(), np.einsum("ijk,kjl->li", a, b), rtol=1e-4, atol=1e-4)
