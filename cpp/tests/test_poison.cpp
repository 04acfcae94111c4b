// Poison mode: a buffer returned to the pool is filled with 0xFF bytes (NaN for floats), so a
// planted use-after-recycle -- a command that reads a buffer it did not retain, after the
// buffer was recycled -- reads NaN. Without poison the same stale read sees the old value,
// which is exactly the silent corruption poison exists to expose.
#include <cmath>

#include "test_util.h"

using namespace tl;

static float stale_read(bool poison) {
  shutdown_device();
  auto dev = current_device();
  dev->debug().poison = poison;
  float* stale = nullptr;
  {
    Tensor a = tl_test::host_tensor({256}, 5.0f);
    stale = static_cast<float*>(a.buffer->data());
  }  // recycled: nothing retains it any more
  dev->pool().collect();
  float out = 0.0f;
  // The planted bug: a command using the raw pointer without retaining the buffer.
  dev->queue().encode([stale, &out](Kernels&) { out = stale[100]; }, {}, {});
  dev->synchronize();
  shutdown_device();
  return out;
}

int main() {
  CHECK(std::isnan(stale_read(true)));
  CHECK(stale_read(false) == 5.0f);
  return tl_test::test_result("test_poison");
}
