#!/usr/bin/env bash
# Stressed-configuration checks on the CUDA backend, after run_gpu_checks.sh has built the tree
# (same working directory): the runtime tests and the model comparison with poison on recycle,
# delay injection and no caching switched on, and every example program run on CUDA and on the
# CPU with their outputs compared. Appends to $OUT/stress.log.
set -u
OUT=${OUT:-$PWD/build/gpu-logs}
LOG="$OUT/stress.log"
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
for cfg in "TL_DEBUG_POISON=1 TL_DEBUG_DELAY_US=200" "TL_DEBUG_POISON=1 TL_NO_CACHE=1 TL_OPS_PER_COMMAND_BUFFER=3"; do
  echo "== tests/runtime on cuda with $cfg" >> "$LOG"
  env $cfg TL_BACKEND=cuda timeout 240 python3 -m pytest -q -p no:cacheprovider tests/runtime -rf \
    --ignore=tests/runtime/test_backend_ops.py --ignore=tests/runtime/test_cross_backend_model.py >> "$LOG" 2>&1
  echo "== model cross-backend (30 layers) with $cfg" >> "$LOG"
  env $cfg TL_CROSS_MODEL_LAYERS=30 timeout 240 python3 -m pytest -q -s -p no:cacheprovider -rf \
    tests/runtime/test_cross_backend_model.py >> "$LOG" 2>&1
done
echo "== examples: cuda vs cpu output" >> "$LOG"
for f in examples/*.tl; do
  case "$f" in *chat*|*llm*) continue;; esac
  a=$(timeout 60 python3 -m tensorlogic run --backend cpu "$f" 2>&1); ra=$?
  b=$(timeout 60 python3 -m tensorlogic run --backend cuda "$f" 2>&1); rb=$?
  if [ "$a" == "$b" ] && [ $ra == $rb ]; then echo "same output: $f (rc $ra)" >> "$LOG";
  else echo "DIFFERENT: $f (rc cpu $ra, cuda $rb)" >> "$LOG"; diff <(echo "$a") <(echo "$b") | head -20 >> "$LOG"; fi
done
grep -E "^== |passed|failed|FAILED|same output|DIFFERENT|greedy" "$LOG"
