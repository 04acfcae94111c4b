"""LogicEngine: relations as tensors over entity indices, rules as joins + step, run to a fixpoint.

Invariants: facts, rules and declarations are the only state a program changes; everything derived
(compiled rules, relation tables) is recomputed from them by `infer()` whenever they changed, so a
query always sees the fixpoint of all facts and rules added so far. Entity indices never change.
When only new certain facts were added and the strata they reach are monotone (no negation, no
soft rules, no weights), `infer()` continues the previous fixpoint semi-naively instead.

Hook API the interpreter calls (one engine per program run; `pos` is any position object the
interpreter wants back on a LogicError it raises, e.g. the AST node's (line, column)):

    engine = LogicEngine()
    engine.declare_entity("person", ["alice", "bob"] | None, pos)   # `entity person { ... }`
    engine.declare_relation("Parent", ["person", "person"], pos)   # `relation Parent(x: person, ...)`
    engine.add_fact(Atom("Parent", (Name("alice"), Name("bob")), pos=p), weight=1.0)
    engine.add_rule(Rule(head_atom, body_atoms, temperature=None | T, pos=p))   # `@temperature(T)`
    engine.check()                       # compile + stratify only: raises the first LogicError (`tl check`)
    engine.infer()                       # explicit `infer`; query() also infers when needed
    result = engine.query(Atom("Ancestor", (Name("X"), Name("dave")), pos=p))
    result.value                         # list of tuples of constants, or a bool for a ground query
    result.text()                        # the line(s) `?` prints, e.g. "Ancestor(X, dave): alice, bob"
    engine.relation_tensor("Ancestor")   # NumPy array over entity indices (bool, or float32 if weighted)
    engine.has_relation("Parent")        # lets the interpreter tell a relation call from a function call
    engine.load_relation("Edge", "edges.csv" | array)   # bulk true facts (bulk.py); returns the row count
    engine.save_relation("Path", "paths.npy")            # the relation's tuples after inference

Rule bodies may also hold `Comparison(op, left, right, pos)` (op in == != < <= > >=, e.g. `X != Y`):
constants compare numbers numerically and names alphabetically. Integer arithmetic terms
(`Arith`, + - * % and negation: `Next(N + 1) <- Num(N), N < 5`, `A + B > C`) may stand in a head or
in a comparison: such a rule is split into an ordinary rule that binds its variables into a hidden
relation and a step that computes the head from that relation's rows; a stratum whose arithmetic
rules derive new tuples runs again with them (new numbers join the domain), at most
arithmetic.ROUND_LIMIT times (arithmetic.py). Safety and stratification are also checked when a rule is defined
(`check_rule`, safety.py); a variable that occurs only in one negated atom is existential, like `_`.
Terms: `Name(text)` for a bare identifier (the engine decides variable vs constant: see terms.py),
`Const(value)` for a string or integer literal, `Var(name)` to force a variable; `not` atoms have
`negated=True`. Every error is a LogicError subclass (errors.py) with `.message` and `.pos`.
Evaluation path per stratum: dense (tensor contractions) or sparse (sort-merge joins that stream
in bounded pieces, so memory and not a row count limits them); chosen by sizes and density
(`_choose_dense`), or forced by `Rule(..., evaluation="dense" | "sparse")` (TL: `@dense`, `@sparse`).
An unforced sparse stratum of binary relations whose recursive rules are row updates
H(X, Z) |= B(Y, Z) (points-to analyses) runs on bit matrices instead (bitset_eval.py, mode "bitset"),
with native set operations when the engine is handed them (`LogicEngine(set_ops=_core)`, as TL
programs are), else in NumPy.
A query with a constant (`Path(0, Y)`) over positive Boolean rules is answered demand-driven when
no fixpoint is at hand: the rules it depends on are rewritten by magic sets (demand.py) and only
the tuples the query can reach are derived; the answers equal full evaluation's.
Tensor equations in index notation (`Y[i] = W[i, j] X[j]`) are `tensor_equation.py`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from . import arithmetic, bulk
from .aggregate import AggregateRule, aggregate_edges, derive_aggregates, split_aggregate
from .arithmetic import ArithRule, dependency_edges, derive_arithmetic, split_arithmetic
from .bitset_eval import BitsetStratum, plan_updates, usable_set_ops
from .compiled import CompiledAtom, CompiledComparison, CompiledRule
from .domains import EntityDomain, constant_sort_key
from .errors import ArityError, LogicError, LogicTypeError, UnknownRelationError
from .query import QueryResult
from .relation_table import RelationTable, check_key_space, encode, key_space, sorted_unique
from .rule_types import (DEFAULT_ENTITY_TYPE, arguments_text, comparison_type, resolve_term,
                         type_rules)
from .safety import check_safety, check_stratified
from .sparse_eval import SparseStratum, scan
from .stratify import stratify
from .terms import Atom, Const, Name, Rule, Var

DEFAULT_DENSE_LIMIT = 1 << 16  # a stratum whose relations all have at most this many cells runs dense
DENSE_JOIN_LIMIT = 1 << 24  # ... and each of its rules has at most this many variable assignments
DENSE_TENSOR_LIMIT = 1 << 26  # relation_tensor refuses to materialize more cells than this
# The automatic choice also runs a stratum dense when its relations are larger but its input facts
# are dense: then the sparse join enumerates about (facts x out-degree) rows per round while one
# dense round is a matrix product, and dense graphs have few rounds (small diameter).
DENSE_AUTO_CELLS = 1 << 24  # every relation of the stratum has at most this many cells
DENSE_AUTO_JOIN = 1 << 36  # each rule at most this many variable assignments (multiply-adds)
DENSE_AUTO_DENSITY = 1 / 64  # the stratum's input relations hold at least this share of their cells
DENSE_FORCED_CELLS = 1 << 28  # `@dense` refuses relations with more cells than this (1 GiB each)


@dataclass
class RelationInfo:
    name: str
    arity: int
    types: tuple | None  # entity type per argument; None until inferred from rules
    declared: bool  # by a `relation` declaration (else implied by facts or rule heads)
    pos: Any = None


@dataclass
class StratumStats:
    relations: tuple
    mode: str  # "dense", "sparse", "bitset" (row updates, bitset_eval.py), or "incremental"
    backend: str  # where it ran: "core" (the native runtime), "numpy"
    soft: bool
    iterations: int
    seconds: float


class LogicEngine:
    def __init__(self, *, dense_limit: int = DEFAULT_DENSE_LIMIT, tolerance: float = 1e-6,
                 max_soft_iterations: int = 1000, dense_evaluator: Any = "auto", demand: bool = True,
                 set_ops: Any = None):
        self.dense_limit = dense_limit
        self.tolerance = tolerance
        self.max_soft_iterations = max_soft_iterations
        self.domains: dict[str, EntityDomain] = {}
        self.relations: dict[str, RelationInfo] = {}
        self.facts: dict[str, dict] = {}  # relation -> {index tuple: weight}
        self.bulk: dict[str, list] = {}  # relation -> [(n, arity) int64 entity indices] of true facts
        self.rules: list[Rule] = []  # what _compile sees: an arithmetic rule's body rule in its place
        self.source_rules: list[Rule] = []  # the rules as written (stratification is checked on these)
        self._arith: list[ArithRule] = []
        self._aggregates: list[AggregateRule] = []
        self.last_stats: list[StratumStats] = []
        self._dense_evaluator = dense_evaluator
        # The bitset evaluator's native set operations (tensorlogic._core, handed in as the dense
        # evaluator's device ops are: builtins/logic.py host_set_ops()); None: NumPy.
        self._set_ops = usable_set_ops(set_ops)
        self.demand = demand  # answer queries with constants by the magic-set rewriting (demand.py)
        self.last_query_demand = False  # whether the last query was answered that way
        self._tables: dict[str, RelationTable] | None = None  # the fixpoint, None: recompute
        self._pending: dict[str, list] = {}  # true facts added since the fixpoint was computed
        self._slot_types: dict[tuple, str] = {}

    # -- declarations and facts -------------------------------------------------------------
    def declare_entity(self, name: str, members: Iterable | None = None, pos: Any = None) -> None:
        if name in self.domains and (self.domains[name].closed or members is not None):
            if members is None or list(members) != self.domains[name].values:
                raise LogicTypeError(f"entity type {name} is declared twice", pos)
            return
        if name in self.domains:
            return
        self.domains[name] = EntityDomain(name, [self._const_value(m) for m in members]
                                          if members is not None else None)
        self._changed()

    def declare_relation(self, name: str, arg_types: Iterable[str | None], pos: Any = None) -> None:
        types = tuple(t or DEFAULT_ENTITY_TYPE for t in arg_types)
        known = self.relations.get(name)
        if known is not None and known.declared:
            if known.types != types:
                raise LogicError(f"relation {name} is declared twice with different argument types", pos)
            return
        if known is not None and known.arity != len(types):
            raise ArityError(f"relation {name} is declared with {arguments_text(len(types))} but was "
                             f"used with {known.arity}", pos)
        if known is not None and (name in self.facts or name in self.bulk) and known.types != types:
            self._retype_facts(name, known.types, types, pos)
        for type_name in types:
            self._domain(type_name)
        self.relations[name] = RelationInfo(name, len(types), types, True, pos)
        self._changed()

    def add_fact(self, atom: Atom, weight: float = 1.0, pos: Any = None) -> None:
        """Assert `atom` (all arguments are constants) with a truth value in [0, 1]."""
        pos = pos if pos is not None else atom.pos
        if atom.negated:
            raise LogicError(f"a fact cannot be negated: {atom}", pos)
        weight = float(weight)
        if not (0.0 <= weight <= 1.0):
            raise LogicError(f"the weight of fact {atom} must be between 0 and 1, got {weight:g}", pos)
        info = self._relation_for_fact(atom.relation, len(atom.args), pos)
        indices = []
        for term, type_name in zip(atom.args, info.types):
            if isinstance(term, Var):
                raise LogicError(f"fact {atom} has a variable {term.name}; facts take constants "
                                 f"(use a rule with <- to derive tuples)", pos)
            value = term.value if isinstance(term, Const) else term.text
            indices.append(self._domain(type_name).add(value, term.pos or pos))
        table = self.facts.setdefault(atom.relation, {})
        key = tuple(indices)
        if weight == 1.0 and key not in table:
            table[key] = 1.0
            self._fact_added(atom.relation, key)
        elif table.get(key) != weight:
            if weight == 0.0:
                table.pop(key, None)
            else:
                table[key] = weight
            self._changed()

    def add_facts(self, relation: str, rows: Iterable[tuple], pos: Any = None) -> None:
        """Bulk form of add_fact for true facts given as tuples of constants (Python API, benchmarks)."""
        rows = list(rows)
        if not rows:
            return
        info = self._relation_for_fact(relation, len(rows[0]), pos)
        domains = [self._domain(t) for t in info.types]
        table = self.facts.setdefault(relation, {})
        for row in rows:
            if len(row) != info.arity:
                raise ArityError(f"{relation} takes {arguments_text(info.arity)}, got {len(row)}", pos)
            key = tuple(d.add(self._const_value(v), pos) for d, v in zip(domains, row))
            if table.get(key) == 1.0:
                continue
            structural = key in table  # a weighted fact becomes certain
            table[key] = 1.0
            if structural:
                self._changed()
            else:
                self._fact_added(relation, key)

    def load_relation(self, name: str, source, pos: Any = None) -> int:
        """Add the rows of `source` as true facts of relation `name`: a .csv / .tsv / .npy path or an
        (n, arity) integer array. The relation must be known (declared, or used by facts or rules);
        each column's constants join the entity type the relation gives that column. Vectorised:
        constants are mapped to indices once per distinct value. Returns the number of rows read."""
        info = self.relations.get(name)
        if info is None:
            raise UnknownRelationError(f"load_relation: unknown relation {name} (declare it first: "
                                       f"relation {name}(a: type, ...))", pos)
        where = source if isinstance(source, str) else f"load_relation({name}, ...)"
        if isinstance(source, str):
            columns = bulk.read_columns(source, info.arity)
        else:
            columns = bulk.columns_of_array(source, info.arity, where)
        info = self._relation_for_fact(name, info.arity, pos)
        rows = len(columns[0][1] if isinstance(columns[0], tuple) else columns[0]) if columns else 0
        coords = np.empty((rows, info.arity), np.int64)
        for i, (column, type_name) in enumerate(zip(columns, info.types)):
            values, inverse = column if isinstance(column, tuple) else bulk.factorize(column)
            domain = self._domain(type_name)
            try:
                mapping = np.array(domain.add_distinct(values, pos), np.int64)
            except LogicError as error:
                bad = next(k for k, v in enumerate(values) if domain.lookup(v) is None)
                row = int(np.flatnonzero(inverse == bad)[0])
                at = (f"{source}:{bulk.line_of(source, row)}" if isinstance(source, str)
                      and not source.lower().endswith(".npy") else f"{where}: row {row}")
                raise LogicTypeError(f"{at}: column {i + 1}: {error.message}", pos) from None
            coords[:, i] = mapping[inverse]
        if rows:
            self.bulk.setdefault(name, []).append(coords)
            if self._tables is not None:
                self._pending.setdefault(name, []).append(coords)
        return rows

    def save_relation(self, name: str, path: str, pos: Any = None) -> int:
        """Write the relation's tuples (after inference) to a .csv / .tsv / .npy file, in index
        order; returns the number written. Weighted relations are refused (their values would be
        lost): save relation_tensor(R) instead."""
        if name not in self.relations:
            raise UnknownRelationError(f"save_relation: unknown relation {name}", pos)
        bulk.delimiter_of(path)
        self.infer()
        table = self._tables[name]
        if table.is_weighted:
            raise LogicError(f"save_relation: {name} has weighted (soft) tuples; save "
                             f"relation_tensor({name}) instead", pos)
        domains = [self._domain(t) for t in self._types_of(name)]
        try:
            bulk.write_rows(path, table.columns(), [d.values for d in domains])
        except LogicError as error:
            raise LogicError(error.message, pos) from None
        return len(table)

    def add_rule(self, rule: Rule) -> None:
        head = rule.head
        if head.negated:
            raise LogicError(f"a rule head cannot be negated: {rule}", rule.pos)
        if rule.temperature is not None and rule.temperature < 0:
            raise LogicError(f"temperature must be >= 0, got {rule.temperature:g}", rule.pos)
        known = self.relations.get(head.relation)
        if known is not None and known.arity != len(head.args):
            raise ArityError(f"{head.relation} takes {arguments_text(known.arity)}, but the head of rule "
                             f"`{rule}` gives {len(head.args)}", head.pos or rule.pos)
        if known is None:
            self.relations[head.relation] = RelationInfo(head.relation, len(head.args), None, False,
                                                         head.pos or rule.pos)
        self.source_rules.append(rule)
        known = self._known_constants()
        aggregate = split_aggregate(rule, len(self._aggregates), lambda t: isinstance(resolve_term(t, known), Var))
        if aggregate is not None:
            self._aggregates.append(aggregate)
            self.relations[aggregate.body_rule.head.relation] = RelationInfo(
                aggregate.body_rule.head.relation, len(aggregate.variables), None, False, rule.pos)
            rule = aggregate.body_rule
        arith = split_arithmetic(rule, len(self._arith))
        if arith is not None:
            if rule.temperature:
                raise LogicError(f"rule `{rule}` computes with arithmetic terms and cannot be soft "
                                 f"(@temperature)", rule.pos)
            self._arith.append(arith)
            self.relations[arith.body_rule.head.relation] = RelationInfo(
                arith.body_rule.head.relation, len(arith.variables), None, False, rule.pos)
            rule = arith.body_rule
        self.rules.append(rule)
        self._changed()

    def check_rule(self, rule: Rule, defined: Iterable[Rule] = ()) -> None:
        """Safety of `rule` and stratification of `defined` + this engine's rules + `rule`, checked
        when the rule is defined (needs no facts; raises UnsafeRuleError or StratificationError)."""
        known = self._known_constants()
        check_safety(rule, lambda t: isinstance(resolve_term(t, known), Var))
        check_stratified(list(self.source_rules) + list(defined) + [rule])

    def has_relation(self, name: str) -> bool:
        return name in self.relations

    # -- evaluation -----------------------------------------------------------------------------
    def check(self) -> None:
        """Raise the first error the rules have (unknown relation, arity, safety, types,
        stratification) without evaluating anything."""
        stratify(sorted(self.relations), self._compile() + self._edges())

    def infer(self) -> list[StratumStats]:
        """Run every stratum to its fixpoint (no-op when nothing changed since the last run)."""
        if self._tables is not None and not self._pending:
            return self.last_stats
        if (self._tables is not None and not self._arith and not self._aggregates
                and self._infer_incremental()):
            return self.last_stats
        self._tables = None
        self._pending = {}
        derived: dict[str, set] = {}  # head relation -> index tuples computed by arithmetic rules
        processed: dict[int, set] = {}  # arithmetic rule -> its body rows already turned into heads
        compiled = self._compile()
        tables = {name: self._fact_table(name) for name in self.relations}
        stats = []
        rounds = 0
        for component in stratify(sorted(self.relations), compiled + self._edges()):
            while True:
                rules = [r for r in compiled if r.head.relation in component]
                if rules:
                    stats.append(self._run_stratum(component, rules, tables))
                if not (self._arith and derive_arithmetic(self, component, tables, derived, processed)):
                    break
                # New tuples from arithmetic rules (the strata before are complete, so they are
                # sound): domains may have grown, so recompile, re-encode, and run this stratum again.
                rounds += 1
                biggest = max((len(d) for d in self.domains.values()), default=0)
                if rounds > arithmetic.ROUND_LIMIT or biggest > arithmetic.DOMAIN_LIMIT:
                    raise LogicError(f"arithmetic rules keep deriving new numbers ({biggest:,} constants "
                                     f"after {rounds:,} rounds): bound them with a comparison like N < 100",
                                     self._arith[0].rule.pos)
                compiled = self._compile()
                tables = self._reencoded(tables, derived)
            if self._aggregates and derive_aggregates(self, component, tables, derived):
                # the aggregates over this (complete) stratum: their heads are in later strata
                compiled = self._compile()
                tables = self._reencoded(tables, derived)
        self._tables = tables
        self.last_stats = stats
        return stats

    def _run_stratum(self, component, rules: list, tables: dict) -> StratumStats:
        stratum = {r.head.relation for r in rules}  # (an arithmetic rule's head is an input here)
        soft = any(r.temperature > 0 for r in rules)
        dense = self._choose_dense(rules, stratum, tables)
        started = time.perf_counter()
        plan = None
        if not dense and not any(r.source.evaluation for r in rules):  # (`@sparse` runs sparse)
            plan = plan_updates(rules, stratum, tables)
        if dense and self._dense_evaluator is not None:
            from .dense_eval import DenseStratum
            runner = DenseStratum(rules, stratum, tables, soft, self.tolerance,
                                  self.max_soft_iterations, self._dense_evaluator)
        elif plan is not None:
            runner = BitsetStratum(rules, stratum, tables, plan, self._set_ops)
        else:
            runner = SparseStratum(rules, stratum, tables, soft, self.tolerance,
                                   self.max_soft_iterations)
            dense = False
        try:
            runner.run()
        except MemoryError:
            raise LogicError(f"out of memory evaluating {', '.join(sorted(stratum))} "
                             f"({'dense' if dense else 'sparse'} path)", rules[0].source.pos) from None
        backend = runner.ops.name if dense else getattr(runner, "backend", "numpy")
        mode = "dense" if dense else ("bitset" if plan is not None else "sparse")
        return StratumStats(tuple(component), mode, backend, soft,
                            runner.iterations, time.perf_counter() - started)

    def _edges(self) -> list:
        """Stratification edges besides the compiled rules: arithmetic and aggregate heads depend
        on their hidden body relations."""
        return dependency_edges(self._arith) + aggregate_edges(self._aggregates)

    def _choose_dense(self, rules: list, stratum: set, tables: dict) -> bool:
        """Dense or sparse for one stratum: `@dense` / `@sparse` on any of its rules decides (both
        is an error); else small relations run dense, and with dense_limit > 0 so do larger ones
        whose input facts are dense (DENSE_AUTO_*)."""
        touched = stratum | {a.relation for r in rules for a in r.body}
        asked = {r.source.evaluation for r in rules if r.source.evaluation}
        if len(asked) > 1:
            raise LogicError(f"the rules of {', '.join(sorted(stratum))} ask for both @dense and @sparse; "
                             f"they are evaluated together, so give one", rules[0].source.pos)
        if asked == {"sparse"} or any(0 in tables[name].sizes for name in touched):
            return False  # (an empty domain: nothing to derive either way)
        cells = {name: key_space(tables[name].sizes) for name in touched}
        if asked == {"dense"}:
            for name in sorted(touched):
                if cells[name] > DENSE_FORCED_CELLS:
                    dims = " x ".join(str(s) for s in tables[name].sizes)
                    rule = next(r for r in rules if r.source.evaluation)
                    raise LogicError(f"@dense: relation {name} spans {dims} cells, more than a dense "
                                     f"tensor may hold ({DENSE_FORCED_CELLS:,}); use @sparse", rule.source.pos)
            return True
        if (all(cells[name] <= self.dense_limit for name in touched)
                and all(key_space(r.var_sizes) <= max(self.dense_limit, DENSE_JOIN_LIMIT) for r in rules)):
            return True
        inputs = [name for name in touched if name not in stratum]
        if self.dense_limit <= 0 or not inputs:
            return False
        filled = sum(len(tables[name]) for name in inputs) / sum(cells[name] for name in inputs)
        return (all(cells[name] <= DENSE_AUTO_CELLS for name in touched)
                and all(key_space(r.var_sizes) <= DENSE_AUTO_JOIN for r in rules)
                and filled >= DENSE_AUTO_DENSITY)

    def _reencoded(self, tables: dict, derived: dict) -> dict:
        """The tables at the current domain sizes (domains only grow and keep their indices, so the
        keys stay sorted), with the tuples arithmetic rules derived added."""
        out = {}
        for name in self.relations:
            sizes = tuple(len(self._domain(t)) for t in self._types_of(name))
            check_key_space(sizes, f"relation {name}")
            old = tables.get(name)
            table = RelationTable.empty(sizes) if old is None else (
                old if old.sizes == sizes else RelationTable(sizes, encode(old.columns(), sizes, len(old)),
                                                             old.values))
            rows = derived.get(name)
            if rows:
                coords = np.array(sorted(rows), dtype=np.int64).reshape(len(rows), len(sizes))
                keys = encode([coords[:, i] for i in range(len(sizes))], sizes, len(rows))
                table = table.union_max(RelationTable.from_unsorted(sizes, keys, None))
            out[name] = table
        return out

    def _infer_incremental(self) -> bool:
        """Continue the last fixpoint with the facts added since, when that is sound: every table
        Boolean and every stratum the new tuples reach free of negation and soft rules. Returns
        False (changing nothing) when the caller must recompute from scratch."""
        if any(t.is_weighted for t in self._tables.values()):
            return False
        compiled = self._compile()
        tables = {}
        for name in self.relations:
            old = self._tables.get(name)
            if old is None:
                return False
            sizes = tuple(len(self._domain(t)) for t in self._types_of(name))
            check_key_space(sizes, f"relation {name}")
            # domains only grow and keep their indices, so re-encoding keeps the keys sorted
            tables[name] = old if old.sizes == sizes else RelationTable(
                sizes, encode(old.columns(), sizes, len(old)), None)
        changed: dict[str, np.ndarray] = {}
        for name, rows in self._pending.items():
            table = tables[name]
            arity = len(table.sizes)
            single = [r for r in rows if isinstance(r, tuple)]
            coords = np.concatenate([np.array(single, dtype=np.int64).reshape(len(single), arity)]
                                    + [r for r in rows if not isinstance(r, tuple)])
            keys = sorted_unique(encode([coords[:, i] for i in range(len(table.sizes))],
                                        table.sizes, len(coords)))
            if len(table.keys):
                at = np.minimum(np.searchsorted(table.keys, keys), len(table.keys) - 1)
                keys = keys[table.keys[at] != keys]
            if len(keys):
                changed[name] = keys
                tables[name] = table.union_max(RelationTable(table.sizes, keys, None))
        plan = []
        for component in stratify(sorted(self.relations), compiled):
            rules = [r for r in compiled if r.head.relation in component]
            if not rules:
                continue
            plan.append((component, rules))
        stats = []
        for component, rules in plan:
            if not any(a.relation in changed for r in rules for a in r.body):
                continue
            if any(r.temperature > 0 or any(a.negated for a in r.body) for r in rules):
                return False
            started = time.perf_counter()
            runner = SparseStratum(rules, set(component), tables, False, self.tolerance,
                                   self.max_soft_iterations)
            for name, keys in runner.run_incremental(changed).items():
                previous = changed.get(name)
                changed[name] = keys if previous is None else sorted_unique(np.concatenate([previous, keys]))
            stats.append(StratumStats(tuple(component), "incremental", "numpy", False,
                                      runner.iterations, time.perf_counter() - started))
        self._tables = tables
        self._pending = {}
        self.last_stats = stats
        return True

    def query(self, atom: Atom) -> QueryResult:
        """Answers of `atom` (sorted, stable), inferring first if facts or rules changed."""
        pos = atom.pos
        info = self.relations.get(atom.relation)
        if info is None:
            raise UnknownRelationError(f"unknown relation {atom.relation} in query {atom}", pos)
        if info.arity != len(atom.args):
            raise ArityError(f"{atom.relation} takes {arguments_text(info.arity)}, the query {atom} "
                             f"gives {len(atom.args)}", pos)
        if atom.negated:
            raise LogicError(f"a query cannot be negated: {atom}", pos)
        self.last_query_demand = False
        if self.demand and self._tables is None:  # (a fixpoint at hand, or one to continue, is cheaper)
            from .demand import answer_on_demand
            answered = answer_on_demand(self, atom)
            if answered is not None:
                return answered
        self.infer()
        table = self._tables[atom.relation]
        types = self._types_of(atom.relation)
        domains = [self._domain(t) for t in types]
        known = self._known_constants()
        names: list[str] = []  # the query's named variables, in order of first occurrence
        terms = []
        anonymous = 0
        impossible = False
        for term, domain in zip(atom.args, domains):
            resolved = resolve_term(term, known)
            if isinstance(resolved, Var) and resolved.name == "_":
                anonymous += 1
                terms.append(("v", -anonymous))  # matches anything, not returned
            elif isinstance(resolved, Var):
                if resolved.name not in names:
                    names.append(resolved.name)
                terms.append(("v", names.index(resolved.name)))
            else:
                index = domain.lookup(resolved.value)
                impossible |= index is None  # a constant nobody mentioned: no answers
                terms.append(("c", index if index is not None else 0))
        rows_out: list[tuple] = []
        weights_out: list[float] = []
        if not impossible and len(table):
            bindings = scan(CompiledAtom(atom.relation, tuple(terms), False, table.sizes), table,
                            weighted=True)
            position_of = {}
            for position, (kind, value) in enumerate(terms):
                if kind == "v" and value >= 0:
                    position_of.setdefault(value, position)
            sizes = tuple(table.sizes[position_of[v]] for v in range(len(names)))
            keys = encode([bindings.columns[v] for v in range(len(names))], sizes, bindings.rows)
            projected = RelationTable.from_unsorted(sizes, keys, bindings.weights)
            columns = projected.columns()
            value_lists = [[domains[position_of[v]].values[i] for i in columns[v].tolist()]
                           for v in range(len(names))]
            rows_out = list(zip(*value_lists)) if names else [()] * len(projected)
            weights_out = projected.value_array().tolist()
            order = sorted(range(len(rows_out)),
                           key=lambda i: tuple(constant_sort_key(v) for v in rows_out[i]))
            rows_out = [rows_out[i] for i in order]
            weights_out = [weights_out[i] for i in order]
        return QueryResult(atom=atom, variables=tuple(names), rows=rows_out,
                           weights=weights_out if table.is_weighted else None)

    def relation_tensor(self, name: str, pos: Any = None) -> np.ndarray:
        """The relation as a dense array over entity indices: bool, or float32 if weighted."""
        if name not in self.relations:
            raise UnknownRelationError(f"unknown relation {name}", pos)
        self.infer()
        table = self._tables[name]
        cells = key_space(table.sizes)
        if cells > DENSE_TENSOR_LIMIT:
            dims = " x ".join(str(s) for s in table.sizes)
            raise LogicError(f"relation {name} spans {dims} cells ({len(table)} true), too large "
                             f"for a dense tensor; query it instead", pos)
        dense = table.to_dense()
        return dense if table.is_weighted else dense > 0

    def relation_axes(self, name: str) -> list[list]:
        """For each axis of relation_tensor(name), the constants in index order."""
        self.infer()
        return [list(self._domain(t).values) for t in self._types_of(name)]

    # -- internals ----------------------------------------------------------------------------
    def _changed(self) -> None:
        """Declarations, rules or weights changed: the next read recomputes from scratch."""
        self._tables = None
        self._pending = {}

    def _fact_added(self, relation: str, key: tuple) -> None:
        """A new certain fact: the next read may continue from the current fixpoint."""
        if self._tables is not None:
            self._pending.setdefault(relation, []).append(key)

    @staticmethod
    def _const_value(value):
        if isinstance(value, Const):
            return value.value
        if isinstance(value, Name):
            return value.text
        if isinstance(value, (float, np.floating)) and not isinstance(value, bool):
            if not np.isfinite(value):
                raise LogicError(f"entity constants are names or finite numbers, got {value!r}")
            # (from `/` in rules, or float facts); a whole number is that integer, one constant
            return int(value) if float(value).is_integer() else float(value)
        if isinstance(value, bool) or not isinstance(value, (str, int, np.integer)):
            raise LogicError(f"entity constants are names or numbers, got {value!r}")
        return int(value) if isinstance(value, np.integer) else value

    def _domain(self, name: str) -> EntityDomain:
        domain = self.domains.get(name)
        if domain is None:
            domain = self.domains[name] = EntityDomain(name)
        return domain

    def _relation_for_fact(self, name: str, arity: int, pos) -> RelationInfo:
        info = self.relations.get(name)
        if info is None:
            info = self.relations[name] = RelationInfo(name, arity, (DEFAULT_ENTITY_TYPE,) * arity,
                                                       False, pos)
            self._changed()
        elif info.arity != arity:
            raise ArityError(f"{name} takes {arguments_text(info.arity)}, got {arity}", pos)
        elif info.types is None:
            info.types = self._inferred_types(name)
            self._changed()
        return info

    def _inferred_types(self, name: str) -> tuple:
        """Types of a rule-defined relation before it gets facts, from the rules if they compile
        yet (a rule may still name relations whose facts come later), else the default type."""
        try:
            self._compile()
        except LogicError:
            return (DEFAULT_ENTITY_TYPE,) * self.relations[name].arity
        return tuple(self._slot_types[(name, i)] for i in range(self.relations[name].arity))

    def _retype_facts(self, name: str, old: tuple, new: tuple, pos) -> None:
        old_domains = [self._domain(t) for t in old]
        new_domains = [self._domain(t) for t in new]
        retyped = {}
        for indices, weight in self.facts.get(name, {}).items():
            retyped[tuple(nd.add(od.values[i], pos) for i, od, nd in
                          zip(indices, old_domains, new_domains))] = weight
        if name in self.facts:
            self.facts[name] = retyped
        for coords in self.bulk.get(name, []):  # in place; once per distinct constant
            for i, (od, nd) in enumerate(zip(old_domains, new_domains)):
                uniques, inverse = np.unique(coords[:, i], return_inverse=True)
                mapping = np.array([nd.add(od.values[k], pos) for k in uniques.tolist()], np.int64)
                coords[:, i] = mapping[inverse.reshape(-1)]

    def _types_of(self, name: str) -> tuple:
        info = self.relations[name]
        if info.types is not None:
            return info.types
        return tuple(self._slot_types.get((name, i), DEFAULT_ENTITY_TYPE) for i in range(info.arity))

    def _known_constants(self) -> set:
        known = set()
        for domain in self.domains.values():
            known.update(domain.values)
        return known

    def _fact_table(self, name: str, derived: set | None = None) -> RelationTable:
        sizes = tuple(len(self._domain(t)) for t in self._types_of(name))
        facts = self.facts.get(name)
        if derived:
            facts = dict(facts or {})
            for key in derived:
                facts[key] = 1.0
        loaded = self.bulk.get(name, [])
        if not facts and not loaded:
            return RelationTable.empty(sizes)
        check_key_space(sizes, f"relation {name}")
        facts = facts or {}
        coords = np.concatenate([np.array(list(facts.keys()), dtype=np.int64).reshape(len(facts), len(sizes))]
                                + loaded)
        keys = encode([coords[:, i] for i in range(len(sizes))], sizes, len(coords))
        weights = np.fromiter(facts.values(), dtype=np.float32, count=len(facts))
        if np.all(weights == 1.0):
            return RelationTable(sizes, sorted_unique(keys), None)
        weights = np.concatenate([weights, np.ones(len(coords) - len(facts), np.float32)])
        return RelationTable.from_unsorted(sizes, keys, weights)

    def _compile(self) -> list[CompiledRule]:
        known = self._known_constants()
        resolved_rules, classes, slot_types = type_rules(self.relations, self.rules, known)
        self._slot_types.update(slot_types)
        # Rule constants join their domains before any size is fixed.
        for rule_index, (rule, atoms, _, comparisons) in enumerate(resolved_rules):
            for atom, terms in atoms:
                for i, term in enumerate(terms):
                    if isinstance(term, Const):
                        self._domain(self._slot_types[(atom.relation, i)]).add(term.value,
                                                                               term.pos or rule.pos)
            for item, left, right in comparisons:
                type_name = comparison_type(classes, rule_index, left, right)
                for side in (left, right):
                    if isinstance(side, Const):
                        self._domain(type_name).add(side.value, side.pos or item.pos or rule.pos)
        compiled = []
        for rule_index, (rule, atoms, var_names, comparisons) in enumerate(resolved_rules):
            compiled_comparisons = []
            never_fires = False
            for item, left, right in comparisons:
                if isinstance(left, Const) and isinstance(right, Const):
                    ranks = np.array([0, 1]) if constant_sort_key(left.value) < constant_sort_key(
                        right.value) else (np.array([0, 0]) if left.value == right.value else np.array([1, 0]))
                    static = CompiledComparison(item.op, ("c", 0), ("c", 1), ranks)
                    never_fires |= not bool(static.holds(0, 1))
                    continue
                domain = self._domain(comparison_type(classes, rule_index, left, right))
                order = sorted(range(len(domain)), key=lambda i: constant_sort_key(domain.values[i]))
                ranks = np.empty(len(domain), np.int64)
                ranks[order] = np.arange(len(domain))
                sides = tuple(("v", side) if isinstance(side, int) else ("c", domain.lookup(side.value))
                              for side in (left, right))
                compiled_comparisons.append(CompiledComparison(item.op, sides[0], sides[1], ranks))
            if never_fires:
                continue
            var_sizes = [0] * len(var_names)
            compiled_atoms = []
            for atom, terms in atoms:
                types = [self._slot_types[(atom.relation, i)] for i in range(len(terms))]
                sizes = tuple(len(self._domain(t)) for t in types)
                out_terms = []
                for i, term in enumerate(terms):
                    if isinstance(term, Const):
                        out_terms.append(("c", self._domain(types[i]).lookup(term.value)))
                    else:
                        out_terms.append(("v", term))
                        var_sizes[term] = sizes[i]
                existential = ()
                if atom.negated:
                    existential = tuple(dict.fromkeys(v for kind, v in out_terms
                                                      if kind == "v" and var_names[v].startswith("_#")))
                compiled_atoms.append(CompiledAtom(atom.relation, tuple(out_terms), atom.negated,
                                                   sizes, existential))
            compiled.append(CompiledRule(compiled_atoms[0], tuple(compiled_atoms[1:]),
                                         float(rule.temperature or 0.0), tuple(var_names),
                                         tuple(var_sizes), rule, tuple(compiled_comparisons)))
        return compiled
