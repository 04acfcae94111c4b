// CPU backend: see cpu_backend.h for the guarantees this file keeps.
#include "cpu_backend.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#ifdef TL_HAVE_CPU_KERNELS
#include "cpu_kernels.h"
#endif

namespace tl {

namespace {

struct Job {
  std::vector<Command> commands;
  CompletionFn on_complete;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(std::unique_ptr<Kernels> kernels) : kernels_(std::move(kernels)) {
    worker_ = std::thread([this] { run(); });
  }
  ~CpuBackend() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    // A completion callback can drop the last reference to its device; never join oneself.
    if (std::this_thread::get_id() == worker_.get_id()) {
      worker_.detach();
    } else {
      worker_.join();
    }
  }

  const char* name() const override { return "cpu"; }

  void* allocate(size_t bytes) override {
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    if (rounded < bytes) return nullptr;
    return std::aligned_alloc(64, rounded);
  }
  void deallocate(void* ptr, size_t) override { std::free(ptr); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void fill_bytes(void* dst, uint8_t value, size_t bytes) override {
    if (bytes) std::memset(dst, value, bytes);
  }

  void submit(std::vector<Command> commands, CompletionFn on_complete) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(Job{std::move(commands), std::move(on_complete)});
      pending_++;
    }
    work_cv_.notify_one();
  }

  void synchronize() override {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [&] { return pending_ == 0; });
  }

  Kernels& kernels() override { return *kernels_; }

 private:
  void run() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stop_ and drained
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      std::string error;
      for (Command& cmd : job.commands) {
        try {
          cmd(*kernels_);
        } catch (const std::exception& e) {
          error = e.what();
          if (error.empty()) error = "kernel failed";
        } catch (...) {
          error = "kernel failed with an unknown exception";
        }
        if (!error.empty()) break;
      }
      job.commands.clear();
      try {
        job.on_complete(error);
      } catch (...) {
      }
      job.on_complete = nullptr;  // drop whatever the callback still captures before signalling
      {
        std::lock_guard<std::mutex> lock(mu_);
        pending_--;
        idle_cv_.notify_all();
      }
    }
  }

  std::unique_ptr<Kernels> kernels_;
  std::mutex mu_;
  std::condition_variable work_cv_, idle_cv_;
  std::deque<Job> jobs_;
  int64_t pending_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

#ifndef TL_HAVE_CPU_KERNELS
// Used only while cpp/backends/cpu kernels are not part of the build: every op reports a
// KernelError at the next wait, except delay() which the runtime's debug mode needs.
class MissingCpuKernels final : public Kernels {
  [[noreturn]] static void missing() { throw KernelError("this build has no CPU kernels"); }

 public:
  void binary(BinaryOp, const View&, const View&, const View&) override { missing(); }
  void binary_scalar(BinaryOp, const View&, double, bool, const View&) override { missing(); }
  void unary(UnaryOp, const View&, const View&) override { missing(); }
  void copy(const View&, const View&) override { missing(); }
  void fill(const View&, double) override { missing(); }
  void arange(const View&, double, double) override { missing(); }
  void where(const View&, const View&, const View&, const View&) override { missing(); }
  void reduce(ReduceOp, const View&, int64_t, int64_t, int64_t, const View&) override { missing(); }
  void softmax(const View&, int64_t, int64_t, int64_t, const View&) override { missing(); }
  void matmul(const View&, const View&, const View&) override { missing(); }
  void linear(const View&, const View&, const View&) override { missing(); }
  void gather_rows(const View&, const View&, const View&) override { missing(); }
  void rms_norm(const View&, const View&, float, const View&) override { missing(); }
  void layer_norm(const View&, const View&, const View&, float, const View&) override { missing(); }
  void rope(const View&, int64_t, float, bool, const View&) override { missing(); }
  void causal_mask(int64_t, const View&) override { missing(); }
  void attention(const View&, const View&, const View&, const View&, float, bool, int64_t,
                 const View&) override { missing(); }
  void fused_linear(const View&, const View&, LinearPrologue, const View&, float, const View&, const View&,
                    const View&) override { missing(); }
  void swiglu(const View&, const View&, const View&) override { missing(); }
  void rope_kv_write(const View&, const View&, const View&, int64_t, float, bool, const View&,
                     const View&, const View&) override { missing(); }
  void delay(uint32_t us) override { std::this_thread::sleep_for(std::chrono::microseconds(us)); }
};
#endif

}  // namespace

std::unique_ptr<Backend> make_cpu_backend_with(std::unique_ptr<Kernels> kernels) {
  return std::make_unique<CpuBackend>(std::move(kernels));
}

std::unique_ptr<Backend> make_cpu_backend(int threads) {
#ifdef TL_HAVE_CPU_KERNELS
  return make_cpu_backend_with(make_cpu_kernels(threads));
#else
  return make_cpu_backend_with(std::make_unique<MissingCpuKernels>());
#endif
}

}  // namespace tl
