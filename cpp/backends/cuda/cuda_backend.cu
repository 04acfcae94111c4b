// The CUDA backend: one device, one non-blocking stream for the kernels (and one for host
// transfers, which the runtime issues only once the kernels touching the range are done), plain
// cudaMalloc memory.
// Invariants: submit() only queues the command buffer and returns; one launch thread runs the
// commands (kernel launches) in submission order and records an event after each command
// buffer; one completion thread waits for those events in the same order and calls each
// on_complete exactly once, outside every lock, with the first error (a host-side KernelError,
// a failed launch, an asynchronous device fault, or an id-out-of-range flag from a kernel).
// Buffer lifetimes are the runtime's business (docs/runtime.md R1-R3); this file never frees memory
// it was not asked to.
// CUDA graphs: a compiled function's replay (submit_replay, with its ReplayPlan) runs its body as
// one CUDA graph from its second replay on. The body is captured once per recording (its commands
// launch into a private capture stream, so nothing runs); its Dynamic commands' kernels read
// their per-replay values (position, key count, view offsets) from a small device table
// (DynTable) instead of their arguments, so later replays only compute those values (the commands
// launch nothing), upload them with one small kernel and launch the graph: no per-kernel host
// work. The Outside commands before and after the body (input and result copies) launch one by
// one. Launch by launch instead, decided in launch_replay: graphs off (TL_CUDA_GRAPHS=0), a body
// of fewer than kMinGraphCommands commands, a recording seen once, an Outside command inside the
// body, a command the graph cannot hold (cuBLAS, scratch growth: CaptureUnsupported; a Dynamic
// command whose kernel reads no table), any error while capturing (the launch-by-launch run then
// reports it), and a replay whose dynamic commands no longer match the graph (GraphStale).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "blas.h"
#include "cuda_common.cuh"
#include "cuda_kernels.h"
#include "runtime/backend.h"
#include "runtime/debug_config.h"

namespace tl {
namespace cuda {

cudaError_t probe_kernel_image();  // delay.cu: is there device code for the current GPU?

// ---- per-replay values of a replay graph (DynTable, cuda_kernels.h) ----

namespace {
constexpr int kDynChunk = 480;  // values per upload launch: 3,840 bytes of kernel arguments
struct DynChunk {
  int64_t v[kDynChunk];
};
__global__ void set_dyn_values_kernel(int64_t* dst, DynChunk chunk, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = chunk.v[i];
}
}  // namespace

CudaKernels::DynArgs CudaKernels::dyn_args(std::initializer_list<int64_t> values,
                                           std::initializer_list<const void*> ptrs, int64_t key) {
  if (!dyn_active_ || dyn_table_ == nullptr) return {nullptr, true};
  DynTable& t = *dyn_table_;
  const size_t at = t.values.size();
  if (at + values.size() + ptrs.size() > DynTable::kMaxValues) {
    throw CaptureUnsupported("a replay graph with more per-replay values than its table holds");
  }
  t.values.insert(t.values.end(), values.begin(), values.end());
  if (!dyn_values_only_) {
    t.bases.emplace_back(ptrs);
    t.keys.push_back(key);
    t.values.insert(t.values.end(), ptrs.size(), 0);
  } else {
    if (t.command >= t.bases.size() || t.bases[t.command].size() != ptrs.size() || t.keys[t.command] != key) {
      throw GraphStale("the replay's dynamic commands differ from the captured graph's");
    }
    const std::vector<const void*>& base = t.bases[t.command];
    size_t i = 0;
    for (const void* p : ptrs) {
      t.values.push_back(static_cast<const char*>(p) - static_cast<const char*>(base[i++]));
    }
  }
  ++t.command;
  dyn_served_ = true;
  if (dyn_values_only_) return {nullptr, false};
  return {t.device + at, true};
}

void CudaKernels::upload_dyn(const DynTable& table) {
  const size_t n = table.values.size();
  for (size_t at = 0; at < n; at += kDynChunk) {
    DynChunk chunk;
    const int here = static_cast<int>(std::min<size_t>(kDynChunk, n - at));
    std::copy(table.values.begin() + at, table.values.begin() + at + here, chunk.v);
    set_dyn_values_kernel<<<1, 128, 0, stream_>>>(table.device + at, chunk, here);
    check_launch("replay graph values");
  }
}

namespace {

std::string cuda_message(const char* what, cudaError_t err) {
  return std::string("cuda: ") + what + ": " + cudaGetErrorString(err);
}

// Device error slots, one per command buffer that uses one, with a pinned host mirror that is
// filled by an asynchronous copy at the end of the command buffer.
class ErrorSlotPool {
 public:
  static constexpr int kChunk = 256;

