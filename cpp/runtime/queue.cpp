// Queue: see queue.h for the invariants this file keeps.
#include "queue.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "errors.h"

namespace tl {

Queue::Queue(Backend& backend, DebugConfig& debug) : backend_(backend), debug_(debug) {
  int64_t n = env_max_command_buffers_in_flight();
  max_in_flight_ = static_cast<int>(std::max<int64_t>(1, n));
  // On the CPU device memory is host memory (RSS), and kernels are slow next to encoding; a GPU
  // keeps the old 1 GiB bound so that its queue stays full. 8 MiB on the CPU: SmolLM2's peak RSS
  // 214 -> 205 MiB against 16, prefill and decode speed unchanged within noise (bench/llm.py, 2 threads).
  bool is_cpu = backend.memory_is_host_ram();
  int64_t mb = env_max_mb_in_flight(is_cpu ? 8 : 1024);
  max_in_flight_bytes_ = std::max<int64_t>(1, mb) << 20;
  open_bytes_limit_ = std::max<int64_t>(max_in_flight_bytes_ / 4, 1);
}

Queue::~Queue() {
  try {
    synchronize();
  } catch (...) {
  }
  backend_.synchronize();
}

void Queue::set_max_in_flight(int command_buffers, int64_t bytes) {
  std::lock_guard<std::mutex> lock(done_mu_);
  max_in_flight_ = std::max(1, command_buffers);
  max_in_flight_bytes_ = std::max<int64_t>(1, bytes);
  open_bytes_limit_ = std::max<int64_t>(max_in_flight_bytes_ / 4, 1);
}

namespace {
uint32_t random_delay(uint32_t max_us) {
  thread_local std::mt19937 rng(std::random_device{}());
  return std::uniform_int_distribution<uint32_t>(0, max_us)(rng);
}
}  // namespace

void Queue::encode(Command cmd, std::initializer_list<Buffer*> reads,
                   std::initializer_list<Buffer*> writes) {
  encode(std::move(cmd), std::vector<Buffer*>(reads), std::vector<Buffer*>(writes));
}

namespace {
// Adds `src` to `into`, one entry per command buffer (the latest command of it counts: a later
// command is skipped whenever an earlier one is).
void merge_source(std::vector<DataSource>& into, const DataSource& src) {
  for (DataSource& d : into) {
    if (d.outcome == src.outcome) {
      d.command = std::max(d.command, src.command);
      return;
    }
  }
  into.push_back(src);
}

std::string not_computed(const std::string& error) {
  return error + " (an earlier op failed, so this value was never computed)";
}
}  // namespace

void Queue::settle_locked(Buffer& b) {
  if (b.failure || b.sources.empty()) return;
  size_t keep = 0;
  for (size_t i = 0; i < b.sources.size(); ++i) {
    const DataSource& src = b.sources[i];
    int state = src.outcome->state.load(std::memory_order_acquire);
    if (state == CommandBufferOutcome::kSucceeded) continue;
    if (state == CommandBufferOutcome::kFailed && src.command >= src.outcome->failed_at) {
      b.failure = std::make_shared<const std::string>(src.outcome->error);
      b.sources.clear();
      return;
    }
    if (state == CommandBufferOutcome::kFailed) continue;  // ran before the failing command
    b.sources[keep++] = src;
  }
  b.sources.resize(keep);
}

void Queue::encode(Command cmd, const std::vector<Buffer*>& reads,
                   const std::vector<Buffer*>& writes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_outcome_) open_outcome_ = std::make_shared<CommandBufferOutcome>();
  std::vector<DataSource>& sources = encode_sources_;
  sources.clear();
  for (Buffer* b : reads) {
    if (!b) continue;
    settle_locked(*b);
    if (b->failure) throw KernelFailure(not_computed(*b->failure));
    for (const DataSource& src : b->sources) merge_source(sources, src);
  }
  for (Buffer* b : writes) {
    if (!b) continue;
    settle_locked(*b);  // an in-place write keeps what the rest of the buffer depends on
    for (const DataSource& src : b->sources) merge_source(sources, src);
  }
  CommandBufferOutcome* outcome = open_outcome_.get();
  uint32_t delay = debug_.delay_us.load();
  if (delay > 0) {
    uint32_t us = random_delay(delay);
    uint32_t index = static_cast<uint32_t>(open_cmds_.size());
    open_cmds_.push_back([us, outcome, index](Kernels& k) {
      k.delay(us);
      outcome->commands_run.store(index + 1, std::memory_order_relaxed);
    });
  }
  uint32_t index = static_cast<uint32_t>(open_cmds_.size());
  open_cmds_.push_back([cmd = std::move(cmd), outcome, index](Kernels& k) {
    cmd(k);
    outcome->commands_run.store(index + 1, std::memory_order_relaxed);
  });
  merge_source(sources, DataSource{open_outcome_, index});
  ops_encoded_.fetch_add(1, std::memory_order_relaxed);
  for (Buffer* b : reads) {
    if (!b) continue;
    b->last_reader_seq.store(open_seq_);
    if (open_retained_.empty() || open_retained_.back().get() != b)
      open_retained_.push_back(b->shared_from_this());
  }
  for (Buffer* b : writes) {
    if (!b) continue;
    // A buffer nothing has used yet is a new output: memory this command buffer adds (in-place
    // writes into a KV cache or a reused variable add none).
    if (b->last_writer_seq.load() == 0 && b->last_reader_seq.load() == 0)
      open_new_bytes_ += static_cast<int64_t>(b->bytes());
    b->last_writer_seq.store(open_seq_);
    b->sources = sources;
    if (b->failure) b->sources.clear();
    open_retained_.push_back(b->shared_from_this());
  }
  if (++open_ops_ >= debug_.ops_per_command_buffer.load() || open_new_bytes_ >= open_bytes_limit_)
    commit_locked();
}

