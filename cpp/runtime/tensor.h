#pragma once
// Tensor: a handle (buffer, byte offset, shape, strides in elements, dtype). Views share the
// buffer. Quantized tensors are 2-D [rows, cols] of whole blocks, row-major; their strides are
// nominal ({cols, 1}) and only row slices of them are views.
// Invariant: every Tensor that refers to device memory holds a shared_ptr to its Buffer, so the
// memory cannot be recycled while the handle exists (R1).
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "buffer.h"
#include "dtype.h"
#include "kernels.h"

namespace tl {

// Counts live Tensor objects (memory_stats()["live_tensors"]).
class LiveTensorToken {
 public:
  LiveTensorToken() { counter().fetch_add(1, std::memory_order_relaxed); }
  LiveTensorToken(const LiveTensorToken&) : LiveTensorToken() {}
  LiveTensorToken& operator=(const LiveTensorToken&) { return *this; }
  ~LiveTensorToken() { counter().fetch_sub(1, std::memory_order_relaxed); }
  static int64_t count() { return counter().load(); }

 private:
  static std::atomic<int64_t>& counter() {
    static std::atomic<int64_t> c{0};
    return c;
  }
};

struct DynSlice;

class Tensor {
 public:
  std::shared_ptr<Buffer> buffer;
  int64_t byte_offset = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // elements
  DType dtype = DType::F32;
  // Set only on a slice with a bound that depends on a compiled function's scalar inputs (recording.h).
  std::shared_ptr<const DynSlice> dyn;

  int ndim() const { return static_cast<int>(shape.size()); }
  int64_t numel() const;
  size_t nbytes() const;  // bytes of the elements (contiguous size)
  bool is_contiguous() const;
  Device& device() const { return *buffer->device; }
  Buffer* buf() const { return buffer.get(); }
  View view() const;  // throws ShapeError above kMaxDims
  int64_t elem_offset() const;  // byte_offset in elements (rows * cols for quantized)

 private:
  LiveTensorToken token_;
};

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);
// Elements in `shape`, checked for negative dims and overflow (ShapeError / OutOfMemoryError).
int64_t checked_numel(const std::vector<int64_t>& shape, const char* op);
// Bytes for `numel` elements of `dtype`, checked for overflow and whole quantized blocks.
size_t checked_bytes(const std::vector<int64_t>& shape, DType dtype, const char* op);

}  // namespace tl
