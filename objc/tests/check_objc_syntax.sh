#!/usr/bin/env bash
# Compiles objc/*.mm with clang as Objective-C++ with ARC (-fsyntax-only) on a machine without
# Apple's SDK, against the declaration stubs in objc/tests/sdk_stubs/ (the subset of Foundation,
# Metal and libdispatch the backend uses, written from Apple's documented interfaces). This
# catches C++ errors, ARC ownership errors (e.g. a strong id in the wrong place), typos in
# selectors the stubs declare and wrong argument types; it cannot prove the stubs match the real
# SDK. Warnings are errors. Usage: objc/tests/check_objc_syntax.sh   (CXX=clang++ by default)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
objc="$(cd "$here/.." && pwd)"
root="$(cd "$objc/.." && pwd)"
cxx="${CXX:-clang++}"
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "check_objc_syntax: $cxx not found (install clang)" >&2
  exit 2
fi
failed=0
count=0
for source in "$objc"/*.mm; do
  count=$((count + 1))
  if ! "$cxx" -std=c++17 -fsyntax-only -x objective-c++ -fobjc-arc -fobjc-runtime=macosx-13.0 \
       -fblocks -Wall -Wextra -Werror -Wno-unused-parameter \
       -I "$here/sdk_stubs" -I "$objc" -I "$root/cpp/runtime" -I "$root/shaders" "$source"; then
    echo "check_objc_syntax: FAILED $source" >&2
    failed=1
  fi
done
if [ "$failed" -ne 0 ]; then
  echo "check_objc_syntax: FAILED"
  exit 1
fi
echo "check_objc_syntax: ok: $count Objective-C++ files compile with ARC against the SDK stubs"
