"""Classic Datalog programs with known answers, on both the dense and the sparse evaluator."""
from __future__ import annotations

from logic_support import MODES, answers, build, mode  # noqa: F401 (mode is a fixture)

from tensorlogic.logic import LogicEngine, parse_atom, parse_rule

FAMILY = {"Parent": [("alice", "bob"), ("bob", "carol"), ("carol", "dave")]}
ANCESTOR = ["Ancestor(X, Y) <- Parent(X, Y)", "Ancestor(X, Z) <- Ancestor(X, Y), Parent(Y, Z)"]


def test_transitive_closure_answers_are_sorted_and_complete(mode):
    engine = build(mode, FAMILY, ANCESTOR)
    assert answers(engine, "Ancestor(X, dave)") == [("alice",), ("bob",), ("carol",)]
    assert answers(engine, "Ancestor(alice, Y)") == [("bob",), ("carol",), ("dave",)]
    assert len(answers(engine, "Ancestor(X, Y)")) == 6
    assert answers(engine, "Ancestor(alice, dave)") is True
    assert answers(engine, "Ancestor(dave, alice)") is False
    assert engine.last_stats[-1].mode == mode


def test_query_print_form_matches_the_issue_example(mode):
    engine = build(mode, FAMILY, ANCESTOR)
    assert engine.query(parse_atom("Ancestor(X, dave)")).text() == "Ancestor(X, dave): alice, bob, carol"
    assert engine.query(parse_atom("Ancestor(X, alice)")).text() == "Ancestor(X, alice): no answers"
    assert engine.query(parse_atom("Ancestor(alice, carol)")).text() == "Ancestor(alice, carol): true"
    pairs = engine.query(parse_atom("Parent(X, Y)")).text()
    assert pairs == "Parent(X, Y): (alice, bob), (bob, carol), (carol, dave)"


def test_nonlinear_recursion_reaches_the_same_closure_in_fewer_rounds(mode):
    chain = {"Edge": [(i, i + 1) for i in range(32)]}
    linear = build(mode, chain, ["Path(X, Y) <- Edge(X, Y)", "Path(X, Z) <- Path(X, Y), Edge(Y, Z)"])
    doubling = build(mode, chain, ["Path(X, Y) <- Edge(X, Y)", "Path(X, Z) <- Path(X, Y), Path(Y, Z)"])
    assert answers(linear, "Path(X, Y)") == answers(doubling, "Path(X, Y)")
    assert len(answers(linear, "Path(X, Y)")) == 33 * 32 // 2
    assert doubling.last_stats[-1].iterations < linear.last_stats[-1].iterations


def test_same_generation(mode):
    tree = {"Parent": [("r", "a"), ("r", "b"), ("a", "c"), ("a", "d"), ("b", "e"), ("e", "f")]}
    rules = ["SameGen(X, Y) <- Parent(P, X), Parent(P, Y), X != Y",
             "SameGen(X, Y) <- Parent(P, X), SameGen(P, Q), Parent(Q, Y)"]
    engine = build(mode, tree, rules)
    assert answers(engine, "SameGen(X, Y)") == [("a", "b"), ("b", "a"), ("c", "d"), ("c", "e"),
                                                 ("d", "c"), ("d", "e"), ("e", "c"), ("e", "d")]
    assert answers(engine, "SameGen(c, Y)") == [("d",), ("e",)]
    assert answers(engine, "SameGen(f, Y)") == []


def test_bipartiteness_through_stratified_negation(mode):
    # component 1 is a 4-cycle (bipartite); component 2 a triangle with a tail (not bipartite)
    edges = [(1, 2), (2, 3), (3, 4), (4, 1), (5, 6), (6, 7), (7, 5), (7, 8)]
    facts = {"Edge": edges + [(b, a) for a, b in edges]}
    rules = ["Node(X) <- Edge(X, _)",
             "Odd(X, Y) <- Edge(X, Y)",
             "Odd(X, Y) <- Even(X, Z), Edge(Z, Y)",
             "Even(X, Y) <- Odd(X, Z), Edge(Z, Y)",
             "OnOddWalk(X) <- Odd(X, X)",
             "Conflicted(Y) <- OnOddWalk(X), Odd(X, Y)",
             "Bipartite(X) <- Node(X), not Conflicted(X)"]
    engine = build(mode, facts, rules)
    assert answers(engine, "Bipartite(X)") == [(1,), (2,), (3,), (4,)]
    # 8 hangs off the triangle: 8-7-5-6-7-8 is a closed walk of odd length
    assert answers(engine, "OnOddWalk(X)") == [(5,), (6,), (7,), (8,)]
    assert answers(engine, "Bipartite(8)") is False


def test_reachability_from_a_constant(mode):
    facts = {"Edge": [("s", "a"), ("a", "b"), ("b", "a"), ("c", "d"), ("b", "t")]}
    rules = ["Reach(Y) <- Edge(s, Y)", "Reach(Y) <- Reach(X), Edge(X, Y)",
             "Unreached(X) <- Edge(X, _), not Reach(X)"]
    engine = build(mode, facts, rules)
    assert answers(engine, "Reach(X)") == [("a",), ("b",), ("t",)]
    assert answers(engine, "Unreached(X)") == [("c",), ("s",)]


def test_repeated_variables_in_body_and_head(mode):
    facts = {"Edge": [(1, 1), (1, 2), (2, 3), (3, 3)]}
    rules = ["SelfLoop(X) <- Edge(X, X)", "Same(X, X) <- Edge(X, _)",
             "NoLoop(X) <- Edge(X, _), not Edge(X, X)"]
    engine = build(mode, facts, rules)
    assert answers(engine, "SelfLoop(X)") == [(1,), (3,)]
    assert answers(engine, "Same(X, Y)") == [(1, 1), (2, 2), (3, 3)]
    assert answers(engine, "Same(X, X)") == [(1,), (2,), (3,)]
    assert answers(engine, "NoLoop(X)") == [(2,)]


