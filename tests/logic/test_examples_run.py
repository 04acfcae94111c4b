"""The programs in examples/logic/ run through `tensorlogic.run` and `tl run` and print the
expected answers; logic mistakes come back as TL errors pointing into the program."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import tensorlogic

api = pytest.importorskip("tensorlogic.api")

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "logic")
# the tensorlogic this test process imports (the source tree or an installed package)
PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(tensorlogic.__file__)))


def run_program(path: str) -> str:
    result = api.run(path)
    assert result.error is None, result.error_text
    return result.output


def run_example(name: str) -> str:
    return run_program(os.path.join(EXAMPLES, name))


def test_family_tree_example():
    text = run_example("family_tree.tl")
    assert "Ancestor(X, dave): alice, bob, carol\n" in text
    assert "Grandparent(alice, Z): carol, chris\n" in text
    assert "Founder(X): alice\n" in text
    assert "Sibling(bob, Y): beth\n" in text
    assert "SameGeneration(dave, Y): dana, dave\n" in text
    assert "alice has 6 descendants" in text
    assert "dana descends from alice" in text
    assert "Ancestor(X, erin): alice, bob, carol, dave\n" in text


def test_reachability_example():
    text = run_example("reachability.tl")
    assert "FromStart(Y): a, b, c, exit\n" in text
    assert "OnCycle(X): a, b, c\n" in text
    assert "Unreachable(X): island, shore, start\n" in text
    assert "DeadEnd(X): exit, shore\n" in text
    assert "Path(start, exit): true\nPath(exit, start): false\n" in text
    assert "the closure has 17 pairs" in text


def test_soft_rules_example():
    text = run_example("soft_rules.tl")
    assert "Smokes(X): ann 1.000, bob 0.716, cat 0.518, dan 0.154\n" in text
    assert "Trusted(ann, Y): bob\n" in text
    assert "[2.5, 0. ]" in text.replace("[2.5, 0.]", "[2.5, 0. ]")


def test_issue_example_prints_answers_and_returns_values(tmp_path):
    program = tmp_path / "issue.tl"
    program.write_text(
        "relation Parent(x: person, y: person)\n"
        "Ancestor(X, Y) <- Parent(X, Y)\n"
        "Ancestor(X, Z) <- Ancestor(X, Y), Parent(Y, Z)\n"
        "main {\n"
        "    Parent(alice, bob)  Parent(bob, carol)  Parent(carol, dave)\n"
        "    Ancestor(X, dave)?\n"
        "    let a = Ancestor(alice, Y)?\n"
        "    print(len(a))\n"
        "    let g = Ancestor(alice, dave)?\n"
        "    print(g)\n"
        "    print(relation_tensor(Ancestor))\n"
        "}\n")
    text = run_program(str(program))
    lines = text.splitlines()
    assert lines[0] == "Ancestor(X, dave): alice, bob, carol"
    assert lines[1] == "3"
    assert lines[2] == "true"
    assert "[false, true, true, true]" in text


def test_comparisons_in_rule_bodies(tmp_path):
    program = tmp_path / "compare.tl"
    program.write_text(
        "relation Edge(x: node, y: node)\n"
        "Forward(X, Y) <- Edge(X, Y), X < Y\n"
        "Other(X) <- Edge(X, _), X != 2\n"
        "main {\n"
        "    Edge(1, 2)  Edge(2, 1)  Edge(3, 10)  Edge(10, 10)\n"
        "    Forward(X, Y)?\n"
        "    Other(X)?\n"
        "}\n")
    assert run_program(str(program)) == "Forward(X, Y): (1, 2), (3, 10)\nOther(X): 1, 3, 10\n"


@pytest.mark.parametrize("source, message", [
    ("P(X) <- Q(X)\nmain { P(a)? }", "unknown relation Q"),
    ("relation E(x: node, y: node)\nP(X) <- E(X)\nmain { P(a)? }", "E takes 2 arguments"),
    ("relation E(x: node, y: node)\nW(X) <- E(X, _), not W(X)\nmain { W(a)? }", "no stratification"),
    ("relation E(x: node, y: node)\nP(X, Z) <- E(X, Y)\nmain { P(a, b)? }", "variable Z in the head"),
    ("relation E(x: node, y: node)\nP(X) <- E(X, _), X != Z\nmain { P(a)? }", "variable Z of `X != Z`"),
    ("relation E(x: node, y: node)\nP(X) <- E(X, Y), X + Y\nmain { P(a)? }", "comparisons like X != Y"),
])
def test_logic_errors_point_at_the_program(tmp_path, source, message):
    program = tmp_path / "bad.tl"
    program.write_text(source)
    result = api.run(str(program))
    assert result.error is not None
    assert message in result.error_text and "bad.tl:" in result.error_text
    assert "Traceback" not in result.error_text


def test_tl_run_command_runs_the_family_tree():
    env = dict(os.environ, PYTHONPATH=os.path.abspath(PYTHON_DIR))
    done = subprocess.run([sys.executable, "-m", "tensorlogic", "run", os.path.join(EXAMPLES, "family_tree.tl")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Ancestor(X, dave): alice, bob, carol\n")
