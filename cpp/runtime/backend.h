#pragma once
// The backend interface: the only things a device does for the runtime. A backend allocates and
// frees device memory, copies between host and device, runs a committed command buffer
// asynchronously (in submission order) and reports its completion, and synchronizes. It never
// decides when a buffer is free: buffer lifetimes, ordering, host-read waits and the ledger live
// in the runtime (cpp/runtime/), once, for every backend (docs/runtime.md, rules R1-R4).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels.h"

namespace tl {

// One encoded op: calls exactly one Kernels method (with Views captured by value).
using Command = std::function<void(Kernels&)>;

// What each command of a replayed compiled function is (Recording::replay), so that a backend
// may keep state per recording (the CUDA backend captures the body into one CUDA graph):
//  - Static: the same command, with the same buffers and values, at every replay;
//  - Dynamic: rebuilt at each replay from the call's scalar inputs: the same kernel on the same
//    buffers, but its position, key count or view offset (and so its arguments) change;
//  - Outside: a copy between the caller's tensors and the recording's (an input copied in, a
//    result copied out): other buffers at each replay.
enum class ReplayCommandKind : uint8_t { Static, Dynamic, Outside };
struct ReplayPlan {
  uint64_t recording_id = 0;  // unique per recording for the process's lifetime (never reused)
  std::vector<ReplayCommandKind> kinds;  // one per command of the replay's command buffer
};

// Called exactly once per submitted command buffer, from any thread, when all its commands have
// finished. `error` is empty on success, else the first error message (later commands of that
// command buffer are skipped). It must not throw, take the GIL, or block.
using CompletionFn = std::function<void(const std::string& error)>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;  // "cpu", "cuda", "metal"
  // True when device buffers are ordinary host RAM and kernels run on the host's cores (the CPU
  // backend): the queue then keeps less work in flight and the pool allows allocations up to the
  // physical RAM. Runtime policy asks this, never the backend's name.
  virtual bool memory_is_host_ram() const = 0;

  // Returns nullptr when the device is out of memory (the runtime then trims its cache and
  // retries once before raising an out-of-memory error).
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;

  // Host <-> device copies. The runtime calls these only after waiting for every command buffer
  // that writes (or, for copy_to_device, reads) the range (rule R2); they return when done.
  virtual void copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  // Fill a whole buffer with one byte value (poison on recycle). Returns when done.
  virtual void fill_bytes(void* dst, uint8_t value, size_t bytes) = 0;

  // Run `commands` in order after every earlier submitted command buffer, asynchronously; the
  // call itself returns without waiting for them. `on_complete` is registered before the work
  // can start and is called exactly once.
  virtual void submit(std::vector<Command> commands, CompletionFn on_complete) = 0;
  // A replay's command buffer (`plan` describes each command; plan->kinds.size() equals
  // commands.size()): the same contract as submit(). Backends without per-recording state run it
  // as any other command buffer.
  virtual void submit_replay(std::vector<Command> commands, std::shared_ptr<const ReplayPlan> plan,
                             CompletionFn on_complete) {
    (void)plan;
    submit(std::move(commands), std::move(on_complete));
  }
  // Block until every submitted command buffer has completed.
  virtual void synchronize() = 0;

  virtual Kernels& kernels() = 0;
};

// Factories, defined by each backend that is built. make_backend("cuda") on a machine without
// a usable GPU throws std::runtime_error with a one-line reason.
std::unique_ptr<Backend> make_cpu_backend(int threads);  // threads <= 0: all cores
std::unique_ptr<Backend> make_cuda_backend();
std::unique_ptr<Backend> make_metal_backend();

}  // namespace tl
