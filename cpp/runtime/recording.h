#pragma once
// Recording: the commands one call of a compiled TL function encoded, replayed later as one command
// buffer with no Python per op (docs/compiled-functions.md). While a recording is the device's
// current one, every op still runs eagerly and is also appended here.
// Invariants:
//  - Buffers allocated while recording (intermediates, input slots, constants) are owned by the
//    recording: they never return to the pool while it lives, so nothing else shares their memory;
//    each replay retains them in its command buffer, so dropping the recording frees them only after
//    the last replay using them completed (R1). Buffers that existed before (weights, KV cache) are
//    held weakly: a replay locks them all first and is refused (ReplayRefused) if one was released.
//  - A replay is one command buffer submitted through Queue::submit_recorded (R3), stamping the
//    reader/writer sequence numbers of every buffer it touches (R2).
//  - Dynamic parameters (affine in the call's scalar inputs: a decode position, a learning rate) are
//    evaluated and bounds-checked before anything is submitted: an out-of-range replay is an error,
//    never a stray write.
//  - A recording may be paused: what runs meanwhile is eager only, and what it allocates is not
//    owned (it is outside state, like a weight). Host-computed scalar inputs (add_scalar_input)
//    extend the call's scalars; the driver supplies them at each replay.
//  - What a recording cannot express (host reads and writes, random numbers, a dynamic-length view
//    used by an op without a runtime length) abandons it: the call still completes eagerly and
//    correctly, and the recording refuses to replay, giving reason().
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend.h"
#include "buffer.h"
#include "errors.h"
#include "tensor.h"

namespace tl {

class Device;

struct ReplayRefused : TLError {
  using TLError::TLError;
};

// constant + sum(coef * scalar[slot]) over the recording's scalar inputs.
struct Affine {
  double constant = 0;
  std::vector<std::pair<int, double>> terms;
  double eval(const std::vector<double>& scalars) const;
};
using AffinePtr = std::shared_ptr<const Affine>;

// An int parameter: its value now, and (inside a recording) how it depends on the scalar inputs.
struct DynInt {
  int64_t value = 0;
  AffinePtr form;  // null: a constant
  DynInt() = default;
  DynInt(int64_t v) : value(v) {}  // NOLINT: plain ints convert
  DynInt(int64_t v, AffinePtr f) : value(v), form(std::move(f)) {}
  int64_t at(const std::vector<double>& scalars, const char* what) const;
};

struct DynScalar {
  double value = 0;
  AffinePtr form;
  DynScalar() = default;
  DynScalar(double v) : value(v) {}  // NOLINT
  DynScalar(double v, AffinePtr f) : value(v), form(std::move(f)) {}
  double at(const std::vector<double>& scalars) const;
};

// A view whose start and stop along `dim` depend on the scalar inputs (slice with a dynamic bound),
// e.g. the first pos+1 rows of a KV cache. Consumers that take the length at run time (attention,
// copy) rebuild the View at replay with rebuild(); any other op abandons the recording.
struct DynSlice {
  int dim = 0;
  int64_t base_len = 0;      // size of the sliced tensor along dim
  int64_t stride_bytes = 0;  // bytes per step along dim
  DynInt start, stop;        // recorded values and forms
  // `recorded` is the View the op built at record time; returns it moved to [start, stop) at
  // `scalars`, or throws ShapeError when that range leaves [0, base_len].
  View rebuild(const View& recorded, const std::vector<double>& scalars, const char* op) const;
};

struct ReplayContext {
  const std::vector<double>& scalars;
  const std::vector<Tensor>& inputs;
};
// Builds the command of one dynamic op for a replay; throws ShapeError when parameters are out of range.
using DynamicCommand = std::function<Command(const ReplayContext&)>;

class Recording {
 public:
  explicit Recording(int n_scalars);
  ~Recording();
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;

