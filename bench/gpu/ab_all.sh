#!/usr/bin/env bash
# Before/after on one GPU machine, in steps that fit the device tool's 10-minute calls, driving
# bench/gpu/run_h100.sh for this tree (the "after") and building BASE (default: the repository
# root two levels up, i.e. the checkout the device tool sends, when this tree is its .carry/NAME)
# as the "before". Inputs beside this tree (in ..): llama_sdist_stripped.tgz, whl/, model.part*.
#   bench/gpu/ab_all.sh a   prepare (run_h100.sh: llama.cpp build in the background, TL build),
#                           the baseline build, the 1B-shaped Q4_K model generated in the background
#   bench/gpu/ab_all.sh b   run_h100.sh check (needs the whole SmolLM2 model), kernel benchmarks of
#                           both builds, SmolLM2 decode/prompt: TL after, TL before, llama.cpp CUDA
#   bench/gpu/ab_all.sh c   the same for the 1B-shaped model, then the Adam step (bench/gpu/adam_mlp_cuda.py)
# Summaries go to $OUT (the device tool's folder) and stdout.
set -u
ROOT=$(pwd)
BASE=${BASE:-$(cd "$ROOT/../.." && pwd)}
export WORK=${WORK:-/tmp/tl-h100}
OUTDIR=${OUT:-/tmp/tl-ab}
mkdir -p "$OUTDIR" "$WORK"
export PYTHONUNBUFFERED=1
export TL_CUBLAS_PATH=${TL_CUBLAS_PATH:-$(find / -xdev -name 'libcublas.so.1[23]' 2>/dev/null | head -1)}
MODEL1B=$WORK/llama1b_q4k.gguf
BASESRC=/tmp/tl-base/src
for f in llama_sdist_stripped.tgz whl; do [ -e "../$f" ] && [ ! -e "$f" ] && ln -s "../$f" "$f"; done
for f in ../model.part*; do [ -e "$f" ] && cp "$f" .; done
run_h100() { OUT="$WORK/logs" MODEL_PARTS=2 bash bench/gpu/run_h100.sh "$@"; }

case "${1:-}" in
a)
  run_h100 prepare
  cat "$WORK/logs/summary.txt"
  python3 -m pytest --version 2>&1 | head -1
  rm -rf "$BASESRC" && mkdir -p "$BASESRC"
  (cd "$BASE" && tar --exclude=./.carry --exclude=./build --exclude=./.git -cf - .) | tar -C "$BASESRC" -xf -
  cp "$ROOT/cpp/backends/cuda/test_cuda_vs_cpu.cpp" "$BASESRC/cpp/backends/cuda/"  # same benchmark code
  t0=$(date +%s)
  cmake -S "$BASESRC" -B /tmp/tl-base/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTL_CUDA=ON \
    -DTL_CUDA_ARCHITECTURES=90 -DTL_BUILD_TESTS=ON -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" \
    > /tmp/tl-base/cfg.log 2>&1 && cmake --build /tmp/tl-base/build -j "$(nproc)" > /tmp/tl-base/build.log 2>&1 \
    && echo "baseline build: $(( $(date +%s) - t0 )) s" || { echo "BASELINE BUILD FAILED"; tail -20 /tmp/tl-base/build.log; }
  # The 1B-shaped model (16 layers, d 2048, 32/8 heads, FFN 8192, Q4_K), written in the background.
  PYTHONPATH="$WORK/pydeps:$WORK/src/python" setsid nohup python3 -c "
from tensorlogic.models.testing import write_tiny_llama
write_tiny_llama('$MODEL1B.tmp', n_layers=16, d_model=2048, n_heads=32, n_kv_heads=8, d_ff=8192,
                 context_length=4096, weight_type='Q4_K')
import os; os.rename('$MODEL1B.tmp', '$MODEL1B')" > "$WORK/gen1b.log" 2>&1 < /dev/null &
  echo "1B model generation started"
  ;;
b)
  run_h100 check
  echo "== kernel benchmarks, after"; "$WORK/build/cpp/backends/cuda/test_cuda_vs_cpu" --bench-kernels 2>&1 | tee "$OUTDIR/kernels_after.log"
  echo "== kernel benchmarks, before"; /tmp/tl-base/build/cpp/backends/cuda/test_cuda_vs_cpu --bench-kernels 2>&1 | tee "$OUTDIR/kernels_before.log"
  LLAMA_WAIT_S=400 run_h100 bench
  cp "$WORK/logs/summary.txt" "$OUTDIR/summary_b.txt" 2>/dev/null
  cp "$WORK/logs/bench_gpu.json" "$OUTDIR/smollm2_after.json" 2>/dev/null
  echo "== SmolLM2, TL before"
  (cd "$BASESRC" && PYTHONPATH="$WORK/pydeps:$BASESRC/python" timeout 300 python3 bench/llm.py --gpu \
     --model "$WORK/model.gguf" --peers none --repeat 3 --json "$OUTDIR/smollm2_before.json" 2>&1 | tail -4)
  ;;
c)
  for i in $(seq 60); do [ -s "$MODEL1B" ] && break; sleep 5; done
  ls -la "$MODEL1B" || { cat "$WORK/gen1b.log"; exit 1; }
  echo "== 1B-shaped Q4_K, TL after and llama.cpp CUDA"
  (cd "$WORK/src" && PYTHONPATH="$WORK/pydeps:$WORK/src/python" timeout 400 python3 bench/llm.py --gpu \
     --model "$MODEL1B" --llama-cpp-path "$WORK/llama" --peers llama.cpp --repeat 3 \
     --json "$OUTDIR/1b_after.json" 2>&1 | tail -8)
  echo "== 1B-shaped Q4_K, TL before"
  (cd "$BASESRC" && PYTHONPATH="$WORK/pydeps:$BASESRC/python" timeout 200 python3 bench/llm.py --gpu \
     --model "$MODEL1B" --peers none --repeat 3 --json "$OUTDIR/1b_before.json" 2>&1 | tail -4)
  ;;
d)
  echo "== Adam step"
  (cd "$WORK/src" && PYTHONPATH="$WORK/pydeps:$WORK/src/python" timeout 500 python3 bench/gpu/adam_mlp_cuda.py \
     --baseline "$BASESRC/python" 2>&1 | tee "$OUTDIR/adam.log")
  ;;
*) echo "usage: $0 a|b|c|d" >&2; exit 2 ;;
esac
