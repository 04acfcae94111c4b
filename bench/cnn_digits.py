"""Benchmark: a training epoch of the CNN of examples/learning/cnn_digits.tl (8x8 digits, 1437 training
images, batch 64, conv 16 -> pool -> conv 32 -> pool -> linear, Adam, cross_entropy) in TL against the
same model, batches and optimizer in PyTorch eager, on the CPU with the same thread count.

    python bench/cnn_digits.py [--epochs 8] [--threads N] [--rounds 3]

Each epoch is timed on its own (TL: `synchronize()` and `clock()` around it inside the program, run
in a fresh process with TL_THREADS=N; PyTorch, if importable (put it on PYTHONPATH): the same with
torch.set_num_threads(N)), after one warm-up epoch; the two alternate for `rounds` rounds and each
reports its fastest epoch and its median one, which keeps a busy machine's noise out of the
comparison as far as it can. TL runs twice: eagerly, and with the step as a compiled function (`@compile fn
train_step` calling backward: recorded once per batch shape, replayed natively). Prints ms/epoch,
TL's time as a fraction of PyTorch's, and each one's test accuracy (the two train the same model, so both should be ~0.97-0.99).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "examples", "learning", "data")

PROGRAM = """
seed(0)
let X = astype(load("DATA/digits_x.npy"), "f32") / 16.0
let labels = load("DATA/digits_y.npy")
let n_train = 1437
let x_train = reshape(X[:n_train], [n_train, 1, 8, 8])
let y_train = labels[:n_train]
let x_test = reshape(X[n_train:], [1797 - n_train, 1, 8, 8])
let y_test = labels[n_train:]
let W1 = learnable(randn([16, 1, 3, 3]) * 0.47)
let b1 = learnable(zeros([16]))
let W2 = learnable(randn([32, 16, 3, 3]) * 0.118)
let b2 = learnable(zeros([32]))
let W3 = learnable(randn([128, 10]) * 0.125)
let b3 = learnable(zeros([10]))
fn model(x) {
    let h = max_pool2d(relu(conv2d(x, W1, b1, padding = 1)), 2)
    let h2 = max_pool2d(relu(conv2d(h, W2, b2, padding = 1)), 2)
    matmul(reshape(h2, [shape(h2)[0], 128]), W3) + b3
}
let batch = 64
let batches = floor_div(n_train + batch - 1, batch)
STEP_FN
learn {
    optimizer: adam(lr = 0.01)
    epochs: EPOCHS
    for epoch in range(epochs) {
        synchronize()
        let t0 = clock()
        for i in range(batches) {
            let lo = i * batch
            let hi = min(lo + batch, n_train)
            STEP_CALL
        }
        synchronize()
        println("epoch", clock() - t0)
    }
}
let acc = 0.0
eval { acc = item(mean(astype(argmax(model(x_test), 1) == y_test, "f32"))) }
print(acc)
"""

EAGER = ("", "backward(cross_entropy(model(x_train[lo:hi]), y_train[lo:hi]))")
COMPILED = ("""@compile
fn train_step(x, y) {
    let loss = cross_entropy(model(x), y)
    backward(loss)
    loss
}""", "let loss = train_step(x_train[lo:hi], y_train[lo:hi])")

RUNNER = """
import sys, time
sys.path.insert(0, sys.argv[1])
import tensorlogic
src = sys.stdin.read()
start = time.perf_counter()
result = tensorlogic.run(src, filename="<bench>")
if result.error is not None:
    raise SystemExit(result.error_text)
print(result.output.strip())
"""


def tl_epochs(epochs: int, threads: int, variant=EAGER) -> tuple[list[float], float]:
    """(ms of each epoch after the first, test accuracy) of one TL run in a fresh process."""
    src = (PROGRAM.replace("EPOCHS", str(epochs + 1)).replace("DATA", DATA).replace("STEP_FN", variant[0])
           .replace("STEP_CALL", variant[1]))
    env = dict(os.environ, TL_THREADS=str(threads))
    proc = subprocess.run([sys.executable, "-c", RUNNER, os.path.join(REPO, "python")], input=src,
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(proc.stdout + proc.stderr)
    lines = proc.stdout.strip().splitlines()
    times = [float(x.split()[1]) * 1000 for x in lines if x.startswith("epoch")]
    return times[1:], float(lines[-1])


def torch_epochs(epochs: int, threads: int) -> tuple[list[float], float] | None:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x = torch.from_numpy(np.load(os.path.join(DATA, "digits_x.npy")).astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = torch.from_numpy(np.load(os.path.join(DATA, "digits_y.npy")))
    n_train = 1437
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    def epoch():
        for lo in range(0, n_train, 64):
            hi = min(lo + 64, n_train)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[lo:hi]), y[lo:hi]).backward()
            opt.step()
    epoch()
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        epoch()
        times.append((time.perf_counter() - start) * 1000)
    with torch.no_grad():
        acc = float((model(x[n_train:]).argmax(1) == y[n_train:]).float().mean())
    return times, acc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tl_times, compiled_times, torch_times, tl_acc, compiled_acc, torch_acc = [], [], [], 0.0, 0.0, None
    for _ in range(args.rounds):
        times, tl_acc = tl_epochs(args.epochs, args.threads)
        tl_times += times
        times, compiled_acc = tl_epochs(args.epochs, args.threads, COMPILED)
        compiled_times += times
        peer = torch_epochs(args.epochs, args.threads)
        if peer is not None:
            torch_times += peer[0]
            torch_acc = peer[1]
    print(f"CNN on 8x8 digits, 1437 images/epoch, batch 64, Adam; {args.threads} threads, "
          f"{args.rounds} x {args.epochs} timed epochs each")
    print(f"{'':12} {'fastest ms':>10} {'median ms':>10} {'test acc':>9}")
    print(f"{'TL':12} {min(tl_times):10.1f} {np.median(tl_times):10.1f} {tl_acc:9.4f}")
    print(f"{'TL compiled':12} {min(compiled_times):10.1f} {np.median(compiled_times):10.1f} {compiled_acc:9.4f}")
    if torch_acc is None:
        print("PyTorch: not importable (put it on PYTHONPATH to compare)")
        return
    print(f"{'PyTorch':12} {min(torch_times):10.1f} {np.median(torch_times):10.1f} {torch_acc:9.4f}")
    for name, times in (("TL", tl_times), ("TL compiled", compiled_times)):
        print(f"{name} epoch time / PyTorch's: fastest {min(times) / min(torch_times):.2f}, "
              f"median {np.median(times) / np.median(torch_times):.2f}")


if __name__ == "__main__":
    main()
