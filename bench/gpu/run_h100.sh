#!/usr/bin/env bash
# TL on CUDA against llama.cpp CUDA on one GPU machine (written for the H100 device, sm_90).
#   bench/gpu/run_h100.sh prepare   unpack the llama-cpp-python sdist and start its CUDA build in
#                                   the background (setsid: it outlives this call), build TL with CUDA
#   bench/gpu/run_h100.sh check     CUDA checks: test_cuda_vs_cpu, the cross-backend and fused-op
#                                   tests on CUDA, the real-model comparison, device ops per token
#   bench/gpu/run_h100.sh bench     wait for the llama.cpp build, then bench/llm.py --gpu
#   bench/gpu/run_h100.sh all       the three in order
# Run from the root of a TL source tree. Inputs beside this tree (the `carry` of the device tool
# delivers them): llama_sdist_stripped.tgz (the llama-cpp-python 0.3.36 sdist without models, docs,
# .git and unused backends), whl/*.whl (lark, gguf for the device's Python; diskcache, which
# llama-cpp-python imports), the model as MODEL or
# as MODEL_PARTS=n model.part* pieces (joined once all n arrived), the shared reference outputs in
# reference/ (optional).
# Everything is built and written under WORK (default /tmp/tl-h100); logs go to OUT (default
# $WORK/logs), each step's summary to $OUT/summary.txt.
# `prepare` copies the tree to $WORK/src and every later step runs there, so a later call may
# bring only the rest of the model (model.part* pieces are collected in $WORK as they arrive).
set -u
ROOT=$(pwd)
WORK=${WORK:-/tmp/tl-h100}
OUT=${OUT:-$WORK/logs}
SRC=$WORK/src
JOBS=${JOBS:-$(nproc)}
mkdir -p "$WORK" "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
export PYTHONPATH="$WORK/pydeps:$SRC/python${PYTHONPATH:+:$PYTHONPATH}"
MODEL=${MODEL:-$WORK/model.gguf}
say() { echo "$*" | tee -a "$OUT/summary.txt"; }

collect_model_parts() {
  for part in "$ROOT"/model.part*; do [ -e "$part" ] && cp "$part" "$WORK/"; done
  return 0
}

model() {
  collect_model_parts
  if [ ! -s "$MODEL" ] && [ -n "${MODEL_PARTS:-}" ] && [ "$(ls "$WORK"/model.part* 2>/dev/null | wc -l)" = "$MODEL_PARTS" ]; then
    cat "$WORK"/model.part* > "$MODEL.tmp" && mv "$MODEL.tmp" "$MODEL"
  fi
  [ -s "$MODEL" ] || { say "no model: set MODEL, or MODEL_PARTS=n with model.part* pieces"; return 1; }
}

