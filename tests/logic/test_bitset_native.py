"""The bitset evaluator's two paths (bitset_eval.py): the native set operations of tensorlogic._core
(bitset_or_pairs, chain_pairs, merge_new_keys, bitset_set_keys; cpp/backends/cpu/logic_sets.h)
against NumPy/plain-Python references, and whole Andersen points-to runs on random inputs, through
the native path (LogicEngine(set_ops=_core), as TL programs run it) and through the NumPy path (no
set_ops), against the plain-Python reference evaluator: empty
rounds (no loads or stores, no addresses), self-loops, saturation (every variable points to every
object), a relation of one variable."""
from __future__ import annotations

import numpy as np
import pytest

from logic_support import build, reference

from tensorlogic.logic import parse_atom
from tensorlogic.logic.rule_types import DEFAULT_ENTITY_TYPE

core = pytest.importorskip("tensorlogic._core")
if not hasattr(core, "bitset_or_pairs"):
    pytest.skip("the native module predates the logic set operations (rebuild it)", allow_module_level=True)

ANDERSEN = ["Pt(P, O) <- Addr(P, O)", "Pt(P, O) <- Copy(P, Q), Pt(Q, O)",
            "Pt(P, O) <- Load(P, Q), Pt(Q, R), Pt(R, O)",
            "Pt(R, O) <- Store(P, Q), Pt(P, R), Pt(Q, O)"]


