"""Benchmark: one training step of an MLP (784-512-10, batch 128, ReLU, softmax cross-entropy, Adam)
written in TL (a `learn` block) against the same step in PyTorch eager, on the CPU, in one run.

    python bench/learning_mlp.py [--steps 50] [--threads N]

TL's time per step is (time of a run with 10 + S steps - time of a run with 10 steps) / S, so
parsing, start-up and warm-up cancel; it includes the interpreter, the tape, backward and the
optimizer. PyTorch (if importable; put it on PYTHONPATH) runs the same shapes and update rule with
the same thread count; the same step written by hand in NumPy is always measured as a second peer.
Prints one table: ms/step, steps/s, and TL's speed as a fraction of each peer's.
"""
from __future__ import annotations

import argparse
import os
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
learn {
    optimizer: adam(lr = 0.001)
    epochs: STEPS
    for epoch in range(epochs) {
        let logits = linear(relu(linear(X, W1, b1)), W2, b2)
        backward(-mean(sum(Y * log_softmax(logits, 1), 1)))
    }
}
synchronize()
"""


def tl_seconds(steps: int) -> float:
    import tensorlogic
    start = time.perf_counter()
    result = tensorlogic.run(PROGRAM.replace("STEPS", str(steps)), filename="<bench>")
    if result.error is not None:
        raise SystemExit(result.error_text)
    return time.perf_counter() - start


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
    args = ap.parse_args()
    os.environ.setdefault("TL_THREADS", str(args.threads))
    tl_seconds(2)  # parser tables, runtime start-up
    base = min(tl_seconds(10) for _ in range(2))
    full = min(tl_seconds(10 + args.steps) for _ in range(2))
    tl = (full - base) / args.steps * 1000
    pt = torch_ms(args.steps, args.threads)
    npy = numpy_ms(args.steps)
    print(f"MLP 784-512-10, batch 128, Adam, CPU, {args.threads} threads, {args.steps} timed steps")
    print(f"{'':18s} {'ms/step':>9s} {'steps/s':>9s}")
    print(f"{'TL (learn block)':18s} {tl:9.2f} {1000 / tl:9.1f}")
    print(f"{'NumPy by hand':18s} {npy:9.2f} {1000 / npy:9.1f}   (TL speed / NumPy speed: {npy / tl:.2f})")
    if pt is None:
        print("PyTorch            not importable (put it on PYTHONPATH to compare)")
    else:
        print(f"{'PyTorch eager':18s} {pt:9.2f} {1000 / pt:9.1f}")
        print(f"TL speed / PyTorch speed: {pt / tl:.2f}")


if __name__ == "__main__":
    main()
