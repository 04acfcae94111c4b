"""Logic statements in TL programs mean what a user reads: a bound program variable in an atom is its
value, a query returns what it prints, Datalog's anonymous variables, arithmetic terms, and safety and
stratification checked when the rules are defined."""
from __future__ import annotations

import textwrap

import tensorlogic


def out(src: str) -> str:
    result = tensorlogic.run(textwrap.dedent(src), filename="prog.tl")
    assert result.error is None, result.error_text
    return result.output


def err(src: str):
    result = tensorlogic.run(textwrap.dedent(src), filename="prog.tl")
    assert result.error is not None, f"expected an error, got output {result.output!r}"
    return result.error


# ---------------------------------------------------------------- program variables in atoms

def test_a_loop_variable_in_a_fact_is_its_value_not_its_name():
    assert out("""
        relation Edge(a: node, b: node)
        main {
            for i in range(3) { Edge(i, i + 1) }
            Edge(X, Y)?
        }""") == "Edge(X, Y): (0, 1), (1, 2), (2, 3)\n"


def test_a_bound_variable_in_a_query_and_a_rule_is_its_value():
    assert out("""
        relation Edge(a: node, b: node)
        Edge(0, 1)  Edge(1, 2)  Edge(2, 3)
        let start = 1
        From(Y) <- Edge(start, Y)
        main {
            Edge(start, Y)?
            From(Y)?
        }""") == "Edge(1, Y): 2\nFrom(Y): 2\n"


def test_a_capitalised_program_variable_in_an_atom_is_an_error_not_a_guess():
    e = err("""
        relation Edge(a: node, b: node)
        main {
            let X = 2
            Edge(X, Y)?
        }""")
    assert "'X' is a program variable" in e.message and e.span.line == 5


# ---------------------------------------------------------------- query values

def test_a_ground_query_on_a_weighted_fact_returns_its_truth_value():
    assert out("""
        relation W(x: thing)
        W(a) = 0.75
        main {
            let w = W(a)?
            print(w)
            print(W(b)?)
            print(W(X)?)
        }""") == "0.75\n0.0\n[(\"a\", 0.75)]\n"


def test_a_ground_query_on_a_boolean_relation_returns_a_bool():
    assert out("Edge(a, b)\nprint(Edge(a, b)?, Edge(b, a)?)\n") == "true false\n"


# ---------------------------------------------------------------- anonymous and existential variables

def test_anonymous_variables_in_bodies_negations_and_queries():
    assert out("""
        Edge(a, b)  Edge(b, c)  S(a, x, p)
        HasOut(X) <- Edge(X, _)
        NoS(X) <- Edge(X, _), not S(X, _, _)
        main { HasOut(X)?  NoS(X)?  Edge(_, Y)? }""") == "HasOut(X): a, b\nNoS(X): b\nEdge(_, Y): b, c\n"


def test_a_variable_only_in_one_negated_atom_reads_as_existential():
    assert out("""
        S(a, 5, p)  S(b, 6, q)  Node(a)  Node(b)
        NoFive(X) <- Node(X), not S(X, 5, P)
        main { NoFive(X)? }""") == "NoFive(X): b\n"


def test_anonymous_variable_in_a_rule_head_is_an_error():
    e = err("Edge(a, b)\nP(X, _) <- Edge(X, _)\n")
    assert "the head of rule" in e.message and "`_`" in e.message and e.span.line == 2


# ---------------------------------------------------------------- checks when rules are defined

def test_an_unsafe_rule_is_an_error_even_if_nothing_queries_it():
    e = err('Edge(a, b)\nP(X, Z) <- Edge(X, Y)\nprint("ran")\n')
    assert "variable Z in the head" in e.message and e.span.line == 2
    e = err('Edge(a, b)\nP(X) <- Edge(X, _), not S(X, Q), not T(Q)\nprint("ran")\n')
    assert "variable Q of `not S(X, Q)`" in e.message


def test_negation_through_recursion_is_an_error_even_if_nothing_queries_it():
    e = err('Edge(a, b)\nA(X) <- Edge(X, _), not B(X)\nB(X) <- A(X)\nprint("ran")\n')
    assert "no stratification" in e.message


def test_tl_check_reports_every_unsafe_and_unstratified_rule(tmp_path):
    from tensorlogic.interp.static_check import check_file
    path = tmp_path / "p.tl"
    path.write_text("Edge(a, b)\nP(X, Z) <- Edge(X, Y)\nW(X) <- Edge(X, _), not W(X)\n")
    errors = check_file(str(path))
    assert [e.span.line for e in errors] == [2, 3]
    assert "variable Z" in errors[0].message and "no stratification" in errors[1].message


# ---------------------------------------------------------------- arithmetic terms over integers

def test_arithmetic_in_rule_heads_and_body_comparisons():
    assert out("""
        Num(0)
        Num(N + 1) <- Num(N), N < 5
        Pair(1, 2)  Pair(3, 4)
        Sum(A, A + B) <- Pair(A, B)
        Big(A, B) <- Pair(A, B), A * 2 + 1 > B + 2
        Next(X, Y) <- Num(X), Num(Y), Y == X + 1
        Neg(-N) <- Num(N), N % 2 == 1
        main { Num(X)?  Sum(X, S)?  Big(A, B)?  Next(X, Y)?  Neg(X)? }""") == (
        "Num(X): 0, 1, 2, 3, 4, 5\n"
        "Sum(X, S): (1, 3), (3, 7)\n"
        "Big(A, B): (3, 4)\n"
        "Next(X, Y): (0, 1), (1, 2), (2, 3), (3, 4), (4, 5)\n"
        "Neg(X): -5, -3, -1\n")


def test_arithmetic_rules_respect_stratified_negation():
    # Odd numbers come from a negation of Even, which an arithmetic rule completes first.
    assert out("""
        Num(0)
        Num(N + 1) <- Num(N), N < 6
        Even(0)
        Even(N + 2) <- Even(N), N < 6
        Odd(N) <- Num(N), not Even(N)
        Shift(N + 10) <- Odd(N)
        main { Shift(X)? }""") == "Shift(X): 11, 13, 15\n"


def test_unbounded_arithmetic_recursion_is_an_error_not_a_hang(monkeypatch):
    from tensorlogic.logic import arithmetic
    monkeypatch.setattr(arithmetic, "ROUND_LIMIT", 50)
    e = err("Num(0)\nNum(N + 1) <- Num(N)\nNum(X)?\n")
    assert "keep deriving new numbers" in e.message


def test_arithmetic_on_a_name_constant_is_an_error():
    e = err("P(a)\nQ(X + 1) <- P(X)\nQ(Y)?\n")
    assert "not an integer" in e.message