  ~ErrorSlotPool() {
    for (auto& c : chunks_) {
      cudaFree(c.device);
      cudaFreeHost(c.host);
    }
  }

  // Returns a free slot index, growing by a chunk when none is free.
  int acquire() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.empty()) {
      Chunk c{};
      cudaError_t err = cudaMalloc(&c.device, kChunk * sizeof(DeviceErrorSlot));
      if (err != cudaSuccess) throw KernelError(cuda_message("error slot allocation", err));
      err = cudaMallocHost(&c.host, kChunk * sizeof(DeviceErrorSlot));
      if (err != cudaSuccess) {
        cudaFree(c.device);
        throw KernelError(cuda_message("error slot allocation", err));
      }
      const int base = static_cast<int>(chunks_.size()) * kChunk;
      chunks_.push_back(c);
      for (int i = kChunk - 1; i >= 0; --i) free_.push_back(base + i);
    }
    const int slot = free_.back();
    free_.pop_back();
    return slot;
  }

  void release(int slot) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(slot);
  }

  DeviceErrorSlot* device(int slot) {
    std::lock_guard<std::mutex> lock(mutex_);
    return chunks_[slot / kChunk].device + slot % kChunk;
  }
  DeviceErrorSlot* host(int slot) {
    std::lock_guard<std::mutex> lock(mutex_);
    return chunks_[slot / kChunk].host + slot % kChunk;
  }

 private:
  struct Chunk {
    DeviceErrorSlot* device;
    DeviceErrorSlot* host;
  };
  std::mutex mutex_;
  std::vector<Chunk> chunks_;
  std::vector<int> free_;
};

// Everything the completion thread touches. It is shared between the backend and that thread,
// so that a completion callback may destroy the backend (dropping the runtime's last reference
// to its device) without the thread touching freed memory.
struct CompletionState {
  struct Pending {
    cudaEvent_t event = nullptr;
    CompletionFn on_complete;
    std::string error;
    int slot = -1;        // the command buffer's error slot
    int graph_slot = -1;  // a slot whose host mirror holds its replay graph's slot of this launch
  };

  int device = 0;
  ErrorSlotPool slots;

  std::mutex event_mutex;
  std::vector<cudaEvent_t> free_events;

  std::mutex queue_mutex;
  std::condition_variable queue_cv;
  std::condition_variable done_cv;
  std::deque<Pending> queue;
  uint64_t submitted = 0;
  uint64_t completed = 0;
  bool stopping = false;

  ~CompletionState() {
    for (cudaEvent_t e : free_events) cudaEventDestroy(e);
  }

