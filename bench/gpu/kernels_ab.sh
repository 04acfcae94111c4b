#!/usr/bin/env bash
# Kernel-level A/B on one GPU machine: builds this tree and a baseline tree (BASE, default: none)
# with CUDA, runs test_cuda_vs_cpu (correctness against the CPU backend) on this tree, then
# `test_cuda_vs_cpu --bench-kernels` on both (the baseline built with this tree's test file, so
# both run the same benchmark). Usage, from this tree's root: bench/gpu/kernels_ab.sh [BASE]
# Logs under OUT (default /tmp/tl-ab). cuBLAS: TL_CUBLAS_PATH, else the first libcublas found.
set -u
ROOT=$(pwd)
BASE=${1:-}
OUT=${OUT:-/tmp/tl-ab}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OUT"
if [ -z "${TL_CUBLAS_PATH:-}" ]; then
  TL_CUBLAS_PATH=$(find / -xdev -name 'libcublas.so.1[23]' 2>/dev/null | head -1)
  export TL_CUBLAS_PATH
fi
echo "cuBLAS: ${TL_CUBLAS_PATH:-none}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
build() {  # src dir, build dir
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTL_CUDA=ON -DTL_CUDA_ARCHITECTURES=90 \
    -DTL_BUILD_TESTS=ON -DTL_BUILD_PYTHON=OFF > "$2.cfg.log" 2>&1 &&
  cmake --build "$2" -j "$JOBS" --target test_cuda_vs_cpu > "$2.log" 2>&1 || { echo "BUILD FAILED $1"; grep -m10 -A5 error "$2.log"; return 1; }
}
t0=$(date +%s)
build "$ROOT" /tmp/tl-ab-new || exit 1
echo "built in $(( $(date +%s) - t0 )) s"
if [ -n "$BASE" ]; then
  rm -rf /tmp/tl-ab-basesrc && mkdir -p /tmp/tl-ab-basesrc
  (cd "$BASE" && tar --exclude=./.carry --exclude=./build --exclude=./.git -cf - CMakeLists.txt cpp) | tar -C /tmp/tl-ab-basesrc -xf -
  cp "$ROOT/cpp/backends/cuda/test_cuda_vs_cpu.cpp" /tmp/tl-ab-basesrc/cpp/backends/cuda/
  build /tmp/tl-ab-basesrc /tmp/tl-ab-base &
  BPID=$!
fi
T=/tmp/tl-ab-new/cpp/backends/cuda/test_cuda_vs_cpu
timeout 300 $T > "$OUT/cuda_vs_cpu.log" 2>&1; echo "test_cuda_vs_cpu (new): rc=$? $(tail -1 $OUT/cuda_vs_cpu.log)"
grep FAIL "$OUT/cuda_vs_cpu.log" | head -20
TL_CUDA_BLAS=0 timeout 300 $T > "$OUT/cuda_vs_cpu_noblas.log" 2>&1; echo "test_cuda_vs_cpu (new, TL_CUDA_BLAS=0): rc=$? $(tail -1 $OUT/cuda_vs_cpu_noblas.log)"
grep FAIL "$OUT/cuda_vs_cpu_noblas.log" | head -10
[ -n "$BASE" ] && { wait $BPID || BASE=; }  # no compiling while timing
echo "== new"; timeout 200 $T --bench-kernels 2>&1 | tee "$OUT/bench_new.log"
echo "== new, TL_CUDA_TF32=1"; TL_CUDA_TF32=1 timeout 100 $T --bench-kernels 2>&1 | grep -E "matmul|linear" | tee "$OUT/bench_new_tf32.log"
if [ -n "$BASE" ]; then
  echo "== baseline"; timeout 200 /tmp/tl-ab-base/cpp/backends/cuda/test_cuda_vs_cpu --bench-kernels 2>&1 | tee "$OUT/bench_base.log"
fi
