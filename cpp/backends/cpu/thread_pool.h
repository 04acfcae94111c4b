#pragma once
// A persistent pool of kernel threads with a low-overhead parallel_for. Invariants:
//  - run() returns only after every task index in [0, n_tasks) has been executed exactly once;
//    the calling thread takes part, so a pool of size 1 has no worker threads at all.
//  - Workers spin briefly after a job (decode calls hundreds of small kernels back to back),
//    then sleep on a condition variable, so an idle pool costs no CPU.
//  - A run() issued from inside a task, or while another thread is using the pool, executes
//    serially on the calling thread (never deadlocks, never interleaves two jobs).
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace tl::cpu {

class ThreadPool {
 public:
  // threads <= 0: std::thread::hardware_concurrency().
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }

  // Calls task(i) for every i in [0, n_tasks) across the pool's threads.
  template <class F>
  void run(int64_t n_tasks, F&& task) {
    if (n_tasks <= 0) return;
    auto trampoline = [](void* ctx, int64_t i) { (*static_cast<std::remove_reference_t<F>*>(ctx))(i); };
    run_impl(n_tasks, trampoline, static_cast<void*>(&task));
  }

  // Splits [0, n) into contiguous chunks of at least `grain` items and calls body(begin, end)
  // for each, in parallel when there is more than one chunk.
  template <class F>
  void parallel_for(int64_t n, int64_t grain, F&& body) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    int64_t max_chunks = (n + grain - 1) / grain;
    int64_t chunks = std::min<int64_t>(max_chunks, static_cast<int64_t>(size_) * 4);
    if (chunks <= 1 || size_ == 1) {
      body(int64_t{0}, n);
      return;
    }
    // Fewer, equal chunks when the pool is small: one per thread unless the work is large.
    if (max_chunks < static_cast<int64_t>(size_) * 16) chunks = std::min<int64_t>(max_chunks, size_);
    int64_t per = (n + chunks - 1) / chunks;
    chunks = (n + per - 1) / per;
    run(chunks, [&](int64_t c) {
      int64_t b = c * per;
      int64_t e = std::min(n, b + per);
      body(b, e);
    });
  }

 private:
  using TaskFn = void (*)(void*, int64_t);
  void run_impl(int64_t n_tasks, TaskFn fn, void* ctx);
  void worker_loop(int index);
  void execute_tasks();

  int size_ = 1;
  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // one job at a time

  // The current job, published by bumping generation_.
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
  std::atomic<int> busy_workers_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};

  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
};

}  // namespace tl::cpu
