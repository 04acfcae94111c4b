#!/usr/bin/env bash
# One device call, no model and no llama.cpp: this tree ("after") and BASE ("before"; default the
# checkout two levels up, i.e. the repository the device tool sends when this tree is its
# .carry/NAME) built side by side with CUDA; then, for the after, test_cuda_vs_cpu (graph counters
# on stderr), the cross-backend pytest files on CUDA, and the kernels-only decode benchmark
# (`--bench`) of both trees, the after also with TL_CUDA_GRAPHS=1, and (KERNELS=1) `--bench-kernels`.
# NO_GRAPHS_RUN=1 skips the graphs run, NO_BEFORE=1 the before's benchmark.
# Wheels the device lacks (lark, gguf, diskcache) are taken from ../whl*/ when present.
# Usage (from this tree's root): bash bench/gpu/quick_ab.sh [all|build|check|bench]
set -u
ROOT=$(pwd)
BASE=${BASE:-$(cd "$ROOT/../.." && pwd)}
W=${QUICK_WORK:-/tmp/tl-quick}
OUTDIR=${OUT:-$W/out}
mkdir -p "$W" "$OUTDIR"
export PYTHONUNBUFFERED=1
export TL_CUBLAS_PATH=${TL_CUBLAS_PATH:-$(find / -xdev -name 'libcublas.so.1[23]' 2>/dev/null | head -1)}
J=$(( $(nproc) / 2 ))

build() {  # build SRC BUILD_DIR LOG
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTL_CUDA=ON -DTL_CUDA_ARCHITECTURES=90 \
    -DTL_BUILD_TESTS=ON -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" \
    -DPython_EXECUTABLE="$(command -v python3)" > "$3" 2>&1 && cmake --build "$2" -j "$J" >> "$3" 2>&1
}

do_build() {
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  echo "cuBLAS: ${TL_CUBLAS_PATH:-none found}"
  for d in "$ROOT"/../whl*; do
    [ -d "$d" ] && python3 -m pip install -q --no-deps --no-index --target "$W/pydeps" "$d"/*.whl > /dev/null 2>&1
  done
  rm -rf "$W/base" && mkdir -p "$W/base"
  (cd "$BASE" && tar --exclude=./.carry --exclude=./build --exclude=./.git -cf - .) | tar -C "$W/base" -xf -
  cp "$ROOT/cpp/backends/cuda/test_cuda_vs_cpu.cpp" "$W/base/cpp/backends/cuda/"  # same benchmark code
  local t0=$(date +%s)
  build "$ROOT" "$W/build" "$OUTDIR/build_after.log" & local pa=$!
  build "$W/base" "$W/base-build" "$OUTDIR/build_before.log" & local pb=$!
  wait $pa && echo "after build: $(( $(date +%s) - t0 )) s" || { echo "AFTER BUILD FAILED"; grep -m10 -A5 error "$OUTDIR/build_after.log"; }
  wait $pb && echo "before build: $(( $(date +%s) - t0 )) s" || { echo "BEFORE BUILD FAILED"; grep -m10 -A5 error "$OUTDIR/build_before.log"; }
}

do_check() {
  cd "$ROOT" || return 1
  TL_CUDA_LAUNCH_STATS=1 timeout 300 "$W/build/cpp/backends/cuda/test_cuda_vs_cpu" > "$OUTDIR/cuda_vs_cpu.log" 2>&1
  echo "test_cuda_vs_cpu: $(grep -v '^tl-cuda' "$OUTDIR/cuda_vs_cpu.log" | tail -1)"
  grep '^FAIL' "$OUTDIR/cuda_vs_cpu.log" | head -20
  grep '^tl-cuda' "$OUTDIR/cuda_vs_cpu.log" | tail -2
  export PYTHONPATH="$W/pydeps:$ROOT/python"
  timeout 300 python3 -m pytest -q -p no:cacheprovider tests/runtime/test_backend_ops.py -rf > "$OUTDIR/pytest_ops.log" 2>&1
  echo "test_backend_ops.py (CPU vs CUDA): $(tail -1 "$OUTDIR/pytest_ops.log")"
  TL_BACKEND=cuda timeout 300 python3 -m pytest -q -p no:cacheprovider tests/runtime/test_fused_ops.py \
    tests/runtime/test_cross_backend_model.py -rf > "$OUTDIR/pytest_fused.log" 2>&1
  echo "test_fused_ops.py + test_cross_backend_model.py on CUDA: $(tail -1 "$OUTDIR/pytest_fused.log")"
  grep -h '^FAILED' "$OUTDIR"/pytest_*.log | head -20
}

do_bench() {
  echo "== --bench after (graphs off, the default)"
  timeout 200 "$W/build/cpp/backends/cuda/test_cuda_vs_cpu" --bench 2>&1 | tee "$OUTDIR/bench_after.log" | grep BENCH
  if [ -z "${NO_GRAPHS_RUN:-}" ]; then
    echo "== --bench after, TL_CUDA_GRAPHS=1"
    TL_CUDA_GRAPHS=1 timeout 200 "$W/build/cpp/backends/cuda/test_cuda_vs_cpu" --bench 2>&1 | tee "$OUTDIR/bench_after_graphs.log" | grep "BENCH decode"
  fi
  [ -n "${NO_BEFORE:-}" ] && return 0
  echo "== --bench before"
  timeout 200 "$W/base-build/cpp/backends/cuda/test_cuda_vs_cpu" --bench 2>&1 | tee "$OUTDIR/bench_before.log" | grep "BENCH decode"
  if [ -n "${KERNELS:-}" ]; then
    echo "== --bench-kernels after"
    timeout 200 "$W/build/cpp/backends/cuda/test_cuda_vs_cpu" --bench-kernels 2>&1 | tee "$OUTDIR/kernels_after.log" | grep BENCH
  fi
}

case "${1:-all}" in
  build) do_build ;;
  check) do_check ;;
  bench) do_bench ;;
  all) do_build; do_check; do_bench ;;
  *) echo "usage: $0 all|build|check|bench" >&2; exit 2 ;;
esac
