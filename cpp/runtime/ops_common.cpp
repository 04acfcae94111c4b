// Shared op helpers, type promotion and broadcasting: see ops.h and ops_internal.h.
#include <algorithm>

#include "ops_internal.h"

namespace tl {

namespace {
int promotion_rank(DType t) {
  switch (t) {
    case DType::Bool: return 0;
    case DType::I32: return 1;
    case DType::I64: return 2;
    case DType::F16: case DType::BF16: return 3;
    case DType::F32: return 4;
    default: return 5;
  }
}
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if ((a == DType::F16 && b == DType::BF16) || (a == DType::BF16 && b == DType::F16))
    return DType::F32;
  return promotion_rank(a) >= promotion_rank(b) ? a : b;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw ShapeError(std::string(op) + ": shapes " + shape_str(a) + " and " + shape_str(b) +
                       " cannot be broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int normalize_dim(int64_t dim, int ndim, const char* op) {
  int64_t d = dim < 0 ? dim + ndim : dim;
  if (d < 0 || d >= ndim)
    throw ShapeError(std::string(op) + ": dim " + std::to_string(dim) +
                     " is out of range for a tensor of rank " + std::to_string(ndim));
  return static_cast<int>(d);
}

namespace detail {

std::shared_ptr<Device> op_device(std::initializer_list<const Tensor*> inputs, const char* op) {
  std::shared_ptr<Device> d = op_device_dyn(inputs, op);
  if (d->recording()) {
    for (const Tensor* t : inputs)
      if (t && t->dyn)
        d->abandon_recording(std::string(op) + " uses a view whose length depends on a scalar argument");
  }
  return d;
}

std::shared_ptr<Device> op_device_dyn(std::initializer_list<const Tensor*> inputs, const char* op) {
  std::shared_ptr<Device> d = current_device();
  for (const Tensor* t : inputs) {
    if (!t) continue;
    if (!t->buffer)
      throw TLError(std::string(op) + ": tensor has no storage");
    if (t->buffer->device.get() != d.get())
      throw TLError(std::string(op) + ": a tensor belongs to a device that was shut down or "
                    "replaced (backend '" + t->buffer->device->backend_name() +
                    "'); create it again on the current device");
  }
  return d;
}

Tensor new_tensor(Device& d, const Shape& shape, DType dtype, const char* op) {
  size_t bytes = checked_bytes(shape, dtype, op);
  Tensor t;
  t.buffer = d.allocate(shape, dtype, bytes);
  t.shape = shape;
  t.strides = contiguous_strides(shape);
  t.dtype = dtype;
  return t;
}

Tensor make_view(const Tensor& x, Shape shape, std::vector<int64_t> strides, int64_t byte_offset) {
  if (x.dyn && x.buffer) x.device().abandon_recording("a view of a view whose length depends on a scalar argument");
  Tensor t;
  t.buffer = x.buffer;
  t.byte_offset = byte_offset;
  t.shape = std::move(shape);
  t.strides = std::move(strides);
  t.dtype = x.dtype;
  return t;
}

void require_plain(const Tensor& x, const char* op) {
  if (is_quantized(x.dtype))
    throw DTypeError(std::string(op) + ": not supported for quantized " + dtype_name(x.dtype) +
                     " tensors (use linear, embedding or astype(\"f32\"))");
}

std::string describe(const Tensor& x) { return shape_str(x.shape) + " " + dtype_name(x.dtype); }

}  // namespace detail
}  // namespace tl
