"""Bad logic programs fail with one clear error naming the problem (and carry the caller's pos)."""
from __future__ import annotations

import pytest

from logic_support import build

from tensorlogic.logic import (ArityError, Atom, LogicEngine, LogicError, LogicTypeError, Name,
                               StratificationError, UnknownRelationError, UnsafeRuleError,
                               parse_atom, parse_rule)

FACTS = {"Edge": [(1, 2), (2, 3)]}


def test_unknown_relation_in_a_rule_body_names_it():
    engine = build("sparse", FACTS, ["P(X) <- Edgee(X, _)"])
    with pytest.raises(UnknownRelationError, match="unknown relation Edgee in rule `P\\(X\\) <- Edgee"):
        engine.infer()


def test_unknown_relation_in_a_query():
    engine = build("sparse", FACTS, [])
    with pytest.raises(UnknownRelationError, match="unknown relation Nope"):
        engine.query(parse_atom("Nope(X)"))


def test_arity_mismatches_in_fact_rule_and_query():
    engine = build("sparse", FACTS, [])
    with pytest.raises(ArityError, match="Edge takes 2 arguments, got 3"):
        engine.add_facts("Edge", [(1, 2, 3)])
    engine.add_rule(parse_rule("P(X) <- Edge(X)"))
    with pytest.raises(ArityError, match="Edge takes 2 arguments, but rule `P\\(X\\) <- Edge\\(X\\)` gives it 1"):
        engine.infer()
    with pytest.raises(ArityError, match="the query Edge\\(X\\) gives 1"):
        build("sparse", FACTS, []).query(parse_atom("Edge(X)"))


def test_unstratifiable_negation_is_rejected():
    rules = ["Node(X) <- Edge(X, _)", "Win(X) <- Node(X), not Lose(X)", "Lose(X) <- Node(X), not Win(X)"]
    engine = build("sparse", FACTS, rules)
    with pytest.raises(StratificationError, match="no stratification"):
        engine.infer()


def test_negation_through_a_longer_cycle_is_rejected():
    rules = ["A(X) <- Edge(X, _), not C(X)", "B(X) <- A(X)", "C(X) <- B(X)"]
    with pytest.raises(StratificationError, match="depends on the negation of C"):
        build("sparse", FACTS, rules).infer()


def test_unsafe_head_variable():
    engine = build("sparse", FACTS, ["P(X, Z) <- Edge(X, Y)"])
    with pytest.raises(UnsafeRuleError, match="variable Z in the head of rule"):
        engine.infer()


def test_unsafe_variable_under_negation():
    # Y in one negated atom alone would be existential ("no Y with ..."); in two it must be bound
    engine = build("sparse", FACTS, ["P(X) <- Edge(X, _), not Edge(Y, X), not Edge(X, Y)"])
    with pytest.raises(UnsafeRuleError, match="variable Y of `not Edge\\(Y, X\\)`"):
        engine.infer()


def test_unsafe_variable_in_a_comparison():
    engine = build("sparse", FACTS, ["P(X) <- Edge(X, _), X != Y"])
    with pytest.raises(UnsafeRuleError, match="variable Y of `X != Y`"):
        engine.infer()


def test_variable_used_at_two_entity_types():
    engine = LogicEngine()
    engine.declare_relation("Lives", ["person", "city"])
    engine.add_rule(parse_rule("Odd(X) <- Lives(X, X)"))
    with pytest.raises(LogicTypeError, match="variable X .* used both as (person|city)"):
        engine.infer()


def test_constant_outside_a_closed_entity_type():
    engine = LogicEngine()
    engine.declare_entity("color", ["red", "green"])
    engine.declare_relation("Paint", ["color"])
    with pytest.raises(LogicTypeError, match="blue is not a color"):
        engine.add_fact(parse_atom("Paint(blue)"))


def test_fact_weight_outside_zero_one():
    with pytest.raises(LogicError, match="must be between 0 and 1, got 1.5"):
        LogicEngine().add_fact(parse_atom("P(a)"), 1.5)


def test_fact_with_a_variable_is_rejected():
    from tensorlogic.logic import Var
    with pytest.raises(LogicError, match="has a variable X"):
        LogicEngine().add_fact(Atom("P", (Var("X"),)))


def test_errors_carry_the_position_the_caller_attached():
    engine = build("sparse", FACTS, [])
    engine.add_rule(parse_rule("P(X) <- Missing(X)", pos=(7, 3)))
    with pytest.raises(UnknownRelationError) as info:
        engine.infer()
    assert info.value.pos == (7, 3)
    with pytest.raises(UnknownRelationError) as info:
        engine.query(Atom("Gone", (Name("X"),), pos=(9, 1)))
    assert info.value.pos == (9, 1)


def test_relation_tensor_refuses_a_huge_sparse_relation():
    engine = LogicEngine()
    engine.add_facts("Edge", [(i, i + 1) for i in range(9000)])
    with pytest.raises(LogicError, match="too large for a dense tensor; query it instead"):
        engine.relation_tensor("Edge")


def test_error_messages_are_one_line():
    engine = build("sparse", FACTS, ["Win(X) <- Edge(X, _), not Win(X)"])
    with pytest.raises(LogicError) as info:
        engine.infer()
    assert "\n" not in str(info.value)


def test_check_reports_rule_errors_without_evaluating():
    engine = build("sparse", FACTS, ["Win(X) <- Edge(X, _), not Win(X)"])
    with pytest.raises(StratificationError):
        engine.check()
    assert engine.last_stats == []
    build("sparse", FACTS, ["Path(X, Y) <- Edge(X, Y)"]).check()