  cudaEvent_t take_event() {
    {
      std::lock_guard<std::mutex> lock(event_mutex);
      if (!free_events.empty()) {
        cudaEvent_t e = free_events.back();
        free_events.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return e;
  }

  void give_back_event(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(event_mutex);
    free_events.push_back(e);
  }

  // Spins briefly (most command buffers of a decode step finish within microseconds of each
  // other), then sleeps in the driver until the event completes.
  static cudaError_t wait_for(cudaEvent_t e) {
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    while (true) {
      const cudaError_t st = cudaEventQuery(e);
      if (st != cudaErrorNotReady) return st;
      if (std::chrono::steady_clock::now() >= spin_until) break;
      std::this_thread::yield();
    }
    return cudaEventSynchronize(e);
  }

  // The completion thread's body: in submission order, wait, work out the error, complete.
  static void run(std::shared_ptr<CompletionState> self) {
    (void)cudaSetDevice(self->device);
    while (true) {
      Pending p;
      {
        std::unique_lock<std::mutex> lock(self->queue_mutex);
        self->queue_cv.wait(lock, [&] { return !self->queue.empty() || self->stopping; });
        if (self->queue.empty()) return;  // stopping and drained
        p = std::move(self->queue.front());
        self->queue.pop_front();
      }
      std::string error = std::move(p.error);
      if (p.event != nullptr) {
        const cudaError_t st = wait_for(p.event);
        if (st != cudaSuccess && error.empty()) {
          error = cuda_message("a kernel failed on the device", st);
        }
        self->give_back_event(p.event);
      }
      for (int slot : {p.slot, p.graph_slot}) {
        if (slot < 0) continue;
        const DeviceErrorSlot* h = self->slots.host(slot);
        if (error.empty() && h->code == kErrorIdOutOfRange) {
          error = "embedding: id " + std::to_string(h->value) +
                  " is out of range for a table of " + std::to_string(h->limit) + " rows";
        }
        if (error.empty() && h->code == kErrorExpertIdOutOfRange) {
          error = "expert_linear: expert id " + std::to_string(h->value) + " is out of range for " +
                  std::to_string(h->limit) + " experts";
        }
        if (error.empty() && h->code == kErrorScatterIdOutOfRange) {
          // the CPU backend's message, word for word
          const std::string n = std::to_string(h->count), d = std::to_string(h->width);
          error = "scatter_add_rows: id " + std::to_string(h->value) + " (position " +
                  std::to_string(h->position) + " of ids [" + n + "]) is out of range for [" +
                  std::to_string(h->limit) + ", " + d + "] rows (src [" + n + ", " + d + "])";
        }
        self->slots.release(slot);
      }
      try {
        p.on_complete(error);
      } catch (...) {
        // on_complete must not throw; if it does, the runtime's state is its own concern.
      }
      p.on_complete = nullptr;  // drop what it captured before reporting completion
      {
        std::lock_guard<std::mutex> lock(self->queue_mutex);
        ++self->completed;
      }
      self->done_cv.notify_all();
    }
  }
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const CudaTuning& tuning)
      : stream_(create_stream(device)),
        kernels_(stream_, [this] { return current_error_slot(); }),
        state_(std::make_shared<CompletionState>()) {
    state_->device = device;
    CudaTuning tuned = tuning;
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess || major < 9) {
      (void)cudaGetLastError();
      tuned.pdl = false;  // programmatic dependent launch needs sm_90
    }
    kernels_.set_tuning(tuned);
    int sms = 1;
    (void)cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    // A fixed scratch for attention key splits; without it attention runs unsplit.
    if (cudaMalloc(&attention_scratch_, kAttentionScratchBytes) != cudaSuccess) {
      (void)cudaGetLastError();
      attention_scratch_ = nullptr;
    }
    kernels_.set_device_resources(static_cast<float*>(attention_scratch_),
                                  attention_scratch_ ? kAttentionScratchBytes / sizeof(float) : 0, sms);
    kernels_.set_own_gemm_ok(major >= 8);
    if (env_cuda_blas()) {
      // Started by the kernels when a product first needs it (on the launch thread).
      const bool tf32 = env_cuda_tf32();
      kernels_.set_blas_factory([this, tf32]() -> Blas* {
        blas_ = std::make_unique<Blas>(stream_, tf32);
        if (!blas_->available()) {
          static std::once_flag said;  // one line per process, not per backend
          std::call_once(said, [&] {
            std::fprintf(stderr, "tl-cuda: %s; matrix products use TL's own kernels (slower)\n",
                         blas_->description().c_str());
          });
        }
        return blas_.get();
      });
    }
    graphs_enabled_ = env_cuda_graphs();
    if (graphs_enabled_ &&
        cudaStreamCreateWithFlags(&capture_stream_, cudaStreamNonBlocking) != cudaSuccess) {
      (void)cudaGetLastError();
      capture_stream_ = nullptr;
      graphs_enabled_ = false;
    }
    if (cudaStreamCreateWithFlags(&transfer_stream_, cudaStreamNonBlocking) != cudaSuccess) {
      (void)cudaGetLastError();
      transfer_stream_ = stream_;  // transfers then queue behind the kernels (correct, slower)
    }
    if (cudaMallocHost(&staging_, kStagingBytes) != cudaSuccess) {
      (void)cudaGetLastError();
      staging_ = nullptr;
    }
    completion_thread_ = std::thread(&CompletionState::run, state_);
    launch_thread_ = std::thread([this, device] { launch_loop(device); });
  }

