#pragma once
// Buffer: one device allocation shared by tensors (views) and by the command buffers that use it.
// Invariant (R1): when the last shared_ptr<Buffer> goes away -- no tensor and no uncompleted
// command buffer holds it -- the deleter hands the block back to the pool; nothing else does.
// last_writer_seq / last_reader_seq are the sequence numbers of the last command buffers that
// wrote / read it, for host access waits (R2). 0 means "none".
// sources / failure (guarded by the queue's encode mutex) carry kernel failures to the data they
// spoil: the commands this buffer's contents depend on that are not yet known to have run, and
// once one of them is known to have failed (or been skipped), that failure's message.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "buffer_pool.h"

namespace tl {

class Device;

// What became of one committed command buffer, filled in by its completion callback.
// failed_at: the index of the first command whose outputs are not to be trusted (the failing
// command on the CPU, where later ones are skipped; 0 when the device reported an error after
// every command was launched, since which kernel failed is then unknown).
struct CommandBufferOutcome {
  enum : int { kRunning = 0, kSucceeded = 1, kFailed = 2 };
  std::atomic<int> state{kRunning};     // kFailed is stored after failed_at and error (release)
  std::atomic<uint32_t> commands_run{0};
  uint32_t failed_at = 0;
  std::string error;
};

// "The contents depend on command `command` of that command buffer."
struct DataSource {
  std::shared_ptr<const CommandBufferOutcome> outcome;
  uint32_t command = 0;
};

struct Buffer : std::enable_shared_from_this<Buffer> {
  Block block;
  std::shared_ptr<Device> device;  // keeps pool, queue and backend alive while the buffer lives
  std::atomic<uint64_t> last_writer_seq{0};
  std::atomic<uint64_t> last_reader_seq{0};
  std::vector<DataSource> sources;
  std::shared_ptr<const std::string> failure;

  void* data() const { return block.ptr; }
  size_t bytes() const { return block.bytes; }
};

}  // namespace tl
