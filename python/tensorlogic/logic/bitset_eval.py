"""Bitset-row evaluation of a Boolean stratum of binary relations (Andersen-style points-to rules).

Applies when every head of the stratum is binary and every rule that reads the stratum has the
form H(X, Z) <- rest(X, Y), B(Y, Z) with Z a variable of B and the head only (B binary, positive;
`rest` is the other atoms and comparisons, and binds X and Y). Each stratum relation is then an
(n1, words) uint64 matrix, bit z of row x standing for R(x, z), and such a rule is the row update
H[x] |= B[y] for every pair (x, y) of `rest`: a whole row of B per pair instead of a join per tuple.

Semi-naive in rows: a round ORs, for each rule, B[y] into H[x] for the pairs of `rest` that are new
(from the sparse evaluator, SparseStratum.evaluate_rule on the rule `pairs(X, Y) <- rest`, with the
previous round's delta at one recursive position at a time) and for the known pairs whose row y of
B gained bits in the previous round; the bits that were not set before are the next round's delta.
Two implementations of the same rounds: with the native set operations the engine is handed
(LogicEngine(set_ops=...): tensorlogic._core's, cpp/backends/cpu/logic_sets.h) the chain joins, the
pair store (one sorted key array per group) and the row updates are one native call each: in place,
pair after pair, so a row updated earlier in a round is read with its new bits (the same fixpoint in
fewer rounds); without them, NumPy (_apply: all of a head's updates of a round gathered first,
combined with one reduceat; the pairs in a KeySet). Either way a bit set in round k is in delta k,
so every pair whose source row gained it is applied again in round k + 1: nothing is missed. At
these sizes (hundreds of rows a round) a round's cost is its count of calls and of fresh memory
pages, not its arithmetic: hence the native path.
The updates with one head and one source share their pairs (they mean the same row update), and
the two-atom rests S(.., J, ..), R(J, V) over one R share one merge join on R's first column.
Invariants: a pair is stored once per (head, source); a bit enters a delta only once, so the
stratum ends after finitely many rounds; the tables written back hold exactly the tuples the sparse
evaluator derives (sorted unique keys), so either path may run a stratum.
"""
from __future__ import annotations

import numpy as np

from .compiled import CompiledAtom, CompiledRule
from .relation_table import KeySet, RelationTable, key_space, sorted_unique
from .sparse_eval import SparseStratum

ROW_BITS_LIMIT = 1 << 13  # a head's second domain at most this large (a row ORs at most 128 words)
MATRIX_BYTES_LIMIT = 1 << 26  # each relation's bit matrix at most this many bytes
_EMPTY = np.zeros(0, np.int64)
SET_OPS = ("bitset_or_pairs", "bitset_set_keys", "chain_pairs", "merge_new_keys")


def usable_set_ops(ops):
    """`ops` when it has every native set operation this evaluator calls (SET_OPS), else None (the
    NumPy path: no ops given, or a native module built before them). One call on empty arrays checks
    it: a first native call on NumPy arrays also looks NumPy's C API up (about 0.3 ms, once a
    process), paid here, where the engine is made, not in its first evaluation."""
    if ops is None or not all(hasattr(ops, name) for name in SET_OPS):
        return None
    ops.merge_new_keys(_EMPTY, _EMPTY)
    return ops


class _Update:
    """One rule as a row update: head H(X, Z) |= B(Y, Z) over the pairs (X, Y) of `rest`."""

    __slots__ = ("head", "source", "rest", "recursive_rest", "chain")

    def __init__(self, rule: CompiledRule, b_index: int, stratum: set):
        self.head = rule.head.relation
        b = rule.body[b_index]
        self.source = b.relation
        x, y = rule.head.terms[0][1], b.terms[0][1]
        atoms = tuple(a for i, a in enumerate(rule.body) if i != b_index)
        pair_head = CompiledAtom("pairs", (("v", x), ("v", y)), False,
                                 (rule.var_sizes[x], rule.var_sizes[y]))
        self.rest = CompiledRule(pair_head, atoms, 0.0, rule.var_names, rule.var_sizes, rule.source,
                                 rule.comparisons)
        self.recursive_rest = [i for i, a in enumerate(atoms) if not a.negated and a.relation in stratum]
        self.chain = _chain_shape(self.rest, stratum)


