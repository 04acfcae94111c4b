#!/usr/bin/env bash
# CUDA graphs for compiled replays, before/after on one GPU machine in two device calls, the
# "before" being the same build with TL_CUDA_GRAPHS=0 (launch by launch). Inputs beside this
# script's tree root, as the device tool's carry delivers them: .carry/whl (lark, gguf, diskcache,
# pytest and its dependencies for the device's Python), .carry/llama_sdist_stripped.tgz (for the
# llama.cpp CUDA peer; see run_h100.sh). Models are generated on the device with the real ones'
# shapes (tensorlogic.models.testing.write_tiny_llama): SmolLM2-135M (30 layers, d 576, 9/3 heads,
# FFN 1536, Q4_1 with a Q8_0 embedding) and the 1B-shaped Llama of issue 24 (16 layers, d 2048,
# 32/8 heads, FFN 8192, Q4_K); decode speed depends on the shapes and formats, not the values.
#   bench/gpu/graphs_ab.sh a   builds (run_h100.sh prepare: llama.cpp in the background), writes the
#                              models in the background, test_cuda_vs_cpu with graphs on and off,
#                              the cross-backend and compiled-function tests on CUDA, and the
#                              graph counters of one generation
#   bench/gpu/graphs_ab.sh b   waits for llama.cpp's build, then bench/llm.py --gpu on the
#                              SmolLM2-shaped model: TL (graphs on) and llama.cpp CUDA, then TL
#                              with TL_CUDA_GRAPHS=0
#   bench/gpu/graphs_ab.sh c   the same bench/llm.py pair for the 1B-shaped model
#   bench/gpu/graphs_ab.sh m   builds, test_cuda_vs_cpu, ncu_matvec.py, bench/llm.py on both models
#   bench/gpu/graphs_ab.sh k   test_cuda_vs_cpu --bench-kernels
#   bench/gpu/graphs_ab.sh p   builds, test_cuda_vs_cpu, ncu_matvec.py with and without the early
#                              weight loads (TL_CUDA_MATVEC_PREFETCH=0)
#   bench/gpu/graphs_ab.sh q   bench/llm.py on both models with and without them, interleaved; then
#                              where the 1B model's 512-token prefill spends its time
#                              (profile_prefill.py: wall, host, ncu), exact and TF32
#   bench/gpu/graphs_ab.sh r   builds, test_cuda_vs_cpu, the cross-backend pytest files on CUDA, the
#                              prefill profile of both models (exact, TF32, ncu), bench/llm.py on
#                              both models against BEFORE_ENV (default TL_CUDA_MATVEC_PREFETCH=0)
#   bench/gpu/graphs_ab.sh x   builds, test_cuda_vs_cpu, the cross-backend pytest files on CUDA, then
#                              the host's time per decoded token on both models
#                              (profile_decode_host.py) and the step's rate without host reads
#                              (decode_ceiling.py, with generation picking ids ahead or not)
#   bench/gpu/graphs_ab.sh v   (after a build with the llama.cpp sdist carried: p, r or a) both models: TL and llama.cpp CUDA, TL with BEFORE_ENV, TL
#                              with TL_CUDA_TF32=1
#   bench/gpu/graphs_ab.sh t   builds, test_cuda_vs_cpu, the model and learning tests on CUDA, the
#                              SmolLM2 shape's decode ceiling
#   bench/gpu/graphs_ab.sh u   builds, test_cuda_vs_cpu, bench/llm.py (1B shape) and ncu_matvec.py
#                              with Q4_K weight groups in pairs and without (TL_CUDA_MATVEC_PAIRS=0)
#   bench/gpu/graphs_ab.sh y   builds, test_cuda_vs_cpu, ncu's sections for the Q4_K matrix-vector
#                              kernel, bench/llm.py on both models against llama.cpp CUDA
#   bench/gpu/graphs_ab.sh z   builds (llama.cpp in the background when carried), test_cuda_vs_cpu,
#                              the cross-backend and model pytest files on CUDA, the 512-token
#                              prefill of both models with quantized weights on the f16 tensor cores
#                              (the default) and with f32 operands (TL_CUDA_LINEAR_F16=0), its
#                              kernels (ncu, 1B), the RSS breakdown of the SmolLM2 shape, then
#                              bench/llm.py on both models against llama.cpp CUDA
#   bench/gpu/graphs_ab.sh w   builds, test_cuda_vs_cpu, the backend-op, cross-backend, model and
#                              learning tests on CUDA
#   bench/gpu/graphs_ab.sh table1  builds (llama.cpp in the background), writes the models,
#                              test_cuda_vs_cpu, the cross-backend, model and learning tests on
#                              CUDA; then
#   bench/gpu/graphs_ab.sh table2  (warm) both models against llama.cpp CUDA and the Adam steps
#                              against PyTorch: issue 24's whole table in two calls
#   bench/gpu/graphs_ab.sh g N collects .carry/g/partN (N = 0..4: the real Gemma 3 270M Q4_K_M file
#                              in five pieces, one per call of a warm machine); with all five, the
#                              884-token prompt's greedy ids on CUDA against the CPU's
#                              (check_long_prompt.py), f16 tensor-core products and f32 operands
#   bench/gpu/graphs_ab.sh h   builds, test_cuda_vs_cpu, the SmolLM2 shape's decode kernels (ncu), then
#                              bench/llm.py on both models: now, with the device's pow in RoPE
#                              (TL_CUDA_ROPE_DEVICE_POW=1), with 256 keys per attention split
#                              (TL_CUDA_ATTN_MIN_CHUNK=256), now again
#   bench/gpu/graphs_ab.sh i   builds (llama.cpp in the background when carried), test_cuda_vs_cpu,
#                              bench/llm.py on both models with decode attention's value rows 16 at
#                              a time (now) and 8 (TL_CUDA_ATTN_ROWS8=1), interleaved, then both
#                              models against llama.cpp CUDA
#   bench/gpu/graphs_ab.sh l   builds (llama.cpp in the background when carried), test_cuda_vs_cpu
#                              with programmatic dependent launches (the default) and without
#                              (TL_CUDA_PDL=0), the cross-backend, fused-op, model and learning
#                              tests on CUDA, the graphs of one generation, then bench/llm.py on
#                              both models: now, TL_CUDA_PDL=0, TL_CUDA_L2_PREFETCH=0, interleaved
#   bench/gpu/graphs_ab.sh n   the same three interleaved again, then both models against llama.cpp
#                              CUDA (after l, on the warm machine)
#   bench/gpu/graphs_ab.sh o   builds, then both models with decode attention's keys per split
#                              block at 32, 64 and 128 (TL_CUDA_ATTN_MIN_CHUNK), the 1B shape with
#                              an f16 KV cache (llama.cpp's default) beside the exact f32 one, and
#                              the decode kernels (ncu) of the SmolLM2 shape at ~128 keys and of the
#                              1B shape at ~2,048
#   bench/gpu/graphs_ab.sh f   builds this tree and, beside it, the tree in .carry/base (a `git
#                              archive` of the commit to compare against), test_cuda_vs_cpu, the
#                              cross-backend and model tests on CUDA, then bench/llm.py on both
#                              models, this tree and the base alternated, two rounds
#   bench/gpu/graphs_ab.sh e   builds (llama.cpp in the background when carried), test_cuda_vs_cpu,
#                              the graphs of one generation, the RSS breakdown of the SmolLM2
#                              shape, then both models against llama.cpp CUDA with a row for TL's
#                              f16 KV cache (llama.cpp's default cache type) beside the exact f32 one
#   bench/gpu/graphs_ab.sh j   (warm, after e) the matrix-vector variants under programmatic
#                              dependent launches: now, TL_CUDA_MATVEC_PREFETCH=0 and =1,
#                              TL_CUDA_MATVEC_FOUR=0, TL_CUDA_MATVEC_PAIRS=0, two rounds
#   bench/gpu/graphs_ab.sh s   builds, test_cuda_vs_cpu, the backend-op and cross-backend tests on
#                              CUDA, then both models with the exact f32 KV cache and the f16 one
#   (BEFORE_ENV: the "before" variables of b and c; default TL_CUDA_GRAPHS=0)
#   bench/gpu/graphs_ab.sh G   builds, test_cuda_vs_cpu, the decode attention kernels (--bench)
#                              with the grouped-query kernel (default), without (TL_CUDA_ATTN_GQA=0)
#                              and with 32 and 128 keys per split block, the cross-backend, fused-op
#                              and model tests on CUDA, bench/llm.py on both models with and without
#                              it, then the RSS stages of the SmolLM2 shape (graphs on and off)
#   bench/gpu/graphs_ab.sh P   builds, test_cuda_vs_cpu with TL's f16 product kernel (default) and
#                              with cuBLAS (TL_CUDA_OWN_GEMM=0), the cross-backend and model tests on
#                              CUDA, then 512-token prefills of both models with TL_CUDA_OWN_GEMM=0-3,
#                              two rounds
#   bench/gpu/graphs_ab.sh F   builds (llama.cpp in the background when carried), test_cuda_vs_cpu,
#                              the cross-backend, backend-op, fused-op and model tests on CUDA, the
#                              prompt-sized product by TL's f16 kernel and by cuBLAS
#                              (TL_CUDA_OWN_GEMM=0), the RSS stages, both models against llama.cpp
#                              CUDA (with TL's f16 KV cache beside the f32 one), then, time allowing,
#                              TL with cuBLAS for the prompt's products
#   bench/gpu/graphs_ab.sh H   builds, test_cuda_vs_cpu, the decode attention kernels (--bench) with
#                              16, 32 (default) and 64 splits at most and 64 keys per split at least,
#                              bench/llm.py on both models with the grouped-query kernel and without,
#                              the RSS stages without cuBLAS (TL_CUDA_BLAS=0), the 1B shape's decode
#                              kernels at ~2,048 keys (ncu)
#   bench/gpu/graphs_ab.sh Q   builds (llama.cpp in the background when carried), test_cuda_vs_cpu,
#                              the one-row products by ncu with exact and 8-bit activations
#                              (TL_BENCH_MATVEC_Q8=1), bench/llm.py on both models with the exact
#                              path and --fast (8-bit activations), the cross-backend, fused-op and
#                              batching tests on CUDA
#   bench/gpu/graphs_ab.sh R   (warm, after Q) both models against llama.cpp CUDA, TL exact and --fast
#   bench/gpu/graphs_ab.sh S   where the time goes: the 1B decode kernels at ~128 and ~2,040 keys,
#                              the SmolLM2 prefill's kernels with TL's products and cuBLAS (ncu),
#                              both models exact and --fast
#   bench/gpu/graphs_ab.sh T   builds, test_cuda_vs_cpu, CUDA pytest, both models against llama.cpp
#                              CUDA, the learning tests on CUDA
#   bench/gpu/graphs_ab.sh V   builds, test_cuda_vs_cpu (then its attention group with 32- and
#                              64-row prefill tiles, its linear group with TL's f16 products), the
#                              512-token prefill of both models by prefill tile height and product
#                              kernel, bench/llm.py on the 1B shape with 16, 32 and 64 decode
#                              attention splits, the 1B decode kernels at ~2,040 keys (ncu)
#   bench/gpu/graphs_ab.sh U   the closing call: builds (llama.cpp in the background when carried),
#                              test_cuda_vs_cpu (then its attention group with 64-row prefill tiles
#                              and its linear group all through cuBLAS), CUDA pytest, both models
#                              against llama.cpp CUDA, the Adam step against PyTorch, the learning
#                              tests on CUDA as time allows
#   bench/gpu/graphs_ab.sh X   builds, TL's f16 product kernel's checks with 64-wide k-steps
#                              (TL_CUDA_GEMM_BK64=1) and unsplit (TL_CUDA_OWN_GEMM=1), 512-token
#                              prefills of both models with those variants alternated, then the
#                              Adam step against PyTorch (bench/gpu/adam_mlp_cuda.py)
#   bench/gpu/graphs_ab.sh L [N] builds (no peer), collects Gemma piece N (as g) if given, then the
#                              learn block's Adam step against the compiled one with the queue's and
#                              pool's counters, under the default and larger in-flight bounds
#   bench/gpu/graphs_ab.sh A [N] (warm, after a build) collects Gemma piece N if given, then the Adam
#                              step against PyTorch (adam_mlp_cuda.py)
#   bench/gpu/graphs_ab.sh d   TL alone with TL_CUDA_TF32=1 on both models; the learning tests on CUDA
set -u
ROOT=$(pwd)
export WORK=${WORK:-/tmp/tl-h100}
OUTDIR=${OUT:-/tmp/tl-ab}
mkdir -p "$OUTDIR" "$WORK"
export PYTHONUNBUFFERED=1
export TL_CUBLAS_PATH=${TL_CUBLAS_PATH:-$(find / -xdev -name 'libcublas.so.1[23]' 2>/dev/null | head -1)}
export PYTHONPATH="$WORK/pydeps:$WORK/src/python"
SMOL=$WORK/smollm2_shaped_q4_1.gguf
B1=$WORK/llama1b_q4k.gguf
for f in llama_sdist_stripped.tgz whl; do [ -e ".carry/$f" ] && [ ! -e "$f" ] && ln -s ".carry/$f" "$f"; done
T="$WORK/build/cpp/backends/cuda/test_cuda_vs_cpu"
bench_model() {  # TL (graphs on) and llama.cpp CUDA in one run, then TL with TL_CUDA_GRAPHS=0
  local m=$1 name
  name=$(basename "$m" .gguf)
  echo "== $name: TL (graphs on) and llama.cpp CUDA"
  timeout 300 python3 bench/llm.py --gpu --model "$m" --llama-cpp-path "$WORK/llama" --peers llama.cpp \
    --repeat 3 --json "$OUTDIR/${name}_after.json" 2>&1 | tail -9
  echo "== $name: TL with ${BEFORE_ENV:-TL_CUDA_GRAPHS=0}"
  env ${BEFORE_ENV:-TL_CUDA_GRAPHS=0} timeout 150 python3 bench/llm.py --gpu --model "$m" --peers none --repeat 3 \
    --json "$OUTDIR/${name}_before.json" 2>&1 | tail -4
}

