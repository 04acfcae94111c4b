#pragma once
// The kernel interface every backend implements (CPU, CUDA, Metal). The runtime's ops layer
// (cpp/runtime/ops.*) validates shapes and dtypes, allocates outputs and encodes one call of
// this interface per op into a command buffer; the backend executes the calls in encode order
// (rule R4). Kernels never allocate device memory, never wait on the host and never decide
// buffer lifetimes. A kernel reports bad data it can only see at run time (e.g. an id out of
// range in gather_rows) by throwing KernelError; the runtime records it as the command buffer's
// error and raises it at the next wait (rule R3).
//
// Conventions for every method:
//  - Views describe device memory: data points at the first element; strides are in elements
//    and may be 0 on broadcast dims; shapes are exact (no implicit broadcasting in kernels).
//  - Float compute is f32 (f16/bf16 are converted on load and store); integer compute is int64.
//  - "contiguous" means row-major with no gaps; the ops layer makes a copy first when needed.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "dtype.h"
#include "op_table.h"

namespace tl {

constexpr int kMaxDims = 8;

struct View {
  void* data = nullptr;  // nullptr means "absent" for optional operands
  DType dtype = DType::F32;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // elements; unused for quantized views (row-major blocks)

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
  bool is_contiguous() const {
    int64_t expect = 1;
    for (int i = ndim - 1; i >= 0; --i) {
      if (shape[i] != 1 && strides[i] != expect) return false;
      expect *= shape[i];
    }
    return true;
  }
};

struct KernelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The op enums come from the op table (op_table.h), in its order: the shaders and the CUDA kernels
// switch on the numeric values. BinaryOp: Eq and later output Bool (LogicalAnd/LogicalOr read their
// inputs as truth values); UnaryOp: LogicalNot outputs Bool, Step is x > 0 ? 1 : 0 in out's dtype.
#define TL_OP_ENUM_VALUE(Enum, ...) Enum,
enum class BinaryOp : uint8_t { TL_BINARY_OPS(TL_OP_ENUM_VALUE) };
enum class UnaryOp : uint8_t { TL_UNARY_OPS(TL_OP_ENUM_VALUE) };
enum class ReduceOp : uint8_t { TL_REDUCE_OPS(TL_OP_ENUM_VALUE) };
#undef TL_OP_ENUM_VALUE

// How many values each op enum has. The bindings bind every value (a loop over the table), and
// `_core.kernel_ops()` lists them; the cross-backend tests take their op lists from there, so a new
// op cannot ship untested on another backend.
#define TL_OP_COUNT_ONE(...) +1
constexpr int kBinaryOpCount = 0 TL_BINARY_OPS(TL_OP_COUNT_ONE);
constexpr int kUnaryOpCount = 0 TL_UNARY_OPS(TL_OP_COUNT_ONE);
constexpr int kReduceOpCount = 0 TL_REDUCE_OPS(TL_OP_COUNT_ONE);
#undef TL_OP_COUNT_ONE
// The values the backends name by number (shaders/tl_params.h passes `op` as an int): a new op goes
// after these.
static_assert(static_cast<int>(BinaryOp::Eq) == 8 && static_cast<int>(BinaryOp::LogicalOr) == 15,
              "BinaryOp values are fixed");
static_assert(static_cast<int>(UnaryOp::GeluTanh) == 12 && static_cast<int>(UnaryOp::Step) == 20,
              "UnaryOp values are fixed");
static_assert(static_cast<int>(ReduceOp::ArgMax) == 4 && static_cast<int>(ReduceOp::ArgMin) == 5,
              "ReduceOp values are fixed");

// The table's facts by enum value.
#define TL_OP_NAME(Enum, name, ...) name,
inline const char* op_name(BinaryOp op) {
  static constexpr const char* names[] = {TL_BINARY_OPS(TL_OP_NAME)};
  return names[static_cast<int>(op)];
}
inline const char* op_name(UnaryOp op) {
  static constexpr const char* names[] = {TL_UNARY_OPS(TL_OP_NAME)};
  return names[static_cast<int>(op)];
}
inline const char* op_name(ReduceOp op) {
  static constexpr const char* names[] = {TL_REDUCE_OPS(TL_OP_NAME)};
  return names[static_cast<int>(op)];
}
#undef TL_OP_NAME
#define TL_OP_FLAGS3(Enum, name, flags, ...) flags,
#define TL_OP_FLAGS4(Enum, name, dunder, flags, ...) flags,
inline unsigned op_flags(BinaryOp op) {
  static constexpr unsigned flags[] = {TL_BINARY_OPS(TL_OP_FLAGS4)};
  return flags[static_cast<int>(op)];
}
inline unsigned op_flags(UnaryOp op) {
  static constexpr unsigned flags[] = {TL_UNARY_OPS(TL_OP_FLAGS3)};
  return flags[static_cast<int>(op)];
}
inline unsigned op_flags(ReduceOp op) {
  static constexpr unsigned flags[] = {TL_REDUCE_OPS(TL_OP_FLAGS3)};
  return flags[static_cast<int>(op)];
}
#undef TL_OP_FLAGS3
#undef TL_OP_FLAGS4

// What fused_linear does to each row of x before the matrix product.
enum class LinearPrologue : uint8_t { None, RmsNorm, SwiGLU };

// One optimizer step's constants, already reduced to f32 by the ops layer (optimizer_update in
// ops_training.cpp), so every backend computes the same f32 expression as the unfused ops would:
//   Adam:  g += wd*p (unless decoupled: p *= decay); m = beta1*m + one_minus_beta1*g;
//          v = beta2*v + one_minus_beta2*g*g; p -= m / (sqrt(v / bias2) + eps) * step
//   SGD:   g += wd*p; with momentum b = momentum*b + g, g = nesterov ? g + momentum*b : b;
//          p -= g * step
// with step = lr / (1 - beta1^t) (Adam) or lr (SGD), bias2 = 1 - beta2^t, decay = 1 - lr*wd.
enum class OptimizerKind : uint8_t { Adam, Sgd };
struct OptimizerStep {
  OptimizerKind kind = OptimizerKind::Adam;
  bool decoupled = false;  // AdamW
  bool nesterov = false;   // SGD
  float step = 0, decay = 1, weight_decay = 0;
  float beta1 = 0, one_minus_beta1 = 1, beta2 = 0, one_minus_beta2 = 1, bias2 = 1, eps = 0;
  float momentum = 0;
};

class Kernels {
 public:
  virtual ~Kernels() = default;

