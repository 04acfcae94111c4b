"""Benchmark: one training step of an MLP (784-512-10, batch 128, ReLU, softmax cross-entropy, Adam)
written in TL (a `learn` block) against the same step in PyTorch eager, on the CPU, in one run.

    python bench/learning_mlp.py [--steps 50] [--threads N] [--baseline DIR]

TL rows: the learn block run eagerly (the fused Adam update: one kernel per parameter), and the same
step as a compiled function (`@compile fn` calling `backward`: recorded once, replayed natively).
`--baseline DIR` adds the eager learn block run by another TensorLogic checkout's built package
(DIR holds its `tensorlogic/`, e.g. main's code before these changes) in the same run.
TL's time per step is (time of a run with 10 + S steps - time of a run with 10 steps) / S, each run
in a fresh process, so parsing, start-up and warm-up cancel; it includes the interpreter, the tape,
backward and the optimizer. PyTorch (if importable; put it on PYTHONPATH) runs the same shapes and update rule with
the same thread count; the same step written by hand in NumPy is always measured as a second peer.
Prints one table: ms/step, steps/s, and TL's speed as a fraction of each peer's.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))

PROGRAM = """
seed(0)
let X = randn([128, 784])
let labels = argmax(randn([128, 10]), 1)
let Y = where(unsqueeze(labels, 1) == arange(0, 10), 1.0, 0.0)
let W1 = learnable(randn([512, 784]) * 0.035)
let b1 = learnable(zeros([512]))
let W2 = learnable(randn([10, 512]) * 0.044)
let b2 = learnable(zeros([10]))
STEP_FN
learn {
    optimizer: adam(lr = 0.001)
    epochs: STEPS
    for epoch in range(epochs) {
        STEP_CALL
    }
}
synchronize()
"""
EAGER = ("", """let logits = linear(relu(linear(X, W1, b1)), W2, b2)
        backward(-mean(sum(Y * log_softmax(logits, 1), 1)))""")
COMPILED = ("""@compile
fn train_step(x, y) {
    let logits = linear(relu(linear(x, W1, b1)), W2, b2)
    let loss = -mean(sum(y * log_softmax(logits, 1), 1))
    backward(loss)
    loss
}""", "train_step(X, Y)")

RUNNER = """
import sys, time
sys.path.insert(0, sys.argv[1])
import tensorlogic
src = sys.stdin.read()
start = time.perf_counter()
result = tensorlogic.run(src, filename="<bench>")
if result.error is not None:
    raise SystemExit(result.error_text)
print(time.perf_counter() - start)
"""


def tl_seconds(steps: int, variant: tuple[str, str], package_dir: str) -> float:
    """Seconds of one run of `steps` steps in a fresh process importing tensorlogic from package_dir."""
    src = PROGRAM.replace("STEPS", str(steps)).replace("STEP_FN", variant[0]).replace("STEP_CALL", variant[1])
    proc = subprocess.run([sys.executable, "-c", RUNNER, package_dir], input=src, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stdout + proc.stderr)
    return float(proc.stdout.strip().splitlines()[-1])


def tl_ms(steps: int, variant: tuple[str, str], package_dir: str) -> float:
    base = min(tl_seconds(10, variant, package_dir) for _ in range(2))
    full = min(tl_seconds(10 + steps, variant, package_dir) for _ in range(2))
    return (full - base) / steps * 1000


def torch_ms(steps: int, threads: int) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 784, generator=g)
    y = torch.randint(0, 10, (128,), generator=g)
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.Adam(model.parameters(), lr=0.001)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    for _ in range(10):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * 1000


def numpy_ms(steps: int) -> float:
    """The same step written by hand in NumPy float32 (forward, backward, Adam): a peer that is always there."""
    import numpy as np
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 784), dtype=np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 128)]
    params = [rng.standard_normal((512, 784), dtype=np.float32) * 0.035, np.zeros(512, np.float32),
              rng.standard_normal((10, 512), dtype=np.float32) * 0.044, np.zeros(10, np.float32)]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    t = [0]

    def step():
        w1, b1, w2, b2 = params
        h_pre = x @ w1.T + b1
        h = np.maximum(h_pre, 0)
        logits = h @ w2.T + b2
        z = logits - logits.max(1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
        g_logits = (p - y) / 128
        g_h = (g_logits @ w2) * (h_pre > 0)
        grads = [g_h.T @ x, g_h.sum(0), g_logits.T @ h, g_logits.sum(0)]
        t[0] += 1
        for i, g in enumerate(grads):
            m[i] = 0.9 * m[i] + 0.1 * g
            v[i] = 0.999 * v[i] + 0.001 * g * g
            params[i] -= 0.001 * (m[i] / (1 - 0.9 ** t[0])) / (np.sqrt(v[i] / (1 - 0.999 ** t[0])) + 1e-8)
    for _ in range(5):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--baseline", default=None,
                    help="python/ dir of another built TensorLogic checkout, timed as 'TL before'")
    args = ap.parse_args()
    os.environ["TL_THREADS"] = str(args.threads)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # NumPy's BLAS: the same count
        os.environ[var] = str(args.threads)
    here = os.path.join(REPO, "python")
    tl_seconds(2, EAGER, here)  # warms the file cache
    rows = []
    if args.baseline:
        rows.append(("TL before (eager)", tl_ms(args.steps, EAGER, os.path.abspath(args.baseline))))
    rows.append(("TL learn block", tl_ms(args.steps, EAGER, here)))
    rows.append(("TL compiled step", tl_ms(args.steps, COMPILED, here)))
    pt = torch_ms(args.steps, args.threads)
    npy = numpy_ms(args.steps)
    print(f"MLP 784-512-10, batch 128, Adam, CPU, {args.threads} threads, {args.steps} timed steps")
    print(f"| {'':22s} | {'ms/step':>8s} | {'steps/s':>8s} | {'vs NumPy':>8s} | {'vs PyTorch':>10s} |")
    print(f"|{'-' * 24}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 12}|")

    def row(name, ms):
        vs_pt = f"{pt / ms:10.2f}" if pt is not None else f"{'-':>10s}"
        print(f"| {name:22s} | {ms:8.2f} | {1000 / ms:8.1f} | {npy / ms:8.2f} | {vs_pt} |")
    for name, ms in rows:
        row(name, ms)
    row("NumPy by hand", npy)
    if pt is None:
        print("PyTorch: not importable (put it on PYTHONPATH to compare)")
    else:
        row("PyTorch eager", pt)
    print("(vs X: speed as a fraction of X's; above 1 is faster)")


if __name__ == "__main__":
    main()
