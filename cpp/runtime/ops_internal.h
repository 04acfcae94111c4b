#pragma once
// Helpers shared by the ops_*.cpp files: the device an op runs on, output allocation, and the
// one encode call. An op takes its device from the current device and refuses tensors of a
// device that was shut down or replaced (their queue no longer accepts work).
#include <initializer_list>
#include <memory>
#include <string>

#include "errors.h"
#include "ops.h"
#include "recording.h"

namespace tl::detail {

// Also abandons the device's recording when an input is a dynamic-length view (Tensor::dyn): only
// ops that rebuild such views at replay (copy_into, attention) use op_device_dyn instead.
std::shared_ptr<Device> op_device(std::initializer_list<const Tensor*> inputs, const char* op);
std::shared_ptr<Device> op_device_dyn(std::initializer_list<const Tensor*> inputs, const char* op);
Tensor new_tensor(Device& d, const Shape& shape, DType dtype, const char* op);
// A view of x with new geometry (shares the buffer).
Tensor make_view(const Tensor& x, Shape shape, std::vector<int64_t> strides, int64_t byte_offset);
void require_plain(const Tensor& x, const char* op);  // not quantized
std::string describe(const Tensor& x);                // "[2, 3] f32"

// The one encode call of every op; while a compiled function records, the command is also
// appended to the recording.
inline void encode(Device& d, Command cmd, std::initializer_list<const Tensor*> reads,
                   std::initializer_list<const Tensor*> writes) {
  std::vector<Buffer*> r, w;
  r.reserve(reads.size());
  w.reserve(writes.size());
  for (const Tensor* t : reads)
    if (t && t->buffer) r.push_back(t->buf());
  for (const Tensor* t : writes)
    if (t && t->buffer) w.push_back(t->buf());
  if (Recording* rec = d.recording()) rec->add(cmd, r, w);
  d.queue().encode(std::move(cmd), r, w);
}

// An op with parameters that depend on the scalar inputs of a compiled function: `cmd` runs now,
// `make` builds the command of each replay. Outside a recording this is encode().
inline void encode_dynamic(Device& d, Command cmd, DynamicCommand make,
                           std::initializer_list<const Tensor*> reads,
                           std::initializer_list<const Tensor*> writes) {
  std::vector<Buffer*> r, w;
  for (const Tensor* t : reads)
    if (t && t->buffer) r.push_back(t->buf());
  for (const Tensor* t : writes)
    if (t && t->buffer) w.push_back(t->buf());
  if (Recording* rec = d.recording()) rec->add_dynamic(std::move(make), r, w);
  d.queue().encode(std::move(cmd), r, w);
}

// True when `v` must be recorded as a dynamic parameter (a form, and a recording to serve).
inline bool recording_dynamic(const Device& d, const DynInt& v) { return v.form && d.recording(); }
inline bool recording_dynamic(const Device& d, const DynScalar& v) { return v.form && d.recording(); }

// An op whose command takes two host values per row (a batched decode step's slots and positions,
// each possibly dynamic): check(a, b) vets the values (now, and at each replay before the replay
// is queued) and make(a, b) builds the command. `what` names the op in a replay's errors.
template <class Check, class Make>
void encode_per_row(Device& d, const std::vector<DynInt>& a, const std::vector<DynInt>& b, const char* what,
                    Check check, Make make, std::initializer_list<const Tensor*> reads,
                    std::initializer_list<const Tensor*> writes) {
  const size_t n = a.size();
  std::vector<int64_t> a0(n), b0(n);
  bool dynamic = false;
  for (size_t i = 0; i < n; ++i) {
    a0[i] = a[i].value, b0[i] = b[i].value;
    dynamic = dynamic || recording_dynamic(d, a[i]) || recording_dynamic(d, b[i]);
  }
  check(a0, b0);
  if (!dynamic) {
    encode(d, make(std::move(a0), std::move(b0)), reads, writes);
    return;
  }
  encode_dynamic(
      d, make(a0, b0),
      [check, make, a, b, n, what](const ReplayContext& ctx) -> Command {
        std::vector<int64_t> av(n), bv(n);
        for (size_t i = 0; i < n; ++i) {
          av[i] = a[i].at(ctx.scalars, what);
          bv[i] = b[i].at(ctx.scalars, what);
        }
        check(av, bv);
        return make(std::move(av), std::move(bv));
      },
      reads, writes);
}

}  // namespace tl::detail
