"""One Adam training step of an MLP on the GPU: TL's CUDA backend against PyTorch CUDA eager.

    python bench/gpu/adam_mlp_cuda.py [--steps 30] [--baseline DIR]

Two shapes: 4096-8192-4096 at batch 1024 (the matrix products dominate) and 784-512-10 at batch 128
(launch and host overhead dominate); ReLU, softmax cross-entropy, Adam(lr 0.001), f32. TL runs the
step as a `learn` block and as a compiled function with TL_BACKEND=cuda, timed inside the program as
PyTorch is: a learn block of 5 + S steps whose loop, after its 5 warm-up steps (the compiled step's
recording among them), waits for the device (synchronize()) and reads clock(); after the block it
waits again and reads the clock, so all of the S steps' device work is inside the time; the median of
3 processes. (Until 2026-12-06 the figure was (a run of 5 + S steps - a run of 5 steps) / S, whole
runs of the program timed from outside; three processes gave 8.63-11.26 ms for the large learn
block's step.) TF32 rows:
TL with TL_CUDA_TF32=1, PyTorch with torch.backends.cuda.matmul.allow_tf32 = True. `--baseline DIR`
adds the learn block of another checkout's built python/ dir (the code before a change). PyTorch
is timed with CUDA synchronisation around S steps after 5 warm-up steps, the median of 3 such runs.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "bench"))
from learning_mlp import COMPILED, EAGER  # noqa: E402  (the same step programs)

# One process per measurement: the program times its own steps and prints the ms per step last.
RUNNER = """
import sys
sys.path.insert(0, sys.argv[1])
import tensorlogic
result = tensorlogic.run(sys.stdin.read(), filename="<bench>")
if result.error is not None:
    raise SystemExit(result.error_text)
print(result.output)
"""

PROGRAM = """
seed(0)
let X = randn([B, DIN])
let labels = argmax(randn([B, DOUT]), 1)
let Y = where(unsqueeze(labels, 1) == arange(0, DOUT), 1.0, 0.0)
let W1 = learnable(randn([DH, DIN]) * S1)
let b1 = learnable(zeros([DH]))
let W2 = learnable(randn([DOUT, DH]) * S2)
let b2 = learnable(zeros([DOUT]))
STEP_FN
let t0 = 0.0
learn {
    optimizer: adam(lr = 0.001)
    epochs: WARM + STEPS
    for epoch in range(epochs) {
        if epoch == WARM {
            synchronize()
            t0 = clock()
        }
        STEP_CALL
    }
}
synchronize()
let ms = (clock() - t0) * 1000.0 / STEPS
print(sum(W1) + sum(W2))
print(ms)
"""


def program(shape, steps, variant):
    din, dh, dout, b = shape
    return (PROGRAM.replace("WARM", "5").replace("STEPS", str(steps)).replace("STEP_FN", variant[0]).replace("STEP_CALL", variant[1])
            .replace("DIN", str(din)).replace("DH", str(dh)).replace("DOUT", str(dout)).replace("B,", f"{b},")
            .replace("S1", f"{din ** -0.5:.4f}").replace("S2", f"{dh ** -0.5:.4f}"))


def tl_ms(shape, steps, variant, package_dir, tf32=False):
    env = dict(os.environ, TL_BACKEND="cuda", TL_CUDA_TF32="1" if tf32 else "0")
    src = program(shape, steps, variant)
    times = []
    for _ in range(3):
        proc = subprocess.run([sys.executable, "-c", RUNNER, package_dir], input=src, capture_output=True,
                              text=True, env=env)
        if proc.returncode != 0:
            raise SystemExit(proc.stdout + proc.stderr)
        times.append(float(proc.stdout.strip().splitlines()[-1]))
    times.sort()
    print(f"  (TL{' TF32' if tf32 else ''} {variant_name(variant)}, 3 processes, ms/step: "
          + ", ".join(f"{t:.2f}" for t in times) + ")", file=sys.stderr)
    return times[1]


def variant_name(variant) -> str:
    return "compiled step" if variant is COMPILED else "learn block"


def torch_ms(shape, steps, tf32):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = tf32
    din, dh, dout, b = shape
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(b, din, generator=g, device=dev)
    y = torch.randint(0, dout, (b,), generator=g, device=dev)
    model = torch.nn.Sequential(torch.nn.Linear(din, dh), torch.nn.ReLU(), torch.nn.Linear(dh, dout)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=0.001)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    for _ in range(5):
        step()
    times = []
    for _ in range(3):  # the median of three timed runs, as TL's
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / steps * 1000)
    return sorted(times)[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--baseline", default=None, help="python/ dir of another built checkout ('TL before')")
    args = ap.parse_args()
    here = os.path.join(REPO, "python")
    for shape in ((4096, 8192, 4096, 1024), (784, 512, 10, 128)):
        rows = []
        if args.baseline:
            rows.append(("TL before, learn block", tl_ms(shape, args.steps, EAGER, os.path.abspath(args.baseline))))
        rows.append(("TL learn block", tl_ms(shape, args.steps, EAGER, here)))
        rows.append(("TL compiled step", tl_ms(shape, args.steps, COMPILED, here)))
        pt = torch_ms(shape, args.steps, False)
        rows.append(("PyTorch CUDA eager", pt))
        rows.append(("TL learn block, TF32", tl_ms(shape, args.steps, EAGER, here, tf32=True)))
        pt32 = torch_ms(shape, args.steps, True)
        rows.append(("PyTorch CUDA eager, TF32", pt32))
        print(f"MLP {shape[0]}-{shape[1]}-{shape[2]}, batch {shape[3]}, Adam, f32, {args.steps} timed steps")
        print("| | ms/step | PyTorch (same TF32 setting) / TL |")
        print("|---|---|---|")
        for name, ms in rows:
            ref = pt32 if "TF32" in name else pt
            print(f"| {name} | {ms:.2f} | {ref / ms:.2f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
