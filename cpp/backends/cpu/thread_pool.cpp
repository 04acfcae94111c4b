// See thread_pool.h for the invariants. Publishing a job: write fn_/ctx_, reset done_, then
// store the job word (seq_cst) with a new generation, the task count and index 0. Claiming:
// CAS the word from (gen, n, i) to (gen, n, i + 1) only while the generation matches and i < n;
// a successful claim proves the job is still running, so fn_/ctx_ are that job's. The publisher
// returns when done_ reaches n. Lost wake-ups are impossible: a worker registers in sleepers_
// under sleep_mutex_ before re-checking the job word; the publisher reads sleepers_ after
// storing it.
#include "thread_pool.h"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TL_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define TL_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define TL_CPU_RELAX() ((void)0)
#endif

namespace tl::cpu {
namespace {

thread_local bool t_inside_pool_task = false;

constexpr int kIndexBits = 24;
constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
constexpr int64_t kMaxTasks = static_cast<int64_t>(kIndexMask);

inline uint64_t gen_of(uint64_t w) { return w >> 48; }
inline int64_t count_of(uint64_t w) { return static_cast<int64_t>((w >> kIndexBits) & kIndexMask); }
inline int64_t index_of(uint64_t w) { return static_cast<int64_t>(w & kIndexMask); }

// Idle workers poll with pause for kSpinPause, then keep polling with yields (giving the core
// to any runnable thread, e.g. the interpreter) until kSpinTotal, then sleep.
constexpr auto kSpinPause = std::chrono::microseconds(20);
constexpr auto kSpinTotal = std::chrono::microseconds(300);

struct InsideTask {
  bool saved;
  InsideTask() : saved(t_inside_pool_task) { t_inside_pool_task = true; }
  ~InsideTask() { t_inside_pool_task = saved; }
};

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  size_ = std::max(1, threads);
  workers_.reserve(static_cast<size_t>(size_ - 1));
  for (int i = 1; i < size_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  job_.fetch_add(uint64_t{1} << 48);  // a new generation wakes every waiter
  {
    std::lock_guard<std::mutex> lock(sleep_mutex_);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work_on(uint64_t gen) {
  InsideTask inside;
  uint64_t w = job_.load(std::memory_order_acquire);
  for (;;) {
    if (gen_of(w) != gen || index_of(w) >= count_of(w)) return;
    if (!job_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    fn_(ctx_, index_of(w));
    done_.fetch_add(1, std::memory_order_release);
    w = job_.load(std::memory_order_acquire);
  }
}

void ThreadPool::run_impl(int64_t n_tasks, TaskFn fn, void* ctx) {
  std::unique_lock<std::mutex> lock(run_mutex_, std::defer_lock);
  const bool serial = workers_.empty() || t_inside_pool_task || n_tasks == 1 || n_tasks > kMaxTasks ||
                      !lock.try_lock();
  if (serial) {
    InsideTask inside;
    for (int64_t i = 0; i < n_tasks; ++i) fn(ctx, i);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  done_.store(0, std::memory_order_relaxed);
  const uint64_t gen = (gen_of(job_.load()) + 1) & 0xffff;
  job_.store((gen << 48) | (static_cast<uint64_t>(n_tasks) << kIndexBits));  // seq_cst publish
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> g(sleep_mutex_); }
    wake_.notify_all();
  }
  work_on(gen);
  // Every task is claimed; wait for the ones still running on workers.
  int spins = 0;
  while (done_.load(std::memory_order_acquire) != n_tasks) {
    if (++spins < 2048) {
      TL_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::worker_loop() {
  // Generation 0 is the state at construction, before any job or stop could be published; a
  // worker that starts late must not take a later generation as its starting point.
  uint64_t seen = 0;
  for (;;) {
    auto spin_start = std::chrono::steady_clock::now();
    int polls = 0;
    while (gen_of(job_.load(std::memory_order_acquire)) == seen) {
      if ((++polls & 31) != 0) {
        TL_CPU_RELAX();
        continue;
      }
      auto idle = std::chrono::steady_clock::now() - spin_start;
      if (idle < kSpinPause) continue;
      if (idle < kSpinTotal) {
        std::this_thread::yield();
        continue;
      }
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      sleepers_.fetch_add(1);
      while (gen_of(job_.load()) == seen && !stop_.load()) wake_.wait(lock);
      sleepers_.fetch_sub(1);
      break;
    }
    if (stop_.load()) return;
    seen = gen_of(job_.load(std::memory_order_acquire));
    work_on(seen);
  }
}

}  // namespace tl::cpu
