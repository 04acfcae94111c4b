// Recording: see recording.h for the invariants this file keeps.
#include <atomic>
#include "recording.h"

#include <cmath>

#include "device.h"
#include "ops_internal.h"

namespace tl {

double Affine::eval(const std::vector<double>& scalars) const {
  double v = constant;
  for (const auto& [slot, coef] : terms) v += coef * scalars.at(static_cast<size_t>(slot));
  return v;
}

int64_t DynInt::at(const std::vector<double>& scalars, const char* what) const {
  if (!form) return value;
  double v = form->eval(scalars);
  double r = std::nearbyint(v);
  if (!std::isfinite(v) || std::fabs(v - r) > 1e-6 || std::fabs(r) > 9.0e15)
    throw ShapeError(std::string(what) + ": replayed value " + std::to_string(v) + " is not an integer");
  return static_cast<int64_t>(r);
}

double DynScalar::at(const std::vector<double>& scalars) const {
  return form ? form->eval(scalars) : value;
}

View DynSlice::rebuild(const View& recorded, const std::vector<double>& scalars, const char* op) const {
  int64_t s = start.at(scalars, op), e = stop.at(scalars, op);
  if (s < 0 || e < s || e > base_len)
    throw ShapeError(std::string(op) + ": replayed slice [" + std::to_string(s) + ":" +
                     std::to_string(e) + "] is out of range of a dim of size " +
                     std::to_string(base_len));
  View v = recorded;
  v.data = static_cast<char*>(recorded.data) + (s - start.value) * stride_bytes;
  v.shape[dim] = e - s;
  return v;
}

uint64_t Recording::new_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

Recording::Recording(int n_scalars) : n_scalars_(n_scalars) {
  if (n_scalars < 0) throw TLError("Recording: the number of scalar inputs must be >= 0");
}

Recording::~Recording() {
  if (state_ == State::Recording) stop_recording();
}

void Recording::begin() {
  if (state_ != State::Idle) throw TLError("Recording.begin: this recording was already started");
  device_ = current_device();
  if (device_->recording())
    throw TLError("Recording.begin: another recording is active (compiled functions do not nest)");
  device_->set_recording(this);
  state_ = State::Recording;
}

void Recording::stop_recording() {
  if (device_ && device_->recording() == this) device_->set_recording(nullptr);
}

void Recording::abandon(const std::string& reason) {
  if (reason_.empty()) reason_ = reason;
  if (state_ == State::Recording) return;  // finish() turns it into Abandoned
  if (state_ != State::Idle) state_ = State::Abandoned;
}

int Recording::add_scalar_input() {
  if (state_ != State::Recording) throw TLError("Recording.add_scalar_input: not recording");
  return n_scalars_++;
}

void Recording::pause() {
  if (state_ != State::Recording) throw TLError("Recording.pause: not recording");
  stop_recording();
}

void Recording::resume() {
  if (state_ != State::Recording) throw TLError("Recording.resume: not recording");
  if (device_->recording() == this) return;
  if (device_->recording())
    throw TLError("Recording.resume: another recording is active (compiled functions do not nest)");
  device_->set_recording(this);
}

void Recording::cancel() {
  stop_recording();
  if (reason_.empty()) reason_ = "the call raised an error";
  state_ = State::Abandoned;
  entries_.clear();
  buffers_.clear();
  buffer_index_.clear();
  slot_index_.clear();
  inputs_.clear();
}

void Recording::note(Buffer* b, bool write) {
  auto it = buffer_index_.find(b);
  size_t i;
  if (it == buffer_index_.end()) {
    i = buffers_.size();
    BufferRef ref;
    ref.outside = b->shared_from_this();
    buffers_.push_back(std::move(ref));
    buffer_index_.emplace(b, i);
  } else {
    i = it->second;
  }
  if (write) {
    buffers_[i].written = true;
    auto s = slot_index_.find(b);
    if (s != slot_index_.end()) inputs_[s->second].written = true;
  } else {
    buffers_[i].read = true;
  }
}

void Recording::own(const std::shared_ptr<Buffer>& b) {
  if (state_ != State::Recording || !b || !reason_.empty()) return;
  if (buffer_index_.count(b.get())) return;
  BufferRef ref;
  ref.owned = b;
  buffer_index_.emplace(b.get(), buffers_.size());
  buffers_.push_back(std::move(ref));
}

void Recording::add(const Command& cmd, const std::vector<Buffer*>& reads,
                    const std::vector<Buffer*>& writes) {
  if (state_ != State::Recording || !reason_.empty()) return;
  for (Buffer* b : reads) note(b, false);
  for (Buffer* b : writes) note(b, true);
  entries_.push_back(Entry{cmd, nullptr, ReplayCommandKind::Static});
}

void Recording::add_dynamic(DynamicCommand make, const std::vector<Buffer*>& reads,
                            const std::vector<Buffer*>& writes) {
  if (state_ != State::Recording || !reason_.empty()) return;
  for (Buffer* b : reads) note(b, false);
  for (Buffer* b : writes) note(b, true);
  entries_.push_back(Entry{nullptr, std::move(make), ReplayCommandKind::Dynamic});
}

Tensor Recording::bind_input(const Tensor& arg) {
  if (state_ != State::Recording) throw TLError("Recording.bind_input: not recording");
  if (!arg.buffer) throw TLError("Recording.bind_input: tensor has no storage");
  if (is_quantized(arg.dtype)) {
    abandon("a quantized tensor is passed as an argument");
    return arg;
  }
  size_t i = inputs_.size();
  Tensor slot = empty(arg.shape, arg.dtype);  // owned: allocated while recording
  Input in;
  in.shape = arg.shape;
  in.dtype = arg.dtype;
  in.slot = slot;
  in.arg = arg;
  inputs_.push_back(in);
  if (slot.numel() > 0) {
    View sv = arg.view(), dv = slot.view();
    // Record-time copy through the queue; the recorded entry copies each replay's input instead.
    device_->queue().encode([sv, dv](Kernels& k) { k.copy(sv, dv); }, {arg.buf()}, {slot.buf()});
    note(slot.buf(), true);  // before slot_index_ knows it: the input copy is not a write by the body
    entries_.push_back(Entry{nullptr,
                             [i, dv](const ReplayContext& ctx) -> Command {
                               View src = ctx.inputs[i].view();
                               return [src, dv](Kernels& k) { k.copy(src, dv); };
                             },
                             ReplayCommandKind::Outside});
  }
  slot_index_.emplace(slot.buf(), i);
  return slot;
}

std::optional<Tensor> Recording::caller_view(const Tensor& t) const {
  if (!t.buffer || t.dyn) return std::nullopt;
  auto s = slot_index_.find(t.buf());
  if (s != slot_index_.end()) {
    const Input& in = inputs_[s->second];
    if (!in.arg.buffer || !in.arg.is_contiguous() || !in.slot.is_contiguous()) return std::nullopt;
    Tensor v = t;  // the same elements of the argument: slot and argument share their layout
    v.buffer = in.arg.buffer;
    v.byte_offset = in.arg.byte_offset + (t.byte_offset - in.slot.byte_offset);
    return v;
  }
  auto it = buffer_index_.find(t.buf());
  if (it != buffer_index_.end() && buffers_[it->second].owned) return std::nullopt;
  return t;
}

std::vector<Tensor> Recording::finish(const std::vector<Tensor>& outputs) {
  if (state_ != State::Recording) throw TLError("Recording.finish: not recording");
  Device& dev = *device_;
  // Copy-back of inputs the body wrote in place (eagerly now, recorded for replays).
  for (size_t i = 0; i < inputs_.size(); ++i) {
    Input& in = inputs_[i];
    if (!in.written || in.slot.numel() == 0) continue;
    bool broadcast = false;
    for (size_t d = 0; d < in.arg.shape.size(); ++d)
      if (in.arg.strides[d] == 0 && in.arg.shape[d] > 1) broadcast = true;
    if (broadcast) {
      abandon("the function writes into a broadcast argument");
      continue;
    }
    View sv = in.slot.view(), dv = in.arg.view();
    dev.queue().encode([sv, dv](Kernels& k) { k.copy(sv, dv); }, {in.slot.buf()}, {in.arg.buf()});
    entries_.push_back(Entry{nullptr,
                             [i, sv](const ReplayContext& ctx) -> Command {
                               View dst = ctx.inputs[i].view();
                               return [sv, dst](Kernels& k) { k.copy(sv, dst); };
                             },
                             ReplayCommandKind::Outside});
  }
  stop_recording();  // allocations below are the caller's, not the recording's
  std::vector<Tensor> results;
  for (const Tensor& t : outputs) {
    auto it = t.buffer ? buffer_index_.find(t.buf()) : buffer_index_.end();
    bool inside = it != buffer_index_.end() && buffers_[it->second].owned && !slot_index_.count(t.buf());
    if (t.dyn) abandon("the result is a view whose length depends on a scalar argument");
    else if (!inside) abandon("the result is an argument or a tensor made outside the function");
    else if (is_quantized(t.dtype)) abandon("the result is a quantized tensor");
    Tensor fresh = detail::new_tensor(dev, t.shape, t.dtype, "compiled function result");
    if (t.numel() > 0) {
      View sv = t.view(), dv = fresh.view();
      dev.queue().encode([sv, dv](Kernels& k) { k.copy(sv, dv); }, {t.buf()}, {fresh.buf()});
      outputs_.push_back(Output{sv, t.shape, t.dtype});
    } else {
      outputs_.push_back(Output{View{}, t.shape, t.dtype});
    }
    results.push_back(fresh);
  }
  for (Input& in : inputs_) in.arg = Tensor();
  // Escape check: once the queue drained, only tensor handles hold owned buffers besides this
  // recording. A handle other than an output's means a tensor made inside lives on elsewhere
  // (stored into an object), which replays would not update.
  if (reason_.empty()) {
    dev.drain();
    std::unordered_map<const Buffer*, int> allowed;
    for (const Tensor& t : outputs)
      if (t.buffer) allowed[t.buf()] = 1;
    for (const BufferRef& ref : buffers_) {
      if (!ref.owned || allowed.count(ref.owned.get())) continue;
      long held = slot_index_.count(ref.owned.get()) ? 2 : 1;  // a slot is also held by inputs_
      if (ref.owned.use_count() > held) {
        abandon("a tensor made inside the function is kept outside it (stored into an object or a "
                "variable that outlives the call)");
        break;
      }
    }
  }
  state_ = reason_.empty() ? State::Ready : State::Abandoned;
  if (state_ == State::Ready) {
    auto plan = std::make_shared<ReplayPlan>();
    plan->recording_id = id_;
    for (const Entry& e : entries_) plan->kinds.push_back(e.kind);
    for (const Output& o : outputs_)
      if (o.src.data != nullptr) plan->kinds.push_back(ReplayCommandKind::Outside);
    plan_ = std::move(plan);
  }
  if (state_ == State::Abandoned) {
    entries_.clear();
    buffers_.clear();
    buffer_index_.clear();
    slot_index_.clear();
    for (Input& in : inputs_) in.slot = Tensor();
    outputs_.clear();
  }
  return results;
}

std::vector<Tensor> Recording::replay(const std::vector<double>& scalars,
                                      const std::vector<Tensor>& inputs) {
  if (state_ == State::Abandoned) throw ReplayRefused("replay refused: the recording was abandoned (" + reason_ + ")");
  if (state_ != State::Ready) throw ReplayRefused("replay refused: the recording is not finished");
  if (static_cast<int>(scalars.size()) != n_scalars_)
    throw ShapeError("replay: " + std::to_string(scalars.size()) + " scalar inputs given, the recording has " +
                     std::to_string(n_scalars_));
  if (inputs.size() != inputs_.size())
    throw ShapeError("replay: " + std::to_string(inputs.size()) + " tensor inputs given, the recording has " +
                     std::to_string(inputs_.size()));
  std::shared_ptr<Device> dev = current_device();
  if (dev != device_)
    throw ReplayRefused("replay refused: the device it was recorded on was shut down or replaced");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.buffer || t.shape != inputs_[i].shape || t.dtype != inputs_[i].dtype)
      throw ShapeError("replay: input " + std::to_string(i) + " is " + detail::describe(t) +
                       ", the recording expects " + shape_str(inputs_[i].shape) + " " +
                       dtype_name(inputs_[i].dtype));
    if (t.buffer->device != device_) throw ReplayRefused("replay refused: an input belongs to another device");
  }
  std::vector<std::shared_ptr<Buffer>> retained;
  retained.reserve(buffers_.size() + inputs.size() + outputs_.size());
  std::vector<Buffer*> reads, writes;
  for (const BufferRef& ref : buffers_) {
    std::shared_ptr<Buffer> b = ref.owned ? ref.owned : ref.outside.lock();
    if (!b)
      throw ReplayRefused("replay refused: a tensor the recording uses was released (the model was "
                          "closed or the KV cache reallocated)");
    if (ref.read) reads.push_back(b.get());
    if (ref.written) writes.push_back(b.get());
    retained.push_back(std::move(b));
  }
  ReplayContext ctx{scalars, inputs};
  std::vector<Command> cmds;
  cmds.reserve(entries_.size() + outputs_.size());
  for (const Entry& e : entries_) cmds.push_back(e.make ? e.make(ctx) : e.cmd);
  for (size_t i = 0; i < inputs.size(); ++i) {
    reads.push_back(inputs[i].buf());
    if (inputs_[i].written) writes.push_back(inputs[i].buf());
    retained.push_back(inputs[i].buffer);
  }
  std::vector<Tensor> results;
  for (const Output& o : outputs_) {
    Tensor fresh = detail::new_tensor(*dev, o.shape, o.dtype, "compiled function result");
    if (fresh.numel() > 0) {
      View sv = o.src, dv = fresh.view();
      cmds.push_back([sv, dv](Kernels& k) { k.copy(sv, dv); });
      writes.push_back(fresh.buf());
      retained.push_back(fresh.buffer);
    }
    results.push_back(fresh);
  }
  // The plan names every command of this command buffer (it is only a hint to the backend; a
  // mismatch would be a bug here, so the replay then runs without it).
  std::shared_ptr<const ReplayPlan> plan = plan_ && plan_->kinds.size() == cmds.size() ? plan_ : nullptr;
  dev->queue().submit_recorded(std::move(cmds), reads, writes, std::move(retained), std::move(plan));
  replays_++;
  return results;
}

std::string Recording::cannot_replay() const {
  if (state_ != State::Ready) return "the recording is not replayable";
  if (!device_ || !has_current_device() || current_device() != device_)
    return "the device it was recorded on was shut down or replaced";
  for (const BufferRef& ref : buffers_)
    if (!ref.owned && ref.outside.expired()) return "a tensor the recording uses was released";
  return "";
}

int64_t Recording::n_dynamic() const {
  int64_t n = 0;
  for (const Entry& e : entries_) n += e.make ? 1 : 0;
  return n;
}

int64_t Recording::owned_bytes() const {
  int64_t n = 0;
  for (const BufferRef& ref : buffers_)
    if (ref.owned) n += static_cast<int64_t>(ref.owned->bytes());
  return n;
}

}  // namespace tl
