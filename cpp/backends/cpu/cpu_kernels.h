#pragma once
// The CPU implementation of tl::Kernels (cpp/runtime/kernels.h). Kernels run on the calling
// thread (the CPU backend's worker) and split large work over a persistent thread pool owned by
// the returned object; they never allocate device memory and report bad run-time data by
// throwing tl::KernelError. Compute is f32 (f16/bf16 converted on load and store); quantized
// weights are dequantized block by block inside the dot products, never into a full f32 copy.
//
// Code paths: compiled for the baseline x86-64 (no -march flags, so one wheel runs everywhere);
// the AVX2/FMA/F16C paths use function-level target attributes and are chosen at run time.
// TL_CPU_NO_SIMD=1 (read once) forces the portable paths: run cpp/tests/test_cpu_kernels.cpp
// both ways. The build (the top-level CMakeLists.txt) globs kernels_*.cpp beside this file.
// Threads: the pool has threads - 1 workers and the calling (backend worker) thread takes part;
// idle workers spin ~300 us (yielding) after a kernel, then sleep.
#include <memory>

#include "runtime/kernels.h"

namespace tl {

// threads <= 0: one per hardware core (TL_THREADS is read by the runtime, not here).
std::unique_ptr<Kernels> make_cpu_kernels(int threads);

}  // namespace tl
