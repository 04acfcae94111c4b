"""Benchmark: the TensorLogic logic engine against clingo (its grounder evaluates stratified Datalog
semi-naively) on the workloads of issue 27, answers checked equal.

    pip install clingo                     # bench-only requirement (not the package's)
    python bench/logic_clingo.py           # every workload, one table (several minutes on 2 cores)
    python bench/logic_clingo.py --only andersen-3k,negation-100k

Each (workload, engine) runs in a fresh subprocess (its peak RSS is its own). The input is generated
(NumPy, fixed seeds) and written to disk first: an .npy per relation for TL (read with
`load_relation`), a facts file for clingo (read with `Control.load`). `load s` is reading the facts,
`eval s` evaluating (TL: `infer()`, or the query for `query` rows; clingo: `ground` + `solve`).
Answers are compared by tuple count and an order-free checksum per derived relation.
Workloads without a clingo column were not run on clingo (see --help of each row's note).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 300

CLOSURE_TL = ["Path(X, Y) <- Edge(X, Y)", "Path(X, Z) <- Path(X, Y), Edge(Y, Z)"]
CLOSURE_ASP = "path(X,Y) :- edge(X,Y). path(X,Z) :- path(X,Y), edge(Y,Z)."

# name -> (generator, generator args, TL rules, clingo rules, derived relations to check, clingo?)
WORKLOADS = {
    "tc-random-1k": ("random", (1000, 1000), CLOSURE_TL, CLOSURE_ASP, ["Path"], True),
    "tc-random-10k": ("random", (10000, 10000), CLOSURE_TL, CLOSURE_ASP, ["Path"], True),
    "tc-random-50k": ("random", (50000, 50000), CLOSURE_TL, CLOSURE_ASP, ["Path"], True),
    "tc-block-2k": ("blocks", (20, 100, 0.1), CLOSURE_TL, CLOSURE_ASP, ["Path"], True),
    "tc-chain-2k": ("chain", (2000,), CLOSURE_TL, CLOSURE_ASP, ["Path"], True),
    "tc-dense-2k": ("dense", (2000, 0.05), CLOSURE_TL, CLOSURE_ASP, ["Path"], False),
    "same-generation": ("tree", (3000,),
                        ["SG(X, Y) <- Edge(P, X), Edge(P, Y), X != Y",
                         "SG(X, Y) <- Edge(A, X), SG(A, B), Edge(B, Y)"],
                        "sg(X,Y) :- edge(P,X), edge(P,Y), X != Y. sg(X,Y) :- edge(A,X), sg(A,B), edge(B,Y).",
                        ["SG"], True),
    "negation-100k": ("roots", (100000, 100000),
                      ["Node(X) <- Edge(X, _)", "Node(Y) <- Edge(_, Y)", "Reach(X) <- Root(X)",
                       "Reach(Y) <- Reach(X), Edge(X, Y)", "Unreached(X) <- Node(X), not Reach(X)"],
                      "node(X) :- edge(X,_). node(Y) :- edge(_,Y). reach(X) :- root(X). "
                      "reach(Y) :- reach(X), edge(X,Y). unreached(X) :- node(X), not reach(X).",
                      ["Reach", "Unreached"], True),
    "triangles": ("random", (2000, 20000), ["Tri(X, Y, Z) <- Edge(X, Y), Edge(Y, Z), Edge(Z, X)"],
                  "tri(X,Y,Z) :- edge(X,Y), edge(Y,Z), edge(Z,X).", ["Tri"], True),
    "andersen-3k": ("andersen", (3000,),
                    ["Pt(P, O) <- Addr(P, O)", "Pt(P, O) <- Copy(P, Q), Pt(Q, O)",
                     "Pt(P, O) <- Load(P, Q), Pt(Q, R), Pt(R, O)",
                     "Pt(R, O) <- Store(P, Q), Pt(P, R), Pt(Q, O)"],
                    "pt(P,O) :- addr(P,O). pt(P,O) :- copy(P,Q), pt(Q,O). "
                    "pt(P,O) :- load(P,Q), pt(Q,R), pt(R,O). pt(R,O) :- store(P,Q), pt(P,R), pt(Q,O).",
                    ["Pt"], True),
    "query-50k": ("random", (50000, 50000), CLOSURE_TL, None, ["Path"], False),
}


def generate(kind: str, args: tuple) -> dict:
    import numpy as np
    rng = np.random.default_rng(0)

    def pairs(src, dst):
        return np.unique(np.stack([src, dst], 1).astype(np.int64), axis=0)
    if kind == "random":
        nodes, edges = args
        return {"Edge": pairs(rng.integers(0, nodes, edges), rng.integers(0, nodes, edges))}
    if kind == "chain":
        (nodes,) = args
        return {"Edge": pairs(np.arange(nodes - 1), np.arange(1, nodes))}
    if kind == "dense":
        nodes, density = args
        src, dst = np.nonzero(rng.random((nodes, nodes)) < density)
        return {"Edge": pairs(src, dst)}
    if kind == "blocks":  # dense blocks, each linked to the next by one edge
        blocks, size, density = args
        parts = []
        for b in range(blocks):
            src, dst = np.nonzero(rng.random((size, size)) < density)
            parts.append(np.stack([src + b * size, dst + b * size], 1))
            if b + 1 < blocks:
                parts.append(np.array([[b * size, (b + 1) * size]]))
        edges = np.concatenate(parts)
        return {"Edge": pairs(edges[:, 0], edges[:, 1])}
    if kind == "tree":  # a random tree: each node's parent is an earlier node
        (nodes,) = args
        children = np.arange(1, nodes)
        return {"Edge": pairs(rng.integers(0, children), children)}
    if kind == "roots":
        nodes, edges = args
        return {"Edge": pairs(rng.integers(0, nodes, edges), rng.integers(0, nodes, edges)),
                "Root": np.unique(rng.integers(0, nodes, 100)).reshape(-1, 1).astype(np.int64)}
    if kind == "andersen":  # n variables (address-taken ones are the objects); p = &q, p = q, p = *q, *p = q
        (n,) = args  # (at 0.4 n copies or more, almost every variable points to almost every other)
        def rel(count):
            return pairs(rng.integers(0, n, count), rng.integers(0, n, count))
        return {"Addr": rel(n), "Copy": rel(3 * n // 10), "Load": rel(3 * n // 40), "Store": rel(3 * n // 40)}
    raise ValueError(kind)


def checksum(rows) -> tuple:
    """(count, order-free checksum) of integer tuples given as an (n, k) int64 array."""
    import numpy as np
    rows = np.asarray(rows, np.int64).reshape(len(rows), -1)
    if not len(rows):
        return 0, 0
    mixed = np.zeros(len(rows), np.uint64)
    for i in range(rows.shape[1]):
        mixed = mixed * np.uint64(1000003) + rows[:, i].astype(np.uint64) * np.uint64(2654435761 + i)
    return int(len(rows)), int(np.bitwise_xor.reduce(mixed))


def run_tl(name: str, data_dir: str, mode: str) -> dict:
    sys.path.insert(0, os.path.join(REPO, "python"))
    import numpy as np
    from tensorlogic.logic import LogicEngine, parse_atom, parse_rule
    try:  # (the native set operations TL programs hand the engine: builtins/logic.py host_set_ops)
        from tensorlogic import _core as set_ops
    except ImportError:
        set_ops = None
    kind, args, rules, _, heads, _ = WORKLOADS[name]
    engine = LogicEngine(demand=(mode == "query"), set_ops=set_ops)
    files = sorted(f for f in os.listdir(data_dir) if f.endswith(".npy"))
    base_rss = rss_mib()
    started = time.perf_counter()
    for f in files:
        relation = f[:-4]
        engine.declare_relation(relation, ["node"] * np.load(os.path.join(data_dir, f), mmap_mode="r").shape[1])
        engine.load_relation(relation, os.path.join(data_dir, f))
    loaded = time.perf_counter()
    for rule in rules:
        engine.add_rule(parse_rule(rule))
    out = {}
    if mode == "query":
        result = engine.query(parse_atom("Path(0, Y)"))
        done = time.perf_counter()
        out["answers"] = len(result.rows)
        out["demand"] = engine.last_query_demand
    else:
        engine.infer()
        done = time.perf_counter()
        for head in heads:
            table = engine._tables[head]
            domains = [engine.domains[t] for t in engine._types_of(head)]
            columns = [np.array(d.values, np.int64)[c] for d, c in zip(domains, table.columns())]
            out[head.lower()] = checksum(np.stack(columns, 1) if columns else np.zeros((len(table), 0)))
        out["modes"] = sorted({s.mode for s in engine.last_stats})
    out.update(load_s=loaded - started, eval_s=done - loaded, peak_mib=rss_mib(), base_mib=base_rss)
    return out


def run_clingo(name: str, data_dir: str) -> dict:
    import clingo
    import numpy as np
    _, _, _, program, heads, _ = WORKLOADS[name]
    control = clingo.Control(["--warn=none"])
    base_rss = rss_mib()
    started = time.perf_counter()
    control.load(os.path.join(data_dir, "facts.lp"))
    loaded = time.perf_counter()
    control.add("base", [], program)
    control.ground([("base", [])])
    wanted = {h.lower(): [] for h in heads}
    with control.solve(yield_=True) as handle:
        model = next(iter(handle))
        done = time.perf_counter()
        for symbol in model.symbols(atoms=True):
            if symbol.name in wanted:
                wanted[symbol.name].append([a.number for a in symbol.arguments])
    out = {h: checksum(np.array(rows, np.int64)) for h, rows in wanted.items()}
    out.update(load_s=loaded - started, eval_s=done - loaded, peak_mib=rss_mib(), base_mib=base_rss)
    return out


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def prepare(name: str, root: str) -> str:
    import numpy as np
    kind, args = WORKLOADS[name][:2]
    directory = os.path.join(root, name)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "facts.lp"), "w") as facts:
        for relation, rows in generate(kind, args).items():
            np.save(os.path.join(directory, relation + ".npy"), rows)
            lower = relation.lower()
            facts.write("".join(f"{lower}({','.join(map(str, r))}).\n" for r in rows.tolist()))
    return directory


def child(engine: str, name: str, directory: str, mode: str) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--child", engine, name, directory, mode]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout {TIMEOUT_S}s"}
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1][:120]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="comma-separated workload names")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        engine, name, directory, mode = options.child
        result = run_tl(name, directory, mode) if engine == "tl" else run_clingo(name, directory)
        print(json.dumps(result))
        return
    names = options.only.split(",") if options.only else list(WORKLOADS)
    try:
        import clingo
        clingo_version = clingo.__version__
    except ImportError:
        clingo_version = None
    print(f"clingo {clingo_version or 'not installed'}; {os.cpu_count()} cores; "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| workload | TL load s | TL eval s | TL peak MiB | clingo load s | clingo eval s | "
          "clingo peak MiB | TL/clingo eval | TL/clingo load+eval | answers |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ratios = []
    with tempfile.TemporaryDirectory() as root:
        for name in names:
            directory = prepare(name, root)
            if name == "query-50k":
                full = child("tl", name, directory, "full")
                demand = child("tl", name, directory, "query")
                print(f"| {name}: Path(0, Y)? demand-driven | {demand.get('load_s', 0):.2f} | "
                      f"{demand.get('eval_s', float('nan')):.3f} | {demand.get('peak_mib', 0):.0f} | | | | "
                      f"full closure {full.get('eval_s', float('nan')):.2f} s: "
                      f"{full.get('eval_s', 0) / max(demand.get('eval_s', 1), 1e-9):.0f}x faster | "
                      f" | {demand.get('answers', demand.get('error'))} |")
                continue
            tl = child("tl", name, directory, "full")
            use_clingo = WORKLOADS[name][5] and clingo_version
            asp = child("clingo", name, directory, "full") if use_clingo else {}
            heads = [h.lower() for h in WORKLOADS[name][4]]
            if "error" in tl or "error" in asp:
                answers = f"TL: {tl.get('error', 'ok')}; clingo: {asp.get('error', 'ok')}"
            elif asp:
                answers = "equal" if all(tl[h] == asp[h] for h in heads) else "DIFFER"
                answers += " (" + ", ".join(f"{tl[h][0]:,}" for h in heads) + ")"
            else:
                answers = ", ".join(f"{tl[h][0]:,}" for h in heads) + " (clingo not run)"
            ratio = both = ""
            if asp and "error" not in asp and "error" not in tl:
                r = tl["eval_s"] / asp["eval_s"]
                ratios.append(r)
                ratio = f"{r:.2f}"
                both = f"{(tl['load_s'] + tl['eval_s']) / (asp['load_s'] + asp['eval_s']):.2f}"
            fmt = lambda d, k, f: (f % d[k]) if k in d else "—"
            print(f"| {name} ({', '.join(tl.get('modes', []))}) | {fmt(tl, 'load_s', '%.2f')} | "
                  f"{fmt(tl, 'eval_s', '%.2f')} | {fmt(tl, 'peak_mib', '%.0f')} | {fmt(asp, 'load_s', '%.2f')} | "
                  f"{fmt(asp, 'eval_s', '%.2f')} | {fmt(asp, 'peak_mib', '%.0f')} | {ratio} | {both} | {answers} |",
                  flush=True)
    if ratios:
        geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"\ngeometric mean of TL/clingo evaluation time over {len(ratios)} workloads: {geomean:.2f}")


if __name__ == "__main__":
    main()
