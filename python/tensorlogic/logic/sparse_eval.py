"""Sparse evaluation of one stratum: relations as sorted key arrays, rule bodies as sort-merge joins.

A rule body is evaluated left to right over a table of variable bindings (one int64 column per
bound variable, plus a weight per row in soft mode); each positive atom is a sorted join on the
variables it shares with the table, each negated atom a filter once its variables are bound.
Boolean strata run semi-naive (each round joins only the previous round's new tuples at one
recursive position); soft strata (any rule with temperature > 0) iterate to a numeric fixpoint.
Invariant: a tuple enters a round's delta only if it was not certainly true before (KeySet), so
each tuple is joined as "new" at most once and a Boolean stratum ends after finitely many rounds.
"""
from __future__ import annotations

import numpy as np

from .compiled import CompiledAtom, CompiledRule, rule_step
from .errors import ConvergenceError, LogicError
from .relation_table import KeySet, RelationTable, check_key_space, encode, key_space, sorted_unique


# Joins stream: a join whose output would exceed this many bytes of binding columns is cut into
# pieces of the left side, each carried through the rest of the body and projected onto the head
# before the next piece is built, so memory is bounded by the head relation, not the join.
CHUNK_BYTES = 1 << 28


# A Boolean piece of head keys is deduplicated by marking a bool array over the head's key space
# instead of sorting when the space is at most MARK_SPACE_LIMIT keys and the piece has at least
# 1 / MARK_ROWS_RATIO of them (reading the marks back costs a pass over the space; sorting costs
# about log2(rows) passes over the rows).
MARK_SPACE_LIMIT = 1 << 25
MARK_ROWS_RATIO = 64


