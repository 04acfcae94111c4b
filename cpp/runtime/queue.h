#pragma once
// Queue: the device's one in-order stream of command buffers.
// Invariants (R2, R3, R4):
//  - commit_locked() is the only code that submits to the backend. It registers the completion
//    callback with the work, bounds work in flight (commit-and-wait) and gives each command
//    buffer the next sequence number; completed_seq only grows.
//  - A command buffer retains every buffer its commands read or write and drops them in its
//    completion callback, after which completed_seq covers it.
//  - The first error a command buffer reports is kept and raised (KernelFailure) at the next wait.
//  - Completion callbacks never throw, never block and never take the GIL.
//  - Lifetime: a completion callback drops its retained buffers *before* it calls complete(), and
//    every Buffer owns a reference to its Device, which owns this Queue. So a callback must never
//    hold the last reference to the Device, or complete() would run on a destroyed Queue. Three
//    rules guarantee it (test_queue_lifetime checks them; keep all three when changing any):
//    (1) while a device is current, the global handle (device.cpp) owns it; (2) it stops being
//    current only through init_device() or shutdown_device(), which drain its queue first, so no
//    callback is pending then; (3) afterwards ops refuse its tensors (op_device), so nothing is
//    committed on it again, except to_host's copy of a strided view, which waits for its own
//    command buffer while the caller still holds the tensor.
//  - R2 for writers that never ran: every buffer a command writes records the commands its
//    contents depend on (its own and, transitively, its inputs'). Once one of them is known to
//    have failed or been skipped, encoding a command that reads the buffer and reading it from
//    the host raise KernelFailure naming the op that failed, instead of handing out garbage.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend.h"
#include "buffer.h"
#include "debug_config.h"

namespace tl {

struct QueueStats {
  int64_t committed = 0;
  int64_t in_flight = 0;
  uint64_t completed_seq = 0;
  int64_t ops_encoded = 0;  // commands (Kernels calls) encoded so far, debug delays excluded
};

class Queue {
 public:
  Queue(Backend& backend, DebugConfig& debug);
  ~Queue();  // commits and waits for everything (errors are dropped)
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  // Appends one command to the open command buffer, retaining `reads` and `writes` and
  // stamping their last reader / writer sequence numbers. Commits every N commands.
  void encode(Command cmd, std::initializer_list<Buffer*> reads,
              std::initializer_list<Buffer*> writes);
  void encode(Command cmd, const std::vector<Buffer*>& reads, const std::vector<Buffer*>& writes);
  void commit();
  // Submits a replayed recording as one command buffer of its own (after the open one): stamps
  // reads/writes like encode() and retains `retained` until it completes.
  void submit_recorded(std::vector<Command> cmds, const std::vector<Buffer*>& reads,
                       const std::vector<Buffer*>& writes,
                       std::vector<std::shared_ptr<Buffer>> retained,
                       std::shared_ptr<const ReplayPlan> plan = nullptr);
  // Commits if `seq` is still open, waits until it completed, then raises any recorded error.
  void wait_seq(uint64_t seq);
  // Waits for b's writer, then raises if b's contents depend on a command that failed.
  void wait_for_writer(const Buffer& b);
  void wait_for_access(const Buffer& b);  // last writer and last reader (host writes)
  void synchronize();                     // commit and wait for everything, then raise errors
  void drain();  // commit and wait for everything; a recorded error stays for the next wait
  void raise_pending_error();
  QueueStats stats();

  void set_max_in_flight(int command_buffers, int64_t bytes);

 private:
  void commit_locked();
  // Drops b's sources known to have succeeded; records b's failure once one is known (mu_ held).
  static void settle_locked(Buffer& b);
  void complete(uint64_t seq, int64_t bytes, const std::string& error);

  Backend& backend_;
  DebugConfig& debug_;

  std::mutex mu_;  // open command buffer and submission order
  std::vector<Command> open_cmds_;
  std::vector<std::shared_ptr<Buffer>> open_retained_;
  std::shared_ptr<const ReplayPlan> open_plan_;  // set while the open command buffer is one replay
  int64_t open_new_bytes_ = 0;  // bytes of buffers first written by the open command buffer
  int open_ops_ = 0;
  std::atomic<int64_t> ops_encoded_{0};
  uint64_t open_seq_ = 1;  // sequence number the open command buffer will get
  std::shared_ptr<CommandBufferOutcome> open_outcome_;
  std::vector<DataSource> encode_sources_;  // scratch for encode(), reused

  std::mutex done_mu_;  // completion state, shared with completion callbacks
  std::condition_variable done_cv_;
  uint64_t completed_seq_ = 0;
  int64_t in_flight_ = 0;
  int64_t in_flight_bytes_ = 0;
  int64_t committed_ = 0;
  std::string first_error_;
  int max_in_flight_ = 8;
  // Memory bound: new output bytes of the command buffers in flight (TL_MAX_MB_IN_FLIGHT, default
  // 8 MiB on the CPU, 1 GiB on GPUs; one larger command buffer still runs alone), and the open
  // command buffer commits once its new outputs reach a quarter of that. Without it a fast host encodes a whole prefill ahead
  // of the kernels and every intermediate of it is alive at once.
  int64_t max_in_flight_bytes_ = int64_t(8) << 20;
  int64_t open_bytes_limit_ = int64_t(2) << 20;
};

}  // namespace tl
