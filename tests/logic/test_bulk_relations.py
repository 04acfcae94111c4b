"""Bulk relations: load_relation from .csv / .tsv / .npy files and arrays, save_relation, checked
against facts added one by one (and the reference evaluator); bad rows are one-line errors naming
file:line; loading does no per-tuple Python work."""
from __future__ import annotations

import numpy as np
import pytest

from logic_support import reference

from tensorlogic import run
from tensorlogic.logic import LogicEngine, LogicError, parse_atom, parse_rule
from tensorlogic.logic.domains import EntityDomain

CLOSURE = ["Path(X, Y) <- Edge(X, Y)", "Path(X, Z) <- Path(X, Y), Edge(Y, Z)"]


def _engine(rules=CLOSURE):
    engine = LogicEngine(dense_limit=0)
    engine.declare_relation("Edge", ["node", "node"])
    for rule in rules:
        engine.add_rule(parse_rule(rule))
    return engine


def _edges(n=300, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 120, (n, 2))


@pytest.mark.parametrize("kind", ["csv", "tsv", "npy", "array"])
def test_loaded_relation_equals_facts_added_one_by_one(tmp_path, kind):
    edges = _edges()
    source = edges
    if kind == "npy":
        source = str(tmp_path / "e.npy")
        np.save(source, edges)
    elif kind in ("csv", "tsv"):
        source = str(tmp_path / f"e.{kind}")
        sep = "," if kind == "csv" else "\t"
        lines = ["# edges", ""] + [f"{a}{sep} {b}" if i % 7 == 0 else f"{a}{sep}{b}" for i, (a, b) in
                                   enumerate(edges.tolist())]
        (tmp_path / f"e.{kind}").write_text("\n".join(lines) + "\n")
    engine = _engine()
    assert engine.load_relation("Edge", source) == len(edges)
    expected = reference({"Edge": [tuple(e) for e in edges.tolist()]}, CLOSURE)
    assert sorted(engine.query(parse_atom("Path(X, Y)")).value) == sorted(expected["Path"])
    assert sorted(engine.query(parse_atom("Edge(X, Y)")).value) == sorted(expected["Edge"])


def test_names_and_integers_mix_and_closed_types_are_checked(tmp_path):
    path = tmp_path / "likes.csv"
    path.write_text('alice,1\nbob,"carol"\n"alice",bob\n')
    engine = LogicEngine()
    engine.declare_relation("Likes", ["person", "person"])
    engine.load_relation("Likes", str(path))
    assert engine.query(parse_atom("Likes(X, Y)")).value == [("alice", 1), ("alice", "bob"), ("bob", "carol")]
    closed = LogicEngine()
    closed.declare_entity("color", ["red", "green"])
    closed.declare_relation("C", ["color"])
    bad = tmp_path / "c.tsv"
    bad.write_text("red\n\n# comment\ngreen\nblue\n")
    with pytest.raises(LogicError, match=r"c\.tsv:5: column 1: blue is not a color"):
        closed.load_relation("C", str(bad))


