// R7 reservations: tensors of exactly the reserved (shape, dtype) take reserved buffers first
// (hits); when all are taken allocation falls back to the pool and counts a miss; released
// reserved buffers go back to their reservation, never to the general cache.
#include "test_util.h"

using namespace tl;

int main() {
  shutdown_device();
  auto dev = current_device();
  BufferPool& pool = dev->pool();
  pool.reserve({4, 8}, DType::F32, 2, false);
  pool.reserve({3}, DType::I64, 1, true);
  MemoryStats s0 = pool.stats();
  CHECK_EQ(s0.reserved_bytes, 4 * 8 * 4 * 2 + 3 * 8);
  CHECK_EQ(s0.live_bytes, 0);

  {
    Tensor a = tl_test::host_tensor({4, 8}, 1.0f);
    Tensor b = tl_test::host_tensor({4, 8}, 2.0f);
    Tensor c = tl_test::host_tensor({4, 8}, 3.0f);  // reservation exhausted: a miss
    Tensor other = tl_test::host_tensor({8, 4}, 1.0f);  // different shape: not counted at all
    CHECK(a.buffer->block.reservation != nullptr);
    CHECK(b.buffer->block.reservation != nullptr);
    CHECK(c.buffer->block.reservation == nullptr);
    CHECK(other.buffer->block.reservation == nullptr);
    std::vector<Reservation> rs = pool.reservations();
    for (const Reservation& r : rs) {
      if (r.shape == Shape{4, 8}) {
        CHECK_EQ(r.hits, 2);
        CHECK_EQ(r.misses, 1);  // c (the sum below comes later)
        CHECK_EQ(static_cast<int64_t>(r.blocks.size() - r.free.size()), 2);  // taken
      }
    }
    // Values survive: reserved memory behaves like any other buffer.
    Tensor sum = binary(BinaryOp::Add, a, b);
    CHECK(tl_test::read(sum)[31] == 3.0f);
  }
  dev->synchronize();
  MemoryStats s1 = pool.stats();
  CHECK_EQ(s1.reservation_hits, 2);
  CHECK_EQ(s1.reservation_misses, 2);  // c and the sum
  CHECK_EQ(s1.live_bytes, 0);
  for (const Reservation& r : pool.reservations()) CHECK(r.free.size() == r.blocks.size());
  // The reserved blocks are not in the general cache: clearing it keeps them.
  dev->clear_cache();
  CHECK_EQ(pool.stats().reserved_bytes, s0.reserved_bytes);
  {
    Tensor a = tl_test::host_tensor({4, 8}, 1.0f);
    CHECK(a.buffer->block.reservation != nullptr);
  }
  dev->synchronize();
  CHECK_EQ(pool.stats().reservation_hits, 3);
  bool threw = false;
  try {
    pool.reserve({-1}, DType::F32, 1, false);
  } catch (const ShapeError&) {
    threw = true;
  }
  CHECK(threw);
  shutdown_device();
  return tl_test::test_result("test_reservations");
}