tl_runs() {  # each argument "MODEL ENV": bench/llm.py with TL alone, ENV set (TL_NOTHING=1: none)
  local run
  for run in "$@"; do
    set -- $run
    for i in $(seq 120); do [ -s "$1" ] && break; sleep 2; done
    echo "== $(basename "$1" .gguf) $2"
    env "$2" timeout 100 python3 bench/llm.py --gpu --model "$1" --peers none --repeat 3 2>&1 | tail -1
  done
}

cuda_vs_cpu() {  # test_cuda_vs_cpu, its failures and count
  echo "== test_cuda_vs_cpu"; timeout 200 "$T" > "$OUTDIR/cuda_vs_cpu.log" 2>&1; grep -E "FAIL|checks" "$OUTDIR/cuda_vs_cpu.log" | tail -8
}

cuda_vs_cpu_only() {  # GROUP ENV...: test_cuda_vs_cpu --only GROUP under each ENV ("A=1 B=2" sets both)
  local group=$1 e
  shift
  for e in "$@"; do
    echo "== test_cuda_vs_cpu --only $group, $e"
    env $e timeout 120 "$T" --only "$group" 2>&1 | grep -E "FAIL|checks" | tail -4
  done
}

cuda_pytest() {  # the cross-backend, fused-op, backend-op and batching tests on CUDA
  echo "== pytest on CUDA"
  TL_BACKEND=cuda timeout 150 python3 -m pytest -q -p no:cacheprovider tests/runtime/test_cross_backend_model.py \
    tests/runtime/test_fused_ops.py tests/runtime/test_backend_ops.py tests/models/test_batching.py 2>&1 | tail -3
}

