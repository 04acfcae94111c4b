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
