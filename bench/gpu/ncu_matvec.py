"""Kernel time of the CUDA one-row matrix-vector products, per weight type and shape, measured by
Nsight Compute (ncu, clocks left as they run) rather than by host timers, which a launch-bound loop
turns into a measure of the host. Runs `test_cuda_vs_cpu --bench-matvec` once per variant (the
default environment, then one per NAME=VALUE argument) and prints the median of each shape's eight
launches and the bandwidth it implies. ncu serializes kernels, so programmatic
dependent launch (the overlap of one kernel's weight fetch with the previous kernel) shows only in
end-to-end runs (bench/llm.py).

    python3 bench/gpu/ncu_matvec.py build/cpp/backends/cuda/test_cuda_vs_cpu [peak GB/s] [NAME=VALUE ...]
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
    variants = [("default", {})] + [(a, dict([a.split("=", 1)])) for a in sys.argv[3:]]
    times = [(label, kernel_times(test, env)) for label, env in variants]
    print(f"{'type':6} {'N':>6} {'K':>5} {'MiB':>6} | " + " | ".join(f"{label:>11} us  GB/s" for label, _ in times)
          + (" | default % of peak" if peak else ""))
    for s in times[0][1]:
        t, n, k, b = s[0], int(s[1]), int(s[2]), int(s[3])
        cells = [f"{tt[s]:14.2f} {b / tt[s] / 1e3:5.0f}" for _, tt in times]
        line = f"{t:6} {n:6} {k:5} {b / 2**20:6.2f} | " + " | ".join(cells)
        if peak:
            line += f" | {100 * b / times[0][1][s] / 1e3 / peak:17.0f}%"
        print(line)


if __name__ == "__main__":
    main()
