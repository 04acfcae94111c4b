#!/usr/bin/env bash
# Builds TensorLogic with the CUDA backend on a GPU machine and runs every CUDA check, writing
# logs to $OUT (default build/gpu-logs): the C++ cross-backend test, the kernel benchmark, the
# Python cross-backend tests, the runtime tests on TL_BACKEND=cuda, the model comparison and the
# Hugging Face baseline. Builds from the committed tree (git archive) when .git is present.
# Usage: cpp/backends/cuda/gpu_checks/run_gpu_checks.sh [ARCH]   (ARCH default 90)
set -u
ARCH=${1:-90}
OUT=${OUT:-$PWD/build/gpu-logs}
mkdir -p "$OUT"
ROOT=$PWD
SRC=$ROOT
if [ -d .git ] && git rev-parse HEAD >/dev/null 2>&1; then
  SRC=/tmp/tl-src && rm -rf $SRC && mkdir -p $SRC && git archive HEAD | tar -x -C $SRC
  echo "building commit $(git rev-parse --short HEAD)" | tee "$OUT/summary.txt"
fi
cd "$SRC"
export PYTHONUNBUFFERED=1
{ nvidia-smi; nvcc --version; python3 --version; cmake --version | head -1; } > "$OUT/build.log" 2>&1
PYBIND=$(python3 -m pybind11 --cmakedir)
t0=$(date +%s)
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTL_CUDA=ON -DTL_CUDA_ARCHITECTURES=$ARCH \
  -DTL_BUILD_TESTS=ON -Dpybind11_DIR="$PYBIND" -DPython_EXECUTABLE="$(command -v python3)" >> "$OUT/build.log" 2>&1
cmake --build build/gpu -j16 --target test_cuda_vs_cpu >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; }
cmake --build build/gpu -j16 >> "$OUT/build.log" 2>&1 || { echo "full build failed:"; grep -m20 -B2 -A8 "error" "$OUT/build.log"; }
echo "build: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
T=build/gpu/cpp/backends/cuda/test_cuda_vs_cpu
timeout 240 $T > "$OUT/cuda_vs_cpu.log" 2>&1; grep -m 30 FAIL "$OUT/cuda_vs_cpu.log"; echo "cuda_vs_cpu: $(tail -1 "$OUT/cuda_vs_cpu.log")" | tee -a "$OUT/summary.txt"
timeout 120 $T --bench > "$OUT/bench.log" 2>&1; grep BENCH "$OUT/bench.log" | tee -a "$OUT/summary.txt"
export PYTHONPATH=$SRC/python${PYTHONPATH:+:$PYTHONPATH}
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/runtime/test_backend_ops.py -rf > "$OUT/p1.log" 2>&1
echo "pytest cross_backend: $(tail -1 "$OUT/p1.log")" | tee -a "$OUT/summary.txt"
TL_BACKEND=cuda timeout 200 python3 -m pytest -q -p no:cacheprovider tests/runtime --ignore=tests/runtime/test_backend_ops.py \
  --ignore=tests/runtime/test_cross_backend_model.py -rf > "$OUT/p2.log" 2>&1
echo "pytest tests/runtime with TL_BACKEND=cuda: $(tail -1 "$OUT/p2.log")" | tee -a "$OUT/summary.txt"
TL_CROSS_MODEL_LAYERS=30 TL_CROSS_REPORT="$OUT/model_report.json" timeout 240 python3 -m pytest -q -s -p no:cacheprovider \
  tests/runtime/test_cross_backend_model.py -rf > "$OUT/p3.log" 2>&1
echo "pytest model cross-backend: $(tail -1 "$OUT/p3.log")" | tee -a "$OUT/summary.txt"
grep -h '^generated\|gguf' "$OUT/p3.log" | tee -a "$OUT/summary.txt"
cat "$OUT/p1.log" "$OUT/p2.log" "$OUT/p3.log" > "$OUT/pytest.log" && rm "$OUT/p1.log" "$OUT/p2.log" "$OUT/p3.log"
grep -h "^FAILED" "$OUT/pytest.log" | tee -a "$OUT/summary.txt"
timeout 200 python3 "$ROOT/cpp/backends/cuda/gpu_checks/launches_per_token.py" ${TL_GPU_CHECK_MODEL:-} 2>>"$OUT/build.log" | tee -a "$OUT/summary.txt"
timeout 150 python3 "$ROOT/cpp/backends/cuda/gpu_checks/hf_decode_baseline.py" 37 64 2>>"$OUT/build.log" | tee -a "$OUT/summary.txt"
timeout 60 ctest --test-dir build/gpu -E test_cuda_vs_cpu --output-on-failure > "$OUT/ctest.log" 2>&1
echo "ctest (runtime C++ tests, CPU backend, built with CUDA): $(grep 'tests passed' "$OUT/ctest.log")" | tee -a "$OUT/summary.txt"
cat "$OUT/summary.txt"
