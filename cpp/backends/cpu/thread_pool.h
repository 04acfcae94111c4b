#pragma once
// A persistent pool of kernel threads with a low-overhead parallel_for. Invariants:
//  - run() returns only after every task index in [0, n_tasks) has been executed exactly once;
//    the calling thread takes part, and it never waits for a worker that has not started a
//    task (a descheduled worker cannot stall a job that others have finished).
//  - Task claims go through one atomic word holding (job generation, task count, next index),
//    so a late worker can never claim a task of a job that has moved on.
//  - Idle workers spin briefly (decode runs hundreds of small kernels back to back), yielding
//    the CPU while they spin, then sleep on a condition variable.
//  - A run() issued from inside a task, or while another thread is using the pool, executes
//    serially on the calling thread (never deadlocks, never interleaves two jobs).
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
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
    run_impl(n_tasks, trampoline, const_cast<void*>(static_cast<const void*>(&task)));
  }

  // Splits [0, n) into contiguous chunks of at least `grain` items and calls body(begin, end)
  // for each, in parallel when there is more than one chunk.
  template <class F>
  void parallel_for(int64_t n, int64_t grain, F&& body) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    const int64_t max_chunks = (n + grain - 1) / grain;
    if (max_chunks <= 1 || size_ == 1) {
      body(int64_t{0}, n);
      return;
    }
    // Up to 4 chunks per thread: claims are dynamic, so a thread slowed down by another process
    // (e.g. the interpreter on a 2-core machine) simply takes fewer chunks.
    int64_t chunks = std::min<int64_t>(max_chunks, int64_t{size_} * 4);
    const int64_t per = (n + chunks - 1) / chunks;
    chunks = (n + per - 1) / per;
    run(chunks, [&](int64_t c) {
      const int64_t b = c * per;
      body(b, std::min(n, b + per));
    });
  }

 private:
  using TaskFn = void (*)(void*, int64_t);
  void run_impl(int64_t n_tasks, TaskFn fn, void* ctx);
  void worker_loop();
  // Claims and runs tasks of job `gen` until none are left.
  void work_on(uint64_t gen);

  int size_ = 1;
  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // one job at a time

  // Packed job word: generation (bits 48..63), task count (24..47), next task index (0..23).
  std::atomic<uint64_t> job_{0};
  TaskFn fn_ = nullptr;  // valid while the job word's generation is current and tasks remain
  void* ctx_ = nullptr;
  std::atomic<int64_t> done_{0};
  std::atomic<bool> stop_{false};

  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
};

}  // namespace tl::cpu