  ~CudaBackend() override {
    const bool on_completion_thread = std::this_thread::get_id() == completion_thread_.get_id();
    if (!on_completion_thread) synchronize();
    if (env_cuda_launch_stats()) {
      std::fprintf(stderr, "tl-cuda: %llu device operations (kernel launches and copies) in %llu command buffers\n",
                   static_cast<unsigned long long>(g_device_ops.load() - device_ops_at_start_),
                   static_cast<unsigned long long>(state_->submitted));
      std::fprintf(stderr, "tl-cuda: %llu replays as CUDA graphs (%llu captured), %llu captures abandoned, "
                   "%llu graphs dropped as stale\n",
                   static_cast<unsigned long long>(graph_launches_.load()),
                   static_cast<unsigned long long>(graph_captures_),
                   static_cast<unsigned long long>(graph_abandoned_),
                   static_cast<unsigned long long>(graph_stale_));
      if (!first_capture_failure_.empty()) {
        std::fprintf(stderr, "tl-cuda: first capture abandoned: %s\n", first_capture_failure_.c_str());
      }
    }
    {
      std::lock_guard<std::mutex> lock(launch_mutex_);
      launch_stopping_ = true;
    }
    launch_cv_.notify_all();
    launch_thread_.join();  // it launches what is still queued first
    {
      std::lock_guard<std::mutex> lock(state_->queue_mutex);
      state_->stopping = true;
    }
    state_->queue_cv.notify_all();
    if (on_completion_thread) {
      completion_thread_.detach();  // it finishes the queue, then drops its share of the state
    } else {
      completion_thread_.join();
    }
    for (auto& entry : replay_graphs_) drop_graph(entry.second);
    kernels_.set_blas_factory(nullptr);
    blas_.reset();  // before the stream it is bound to
    if (capture_stream_ != nullptr) (void)cudaStreamDestroy(capture_stream_);
    if (transfer_stream_ != stream_) (void)cudaStreamDestroy(transfer_stream_);
    if (staging_ != nullptr) (void)cudaFreeHost(staging_);
    (void)cudaStreamDestroy(stream_);  // pending work still completes; resources go after it
    if (attention_scratch_ != nullptr) (void)cudaFree(attention_scratch_);  // waits for the device
  }

  const char* name() const override { return "cuda"; }
  bool memory_is_host_ram() const override { return false; }

  void* allocate(size_t bytes) override {
    void* ptr = nullptr;
    const cudaError_t err = cudaMalloc(&ptr, bytes == 0 ? 1 : bytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear the non-sticky error so later calls are unaffected
      return nullptr;
    }
    if (err != cudaSuccess) throw std::runtime_error(cuda_message("allocate", err));
    return ptr;
  }

  void deallocate(void* ptr, size_t /*bytes*/) override {
    if (ptr != nullptr) (void)cudaFree(ptr);  // errors here only mean the device is already gone
  }

