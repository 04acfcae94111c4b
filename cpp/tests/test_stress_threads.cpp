// Several host threads allocate, encode, read back and release tensors on one device at the same
// time, with random delays injected before every kernel and small command buffers, so commits,
// completions, releases and reuse interleave. Every value read back must be right and the
// ledger must end at zero. Run under ThreadSanitizer in CI (no data race may be reported).
#include <thread>

#include "test_util.h"

using namespace tl;

int main() {
  shutdown_device();
  auto dev = current_device();
  dev->debug().delay_us = 50;
  dev->debug().poison = true;
  dev->debug().ops_per_command_buffer = 3;
  const int kThreads = 4, kIters = 60;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &bad] {
      try {
        for (int i = 0; i < kIters; ++i) {
          float base = static_cast<float>(t * 1000 + i);
          Tensor x = tl_test::host_tensor({7, 33}, base);
          Tensor y = binary_scalar(BinaryOp::Add, x, 1.0, true, false);  // base + 1
          Tensor z = binary(BinaryOp::Mul, y, y);                        // (base + 1)^2
          Tensor w = binary(BinaryOp::Sub, z, x);                        // (base+1)^2 - base
          x = Tensor();
          y = Tensor();
          if (i % 3 == 0) {
            std::vector<float> v = tl_test::read(w);
            float want = (base + 1) * (base + 1) - base;
            for (float f : v)
              if (f != want) {
                bad++;
                break;
              }
          }
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "thread failed: %s\n", e.what());
        bad++;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK_EQ(bad.load(), 0);
  dev->synchronize();
  MemoryStats s = dev->pool().stats();
  CHECK_EQ(s.live_bytes, 0);
  CHECK(s.pool_hits > 0);
  shutdown_device();
  return tl_test::test_result("test_stress_threads");
}