cuda_learning() {  # SECONDS: TL_BACKEND=cuda pytest tests/learning, its count and failures
  TL_BACKEND=cuda timeout "$1" python3 -m pytest -q -p no:cacheprovider -rf tests/learning 2>&1 | grep -E "passed|failed|^FAILED" | tail -12
}

adam_against_torch() {  # SECONDS: the Adam steps against PyTorch (adam_mlp_cuda.py), log in $OUTDIR/adam.log
  echo "== Adam step against PyTorch (adam_mlp_cuda.py)"
  timeout "$1" python3 bench/gpu/adam_mlp_cuda.py 2>&1 | tee "$OUTDIR/adam.log" | tail -40
}

against_llama() {  # once llama.cpp's background build is done: both models, TL against llama.cpp CUDA
  for i in $(seq 80); do [ -e "$WORK/llama_build.rc" ] && break; sleep 5; done
  echo "llama.cpp build rc: $(cat "$WORK/llama_build.rc" 2>/dev/null)"
  for m in "$SMOL" "$B1"; do
    for i in $(seq 60); do [ -s "$m" ] && break; sleep 2; done
    timeout 200 python3 bench/llm.py --gpu --model "$m" --llama-cpp-path "$WORK/llama" --peers llama.cpp \
      --repeat 3 --json "$OUTDIR/$(basename "$m" .gguf)_llm.json" 2>&1 | tail -9
  done
}

prepare_and_models() {  # the build (llama.cpp's in the background) and the models, in the background
  OUT="$WORK/logs" bash bench/gpu/run_h100.sh prepare
  cat "$WORK/logs/summary.txt"
  setsid nohup python3 -c "
from tensorlogic.models.testing import write_tiny_llama
import os
write_tiny_llama('$SMOL.tmp', n_layers=30, d_model=576, n_heads=9, n_kv_heads=3, d_ff=1536,
                 context_length=4096, rope_base=100000.0, weight_type='Q4_1', embedding_type='Q8_0', seed=3)
os.rename('$SMOL.tmp', '$SMOL')
write_tiny_llama('$B1.tmp', n_layers=16, d_model=2048, n_heads=32, n_kv_heads=8, d_ff=8192,
                 context_length=4096, weight_type='Q4_K')
os.rename('$B1.tmp', '$B1')" > "$WORK/gen.log" 2>&1 < /dev/null &
}

graph_stats() {  # the CUDA graphs of one 40-token generation on the SmolLM2 shape (TL_CUDA_LAUNCH_STATS=1)
  for i in $(seq 60); do [ -s "$SMOL" ] && break; sleep 2; done
  echo "== graphs used by a generation (TL_CUDA_LAUNCH_STATS=1, 40 tokens)"
  TL_CUDA_LAUNCH_STATS=1 timeout 120 python3 -c "
import gc
from tensorlogic import _core
from tensorlogic.apps.llm_session import LlmSession
with LlmSession('$SMOL', backend='cuda', context=256) as s:
    s.generate(list(range(3, 43)), 40, stop_at_eog=False)
gc.collect()
_core.shutdown()" 2>&1 | grep "tl-cuda"
}

pdl_runs() {  # both models: now, without programmatic dependent launches, without the L2 prefetch
  tl_runs "$SMOL TL_NOTHING=1" "$SMOL TL_CUDA_PDL=0" "$SMOL TL_CUDA_L2_PREFETCH=0" \
          "$B1 TL_NOTHING=1" "$B1 TL_CUDA_PDL=0" "$B1 TL_CUDA_L2_PREFETCH=0"
}

collect_gemma_part() {  # N: .carry/g/partN (a piece of the real Gemma 3 270M file) into $WORK
  [ -e "$ROOT/.carry/g/part$1" ] && cp "$ROOT/.carry/g/part$1" "$WORK/gemma.part$1"
  ls -la "$WORK"/gemma.part* 2>/dev/null | awk '{print $5, $9}'
}

learn_diag() {  # ENV...: the learn block's Adam step against the compiled one, per setting (adam_learn_diag.py)
  local args=() e
  for e in "$@"; do args+=(--env "$e"); done
  echo "== the learn block's Adam step (adam_learn_diag.py) at ${SECONDS}s"
  TL_BACKEND=cuda timeout 240 python3 bench/gpu/adam_learn_diag.py --steps 50 "${args[@]}" 2>&1 | tail -14
}