  // ---- recording (the Python driver calls these around one eager call) ----
  void begin();                        // becomes the current device's recording
  Tensor bind_input(const Tensor& arg);  // a private slot holding a copy of arg; the body uses the slot
  // Before finish(): what an uncompiled call would return for a result tensor `t` that shares memory
  // with its caller: a view of a slot is the same view of the argument (when the argument is
  // contiguous, like its slot), a tensor on a buffer the recording neither owns nor slots is `t`
  // itself. Empty for a tensor made inside, or a slot view of a strided argument.
  std::optional<Tensor> caller_view(const Tensor& t) const;
  // Ends recording. Each output is copied into a fresh tensor (returned), so callers never share
  // memory with later replays. Abandons if an output is not a tensor made inside, or if a tensor
  // made inside is still referenced by anything but the outputs (it escaped into outside state).
  std::vector<Tensor> finish(const std::vector<Tensor>& outputs);
  void cancel();  // ends recording after an error; the recording is abandoned
  void abandon(const std::string& reason);  // keeps the first reason
  // A further scalar input, fed at each replay after the call's own (a value the host computes
  // per call, such as an optimizer's step number); returns its slot. Only while recording.
  int add_scalar_input();
  // While paused, ops run eagerly without being recorded and the buffers they allocate belong to
  // the caller, not the recording (an optimizer's state made during its first recorded step):
  // later recorded ops use them as outside buffers, held weakly.
  void pause();
  void resume();
  bool recording() const { return state_ == State::Recording; }
  bool ready() const { return state_ == State::Ready; }
  const std::string& reason() const { return reason_; }

  // ---- called by the ops layer while this is the current recording ----
  void add(const Command& cmd, const std::vector<Buffer*>& reads, const std::vector<Buffer*>& writes);
  void add_dynamic(DynamicCommand make, const std::vector<Buffer*>& reads,
                   const std::vector<Buffer*>& writes);
  void own(const std::shared_ptr<Buffer>& b);  // a buffer allocated while recording

  // ---- replay ----
  // Runs the recorded commands with these scalar inputs and input tensors (same shapes and dtypes
  // as at record time; ShapeError otherwise) as one command buffer; returns fresh output tensors.
  std::vector<Tensor> replay(const std::vector<double>& scalars, const std::vector<Tensor>& inputs);
  // Why replay() would be refused now ("" if it would not be): the driver asks before it runs the
  // host side of a replay (counters) that a refused replay must not run.
  std::string cannot_replay() const;

  int n_scalars() const { return n_scalars_; }
  int64_t n_commands() const { return static_cast<int64_t>(entries_.size()); }
  int64_t n_dynamic() const;
  int64_t owned_bytes() const;
  int64_t replays() const { return replays_; }

 private:
  enum class State { Idle, Recording, Ready, Abandoned };
  static uint64_t new_id();
  const uint64_t id_ = new_id();             // ReplayPlan::recording_id
  std::shared_ptr<const ReplayPlan> plan_;   // built by finish(): the kinds of a replay's commands
  struct Entry {
    Command cmd;          // static command
    DynamicCommand make;  // or a builder for each replay
    ReplayCommandKind kind = ReplayCommandKind::Static;
  };
  struct BufferRef {
    std::shared_ptr<Buffer> owned;  // allocated while recording
    std::weak_ptr<Buffer> outside;  // existed before
    bool read = false, written = false;
  };
  struct Input {
    std::vector<int64_t> shape;
    DType dtype;
    Tensor slot;
    Tensor arg;           // the record-time argument, until finish()
    bool written = false;  // the body writes the slot: copy back into the argument
  };
  struct Output {
    View src;
    std::vector<int64_t> shape;
    DType dtype;
  };

  void note(Buffer* b, bool write);
  void stop_recording();

  int n_scalars_;
  State state_ = State::Idle;
  std::string reason_;
  std::shared_ptr<Device> device_;
  std::vector<Entry> entries_;
  std::vector<BufferRef> buffers_;
  std::unordered_map<const Buffer*, size_t> buffer_index_;
  std::vector<Input> inputs_;
  std::unordered_map<const Buffer*, size_t> slot_index_;
  std::vector<Output> outputs_;
  int64_t replays_ = 0;
};

}  // namespace tl
