"""The answer to a `?` query: rows of constants sorted stably, optional truth values, print form.

Invariant: `rows` are distinct and sorted by constant (numbers numerically, then names
alphabetically, column by column), so the same program always prints the same text.
"""
from __future__ import annotations

import numpy as np

from dataclasses import dataclass

from .terms import Atom

PRINT_LIMIT = 1000  # answers printed before "... and N more"


def _format_weight(weight: float) -> str:
    return f"{weight:.3f}"


def _truth(w) -> float:
    """A truth value as a TL float: an f32 weight by its shortest decimal (0.7, not the
    0.699999988079071 its exact value spells), as f32 scalars print everywhere in TL."""
    return float(str(np.float32(w)))  # weighted relations hold f32 truth values


@dataclass
class QueryResult:
    atom: Atom
    variables: tuple  # names of the query's variables, in order of first occurrence
    rows: list  # list[tuple]: one tuple of constants per answer, in `variables` order
    weights: list | None  # truth value per row when the relation is weighted, else None

    @property
    def is_ground(self) -> bool:
        return not self.variables

    @property
    def truth(self) -> float:
        """For a ground query: its truth value (1.0 / 0.0 for Boolean relations)."""
        if not self.rows:
            return 0.0
        return 1.0 if self.weights is None else _truth(self.weights[0])

    @property
    def value(self):
        """What the query returns as a TL value, the same answer the `?` statement prints: for a
        ground query a bool, or its truth value (a float) when the relation is weighted; else the
        rows, each with its truth value appended when the relation is weighted."""
        if self.is_ground:
            return self.truth if self.weights is not None else bool(self.rows)
        if self.weights is not None:
            return [tuple(row) + (_truth(w),) for row, w in zip(self.rows, self.weights)]
        return list(self.rows)

    def text(self) -> str:
        """One line: `Query: answer, answer, ...` (`true`/`false` or the value for ground queries)."""
        head = f"{self.atom}"
        if self.is_ground:
            if self.weights is not None and self.rows:
                return f"{head}: {_format_weight(self.truth)}"
            return f"{head}: {'true' if self.rows else 'false'}"
        if not self.rows:
            return f"{head}: no answers"
        shown = []
        for i, row in enumerate(self.rows[:PRINT_LIMIT]):
            item = str(row[0]) if len(row) == 1 else "(" + ", ".join(str(v) for v in row) + ")"
            if self.weights is not None:
                item += f" {_format_weight(self.weights[i])}"
            shown.append(item)
        more = len(self.rows) - PRINT_LIMIT
        tail = f", ... and {more} more" if more > 0 else ""
        return f"{head}: {', '.join(shown)}{tail}"

    def __str__(self) -> str:
        return self.text()
