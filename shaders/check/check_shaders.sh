#!/usr/bin/env bash
# Syntax and type check of the Metal shaders on a machine without Apple's Metal compiler.
# Each shaders/*.metal is compiled as C++17 with clang against shaders/check/shim/metal_stdlib
# (Metal's qualifiers, attributes, vector types and math as C++), with warnings as errors; then
# the single translation unit that objc/embed_shaders.cmake embeds for start-up compilation is
# generated and compiled the same way (this catches clashing names between shader files), and the
# generated C++ file holding it is compiled too. It cannot catch Metal-only rules (address-space
# mismatches, unsupported types): only xcrun metal or a Mac can. Exit 0 when everything compiles.
# Usage: shaders/check/check_shaders.sh   (CXX=clang++ by default; needs cmake for the unit check)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
shaders="$(cd "$here/.." && pwd)"
root="$(cd "$shaders/.." && pwd)"
cxx="${CXX:-clang++}"
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "check_shaders: $cxx not found (install clang)" >&2
  exit 2
fi
flags=(-std=c++17 -fsyntax-only -x c++ -Wall -Wextra -Werror -Wno-unknown-attributes
       -Wno-unused-parameter -I "$here/shim" -I "$shaders")
failed=0
count=0
for shader in "$shaders"/*.metal; do
  count=$((count + 1))
  if ! "$cxx" "${flags[@]}" "$shader"; then
    echo "check_shaders: FAILED $shader" >&2
    failed=1
  fi
done

if command -v cmake >/dev/null 2>&1; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  shader_list="$(ls "$shaders"/*.metal | sort | paste -sd '|')"
  cmake "-DHEADERS=$shaders/../cpp/runtime/quant_blocks.h|$shaders/tl_params.h|$shaders/tl_common.h" "-DSHADERS=$shader_list" \
        "-DOUTPUT=$work/tl_metal_shaders_embedded.cpp" "-DOUTPUT_METAL=$work/unit.metal" \
        -P "$root/objc/embed_shaders.cmake"
  if ! "$cxx" "${flags[@]}" "$work/unit.metal"; then
    echo "check_shaders: FAILED the embedded single-unit source" >&2
    failed=1
  fi
  if ! "$cxx" -std=c++17 -fsyntax-only -Wall -Wextra -Werror -I "$root/objc" \
       "$work/tl_metal_shaders_embedded.cpp"; then
    echo "check_shaders: FAILED the generated embedding file" >&2
    failed=1
  fi
else
  echo "check_shaders: cmake not found; skipped the embedded-unit check" >&2
fi

if [ "$failed" -ne 0 ]; then
  echo "check_shaders: FAILED"
  exit 1
fi
echo "check_shaders: ok: $count shader files and the embedded unit compile as C++ with the shim"