  // Host transfers go through a stream of their own (transfer_stream_). The runtime calls them only
  // after the command buffers that use the range have completed (rule R2), so they need not wait
  // behind kernels queued since: a greedy id is read while the next decode step already runs.
  // Small ones pass through a pinned staging buffer (a pageable copy costs a driver bounce).
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    if (staging_ != nullptr && bytes <= kStagingBytes) {
      std::lock_guard<std::mutex> lock(staging_mutex_);
      std::memcpy(staging_, src, bytes);
      transfer(dst, staging_, bytes, cudaMemcpyHostToDevice, "copy_to_device");
      return;
    }
    transfer(dst, src, bytes, cudaMemcpyHostToDevice, "copy_to_device");
  }

  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    if (staging_ != nullptr && bytes <= kStagingBytes) {
      std::lock_guard<std::mutex> lock(staging_mutex_);
      transfer(staging_, src, bytes, cudaMemcpyDeviceToHost, "copy_to_host");
      std::memcpy(dst, staging_, bytes);
      return;
    }
    transfer(dst, src, bytes, cudaMemcpyDeviceToHost, "copy_to_host");
  }

  void fill_bytes(void* dst, uint8_t value, size_t bytes) override {
    if (bytes == 0) return;
    check(cudaMemsetAsync(dst, value, bytes, transfer_stream_), "fill_bytes");
    check(cudaStreamSynchronize(transfer_stream_), "fill_bytes");
  }

  // Hands the command buffer to the launch thread and returns: the encoding thread never pays
  // for kernel launches. Counted as submitted at once, so synchronize() waits for it.
  void submit(std::vector<Command> commands, CompletionFn on_complete) override {
    submit_replay(std::move(commands), nullptr, std::move(on_complete));
  }

  void submit_replay(std::vector<Command> commands, std::shared_ptr<const ReplayPlan> plan,
                     CompletionFn on_complete) override {
    LaunchJob job;
    job.commands = std::move(commands);
    if (graphs_enabled_ && plan && plan->kinds.size() == job.commands.size()) job.plan = std::move(plan);
    job.pending.on_complete = std::move(on_complete);
    {
      std::lock_guard<std::mutex> lock(state_->queue_mutex);
      ++state_->submitted;
    }
    {
      std::lock_guard<std::mutex> lock(launch_mutex_);
      launch_queue_.push_back(std::move(job));
    }
    launch_cv_.notify_one();
  }

  void synchronize() override {
    std::unique_lock<std::mutex> lock(state_->queue_mutex);
    const uint64_t target = state_->submitted;
    state_->done_cv.wait(lock, [&] { return state_->completed >= target; });
  }

  Kernels& kernels() override { return kernels_; }

 private:
  static cudaStream_t create_stream(int device) {
    cudaError_t err = cudaSetDevice(device);
    if (err != cudaSuccess) throw std::runtime_error(cuda_message("cannot use the device", err));
    cudaStream_t stream = nullptr;
    err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (err != cudaSuccess) throw std::runtime_error(cuda_message("cannot create a stream", err));
    return stream;
  }

  static void check(cudaError_t err, const char* what) {
    if (err != cudaSuccess) throw std::runtime_error(cuda_message(what, err));
  }

  void transfer(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, const char* what) {
    check(cudaMemcpyAsync(dst, src, bytes, kind, transfer_stream_), what);
    check(cudaStreamSynchronize(transfer_stream_), what);
  }

  struct LaunchJob {
    std::vector<Command> commands;
    std::shared_ptr<const ReplayPlan> plan;  // a compiled function's replay (graphs on)
    CompletionState::Pending pending;
  };

  // The launch thread: runs each command buffer's commands (which launch kernels on the stream)
  // in submission order, queues the error-slot read-back and the completion event, and passes
  // the command buffer on to the completion thread.
  void launch_loop(int device) {
    (void)cudaSetDevice(device);
    while (true) {
      LaunchJob job;
      {
        std::unique_lock<std::mutex> lock(launch_mutex_);
        launch_cv_.wait(lock, [&] { return !launch_queue_.empty() || launch_stopping_; });
        if (launch_queue_.empty()) return;  // stopping and drained
        job = std::move(launch_queue_.front());
        launch_queue_.pop_front();
      }
      launch(job);
      job.commands.clear();  // drop what the commands captured before completion is reported
      {
        std::lock_guard<std::mutex> lock(state_->queue_mutex);
        state_->queue.push_back(std::move(job.pending));
      }
      state_->queue_cv.notify_one();
    }
  }

  // The graph of one recording's replays (ReplayPlan::recording_id).
  struct ReplayGraph {
    cudaGraphExec_t exec = nullptr;
    DynTable table;       // its Dynamic commands' values; table.device is read by the graph
    size_t n_values = 0;  // values per replay, fixed at capture
    int slot = -1;        // its device error slot (reset inside the graph), or -1
    int seen = 0;         // replays so far
    bool eager = false;   // given up: launch by launch
    uint64_t last_used = 0;
  };
  static constexpr size_t kMinGraphCommands = 16;
  static constexpr size_t kMaxReplayGraphs = 32;  // recordings with a graph kept (least recently used go)

  void drop_graph(ReplayGraph& g) {
    if (g.exec != nullptr) (void)cudaGraphExecDestroy(g.exec);  // freed when an in-flight launch ends
    g.exec = nullptr;
    if (g.table.device != nullptr || g.slot >= 0) {
      (void)cudaStreamSynchronize(stream_);  // a launch may still read the table or write the slot
      if (g.table.device != nullptr) (void)cudaFree(g.table.device);
      g.table.device = nullptr;
      if (g.slot >= 0) state_->slots.release(g.slot);
      g.slot = -1;
    }
    (void)cudaGetLastError();
  }

  ReplayGraph& graph_for(uint64_t id) {
    auto it = replay_graphs_.find(id);
    if (it == replay_graphs_.end()) {
      if (replay_graphs_.size() >= kMaxReplayGraphs) {
        auto oldest = replay_graphs_.begin();
        for (auto e = replay_graphs_.begin(); e != replay_graphs_.end(); ++e) {
          if (e->second.last_used < oldest->second.last_used) oldest = e;
        }
        drop_graph(oldest->second);
        replay_graphs_.erase(oldest);
      }
      it = replay_graphs_.emplace(id, ReplayGraph{}).first;
    }
    it->second.last_used = ++graph_clock_;
    return it->second;
  }

  // Runs commands [begin, end) launch by launch; false after the first error (kept in pending).
  bool run_range(LaunchJob& job, size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      try {
        job.commands[i](kernels_);
      } catch (const std::exception& e) {
        job.pending.error = e.what();
        return false;
      } catch (...) {
        job.pending.error = "cuda: a command failed with an unknown exception";
        return false;
      }
    }
    return true;
  }

  // Captures the body [b, e) into g (nothing runs); false if it cannot be a graph.
  bool capture_body(LaunchJob& job, ReplayGraph& g, size_t b, size_t e) {
    if (g.table.device == nullptr &&
        cudaMalloc(&g.table.device, DynTable::kMaxValues * sizeof(int64_t)) != cudaSuccess) {
      g.table.device = nullptr;
      return false;
    }
    const auto& kinds = job.plan->kinds;
    bool captured = cudaStreamBeginCapture(capture_stream_, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
    if (captured) {
      kernels_.begin_capture(capture_stream_);
      kernels_.begin_dyn(&g.table, /*values_only=*/false);
      encode_stream_ = capture_stream_;
      slot_owner_ = &g.slot;  // a kernel's error slot belongs to the graph (reset inside it)
      graph_slot_reset_ = false;
      size_t at = b;
      try {
        for (; at < e; ++at) {
          if (kinds[at] == ReplayCommandKind::Dynamic) {
            kernels_.begin_dynamic_command();
            job.commands[at](kernels_);
            if (!kernels_.end_dynamic_command()) throw CaptureUnsupported("a dynamic command without a value table");
          } else {
            job.commands[at](kernels_);
          }
        }
      } catch (const std::exception& ex) {
        captured = false;  // CaptureUnsupported or a real error: the eager run decides which
        note_capture_failure(std::string(ex.what()) + " (command " + std::to_string(at) + " of " +
                             std::to_string(kinds.size()) + ")");
      } catch (...) {
        captured = false;
        note_capture_failure("an unknown exception");
      }
      slot_owner_ = &encoding_slot_;
      encode_stream_ = stream_;
      kernels_.end_dyn();
      kernels_.end_capture();
    }
    // End the capture whenever one is open (also after a throw or an invalidated capture), so the
    // capture stream is usable again.
    cudaGraph_t graph = nullptr;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(capture_stream_, &status) == cudaSuccess &&
        status != cudaStreamCaptureStatusNone) {
      const cudaError_t st = cudaStreamEndCapture(capture_stream_, &graph);
      if (st != cudaSuccess && captured) {
        captured = false;
        note_capture_failure(cuda_message("end of capture", st));
      }
    }
    bool ok = captured && graph != nullptr;
    if (ok) {
      const cudaError_t st = cudaGraphInstantiate(&g.exec, graph, 0);
      if (st != cudaSuccess) {
        ok = false;
        note_capture_failure(cuda_message("graph instantiation", st));
      }
    }
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    if (!ok) {
      g.exec = nullptr;
      (void)cudaGetLastError();  // clear what the failed capture left behind
      return false;
    }
    g.n_values = g.table.values.size();
    ++graph_captures_;
    return true;
  }

  // The first reason a capture was abandoned, printed with TL_CUDA_LAUNCH_STATS=1.
  void note_capture_failure(const std::string& why) {
    if (first_capture_failure_.empty()) first_capture_failure_ = why;
  }

  // A replay with a plan: its Outside commands before the body launch one by one, the body runs as
  // the recording's graph (captured on its second replay), then the Outside commands after it.
  // Returns false, having launched nothing, when the replay must run launch by launch instead.
  bool launch_replay(LaunchJob& job) {
    const auto& kinds = job.plan->kinds;
    const size_t n = kinds.size();
    size_t b = 0, e = n;
    while (b < n && kinds[b] == ReplayCommandKind::Outside) ++b;
    while (e > b && kinds[e - 1] == ReplayCommandKind::Outside) --e;
    if (e - b < kMinGraphCommands || capture_stream_ == nullptr) return false;
    ReplayGraph& g = graph_for(job.plan->recording_id);
    if (g.eager || (g.exec == nullptr && ++g.seen < 2)) return false;  // a recording replayed once pays no capture
    // A recording's plan never changes: checked once, before its capture.
    for (size_t i = b; g.exec == nullptr && i < e; ++i) {
      if (kinds[i] == ReplayCommandKind::Outside) {
        g.eager = true;
        return false;
      }
    }
    if (!run_range(job, 0, b)) return true;  // an input copy failed: the rest is skipped
    if (g.exec == nullptr) {
      if (!capture_body(job, g, b, e)) {
        g.eager = true;
        ++graph_abandoned_;
        run_range(job, b, n);  // stops at the first error, as a plain command buffer does
        return true;
      }
    } else {
      // Later replays: only the Dynamic commands run, storing their values.
      bool fresh = true;
      kernels_.begin_dyn(&g.table, /*values_only=*/true);
      try {
        for (size_t i = b; i < e && fresh; ++i) {
          if (kinds[i] != ReplayCommandKind::Dynamic) continue;
          kernels_.begin_dynamic_command();
          job.commands[i](kernels_);
          fresh = kernels_.end_dynamic_command();
        }
      } catch (...) {
        fresh = false;  // GraphStale, or an error the launch-by-launch run reports
      }
      kernels_.end_dyn();
      if (!fresh || g.table.values.size() != g.n_values) {
        drop_graph(g);
        g.eager = true;
        ++graph_stale_;
        run_range(job, b, n);  // stops at the first error, as a plain command buffer does
        return true;
      }
    }
    try {
      kernels_.upload_dyn(g.table);
    } catch (const std::exception& ex) {
      job.pending.error = ex.what();
      return true;
    }
    const cudaError_t st = cudaGraphLaunch(g.exec, stream_);
    if (st != cudaSuccess) {
      (void)cudaGetLastError();
      job.pending.error = cuda_message("graph launch", st);
      return true;
    }
    ++graph_launches_;
    graph_slot_ = g.slot;
    run_range(job, e, n);
    return true;
  }

  void launch(LaunchJob& job) {
    encoding_slot_ = -1;
    graph_slot_ = -1;
    if (!job.plan || !launch_replay(job)) run_range(job, 0, job.commands.size());
    finish_launch(job);
  }

  void finish_launch(LaunchJob& job) {
    CompletionState::Pending& pending = job.pending;
    pending.slot = encoding_slot_;
    encoding_slot_ = -1;
    if (pending.slot >= 0) {
      const cudaError_t err =
          cudaMemcpyAsync(state_->slots.host(pending.slot), state_->slots.device(pending.slot),
                          sizeof(DeviceErrorSlot), cudaMemcpyDeviceToHost, stream_);
      if (err != cudaSuccess && pending.error.empty()) {
        pending.error = cuda_message("error slot read-back", err);
      }
    }
    // A replay graph's slot stays the graph's: its contents of this launch go to the host mirror of
    // a slot of this command buffer's own, read by the completion thread.
    if (graph_slot_ >= 0) {
      pending.graph_slot = state_->slots.acquire();
      const cudaError_t err =
          cudaMemcpyAsync(state_->slots.host(pending.graph_slot), state_->slots.device(graph_slot_),
                          sizeof(DeviceErrorSlot), cudaMemcpyDeviceToHost, stream_);
      if (err != cudaSuccess && pending.error.empty()) {
        pending.error = cuda_message("error slot read-back", err);
      }
      graph_slot_ = -1;
    }
    pending.event = state_->take_event();
    if (pending.event != nullptr) {
      const cudaError_t err = cudaEventRecord(pending.event, stream_);
      if (err != cudaSuccess) {
        if (pending.error.empty()) pending.error = cuda_message("event record", err);
        state_->give_back_event(pending.event);
        pending.event = nullptr;
      }
    } else if (pending.error.empty()) {
      pending.error = "cuda: cannot create an event to track a command buffer";
    }
  }

  // Called (on the launch thread) by kernels that can report data errors.
  // While a replay graph is captured the slot is the graph's (slot_owner_), reset by a memset
  // captured into the graph, so at every launch of it.
  DeviceErrorSlot* current_error_slot() {
    int& slot = *slot_owner_;
    const bool for_graph = slot_owner_ != &encoding_slot_;
    if (slot < 0 || (for_graph && !graph_slot_reset_)) {
      if (slot < 0) slot = state_->slots.acquire();
      graph_slot_reset_ = for_graph;
      const cudaError_t err = cudaMemsetAsync(state_->slots.device(slot), 0,
                                              sizeof(DeviceErrorSlot), encode_stream_);
      if (err != cudaSuccess) throw KernelError(cuda_message("error slot reset", err));
    }
    return state_->slots.device(slot);
  }

  static constexpr size_t kAttentionScratchBytes = size_t(4) << 20;
  static constexpr size_t kStagingBytes = size_t(64) << 10;

  uint64_t device_ops_at_start_ = g_device_ops.load();

  cudaStream_t stream_ = nullptr;
  cudaStream_t transfer_stream_ = nullptr;  // host transfers (stream_ if it could not be made)
  void* staging_ = nullptr;                 // pinned, kStagingBytes; guarded by staging_mutex_
  std::mutex staging_mutex_;
  void* attention_scratch_ = nullptr;
  // Graphs (launch thread only, but for the counters read at teardown).
  bool graphs_enabled_ = false;
  cudaStream_t capture_stream_ = nullptr;
  cudaStream_t encode_stream_ = stream_;  // where the error slot's reset goes: stream_ or the capture
  std::unordered_map<uint64_t, ReplayGraph> replay_graphs_;
  uint64_t graph_clock_ = 0;
  int graph_slot_ = -1;  // the error slot of the graph launched by the current command buffer
  int* slot_owner_ = &encoding_slot_;
  bool graph_slot_reset_ = false;  // the capture in progress resets the graph's slot already
  uint64_t graph_captures_ = 0, graph_abandoned_ = 0, graph_stale_ = 0;
  std::string first_capture_failure_;

 public:
  std::atomic<uint64_t> graph_launches_{0};

 private:
  std::unique_ptr<Blas> blas_;  // cuBLAS handle on stream_ (unset: TL_CUDA_BLAS=0)
  CudaKernels kernels_;
  std::shared_ptr<CompletionState> state_;
  std::thread completion_thread_;

  int encoding_slot_ = -1;  // touched by the launch thread only

  std::mutex launch_mutex_;
  std::condition_variable launch_cv_;
  std::deque<LaunchJob> launch_queue_;
  bool launch_stopping_ = false;
  std::thread launch_thread_;
};

