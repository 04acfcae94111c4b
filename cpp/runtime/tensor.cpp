// Tensor handles: see tensor.h.
#include "tensor.h"

#include "device.h"
#include "errors.h"

namespace tl {

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t Tensor::nbytes() const {
  if (is_quantized(dtype)) return shape.empty() ? 0 : static_cast<size_t>(shape[0]) * row_bytes(dtype, shape[1]);
  return static_cast<size_t>(numel()) * static_cast<size_t>(block_bytes(dtype));
}

bool Tensor::is_contiguous() const {
  if (is_quantized(dtype)) return true;
  int64_t expect = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

int64_t Tensor::elem_offset() const {
  if (is_quantized(dtype)) {
    int64_t rb = static_cast<int64_t>(row_bytes(dtype, shape.size() == 2 ? shape[1] : 0));
    return rb ? byte_offset / rb * (shape.size() == 2 ? shape[1] : 0) : 0;
  }
  return byte_offset / block_bytes(dtype);
}

View Tensor::view() const {
  if (ndim() > kMaxDims)
    throw ShapeError("tensor of rank " + std::to_string(ndim()) + " exceeds the maximum rank " +
                     std::to_string(kMaxDims));
  View v;
  v.data = buffer ? static_cast<char*>(buffer->data()) + byte_offset : nullptr;
  v.dtype = dtype;
  v.ndim = ndim();
  for (int i = 0; i < ndim(); ++i) {
    v.shape[i] = shape[i];
    v.strides[i] = strides[i];
  }
  return v;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= shape[i] > 0 ? shape[i] : 1;
  }
  return s;
}

int64_t checked_numel(const std::vector<int64_t>& shape, const char* op) {
  if (shape.size() > static_cast<size_t>(kMaxDims))
    throw ShapeError(std::string(op) + ": rank " + std::to_string(shape.size()) +
                     " exceeds the maximum rank " + std::to_string(kMaxDims));
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw ShapeError(std::string(op) + ": negative dimension in shape " + shape_str(shape));
    if (d != 0 && n > INT64_MAX / d)
      throw OutOfMemoryError(std::string(op) + ": shape " + shape_str(shape) + " is too large");
    n *= d;
  }
  return n;
}

size_t checked_bytes(const std::vector<int64_t>& shape, DType dtype, const char* op) {
  int64_t n = checked_numel(shape, op);
  int64_t be = block_elems(dtype);
  if (is_quantized(dtype)) {
    if (shape.size() != 2 || shape[1] % be != 0)
      throw ShapeError(std::string(op) + ": a " + dtype_name(dtype) + " tensor must be 2-D with " +
                       "columns a multiple of " + std::to_string(be) + ", got " + shape_str(shape));
  }
  int64_t blocks = n / be;
  int64_t bb = block_bytes(dtype);
  if (blocks > INT64_MAX / bb)
    throw OutOfMemoryError(std::string(op) + ": shape " + shape_str(shape) + " is too large");
  return static_cast<size_t>(blocks * bb);
}

}  // namespace tl
