#pragma once
// Buffer: one device allocation shared by tensors (views) and by the command buffers that use it.
// Invariant (R1): when the last shared_ptr<Buffer> goes away -- no tensor and no uncompleted
// command buffer holds it -- the deleter hands the block back to the pool; nothing else does.
// last_writer_seq / last_reader_seq are the sequence numbers of the last command buffers that
// wrote / read it, for host access waits (R2). 0 means "none".
#include <atomic>
#include <cstdint>
#include <memory>

#include "buffer_pool.h"

namespace tl {

class Device;

struct Buffer : std::enable_shared_from_this<Buffer> {
  Block block;
  std::shared_ptr<Device> device;  // keeps pool, queue and backend alive while the buffer lives
  std::atomic<uint64_t> last_writer_seq{0};
  std::atomic<uint64_t> last_reader_seq{0};

  void* data() const { return block.ptr; }
  size_t bytes() const { return block.bytes; }
};

}  // namespace tl
