"""Arithmetic rules derive heads semi-naively: each round evaluates only the body rows that are new
since the last round. Before, every round re-evaluated every row (a chain N -> N + 1 of n numbers
took n rounds of up to n rows: O(n^2) Python work; the runaway case that hits the 5,000-round limit
took 90 s before its error). The answers stay those of the plain definition."""
from __future__ import annotations

import tensorlogic
from tensorlogic.logic import arithmetic


def test_a_chain_evaluates_each_body_row_once(monkeypatch):
    rows_seen = []
    real = arithmetic.evaluate

    def counting(term, values, rows, *args, **kwargs):
        rows_seen.append(rows)
        return real(term, values, rows, *args, **kwargs)

    monkeypatch.setattr(arithmetic, "evaluate", counting)
    n = 300
    r = tensorlogic.run(f"Num(0)\nNum(N + 1) <- Num(N), N < {n}\nlet xs = Num(X)?\n"
                        "Sq(N, N * N) <- Num(N), N % 7 == 3\nlet sq = Sq(A, B)?\n")
    assert r.error is None, r.error_text
    assert sorted(x[0] for x in r.env["xs"]) == list(range(n + 1))
    assert sorted(r.env["sq"]) == [(k, k * k) for k in range(n + 1) if k % 7 == 3]
    # each arithmetic evaluation sees only new rows: a few evaluations per row in all, not n per row
    assert sum(rows_seen) < 20 * n, sum(rows_seen)
