"""Benchmark: transitive closure (Ancestor) with the TensorLogic logic engine vs plain-Python Datalog.

    python bench/logic_closure.py            # all cases, one table (a few minutes on 2 cores)
    python bench/logic_closure.py --quick    # smaller cases, for a smoke run

Cases: random sparse directed graphs with n nodes and n edges (average out-degree 1, endpoints
uniform, seed 0) for n = 200 / 1,000 / 10,000 / 50,000, and a chain of 2,000 nodes (2,000 rounds).
`engine-dense` forces the dense tensor path (on the native runtime when it is built) for n <= 1,000.
Each (case, evaluator) runs in a fresh subprocess, so its peak memory (ru_maxrss) is its own;
`+MiB` is the growth of the peak over the process's size after the graph was generated.
The engine's closure is checked tuple for tuple against the baseline's.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE_TIMEOUT_S = 600

CASES = {  # name -> (kind, nodes)
    "random-200": ("random", 200),  # small enough that the engine's default is the dense path
    "random-1k": ("random", 1000),
    "random-10k": ("random", 10000),
    "random-50k": ("random", 50000),
    "chain-2k": ("chain", 2000),
}
QUICK_CASES = {"random-1k": ("random", 1000), "random-5k": ("random", 5000), "chain-500": ("chain", 500)}


def make_graph(kind: str, nodes: int) -> list[tuple[int, int]]:
    if kind == "chain":
        return [(i, i + 1) for i in range(nodes - 1)]
    import numpy as np
    rng = np.random.default_rng(0)
    src = rng.integers(0, nodes, nodes)
    dst = rng.integers(0, nodes, nodes)
    return sorted(set(zip(src.tolist(), dst.tolist())))


def baseline_closure(edges: list[tuple[int, int]]) -> set:
    """Plain-Python semi-naive evaluation of
         Ancestor(X, Y) <- Parent(X, Y);  Ancestor(X, Z) <- Ancestor(X, Y), Parent(Y, Z)
    with Parent indexed by its first argument (a dict of successor lists) and Ancestor a set."""
    children: dict[int, list[int]] = {}
    for x, y in edges:
        children.setdefault(x, []).append(y)
    ancestor = set(edges)
    delta = set(edges)
    while delta:
        derived = set()
        for x, y in delta:
            for z in children.get(y, ()):
                pair = (x, z)
                if pair not in ancestor:
                    derived.add(pair)
        ancestor |= derived
        delta = derived
    return ancestor


def engine_closure(edges, dense: bool):
    from tensorlogic.logic import LogicEngine, parse_rule
    limit = 1 << 40 if dense else 0
    engine = LogicEngine(dense_limit=limit)
    engine.add_facts("Parent", edges)
    engine.add_rule(parse_rule("Ancestor(X, Y) <- Parent(X, Y)"))
    engine.add_rule(parse_rule("Ancestor(X, Z) <- Ancestor(X, Y), Parent(Y, Z)"))
    engine.infer()
    return engine


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def run_one(case: str, evaluator: str, kind: str, nodes: int, check: bool) -> dict:
    import numpy as np
    if evaluator != "baseline":
        sys.path.insert(0, os.path.join(REPO, "python"))
        import tensorlogic.logic  # noqa: F401  (import time is not part of the measurement)
    edges = make_graph(kind, nodes)
    start_rss = rss_mib()
    started = time.perf_counter()
    info: dict = {"case": case, "evaluator": evaluator, "nodes": nodes, "edges": len(edges)}
    if evaluator == "baseline":
        result = baseline_closure(edges)
        info["closure"] = len(result)
        info["rounds"] = None
    else:
        engine = engine_closure(edges, dense=(evaluator == "engine-dense"))
        info["seconds"] = time.perf_counter() - started
        table = engine._tables["Ancestor"]
        info["closure"] = len(table)
        stats = [s for s in engine.last_stats if "Ancestor" in s.relations][0]
        info["rounds"] = stats.iterations
        info["mode"] = f"{stats.mode} on {stats.backend}"
        info["peak_mib"] = rss_mib()  # before the check below builds Python sets
        if check:
            values = np.array(engine.domains["entity"].values, dtype=np.int64)
            x, y = table.columns()
            pairs = set(zip(values[x].tolist(), values[y].tolist()))
            info["matches_baseline"] = pairs == baseline_closure(edges)
    info.setdefault("seconds", time.perf_counter() - started)
    info.setdefault("peak_mib", rss_mib())
    info["growth_mib"] = info["peak_mib"] - start_rss
    return info


def spawn(case: str, evaluator: str, kind: str, nodes: int, check: bool) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--one", case, evaluator, kind, str(nodes)]
    if check:
        command.append("--check")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=CASE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"case": case, "evaluator": evaluator, "error": f"timeout after {CASE_TIMEOUT_S} s"}
    if done.returncode != 0:
        return {"case": case, "evaluator": evaluator, "error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--one", nargs=4, metavar=("CASE", "EVALUATOR", "KIND", "NODES"))
    parser.add_argument("--check", action="store_true", help="(with --one) compare with the baseline")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    if args.one:
        case, evaluator, kind, nodes = args.one
        print(json.dumps(run_one(case, evaluator, kind, int(nodes), args.check)))
        return
    cases = QUICK_CASES if args.quick else CASES
    rows = []
    for case, (kind, nodes) in cases.items():
        evaluators = ["engine-sparse", "baseline"]  # engine-dense: the tensor runtime's path
        if nodes <= 1000:
            evaluators.insert(1, "engine-dense")
        for evaluator in evaluators:
            row = spawn(case, evaluator, kind, nodes, check=(evaluator == "engine-sparse"))
            rows.append(row)
            print(f"  {case:11s} {evaluator:13s} done", file=sys.stderr, flush=True)
    print_table(rows)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)


def print_table(rows: list[dict]) -> None:
    header = ("case", "evaluator", "runs", "nodes", "edges", "closure", "rounds", "seconds", "peak MiB", "+MiB", "check")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        if "error" in r:
            print(f"| {r['case']} | {r['evaluator']} | {r['error']} |")
            continue
        check = {True: "= baseline", False: "MISMATCH", None: ""}[r.get("matches_baseline")]
        runs = r.get("mode", "Python sets")
        print(f"| {r['case']} | {r['evaluator']} | {runs} | {r['nodes']:,} | {r['edges']:,} | {r['closure']:,} | "
              f"{r['rounds'] if r['rounds'] is not None else ''} | {r['seconds']:.2f} | "
              f"{r['peak_mib']:.0f} | {r['growth_mib']:.0f} | {check} |")


if __name__ == "__main__":
    main()
