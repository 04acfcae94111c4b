#!/usr/bin/env bash
# Builds and runs test_metal_backend_fake: the real objc/*.mm (clang, macOS Objective-C ABI,
# ARC, against objc/tests/sdk_stubs) linked with the fake Objective-C runtime and fake Metal in
# this folder, the real shader kernels through shaders/check/shim_executor.cpp, and the CPU
# kernels (cpp/backends/cpu) as the reference. Linux x86-64 only (objc_msgSend is x86-64 assembly).
# Usage: objc/tests/fake_metal/run_fake_metal_tests.sh [BUILD_DIR]   (needs clang++, g++, cmake)
# FAKE_METAL_BUILD_ONLY=1 builds without running.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
objc="$(cd "$here/../.." && pwd)"
root="$(cd "$objc/.." && pwd)"
shaders="$root/shaders"
if [ $# -ge 1 ]; then
  work="$1"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work/obj"
work="$(cd "$work" && pwd)"
if [ "$(uname -sm)" != "Linux x86_64" ]; then
  echo "run_fake_metal_tests: needs Linux x86-64 (found $(uname -sm))" >&2
  exit 2
fi
for tool in clang++ cmake; do
  command -v "$tool" >/dev/null 2>&1 || { echo "run_fake_metal_tests: $tool not found" >&2; exit 2; }
done

shader_list="$(ls "$shaders"/*.metal | sort | paste -sd '|')"
cmake "-DHEADERS=$shaders/../cpp/runtime/quant_blocks.h|$shaders/tl_params.h|$shaders/tl_common.h" "-DSHADERS=$shader_list" \
      "-DOUTPUT=$work/tl_metal_shaders_embedded.cpp" "-DOUTPUT_METAL=$work/unit.metal" \
      -P "$objc/embed_shaders.cmake"
sed -E 's/^(\s*)threadgroup\s+(\w+)\s+(\w+)\[/\1static \2 \3[/' "$work/unit.metal" >"$work/unit_exec.metal"

opt=(-O1 -g -fPIC -Wall -Wno-unused-parameter)
objs=()
compile() {  # compile OUTPUT_NAME ARGS...  (CC_FOR_NEXT overrides the compiler once)
  local out="$work/obj/$1.o"
  shift
  "${CC_FOR_NEXT:-clang++}" "${opt[@]}" "$@" -c -o "$out"
  objs+=("$out")
}
compile shim -std=c++20 -Wno-unknown-attributes -I "$shaders/check/shim" \
  "-DTL_SHIM_UNIT=\"$work/unit_exec.metal\"" "$shaders/check/shim_executor.cpp"
compile fake_objc_runtime -std=c++17 "$here/fake_objc_runtime.cpp"
compile fake_metal -std=c++17 "$here/fake_metal.cpp"
for mm in "$objc"/*.mm; do
  compile "$(basename "$mm" .mm)" -std=c++17 -x objective-c++ -fobjc-arc \
    -fobjc-runtime=macosx-13.0 -fblocks -I "$objc/tests/sdk_stubs" -I "$objc" \
    -I "$root/cpp/runtime" -I "$shaders" "$mm"
done
compile embedded -std=c++17 -I "$objc" "$work/tl_metal_shaders_embedded.cpp"
for cpu in "$root"/cpp/backends/cpu/thread_pool.cpp "$root"/cpp/backends/cpu/cpu_kernels.cpp \
           "$root"/cpp/backends/cpu/kernels_*.cpp; do
  # The CPU kernels use GCC's __builtin_cpu_supports("f16c"); build them as the project does.
  CC_FOR_NEXT="${CXX_CPU:-g++}" compile "cpu_$(basename "$cpu" .cpp)" -std=c++17 -I "$root/cpp" "$cpu"
done
compile test -std=c++17 -I "$root/cpp/runtime" -I "$root/cpp" -I "$root/cpp/backends/cpu" -I "$here" \
  "$here/test_metal_backend_fake.cpp"
clang++ -o "$work/test_metal_backend_fake" "${objs[@]}" -lpthread
if [ "${FAKE_METAL_BUILD_ONLY:-0}" != "1" ]; then
  "$work/test_metal_backend_fake"
fi
