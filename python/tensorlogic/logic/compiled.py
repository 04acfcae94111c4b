"""Rules after compilation: variables numbered, constants turned into domain indices, sizes fixed.

Invariant: a CompiledRule is only valid for the domain sizes it was compiled with; the engine
recompiles whenever a domain grows or rules/facts change (compilation is cheap, evaluation is not).
Every head variable and every variable of a negated atom occurs in a positive body atom.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .terms import Rule


@dataclass(frozen=True)
class CompiledAtom:
    relation: str
    terms: tuple  # ("v", var_id) or ("c", index) per argument position
    negated: bool
    sizes: tuple  # domain size per argument position
    existential: tuple = ()  # `_` variables of a negated atom: "no tuple with any value here"

    @cached_property  # (the evaluators ask for these every round; the atom is immutable)
    def bound_variables(self) -> tuple:
        """Variables that must be bound before a negated atom can be checked."""
        return tuple(v for v in self.variables if v not in self.existential)

    @cached_property
    def variables(self) -> tuple:
        """Distinct variable ids, in order of first occurrence."""
        seen: list[int] = []
        for kind, value in self.terms:
            if kind == "v" and value not in seen:
                seen.append(value)
        return tuple(seen)


@dataclass(frozen=True)
class CompiledComparison:
    op: str
    left: tuple  # ("v", var_id) or ("c", index)
    right: tuple
    ranks: np.ndarray  # rank of each entity index in constant sort order (its domain's)

    @property
    def variables(self) -> tuple:
        return tuple(dict.fromkeys(v for k, v in (self.left, self.right) if k == "v"))

    def holds(self, left_index, right_index):
        """Elementwise truth of the comparison for index arrays (or ints)."""
        a, b = self.ranks[left_index], self.ranks[right_index]
        return {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
                ">": np.greater, ">=": np.greater_equal}[self.op](a, b)


@dataclass(frozen=True)
class CompiledRule:
    head: CompiledAtom
    body: tuple  # tuple[CompiledAtom, ...]
    temperature: float  # 0.0: hard step
    var_names: tuple  # name per var id
    var_sizes: tuple  # domain size per var id
    source: Rule
    comparisons: tuple = ()  # tuple[CompiledComparison, ...]

    @property
    def positive(self) -> tuple:
        return tuple(a for a in self.body if not a.negated)

    @property
    def negative(self) -> tuple:
        return tuple(a for a in self.body if a.negated)


def hard_step(x: np.ndarray) -> np.ndarray:
    return (x > 0).astype(np.float32)


def soft_step(x: np.ndarray, temperature: float) -> np.ndarray:
    """2·sigmoid(x/T) - 1 = tanh(x / 2T): 0 stays 0 (no evidence, false), grows to 1 with the
    evidence x >= 0, and tends to the hard step as T -> 0."""
    if temperature <= 0:
        return hard_step(x)
    return np.tanh(np.asarray(x, np.float64) / (2.0 * temperature)).astype(np.float32)


def rule_step(x: np.ndarray, temperature: float) -> np.ndarray:
    return hard_step(x) if temperature <= 0 else soft_step(x, temperature)
