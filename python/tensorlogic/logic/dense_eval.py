"""Dense evaluation of one stratum on the tensor runtime: relations as float32 tensors over entity
indices, each rule body one contraction (einsum) over its variables followed by a step.

Constants in atoms select a slice; a repeated variable becomes a fresh index tied by an identity
factor; `not Q` contributes the factor 1 - Q. Boolean strata run semi-naive (the previous round's
new tuples at one recursive position at a time); soft strata iterate to a numeric fixpoint.
Invariant: `tables` hold the same contents the sparse evaluator would produce.
"""
from __future__ import annotations

import numpy as np

from .compiled import CompiledAtom, CompiledRule
from .contraction import contract
from .dense_ops import NumpyOps, default_ops
from .errors import ConvergenceError
from .relation_table import RelationTable


class DenseStratum:
    def __init__(self, rules: list[CompiledRule], stratum: set, tables: dict, soft: bool,
                 tolerance: float, max_iterations: int, ops="auto"):
        self.rules = rules
        self.stratum = stratum
        self.tables = tables
        self.soft = soft
        self.tolerance = tolerance
        self.max_iterations = max_iterations
        self.ops = default_ops() if ops == "auto" else (NumpyOps() if ops == "numpy" else ops)
        self.iterations = 0

    def _atom_factors(self, atom: CompiledAtom, tensor, rule: CompiledRule, sizes: dict):
        """Factors (tensor, indices) standing for one body atom; new tie indices go into `sizes`."""
        ops = self.ops
        for position in range(len(atom.terms) - 1, -1, -1):
            kind, value = atom.terms[position]
            if kind == "c":
                tensor = ops.select(tensor, position, value)
        indices, factors = [], []
        for kind, value in atom.terms:
            if kind == "c":
                continue
            if value in indices:  # repeated variable: new index, tied to the first by identity
                tied = len(sizes)
                sizes[tied] = rule.var_sizes[value]
                factors.append((ops.eye(rule.var_sizes[value]), (value, tied)))
                indices.append(tied)
            else:
                indices.append(value)
        if atom.negated:
            for axis in range(len(indices) - 1, -1, -1):
                if indices[axis] in atom.existential:
                    tensor = ops.max(tensor, axis)
                    indices.pop(axis)
            if factors:  # repeated variables inside `not`: take the diagonal before negating
                own = tuple(i for i in indices if i < len(rule.var_sizes))
                tensor = contract(ops, [(tensor, tuple(indices))] + factors, own, sizes)
                indices, factors = list(own), []
            tensor = ops.one_minus(tensor)
        return [(tensor, tuple(indices))] + factors

    def _join(self, rule: CompiledRule, inputs: list):
        """The rule's head tensor (after the step) for the given body tensors."""
        ops = self.ops
        sizes = dict(enumerate(rule.var_sizes))
        factors = []
        for atom, tensor in zip(rule.body, inputs):
            factors += self._atom_factors(atom, tensor, rule, sizes)
        for comparison in rule.comparisons:
            factors.append(self._comparison_factor(comparison, rule))
        head_vars = rule.head.variables
        joined = contract(ops, factors, head_vars, sizes)
        stepped = ops.hard_step(joined) if rule.temperature <= 0 else ops.soft_step(joined, rule.temperature)
        return self._place_in_head(rule, stepped, head_vars)

    def _comparison_factor(self, comparison, rule: CompiledRule):
        """A 0/1 tensor over the comparison's variables that is 1 where it holds."""
        (lk, lv), (rk, rv) = comparison.left, comparison.right
        if lk == "v" and rk == "v" and lv == rv:
            n = rule.var_sizes[lv]
            mask = comparison.holds(np.arange(n), np.arange(n))
            return self.ops.from_numpy(mask.astype(np.float32)), (lv,)
        if lk == "v" and rk == "v":
            left = np.arange(rule.var_sizes[lv])[:, None]
            right = np.arange(rule.var_sizes[rv])[None, :]
            return self.ops.from_numpy(comparison.holds(left, right).astype(np.float32)), (lv, rv)
        if lk == "v":
            mask = comparison.holds(np.arange(rule.var_sizes[lv]), rv)
            return self.ops.from_numpy(mask.astype(np.float32)), (lv,)
        mask = comparison.holds(lv, np.arange(rule.var_sizes[rv]))
        return self.ops.from_numpy(mask.astype(np.float32)), (rv,)

    def _place_in_head(self, rule: CompiledRule, tensor, head_vars: tuple):
        head = rule.head
        if all(kind == "v" for kind, _ in head.terms) and len(head_vars) == len(head.terms):
            return tensor
        ops = self.ops
        positions = tuple(("pos", i) for i in range(len(head.terms)))
        sizes = {v: rule.var_sizes[v] for v in head_vars}
        factors = [(tensor, head_vars)]
        for i, (kind, value) in enumerate(head.terms):
            sizes[positions[i]] = head.sizes[i]
            if kind == "c":
                factors.append((ops.one_hot(head.sizes[i], value), (positions[i],)))
            else:
                factors.append((ops.eye(head.sizes[i]), (value, positions[i])))
        return contract(ops, factors, positions, sizes)

    def run(self) -> None:
        ops = self.ops
        names = set(self.stratum) | {a.relation for r in self.rules for a in r.body}
        weighted_in = {n: self.tables[n].is_weighted for n in names}
        current = {n: ops.from_numpy(self.tables[n].to_dense()) for n in names}
        heads = sorted({r.head.relation for r in self.rules})
        facts = {h: current[h] for h in heads}
        if self.soft:
            result = self._run_soft(current, facts, heads)
        else:
            result = self._run_boolean(current, heads)
        for h in heads:
            dense = ops.to_numpy(result[h])
            boolean = not self.soft and not weighted_in[h]
            self.tables[h] = RelationTable.from_dense(dense, boolean)

    def _run_boolean(self, current: dict, heads: list) -> dict:
        ops = self.ops
        true_mask = {h: self._certain(current[h]) for h in heads}

        def absorb(found: dict) -> dict:
            delta = {}
            for h in heads:
                if h not in found:
                    delta[h] = None
                    continue
                new = ops.mul(found[h], ops.one_minus(true_mask[h]))
                if not ops.any_positive(new):
                    delta[h] = None
                    continue
                delta[h] = new
                true_mask[h] = ops.maximum(true_mask[h], new)
                current[h] = ops.maximum(current[h], new)
            return delta

        found: dict = {}
        for rule in self.rules:
            head_value = self._join(rule, [current[a.relation] for a in rule.body])
            h = rule.head.relation
            found[h] = head_value if h not in found else ops.maximum(found[h], head_value)
        delta = absorb(found)
        self.iterations = 1
        recursive = [(rule, i) for rule in self.rules for i, a in enumerate(rule.body)
                     if not a.negated and a.relation in self.stratum]
        while any(d is not None for d in delta.values()):
            found = {}
            for rule, position in recursive:
                d = delta[rule.body[position].relation]
                if d is None:
                    continue
                inputs = [d if i == position else current[a.relation] for i, a in enumerate(rule.body)]
                head_value = self._join(rule, inputs)
                h = rule.head.relation
                found[h] = head_value if h not in found else ops.maximum(found[h], head_value)
            delta = absorb(found)
            self.iterations += 1
        return current

    def _certain(self, tensor):
        """1 where the value is 1 (certainly true), else 0."""
        return self.ops.at_least_one(tensor)

    def _run_soft(self, current: dict, facts: dict, heads: list) -> dict:
        ops = self.ops
        change = float("inf")
        while self.iterations < self.max_iterations:
            new = dict(facts)
            for rule in self.rules:
                value = self._join(rule, [current[a.relation] for a in rule.body])
                new[rule.head.relation] = ops.maximum(new[rule.head.relation], value)
            self.iterations += 1
            change = max(ops.max_abs_diff(current[h], new[h]) for h in heads)
            current.update({h: new[h] for h in heads})
            if change <= self.tolerance:
                return current
        raise ConvergenceError(f"soft rules for {', '.join(heads)} did not converge in "
                               f"{self.max_iterations} iterations (last change {change:.3g})")
