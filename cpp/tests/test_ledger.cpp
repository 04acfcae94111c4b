// The memory ledger: live bytes return to zero once tensors are gone and the queue drained;
// clear_cache returns every cached byte to the backend; a device's teardown frees everything
// it allocated (R6, checked with a backend wrapper that counts outstanding bytes); a planted
// leak (a tensor kept alive) is visible as non-zero live bytes.
#include <atomic>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "test_util.h"

using namespace tl;

// Forwards to the CPU backend and counts bytes allocated and not yet freed.
class CountingBackend final : public Backend {
 public:
  CountingBackend(std::unique_ptr<Backend> inner, std::atomic<int64_t>* outstanding)
      : inner_(std::move(inner)), outstanding_(outstanding) {}
  const char* name() const override { return inner_->name(); }
  bool memory_is_host_ram() const override { return inner_->memory_is_host_ram(); }
  void* allocate(size_t bytes) override {
    void* p = inner_->allocate(bytes);
    if (p) *outstanding_ += static_cast<int64_t>(bytes);
    return p;
  }
  void deallocate(void* ptr, size_t bytes) override {
    *outstanding_ -= static_cast<int64_t>(bytes);
    inner_->deallocate(ptr, bytes);
  }
  void copy_to_device(void* d, const void* s, size_t n) override { inner_->copy_to_device(d, s, n); }
  void copy_to_host(void* d, const void* s, size_t n) override { inner_->copy_to_host(d, s, n); }
  void fill_bytes(void* d, uint8_t v, size_t n) override { inner_->fill_bytes(d, v, n); }
  void submit(std::vector<Command> c, CompletionFn f) override { inner_->submit(std::move(c), std::move(f)); }
  void synchronize() override { inner_->synchronize(); }
  Kernels& kernels() override { return inner_->kernels(); }

 private:
  std::unique_ptr<Backend> inner_;
  std::atomic<int64_t>* outstanding_;
};

static void run_ops(int iters) {
  Tensor x = tl_test::host_tensor({16, 32}, 1.0f);
  for (int i = 0; i < iters; ++i) {
    Tensor y = binary_scalar(BinaryOp::Mul, x, 2.0, true, false);
    Tensor z = binary(BinaryOp::Add, y, x);
    Tensor s = reduce(ReduceOp::Sum, z, 1, false);
    x = binary_scalar(BinaryOp::Mul, x, 1.0, true, false);
    if (i % 7 == 0) (void)tl_test::read(s);
  }
  std::vector<float> v = tl_test::read(x);
  CHECK(v[0] == 1.0f);
}

int main() {
  shutdown_device();
  {
    auto dev = current_device();
    run_ops(50);
    dev->synchronize();
    MemoryStats s = dev->pool().stats();
    CHECK_EQ(s.live_bytes, 0);
    CHECK(s.cached_bytes > 0);
    CHECK(s.pool_hits > 0);
    CHECK_EQ(s.device_bytes, s.cached_bytes + s.reserved_bytes);

    // A planted leak: one tensor stays alive, and the ledger says so.
    Tensor leak = tl_test::host_tensor({1000}, 3.0f);
    dev->synchronize();
    MemoryStats l = dev->pool().stats();
    CHECK(l.live_bytes >= 4000);
    CHECK(l.live_bytes != 0);
    leak = Tensor();
    dev->synchronize();
    CHECK_EQ(dev->pool().stats().live_bytes, 0);

    dev->clear_cache();
    MemoryStats c = dev->pool().stats();
    CHECK_EQ(c.cached_bytes, 0);
    CHECK_EQ(c.device_bytes, 0);
    CHECK_EQ(c.allocations, c.frees);
  }
  shutdown_device();

  // Teardown frees everything, including a device whose tensors outlived shutdown().
  std::atomic<int64_t> outstanding{0};
  {
    auto backend = std::make_unique<CountingBackend>(make_cpu_backend_with(make_cpu_kernels(2)), &outstanding);
    std::shared_ptr<Device> dev = Device::create(std::move(backend), 2);
    Tensor kept;
    {
      Block b = dev->pool().acquire({64}, DType::F32, 256);
      dev->pool().release(b);
      dev->pool().reserve({8, 8}, DType::F32, 3, false);
      auto buf = dev->allocate({8, 8}, DType::F32, 256);
      kept.buffer = buf;
      kept.shape = {8, 8};
      kept.strides = {8, 1};
      CHECK(outstanding.load() > 0);
    }
    dev.reset();  // the tensor still holds the device
    CHECK(outstanding.load() > 0);
    kept = Tensor();  // last reference: the device is destroyed and frees everything
  }
  CHECK_EQ(outstanding.load(), 0);
  return tl_test::test_result("test_ledger");
}
