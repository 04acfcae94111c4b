"""Arithmetic in rules is exact like TL's own ints: it was done in int64 and wrapped silently
(`Big(N * 2^62) <- Num(N)` with N = 4 gave 0; 2^63 - 1 plus 1 gave -2^63)."""
from __future__ import annotations

import tensorlogic


def answers(src: str, query: str):
    r = tensorlogic.run(src + f"\nlet out = {query}?\n")
    assert r.error is None, r.error_text
    return sorted(r.env["out"])


def test_rule_arithmetic_beyond_int64_is_exact():
    assert answers("Num(4)\nBig(N * 4611686018427387904) <- Num(N)", "Big(X)") == [(4 * 2 ** 62,)]
    assert answers("Num(9223372036854775807)\nNext(N + 1) <- Num(N)", "Next(X)") == [(2 ** 63,)]
    assert answers("Num(-9223372036854775808)\nPrev(N - 1) <- Num(N)\nNg(-N) <- Num(N)", "Prev(X)") == [
        (-2 ** 63 - 1,)]
    assert answers("Num(99999999999999999999)\nM(N % 7, N * N) <- Num(N)", "M(A, B)") == [
        (99999999999999999999 % 7, 99999999999999999999 ** 2)]


def test_comparisons_on_big_numbers_are_exact():
    src = "Num(9007199254740993)\nNum(9007199254740992)\nOdd(N) <- Num(N), N % 2 == 1\nAbove(N) <- Num(N), N > 9007199254740992"
    assert answers(src, "Odd(X)") == [(9007199254740993,)]
    assert answers(src, "Above(X)") == [(9007199254740993,)]