  // out = a op b. a and b already have out's shape (stride 0 where broadcast), any strides,
  // any plain dtypes; out is contiguous. Computed in f32 if either input is floating, else int64.
  virtual void binary(BinaryOp op, const View& a, const View& b, const View& out) = 0;
  // out = a op s, or s op a when scalar_first. Same rules as binary.
  virtual void binary_scalar(BinaryOp op, const View& a, double s, bool scalar_first,
                             const View& out) = 0;
  // out = op(a); same shape, any strides on a, out contiguous.
  virtual void unary(UnaryOp op, const View& a, const View& out) = 0;
  // Elementwise copy with dtype conversion between plain dtypes; same shape, any strides on both
  // sides (dst may be a strided view into a larger buffer, e.g. a KV-cache slot).
  virtual void copy(const View& src, const View& dst) = 0;
  // Every element of out (any strides) = value.
  virtual void fill(const View& out, double value) = 0;
  // out contiguous 1-D: out[i] = start + i * step.
  virtual void arange(const View& out, double start, double step) = 0;
  // out = cond ? a : b; all already of out's shape (stride 0 where broadcast); out contiguous.
  virtual void where(const View& cond, const View& a, const View& b, const View& out) = 0;

  // Reduce `in` (contiguous, viewed as [outer, n, inner]) over the middle axis into out
  // (contiguous [outer, inner]). Sum/Mean/Max/Min write out's float dtype; ArgMax/ArgMin write
  // I64 (first index on ties).
  virtual void reduce(ReduceOp op, const View& in, int64_t outer, int64_t n, int64_t inner,
                      const View& out) = 0;
  // Numerically stable softmax over the middle axis of [outer, n, inner]; in/out contiguous.
  virtual void softmax(const View& in, int64_t outer, int64_t n, int64_t inner,
                       const View& out) = 0;

