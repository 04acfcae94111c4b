"""Benchmark: one training step of an MLP (784-512-10, batch 128, ReLU, softmax cross-entropy, Adam)
written in TL (a `learn` block) against the same step in PyTorch eager, on the CPU, in one run.

    python bench/learning_mlp.py [--steps 50] [--threads N]

TL's time per step is (time of a run with 10 + S steps - time of a run with 10 steps) / S, so
parsing, start-up and warm-up cancel; it includes the interpreter, the tape, backward and the
optimizer. PyTorch (if importable; put it on PYTHONPATH) runs the same shapes and update rule with
the same thread count. Prints one table: ms/step, steps/s, and TL's speed as a fraction of PyTorch's.
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
    print(f"MLP 784-512-10, batch 128, Adam, CPU, {args.threads} threads, {args.steps} timed steps")
    print(f"{'':18s} {'ms/step':>9s} {'steps/s':>9s}")
    print(f"{'TL (learn block)':18s} {tl:9.2f} {1000 / tl:9.1f}")
    if pt is None:
        print("PyTorch            not importable (put it on PYTHONPATH to compare)")
    else:
        print(f"{'PyTorch eager':18s} {pt:9.2f} {1000 / pt:9.1f}")
        print(f"TL speed / PyTorch speed: {pt / tl:.2f}")


if __name__ == "__main__":
    main()
