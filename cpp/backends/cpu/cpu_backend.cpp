// CPU backend: see cpu_backend.h for the guarantees this file keeps.
#include "cpu_backend.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "cpu_kernels.h"

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
  bool memory_is_host_ram() const override { return true; }

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


}  // namespace

std::unique_ptr<Backend> make_cpu_backend_with(std::unique_ptr<Kernels> kernels) {
  return std::make_unique<CpuBackend>(std::move(kernels));
}

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return make_cpu_backend_with(make_cpu_kernels(threads));
}

}  // namespace tl
