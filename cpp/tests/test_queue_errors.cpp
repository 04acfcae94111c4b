// R3: the first error a command buffer reports is raised (KernelFailure) at the next wait and
// only once; the rest of that command buffer is skipped; later work runs normally. Work in
// flight is bounded: with a limit of 2 command buffers, committing more waits.
// R2 for writers that never ran: outputs of skipped commands, and everything computed from a
// failed op's output, raise the failure on every read and when an op consumes them.
#include <atomic>

#include "test_util.h"

using namespace tl;

int main() {
  shutdown_device();
  auto dev = current_device();
  std::atomic<int> ran{0};
  dev->queue().encode([](Kernels&) { throw KernelError("planted failure"); }, {}, {});
  dev->queue().encode([&ran](Kernels&) { ran++; }, {}, {});  // same command buffer: skipped
  dev->queue().commit();
  bool raised = false;
  try {
    dev->synchronize();
  } catch (const KernelFailure& e) {
    raised = std::string(e.what()).find("planted failure") != std::string::npos;
  }
  CHECK(raised);
  CHECK_EQ(ran.load(), 0);
  dev->synchronize();  // raised once only
  Tensor x = tl_test::host_tensor({4}, 2.0f);
  Tensor y = binary(BinaryOp::Mul, x, x);
  CHECK(tl_test::read(y)[3] == 4.0f);

  // An out-of-range id is a run-time kernel error surfaced at the read.
  std::vector<int64_t> ids{0, 99};
  Tensor table = tl_test::host_tensor({4, 2}, 1.0f);
  Tensor idt = from_host(ids.data(), {2}, DType::I64);
  Tensor g = embedding(table, idt);
  bool gather_raised = false;
  try {
    (void)tl_test::read(g);
  } catch (const KernelFailure&) {
    gather_raised = true;
  }
  CHECK(gather_raised);

  // Skipped and dependent outputs carry the failure; earlier and independent ones do not.
  {
    dev->synchronize();
    Tensor before = tl_test::host_tensor({3}, 5.0f);
    Tensor before2 = binary(BinaryOp::Mul, before, before);
    Tensor bad = embedding(table, idt);
    Tensor skipped = binary(BinaryOp::Add, before, before);  // same command buffer, after the failure
    Tensor dependent = binary(BinaryOp::Mul, bad, bad);
    dev->queue().commit();
    int raised_reads = 0;
    try {  // encoded in a later command buffer: fails at encode (failure known) or at the read
      Tensor later_dependent = binary(BinaryOp::Add, dependent, dependent);
      (void)tl_test::read(later_dependent);
    } catch (const KernelFailure& e) {
      if (std::string(e.what()).find("embedding") != std::string::npos) raised_reads++;
    }
    for (const Tensor* t : {&bad, &skipped, &dependent, &skipped}) {
      try {
        (void)tl_test::read(*t);
      } catch (const KernelFailure& e) {
        if (std::string(e.what()).find("embedding") != std::string::npos) raised_reads++;
      }
    }
    CHECK_EQ(raised_reads, 5);
    CHECK(tl_test::read(before2)[0] == 25.0f);
    bool consume_raised = false;
    try {
      (void)binary(BinaryOp::Add, skipped, before);
    } catch (const KernelFailure&) {
      consume_raised = true;
    }
    CHECK(consume_raised);
    Tensor fresh = binary(BinaryOp::Add, before, before);
    CHECK(tl_test::read(fresh)[1] == 10.0f);
  }

  // Bounded in-flight work.
  dev->queue().set_max_in_flight(2, int64_t(1) << 40);
  std::atomic<int> max_seen{0};
  for (int i = 0; i < 10; ++i) {
    dev->queue().encode([&](Kernels& k) { k.delay(2000); }, {}, {});
    dev->queue().commit();
    int in_flight = static_cast<int>(dev->queue().stats().in_flight);
    if (in_flight > max_seen) max_seen = in_flight;
  }
  CHECK(max_seen.load() <= 2);
  dev->synchronize();
  CHECK_EQ(dev->queue().stats().in_flight, 0);
  shutdown_device();
  return tl_test::test_result("test_queue_errors");
}