case "${1:-}" in
G)
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  for e in TL_NOTHING=1 TL_CUDA_ATTN_GQA=0 TL_CUDA_ATTN_GQA_CHUNK=32 TL_CUDA_ATTN_GQA_CHUNK=128; do
    echo "== decode attention kernels (test_cuda_vs_cpu --bench), $e"
    env "$e" timeout 100 "$T" --bench 2>&1 | grep -E "attention|same, f16" | sort | uniq
  done
  echo "== pytest on CUDA"
  TL_BACKEND=cuda timeout 240 python3 -m pytest -q -p no:cacheprovider tests/runtime/test_cross_backend_model.py \
    tests/runtime/test_fused_ops.py tests/models/test_architectures.py tests/models/test_compiled_decode.py \
    tests/models/test_greedy_ahead.py 2>&1 | tail -3
  tl_runs "$SMOL TL_NOTHING=1" "$SMOL TL_CUDA_ATTN_GQA=0" "$B1 TL_NOTHING=1" "$B1 TL_CUDA_ATTN_GQA=0"
  for e in TL_NOTHING=1 TL_CUDA_GRAPHS=0; do
    echo "== RSS stages, SmolLM2 shape, $e"; env "$e" timeout 60 python3 bench/gpu/rss_breakdown.py "$SMOL" --top 6
  done
  ;;
P)
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  echo "== test_cuda_vs_cpu, TL_CUDA_OWN_GEMM=0 (cuBLAS, started on first use)"
  TL_CUDA_OWN_GEMM=0 timeout 200 "$T" > "$OUTDIR/cuda_vs_cpu_cublas.log" 2>&1; grep -E "FAIL|checks" "$OUTDIR/cuda_vs_cpu_cublas.log" | tail -4
  echo "== pytest on CUDA"
  TL_BACKEND=cuda timeout 120 python3 -m pytest -q -p no:cacheprovider tests/runtime/test_cross_backend_model.py \
    tests/models/test_architectures.py 2>&1 | tail -2
  for i in $(seq 100); do [ -s "$B1" ] && break; sleep 2; done
  for round in 1 2; do
    for v in 0 1 2 3; do
      for m in "$SMOL" "$B1"; do
        echo "== round $round, TL_CUDA_OWN_GEMM=$v, $(basename "$m" .gguf): 512-token prefills"
        TL_CUDA_OWN_GEMM=$v timeout 60 python3 bench/gpu/profile_prefill.py "$m" --tokens 512 --runs 4 2>&1 | tail -2
      done
    done
  done
  ;;
Q)
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  echo "== one-row products (ncu): exact, 8-bit activations"
  timeout 240 python3 bench/gpu/ncu_matvec.py "$T" 3350 TL_BENCH_MATVEC_Q8=1 2>&1 | tail -42
  for m in "$SMOL" "$B1"; do
    for i in $(seq 100); do [ -s "$m" ] && break; sleep 2; done
    echo "== $(basename "$m" .gguf): exact and --fast"
    timeout 120 python3 bench/llm.py --gpu --model "$m" --peers none --tl-variants default,fast --repeat 3 2>&1 | tail -3
  done
  echo "== pytest on CUDA at ${SECONDS}s"
  TL_BACKEND=cuda timeout $((560 - SECONDS)) python3 -m pytest -q -p no:cacheprovider tests/runtime/test_cross_backend_model.py \
    tests/runtime/test_fused_ops.py tests/runtime/test_backend_ops.py tests/models/test_batching.py 2>&1 | tail -4
  ;;
R)
  cd "$WORK/src" || exit 1
  for i in $(seq 80); do [ -e "$WORK/llama_build.rc" ] && break; sleep 5; done
  echo "llama.cpp build rc: $(cat "$WORK/llama_build.rc" 2>/dev/null) at ${SECONDS}s"
  for m in "$SMOL" "$B1"; do
    timeout 250 python3 bench/llm.py --gpu --model "$m" --llama-cpp-path "$WORK/llama" --peers llama.cpp \
      --tl-variants default,fast --repeat 3 --json "$OUTDIR/$(basename "$m" .gguf)_llm.json" 2>&1 | tail -10
  done
  ;;
F)
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  echo "== pytest on CUDA"
  TL_BACKEND=cuda timeout 150 python3 -m pytest -q -p no:cacheprovider tests/runtime/test_cross_backend_model.py \
    tests/runtime/test_backend_ops.py tests/runtime/test_fused_ops.py tests/models/test_architectures.py 2>&1 | tail -3
  for e in TL_NOTHING=1 TL_CUDA_OWN_GEMM=0; do
    echo "== prompt-sized product (test_cuda_vs_cpu --bench), $e"; env "$e" timeout 60 "$T" --bench 2>&1 | grep "M=128"
  done
  for i in $(seq 100); do [ -s "$B1" ] && break; sleep 2; done
  echo "== RSS stages, SmolLM2 shape"; timeout 60 python3 bench/gpu/rss_breakdown.py "$SMOL" --top 6 2>&1 | tail -12
  for i in $(seq 80); do [ -e "$WORK/llama_build.rc" ] && break; sleep 5; done
  echo "llama.cpp build rc: $(cat "$WORK/llama_build.rc" 2>/dev/null) at ${SECONDS}s"
  for m in "$SMOL" "$B1"; do
    timeout 200 python3 bench/llm.py --gpu --model "$m" --llama-cpp-path "$WORK/llama" --peers llama.cpp \
      --tl-variants default,kv-f16 --repeat 3 --json "$OUTDIR/$(basename "$m" .gguf)_llm.json" 2>&1 | tail -10
  done
  if [ "$SECONDS" -lt 470 ]; then tl_runs "$B1 TL_CUDA_OWN_GEMM=0" "$SMOL TL_CUDA_OWN_GEMM=0"; fi
  ;;
H)
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  for e in TL_NOTHING=1 TL_CUDA_ATTN_GQA_SPLITS=16 TL_CUDA_ATTN_GQA_SPLITS=64 TL_CUDA_ATTN_GQA_CHUNK=64; do
    echo "== decode attention kernels (test_cuda_vs_cpu --bench), $e"
    env "$e" timeout 100 "$T" --bench 2>&1 | grep -E "attention|same, f16" | sort | uniq
  done
  tl_runs "$SMOL TL_NOTHING=1" "$SMOL TL_CUDA_ATTN_GQA=0" "$B1 TL_NOTHING=1" "$B1 TL_CUDA_ATTN_GQA=0"
  echo "== RSS stages, SmolLM2 shape, TL_CUDA_BLAS=0"; TL_CUDA_BLAS=0 timeout 60 python3 bench/gpu/rss_breakdown.py "$SMOL" --top 6
  echo "== llama1b_q4k decode kernels (ncu, 2,040-token prompt, 8 steps)"
  timeout 150 python3 bench/gpu/profile_prefill.py "$B1" --ncu --tokens 2040 --decode 8 2>&1 | head -16
  ;;
l)
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  echo "== test_cuda_vs_cpu, TL_CUDA_PDL=0"; TL_CUDA_PDL=0 timeout 200 "$T" > "$OUTDIR/cuda_vs_cpu_nopdl.log" 2>&1
  grep -E "FAIL|checks" "$OUTDIR/cuda_vs_cpu_nopdl.log" | tail -4
  echo "== pytest on CUDA"
  TL_BACKEND=cuda timeout 300 python3 -m pytest -q -p no:cacheprovider tests/runtime/test_backend_ops.py \
    tests/runtime/test_cross_backend_model.py tests/runtime/test_fused_ops.py tests/models/test_architectures.py \
    tests/models/test_compiled_decode.py tests/models/test_llama_tl.py tests/models/test_greedy_ahead.py 2>&1 | tail -3
  TL_BACKEND=cuda timeout 200 python3 -m pytest -q -p no:cacheprovider -x tests/learning 2>&1 | tail -2
  graph_stats
  pdl_runs
  ;;
