// BufferPool: see buffer_pool.h for the invariants this file keeps.
#include "buffer_pool.h"

#include <unordered_set>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "errors.h"

namespace tl {

namespace {

size_t physical_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return size_t(1) << 34;
  return static_cast<size_t>(pages) * static_cast<size_t>(page);
}

std::string mib(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

BufferPool::BufferPool(Backend& backend, DebugConfig& debug) : backend_(backend), debug_(debug) {
  bool is_cpu = backend.memory_is_host_ram();
  size_t phys = physical_memory_bytes();
  int64_t max_mb = env_max_alloc_mb();
  max_allocation_ = max_mb > 0 ? static_cast<size_t>(max_mb) << 20
                               : (is_cpu ? phys : (size_t(1) << 40));
  int64_t limit_mb = env_cache_limit_mb();
  size_t default_limit = std::min<size_t>(phys / 4, size_t(4) << 30);
  st_.cache_limit_bytes = limit_mb >= 0 ? (limit_mb << 20) : static_cast<int64_t>(default_limit);
}

BufferPool::~BufferPool() { teardown(); }

size_t BufferPool::size_class(size_t bytes) {
  if (bytes <= 256) return 256;
  size_t p = 256;
  while (p * 2 < bytes) p *= 2;  // p < bytes <= 2p
  size_t quarter = p / 4;
  size_t c = p;
  while (c < bytes) c += quarter;
  return c;
}

void BufferPool::trace(const char* what, size_t bytes, const void* ptr) const {
  if (debug_.trace) std::fprintf(stderr, "tl-memory: %-8s %12zu B  %p\n", what, bytes, ptr);
}

void* BufferPool::device_allocate_locked(size_t bytes, const std::vector<int64_t>& shape,
                                          DType dtype) {
  if (bytes > max_allocation_) {
    throw OutOfMemoryError("out of memory: a tensor " + shape_str(shape) + " " +
                           dtype_name(dtype) + " needs " + mib(static_cast<int64_t>(bytes)) +
                           ", more than the largest allowed allocation (" +
                           mib(static_cast<int64_t>(max_allocation_)) + ")");
  }
  void* p = backend_.allocate(bytes);
  if (!p && !lru_.empty()) {
    while (!lru_.empty()) free_cached_locked(std::prev(lru_.end()));
    p = backend_.allocate(bytes);
  }
  if (!p) {
    throw OutOfMemoryError("out of memory: could not allocate " + mib(static_cast<int64_t>(bytes)) +
                           " for a tensor " + shape_str(shape) + " " + dtype_name(dtype) +
                           " (live " + mib(st_.live_bytes) + ")");
  }
  st_.allocations++;
  st_.device_bytes += static_cast<int64_t>(bytes);
  trace("alloc", bytes, p);
  return p;
}

void BufferPool::free_cached_locked(std::list<CachedBlock>::iterator it) {
  by_size_.erase(it->by_size);
  backend_.deallocate(it->ptr, it->bytes);
  trace("free", it->bytes, it->ptr);
  st_.cached_bytes -= static_cast<int64_t>(it->bytes);
  st_.device_bytes -= static_cast<int64_t>(it->bytes);
  st_.frees++;
  lru_.erase(it);
}

void BufferPool::evict_to_limit_locked() {
  while (st_.cached_bytes > st_.cache_limit_bytes && !lru_.empty()) {
    free_cached_locked(std::prev(lru_.end()));
    st_.evictions++;
  }
}

Block BufferPool::acquire(const std::vector<int64_t>& shape, DType dtype, size_t bytes) {
  collect();
  std::lock_guard<std::mutex> lock(mu_);
  Block b;
  if (!reservations_.empty()) {
    auto it = reservations_.find({shape, static_cast<int>(dtype)});
    if (it != reservations_.end()) {
      Reservation& r = it->second;
      if (!r.free.empty()) {
        b.ptr = r.free.back();
        r.free.pop_back();
        b.bytes = r.bytes_each;
        b.reservation = &r;
        r.hits++;
        st_.reservation_hits++;
        st_.live_bytes += static_cast<int64_t>(b.bytes);
        st_.peak_bytes = std::max(st_.peak_bytes, st_.live_bytes);
        trace("reserved", b.bytes, b.ptr);
        return b;
      }
      r.misses++;
      st_.reservation_misses++;
    }
  }
  size_t cls = size_class(bytes);
  if (cls < bytes) throw OutOfMemoryError("out of memory: allocation size overflows");
  auto found = by_size_.find(cls);
  if (found != by_size_.end()) {
    auto lit = found->second;
    b.ptr = lit->ptr;
    b.bytes = lit->bytes;
    by_size_.erase(found);
    lru_.erase(lit);
    st_.cached_bytes -= static_cast<int64_t>(b.bytes);
    st_.pool_hits++;
    trace("reuse", b.bytes, b.ptr);
  } else {
    b.ptr = device_allocate_locked(cls, shape, dtype);
    b.bytes = cls;
    st_.pool_misses++;
  }
  st_.live_bytes += static_cast<int64_t>(b.bytes);
  st_.peak_bytes = std::max(st_.peak_bytes, st_.live_bytes);
  return b;
}

void BufferPool::release(const Block& block) {
  std::lock_guard<std::mutex> lock(pending_mu_);
  pending_.push_back(block);
}

void BufferPool::collect() {
  std::vector<Block> done;
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    if (pending_.empty()) return;
    done.swap(pending_);
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const Block& b : done) {
    st_.live_bytes -= static_cast<int64_t>(b.bytes);
    if (debug_.poison) backend_.fill_bytes(b.ptr, 0xFF, b.bytes);
    if (b.reservation) {
      b.reservation->free.push_back(b.ptr);
      trace("unreserve", b.bytes, b.ptr);
      continue;
    }
    if (debug_.no_cache) {
      backend_.deallocate(b.ptr, b.bytes);
      trace("free", b.bytes, b.ptr);
      st_.device_bytes -= static_cast<int64_t>(b.bytes);
      st_.frees++;
      continue;
    }
    lru_.push_front(CachedBlock{b.ptr, b.bytes, {}});
    lru_.front().by_size = by_size_.emplace(b.bytes, lru_.begin());
    st_.cached_bytes += static_cast<int64_t>(b.bytes);
    trace("cache", b.bytes, b.ptr);
  }
  evict_to_limit_locked();
}

void BufferPool::clear_cache() {
  collect();
  std::lock_guard<std::mutex> lock(mu_);
  while (!lru_.empty()) free_cached_locked(std::prev(lru_.end()));
}

void BufferPool::teardown() {
  clear_cache();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& kv : reservations_) {
    Reservation& r = kv.second;
    // Blocks still handed out stay valid: they are freed when released (reservation_ cleared
    // below would dangle), so keep taken reservations alive and free only idle blocks. Linear in
    // the reservation's size: a million-block reservation tears down in well under a second.
    for (void* p : r.free) {
      backend_.deallocate(p, r.bytes_each);
      trace("free", r.bytes_each, p);
      st_.device_bytes -= static_cast<int64_t>(r.bytes_each);
      st_.reserved_bytes -= static_cast<int64_t>(r.bytes_each);
      st_.frees++;
    }
    if (r.free.size() == r.blocks.size()) {
      r.blocks.clear();
    } else {
      std::unordered_set<void*> freed(r.free.begin(), r.free.end());
      r.blocks.erase(std::remove_if(r.blocks.begin(), r.blocks.end(),
                                    [&](void* p) { return freed.count(p) != 0; }),
                     r.blocks.end());
    }
    r.free.clear();
  }
}