void Queue::submit_recorded(std::vector<Command> cmds, const std::vector<Buffer*>& reads,
                            const std::vector<Buffer*>& writes,
                            std::vector<std::shared_ptr<Buffer>> retained,
                            std::shared_ptr<const ReplayPlan> plan) {
  std::lock_guard<std::mutex> lock(mu_);
  commit_locked();
  uint32_t delay = debug_.delay_us.load();
  if (delay > 0) {
    plan = nullptr;  // the delays interleaved below are not in the plan
    open_cmds_.reserve(cmds.size() * 2);
    for (Command& c : cmds) {
      uint32_t us = random_delay(delay);
      open_cmds_.push_back([us](Kernels& k) { k.delay(us); });
      open_cmds_.push_back(std::move(c));
    }
  } else {
    open_cmds_ = std::move(cmds);
  }
  for (Buffer* b : reads) b->last_reader_seq.store(open_seq_);
  for (Buffer* b : writes) {
    if (b->last_writer_seq.load() == 0 && b->last_reader_seq.load() == 0)
      open_new_bytes_ += static_cast<int64_t>(b->bytes());
    b->last_writer_seq.store(open_seq_);
  }
  open_retained_ = std::move(retained);
  open_plan_ = std::move(plan);
  commit_locked();
}

void Queue::commit() {
  std::lock_guard<std::mutex> lock(mu_);
  commit_locked();
}

