// The queue's lifetime rule (queue.h): a completion callback never holds the last reference to
// its Device. Work in flight when the device is shut down is drained by the shutdown; afterwards
// ops refuse the old device's tensors, a strided read of one still completes while the caller
// holds it, and dropping the last tensor destroys the old device cleanly (no callback outlives it).
#include <string>

#include "test_util.h"

using namespace tl;

int main() {
  shutdown_device();
  std::weak_ptr<Device> old_device;
  {
    auto dev = current_device();
    old_device = dev;
    dev->debug().delay_us = 200;               // kernels slower than encoding: work stays in flight
    dev->debug().ops_per_command_buffer = 2;
    Tensor x = tl_test::host_tensor({64, 32}, 1.0f);
    Tensor y = x;
    for (int i = 0; i < 40; ++i) y = binary(BinaryOp::Add, y, x);  // 41 everywhere, not waited for
    Tensor t = transpose(y, 0, 1);  // a strided view, read after the shutdown below
    dev.reset();
    CHECK(current_device()->queue().stats().in_flight > 0);

    shutdown_device();  // (2): drains the queue, so no callback is pending on the old device
    CHECK(!old_device.expired());  // x and y own it now
    CHECK_EQ(y.device().queue().stats().in_flight, 0);
    CHECK(y.device().shut_down());

    bool refused = false;  // (3): ops refuse tensors of a device that is no longer current
    try {
      (void)binary(BinaryOp::Mul, y, y);
    } catch (const TLError& e) {
      refused = std::string(e.what()).find("shut down") != std::string::npos;
    }
    CHECK(refused);

    // The one exception: reading a strided view encodes a copy on the old device and waits for it
    // while `t` (and so the device) is held here.
    std::vector<float> host = tl_test::read(t);
    CHECK(host.size() == 64 * 32 && host[0] == 41.0f && host[host.size() - 1] == 41.0f);
    CHECK_EQ(t.device().queue().stats().in_flight, 0);
  }
  // The tensors were the last owners: the old device is gone, destroyed on this thread, and a new
  // current device works.
  CHECK(old_device.expired());
  Tensor z = tl_test::host_tensor({4}, 3.0f);
  CHECK(tl_test::read(binary(BinaryOp::Mul, z, z))[2] == 9.0f);
  return tl_test::test_result("test_queue_lifetime");
}
