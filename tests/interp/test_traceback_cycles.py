"""Issue 14 (should fix): a mutual-recursion overflow printed a 907-line TL traceback; repeating
cycles of frames, not only single frames, are collapsed to three copies and a count."""
from __future__ import annotations

import tensorlogic
from tensorlogic.lang.errors import collapse_cycles


def test_mutual_recursion_trace_is_a_few_lines():
    src = ("fn f(n: int) -> int { g(n + 1) }\nfn g(n: int) -> int { h(n + 1) }\n"
           "fn h(n: int) -> int { f(n + 1) }\nmain { print(f(0)) }\n")
    r = tensorlogic.run(src, filename="mut.tl")
    text = r.error.format()
    assert len(text.splitlines()) < 25, text
    assert "[previous 3 lines repeated" in text and "more times]" in text


def test_collapse_cycles_keeps_everything_else():
    a, b, c, x = "  a", "  b", "  c", "  x"
    assert collapse_cycles([x, a, a, a]) == [x, a, a, a]
    assert collapse_cycles([x] + [a] * 10 + [x]) == [x, a, a, a, "  [previous line repeated 7 more times]", x]
    assert collapse_cycles([x] + [a, b] * 6 + [c]) == (
        [x] + [a, b] * 3 + ["  [previous 2 lines repeated 3 more times]", c])
    assert collapse_cycles([a, b, c] * 3) == [a, b, c] * 3
