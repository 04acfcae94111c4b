"""Interpreter overhead: ns per simple statement, per builtin call and per user-function call,
measured as the difference between a loop with the statement and the same loop without it.
Run: PYTHONPATH=python python bench/interp_overhead.py"""
from __future__ import annotations

import io
import time

from tensorlogic.interp.interpreter import Interpreter

N = 200_000


def timed(body: str, setup: str = "") -> float:
    src = f"fn f(a) {{ a }}\nmain {{\n {setup}\n let i = 0\n let x = 1.5\n let t = ones([4])\n" \
          f" while i < {N} {{\n  i = i + 1\n  {body}\n }}\n}}\n"
    best = float("inf")
    for _ in range(5):
        interp = Interpreter(out=io.StringIO())
        loaded = interp.load_source(src, "bench.tl")
        start = time.perf_counter()
        interp.run_main(loaded)
        best = min(best, time.perf_counter() - start)
        interp.close()
    return best


def main() -> None:
    base = timed("")
    cases = {
        "let y = x (simple statement)": "let y = x",
        "y = x + 1.0 (assignment with arithmetic)": "y = x + 1.0",
        "let y = abs(x) (builtin call, scalar)": "let y = abs(x)",
        "let y = f(x) (user function call)": "let y = f(x)",
        "let y = len(t) (builtin on a tensor)": "let y = len(t)",
    }
    print(f"empty loop iteration (while test + i = i + 1): {base / N * 1e9:.0f} ns")
    for label, body in cases.items():
        t = timed(body)
        print(f"{label}: {(t - base) / N * 1e9:.0f} ns")


if __name__ == "__main__":
    main()