prepare() {
  collect_model_parts
  # A fresh copy beside the last one; only files whose bytes changed replace theirs, with the
  # copy's time as their mtime, so a warm machine's build recompiles exactly what changed (tar keeps
  # the sender's mtimes, which can be older than the objects built here).
  rm -rf "$SRC.new" && mkdir -p "$SRC.new"
  tar -C "$ROOT" --exclude='./model.part*' --exclude=./llama_sdist_stripped.tgz --exclude=./build -cf - . | tar -C "$SRC.new" -xf -
  if [ -d "$SRC" ]; then
    (cd "$SRC.new" && find . -type f) | while IFS= read -r f; do
      cmp -s "$SRC.new/$f" "$SRC/$f" || { mkdir -p "$(dirname "$SRC/$f")" && cp "$SRC.new/$f" "$SRC/$f"; }
    done
    rm -rf "$SRC.new"
  else
    mv "$SRC.new" "$SRC"
  fi
  if [ -d "$ROOT/whl" ]; then
    "$PY" -m pip install -q --no-deps --target "$WORK/pydeps" "$ROOT"/whl/*.whl > "$OUT/pip.log" 2>&1
  fi
  if [ -f "$ROOT/llama_sdist_stripped.tgz" ] && [ ! -e "$WORK/llama_build.started" ]; then
    rm -rf "$WORK/llama_src" && mkdir -p "$WORK/llama_src"
    tar xzf "$ROOT/llama_sdist_stripped.tgz" -C "$WORK/llama_src"
    touch "$WORK/llama_build.started"
    (cd "$WORK"/llama_src/llama_cpp_python-* && \
      CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
      CMAKE_BUILD_PARALLEL_LEVEL=$JOBS setsid nohup bash -c \
        "$PY -m pip install --no-deps --no-build-isolation --target $WORK/llama . > $WORK/llama_build.log 2>&1; echo \$? > $WORK/llama_build.rc" \
        > /dev/null 2>&1 &)
    say "llama.cpp CUDA build started in the background ($WORK/llama_build.log)"
  fi
  local t0=$(date +%s)
  { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1; } > "$OUT/build.log" 2>&1
  cmake -S "$SRC" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTL_CUDA=ON -DTL_CUDA_ARCHITECTURES=90 \
    -DTL_BUILD_TESTS=ON -Dpybind11_DIR="$($PY -m pybind11 --cmakedir)" -DPython_EXECUTABLE="$(command -v $PY)" \
    >> "$OUT/build.log" 2>&1
  if cmake --build "$WORK/build" -j "$JOBS" >> "$OUT/build.log" 2>&1; then
    say "TL CUDA build: $(( $(date +%s) - t0 )) s"
  else
    say "TL CUDA build FAILED:"; grep -m20 -A6 "error" "$OUT/build.log" | tee -a "$OUT/summary.txt"; return 1
  fi
}

check() {
  cd "$SRC" || return 1
  model || true
  local T="$WORK/build/cpp/backends/cuda/test_cuda_vs_cpu"
  timeout 240 "$T" > "$OUT/cuda_vs_cpu.log" 2>&1
  say "test_cuda_vs_cpu: $(tail -1 "$OUT/cuda_vs_cpu.log")"
  timeout 300 "$PY" -m pytest -q -p no:cacheprovider tests/runtime/test_backend_ops.py -rf > "$OUT/pytest_cross_backend.log" 2>&1
  say "pytest test_backend_ops.py (CPU vs CUDA): $(tail -1 "$OUT/pytest_cross_backend.log")"
  TL_BACKEND=cuda timeout 300 "$PY" -m pytest -q -p no:cacheprovider tests/runtime/test_fused_ops.py -rf > "$OUT/pytest_fused_cuda.log" 2>&1
  say "pytest test_fused_ops.py on CUDA: $(tail -1 "$OUT/pytest_fused_cuda.log")"
  if [ -s "$MODEL" ]; then
    local ref=()
    [ -d "$SRC/reference" ] && ref=(TL_REFERENCE_DIR="$SRC/reference")
    env "${ref[@]}" TL_CROSS_MODEL="$MODEL" TL_CROSS_REPORT="$OUT/real_model_report.json" timeout 300 \
      "$PY" -m pytest -q -s -p no:cacheprovider tests/runtime/test_cross_backend_model.py -rf > "$OUT/pytest_model.log" 2>&1
    say "pytest test_cross_backend_model.py (real model, CPU vs CUDA vs reference): $(tail -1 "$OUT/pytest_model.log")"
    timeout 200 "$PY" cpp/backends/cuda/gpu_checks/launches_per_token.py "$MODEL" 2>>"$OUT/build.log" | tee -a "$OUT/summary.txt"
  fi
  grep -h "^FAILED" "$OUT"/pytest_*.log | tee -a "$OUT/summary.txt"
}

bench() {
  cd "$SRC" || return 1
  model || return 1
  local waited=0
  while [ ! -e "$WORK/llama_build.rc" ] && [ $waited -lt ${LLAMA_WAIT_S:-540} ]; do sleep 5; waited=$((waited + 5)); done
  local peers=llama.cpp
  if [ "$(cat "$WORK/llama_build.rc" 2>/dev/null)" != "0" ]; then
    say "llama.cpp CUDA build not finished or failed (see $WORK/llama_build.log); TL only"
    tail -5 "$WORK/llama_build.log" >> "$OUT/summary.txt" 2>/dev/null
    peers=none
  fi
  timeout ${BENCH_TIMEOUT_S:-500} "$PY" bench/llm.py --gpu --model "$MODEL" --llama-cpp-path "$WORK/llama" \
    --peers $peers --repeat ${REPEAT:-3} --json "$OUT/bench_gpu.json" > "$OUT/bench_gpu.log" 2>&1
  cat "$OUT/bench_gpu.log" | tee -a "$OUT/summary.txt"
}

case "${1:-all}" in
  prepare) prepare ;;
  check) check ;;
  bench) bench ;;
  all) prepare && check; bench ;;
  *) echo "usage: $0 prepare|check|bench|all" >&2; exit 2 ;;
esac
