"""Training state does not grow: a 10,000-step learn block (MLP 32-64-4, batch 128, Adam, gradient
clipping, dropout) with the memory ledger, the tape's size and the process RSS at checkpoints.

    python bench/learning_memory.py [--steps 10000]

Prints one row per checkpoint; live bytes, live tensors and tape entries must stay equal after the
first checkpoint and device allocations stop growing once the in-flight window is warm.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))

PROGRAM = """
seed(1)
let X = randn([128, 32])
let Y = randn([128, 4])
let W1 = learnable(randn([32, 64]) * 0.1)
let W2 = learnable(randn([64, 4]) * 0.1)
learn {
    optimizer: adam(lr = 0.001)
    clip_grad_norm: 1.0
    epochs: STEPS
    for epoch in range(epochs) {
        let err = matmul(dropout(relu(matmul(X, W1)), 0.1), W2) - Y
        backward(mean(err * err))
        if (epoch + 1) % EVERY == 0 { checkpoint(epoch + 1) }
    }
}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10000)
    args = ap.parse_args()
    import tensorlogic
    from tensorlogic.builtins import registry
    from tensorlogic.builtins.autograd import tape
    from tensorlogic.builtins.core import memory_stats, synchronize

    start = time.perf_counter()
    print(f"{'step':>7s} {'live bytes':>11s} {'live tensors':>12s} {'tape entries':>12s} {'allocations':>11s} "
          f"{'max RSS MiB':>11s} {'steps/s':>8s}")

    def checkpoint(step):
        synchronize()
        s = memory_stats()
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        rate = int(step) / (time.perf_counter() - start)
        print(f"{int(step):7d} {s['live_bytes']:11d} {s['live_tensors']:12d} {len(tape.TRACKED):12d} "
              f"{s['allocations']:11d} {rss:11.1f} {rate:8.0f}")

    registry.BUILTINS["checkpoint"] = registry.Builtin("checkpoint", checkpoint, "checkpoint(step)", "", 1, 1)
    source = PROGRAM.replace("STEPS", str(args.steps)).replace("EVERY", str(max(args.steps // 10, 1)))
    result = tensorlogic.run(source, filename="<bench>", seed=1)
    if result.error is not None:
        raise SystemExit(result.error_text)


if __name__ == "__main__":
    main()
