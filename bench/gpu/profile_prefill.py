"""Where a prompt's prefill spends its time on the CUDA backend: wall time per prefill against the
kernels' summed time (Nsight Compute, clocks as they run) and the host's share (cProfile of one
prefill: the interpreter and op encoding). The difference between the wall time and the kernel
time is the GPU waiting for the host (or for its own launches).

    python3 bench/gpu/profile_prefill.py MODEL.gguf [--tokens 512] [--host]   # wall times; cProfile
    python3 bench/gpu/profile_prefill.py MODEL.gguf --ncu                      # kernel time by name
    python3 bench/gpu/profile_prefill.py MODEL.gguf --ncu --tokens 128 --decode 16
        # the same for a 128-token prefill and 16 greedy decode steps (the per-step kernels: those
        # called 16x per layer, or 16x; prefill kernels are called once per layer)

--ncu runs this script again under ncu with --once (one prefill, no warm-up: cuBLAS's first-call
set-up kernels are few and short) and sums gpu__time_duration per kernel name.
"""
import argparse
import collections
import contextlib
import csv
import io
import pstats
import subprocess
import sys
import time

from ncu_matvec import NCU, UNIT  # this folder is on sys.path when a script of it runs
from profile_decode_host import interpreter_thread_profile


def prefill_runs(model: str, tokens: int, runs: int, host: bool, backend: str = "cuda", decode: int = 0) -> None:
    from tensorlogic import _core
    from tensorlogic.apps.llm_session import LlmSession

    with LlmSession(model, backend=backend, context=tokens + 8) as s:
        ids = [3 + (i * 7919) % (s.config.vocab_size - 3) for i in range(tokens)]
        walls = []
        prof = None
        for i in range(runs):
            s.cached_ids = []
            profiled = host and i == runs - 1
            with interpreter_thread_profile() if profiled else contextlib.nullcontext() as p:
                cpu = time.process_time()
                t = time.perf_counter()
                r = s.generate(ids, 1 + decode, temperature=0.0, stop_at_eog=False)
                walls.append(time.perf_counter() - t)
                cpu = time.process_time() - cpu
            if profiled:
                prof = p
            print(f"prefill {i}: {1e3 * r.prompt_seconds:.2f} ms ({tokens / r.prompt_seconds:,.0f} tok/s), "
                  f"call {1e3 * walls[-1]:.2f} ms, process CPU {1e3 * cpu:.2f} ms", flush=True)
        if host:
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
            print(out.getvalue()[-6000:])
    _core.shutdown()


def ncu_summary(model: str, tokens: int, decode: int = 0) -> None:
    cmd = [NCU, "--clock-control", "none", "--csv", "--metrics", "gpu__time_duration.sum",
           sys.executable, __file__, model, "--tokens", str(tokens), "--once", "--decode", str(decode)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=500)
    rows = list(csv.DictReader(io.StringIO("\n".join(l for l in p.stdout.splitlines() if l.startswith('"')))))
    if not rows:
        sys.exit(f"ncu gave no rows\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}")
    by_name: dict = collections.defaultdict(lambda: [0, 0.0])
    for r in rows:
        name = r["Kernel Name"].replace("(anonymous namespace)::", "").split("(")[0][:90]
        us = float(r["Metric Value"].replace(",", "")) * UNIT[r["Metric Unit"]]
        by_name[name][0] += 1
        by_name[name][1] += us
    total = sum(v[1] for v in by_name.values())
    what = f"one {tokens}-token prefill" + (f" and {decode} decode steps" if decode else "")
    print(f"{len(rows)} kernels, {total / 1e3:.2f} ms of kernel time (load and {what})")
    for name, (n, us) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:30]:
        print(f"  {us / 1e3:8.3f} ms {100 * us / total:5.1f}% {n:5d}x {us / n:7.2f} us  {name}")
    for line in p.stdout.splitlines():
        if line.startswith("prefill"):
            print("  (under ncu)", line)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--host", action="store_true", help="cProfile the last prefill")
    ap.add_argument("--ncu", action="store_true")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--decode", type=int, default=0, help="greedy decode steps after the prefill")
    ap.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.ncu:
        ncu_summary(a.model, a.tokens, a.decode)
    else:
        prefill_runs(a.model, a.tokens, 1 if a.once else a.runs, a.host, a.backend, a.decode)


if __name__ == "__main__":
    main()