@pytest.mark.parametrize("text, line, message", [
    ("1,2\n3,4\n\n5,6,7\n", 4, "expected 2 fields, got 3"),
    ("1,2\n# c\n3\n", 3, "expected 2 fields, got 1"),
    ("1,2\n3,\n", 2, "empty field"),
])
def test_bad_rows_name_file_and_line(tmp_path, text, line, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(LogicError) as info:
        _engine().load_relation("Edge", str(path))
    assert info.value.message.startswith(f"{path}:{line}: {message}")
    assert "\n" not in info.value.message


def test_bad_sources_are_one_line_errors(tmp_path):
    engine = _engine()
    cases = [(str(tmp_path / "e.json"), "must end in .csv, .tsv or .npy"),
             (str(tmp_path / "missing.csv"), "no such file"),
             (np.zeros((3, 3), np.int64), r"shape \[n, 2\]\), got shape \[3, 3\]"),
             (np.array([[1.5, 2.0]]), "row 0 holds a value that is not an integer"),
             (np.array([[True, False]]), "expected integers, got bool")]
    for source, message in cases:
        with pytest.raises(LogicError, match=message):
            engine.load_relation("Edge", source)
    (tmp_path / "broken.npy").write_bytes(b"not npy")
    with pytest.raises(LogicError, match="not a valid .npy file"):
        engine.load_relation("Edge", str(tmp_path / "broken.npy"))
    with pytest.raises(LogicError, match="unknown relation Nope"):
        engine.load_relation("Nope", np.zeros((1, 2), np.int64))


@pytest.mark.parametrize("suffix", ["csv", "tsv", "npy"])
def test_save_then_load_round_trips(tmp_path, suffix):
    engine = _engine()
    engine.load_relation("Edge", _edges(200, 1))
    path = str(tmp_path / f"path.{suffix}")
    written = engine.save_relation("Path", path)
    again = LogicEngine()
    again.declare_relation("Path", ["node", "node"])
    assert again.load_relation("Path", path) == written
    assert again.query(parse_atom("Path(X, Y)")).value == engine.query(parse_atom("Path(X, Y)")).value
    if suffix == "npy":
        assert np.load(path).dtype == np.int64 and np.load(path).shape == (written, 2)


def test_save_refuses_what_it_cannot_write(tmp_path):
    engine = LogicEngine()
    engine.add_facts("Likes", [("alice", "bob")])
    with pytest.raises(LogicError, match="holds names; .npy holds integers only"):
        engine.save_relation("Likes", str(tmp_path / "l.npy"))
    engine.add_facts("Odd", [("a,b",)])
    with pytest.raises(LogicError, match="holds a separator"):
        engine.save_relation("Odd", str(tmp_path / "o.csv"))
    engine.add_fact(parse_atom("Soft(a)"), weight=0.5)
    with pytest.raises(LogicError, match="weighted"):
        engine.save_relation("Soft", str(tmp_path / "s.csv"))
    with pytest.raises(LogicError, match="no such directory"):
        engine.save_relation("Likes", str(tmp_path / "nowhere" / "l.csv"))


def test_loading_after_a_query_continues_the_fixpoint_and_retypes():
    engine = _engine()
    engine.load_relation("Edge", np.array([[0, 1], [1, 2]]))
    assert engine.query(parse_atom("Path(X, Y)")).value == [(0, 1), (0, 2), (1, 2)]  # the fixpoint
    engine.load_relation("Edge", np.array([[2, 3]]))
    assert engine.query(parse_atom("Path(0, Y)")).value == [(1,), (2,), (3,)]
    assert engine.last_stats[-1].mode == "incremental"
    loose = LogicEngine()
    loose.add_facts("E", [(5, 6)])
    loose.load_relation("E", np.array([[6, 7]]))
    loose.declare_relation("E", ["node", "node"])  # moves both kinds of facts to the node type
    assert loose.query(parse_atom("E(X, Y)")).value == [(5, 6), (6, 7)]


def test_loading_maps_constants_once_per_distinct_value(monkeypatch):
    calls = []
    monkeypatch.setattr(EntityDomain, "add", lambda self, value, pos=None: calls.append(value))
    edges = np.random.default_rng(0).integers(0, 1000, (200_000, 2))
    engine = _engine()
    engine.load_relation("Edge", edges)
    assert calls == []  # the per-value path is never taken
    assert len(engine.domains["node"]) == len(np.unique(edges))


def test_tl_builtins(tmp_path):
    (tmp_path / "e.csv").write_text("1,2\n2,3\n")
    program = f"""
relation Edge(a: node, b: node)
print(load_relation(Edge, "{tmp_path}/e.csv"))
print(load_relation(Edge, [[3, 4]]))
Path(X, Y) <- Edge(X, Y)
Path(X, Z) <- Path(X, Y), Edge(Y, Z)
print(save_relation(Path, "{tmp_path}/p.tsv"))
Path(1, Y)?
"""
    assert run(program).output.split("\n")[:4] == ["2", "1", "6", "Path(1, Y): 2, 3, 4"]
    assert (tmp_path / "p.tsv").read_text().splitlines()[0] == "1\t2"