f)
  BASE=$WORK/base
  rm -rf "$BASE" && cp -r "$ROOT/.carry/base" "$BASE"
  (cmake -S "$BASE" -B "$WORK/build_base" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTL_CUDA=ON -DTL_CUDA_ARCHITECTURES=90 \
     -DTL_BUILD_TESTS=OFF -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" -DPython_EXECUTABLE="$(command -v python3)" \
     && cmake --build "$WORK/build_base" -j 8) > "$WORK/build_base.log" 2>&1 &
  prepare_and_models
  wait
  echo "baseline build: $(tail -1 "$WORK/build_base.log")"
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  echo "== pytest on CUDA"
  TL_BACKEND=cuda timeout 240 python3 -m pytest -q -p no:cacheprovider tests/runtime/test_backend_ops.py \
    tests/runtime/test_cross_backend_model.py tests/models/test_architectures.py \
    tests/models/test_compiled_decode.py tests/models/test_llama_tl.py 2>&1 | tail -2
  for r in 1 2; do
    for m in "$SMOL" "$B1"; do
      for i in $(seq 60); do [ -s "$m" ] && break; sleep 2; done
      for tree in "$WORK/src" "$BASE"; do
        echo "== $(basename "$m" .gguf): $tree"
        (cd "$tree" && PYTHONPATH="$WORK/pydeps:$tree/python" timeout 100 python3 bench/llm.py --gpu --model "$m" \
           --peers none --repeat 3 2>&1 | grep -E '^\| tl')
      done
    done
  done
  ;;
s)
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  grep -E "kv F16" "$OUTDIR/cuda_vs_cpu.log" | head -3
  TL_BACKEND=cuda timeout 200 python3 -m pytest -q -p no:cacheprovider tests/runtime/test_backend_ops.py \
    tests/runtime/test_cross_backend_model.py tests/models/test_compiled_decode.py 2>&1 | tail -1
  for m in "$SMOL" "$B1"; do
    for i in $(seq 60); do [ -s "$m" ] && break; sleep 2; done
    timeout 120 python3 bench/llm.py --gpu --model "$m" --peers none --tl-variants default,kv-f16 --repeat 3 2>&1 | grep '^| tl'
  done
  ;;
j)
  cd "$WORK/src" || exit 1
  for r in 1 2; do
    for m in "$SMOL" "$B1"; do
      tl_runs "$m TL_NOTHING=1" "$m TL_CUDA_MATVEC_PREFETCH=0" "$m TL_CUDA_MATVEC_PREFETCH=1" \
              "$m TL_CUDA_MATVEC_FOUR=0" "$m TL_CUDA_MATVEC_PAIRS=0"
    done
  done
  ;;
e)
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  graph_stats
  echo "== RSS breakdown, SmolLM2 shape"
  timeout 120 python3 bench/gpu/rss_breakdown.py "$SMOL" --top 6 2>&1 | tail -14
  for i in $(seq 80); do [ -e "$WORK/llama_build.rc" ] && break; sleep 5; done
  echo "llama.cpp build rc: $(cat "$WORK/llama_build.rc" 2>/dev/null)"
  for m in "$SMOL" "$B1"; do
    timeout 240 python3 bench/llm.py --gpu --model "$m" --llama-cpp-path "$WORK/llama" --peers llama.cpp \
      --tl-variants default,kv-f16 --repeat 3 --json "$OUTDIR/$(basename "$m" .gguf)_llm.json" 2>&1 | tail -10
  done
  ;;
o)
  prepare_and_models
  cd "$WORK/src" || exit 1
  for m in "$SMOL" "$B1"; do
    tl_runs "$m TL_CUDA_ATTN_MIN_CHUNK=32" "$m TL_CUDA_ATTN_MIN_CHUNK=64" "$m TL_NOTHING=1"
  done
  echo "== llama1b_q4k: f32 and f16 KV cache"
  timeout 200 python3 bench/llm.py --gpu --model "$B1" --peers none --tl-variants default,kv-f16 --repeat 3 2>&1 | tail -3
  echo "== smollm2_shaped_q4_1 decode kernels (ncu, 128-token prompt, 16 steps)"
  timeout 240 python3 bench/gpu/profile_prefill.py "$SMOL" --ncu --tokens 128 --decode 16 2>&1 | head -16
  echo "== llama1b_q4k decode kernels (ncu, 2,040-token prompt, 8 steps)"
  timeout 240 python3 bench/gpu/profile_prefill.py "$B1" --ncu --tokens 2040 --decode 8 2>&1 | head -16
  ;;
n)
  cd "$WORK/src" || exit 1
  for i in $(seq 80); do [ -e "$WORK/llama_build.rc" ] && break; sleep 5; done
  pdl_runs
  against_llama
  ;;
a)
  prepare_and_models
  cd "$WORK/src" || exit 1
  echo "== test_cuda_vs_cpu (graphs on, the default)"; timeout 240 "$T" > "$OUTDIR/cuda_vs_cpu.log" 2>&1; grep -E "FAIL|checks" "$OUTDIR/cuda_vs_cpu.log" | tail -15
  echo "== test_cuda_vs_cpu, TL_CUDA_GRAPHS=0"; TL_CUDA_GRAPHS=0 timeout 240 "$T" > "$OUTDIR/cuda_vs_cpu_nographs.log" 2>&1; grep -E "FAIL|checks" "$OUTDIR/cuda_vs_cpu_nographs.log" | tail -5
  [ -n "${SKIP_PYTEST:-}" ] || { echo "== pytest on CUDA"
  timeout 300 python3 -m pytest -q -p no:cacheprovider tests/runtime/test_backend_ops.py 2>&1 | tail -2
  # (test_compiled_guards' subprocess case needs the device's pydeps on its PYTHONPATH: deselected)
  TL_BACKEND=cuda timeout 400 python3 -m pytest -q -p no:cacheprovider tests/interp/test_compiled_guards.py \
    -k "not debug_environment" tests/runtime/test_cross_backend_model.py tests/models/test_architectures.py \
    tests/runtime/test_fused_ops.py 2>&1 | tail -4; }
  graph_stats
  ;;
b)
  cd "$WORK/src" || exit 1
  for i in $(seq 60); do [ -e "$WORK/llama_build.rc" ] && break; sleep 5; done
  echo "llama.cpp build rc: $(cat "$WORK/llama_build.rc" 2>/dev/null)"
  bench_model "$SMOL"
  ;;
c)
  cd "$WORK/src" || exit 1
  for i in $(seq 80); do [ -e "$WORK/llama_build.rc" ] && break; sleep 5; done
  echo "llama.cpp build rc: $(cat "$WORK/llama_build.rc" 2>/dev/null)"
  for i in $(seq 60); do [ -s "$B1" ] && break; sleep 5; done
  bench_model "$B1"
  ;;