void BufferPool::reserve(const std::vector<int64_t>& shape, DType dtype, int64_t count,
                         bool learnable) {
  if (count <= 0) throw std::invalid_argument("buffer_reserve: count must be positive");
  size_t bytes = 0;
  {
    int64_t n = 1;
    for (int64_t d : shape) {
      if (d < 0) throw ShapeError("buffer_reserve: negative dimension in " + shape_str(shape));
      if (d != 0 && n > INT64_MAX / d) throw OutOfMemoryError("buffer_reserve: size overflows");
      n *= d;
    }
    if (n % block_elems(dtype) != 0)
      throw ShapeError("buffer_reserve: " + shape_str(shape) + " is not a whole number of " +
                       dtype_name(dtype) + " blocks");
    bytes = static_cast<size_t>(n / block_elems(dtype) * block_bytes(dtype));
    if (bytes == 0) bytes = 1;
  }
  collect();
  std::lock_guard<std::mutex> lock(mu_);
  // All or nothing: a reservation that runs out of memory part way gives back what it took and
  // leaves no (empty) entry behind.
  std::vector<void*> taken;
  taken.reserve(static_cast<size_t>(std::min<int64_t>(count, int64_t(1) << 20)));
  try {
    for (int64_t i = 0; i < count; ++i) {
      void* p = device_allocate_locked(bytes, shape, dtype);
      try {
        taken.push_back(p);
      } catch (...) {
        backend_.deallocate(p, bytes);
        st_.device_bytes -= static_cast<int64_t>(bytes);
        st_.frees++;
        throw;
      }
    }
  } catch (...) {
    for (void* p : taken) {
      backend_.deallocate(p, bytes);
      trace("free", bytes, p);
      st_.device_bytes -= static_cast<int64_t>(bytes);
      st_.frees++;
    }
    throw;
  }
  auto key = std::make_pair(shape, static_cast<int>(dtype));
  Reservation& r = reservations_[key];
  r.shape = shape;
  r.dtype = dtype;
  r.learnable = r.learnable || learnable;
  r.bytes_each = bytes;
  r.blocks.insert(r.blocks.end(), taken.begin(), taken.end());
  r.free.insert(r.free.end(), taken.begin(), taken.end());
  st_.reserved_bytes += static_cast<int64_t>(bytes) * static_cast<int64_t>(taken.size());
}

std::vector<Reservation> BufferPool::reservations() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Reservation> out;
  for (const auto& kv : reservations_) {
    Reservation r;
    r.shape = kv.second.shape;
    r.dtype = kv.second.dtype;
    r.learnable = kv.second.learnable;
    r.bytes_each = kv.second.bytes_each;
    r.hits = kv.second.hits;
    r.misses = kv.second.misses;
    r.blocks.resize(kv.second.blocks.size());
    r.free.resize(kv.second.free.size());
    out.push_back(std::move(r));
  }
  return out;
}

MemoryStats BufferPool::stats() {
  collect();
  std::lock_guard<std::mutex> lock(mu_);
  return st_;
}

void BufferPool::reset_peak() {
  collect();
  std::lock_guard<std::mutex> lock(mu_);
  st_.peak_bytes = st_.live_bytes;
}

void BufferPool::set_cache_limit(int64_t bytes) {
  if (bytes < 0) throw std::invalid_argument("set_cache_limit: bytes must be >= 0");
  std::lock_guard<std::mutex> lock(mu_);
  st_.cache_limit_bytes = bytes;
  evict_to_limit_locked();
}

}  // namespace tl