class _Group:
    """The updates with one head and one source: their pairs mean the same (H[x] |= B[y]), so they
    share one store, and their chain rests over one recursive relation share one merge join."""

    __slots__ = ("head", "source", "size_y", "updates", "others", "chains", "stored", "pairs_x",
                 "pairs_y")
    # stored: the pairs so far, a KeySet (NumPy path) or a sorted key array (native path, set by run)

    def __init__(self, head: str, source: str, updates: list):
        self.head, self.source = head, source
        sizes = updates[0].rest.head.sizes
        self.size_y = sizes[1]
        self.updates = updates
        self.others = [u for u in updates if u.chain is None]
        self.chains: dict = {}  # R -> (S's J column sorted, S's other column, other is X) of all chains
        for update in updates:
            if update.chain is not None:
                self.chains.setdefault(update.chain[1].relation, []).append(update.chain)
        self.stored = KeySet(key_space(sizes))
        self.pairs_x = np.zeros(0, np.int64)
        self.pairs_y = np.zeros(0, np.int64)


def _chain_shape(rest: CompiledRule, stratum: set):
    """(input atom S, recursive atom R, S's position of the other variable, whether S's other variable
    is the pair's X) when `rest` is S(.., J, ..) and R(J, V) with J their one shared variable, both
    binary with distinct variables and no comparisons: then its pairs are one merge join on R's
    first column (R's keys are sorted by it), no general join plan needed. Else None."""
    if len(rest.body) != 2 or rest.comparisons:
        return None
    atoms = rest.body
    if any(a.negated or len(a.terms) != 2 or any(k != "v" for k, _ in a.terms)
           or a.terms[0][1] == a.terms[1][1] for a in atoms):
        return None
    recursive = [a for a in atoms if a.relation in stratum]
    if len(recursive) != 1:
        return None
    r = recursive[0]
    s = atoms[0] if atoms[1] is r else atoms[1]
    j, v = r.terms[0][1], r.terms[1][1]
    s_vars = [t[1] for t in s.terms]
    if j not in s_vars or v in s_vars:
        return None
    other = s_vars[1 - s_vars.index(j)]
    x, y = rest.head.terms[0][1], rest.head.terms[1][1]
    if {other, v} != {x, y}:
        return None
    return s, r, s_vars.index(j), other == x


def plan_updates(rules: list[CompiledRule], stratum: set, tables: dict):
    """(base rules, row updates) when the stratum fits this evaluator (see the module docstring),
    else None. Base rules read no stratum relation: they run once, sparsely."""
    if any(r.temperature > 0 for r in rules):
        return None
    for name in stratum:
        table = tables[name]
        if len(table.sizes) != 2 or table.values is not None or not _fits(table.sizes):
            return None
    base, updates = [], []
    for rule in rules:
        if not any(a.relation in stratum for a in rule.body):
            base.append(rule)
            continue
        b_index = _row_source(rule, stratum)
        if b_index is None:
            return None
        source = rule.body[b_index].relation
        if source not in stratum:
            sizes = tables[source].sizes
            if tables[source].values is not None or not _fits(sizes):
                return None
        updates.append(_Update(rule, b_index, stratum))
    if not any(u.source in stratum for u in updates):
        return None  # linear chains (B an input, as in transitive closure): the sparse joins are cheaper
    grouped: dict = {}
    for update in updates:
        grouped.setdefault((update.head, update.source), []).append(update)
    return base, [_Group(head, source, members) for (head, source), members in grouped.items()]