T)
  # the closing call (2026-11-28 session 2): builds (llama.cpp in the background when carried),
  # test_cuda_vs_cpu, the cross-backend, fused-op, backend-op and batching tests on CUDA, both
  # models against llama.cpp CUDA, then the learning tests on CUDA in the time left
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  cuda_pytest
  against_llama
  echo "== TL_BACKEND=cuda pytest tests/learning at ${SECONDS}s"
  TL_BACKEND=cuda timeout $((585 - SECONDS)) python3 -m pytest -q -p no:cacheprovider tests/learning 2>&1 | tail -4
  ;;
S)
  # where the time goes (2026-11-28 session 2): builds (llama.cpp in the background when carried),
  # test_cuda_vs_cpu, the 1B shape's decode kernels at ~128 and ~2,040 keys (ncu), the SmolLM2
  # shape's 512-token prefill kernels with TL's products (TL_CUDA_OWN_GEMM=3) and with cuBLAS, then
  # both models exact and --fast
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  for i in $(seq 100); do [ -s "$B1" ] && break; sleep 2; done
  for n in 120 2040; do
    echo "== 1B shape: $n-token prefill and 8 decode steps (ncu)"
    timeout 150 python3 bench/gpu/profile_prefill.py "$B1" --ncu --tokens $n --decode 8 2>&1 | head -22
  done
  for v in 3 0; do
    echo "== SmolLM2 shape: 512-token prefill, TL_CUDA_OWN_GEMM=$v (ncu, then wall)"
    TL_CUDA_OWN_GEMM=$v timeout 120 python3 bench/gpu/profile_prefill.py "$SMOL" --ncu --tokens 512 2>&1 | head -18
    TL_CUDA_OWN_GEMM=$v timeout 60 python3 bench/gpu/profile_prefill.py "$SMOL" --tokens 512 --runs 4 2>&1 | tail -2
  done
  for m in "$SMOL" "$B1"; do
    echo "== $(basename "$m" .gguf): exact and --fast"
    timeout 120 python3 bench/llm.py --gpu --model "$m" --peers none --tl-variants default,fast --repeat 3 2>&1 | tail -3
  done
  ;;
X)
  # TL's f16 products in k-steps of 64 and unsplit, then the Adam step (2026-11-28, session 3)
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu_only linear "TL_CUDA_OWN_GEMM=2 TL_CUDA_GEMM_BK64=1" "TL_CUDA_OWN_GEMM=1 TL_CUDA_GEMM_BK64=1" \
    "TL_CUDA_OWN_GEMM=1 TL_CUDA_GEMM_BK64=0"
  for i in $(seq 100); do [ -s "$B1" ] && break; sleep 2; done
  for round in 1 2; do
    for run in "$SMOL 3 0" "$SMOL 3 1" "$SMOL 1 0" "$SMOL 1 1" "$B1 3 0" "$B1 3 1"; do
      set -- $run
      echo "== $(basename "$1" .gguf): 512-token prefill, TL_CUDA_OWN_GEMM=$2 TL_CUDA_GEMM_BK64=$3"
      TL_CUDA_OWN_GEMM=$2 TL_CUDA_GEMM_BK64=$3 timeout 60 python3 bench/gpu/profile_prefill.py "$1" --tokens 512 --runs 4 2>&1 | tail -2
    done
  done
  echo "== Adam step at ${SECONDS}s"
  timeout $((590 - SECONDS)) python3 bench/gpu/adam_mlp_cuda.py 2>&1 | tee "$OUTDIR/adam.log" | tail -30
  ;;
U)
  # the closing call (2026-11-28, session 3)
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  cuda_vs_cpu_only attention TL_CUDA_ATTN_TILE_ROWS=64
  cuda_vs_cpu_only linear TL_CUDA_OWN_GEMM=0
  cuda_pytest
  against_llama
  echo "== Adam step at ${SECONDS}s"
  timeout $((500 - SECONDS)) python3 bench/gpu/adam_mlp_cuda.py 2>&1 | tee "$OUTDIR/adam.log" | tail -36
  if [ "$SECONDS" -lt 480 ]; then
    echo "== TL_BACKEND=cuda pytest tests/learning at ${SECONDS}s"
    TL_BACKEND=cuda timeout $((530 - SECONDS)) python3 -m pytest -q -p no:cacheprovider tests/learning 2>&1 | tail -4
  fi
  ;;
V)
  # prefill attention's tile height and TL's f16 products with the row scale in their epilogue,
  # decode attention's split merge (2026-11-28, session 3)
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  cuda_vs_cpu_only attention TL_CUDA_ATTN_TILE_ROWS=64 TL_CUDA_ATTN_TILE_ROWS=32
  cuda_vs_cpu_only linear TL_CUDA_OWN_GEMM=2
  echo "== decode attention (test_cuda_vs_cpu --bench)"
  timeout 60 "$T" --bench 2>&1 | grep -E "attention" | sort | uniq
  for i in $(seq 100); do [ -s "$B1" ] && break; sleep 2; done
  for run in "$SMOL 3 0" "$SMOL 3 16" "$SMOL 3 32" "$SMOL 3 64" "$SMOL 0 0" "$B1 0 0" "$B1 0 32" "$B1 0 64" "$SMOL 3 0"; do
    set -- $run
    echo "== $(basename "$1" .gguf): 512-token prefill, TL_CUDA_OWN_GEMM=$2 TL_CUDA_ATTN_TILE_ROWS=$3"
    TL_CUDA_OWN_GEMM=$2 TL_CUDA_ATTN_TILE_ROWS=$3 timeout 60 python3 bench/gpu/profile_prefill.py "$1" --tokens 512 --runs 4 2>&1 | tail -2
  done
  echo "== at ${SECONDS}s"
  tl_runs "$B1 TL_NOTHING=1" "$B1 TL_CUDA_ATTN_GQA_SPLITS=16" "$B1 TL_CUDA_ATTN_GQA_SPLITS=64"
  echo "== at ${SECONDS}s"
  if [ "$SECONDS" -lt 480 ]; then
    echo "== 1B shape: 2040-token prefill and 8 decode steps (ncu)"
    timeout $((590 - SECONDS)) python3 bench/gpu/profile_prefill.py "$B1" --ncu --tokens 2040 --decode 8 2>&1 | head -22
  fi
  ;;
d)
  # TL alone with TF32 tensor cores for f32 products (TL_CUDA_TF32=1: quantized weights in
  # prefill are dequantized to f32 slices, then multiplied as TF32), then the learning tests on CUDA
  cd "$WORK/src" || exit 1
  for m in "$SMOL" "$B1"; do
    for i in $(seq 90); do [ -s "$m" ] && break; sleep 2; done
    echo "== $(basename "$m" .gguf): TL with TL_CUDA_TF32=1"
    TL_CUDA_TF32=1 timeout 150 python3 bench/llm.py --gpu --model "$m" --peers none --repeat 3 \
      --json "$OUTDIR/$(basename "$m" .gguf)_tf32.json" 2>&1 | tail -3
  done
  echo "== TL_BACKEND=cuda pytest tests/learning"
  TL_BACKEND=cuda timeout 240 python3 -m pytest -q -p no:cacheprovider tests/learning 2>&1 | tail -4
  ;;