def _random_matrix(rng, rows: int, columns: int, density: float) -> np.ndarray:
    bits = rng.random((rows, columns)) < density
    padded = np.zeros((rows, (columns + 63) // 64 * 64), bool)
    padded[:, :columns] = bits
    return np.packbits(padded, axis=1, bitorder="little").view("<u8").copy()


def _keys(matrix: np.ndarray, columns: int) -> set:
    bits = np.unpackbits(matrix.view(np.uint8), axis=1, bitorder="little")[:, :columns]
    rows, cols = np.nonzero(bits)
    return set((rows * columns + cols).tolist())


@pytest.mark.parametrize("same", [True, False])
@pytest.mark.parametrize("with_changed", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_or_pairs_is_the_in_order_row_update(seed, same, with_changed):
    rng = np.random.default_rng(seed)
    columns = int(rng.integers(1, 200))
    rows = int(rng.integers(1, 40))
    target = _random_matrix(rng, rows, columns, 0.05)
    source = target if same else _random_matrix(rng, int(rng.integers(1, 40)), columns, 0.1)
    y_rows = len(source)
    pairs = rng.integers(0, rows * y_rows, int(rng.integers(0, 80)))
    pairs = np.concatenate([pairs, [x * y_rows + x for x in range(min(rows, y_rows))]])  # self-loops
    changed = None
    if with_changed:
        picked = rng.integers(0, y_rows * columns, int(rng.integers(0, 10)))
        changed = np.array(sorted(set(picked.tolist())), np.int64)
    expected = target.copy()
    expected_source = expected if same else source
    wanted = None if changed is None else set((changed // columns).tolist())
    for key in pairs.tolist():  # the reference: one row after the other, reading rows as they are
        x, y = divmod(key, y_rows)
        if wanted is None or y in wanted:
            expected[x] |= expected_source[y]
    before = _keys(target, columns)
    fresh = core.bitset_or_pairs(target, source, pairs, y_rows, columns, changed)
    assert np.array_equal(target, expected)
    assert fresh.tolist() == sorted(_keys(expected, columns) - before)


def test_chain_pairs_is_the_join_of_r_with_s_rows_grouped_by_j():
    rng = np.random.default_rng(1)
    groups, width = 30, 17
    s_j = np.sort(rng.integers(0, groups, 50))
    offsets = np.searchsorted(s_j, np.arange(groups + 1))
    base, scale = rng.integers(0, 1000, 50), rng.integers(0, 5, 50)
    r_keys = rng.integers(0, groups * width, 40)
    expected = [int(base[s] + (k % width) * scale[s]) for k in r_keys.tolist()
                for s in range(offsets[k // width], offsets[k // width + 1])]
    assert core.chain_pairs(offsets, base, scale, r_keys, width).tolist() == expected
    assert core.chain_pairs(offsets, base, scale, r_keys[:0], width).tolist() == []


def test_merge_new_keys_and_set_keys_against_numpy():
    rng = np.random.default_rng(2)
    known = np.unique(rng.integers(0, 500, 100))
    keys = rng.integers(0, 600, 300)
    fresh, merged = core.merge_new_keys(known, keys)
    assert fresh.tolist() == np.setdiff1d(keys, known).tolist()
    assert merged.tolist() == np.union1d(known, keys).tolist()
    matrix = _random_matrix(rng, 10, 70, 0.2)
    before = _keys(matrix, 70)
    keys = rng.integers(0, 700, 200)
    fresh = core.bitset_set_keys(matrix, keys, 70)
    assert fresh.tolist() == sorted(set(keys.tolist()) - before)
    assert _keys(matrix, 70) == before | set(keys.tolist())


def test_bad_input_is_a_clear_error_and_changes_nothing():
    matrix = np.zeros((4, 1), "<u8")
    matrix[1, 0] = 5
    kept = matrix.copy()
    with pytest.raises(core.ShapeError, match="pair 99 is out of range"):
        core.bitset_or_pairs(matrix, matrix, np.array([1 * 4 + 1, 99]), 4, 3)
    with pytest.raises(core.ShapeError, match="key 12 is out of range"):
        core.bitset_set_keys(matrix, np.array([0, 12]), 3)
    with pytest.raises(core.ShapeError, match="changed key 40"):
        core.bitset_or_pairs(matrix, matrix, np.array([4]), 4, 3, np.array([40]))
    with pytest.raises(core.DTypeError, match="must be a uint64 array"):
        core.bitset_or_pairs(matrix, matrix.astype(np.int64), np.array([0]), 4, 3)
    with pytest.raises(core.ShapeError, match="C-contiguous"):
        core.bitset_set_keys(np.zeros((4, 2), "<u8")[:, :1], np.array([0]), 3)
    with pytest.raises(core.ShapeError, match="strictly increasing"):
        core.merge_new_keys(np.array([3, 3]), np.array([1]))
    with pytest.raises(core.ShapeError, match="offsets"):
        core.chain_pairs(np.array([0, 5]), np.zeros(2, np.int64), np.zeros(2, np.int64), np.array([0]), 1)
    assert np.array_equal(matrix, kept)


def _andersen_facts(rng, n: int, copies: int, loads: int, stores: int, addrs: int,
                    self_loops: bool) -> dict:
    def rel(count):
        rows = set(zip(rng.integers(0, n, count).tolist(), rng.integers(0, n, count).tolist()))
        if self_loops and count:
            rows |= {(v, v) for v in rng.integers(0, n, 3).tolist()}
        return sorted(rows)
    facts = {"Addr": rel(addrs), "Copy": rel(copies), "Load": rel(loads), "Store": rel(stores)}
    return {name: rows for name, rows in facts.items() if rows}


CASES = {  # n, copies, loads, stores, addresses, self-loops
    "typical": (40, 12, 3, 3, 40, False),
    "self-loops": (30, 9, 3, 3, 30, True),
    "saturating": (25, 20, 4, 4, 25, True),  # (copies >= 0.4 n: all point to almost all)
    "copies only": (30, 15, 0, 0, 20, False),  # (no loads or stores: rounds with no new pairs)
    "no addresses": (20, 10, 5, 5, 0, True),  # (nothing derived: the first round is empty)
    "one variable": (1, 1, 1, 1, 1, True),
}


@pytest.fixture(params=["native", "numpy"])
def path(request):
    return request.param


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("seed", range(4))
def test_andersen_on_both_paths_equals_the_reference(path, case, seed):
    facts = _andersen_facts(np.random.default_rng(seed), *CASES[case])
    rules = list(ANDERSEN)
    declared = {"Addr", "Copy", "Load", "Store"} - set(facts)
    engine = build("sparse", facts, rules, set_ops=core if path == "native" else None)
    for name in sorted(declared):  # (a relation with no facts is declared, not left unknown)
        engine.declare_relation(name, [DEFAULT_ENTITY_TYPE] * 2)
    expected = reference(facts, rules).get("Pt", set())
    got = engine.query(parse_atom("Pt(X, Y)")).value
    assert sorted(got) == sorted(expected)
    ran = {(s.mode, s.backend) for s in engine.last_stats}
    assert ("bitset", "core" if path == "native" else "numpy") in ran
    if case == "saturating" and expected:
        pointing = {p for p, _ in expected}
        assert len(expected) > 0.5 * len(pointing) * len({o for _, o in expected})


def test_tl_programs_run_the_bitset_strata_natively(monkeypatch):
    from tensorlogic import run
    from tensorlogic.logic import bitset_eval

    backends = []
    original = bitset_eval.BitsetStratum.run

    def recording_run(self):
        backends.append(self.backend)
        return original(self)
    monkeypatch.setattr(bitset_eval.BitsetStratum, "run", recording_run)
    rows = _andersen_facts(np.random.default_rng(3), 300, 90, 22, 22, 300, True)  # (300 values: sparse)
    facts = {name: [(f"v{p}", f"v{q}") for p, q in pairs] for name, pairs in rows.items()}
    lines = [f"{name}({p}, {q})" for name, rows in facts.items() for p, q in rows]
    program = "\n".join(
        [f"relation {name}(p: var, q: var)" for name in facts] + ["relation Pt(p: var, q: var)"]
        + ANDERSEN + ["main {", *lines, "let r = Pt(X, Y)?", "print(len(r))", "}"])
    result = run(program)
    assert result.error is None, result.error
    assert result.output == f"{len(reference(facts, ANDERSEN)['Pt'])}\n"
    assert backends == ["core"]
