// Creation ops and host transfers. Host transfers keep R2: a read waits for the buffer's last
// writer, a write into an existing buffer waits for its last reader and writer. A fresh output
// buffer needs no wait: R1 guarantees no unfinished command buffer still uses its memory.
#include <cmath>
#include <random>

#include "ops_internal.h"

namespace tl {

using detail::encode;
using detail::new_tensor;
using detail::op_device;

Tensor empty(const Shape& shape, DType dtype) {
  auto dev = current_device();
  return new_tensor(*dev, shape, dtype, "empty");
}

Tensor full(const Shape& shape, double value, DType dtype) {
  if (is_quantized(dtype)) throw DTypeError(std::string("full: cannot fill a quantized ") + dtype_name(dtype) + " tensor");
  auto dev = current_device();
  Tensor out = new_tensor(*dev, shape, dtype, "full");
  if (out.numel() == 0) return out;
  View ov = out.view();
  encode(*dev, [ov, value](Kernels& k) { k.fill(ov, value); }, {}, {&out});
  return out;
}

Tensor arange(double start, double stop, double step, DType dtype) {
  if (step == 0 || !std::isfinite(step) || !std::isfinite(start) || !std::isfinite(stop))
    throw ShapeError("arange: start, stop and step must be finite and step non-zero");
  if (is_quantized(dtype) || dtype == DType::Bool)
    throw DTypeError(std::string("arange: unsupported dtype ") + dtype_name(dtype));
  double count = std::ceil((stop - start) / step);
  if (count > 1e12) throw OutOfMemoryError("arange: too many elements");
  int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  auto dev = current_device();
  Tensor out = new_tensor(*dev, {n}, dtype, "arange");
  if (n == 0) return out;
  View ov = out.view();
  encode(*dev, [ov, start, step](Kernels& k) { k.arange(ov, start, step); }, {}, {&out});
  return out;
}

Tensor rand_uniform(const Shape& shape, uint64_t seed) {
  current_device()->abandon_recording("it draws random numbers (a replay would repeat them)");
  int64_t n = checked_numel(shape, "rand");
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> host(static_cast<size_t>(n));
  for (float& v : host) v = dist(rng);
  return from_host(host.data(), shape, DType::F32);
}

Tensor rand_normal(const Shape& shape, uint64_t seed) {
  current_device()->abandon_recording("it draws random numbers (a replay would repeat them)");
  int64_t n = checked_numel(shape, "randn");
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> host(static_cast<size_t>(n));
  for (float& v : host) v = dist(rng);
  return from_host(host.data(), shape, DType::F32);
}

Tensor from_host(const void* data, const Shape& shape, DType dtype) {
  auto dev = current_device();
  Tensor out = new_tensor(*dev, shape, dtype, "from_numpy");
  size_t bytes = out.nbytes();
  if (bytes) dev->backend().copy_to_device(out.buffer->data(), data, bytes);
  return out;
}

Tensor from_quantized(const void* raw, size_t raw_bytes, DType dtype, const Shape& shape) {
  if (!is_quantized(dtype) && dtype != DType::F16 && dtype != DType::BF16 && dtype != DType::F32)
    throw DTypeError(std::string("from_quantized: ") + dtype_name(dtype) + " is not a weight type");
  size_t expect = checked_bytes(shape, dtype, "from_quantized");
  if (shape.size() != 2)
    throw ShapeError("from_quantized: shape must be [rows, cols], got " + shape_str(shape));
  if (raw_bytes != expect)
    throw ShapeError("from_quantized: " + std::to_string(raw_bytes) + " bytes given, a " +
                     dtype_name(dtype) + " tensor " + shape_str(shape) + " needs " +
                     std::to_string(expect));
  return from_host(raw, shape, dtype);
}

void to_host(const Tensor& t, void* dst) {
  Device& dev = t.device();
  dev.abandon_recording("it reads a tensor on the host (print, item, numpy, sampling, or a branch "
                        "on a tensor's value)");
  Tensor c = t;
  if (!t.is_contiguous()) {
    // On t's own device (it may have been shut down): one copy kernel, then wait for it.
    c = new_tensor(dev, t.shape, t.dtype, "numpy");
    View sv = t.view(), dv = c.view();
    encode(dev, [sv, dv](Kernels& k) { k.copy(sv, dv); }, {&t}, {&c});
  }
  dev.queue().wait_for_writer(*c.buf());
  size_t bytes = c.nbytes();
  if (bytes) dev.backend().copy_to_host(dst, static_cast<char*>(c.buffer->data()) + c.byte_offset, bytes);
}

void write_from_host(const Tensor& dst, const void* src) {
  if (!dst.is_contiguous())
    throw ShapeError("write: the destination " + shape_str(dst.shape) + " is not contiguous");
  Device& dev = dst.device();
  dev.abandon_recording("it writes host data into an existing tensor");
  dev.queue().wait_for_access(*dst.buf());
  size_t bytes = dst.nbytes();
  if (bytes) dev.backend().copy_to_device(static_cast<char*>(dst.buffer->data()) + dst.byte_offset, src, bytes);
}

}  // namespace tl
