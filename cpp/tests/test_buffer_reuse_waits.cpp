// R1: a buffer referenced only by an unfinished command buffer is never handed out again.
// A command blocks on a latch so its command buffer stays unfinished while the host drops the
// only tensor that referenced the buffer and allocates many buffers of the same size. None of
// them may be the held buffer, and the blocked command must still read the value written
// before the drop. After the latch opens and the queue drains, the buffer is reused (so the
// first check could have failed).
#include <atomic>
#include <condition_variable>
#include <mutex>

#include "test_util.h"

using namespace tl;

struct Latch {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void wait() {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return open; });
  }
  void release() {
    std::lock_guard<std::mutex> l(mu);
    open = true;
    cv.notify_all();
  }
};

int main() {
  shutdown_device();
  auto dev = current_device();
  dev->debug().poison = false;
  const Shape shape{1024};
  Latch latch;
  std::atomic<float> seen{0.0f};

  void* held_ptr = nullptr;
  {
    Tensor a = tl_test::host_tensor(shape, 42.0f);
    held_ptr = a.buffer->data();
    float* p = static_cast<float*>(held_ptr);
    dev->queue().encode(
        [&latch, &seen, p](Kernels&) {
          latch.wait();
          seen = p[1023];
        },
        {a.buf()}, {});
    dev->queue().commit();
  }  // the tensor is gone; only the committed, blocked command buffer references the buffer

  std::vector<Tensor> others;
  bool reused = false;
  for (int i = 0; i < 64; ++i) {
    others.push_back(tl_test::host_tensor(shape, 7.0f));
    if (others.back().buffer->data() == held_ptr) reused = true;
    if (i % 8 == 7) others.clear();  // recycle the others so the pool has free blocks
  }
  CHECK(!reused);
  MemoryStats mid = dev->pool().stats();
  CHECK(mid.live_bytes >= 4096);  // the held buffer still counts as live

  latch.release();
  dev->synchronize();
  CHECK(seen.load() == 42.0f);

  // Now the buffer is free: the pool hands it out again.
  others.clear();
  dev->pool().collect();
  bool reused_after = false;
  std::vector<Tensor> again;
  for (int i = 0; i < 16 && !reused_after; ++i) {
    again.push_back(tl_test::host_tensor(shape, 1.0f));
    reused_after = again.back().buffer->data() == held_ptr;
  }
  CHECK(reused_after);
  again.clear();
  shutdown_device();
  return tl_test::test_result("test_buffer_reuse_waits");
}
