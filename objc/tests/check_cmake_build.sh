#!/usr/bin/env bash
# Builds the static library tl_metal with objc/CMakeLists.txt on a machine without Apple's SDK:
# clang generates code for the macOS Objective-C runtime ABI against the declaration stubs in
# objc/tests/sdk_stubs/, so the CMake file, ARC code generation, include paths and the shader
# embedding step are all exercised. Nothing is linked or run (there is no Objective-C runtime or
# Metal here). Usage: objc/tests/check_cmake_build.sh [BUILD_DIR]   (needs cmake and clang++)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
objc="$(cd "$here/.." && pwd)"
if [ $# -ge 1 ]; then
  work="$1"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
for tool in cmake clang++; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "check_cmake_build: $tool not found" >&2
    exit 2
  fi
done
mkdir -p "$work/src"
cat > "$work/src/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.18)
project(tl_metal_build_check LANGUAGES CXX)
add_subdirectory("$objc" objc)
CMAKE
CXX=clang++ OBJCXX=clang++ cmake -S "$work/src" -B "$work/build" -G "Unix Makefiles" \
  -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_OBJCXX_FLAGS=-fobjc-runtime=macosx-13.0 -fblocks -Werror -I$here/sdk_stubs" \
  >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" -j2 >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
library="$work/build/objc/libtl_metal.a"
nm -C "$library" >"$work/symbols.txt"
if ! grep -q " T tl::make_metal_backend()" "$work/symbols.txt"; then
  echo "check_cmake_build: $library does not define tl::make_metal_backend()" >&2
  exit 1
fi
echo "check_cmake_build: ok: $library built with objc/CMakeLists.txt against the SDK stubs"
