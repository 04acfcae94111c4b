"""Weighted facts, soft rules with a temperature, and sigmoid_t: T = 0 is deduction, T > 0 grades."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from logic_support import MODES, mode  # noqa: F401 (mode is a fixture)

from tensorlogic.logic import ConvergenceError, LogicEngine, parse_atom, parse_rule
from tensorlogic.builtins.logic import sigmoid_t


def smokers(mode: str, temperature):
    engine = LogicEngine(**MODES[mode])
    engine.add_fact(parse_atom("Smokes(ann)"))
    engine.add_fact(parse_atom("Friend(ann, bob)"), 0.9)
    engine.add_fact(parse_atom("Friend(bob, cat)"), 0.8)
    engine.add_rule(parse_rule("Smokes(Y) <- Friend(X, Y), Smokes(X)", temperature=temperature))
    return engine


def soft(x, t):
    return math.tanh(x / (2 * t))


def test_soft_rule_values_follow_the_tanh_step(mode):
    result = smokers(mode, 0.5).query(parse_atom("Smokes(X)"))
    bob = soft(0.9, 0.5)
    cat = soft(0.8 * bob, 0.5)
    assert [r[0] for r in result.rows] == ["ann", "bob", "cat"]
    assert result.weights == pytest.approx([1.0, bob, cat], abs=1e-5)
    assert result.text() == f"Smokes(X): ann 1.000, bob {bob:.3f}, cat {cat:.3f}"


def test_temperature_zero_is_plain_deduction(mode):
    engine = smokers(mode, 0.0)
    result = engine.query(parse_atom("Smokes(X)"))
    assert result.rows == [("ann",), ("bob",), ("cat",)]
    assert result.weights is None  # the head is Boolean again
    assert engine.query(parse_atom("Smokes(cat)")).value is True


def test_higher_temperature_gives_lower_belief(mode):
    cold = smokers(mode, 0.2).query(parse_atom("Smokes(cat)")).truth
    warm = smokers(mode, 2.0).query(parse_atom("Smokes(cat)")).truth
    assert 0 < warm < cold < 1


def test_weighted_facts_keep_their_values_and_hard_rules_use_their_support(mode):
    engine = LogicEngine(**MODES[mode])
    engine.add_fact(parse_atom("Edge(a, b)"), 0.25)
    engine.add_fact(parse_atom("Edge(b, c)"))
    engine.add_rule(parse_rule("Path(X, Y) <- Edge(X, Y)"))
    engine.add_rule(parse_rule("Path(X, Z) <- Path(X, Y), Edge(Y, Z)"))
    engine.add_rule(parse_rule("Uncertain(X, Y) <- Path(X, Y), not Edge(X, Y)"))
    assert engine.query(parse_atom("Edge(a, b)")).truth == pytest.approx(0.25)
    assert engine.query(parse_atom("Path(X, Y)")).value == [("a", "b"), ("a", "c"), ("b", "c")]
    # not Edge(a, b) is not certainly false (its value is 0.25 < 1), so the pair stays
    assert engine.query(parse_atom("Uncertain(X, Y)")).value == [("a", "b"), ("a", "c")]
    tensor = engine.relation_tensor("Edge")
    assert tensor.dtype == np.float32 and tensor[0, 1] == pytest.approx(0.25)


def test_soft_negation_scales_by_one_minus_the_value(mode):
    engine = LogicEngine(**MODES[mode])
    engine.add_fact(parse_atom("Bird(tweety)"))
    engine.add_fact(parse_atom("Bird(pingu)"))
    engine.add_fact(parse_atom("Penguin(pingu)"), 0.9)
    engine.add_rule(parse_rule("Flies(X) <- Bird(X), not Penguin(X)", temperature=1.0))
    result = engine.query(parse_atom("Flies(X)"))
    assert dict(zip([r[0] for r in result.rows], result.weights)) == pytest.approx(
        {"pingu": soft(0.1, 1.0), "tweety": soft(1.0, 1.0)}, abs=1e-5)


def test_soft_recursion_on_a_cycle_converges(mode):
    engine = LogicEngine(**MODES[mode])
    engine.add_fact(parse_atom("Seed(a)"))
    for a, b in [("a", "b"), ("b", "c"), ("c", "a")]:
        engine.add_fact(parse_atom(f"Link({a}, {b})"), 0.9)
    engine.add_rule(parse_rule("Belief(X) <- Seed(X)", temperature=0.5))
    engine.add_rule(parse_rule("Belief(Y) <- Belief(X), Link(X, Y)", temperature=0.5))
    values = engine.query(parse_atom("Belief(X)")).weights
    assert all(0 < v < 1 for v in values) and values[0] > values[1] > values[2]


def test_soft_iteration_limit_is_a_clear_error():
    engine = smokers("sparse", 0.5)
    engine.max_soft_iterations = 1
    with pytest.raises(ConvergenceError, match="did not converge in 1 iterations"):
        engine.infer()


def test_sigmoid_t_matches_its_definition_and_is_a_step_at_zero():
    assert sigmoid_t(0.0, 1.0) == pytest.approx(0.5)
    assert sigmoid_t(1.0, 0.5) == pytest.approx(1 / (1 + math.exp(-2.0)))
    assert sigmoid_t(-3.0, 0) == 0.0 and sigmoid_t(3.0, 0) == 1.0 and sigmoid_t(0.0, 0) == 0.0
    out = sigmoid_t(np.array([-1.0, 0.0, 2.0], np.float32), 0.25)
    out = out.numpy() if hasattr(out, "numpy") else out
    np.testing.assert_allclose(out, 1 / (1 + np.exp(-np.array([-1.0, 0.0, 2.0]) / 0.25)), rtol=1e-6)
    with pytest.raises(Exception, match="temperature must be >= 0"):
        sigmoid_t(1.0, -1.0)


@settings(max_examples=30, deadline=None)
@given(links=st.lists(st.tuples(st.tuples(st.integers(0, 5), st.integers(0, 5)), st.floats(0.05, 1.0)),
                      min_size=1, max_size=10, unique_by=lambda t: t[0]),
       blocked=st.lists(st.tuples(st.integers(0, 5), st.floats(0.0, 1.0)), max_size=3, unique_by=lambda t: t[0]),
       temperature=st.sampled_from([0.0, 0.3, 1.0, 4.0]))
def test_soft_strata_agree_between_dense_and_sparse(links, blocked, temperature):
    results = []
    for mode in ("dense", "sparse"):
        engine = LogicEngine(**MODES[mode])
        engine.declare_relation("Blocked", ["entity"])
        engine.add_fact(parse_atom("Seed(0)"))
        for (a, b), w in links:
            engine.add_fact(parse_atom(f"Link({a}, {b})"), w)
        for node, w in blocked:
            engine.add_fact(parse_atom(f"Blocked({node})"), w)
        engine.add_rule(parse_rule("Belief(X) <- Seed(X)"))
        engine.add_rule(parse_rule("Belief(Y) <- Belief(X), Link(X, Y), not Blocked(Y)", temperature=temperature))
        engine.add_rule(parse_rule("Both(X, Y) <- Belief(X), Belief(Y), Link(X, Y)", temperature=temperature))
        results.append([engine.query(parse_atom(q)) for q in ("Belief(X)", "Both(X, Y)")])
    for dense, sparse in zip(*results):
        assert dense.rows == sparse.rows
        if dense.weights is None:
            assert sparse.weights is None
        else:
            np.testing.assert_allclose(dense.weights, sparse.weights, rtol=1e-5, atol=1e-6)