void Queue::commit_locked() {
  if (open_cmds_.empty()) {
    open_retained_.clear();
    open_plan_ = nullptr;
    return;
  }
  std::shared_ptr<const ReplayPlan> plan = std::move(open_plan_);
  open_plan_ = nullptr;
  uint64_t seq = open_seq_++;
  int64_t bytes = open_new_bytes_;
  std::vector<Command> cmds;
  cmds.swap(open_cmds_);
  std::vector<std::shared_ptr<Buffer>> retained;
  retained.swap(open_retained_);
  std::shared_ptr<CommandBufferOutcome> outcome = std::move(open_outcome_);
  if (!outcome) outcome = std::make_shared<CommandBufferOutcome>();
  const uint32_t n_commands = static_cast<uint32_t>(cmds.size());
  open_new_bytes_ = 0;
  open_ops_ = 0;
  {
    // Bound the work in flight: wait for older command buffers before adding this one.
    std::unique_lock<std::mutex> d(done_mu_);
    done_cv_.wait(d, [&] {
      return in_flight_ < max_in_flight_ &&
             (in_flight_ == 0 || in_flight_bytes_ + bytes <= max_in_flight_bytes_);
    });
    in_flight_++;
    in_flight_bytes_ += bytes;
    committed_++;
  }
  CompletionFn on_complete = [this, seq, bytes, n_commands, outcome,
                              retained = std::move(retained)](const std::string& error) mutable {
    try {
      retained.clear();  // R1: the buffers may now return to the pool
    } catch (...) {
    }
    try {
      if (error.empty()) {
        outcome->state.store(CommandBufferOutcome::kSucceeded, std::memory_order_release);
      } else {
        uint32_t ran = outcome->commands_run.load(std::memory_order_relaxed);
        outcome->failed_at = ran < n_commands ? ran : 0;
        outcome->error = error;
        outcome->state.store(CommandBufferOutcome::kFailed, std::memory_order_release);
      }
    } catch (...) {
      outcome->state.store(CommandBufferOutcome::kFailed, std::memory_order_release);
    }
    outcome.reset();
    complete(seq, bytes, error);
  };
  try {
    if (plan) {
      backend_.submit_replay(std::move(cmds), std::move(plan), std::move(on_complete));
    } else {
      backend_.submit(std::move(cmds), std::move(on_complete));
    }
  } catch (const std::exception& e) {
    // The backend refused the work: nothing ran and no callback will come.
    complete(seq, bytes, std::string("submit failed: ") + e.what());
  }
}

void Queue::complete(uint64_t seq, int64_t bytes, const std::string& error) {
  try {
    std::lock_guard<std::mutex> d(done_mu_);
    completed_seq_ = std::max(completed_seq_, seq);
    in_flight_--;
    in_flight_bytes_ -= bytes;
    if (!error.empty() && first_error_.empty()) first_error_ = error;
    done_cv_.notify_all();  // under the lock: the queue may be destroyed once a waiter wakes
  } catch (...) {
  }
}

void Queue::wait_seq(uint64_t seq) {
  if (seq > 0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (seq >= open_seq_) commit_locked();
    }
    std::unique_lock<std::mutex> d(done_mu_);
    done_cv_.wait(d, [&] { return completed_seq_ >= seq; });
  }
  raise_pending_error();
}

void Queue::wait_for_writer(const Buffer& b) {
  wait_seq(b.last_writer_seq.load());
  std::shared_ptr<const std::string> failure;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Buffer& mutable_b = const_cast<Buffer&>(b);
    settle_locked(mutable_b);
    failure = mutable_b.failure;
  }
  if (failure) throw KernelFailure(not_computed(*failure));
}

void Queue::wait_for_access(const Buffer& b) {
  wait_seq(std::max(b.last_writer_seq.load(), b.last_reader_seq.load()));
}

void Queue::synchronize() {
  uint64_t last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    commit_locked();
    last = open_seq_ - 1;
  }
  wait_seq(last);
}

void Queue::drain() {
  uint64_t last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    commit_locked();
    last = open_seq_ - 1;
  }
  std::unique_lock<std::mutex> d(done_mu_);
  done_cv_.wait(d, [&] { return completed_seq_ >= last; });
}

void Queue::raise_pending_error() {
  std::string err;
  {
    std::lock_guard<std::mutex> d(done_mu_);
    if (first_error_.empty()) return;
    err.swap(first_error_);
  }
  throw KernelFailure(err);
}

QueueStats Queue::stats() {
  std::lock_guard<std::mutex> d(done_mu_);
  return QueueStats{committed_, in_flight_, completed_seq_,
                    ops_encoded_.load(std::memory_order_relaxed)};
}

}  // namespace tl