  // Batched matmul: a [batch, M, K], b [batch, K, N] (3-D views, any strides: a transposed b has
  // strides {.., 1, K}; batch stride 0 broadcasts), out contiguous [batch, M, N] (f32 or f16).
  virtual void matmul(const View& a, const View& b, const View& out) = 0;
  // out = x @ w^T: x contiguous [M, K] (f32), w contiguous [N, K] of any dtype incl. quantized,
  // out contiguous [M, N] f32. Quantized weights are dequantized block by block inside the dot
  // product, never into a full f32 copy. M == 1 is the decode (matrix-vector) case.
  virtual void linear(const View& x, const View& w, const View& out) = 0;
  // linear with every row of x quantized to 8-bit blocks first (llama.cpp's activation
  // quantization) where the backend has an integer dot product for w's dtype: faster, approximate.
  // The default (and any case without such a path) computes linear exactly. The ops layer picks it
  // while the device's q8_activations switch is on (TL_Q8_ACTIVATIONS, `tl generate --fast`) for
  // products of at most q8_rows rows (DebugConfig: 1 for matrix-vector products only; 0, as `--fast`
  // sets it, for every product, prompt pieces included); a backend's row m of the result must not
  // depend on the other rows (the CPU's is bitwise the one-row product), so a batched step decodes
  // each sequence as it would alone and a prompt's pieces give each token what it gets alone.
  virtual void linear_q8_activations(const View& x, const View& w, const View& out) { linear(x, w, out); }
  // The expert products of a mixture-of-experts layer (ggml's mul_mat_id): for each token t and
  // each of its k chosen experts j, out[t, j, :] = x[t, X == 1 ? 0 : j, :] @ W_e^T with
  // e = ids[t, j] and W_e rows e*N .. e*N+N-1 of w. w contiguous [experts * N, K] of any dtype
  // linear takes (the experts' matrices stacked, as GGUF stores them); x contiguous [T, X, K] f32
  // with X == 1 (each token's one row feeds all its experts) or X == k; ids contiguous I32/I64
  // [T, k], read on the device (so a recorded step replays with new routing); out contiguous
  // [T, k, N] f32. An id outside [0, experts) is bad data (KernelError / the device error slot).
  virtual void expert_linear(const View& x, const View& w, const View& ids, int64_t experts,
                             const View& out) = 0;
  // out[i, :] = table[ids[i], :]: table contiguous [V, D] of any dtype incl. quantized, ids
  // contiguous I32/I64 [n], out contiguous [n, D] (f32/f16). Throws KernelError if an id is
  // outside [0, V).
  virtual void gather_rows(const View& table, const View& ids, const View& out) = 0;

  // out[ids[i], :] += src[i, :] for i = 0..n-1 in order (repeated ids add up, in id order, with no
  // atomics: the result is the same on every run). out contiguous [V, D] f32, src contiguous
  // [n, D] f32, ids contiguous I32/I64 [n]. Throws KernelError if an id is outside [0, V).
  virtual void scatter_add_rows(const View& ids, const View& src, const View& out) = 0;
  // One optimizer step in place (OptimizerStep above), elementwise over n = param.numel():
  // param, grad, m (Adam's first moment / SGD's momentum buffer) and v (Adam's second moment)
  // contiguous f32 of one shape; m absent for SGD without momentum, v absent for SGD.
  virtual void optimizer_update(const OptimizerStep& s, const View& param, const View& grad,
                                const View& m, const View& v) = 0;