def _fits(sizes: tuple) -> bool:
    words = (sizes[1] + 63) >> 6
    return sizes[1] <= ROW_BITS_LIMIT and sizes[0] * words * 8 <= MATRIX_BYTES_LIMIT


def _row_source(rule: CompiledRule, stratum: set) -> int | None:
    """Index of the body atom B(Y, Z) that a row update reads, or None if the rule has none."""
    head = rule.head.terms
    if len(head) != 2 or head[0][0] != "v" or head[1][0] != "v" or head[0][1] == head[1][1]:
        return None
    x, z = head[0][1], head[1][1]
    candidates = []
    for i, atom in enumerate(rule.body):
        terms = atom.terms
        if (atom.negated or len(terms) != 2 or terms[0][0] != "v" or terms[1] != ("v", z)
                or terms[0][1] == z):
            continue
        others = [a for j, a in enumerate(rule.body) if j != i]
        if any(z in a.variables for a in others) or any(z in c.variables for c in rule.comparisons):
            continue
        bound = {v for a in others if not a.negated for v in a.variables}
        if x not in bound or terms[0][1] not in bound:
            continue  # (the pairs must come from the rest of the body)
        candidates.append((atom.relation not in stratum, i))
    return min(candidates)[1] if candidates else None  # a recursive B first