def chunk_rows(columns: int) -> int:
    """Rows per streamed piece for a binding table of `columns` int64 columns (+ index arrays)."""
    return max(1 << 12, CHUNK_BYTES // (8 * (columns + 3)))


def out_of_memory(rule_text: str, rows: int) -> LogicError:
    return LogicError(f"out of memory evaluating rule `{rule_text}` (a piece of {rows:,} joined rows "
                      f"did not fit); give its atoms shared variables or more constants")


class Bindings:
    """Rows of variable bindings: columns[var_id] -> int64 array; weights None in Boolean mode."""

    __slots__ = ("columns", "weights", "rows")

    def __init__(self, columns: dict, weights, rows: int):
        self.columns = columns
        self.weights = weights
        self.rows = rows

    def take(self, index: np.ndarray) -> "Bindings":
        return Bindings({v: c[index] for v, c in self.columns.items()},
                        None if self.weights is None else self.weights[index], len(index))


def scan(atom: CompiledAtom, table: RelationTable, weighted: bool) -> Bindings:
    """Bindings of the atom's variables for every tuple of the table that matches its constants
    and repeated variables."""
    columns = table.columns()
    mask = None
    first_column: dict[int, int] = {}
    for position, (kind, value) in enumerate(atom.terms):
        condition = None
        if kind == "c":
            condition = columns[position] == value
        elif value in first_column:
            condition = columns[position] == columns[first_column[value]]
        else:
            first_column[value] = position
        if condition is not None:
            mask = condition if mask is None else (mask & condition)
    weights = table.value_array() if weighted else None
    if mask is None:
        out = {v: columns[p] for v, p in first_column.items()}
        return Bindings(out, weights, len(table))
    index = np.flatnonzero(mask)
    out = {v: columns[p][index] for v, p in first_column.items()}
    return Bindings(out, None if weights is None else weights[index], len(index))


def _join_keys(left: Bindings, right: Bindings, shared: list[int], var_sizes) -> tuple:
    sizes = tuple(var_sizes[v] for v in shared)
    check_key_space(sizes, "a join on " + str(len(shared)) + " variables")
    return (encode([left.columns[v] for v in shared], sizes, left.rows),
            encode([right.columns[v] for v in shared], sizes, right.rows))


def join_pieces(left: Bindings, right: Bindings, var_sizes, right_sorted=None, shared=None,
                max_rows: int | None = None):
    """Natural join on the shared variables, yielded in pieces of at most `max_rows` rows (a
    piece boundary may fall inside one left row's run of matches); `right_sorted` may hold (sorted
    keys, order) of right, keyed on the variables in the order `shared` lists them. A join without
    shared variables is the cross product."""
    if shared is None:
        shared = [v for v in left.columns if v in right.columns]
    if max_rows is None:
        max_rows = chunk_rows(len(left.columns) + len(right.columns))
    if not shared:
        low = np.zeros(left.rows, np.int64)
        counts = np.full(left.rows, right.rows, np.int64)
        order = None
    else:
        left_keys, right_keys = _join_keys(left, right, shared, var_sizes)
        if right_sorted is None:
            order = np.argsort(right_keys, kind="stable")
            sorted_keys = right_keys[order]
        else:
            sorted_keys, order = right_sorted
        low = np.searchsorted(sorted_keys, left_keys, "left")
        counts = np.searchsorted(sorted_keys, left_keys, "right") - low
        del left_keys
    ends = np.cumsum(counts)
    total = int(ends[-1]) if len(ends) else 0
    new_right = [(v, c) for v, c in right.columns.items() if v not in left.columns]
    for start in range(0, total, max_rows):
        stop = min(start + max_rows, total)
        first = int(np.searchsorted(ends, start, "right"))  # left rows whose runs meet [start, stop)
        last = int(np.searchsorted(ends, stop - 1, "right")) + 1
        run_end = ends[first:last]
        run_start = run_end - counts[first:last]
        clip_start = np.maximum(run_start, start)
        piece_counts = np.minimum(run_end, stop) - clip_start
        piece_low = low[first:last] + (clip_start - run_start)
        left_index = np.repeat(np.arange(first, last), piece_counts)
        n = len(left_index)
        offsets = np.cumsum(piece_counts) - piece_counts
        right_index = np.repeat(piece_low - offsets, piece_counts) + np.arange(n)
        if order is not None:
            right_index = order[right_index]
        columns = {v: c[left_index] for v, c in left.columns.items()}
        for v, c in new_right:
            columns[v] = c[right_index]
        weights = None
        if left.weights is not None:
            weights = left.weights[left_index] * right.weights[right_index]
        yield Bindings(columns, weights, n)


def semijoin(left: Bindings, right: Bindings, var_sizes, right_sorted, shared: list[int]) -> Bindings:
    """The join when every variable of `right` is bound on the left: right's rows (one atom's
    tuples) are unique on `shared`, so each left row matches at most one; one binary search per
    left row, no expansion."""
    left_keys, right_keys = _join_keys(left, right, shared, var_sizes)
    if right_sorted is None:
        order = np.argsort(right_keys, kind="stable")
        sorted_keys = right_keys[order]
    else:
        sorted_keys, order = right_sorted
    if not len(sorted_keys):
        return left.take(np.zeros(0, np.int64))
    at = np.searchsorted(sorted_keys, left_keys)
    np.minimum(at, len(sorted_keys) - 1, out=at)
    keep = np.flatnonzero(sorted_keys[at] == left_keys)
    out = left.take(keep)
    if left.weights is not None:
        right_index = at[keep] if order is None else order[at[keep]]
        out.weights = left.weights[keep] * right.weights[right_index]
    return out


def join(left: Bindings, right: Bindings, var_sizes, right_sorted=None, shared=None) -> Bindings:
    """The whole natural join at once (small joins; evaluate_rule streams instead)."""
    pieces = list(join_pieces(left, right, var_sizes, right_sorted, shared, max_rows=1 << 62))
    if pieces:
        return pieces[0]
    names = set(left.columns) | set(right.columns)
    return Bindings({v: np.zeros(0, np.int64) for v in names},
                    None if left.weights is None else np.zeros(0, np.float32), 0)


def apply_negation(rows: Bindings, atom: CompiledAtom, table: RelationTable, var_sizes) -> Bindings:
    """Keep rows whose tuple is not certainly true in `table`; in soft mode scale by 1 - value."""
    negated = scan(atom, table, weighted=True)
    variables = list(atom.bound_variables)
    sizes = tuple(var_sizes[v] for v in variables)
    check_key_space(sizes, f"negated atom {atom.relation}")
    row_keys = encode([rows.columns[v] for v in variables], sizes, rows.rows)
    neg_keys = encode([negated.columns[v] for v in variables], sizes, negated.rows)
    if rows.weights is None:
        neg_keys = sorted_unique(neg_keys[negated.weights >= 1.0])
        if len(neg_keys) == 0:
            return rows
        at = np.minimum(np.searchsorted(neg_keys, row_keys), len(neg_keys) - 1)
        return rows.take(np.flatnonzero(neg_keys[at] != row_keys))
    negated_values = RelationTable.from_unsorted(sizes, neg_keys, negated.weights)
    scaled = rows.weights * (1.0 - negated_values.lookup_values(row_keys))
    keep = np.flatnonzero(scaled > 0)
    out = rows.take(keep)
    out.weights = scaled[keep].astype(np.float32)
    return out


def apply_comparison(rows: Bindings, comparison) -> Bindings:
    """Keep rows where the comparison holds (both sides are bound variables or constants)."""
    def side(term):
        kind, value = term
        return rows.columns[value] if kind == "v" else np.full(rows.rows, value, np.int64)

    return rows.take(np.flatnonzero(comparison.holds(side(comparison.left), side(comparison.right))))


class SparseStratum:
    """Evaluates the rules of one stratum over `tables` (updated in place)."""

    def __init__(self, rules: list[CompiledRule], stratum: set[str], tables: dict,
                 soft: bool, tolerance: float, max_iterations: int):
        self.rules = rules
        self.stratum = stratum
        self.tables = tables
        self.soft = soft
        self.tolerance = tolerance
        self.max_iterations = max_iterations
        self.iterations = 0
        self._sorted_cache: dict = {}
        # Incremental sorted indexes of this stratum's own (recursive) relations: key -> [bindings
        # sorted by join key, sorted join keys, runs covered]; each round merges only the new runs
        # (`_runs[name]`: the delta key arrays in the order they were added) instead of re-sorting.
        self._indexes: dict = {}
        self._runs: dict | None = None
        self._current: dict = {}
        self._mark_arrays: dict = {}
        self._plans: dict = {}  # (id(rule), delta position) -> a plan that sizes cannot change

    # -- one rule ---------------------------------------------------------------------------
    def _scan_sorted(self, atom: CompiledAtom, table: RelationTable, shared: list[int], var_sizes,
                     cacheable: bool):
        if (not cacheable and shared and self._runs is not None and atom.relation in self._runs
                and table is self._current.get(atom.relation)):
            return self._indexed(atom, table, shared, var_sizes)
        key = (id(table), atom.terms, tuple(shared))
        if cacheable and key in self._sorted_cache:
            return self._sorted_cache[key][0], self._sorted_cache[key][1]
        rows = scan(atom, table, self.soft)
        sorted_pair = None
        if shared:
            sizes = tuple(var_sizes[v] for v in shared)
            check_key_space(sizes, "a join")
            keys = encode([rows.columns[v] for v in shared], sizes, rows.rows)
            order = np.argsort(keys, kind="stable")
            sorted_pair = (keys[order], order)
        if cacheable:
            self._sorted_cache[key] = (rows, sorted_pair, table)  # keep table alive: id() stays unique
        return rows, sorted_pair

    def _indexed(self, atom: CompiledAtom, table: RelationTable, shared: list[int], var_sizes):
        """(bindings sorted by the join key, (sorted keys, None)) for a recursive relation's full
        table, kept up to date by merging the runs added since the last call."""
        sizes = tuple(var_sizes[v] for v in shared)
        check_key_space(sizes, "a join")
        key = (atom.relation, atom.terms, tuple(shared))
        runs = self._runs[atom.relation]
        index = self._indexes.get(key)

        def sorted_rows(source: RelationTable):
            rows = scan(atom, source, False)
            keys = encode([rows.columns[v] for v in shared], sizes, rows.rows)
            order = np.argsort(keys, kind="stable")
            return rows.take(order), keys[order]

        if index is None:
            rows, keys = sorted_rows(table)
            index = self._indexes[key] = [rows, keys, len(runs)]
        elif index[2] < len(runs):
            added = np.concatenate(runs[index[2]:])
            new_rows, new_keys = sorted_rows(RelationTable(table.sizes, np.sort(added), None))
            at = np.searchsorted(index[1], new_keys, "right")  # a merge: linear, no re-sort
            rows = index[0]
            merged = Bindings({v: np.insert(c, at, new_rows.columns[v]) for v, c in rows.columns.items()},
                              None, rows.rows + new_rows.rows)
            index[:] = [merged, np.insert(index[1], at, new_keys), len(runs)]
        return index[0], (index[1], None)

    def _plan(self, rule: CompiledRule, delta_position: int | None, inputs=None):
        """Join order and, after each joined atom, the comparisons and negations it makes checkable.
        Order: the delta atom (if any) or else the smallest positive atom, then repeatedly the atom
        whose join is estimated to add the fewest rows per bound row (its size divided by the
        key space of the variables it shares, i.e. uniform keys); an atom sharing no variable
        (a cross product) comes last. Ties: body order. A plan with no choice of order (at most one
        positive atom besides the first) is kept for the stratum's later rounds."""
        fixed = (id(rule), delta_position)
        if fixed in self._plans:
            return self._plans[fixed]
        def size(i):
            return len(inputs[i]) if inputs is not None else 0

        def estimate(i):
            shared = bound & set(rule.body[i].variables)
            if not shared:
                return (1, size(i), i)
            space = 1
            for v in shared:
                space *= max(rule.var_sizes[v], 1)
            return (0, size(i) / space, i)
        positive = [i for i, a in enumerate(rule.body) if not a.negated]
        remaining = list(positive)
        order: list[int] = []
        bound: set[int] = set()
        if remaining:  # (a body of only negated ground atoms has none)
            first = delta_position if delta_position is not None else min(remaining, key=lambda i: (size(i), i))
            order.append(first)
            remaining.remove(first)
            bound |= set(rule.body[first].variables)
        while remaining:
            best = min(remaining, key=estimate)
            order.append(best)
            remaining.remove(best)
            bound |= set(rule.body[best].variables)
        comparisons = list(rule.comparisons)
        negations = [i for i, a in enumerate(rule.body) if a.negated]
        checks = []
        bound = set()
        for i in order:
            bound |= set(rule.body[i].variables)
            ready_c = [c for c in comparisons if all(v in bound for v in c.variables)]
            ready_n = [j for j in negations if all(v in bound for v in rule.body[j].bound_variables)]
            comparisons = [c for c in comparisons if c not in ready_c]
            negations = [j for j in negations if j not in ready_n]
            checks.append((ready_c, ready_n))
        if len(positive) <= (1 if delta_position is None else 2):
            self._plans[fixed] = (order, checks, negations)
        return order, checks, negations  # (what is left: only ground negated atoms)

    def evaluate_rule(self, rule: CompiledRule, inputs: dict, delta_position: int | None,
                      exclude=None) -> RelationTable:
        """The head tuples (with values in soft mode) derived by one rule; `inputs[i]` is the table
        used for body atom i. The body's joins stream in pieces (join_pieces); each piece is
        projected onto the head at once. `exclude` (a KeySet, Boolean mode) drops head tuples
        already known, so only new ones are kept while streaming."""
        order, checks, ground_negations = self._plan(rule, delta_position, inputs)
        head = rule.head
        parts: list = []  # head keys (and weights in soft mode) of the pieces, compacted as they grow
        held = [0, 0]  # rows held now, rows after the last compaction
        space = key_space(head.sizes)
        marks = [None]  # Boolean mode, large pieces: a bool per head key (see MARK_*)

        def emit(rows: Bindings):
            for j in ground_negations:
                rows = apply_negation(rows, rule.body[j], inputs[j], rule.var_sizes)
            if rows.rows == 0:
                return
            columns = [rows.columns[value] if kind == "v" else np.full(rows.rows, value, np.int64)
                       for kind, value in head.terms]
            keys = encode(columns, head.sizes, rows.rows)
            if not self.soft and space <= MARK_SPACE_LIMIT and rows.rows * MARK_ROWS_RATIO >= space:
                if marks[0] is None:
                    marks[0] = self._marks(head.sizes)
                marks[0][keys] = True  # (deduplicates without sorting; read back in key order)
                return
            if self.soft:
                parts.append((keys, rows.weights.astype(np.float64)))
            else:
                parts.append(sorted_unique(keys))
            held[0] += len(parts[-1][0]) if self.soft else len(parts[-1])
            if held[0] > max(2 * held[1], chunk_rows(1)) and len(parts) > 1:  # doubling: linear total
                compacted = self._compact(parts)
                if exclude is not None and len(compacted):  # drop known tuples only when memory needs it
                    compacted = compacted[~exclude.contains(compacted)]
                parts[:] = [compacted]
                held[0] = held[1] = len(compacted[0]) if self.soft else len(compacted)

        def stream(rows: Bindings, step: int):
            if step == len(order):
                emit(rows)
                return
            i = order[step]
            atom = rule.body[i]
            shared = [v for v in atom.variables if v in rows.columns]
            cacheable = atom.relation not in self.stratum
            right, sorted_pair = self._scan_sorted(atom, inputs[i], shared, rule.var_sizes, cacheable)
            comparisons, negations = checks[step]
            pieces = (join_pieces(rows, right, rule.var_sizes, sorted_pair, shared)
                      if len(shared) < len(atom.variables) or not shared
                      else (semijoin(rows, right, rule.var_sizes, sorted_pair, shared),))
            for piece in pieces:
                for comparison in comparisons:
                    piece = apply_comparison(piece, comparison)
                for j in negations:
                    piece = apply_negation(piece, rule.body[j], inputs[j], rule.var_sizes)
                if piece.rows:
                    stream(piece, step + 1)

        start = Bindings({}, np.ones(1, np.float32) if self.soft else None, 1)
        try:
            stream(start, 0)
        except MemoryError:
            raise out_of_memory(str(rule.source), chunk_rows(len(rule.var_sizes))) from None
        except LogicError as error:
            raise LogicError(f"rule `{rule.source}`: {error.message}", rule.source.pos) from None
        if marks[0] is not None:
            marked = np.flatnonzero(marks[0])
            marks[0][marked] = False  # (the scratch array is all False again for the next rule)
            parts.append(marked)
        if not parts:
            return RelationTable.empty(head.sizes, self.soft)
        compacted = self._compact(parts)
        if not self.soft:
            return RelationTable(head.sizes, compacted, None)
        unique_keys, sums = compacted
        values = rule_step(sums, rule.temperature)
        keep = values > 0
        return RelationTable(head.sizes, unique_keys[keep], values[keep].astype(np.float32))

    def _marks(self, sizes: tuple) -> np.ndarray:
        """A scratch bool array over the key space of `sizes`, all False (kept for the stratum)."""
        marks = self._mark_arrays.get(sizes)
        if marks is None:
            marks = self._mark_arrays[sizes] = np.zeros(key_space(sizes), bool)
        return marks

    def _compact(self, parts: list):
        """Merge streamed head pieces: sorted unique keys (Boolean) or (unique keys, summed
        weights) (soft)."""
        if not self.soft:
            return parts[0] if len(parts) == 1 else sorted_unique(np.concatenate(parts))
        keys = np.concatenate([k for k, _ in parts])
        weights = np.concatenate([w for _, w in parts])
        unique_keys, inverse = np.unique(keys, return_inverse=True)
        return unique_keys, np.bincount(inverse, weights=weights, minlength=len(unique_keys))

    # -- the stratum --------------------------------------------------------------------------
    def run(self) -> None:
        if self.soft:
            self._run_soft()
        else:
            self._run_boolean()

    def _inputs(self, rule: CompiledRule, current: dict, delta: dict | None, position):
        return [delta[a.relation] if i == position else current[a.relation]
                for i, a in enumerate(rule.body)]

    def run_incremental(self, changed: dict) -> dict:
        """Continue a Boolean stratum whose tables hold an earlier fixpoint after the tuples in
        `changed` (relation -> sorted new keys, already in `tables`) were added; monotone rules
        only (no negation, hard steps). Returns the newly derived keys per head relation."""
        return self._run_boolean(changed)

    def _run_boolean(self, changed: dict | None = None) -> dict:
        heads = {r.head.relation for r in self.rules}
        facts = {name: self.tables[name] for name in heads}
        true_sets = {}
        for name in heads:
            table = facts[name]
            check_key_space(table.sizes, f"relation {name}")
            true_sets[name] = KeySet(key_space(table.sizes))
            true_sets[name].add(table.true_keys())
        derived_runs: dict[str, list] = {name: [] for name in heads}
        current = dict(self.tables)

        def absorb(found: dict) -> dict:
            delta = {}
            for name, parts in found.items():
                parts = [p for p in parts if len(p)]
                # (one rule's keys are sorted and unique already: no second sort)
                keys = (parts[0] if len(parts) == 1 else sorted_unique(np.concatenate(parts)) if parts
                        else np.zeros(0, np.int64))
                if len(keys):
                    keys = keys[~true_sets[name].contains(keys)]
                true_sets[name].add(keys)
                delta[name] = RelationTable(facts[name].sizes, keys, None)
                if len(keys):
                    derived_runs[name].append(keys)
            return delta

        found = {name: [] for name in heads}
        for rule in self.rules:
            if changed is None:  # from scratch: every rule once over everything known
                result = self.evaluate_rule(rule, self._inputs(rule, current, None, None), None,
                                            true_sets[rule.head.relation])
                found[rule.head.relation].append(result.keys)
                continue
            for position, atom in enumerate(rule.body):  # continuing: joins that use a new tuple
                new_keys = changed.get(atom.relation)
                if atom.negated or new_keys is None or not len(new_keys):
                    continue
                delta_table = RelationTable(current[atom.relation].sizes, new_keys, None)
                inputs = [delta_table if j == position else current[a.relation]
                          for j, a in enumerate(rule.body)]
                found[rule.head.relation].append(
                    self.evaluate_rule(rule, inputs, position, true_sets[rule.head.relation]).keys)
        delta = absorb(found)
        self.iterations = 1
        recursive = [(rule, i) for rule in self.rules for i, a in enumerate(rule.body)
                     if not a.negated and a.relation in self.stratum]
        needs_full = {a.relation for rule, i in recursive for j, a in enumerate(rule.body)
                      if j != i and a.relation in self.stratum}
        self._runs, self._current = derived_runs, current
        merged = {name: 0 for name in needs_full}  # runs already merged into current[name]
        while any(len(t) for t in delta.values()):
            for name in needs_full:  # new runs are disjoint from what is there: merge, no dedupe
                runs = derived_runs[name]
                if facts[name].values is not None:  # (weighted facts may repeat a derived key)
                    current[name] = self._materialize(facts[name], runs)
                elif merged[name] < len(runs):
                    keys = np.concatenate([current[name].keys] + runs[merged[name]:])
                    keys.sort(kind="stable")  # (sorted pieces: a linear merge)
                    current[name] = RelationTable(current[name].sizes, keys, None)
                    merged[name] = len(runs)
            found = {name: [] for name in heads}
            for rule, position in recursive:
                if len(delta[rule.body[position].relation]) == 0:
                    continue
                result = self.evaluate_rule(rule, self._inputs(rule, current, delta, position), position,
                                            true_sets[rule.head.relation])
                found[rule.head.relation].append(result.keys)
            delta = absorb(found)
            self.iterations += 1
        self._runs = None
        for name in heads:
            self.tables[name] = self._materialize(facts[name], derived_runs[name])
        if changed is None:
            return {}
        return {name: _merge_disjoint(runs) for name, runs in derived_runs.items() if runs}

    @staticmethod
    def _materialize(facts: RelationTable, runs: list) -> RelationTable:
        if not runs:
            return facts
        if facts.values is None:  # the runs are disjoint from each other and from the facts
            return RelationTable(facts.sizes, _merge_disjoint([facts.keys] + runs), None)
        derived = RelationTable(facts.sizes, _merge_disjoint(runs), None)
        return facts.union_max(derived)

    def _run_soft(self) -> None:
        heads = {r.head.relation for r in self.rules}
        facts = {name: self.tables[name] for name in heads}
        current = dict(self.tables)
        change = float("inf")
        while self.iterations < self.max_iterations:
            new = {}
            for name in heads:
                new[name] = facts[name] if facts[name].values is not None else RelationTable(
                    facts[name].sizes, facts[name].keys, np.ones(len(facts[name]), np.float32))
            for rule in self.rules:
                result = self.evaluate_rule(rule, self._inputs(rule, current, None, None), None)
                new[rule.head.relation] = new[rule.head.relation].union_max(result)
            self.iterations += 1
            change = max(_max_change(current[name], new[name]) for name in heads)
            current.update(new)
            self._sorted_cache.clear()
            if change <= self.tolerance:
                break
        else:
            raise ConvergenceError(f"soft rules for {', '.join(sorted(heads))} did not converge in "
                                   f"{self.max_iterations} iterations (last change {change:.3g})")
        for name in heads:
            self.tables[name] = current[name]


def _merge_disjoint(runs: list) -> np.ndarray:
    """One sorted array of sorted, pairwise disjoint key runs (a stable sort merges the runs
    linearly; no deduplication needed)."""
    if len(runs) == 1:
        return runs[0]
    keys = np.concatenate(runs)
    keys.sort(kind="stable")
    return keys


def _max_change(old: RelationTable, new: RelationTable) -> float:
    keys = np.union1d(old.keys, new.keys)
    if len(keys) == 0:
        return 0.0
    return float(np.max(np.abs(old.lookup_values(keys) - new.lookup_values(keys))))