  // x, out contiguous [rows, D]; w [D] or absent. out = x / sqrt(mean(x^2) + eps) * w.
  virtual void rms_norm(const View& x, const View& w, float eps, const View& out) = 0;
  // x, out contiguous [rows, D]; w, b [D] or absent.
  virtual void layer_norm(const View& x, const View& w, const View& b, float eps,
                          const View& out) = 0;
  // x, out contiguous 4-D [outer, S, H, D] (D even). Row s is at position pos_offset + s.
  // neox=false rotates adjacent pairs (2i, 2i+1) (llama.cpp "normal", GGUF llama);
  // neox=true rotates (i, i + D/2). theta_i = pos * base^(-2i/D).
  virtual void rope(const View& x, int64_t pos_offset, float base, bool neox,
                    const View& out) = 0;
  // out contiguous [n, m] f32: 0 where j <= i + offset, -inf elsewhere.
  virtual void causal_mask(int64_t offset, const View& out) = 0;
  // Scaled dot-product attention with grouped-query heads.
  // q [Sq, Hq, D], k and v [Sk, Hkv, D] (3-D views, any strides: k/v may be the first Sk rows
  // of a preallocated KV cache), Hq % Hkv == 0 (query head h uses kv head h / (Hq / Hkv)).
  // mask: additive [Sq, Sk] f32 or absent. causal: query i (absolute position q_pos_offset + i)
  // sees keys j <= q_pos_offset + i. out contiguous [Sq, Hq, D] f32. softcap > 0 (Gemma 2):
  // each scaled score s becomes softcap * tanh(s / softcap) before the mask is added.
  virtual void attention(const View& q, const View& k, const View& v, const View& mask,
                         float scale, bool causal, int64_t q_pos_offset, const View& out,
                         float softcap = 0.0f) = 0;
  // Decode attention of B independent sequences in one call (a batched decode step): q [B, Hq, D]
  // (any strides), k and v [R, Hkv, D] (the rows of a KV slot store, any strides), starts and lens
  // B host values: row b attends over keys starts[b] .. starts[b] + lens[b] - 1 (lens[b] >= 1, all
  // of them visible: its query is the last position) into out[b] (contiguous [B, Hq, D] f32). Row
  // b's result must be what attention() gives for that row alone (q[b:b+1], those keys, causal at
  // pos lens[b] - 1): bitwise on the CPU, so a batched step decodes each sequence as it would alone.
  // This default is that loop (inline, as fused_linear_q8_activations below); the CPU's puts
  // every row's heads in one set of tasks, so its threads share them evenly.
  virtual void attention_rows(const View& q, const View& k, const View& v, const int64_t* starts,
                              const int64_t* lens, float scale, const View& out, float softcap = 0.0f) {
    const int64_t B = q.shape[0];
    const int64_t q_bytes = q.strides[0] * block_bytes(q.dtype), o_bytes = out.strides[0] * block_bytes(out.dtype);
    const int64_t k_bytes = k.strides[0] * block_bytes(k.dtype), v_bytes = v.strides[0] * block_bytes(v.dtype);
    for (int64_t b = 0; b < B; ++b) {
      View qb = q, ob = out, kb = k, vb = v;
      qb.shape[0] = ob.shape[0] = 1;
      qb.data = static_cast<char*>(q.data) + b * q_bytes;
      ob.data = static_cast<char*>(out.data) + b * o_bytes;
      kb.shape[0] = vb.shape[0] = lens[b];
      kb.data = static_cast<char*>(k.data) + starts[b] * k_bytes;
      vb.data = static_cast<char*>(v.data) + starts[b] * v_bytes;
      attention(qb, kb, vb, View{}, scale, true, lens[b] - 1, ob, softcap);
    }
  }

