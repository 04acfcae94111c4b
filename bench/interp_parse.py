"""Parse time of a generated 2,000-line TL program (cold: includes building the LALR parser;
warm: the parser already built). Run: PYTHONPATH=python python bench/interp_parse.py"""
from __future__ import annotations

import time


def make_program(lines: int = 2000) -> str:
    out = []
    i = 0
    while len(out) + 13 <= lines:
        out += [
            f"struct Layer{i} {{ w: float32[?, ?], b: float32[?] }}",
            f"impl Layer{i} {{",
            f"    fn forward(self, x: float32[?, ?]) -> float32[?, ?] {{ linear(x, self.w, self.b) }}",
            "}",
            f"fn block{i}(x: float32[?, ?], n: int) -> float32[?, ?] {{",
            "    let h = rms_norm(x, ones([shape(x)[1]]))",
            "    let total = 0",
            "    for j in range(n) {",
            "        if j % 2 == 0 { total = total + j } else if j > 10 { break } else { continue }",
            "    }",
            f"    let s = \"block {i}: {{}}\" + str(total)  // a comment",
            "    h[0:2, :] * 2.0 + x @ transpose(x) ⊙ 0.5 - h ** 2",
            "}",
        ]
        i += 1
    return "\n".join(out) + "\n"


def main() -> None:
    source = make_program()
    n_lines = source.count("\n")
    start = time.perf_counter()
    from tensorlogic.lang import parser
    parser._PARSER = None
    program = parser.parse(source, "bench.tl")
    cold = time.perf_counter() - start
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        parser.parse(source, "bench.tl")
        runs.append(time.perf_counter() - start)
    warm = min(runs)
    print(f"{n_lines} lines, {len(program.items)} top-level items")
    print(f"cold parse (incl. parser construction/cache load): {cold * 1e3:.1f} ms")
    print(f"warm parse: {warm * 1e3:.1f} ms  ({warm / n_lines * 1e6:.1f} us/line)")


if __name__ == "__main__":
    main()