class BitsetStratum:
    """Evaluates the rules of one stratum over `tables` (updated in place); plan from plan_updates;
    `native`: the set operations (usable_set_ops), or None for NumPy."""

    def __init__(self, rules: list[CompiledRule], stratum: set, tables: dict, plan, native=None):
        self.stratum = stratum
        self.tables = tables
        self.base, self.groups = plan
        self.iterations = 0
        self.sparse = SparseStratum([], stratum, tables, False, 0.0, 1)
        self._s_index: dict = {}  # (id(group), R) -> the chains' S columns, merged and sorted by J
        self.native = native
        self.backend = "numpy" if native is None else "core"  # (StratumStats.backend)

    def run(self) -> None:
        tables = self.tables
        heads = sorted(self.stratum)
        groups = self.groups
        native = self.native
        matrices = {name: _matrix(tables[name], native) for name in set(heads) | {g.source for g in groups}}
        facts = {name: tables[name] for name in heads}
        runs: dict[str, list] = {name: [] for name in heads}
        current = dict(tables)
        for rule in self.base:  # rules over earlier strata only: once, sparsely
            name = rule.head.relation
            keys = _copied_keys(rule, current) if _is_copy(rule) else self.sparse.evaluate_rule(
                rule, [current[a.relation] for a in rule.body], None).keys
            known = len(facts[name]) or runs[name]
            fresh = _set_new(matrices[name], keys, facts[name].sizes[1], known, native)
            if len(fresh):
                runs[name].append(fresh)
        delta = {}
        for name in heads:
            keys = _merge(facts[name].keys, runs[name])
            current[name] = RelationTable(facts[name].sizes, keys, None)
            delta[name] = current[name]
        needs_full = any(u.recursive_rest for g in groups for u in g.others)
        if native is not None:
            for group in groups:
                group.stored = _EMPTY
            round_ = self._native_round
        else:
            round_ = self._numpy_round
            self._filled = {}  # relation -> which rows of its matrix hold a bit
            for name, matrix in matrices.items():
                self._filled[name] = np.zeros(len(matrix), bool)
                self._filled[name][current[name].keys // current[name].sizes[1]] = True
        self.iterations = 1
        while True:
            fresh = round_(matrices, current, delta, facts)
            delta = {}
            for name in heads:
                if len(fresh[name]):
                    runs[name].append(fresh[name])
                delta[name] = RelationTable(facts[name].sizes, fresh[name], None)
            if not any(len(t) for t in delta.values()):
                break
            self.iterations += 1
            if needs_full:  # (chain rests read only deltas)
                for name in heads:
                    if len(delta[name]):
                        keys = np.concatenate([current[name].keys, delta[name].keys])
                        keys.sort(kind="stable")  # (disjoint sorted pieces: a linear merge)
                        current[name] = RelationTable(facts[name].sizes, keys, None)
        for name in heads:
            keys = _merge(facts[name].keys, runs[name])
            tables[name] = RelationTable(facts[name].sizes, keys, None)

    def _native_round(self, matrices: dict, current: dict, delta: dict, facts: dict) -> dict:
        """One round through the native module: each group's new pairs, then its row updates (the
        known pairs whose source row changed in the previous round, and the new pairs), in place.
        Returns each head's new keys (sorted)."""
        native, first = self.native, self.iterations == 1
        parts: dict[str, list] = {name: [] for name in facts}
        for group in self.groups:
            known = group.stored
            new = self._pair_keys(group, current, delta, first)
            if len(new):
                new, group.stored = native.merge_new_keys(known, new)
            matrix, source = matrices[group.head], matrices[group.source]
            columns = facts[group.head].sizes[1]
            if group.source in self.stratum and len(known) and len(delta[group.source]):
                parts[group.head].append(native.bitset_or_pairs(matrix, source, known, group.size_y, columns,
                                                                delta[group.source].keys))
            if len(new):
                parts[group.head].append(native.bitset_or_pairs(matrix, source, new, group.size_y, columns))
        # (the parts of a head are disjoint: a bit set by one call is not new to the next)
        return {name: (_EMPTY if not p else p[0] if len(p) == 1 else _merge(p[0], p[1:]))
                for name, p in parts.items()}

    def _numpy_round(self, matrices: dict, current: dict, delta: dict, facts: dict) -> dict:
        """One round in NumPy: the same updates as _native_round, every source row gathered before
        any target row changes (Jacobi steps)."""
        filled, first = self._filled, self.iterations == 1
        gathered: dict[str, list] = {name: [] for name in facts}
        for group in self.groups:
            new_x, new_y = self._new_pairs(group, current, delta, first)
            source = matrices[group.source]
            if group.source in self.stratum and len(group.pairs_x):  # known pairs, changed rows
                changed = np.zeros(len(source), bool)
                changed[delta[group.source].keys // facts[group.source].sizes[1]] = True
                hit = np.flatnonzero(changed[group.pairs_y])
                if len(hit):
                    gathered[group.head].append((group.pairs_x[hit], source, group.pairs_y[hit]))
            if len(new_x):
                full = np.flatnonzero(filled[group.source][new_y])  # (an empty row adds nothing)
                if len(full):
                    gathered[group.head].append((new_x[full], source, new_y[full]))
                if group.source in self.stratum:
                    group.pairs_x = np.concatenate([group.pairs_x, new_x])
                    group.pairs_y = np.concatenate([group.pairs_y, new_y])
        fresh = {}
        for name in facts:
            fresh[name] = _apply(matrices[name], gathered[name], facts[name].sizes[1])
            if len(fresh[name]):
                filled[name][fresh[name] // facts[name].sizes[1]] = True
        return fresh

    def _new_pairs(self, group: _Group, current: dict, delta: dict, first: bool):
        """(x, y) arrays of the group's pairs not stored yet (then stored in its KeySet)."""
        keys = self._pair_keys(group, current, delta, first)
        if not len(keys):
            return _EMPTY, _EMPTY
        keys = sorted_unique(keys[~group.stored.contains(keys)])  # (known pairs dropped before sorting)
        group.stored.add(keys)
        return keys // group.size_y, keys % group.size_y

    def _pair_keys(self, group: _Group, current: dict, delta: dict, first: bool) -> np.ndarray:
        """Keys x * size_y + y of the group's pairs that the previous round's delta makes (all pairs
        in the first round), unsorted, known ones and repeats included."""
        parts = []
        for r_name, chains in group.chains.items():
            parts.append(self._chain_pairs(group, r_name, chains, current,
                                           current[r_name] if first else delta[r_name]))
        for update in group.others:
            rest = update.rest
            if first:
                parts.append(_copied_keys(rest, current) if _is_copy(rest) else self.sparse.evaluate_rule(
                    rest, [current[a.relation] for a in rest.body], None).keys)
                continue
            for position in update.recursive_rest:
                if not len(delta[rest.body[position].relation]):
                    continue
                inputs = [delta[a.relation] if i == position else current[a.relation]
                          for i, a in enumerate(rest.body)]
                parts.append(self.sparse.evaluate_rule(rest, inputs, position).keys)
        parts = [p for p in parts if len(p)]
        if not parts:
            return _EMPTY
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _chain_pairs(self, group: _Group, r_name: str, chains: list, current: dict,
                     r_table: RelationTable) -> np.ndarray:
        """Pair keys (unsorted, may repeat) of the chain rests S(J, O) / S(O, J), R(J, V) (see
        _chain_shape) of one group over one R: one join of R's rows with all their S rows, through
        offsets of S's rows per value of J (S is an input: sorted once)."""
        if not len(r_table):
            return _EMPTY
        index = self._s_index.get((id(group), r_name))
        if index is None:
            j_parts, other_parts, is_x_parts = [], [], []
            for s, _, j_at, s_is_x in chains:
                columns = current[s.relation].columns()
                j_parts.append(columns[j_at])
                other_parts.append(columns[1 - j_at])
                is_x_parts.append(np.full(len(columns[j_at]), s_is_x))
            s_j = np.concatenate(j_parts)
            order = np.argsort(s_j, kind="stable")
            is_x = np.concatenate(is_x_parts)[order]
            offsets = np.searchsorted(s_j[order], np.arange(r_table.sizes[0] + 1))
            index = self._s_index[(id(group), r_name)] = (
                offsets, np.concatenate(other_parts)[order],
                bool(is_x.all()) if is_x.all() or not is_x.any() else is_x)
        offsets, s_other, is_x = index
        if not len(s_other):
            return _EMPTY
        width = r_table.sizes[1]
        if self.native is not None:  # pair = other * size_y + v or v * size_y + other, per S row
            scaled = self._s_index.get((id(group), r_name, "scaled"))
            if scaled is None:
                picks = np.broadcast_to(np.asarray(is_x), s_other.shape)
                scaled = self._s_index[(id(group), r_name, "scaled")] = (
                    np.where(picks, s_other * group.size_y, s_other), np.where(picks, 1, group.size_y))
            return self.native.chain_pairs(offsets, scaled[0], scaled[1], r_table.keys, width)
        r_j, r_v = r_table.keys // width, r_table.keys % width
        low = offsets[r_j]
        counts = offsets[r_j + 1] - low
        total = int(counts.sum())
        if not total:
            return _EMPTY
        r_index = np.repeat(np.arange(len(r_j)), counts)
        s_index = np.arange(total) + np.repeat(low - (np.cumsum(counts) - counts), counts)
        other, v = s_other[s_index], r_v[r_index]
        if is_x is True:
            x, y = other, v
        elif is_x is False:
            x, y = v, other
        else:
            pick = is_x[s_index]
            x, y = np.where(pick, other, v), np.where(pick, v, other)
        return x * group.size_y + y


def _is_copy(rule: CompiledRule) -> bool:
    """Whether the rule is H(X, Y) <- B(X, Y): its head tuples are B's keys as they are."""
    body = rule.body[0] if len(rule.body) == 1 else None
    return (body is not None and not body.negated and body.terms == rule.head.terms
            and not rule.comparisons and body.sizes == rule.head.sizes
            and len(set(rule.head.terms)) == len(rule.head.terms))


def _copied_keys(rule: CompiledRule, current: dict) -> np.ndarray:
    return current[rule.body[0].relation].keys  # (as the sparse scan of a hard rule reads it)


def _matrix(table: RelationTable, native) -> np.ndarray:
    rows, columns = table.sizes
    # (written, not np.zeros: a calloc'ed page read before it is written faults twice, and at these
    # sizes the page faults of a fresh matrix cost more than the whole evaluation's arithmetic)
    matrix = np.empty((rows, (columns + 63) >> 6), "<u8")
    matrix.fill(0)
    if native is not None:
        native.bitset_set_keys(matrix, table.keys, columns)
    else:
        _set_bits(matrix, table.keys, columns)
    return matrix


def _set_new(matrix: np.ndarray, keys: np.ndarray, columns: int, known: bool, native) -> np.ndarray:
    """Set the bits of sorted unique keys; return those that were clear (`known`: whether any bit
    may be set already, else all are new)."""
    if native is not None:
        return native.bitset_set_keys(matrix, keys, columns)
    fresh = keys[~_contains(matrix, keys, columns)] if known else keys
    _set_bits(matrix, fresh, columns)
    return fresh


def _set_bits(matrix: np.ndarray, keys: np.ndarray, columns: int) -> None:
    """Set the bits of sorted unique keys (a key's word index grows with the key: the bits of one
    word are neighbours, combined by one reduceat instead of a slow ufunc.at)."""
    if not len(keys):
        return
    rows, cols = keys // columns, keys % columns
    words = rows * matrix.shape[1] + (cols >> 6)
    bits = np.left_shift(np.uint64(1), (cols & 63).astype(np.uint64))
    first = np.empty(len(words), bool)
    first[0] = True
    np.not_equal(words[1:], words[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    matrix.reshape(-1)[words[starts]] |= np.bitwise_or.reduceat(bits, starts)


def _contains(matrix: np.ndarray, keys: np.ndarray, columns: int) -> np.ndarray:
    rows, cols = keys // columns, keys % columns
    words = matrix.reshape(-1)[rows * matrix.shape[1] + (cols >> 6)]
    return (np.right_shift(words, (cols & 63).astype(np.uint64)) & np.uint64(1)).astype(bool)



def _apply(matrix: np.ndarray, updates: list, columns: int) -> np.ndarray:
    """OR rows into `matrix`: `updates` holds (target rows x, source matrix, source rows y), meaning
    matrix[x] |= source[y]; returns the sorted keys of the bits that were not set before. The
    source rows are gathered once, already in target order (few large temporaries: each is fresh
    memory to fault in)."""
    if not updates:
        return _EMPTY
    xs = updates[0][0] if len(updates) == 1 else np.concatenate([x for x, _, _ in updates])
    order = np.argsort(xs, kind="stable")
    xs = xs[order]
    source = updates[0][1]
    if all(src is source for _, src, _ in updates):
        ys = updates[0][2] if len(updates) == 1 else np.concatenate([y for _, _, y in updates])
        rows = source[ys[order]]
    else:
        rows = np.concatenate([src[y] for _, src, y in updates])[order]
    first = np.empty(len(xs), bool)
    first[0] = True
    np.not_equal(xs[1:], xs[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    targets = xs[starts]
    combined = rows if len(starts) == len(xs) else np.bitwise_or.reduceat(rows, starts, axis=0)
    before = matrix[targets]
    new = np.invert(before)
    new &= combined
    before |= combined
    matrix[targets] = before
    flat = np.flatnonzero(new.reshape(-1) != 0)  # (nonzero over bools is several times faster)
    if not len(flat):
        return _EMPTY
    words = matrix.shape[1]
    r = flat // words
    bits = np.flatnonzero(np.unpackbits(new.reshape(-1)[flat].view(np.uint8), bitorder="little").view(bool))
    i = bits >> 6
    return targets[r[i]] * columns + (flat[i] - r[i] * words) * 64 + (bits & 63)  # row-major: sorted


def _merge(keys: np.ndarray, runs: list) -> np.ndarray:
    """Sorted union of disjoint sorted key arrays."""
    if not runs:
        return keys
    merged = np.concatenate([keys] + runs)
    merged.sort(kind="stable")
    return merged