int device_from_env() {
  const char* s = env_cuda_device();
  if (s == nullptr) return 0;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (*end != '\0' || v < 0) {
    throw std::runtime_error(std::string("cuda: TL_CUDA_DEVICE must be a device index, got '") +
                             s + "'");
  }
  return static_cast<int>(v);
}

// Read before the backend allocates anything: a malformed value throws (one line naming it).
CudaTuning tuning_from_env() {
  CudaTuning t;
  t.linear_f16 = env_cuda_linear_f16();
  t.matvec_prefetch = env_cuda_matvec_prefetch();
  t.matvec_pairs = env_cuda_matvec_pairs();
  t.matvec_four = env_cuda_matvec_four();
  t.rope_device_pow = env_cuda_rope_device_pow();
  t.attn_rows8 = env_cuda_attn_rows8();
  t.q8_matvec = env_cuda_q8_matvec();
  t.attn_min_chunk = env_cuda_attn_min_chunk();
  t.attn_gqa = env_cuda_attn_gqa();
  t.own_gemm = env_cuda_own_gemm();
  t.gemm_bk64 = env_cuda_gemm_bk64();
  t.attn_gqa_chunk = env_cuda_attn_gqa_chunk();
  t.attn_gqa_splits = env_cuda_attn_gqa_splits();
  t.attn_tile_rows = env_cuda_attn_tile_rows();
  t.pdl = env_cuda_pdl();
  t.l2_prefetch = env_cuda_l2_prefetch();
  return t;
}

}  // namespace

