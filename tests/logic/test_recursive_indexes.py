"""Incremental sorted indexes of recursive relations and the size-estimated join order: answers
equal the reference evaluator's; the index is merged round by round (never re-sorted whole) and
equals a fresh sort of the relation; the planner joins the selective atom first."""
from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings, strategies as st

from logic_support import build, reference

from tensorlogic.logic import parse_atom, parse_rule
from tensorlogic.logic import sparse_eval
from tensorlogic.logic.sparse_eval import SparseStratum

ANDERSEN = ["Pt(P, O) <- Addr(P, O)", "Pt(P, O) <- Copy(P, Q), Pt(Q, O)",
            "Pt(P, O) <- Load(P, Q), Pt(Q, R), Pt(R, O)", "Pt(R, O) <- Store(P, Q), Pt(P, R), Pt(Q, O)"]

pairs = st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=10)


@settings(max_examples=50, deadline=None)
@given(addr=pairs, copy=pairs, load=pairs, store=pairs)
def test_andersen_with_incremental_indexes_matches_the_reference(addr, copy, load, store):
    facts = {"Addr": sorted(set(addr)) or [(0, 1)], "Copy": sorted(set(copy)) or [(1, 0)],
             "Load": sorted(set(load)) or [(2, 0)], "Store": sorted(set(store)) or [(0, 2)]}
    engine = build("sparse", facts, ANDERSEN)
    assert sorted(engine.query(parse_atom("Pt(X, Y)")).value) == sorted(reference(facts, ANDERSEN)["Pt"])


def test_the_index_is_merged_each_round_and_equals_a_fresh_sort(monkeypatch):
    merges, snapshots = [], []
    original_insert = np.insert
    original_indexed = SparseStratum._indexed

    def counting_insert(*args, **kwargs):
        merges.append(1)
        return original_insert(*args, **kwargs)

    def checking(self, atom, table, shared, var_sizes):
        rows, (keys, order) = original_indexed(self, atom, table, shared, var_sizes)
        fresh = sparse_eval.scan(atom, table, False)
        fresh_keys = np.sort(sparse_eval.encode([fresh.columns[v] for v in shared],
                                                tuple(var_sizes[v] for v in shared), fresh.rows))
        snapshots.append(np.array_equal(keys, fresh_keys) and order is None and rows.rows == len(keys))
        return rows, (keys, order)
    monkeypatch.setattr(sparse_eval.np, "insert", counting_insert)
    monkeypatch.setattr(SparseStratum, "_indexed", checking)
    rng = np.random.default_rng(3)
    facts = {name: sorted(set(zip(rng.integers(0, 60, n).tolist(), rng.integers(0, 60, n).tolist())))
             for name, n in (("Addr", 60), ("Copy", 18), ("Load", 5), ("Store", 5))}
    forced = [dataclasses.replace(parse_rule(r), evaluation="sparse") for r in ANDERSEN]  # (not bitset)
    engine = build("sparse", facts, forced)
    assert sorted(engine.query(parse_atom("Pt(X, Y)")).value) == sorted(reference(facts, ANDERSEN)["Pt"])
    assert snapshots and all(snapshots)
    assert merges  # later rounds merged new tuples in


def test_the_planner_joins_the_selective_atom_first():
    engine = build("sparse", {"Big": [(i, j) for i in range(40) for j in range(40)],
                              "Small": [(1, 2)], "Mid": [(i, i) for i in range(40)]},
                   ["R(X, Z) <- Big(X, Y), Mid(Y, Z), Small(X, Y)"])
    compiled = engine._compile()
    engine.infer()
    rule = compiled[0]
    tables = engine._tables
    runner = SparseStratum([rule], {"R"}, dict(tables), False, 1e-6, 10)
    inputs = [tables[a.relation] for a in rule.body]
    order, _, _ = runner._plan(rule, None, inputs)
    assert [rule.body[i].relation for i in order] == ["Small", "Big", "Mid"]  # Big is then a filter
    assert engine.query(parse_atom("R(X, Z)")).value == [(1, 2)]