def test_mutual_recursion_even_and_odd(mode):
    facts = {"Succ": [(i, i + 1) for i in range(10)], "Zero": [(0,)]}
    rules = ["Even(X) <- Zero(X)", "Even(Y) <- Odd(X), Succ(X, Y)", "Odd(Y) <- Even(X), Succ(X, Y)"]
    engine = build(mode, facts, rules)
    assert answers(engine, "Even(X)") == [(0,), (2,), (4,), (6,), (8,), (10,)]
    assert answers(engine, "Odd(X)") == [(1,), (3,), (5,), (7,), (9,)]


def test_multiple_rules_per_head_and_ground_body_atoms(mode):
    facts = {"A": [(1,), (2,)], "B": [(3,)], "Flag": [("on",)]}
    rules = ["U(X) <- A(X)", "U(X) <- B(X)", "Gated(X) <- A(X), Flag(on)", "Off(X) <- A(X), Flag(off)"]
    engine = build(mode, facts, rules)
    assert answers(engine, "U(X)") == [(1,), (2,), (3,)]
    assert answers(engine, "Gated(X)") == [(1,), (2,)]
    assert answers(engine, "Off(X)") == []


def test_comparisons_order_numbers_numerically(mode):
    facts = {"N": [(2,), (10,), (33,)]}
    engine = build(mode, facts, ["Less(X, Y) <- N(X), N(Y), X < Y", "Big(X) <- N(X), X >= 10"])
    assert answers(engine, "Less(X, Y)") == [(2, 10), (2, 33), (10, 33)]
    assert answers(engine, "Big(X)") == [(10,), (33,)]


def test_new_facts_after_a_query_are_seen_by_the_next_query(mode):
    engine = build(mode, FAMILY, ANCESTOR)
    assert answers(engine, "Ancestor(X, erin)") == []
    engine.add_facts("Parent", [("dave", "erin")])
    assert answers(engine, "Ancestor(X, erin)") == [("alice",), ("bob",), ("carol",), ("dave",)]


def test_relation_tensor_is_the_boolean_closure_matrix(mode):
    engine = build(mode, FAMILY, ANCESTOR)
    tensor = engine.relation_tensor("Ancestor")
    assert tensor.dtype == bool and tensor.shape == (4, 4)
    axes = engine.relation_axes("Ancestor")
    assert axes == [["alice", "bob", "carol", "dave"]] * 2
    expected = [[0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 0, 0]]
    assert tensor.astype(int).tolist() == expected


def test_declared_entity_types_keep_separate_domains(mode):
    engine = LogicEngine(**MODES[mode])
    engine.declare_entity("person", ["ann", "bob"])
    engine.declare_entity("city")
    engine.declare_relation("Lives", ["person", "city"])
    engine.declare_relation("Knows", ["person", "person"])
    engine.add_facts("Lives", [("ann", "paris"), ("bob", "rome")])
    engine.add_facts("Knows", [("ann", "bob")])
    engine.add_rule(parse_rule("Visits(X, C) <- Knows(X, Y), Lives(Y, C)"))
    assert answers(engine, "Visits(X, C)") == [("ann", "rome")]
    assert engine.relation_tensor("Lives").shape == (2, 2)
    assert engine.relation_axes("Visits") == [["ann", "bob"], ["paris", "rome"]]


def test_empty_relations_and_zero_arity_propositions(mode):
    engine = LogicEngine(**MODES[mode])
    engine.declare_relation("Parent", ["person", "person"])
    engine.declare_relation("Flag", [])
    for rule in ANCESTOR + ["Any() <- Flag()", "Quiet() <- not Any()"]:
        engine.add_rule(parse_rule(rule))
    assert answers(engine, "Ancestor(X, Y)") == []
    assert engine.relation_tensor("Ancestor").shape == (0, 0)
    assert answers(engine, "Any()") is False and answers(engine, "Quiet()") is True
    engine.add_fact(parse_atom("Flag()"))
    assert answers(engine, "Any()") is True and answers(engine, "Quiet()") is False


def test_facts_for_a_rule_defined_relation_before_its_body_relation_exists(mode):
    engine = LogicEngine(**MODES[mode])
    for rule in ANCESTOR:
        engine.add_rule(parse_rule(rule))
    engine.add_fact(parse_atom("Ancestor(a, b)"))  # Parent has no facts yet
    engine.add_fact(parse_atom("Parent(b, c)"))
    assert answers(engine, "Ancestor(X, Y)") == [("a", "b"), ("a", "c"), ("b", "c")]
    assert answers(engine, "Ancestor(_, Y)") == [("b",), ("c",)]
    assert answers(engine, "Ancestor(a, _)") is True
    assert answers(engine, "Ancestor(nobody, Y)") == []


def test_negation_after_a_join_that_finds_nothing(mode):
    engine = LogicEngine(**MODES[mode])
    engine.declare_relation("Start", ["entity"])
    engine.declare_relation("Blocked", ["entity"])
    engine.add_facts("Edge", [(1, 2)])
    engine.add_rule(parse_rule("Next(Y) <- Start(X), Edge(X, Y), not Blocked(Y)"))
    assert answers(engine, "Next(Y)") == []
    engine.add_facts("Start", [(1,)])
    assert answers(engine, "Next(Y)") == [(2,)]
