// Microbenchmark of the CPU kernels' hot paths (not a test): quantized linear as decode
// (matrix-vector, M = 1) and prefill (M = 128) on SmolLM2-135M shapes, with 1 and 2 threads.
// Reports the best-of-5-rounds time per call, weight bytes streamed per second (GB/s) and GFLOP/s.
// Build: the bench_kernels_cpu target, or
//   g++ -O3 -std=c++17 -Icpp bench/kernels_cpu.cpp cpp/backends/cpu/{thread_pool,cpu_kernels,kernels_*}.cpp -lpthread
// Run:   bench_kernels_cpu [seconds_per_case]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <random>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/half.h"

using namespace tl;

namespace {

View view2(void* p, DType t, int64_t r, int64_t c) {
  View v;
  v.data = p;
  v.dtype = t;
  v.ndim = 2;
  v.shape[0] = r;
  v.shape[1] = c;
  v.strides[0] = c;
  v.strides[1] = 1;
  return v;
}

std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::vector<uint8_t> w(row_bytes(t, cols) * rows);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  // Make every f16 scale a small finite value (offsets of d/m in the block).
  const int64_t bb = block_bytes(t);
  for (size_t off = 0; off + bb <= w.size(); off += bb) {
    uint16_t h = tl::cpu::f32_to_f16(0.01f);
    if (t == DType::F32) {
      float f = 0.01f;
      std::memcpy(&w[off], &f, 4);
    } else if (t == DType::Q6_K) {
      std::memcpy(&w[off + 208], &h, 2);
    } else {
      std::memcpy(&w[off], &h, 2);
      if (bb >= 4 && t != DType::Q8_0 && t != DType::Q4_0 && t != DType::Q5_0) std::memcpy(&w[off + 2], &h, 2);
    }
  }
  return w;
}

double bench_linear(Kernels& k, DType t, int64_t M, int64_t N, int64_t K, double seconds, std::mt19937& rng) {
  std::vector<uint8_t> w = random_weights(t, N, K, rng);
  std::vector<float> x(M * K), out(M * N);
  for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  View vx = view2(x.data(), DType::F32, M, K), vw = view2(w.data(), t, N, K), vo = view2(out.data(), DType::F32, M, N);
  k.linear(vx, vw, vo);  // warm-up
  // Best of 5 rounds: the figure least disturbed by other processes on a shared machine.
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    int iters = 0;
    auto t0 = std::chrono::steady_clock::now();
    double elapsed = 0;
    do {
      k.linear(vx, vw, vo);
      ++iters;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (elapsed < seconds / 5);
    best = std::min(best, elapsed / iters);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = argc > 1 ? std::atof(argv[1]) : 0.5;
  std::mt19937 rng(1);
  struct Shape { int64_t N, K; };
  const Shape shapes[] = {{1536, 576}, {576, 1536}, {49152, 576}};
  std::printf("%-6s %-6s %7s %7s %8s %12s %9s %9s\n", "dtype", "thr", "M", "N", "K", "us/call", "GB/s", "GFLOP/s");
  for (int threads : {1, 2}) {
    auto k = make_cpu_kernels(threads);
    for (DType t : {DType::Q4_1, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::F16, DType::F32}) {
      for (const Shape& s : shapes) {
        for (int64_t M : {1, 128}) {
          if (M == 128 && s.N == 49152) continue;  // prefill computes logits for the last row only
          if (s.K % block_elems(t) != 0) continue;   // K-quants need K % 256 == 0
          if (t != DType::Q4_1 && t != DType::Q8_0 && s.N == 49152 && threads == 1) continue;
          double sec = bench_linear(*k, t, M, s.N, s.K, seconds, rng);
          double bytes = static_cast<double>(row_bytes(t, s.K)) * s.N;
          double flops = 2.0 * M * s.N * s.K;
          std::printf("%-6s %-6d %7lld %7lld %8lld %12.1f %9.2f %9.2f\n", dtype_name(t), threads, (long long)M,
                      (long long)s.N, (long long)s.K, sec * 1e6, bytes / sec / 1e9, flops / sec / 1e9);
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
