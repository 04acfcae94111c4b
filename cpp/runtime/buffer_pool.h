#pragma once
// BufferPool: device memory reuse, reservations and the memory ledger.
// Invariants (docs/runtime.md R1, R6, R7):
//  - A block enters the cache (or its reservation's free list) only through release(), which the
//    runtime calls when the last shared_ptr<Buffer> is dropped: no tensor and no command buffer
//    (they retain every buffer they touch until completion) references it any more.
//  - release() may run on any thread (completion callbacks); it only queues the block. collect(),
//    called on host threads, poisons, caches or frees it, so backends are never called from a
//    completion callback.
//  - live + cached + idle reserved bytes == bytes currently allocated from the backend.
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backend.h"
#include "debug_config.h"
#include "dtype.h"

namespace tl {

struct Reservation {
  std::vector<int64_t> shape;
  DType dtype = DType::F32;
  bool learnable = false;
  size_t bytes_each = 0;
  std::vector<void*> blocks;  // every block of this reservation
  std::vector<void*> free;    // blocks not handed out
  int64_t hits = 0, misses = 0;
};

// One device allocation as the pool hands it out.
struct Block {
  void* ptr = nullptr;
  size_t bytes = 0;                    // allocated size (size class or exact reservation size)
  Reservation* reservation = nullptr;  // owner reservation, if any
};

struct MemoryStats {
  int64_t live_bytes = 0, peak_bytes = 0, cached_bytes = 0, reserved_bytes = 0,
          device_bytes = 0, allocations = 0, frees = 0, pool_hits = 0, pool_misses = 0,
          reservation_hits = 0, reservation_misses = 0, evictions = 0, cache_limit_bytes = 0;
};

class BufferPool {
 public:
  BufferPool(Backend& backend, DebugConfig& debug);
  ~BufferPool();  // frees everything still owned; call teardown() first for a clean ledger
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A block of at least `bytes` for a tensor of (shape, dtype): from a matching reservation, else
  // the cache, else a new device allocation (after trimming the cache and retrying once on
  // failure). Throws OutOfMemoryError.
  Block acquire(const std::vector<int64_t>& shape, DType dtype, size_t bytes);
  // Thread-safe, never blocks on the device: queues the block for collect().
  void release(const Block& block);
  // Processes released blocks: poison (debug), then into their reservation, the cache or freed.
  void collect();

  void clear_cache();  // frees every cached block (the caller has drained the queue)
  void teardown();     // collect, free cache and all reservation blocks (they must be idle)
  void reserve(const std::vector<int64_t>& shape, DType dtype, int64_t count, bool learnable);
  std::vector<Reservation> reservations() const;  // snapshot (blocks fields left empty)
  MemoryStats stats();
  void reset_peak();
  void set_cache_limit(int64_t bytes);
  size_t max_allocation() const { return max_allocation_; }

  // Rounds a request up to its size class: 256 B minimum, then four classes per power of two.
  static size_t size_class(size_t bytes);

 private:
  struct CachedBlock {
    void* ptr;
    size_t bytes;
    std::multimap<size_t, std::list<CachedBlock>::iterator>::iterator by_size;
  };
  void* device_allocate_locked(size_t bytes, const std::vector<int64_t>& shape, DType dtype);
  void free_cached_locked(std::list<CachedBlock>::iterator it);
  void evict_to_limit_locked();
  void trace(const char* what, size_t bytes, const void* ptr) const;

  Backend& backend_;
  DebugConfig& debug_;
  mutable std::mutex mu_;
  std::list<CachedBlock> lru_;  // front = most recently cached
  std::multimap<size_t, std::list<CachedBlock>::iterator> by_size_;
  std::map<std::pair<std::vector<int64_t>, int>, Reservation> reservations_;
  MemoryStats st_;
  size_t max_allocation_ = 0;

  std::mutex pending_mu_;
  std::vector<Block> pending_;
};

}  // namespace tl
