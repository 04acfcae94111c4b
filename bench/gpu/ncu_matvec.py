"""Kernel time of the CUDA one-row matrix-vector products, per weight type and shape, measured by
Nsight Compute (ncu, clocks left as they run) rather than by host timers, which a launch-bound loop
turns into a measure of the host. Runs `test_cuda_vs_cpu --bench-matvec` once per kernel variant
(TL_CUDA_MATVEC1=0: the older shared-memory kernel; default: matvec1_kernel) and prints the median of
each shape's eight launches and the bandwidth it implies. ncu serializes kernels, so programmatic
dependent launch (the overlap of one kernel's weight fetch with the previous kernel) shows only in
end-to-end runs (bench/llm.py).

    python3 bench/gpu/ncu_matvec.py build/cpp/backends/cuda/test_cuda_vs_cpu [peak GB/s]
"""
import csv
import io
import os
import statistics
import subprocess
import sys

NCU = os.environ.get("NCU", "/usr/local/cuda/bin/ncu")
UNIT = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def kernel_times(test, env):
    p = subprocess.run([NCU, "--clock-control", "none", "--csv", "--metrics", "gpu__time_duration.sum",
                        "-k", "regex:matvec", test, "--bench-matvec"], env=dict(os.environ, **env),
                       capture_output=True, text=True, timeout=240)
    lines = p.stdout.splitlines()
    shapes = [tuple(l.split()[1:]) for l in lines if l.startswith("MATVEC")]
    rows = list(csv.DictReader(io.StringIO("\n".join(l for l in lines if l.startswith('"')))))
    times = [float(r["Metric Value"].replace(",", "")) * UNIT[r["Metric Unit"]] for r in rows]
    if len(times) != 8 * len(shapes):
        sys.exit(f"ncu: {len(times)} kernels for {len(shapes)} shapes\n{p.stderr[-2000:]}")
    return {s: statistics.median(times[8 * i:8 * i + 8]) for i, s in enumerate(shapes)}


def main():
    test = sys.argv[1]
    peak = float(sys.argv[2]) if len(sys.argv) > 2 else None
    old = kernel_times(test, {"TL_CUDA_MATVEC1": "0"})
    new = kernel_times(test, {})
    print(f"{'type':6} {'N':>6} {'K':>5} {'MiB':>6} | {'older us':>8} {'GB/s':>6} | {'matvec1 us':>10} {'GB/s':>6}"
          + (" % peak" if peak else "") + " | speed-up")
    for s, t_new in new.items():
        t, n, k, b = s[0], int(s[1]), int(s[2]), int(s[3])
        t_old = old.get(s, float("nan"))
        line = (f"{t:6} {n:6} {k:5} {b / 2**20:6.2f} | {t_old:8.2f} {b / t_old / 1e3:6.0f} | "
                f"{t_new:10.2f} {b / t_new / 1e3:6.0f}")
        if peak:
            line += f" {100 * b / t_new / 1e3 / peak:5.0f}%"
        print(line + f" | {t_old / t_new:5.2f}x")


if __name__ == "__main__":
    main()
