#pragma once
// The CPU implementation of tl::Kernels (cpp/runtime/kernels.h). Kernels run on the calling
// thread (the CPU backend's worker) and split large work over a persistent thread pool owned by
// the returned object; they never allocate device memory and report bad run-time data by
// throwing tl::KernelError. Compute is f32 (f16/bf16 converted on load and store); quantized
// weights are dequantized block by block inside the dot products, never into a full f32 copy.
//
// Build notes for the top-level CMakeLists.txt (owned by the runtime helper):
//  - Sources: cpp/backends/cpu/thread_pool.cpp, kernels_common.cpp, kernels_elementwise.cpp,
//    kernels_reduce.cpp, kernels_matmul.cpp, kernels_quant.cpp, kernels_nn.cpp, cpu_kernels.cpp
//    (glob cpp/backends/cpu/kernels_*.cpp plus thread_pool.cpp and cpu_kernels.cpp; cpu_backend.*
//    is yours). Include directories: cpp/ (files include "runtime/kernels.h").
//  - Compile with -O3 (or -O2 -ftree-vectorize) for a baseline x86-64: do NOT add -march flags.
//    AVX2/FMA/F16C paths use function-level target attributes and are chosen at run time.
//    Link Threads::Threads.
//  - Test executable: test_cpu_kernels from cpp/tests/test_cpu_kernels.cpp (links the sources
//    above; no other dependency); register it with ctest as `test_cpu_kernels`.
//  - Benchmark (not a ctest): bench_kernels_cpu from bench/kernels_cpu.cpp, same sources.
//  - TL_CPU_NO_SIMD=1 (read once) forces the portable kernels; run the test both ways.
//  - Threads: the pool has threads - 1 workers; the calling (backend worker) thread takes part.
//    Idle workers spin ~300 us (yielding) after a kernel, then sleep.
#include <memory>

#include "runtime/kernels.h"

namespace tl {

// threads <= 0: one per hardware core (TL_THREADS is read by the runtime, not here).
std::unique_ptr<Kernels> make_cpu_kernels(int threads);

}  // namespace tl
