#!/usr/bin/env bash
# Builds tensorlogic._core with the Metal backend on Linux: the runtime, bindings and CPU backend
# as the project builds them (TL_HAVE_METAL defined), the real objc/*.mm, the fake Objective-C
# runtime and fake Metal from this folder, and the shader kernels through the shim. The module and
# a copy of the Python package go to BUILD_DIR/stage, so that
#   PYTHONPATH=BUILD_DIR/stage TL_CROSS_BACKEND=metal pytest tests/runtime/test_backend_ops.py
# runs the project's own cross-backend suite against the Metal backend code.
# Usage: objc/tests/fake_metal/build_fake_metal_core.sh BUILD_DIR   (Linux x86-64; clang++, g++,
# cmake, pybind11). Runs run_fake_metal_tests.sh first (which builds the Metal-side objects).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
objc="$(cd "$here/../.." && pwd)"
root="$(cd "$objc/.." && pwd)"
work="$(mkdir -p "$1" && cd "$1" && pwd)"
# Always rebuild (and re-run) the fake-Metal objects: stale objects would test old sources.
FAKE_METAL_BUILD_ONLY=1 "$here/run_fake_metal_tests.sh" "$work" >/dev/null
mkdir -p "$work/core_obj"
py_includes=$(python3 -m pybind11 --includes)
suffix=$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
flags=(-std=c++17 -O1 -fPIC -fvisibility=hidden -DTL_HAVE_METAL
       -I "$root/cpp" -I "$root/cpp/runtime" -I "$root/cpp/backends/cpu")
objs=()
for src in "$root"/cpp/runtime/*.cpp "$root"/cpp/backends/cpu/cpu_backend.cpp "$root"/cpp/bindings/*.cpp; do
  out="$work/core_obj/$(basename "$(dirname "$src")")_$(basename "$src" .cpp).o"
  if [ ! -f "$out" ] || [ "$src" -nt "$out" ]; then
    # shellcheck disable=SC2086
    g++ "${flags[@]}" $py_includes -c "$src" -o "$out"
  fi
  objs+=("$out")
done
metal_objs=()
for o in "$work"/obj/*.o; do
  [ "$(basename "$o")" = "test.o" ] || metal_objs+=("$o")
done
mkdir -p "$work/stage"
rm -rf "$work/stage/tensorlogic"
cp -r "$root/python/tensorlogic" "$work/stage/tensorlogic"
rm -f "$work/stage/tensorlogic"/_core*.so
clang++ -shared -o "$work/stage/tensorlogic/_core$suffix" "${objs[@]}" "${metal_objs[@]}" -lpthread
echo "build_fake_metal_core: ok: $work/stage/tensorlogic/_core$suffix"