m)
  # test_cuda_vs_cpu, the matrix-vector kernels' own time (ncu), then decode of both models
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  timeout 200 python3 bench/gpu/ncu_matvec.py "$T" "${PEAK_GBS:-4800}"
  for m in "$SMOL" "$B1"; do
    for i in $(seq 120); do [ -s "$m" ] && break; sleep 2; done
    echo "== $(basename "$m" .gguf)"
    timeout 100 python3 bench/llm.py --gpu --model "$m" --peers none --repeat 3 2>&1 | tail -1
  done
  ;;
k)
  # The matrix-vector kernels against the bandwidth roofline, host-timed (test_cuda_vs_cpu --bench-kernels)
  timeout 150 "$T" --bench-kernels 2>&1 | grep -E "matvec|copy|launch" | sed -e 's/one weight (in L2)/L2/' -e 's/ of the copy bandwidth//'
  ;;
p)
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  timeout 200 python3 bench/gpu/ncu_matvec.py "$T" "${PEAK_GBS:-4800}" TL_CUDA_MATVEC_PREFETCH=0
  ;;
q)
  cd "$WORK/src" || exit 1
  for m in "$SMOL" "$B1"; do
    for i in $(seq 120); do [ -s "$m" ] && break; sleep 2; done
    for v in 1 0 1 0; do
      echo "== $(basename "$m" .gguf) TL_CUDA_MATVEC_PREFETCH=$v"
      TL_CUDA_MATVEC_PREFETCH=$v timeout 100 python3 bench/llm.py --gpu --model "$m" --peers none --repeat 3 2>&1 | tail -1
    done
  done
  echo "== prefill of the 1B shape, exact"; timeout 100 python3 bench/gpu/profile_prefill.py "$B1" --host 2>&1 | head -40
  echo "== prefill, TF32"; TL_CUDA_TF32=1 timeout 60 python3 bench/gpu/profile_prefill.py "$B1" 2>&1 | head -6
  echo "== prefill kernels (ncu)"; timeout 200 python3 bench/gpu/profile_prefill.py "$B1" --ncu 2>&1 | head -32
  ;;
r)
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  timeout 200 python3 -m pytest -q -p no:cacheprovider tests/runtime/test_backend_ops.py 2>&1 | tail -2
  TL_BACKEND=cuda timeout 200 python3 -m pytest -q -p no:cacheprovider tests/runtime/test_cross_backend_model.py \
    tests/runtime/test_fused_ops.py 2>&1 | tail -2
  for m in "$SMOL" "$B1"; do
    for i in $(seq 120); do [ -s "$m" ] && break; sleep 2; done
    echo "== prefill $(basename "$m" .gguf), exact"; timeout 60 python3 bench/gpu/profile_prefill.py "$m" 2>&1 | tail -2
    echo "== prefill, TF32"; TL_CUDA_TF32=1 timeout 60 python3 bench/gpu/profile_prefill.py "$m" 2>&1 | tail -2
  done
  echo "== prefill kernels (ncu), 1B, TF32"; TL_CUDA_TF32=1 timeout 200 python3 bench/gpu/profile_prefill.py "$B1" --ncu 2>&1 | head -12
  b=${BEFORE_ENV:-TL_CUDA_MATVEC_PREFETCH=0}
  for m in "$SMOL" "$B1"; do tl_runs "$m TL_NOTHING=1" "$m $b" "$m TL_NOTHING=1" "$m $b"; done
  ;;
x)
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  TL_BACKEND=cuda timeout 200 python3 -m pytest -q -p no:cacheprovider tests/runtime/test_cross_backend_model.py \
    tests/runtime/test_fused_ops.py 2>&1 | tail -2
  for m in "$SMOL" "$B1"; do
    for i in $(seq 120); do [ -s "$m" ] && break; sleep 2; done
    echo "== $(basename "$m" .gguf)"; timeout 100 python3 bench/gpu/profile_decode_host.py "$m" --tokens 128 2>&1 | tail -24
    echo "== $(basename "$m" .gguf): the device's own decode rate"; timeout 100 python3 bench/gpu/decode_ceiling.py "$m" 2>&1 | tail -7
  done
  ;;
u)
  # Q4_K weight groups in pairs (matvec.cuh) against TL_CUDA_MATVEC_PAIRS=0: build (no llama.cpp),
  # test_cuda_vs_cpu, bench/llm.py on the 1B shape both ways, then ncu_matvec.py both ways
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  for i in $(seq 120); do [ -s "$B1" ] && break; sleep 2; done
  for v in 1 0 1; do
    echo "== llama1b_q4k TL_CUDA_MATVEC_PAIRS=$v"
    TL_CUDA_MATVEC_PAIRS=$v timeout 100 python3 bench/llm.py --gpu --model "$B1" --peers none --repeat 3 2>&1 | tail -1
  done
  timeout 200 python3 bench/gpu/ncu_matvec.py "$T" "${PEAK_GBS:-4800}" TL_CUDA_MATVEC_PAIRS=0 | grep -E "type|q4_k"
  ;;
t)
  # the model tests on CUDA (greedy decoding picks ahead there too), the learning tests on CUDA,
  # then the decode ceiling of the SmolLM2 shape
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  TL_BACKEND=cuda timeout 300 python3 -m pytest -q -p no:cacheprovider tests/models/test_greedy_ahead.py \
    tests/models/test_architectures.py tests/models/test_gemma3_tl.py tests/models/test_llama_tl.py \
    tests/models/test_compiled_decode.py tests/runtime/test_cross_backend_model.py 2>&1 | tail -4
  TL_BACKEND=cuda timeout 240 python3 -m pytest -q -p no:cacheprovider tests/learning 2>&1 | tail -8
  for i in $(seq 60); do [ -s "$SMOL" ] && break; sleep 2; done
  timeout 100 python3 bench/gpu/decode_ceiling.py "$SMOL" 2>&1 | tail -7
  ;;
y)
  # one cold call: build, test_cuda_vs_cpu, Nsight Compute's sections (speed of light, occupancy,
  # launch statistics) for the Q4_K matrix-vector kernel on 8192x2048 and 2048x8192 from memory,
  # then bench/llm.py on both models against llama.cpp CUDA once its build is done
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  for skip in 164 172; do  # --bench-matvec's launches: Q4_1 80, Q8_0 80, then Q4_K 8 per shape
    timeout 120 /usr/local/cuda/bin/ncu --clock-control none --section SpeedOfLight --section Occupancy \
      --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis -k regex:matvec \
      --launch-skip $skip --launch-count 1 "$T" --bench-matvec > "$OUTDIR/ncu_q4k_$skip.txt" 2>&1
    grep -E "fused_matvec|Duration|Throughput|Occupancy|Registers|Block Limit|Stall|Warp Cycles|Grid Size|Shared Memory Config|Waves|Bandwidth" \
      "$OUTDIR/ncu_q4k_$skip.txt" | head -40
  done
  against_llama
  ;;
