// See thread_pool.h for the invariants. A job is published by writing fn_/ctx_/n_tasks_ and
// then incrementing generation_ (seq_cst); workers that observe the new generation claim task
// indices with next_task_.fetch_add, and the publisher waits until busy_workers_ drops to 0.
// Lost wake-ups are impossible: a worker registers in sleepers_ under sleep_mutex_ before it
// re-checks generation_, and the publisher reads sleepers_ after bumping generation_.
#include "thread_pool.h"

#include <chrono>
#include <type_traits>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TL_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define TL_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define TL_CPU_RELAX() std::this_thread::yield()
#endif

namespace tl::cpu {
namespace {
thread_local bool t_inside_pool_task = false;
// How long an idle worker keeps spinning for the next job before it sleeps.
constexpr auto kSpinTime = std::chrono::microseconds(200);
}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  size_ = std::max(1, threads);
  workers_.reserve(size_ - 1);
  for (int i = 1; i < size_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(sleep_mutex_);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::execute_tasks() {
  bool was_inside = t_inside_pool_task;
  t_inside_pool_task = true;
  for (;;) {
    int64_t i = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n_tasks_) break;
    fn_(ctx_, i);
  }
  t_inside_pool_task = was_inside;
}

void ThreadPool::run_impl(int64_t n_tasks, TaskFn fn, void* ctx) {
  std::unique_lock<std::mutex> lock(run_mutex_, std::try_to_lock);
  if (workers_.empty() || t_inside_pool_task || !lock.owns_lock() || n_tasks == 1) {
    bool was_inside = t_inside_pool_task;
    t_inside_pool_task = true;
    for (int64_t i = 0; i < n_tasks; ++i) fn(ctx, i);
    t_inside_pool_task = was_inside;
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  n_tasks_ = n_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  busy_workers_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1);  // seq_cst: publishes the job
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> g(sleep_mutex_); }
    wake_.notify_all();
  }
  execute_tasks();
  // Tasks may still run on workers; wait for all of them to leave the job.
  int spins = 0;
  while (busy_workers_.load(std::memory_order_acquire) != 0) {
    if (++spins < 4096) {
      TL_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::worker_loop(int) {
  uint64_t seen = 0;
  for (;;) {
    // Spin for a short while, then sleep until a new generation is published.
    auto spin_start = std::chrono::steady_clock::now();
    int polls = 0;
    while (generation_.load(std::memory_order_acquire) == seen) {
      TL_CPU_RELAX();
      if ((++polls & 63) == 0 && std::chrono::steady_clock::now() - spin_start > kSpinTime) {
        std::unique_lock<std::mutex> lock(sleep_mutex_);
        sleepers_.fetch_add(1);
        while (generation_.load() == seen) wake_.wait(lock);
        sleepers_.fetch_sub(1);
        break;
      }
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    execute_tasks();
    busy_workers_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace tl::cpu
