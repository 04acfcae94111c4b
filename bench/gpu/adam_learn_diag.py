"""Where a `learn` block's Adam step loses time against the compiled step: per-step wall time and
the runtime's counters (device allocations, pool misses, evictions, frees, command buffers) of the
eager step, the eager step with a synchronize() after each step (host and device serialized), and
the compiled step, each under the queue and pool settings given.

    python bench/gpu/adam_learn_diag.py [--shape 4096,8192,4096,1024] [--steps 50] [--env "A=1 B=2" ...]

Each measurement is its own process: a warm-up run, then the benchmark's program (adam_mlp_cuda.py,
which times its steps after 5 warm-up steps) with 5 and with S timed steps; ms/step is the longer
run's own figure, the counters are (long - short) / (S - 5) from the runtime's memory_stats(). The backend is TL_BACKEND's (set
TL_BACKEND=cuda on a GPU machine).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from adam_mlp_cuda import program  # noqa: E402  (the benchmark's own program)

sys.path.insert(0, os.path.join(REPO, "bench"))
from learning_mlp import COMPILED, EAGER  # noqa: E402

SYNCED = (EAGER[0], EAGER[1] + "\n        synchronize()")

RUNNER = """
import json, sys
if sys.argv[1]:
    sys.path.insert(0, sys.argv[1])
import tensorlogic
from tensorlogic import _core
short, long = sys.stdin.read().split("\\x00")
def timed(src):
    before = dict(_core.memory_stats())
    result = tensorlogic.run(src, filename="<diag>")
    if result.error is not None:
        raise SystemExit(result.error_text)
    ms = float(result.output.strip().splitlines()[-1])  # the program's own time of its timed steps
    after = dict(_core.memory_stats())
    return ms, {k: after[k] - before[k] for k in after if isinstance(after[k], (int, float)) and k in before}
timed(short)
ms_short, c_short = timed(short)
ms_long, c_long = timed(long)
print(json.dumps({"ms": ms_long, "counters": {k: c_long[k] - c_short.get(k, 0) for k in c_long}}))
"""

COUNTERS = ("allocations", "pool_misses", "evictions", "frees", "command_buffers_committed", "ops_encoded")


def package_dir() -> str:
    """This checkout's python/ dir when the native module was built in it (as bench/gpu/run_h100.sh
    builds), else "" (the installed package)."""
    here = os.path.join(REPO, "python")
    built = any(n.startswith("_core") for n in os.listdir(os.path.join(here, "tensorlogic")))
    return here if built else ""


def measure(shape, steps, variant, env_text):
    env = dict(os.environ)
    for item in env_text.split():
        k, _, v = item.partition("=")
        env[k] = v
    src = program(shape, 5, variant) + "\x00" + program(shape, steps, variant)
    proc = subprocess.run([sys.executable, "-c", RUNNER, package_dir()], input=src,
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(proc.stdout + proc.stderr)
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    per = {k: data["counters"].get(k, 0) / (steps - 5) for k in COUNTERS}
    return data["ms"], per


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="4096,8192,4096,1024", help="DIN,DH,DOUT,BATCH")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--env", action="append", default=None, help='settings of one row, e.g. "TL_MAX_MB_IN_FLIGHT=4096"')
    args = ap.parse_args()
    shape = tuple(int(v) for v in args.shape.split(","))
    envs = args.env or ["TL_NOTHING=1"]
    print(f"MLP {shape[0]}-{shape[1]}-{shape[2]}, batch {shape[3]}, Adam, {args.steps} steps, "
          f"backend {os.environ.get('TL_BACKEND', 'cpu')}")
    print("| step | settings | ms/step | " + " | ".join(f"{c}/step" for c in COUNTERS) + " |")
    print("|---|---|---|" + "---|" * len(COUNTERS))
    for env_text in envs:
        for name, variant in (("learn block", EAGER), ("learn block, synchronize() each step", SYNCED),
                              ("compiled step", COMPILED)):
            ms, per = measure(shape, args.steps, variant, env_text)
            print(f"| {name} | {env_text} | {ms:.2f} | " + " | ".join(f"{per[c]:.2f}" for c in COUNTERS) + " |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