z)
  prepare_and_models
  cd "$WORK/src" || exit 1
  echo "== test_cuda_vs_cpu"; timeout 200 "$T" > "$OUTDIR/cuda_vs_cpu.log" 2>&1
  grep -E "FAIL|checks|f16 range" "$OUTDIR/cuda_vs_cpu.log" | tail -12
  TL_BACKEND=cuda timeout 240 python3 -m pytest -q -p no:cacheprovider -rf tests/runtime/test_cross_backend_model.py \
    tests/runtime/test_fused_ops.py tests/runtime/test_backend_ops.py tests/models/test_greedy_ahead.py \
    tests/models/test_compiled_decode.py tests/models/test_llama_tl.py 2>&1 | tail -8
  for m in "$SMOL" "$B1"; do
    for i in $(seq 120); do [ -s "$m" ] && break; sleep 2; done
    echo "== prefill $(basename "$m" .gguf), f16 tensor cores (default)"; timeout 60 python3 bench/gpu/profile_prefill.py "$m" 2>&1 | tail -1
    echo "== prefill, TL_CUDA_LINEAR_F16=0"; TL_CUDA_LINEAR_F16=0 timeout 60 python3 bench/gpu/profile_prefill.py "$m" 2>&1 | tail -1
  done
  echo "== prefill kernels (ncu), 1B, default"; timeout 200 python3 bench/gpu/profile_prefill.py "$B1" --ncu 2>&1 | head -14
  echo "== RSS, SmolLM2 shape"; timeout 100 python3 bench/gpu/rss_breakdown.py "$SMOL" 2>&1 | tail -24
  against_llama
  ;;
i)
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  for i in $(seq 120); do [ -s "$B1" ] && break; sleep 2; done
  tl_runs "$B1 TL_NOTHING=1" "$B1 TL_CUDA_ATTN_ROWS8=1" "$B1 TL_NOTHING=1" "$B1 TL_CUDA_ATTN_ROWS8=1" \
    "$SMOL TL_NOTHING=1" "$SMOL TL_CUDA_ATTN_ROWS8=1"
  against_llama
  ;;
h)
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  for i in $(seq 120); do [ -s "$B1" ] && break; sleep 2; done
  echo "== SmolLM2 shape: 128-token prefill and 16 decode steps (ncu)"
  timeout 200 python3 bench/gpu/profile_prefill.py "$SMOL" --ncu --tokens 128 --decode 16 2>&1 | head -12
  for m in "$SMOL" "$B1"; do
    tl_runs "$m TL_NOTHING=1" "$m TL_CUDA_ROPE_DEVICE_POW=1" "$m TL_CUDA_ATTN_MIN_CHUNK=256" "$m TL_NOTHING=1"
  done
  ;;
w)
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  TL_BACKEND=cuda timeout 200 python3 -m pytest -q -p no:cacheprovider -rf tests/runtime/test_backend_ops.py \
    tests/runtime/test_cross_backend_model.py tests/runtime/test_fused_ops.py 2>&1 | tail -4
  TL_BACKEND=cuda timeout 300 python3 -m pytest -q -p no:cacheprovider -rf tests/models/test_greedy_ahead.py \
    tests/models/test_architectures.py tests/models/test_gemma3_tl.py tests/models/test_llama_tl.py \
    tests/models/test_compiled_decode.py 2>&1 | grep -E "passed|failed|^FAILED" | tail -12
  cuda_learning 300
  ;;
L)
  # the learn block's Adam step (2026-12-06): builds (no peer), collects Gemma piece N if given,
  # the step under the queue's and pool's settings
  OUT="$WORK/logs" bash bench/gpu/run_h100.sh prepare
  cat "$WORK/logs/summary.txt"
  [ -n "${2:-}" ] && collect_gemma_part "$2"
  cd "$WORK/src" || exit 1
  learn_diag TL_NOTHING=1 "TL_MAX_MB_IN_FLIGHT=8192 TL_MAX_COMMAND_BUFFERS_IN_FLIGHT=64"
  ;;
A)
  # (warm, after a build) collects Gemma piece N if given, then the Adam step against PyTorch
  [ -n "${2:-}" ] && collect_gemma_part "$2"
  cd "$WORK/src" || exit 1
  adam_against_torch 400
  ;;
g)
  collect_gemma_part "${2:?part number}"
  if [ "$(ls "$WORK"/gemma.part* 2>/dev/null | wc -l)" = 5 ]; then
    cat "$WORK"/gemma.part0 "$WORK"/gemma.part1 "$WORK"/gemma.part2 "$WORK"/gemma.part3 "$WORK"/gemma.part4 > "$WORK/gemma.gguf"
    cd "$WORK/src" || exit 1
    echo "== real Gemma 3 270M, 884-token prompt, f16 tensor-core products (default)"
    timeout 250 python3 bench/gpu/check_long_prompt.py "$WORK/gemma.gguf" --tokens 884 2>&1 | tail -3
    echo "== the same, TL_CUDA_LINEAR_F16=0"
    TL_CUDA_LINEAR_F16=0 timeout 250 python3 bench/gpu/check_long_prompt.py "$WORK/gemma.gguf" --tokens 884 2>&1 | tail -3
  fi
  ;;
table1)
  # issue 24's table, call 1 of 2: builds (llama.cpp in the background, sdist carried), writes the
  # models, test_cuda_vs_cpu, the cross-backend, model and learning tests on CUDA
  prepare_and_models
  cd "$WORK/src" || exit 1
  cuda_vs_cpu
  cuda_pytest
  cuda_learning 240
  ;;
table2)
  # issue 24's table, call 2 of 2 (warm, after table1): both models against llama.cpp CUDA, then the
  # Adam steps against PyTorch
  cd "$WORK/src" || exit 1
  against_llama
  adam_against_torch 200
  ;;
v)
  cd "$WORK/src" || exit 1
  for i in $(seq 80); do [ -e "$WORK/llama_build.rc" ] && break; sleep 5; done
  echo "llama.cpp build rc: $(cat "$WORK/llama_build.rc" 2>/dev/null)"
  for m in "$SMOL" "$B1"; do
    bench_model "$m"
    echo "== $(basename "$m" .gguf): TL with TL_CUDA_TF32=1"
    TL_CUDA_TF32=1 timeout 150 python3 bench/llm.py --gpu --model "$m" --peers none --repeat 3 \
      --json "$OUTDIR/$(basename "$m" .gguf)_tf32.json" 2>&1 | tail -1
  done
  ;;
*) echo "usage: $0 a|b|c|d|k|m|p|q|r|t|u|v|x|y" >&2; exit 2 ;;
esac