uint64_t graph_launches(const Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  return cuda != nullptr ? cuda->graph_launches_.load() : 0;
}

}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    std::string reason = "cuda: no CUDA device found";
    if (err != cudaSuccess && err != cudaErrorNoDevice) {
      reason += std::string(" (") + cudaGetErrorString(err) + ")";
    }
    throw std::runtime_error(reason);
  }
  const int device = cuda::device_from_env();
  const cuda::CudaTuning tuning = cuda::tuning_from_env();
  if (device >= count) {
    throw std::runtime_error("cuda: TL_CUDA_DEVICE=" + std::to_string(device) + " but only " +
                             std::to_string(count) + " device(s) found");
  }
  cudaError_t st = cudaSetDevice(device);
  if (st == cudaSuccess) st = cuda::probe_kernel_image();
  if (st != cudaSuccess) {
    (void)cudaGetLastError();
    cudaDeviceProp prop{};
    std::string what = "device " + std::to_string(device);
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
      what = std::string(prop.name) + " (compute capability " + std::to_string(prop.major) + "." +
             std::to_string(prop.minor) + ")";
    }
    throw std::runtime_error("cuda: cannot run on " + what + ": " + cudaGetErrorString(st) +
                             "; rebuild with TL_CUDA_ARCHITECTURES including this GPU");
  }
  return std::make_unique<cuda::CudaBackend>(device, tuning);
}

}  // namespace tl
