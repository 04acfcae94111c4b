#pragma once
// Helpers shared by the ops_*.cpp files: the device an op runs on, output allocation, and the
// one encode call. An op takes its device from the current device and refuses tensors of a
// device that was shut down or replaced (their queue no longer accepts work).
#include <initializer_list>
#include <memory>
#include <string>

#include "errors.h"
#include "ops.h"

namespace tl::detail {

std::shared_ptr<Device> op_device(std::initializer_list<const Tensor*> inputs, const char* op);
Tensor new_tensor(Device& d, const Shape& shape, DType dtype, const char* op);
// A view of x with new geometry (shares the buffer).
Tensor make_view(const Tensor& x, Shape shape, std::vector<int64_t> strides, int64_t byte_offset);
void require_plain(const Tensor& x, const char* op);  // not quantized
std::string describe(const Tensor& x);                // "[2, 3] f32"

inline void encode(Device& d, Command cmd, std::initializer_list<const Tensor*> reads,
                   std::initializer_list<const Tensor*> writes) {
  std::vector<Buffer*> r, w;
  r.reserve(reads.size());
  w.reserve(writes.size());
  for (const Tensor* t : reads)
    if (t && t->buffer) r.push_back(t->buf());
  for (const Tensor* t : writes)
    if (t && t->buffer) w.push_back(t->buf());
  d.queue().encode(std::move(cmd), r, w);
}

}  // namespace tl::detail
