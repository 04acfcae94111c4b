"""Nightly-sized run of the issue-5 failure scenarios (tests/e2e/test_failures.py), triggered by hand:

    PYTHONPATH=python python bench/failures_nightly.py --repeat 20 [--configs stressed] [--only 1_,5_]

Runs every scenario `--repeat` times in each chosen configuration (default: the stressed one,
TL_DEBUG_DELAY_US=200 + TL_DEBUG_POISON=1) and prints one line per run and a pass/fail count per
scenario; exits 1 if any run failed. Scenario 3 runs 5 generations in each of 2 processes per repetition.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))

import test_failures as failures  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--configs", default="stressed", help="comma-separated: normal,stressed,no_cache")
    ap.add_argument("--only", default="", help="comma-separated scenario name prefixes")
    args = ap.parse_args()
    configs = [c for c in args.configs.split(",") if c]
    names = [n for n in failures.SCENARIOS if not args.only or any(n.startswith(p) for p in args.only.split(","))]
    counts: dict[tuple[str, str], list[int]] = {}
    for config in configs:
        for name in names:
            ok = counts.setdefault((name, config), [0, 0])
            for i in range(args.repeat):
                t0 = time.monotonic()
                try:
                    figures = failures.SCENARIOS[name](config)
                    ok[0] += 1
                    status = "pass"
                except AssertionError as e:  # a broken rule: keep going, count it
                    ok[1] += 1
                    figures, status = str(e).splitlines()[0][:200], "FAIL"
                if name == "3_determinism" and status == "pass":
                    figures = {k: v for k, v in figures.items() if k != "signature"}
                print(f"{name:28s} {config:9s} run {i + 1:2d}: {status} {time.monotonic() - t0:5.1f}s {figures}",
                      flush=True)
    print("\nscenario                     config    passed failed")
    for (name, config), (passed, failed) in counts.items():
        print(f"{name:28s} {config:9s} {passed:6d} {failed:6d}")
    return 1 if any(f for _, f in counts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
