#pragma once
// Device: one backend with its buffer pool, queue and debug switches, plus the process-wide
// "current device". Buffers hold a shared_ptr to their device, so live tensors keep it alive
// after shutdown(); ops only encode onto the current device.
// Invariant (R6): destroying a device drains its queue, then frees the cache and every
// reservation through the backend before the backend itself goes away.
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "buffer.h"
#include "buffer_pool.h"
#include "debug_config.h"
#include "queue.h"

namespace tl {

class Recording;

class Device : public std::enable_shared_from_this<Device> {
 public:
  // backend: "cpu", "cuda" or "metal"; threads <= 0: all cores. Throws BackendUnavailable.
  static std::shared_ptr<Device> create(const std::string& backend, int threads);
  // Adopts an already made backend (tests use this with their own kernels).
  static std::shared_ptr<Device> create(std::unique_ptr<Backend> backend, int threads);
  ~Device();

  Backend& backend() { return *backend_; }
  Kernels& kernels() { return backend_->kernels(); }
  BufferPool& pool() { return pool_; }
  Queue& queue() { return queue_; }
  DebugConfig& debug() { return debug_; }
  const std::string& backend_name() const { return backend_name_; }
  int threads() const { return threads_; }

  // A buffer of `bytes` for a tensor of (shape, dtype); released to the pool per R1.
  std::shared_ptr<Buffer> allocate(const std::vector<int64_t>& shape, DType dtype, size_t bytes);

  void synchronize() { queue_.synchronize(); pool_.collect(); }
  // Finish queued work without raising a recorded kernel error (it stays for the next wait).
  void drain() { queue_.drain(); pool_.collect(); }
  void clear_cache() { queue_.drain(); pool_.clear_cache(); }
  bool shut_down() const { return shut_down_; }
  // The recording ops append to while a compiled function records (recording.h); null otherwise.
  Recording* recording() const { return recording_; }
  void set_recording(Recording* r) { recording_ = r; }
  void abandon_recording(const std::string& reason);  // no-op when nothing records
  void mark_shut_down() { shut_down_ = true; }

 private:
  Device(std::unique_ptr<Backend> backend, int threads);
  DebugConfig debug_;
  std::unique_ptr<Backend> backend_;
  std::string backend_name_;
  int threads_ = 0;
  BufferPool pool_;
  Queue queue_;
  bool shut_down_ = false;
  Recording* recording_ = nullptr;
};

// The current device, created on first use from TL_BACKEND / TL_THREADS.
std::shared_ptr<Device> current_device();
// Selects the backend (empty: TL_BACKEND or "cpu"). Switching backends requires that no tensor
// of the old device is alive (std::runtime_error otherwise); the old device is drained first.
void init_device(const std::string& backend, int threads);
// Drains the queue and frees the pool of the current device; the next op starts a fresh one.
void shutdown_device();
bool has_current_device();
std::vector<std::string> available_backends();
int64_t live_tensor_count();

}  // namespace tl