  // ---- fused kernels: each equals the composition of the kernels named, computed in f32 ----
  // out = prologue(x) @ w^T (+ addend); w as in linear, out contiguous [M, N] f32.
  //  - None: x contiguous [M, K] f32; norm_w and scratch absent.
  //  - RmsNorm: x contiguous [M, K] f32, each row RMS-normalised exactly as rms_norm does (norm_w
  //    [K] or absent) before the product.
  //  - SwiGLU: x contiguous [M, 2K] f32 holding [gate | up]; the product is of swiglu(gate, up).
  // With a prologue, `scratch` is a contiguous [M, K] f32 buffer the kernel may use for the
  // prepared rows. addend: [M, N], any strides (0 broadcasts), plain float dtype, or absent; it is
  // added to the finished dot products (the residual connection of a transformer block).
  virtual void fused_linear(const View& x, const View& w, LinearPrologue prologue,
                            const View& norm_w, float eps, const View& addend,
                            const View& scratch, const View& out) = 0;
  // How a product with 8-bit activations (while --fast / TL_Q8_ACTIVATIONS covers it: DebugConfig's
  // q8_takes) of M rows of x with a quantized weight [N, K] of dtype w runs on this backend:
  //  - Unfused: linear_q8_activations, with the prologue and the addend of a fused op as their own
  //    ops around it (the default; the CPU's, every product);
  //  - Fused: fused_linear_q8_activations, one kernel with the prologue and addend;
  //  - Exact: the exact linear / fused_linear, where the backend's 8-bit kernel is not faster.
  enum class Q8Plan : uint8_t { Unfused, Fused, Exact };
  virtual Q8Plan q8_plan(DType w, int64_t M, int64_t N, int64_t K) const {
    (void)w, (void)M, (void)N, (void)K;
    return Q8Plan::Unfused;
  }
  // fused_linear with 8-bit activations: the prologue's rows quantized as linear_q8_activations
  // quantizes x. The ops layer calls it where q8_plan says Fused. This default is the Unfused
  // sequence at the kernel level (rms_norm / swiglu into `scratch`, linear_q8_activations, add).
  // (Defined here, inline: a virtual defined in one .cpp would make that file the only one with
  // the class's vtable, which builds of a subset of the files, as the fake-Metal test's, lack.)
  virtual void fused_linear_q8_activations(const View& x, const View& w, LinearPrologue prologue,
                                           const View& norm_w, float eps, const View& addend,
                                           const View& scratch, const View& out) {
    View in = x;
    if (prologue == LinearPrologue::RmsNorm) {
      rms_norm(x, norm_w, eps, scratch);
      in = scratch;
    } else if (prologue == LinearPrologue::SwiGLU) {
      // x [M, 2K] contiguous f32: the gate half, then the up half of each row
      const int64_t K = scratch.shape[1];
      View gate = x, up = x;
      gate.shape[1] = up.shape[1] = K;
      up.data = static_cast<float*>(x.data) + K;
      swiglu(gate, up, scratch);
      in = scratch;
    }
    linear_q8_activations(in, w, out);
    if (addend.data != nullptr) binary(BinaryOp::Add, out, addend, out);
  }
  // out = silu(gate) * up (SwiGLU). gate and up [rows, n], any strides (typically the two column
  // halves of one fused gate/up projection), plain float; out contiguous [rows, n] f32.
  virtual void swiglu(const View& gate, const View& up, const View& out) = 0;
  // RoPE of q and k plus the KV-cache write, as rope + copy: q [S, Hq, D] and k, v [S, Hkv, D]
  // (3-D views, any strides, plain float); q_out contiguous [S, Hq, D] f32 gets rope(q); k_dst and
  // v_dst [S, Hkv, D] (strided views into the caches, rows pos_offset.. of them, any float dtype)
  // get rope(k) and v. Row s is at position pos_offset + s; neox as in rope.
  virtual void rope_kv_write(const View& q, const View& k, const View& v, int64_t pos_offset,
                             float base, bool neox, const View& q_out, const View& k_dst,
                             const View& v_dst) = 0;

  // Debug delay injection (TL_DEBUG_DELAY_US): wait about `us` microseconds on the device
  // timeline before the next kernel (CPU: sleep in the worker; CUDA: a spin kernel).
  virtual void delay(uint32_t us) = 0;
};

}  // namespace tl
