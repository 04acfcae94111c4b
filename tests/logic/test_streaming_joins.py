"""Joins without a row ceiling: the sparse path streams a rule body's joins in bounded pieces, the
dense/sparse choice is automatic (sizes and density) with `@dense` / `@sparse` to override, and
only real memory exhaustion stops a join (a one-line error). Answers are checked against the
plain-Python reference evaluator."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from logic_support import build, reference

from tensorlogic.logic import LogicEngine, LogicError, parse_atom, parse_rule
from tensorlogic.logic import sparse_eval
from tensorlogic.logic.sparse_eval import Bindings, join_pieces

CLOSURE = ["Path(X, Y) <- Edge(X, Y)", "Path(X, Z) <- Path(X, Y), Edge(Y, Z)"]


def _random_edges(nodes: int, density: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    src, dst = np.nonzero(rng.random((nodes, nodes)) < density)
    return list(zip(src.tolist(), dst.tolist()))


def test_join_pieces_cut_inside_runs_equal_the_nested_loop_join():
    rng = np.random.default_rng(1)
    left = Bindings({0: rng.integers(0, 5, 40), 1: rng.integers(0, 9, 40)}, None, 40)
    right = Bindings({1: rng.integers(0, 9, 30), 2: rng.integers(0, 7, 30)}, None, 30)
    expected = sorted((int(a), int(b), int(c)) for a, b in zip(left.columns[0], left.columns[1])
                      for b2, c in zip(right.columns[1], right.columns[2]) if b == b2)
    for max_rows in (1, 3, 7, 1000):
        pieces = list(join_pieces(left, right, (5, 9, 7), max_rows=max_rows))
        assert all(p.rows <= max_rows for p in pieces)
        got = sorted((int(a), int(b), int(c)) for p in pieces
                     for a, b, c in zip(p.columns[0], p.columns[1], p.columns[2]))
        assert got == expected
    cross = list(join_pieces(Bindings({0: np.arange(4)}, None, 4), Bindings({1: np.arange(5)}, None, 5),
                             (4, 5), max_rows=3))
    assert sum(p.rows for p in cross) == 20
    assert sorted(zip(np.concatenate([p.columns[0] for p in cross]).tolist(),
                      np.concatenate([p.columns[1] for p in cross]).tolist())) == \
        [(a, b) for a in range(4) for b in range(5)]


def test_a_join_far_larger_than_one_piece_streams_to_the_reference_answer(monkeypatch):
    # Pieces of 4,096 rows (the minimum): the closure's joins are ~100x that, and the old engine's
    # per-round ceiling is scaled the same way, so this is the case that used to be refused.
    monkeypatch.setattr(sparse_eval, "CHUNK_BYTES", 1)
    calls = []
    original = sparse_eval.join_pieces

    def counting(*args, **kwargs):
        for piece in original(*args, **kwargs):
            calls.append(piece.rows)
            yield piece
    monkeypatch.setattr(sparse_eval, "join_pieces", counting)
    facts = {"Edge": _random_edges(120, 0.05)}
    rules = CLOSURE + ["Tri(X, Y, Z) <- Edge(X, Y), Edge(Y, Z), Edge(Z, X)",
                       "Pair(X, Y) <- Edge(X, _), Edge(Y, _)"]  # a cross product too
    engine = build("sparse", facts, rules)
    expected = reference(facts, rules)
    for head, query in (("Path", "Path(X, Y)"), ("Tri", "Tri(X, Y, Z)"), ("Pair", "Pair(X, Y)")):
        assert sorted(engine.query(parse_atom(query)).value) == sorted(expected[head])
    assert max(calls) <= 4096 and sum(calls) > 50 * 4096


def test_soft_rules_stream_the_same_values(monkeypatch):
    facts = [(i, (i * 7 + 3) % 60) for i in range(60)] + [(i, (i * 11 + 5) % 60) for i in range(60)]
    def values(chunk_bytes):
        monkeypatch.setattr(sparse_eval, "CHUNK_BYTES", chunk_bytes)
        engine = LogicEngine(dense_limit=0)
        for a, b in facts:
            engine.add_fact(parse_atom(f"E({a}, {b})"), weight=0.5 + (a % 5) / 10)
        engine.add_rule(parse_rule("R(X, Z) <- E(X, Y), E(Y, Z)", temperature=0.7))
        return engine.query(parse_atom("R(X, Y)")).value
    whole, streamed = values(1 << 28), values(1)
    assert [r[:2] for r in whole] == [r[:2] for r in streamed]
    assert np.allclose([r[2] for r in whole], [r[2] for r in streamed], atol=1e-6)


def test_the_choice_is_automatic_by_density_and_override_by_rule():
    dense_graph = {"Edge": _random_edges(300, 0.05)}  # 90,000 cells: above the small-relation limit
    engine = build("sparse", dense_graph, CLOSURE)
    auto = LogicEngine()
    auto.add_facts("Edge", dense_graph["Edge"])
    for rule in CLOSURE:
        auto.add_rule(parse_rule(rule))
    assert auto.query(parse_atom("Path(X, Y)")).value == engine.query(parse_atom("Path(X, Y)")).value
    assert auto.last_stats[-1].mode == "dense" and engine.last_stats[-1].mode == "sparse"
    chain = LogicEngine()
    chain.add_facts("Edge", [(i, i + 1) for i in range(400)])
    for rule in CLOSURE:
        chain.add_rule(parse_rule(rule))
    chain.infer()
    assert chain.last_stats[-1].mode == "sparse"  # sparse facts: many rounds, few rows each
    for path in ("dense", "sparse"):
        forced = LogicEngine(dense_limit=0 if path == "dense" else 1 << 40)
        forced.add_facts("Edge", [(i, i + 1) for i in range(30)])
        forced.add_rule(parse_rule(CLOSURE[0]))
        forced.add_rule(parse_rule(CLOSURE[1], evaluation=path))
        assert len(forced.query(parse_atom("Path(X, Y)")).value) == 31 * 30 // 2
        assert forced.last_stats[-1].mode == path


def test_conflicting_or_impossible_overrides_are_one_line_errors():
    engine = LogicEngine()
    engine.add_facts("Edge", [(0, 1)])
    engine.add_rule(parse_rule(CLOSURE[0], evaluation="dense"))
    engine.add_rule(parse_rule(CLOSURE[1], evaluation="sparse"))
    with pytest.raises(LogicError, match="ask for both @dense and @sparse"):
        engine.infer()
    big = LogicEngine()
    big.add_facts("E", [(i, i, i) for i in range(1000)])
    big.add_rule(parse_rule("R(X, Y, Z) <- E(X, Y, Z)", evaluation="dense"))
    with pytest.raises(LogicError, match="@dense: relation .* 1000 x 1000 x 1000 cells"):
        big.infer()


def test_tl_annotations_choose_the_path(tmp_path):
    from tensorlogic import run
    program = textwrap.dedent("""
        relation Edge(a: node, b: node)
        for i in range(5) { Edge(i, i + 1) }
        Path(X, Y) <- Edge(X, Y)
        @sparse Path(X, Z) <- Path(X, Y), Edge(Y, Z)
        Path(0, Y)?
        """)
    assert "Path(0, Y): 1, 2, 3, 4, 5" in run(program).output
    bad = tmp_path / "bad.tl"
    bad.write_text("Edge(0, 1)\n@dense\n@sparse Path(X, Y) <- Edge(X, Y)\n")
    result = subprocess.run([sys.executable, "-m", "tensorlogic", "run", str(bad)], capture_output=True,
                            text=True, env=_env())
    assert result.returncode != 0 and "@dense or @sparse, not both" in result.stderr
    assert "Traceback" not in result.stderr


def _env():
    import os
    env = dict(os.environ)
    import tensorlogic

    # the package under test (the installed one in CI, whose _core the source tree lacks)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(tensorlogic.__file__)))
    return env


def test_running_out_of_memory_is_a_one_line_error():
    # A cross product whose head (64M tuples) cannot fit in a 1.2 GiB address space.
    script = textwrap.dedent("""
        import resource, sys
        import numpy as np
        from tensorlogic.logic import LogicEngine, LogicError, parse_rule
        engine = LogicEngine(dense_limit=0)
        engine.add_facts("A", [(i,) for i in range(8000)])
        engine.add_rule(parse_rule("P(X, Y) <- A(X), A(Y)"))
        resource.setrlimit(resource.RLIMIT_AS, (1200 << 20, 1200 << 20))
        try:
            engine.infer()
        except LogicError as error:
            print("LogicError:", error.message)
            sys.exit(3)
        print("finished")
        """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_env(),
                            timeout=300)
    assert result.returncode == 3, result.stdout + result.stderr[-2000:]
    assert result.stdout.startswith("LogicError: out of memory evaluating")
    assert len(result.stdout.strip().splitlines()) == 1
