#pragma once
// The ops layer: every op of docs/core-api.md. Each op validates shapes and dtypes (errors name
// the op and the shapes), computes the output shape (NumPy broadcasting) and dtype (promotion
// bool < i32 < i64 < f16/bf16 < f32), takes its output from the pool and encodes exactly one
// Kernels call per command into the current device's queue; shape ops return views (no kernel)
// when the layout allows. Ops never wait, except the host transfers at the bottom (R2).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "device.h"
#include "recording.h"
#include "kernels.h"
#include "tensor.h"

namespace tl {

using Shape = std::vector<int64_t>;

// Promotion and broadcasting helpers.
DType promote_types(DType a, DType b);
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
int normalize_dim(int64_t dim, int ndim, const char* op);

// Creation (on the current device).
Tensor empty(const Shape& shape, DType dtype);
Tensor full(const Shape& shape, double value, DType dtype);
Tensor arange(double start, double stop, double step, DType dtype);
Tensor rand_uniform(const Shape& shape, uint64_t seed);  // [0, 1), host-generated
Tensor rand_normal(const Shape& shape, uint64_t seed);
// Copies `bytes` from host memory laid out contiguously as (shape, dtype).
Tensor from_host(const void* data, const Shape& shape, DType dtype);
Tensor causal_mask(int64_t n, int64_t m, int64_t offset);

// Host transfers (wait for the writer per R2; the caller releases the GIL).
void to_host(const Tensor& t, void* dst);  // contiguous bytes of t (nbytes())
void write_from_host(const Tensor& dst, const void* src);  // dst contiguous; waits for readers

// Elementwise.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
// s may depend on a compiled function's scalar inputs (a learning rate): recorded as dynamic.
Tensor binary_scalar(BinaryOp op, const Tensor& a, DynScalar s, bool s_is_float, bool scalar_first);
Tensor unary(UnaryOp op, const Tensor& x);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor astype(const Tensor& x, DType dtype);
Tensor contiguous(const Tensor& x);
void copy_into(const Tensor& dst, const Tensor& src);  // dst may be a strided view
// Every element of dst (a view, any strides) = value; value may be dynamic.
void fill_into(const Tensor& dst, DynScalar value);

// Reductions.
Tensor reduce(ReduceOp op, const Tensor& x, std::optional<int64_t> dim, bool keepdim);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// Linear algebra and nn.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias);
// The expert products of a mixture-of-experts layer (Kernels::expert_linear): x [T, K] or
// [T, X, K] (X 1 or k), w [experts * N, K] of any weight dtype (experts > 0) or a plain [E, N, K]
// (experts 0 or E), ids [T, k] i32/i64 -> [T, k, N] f32 with out[t, j] = x[t, j or 0] @ W_ids[t,j]^T.
Tensor expert_linear(const Tensor& x, const Tensor& w, const Tensor& ids, int64_t experts);
Tensor embedding(const Tensor& table, const Tensor& ids);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& ids);
Tensor rms_norm(const Tensor& x, const std::optional<Tensor>& w, double eps);
Tensor layer_norm(const Tensor& x, const std::optional<Tensor>& w, const std::optional<Tensor>& b,
                  double eps);
// pos_offset may be dynamic; attention's k and v may be dynamic-length views (KV-cache prefixes).
Tensor rope(const Tensor& x, DynInt pos_offset, double base, bool neox);
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v,
                 const std::optional<Tensor>& mask, std::optional<double> scale, bool causal,
                 DynInt pos_offset, double softcap = 0.0);  // softcap > 0: Gemma 2's score capping
// Decode attention of B sequences at once (a batched step over a KV slot store): q [B, Hq, D], k and
// v [R, Hkv, D] (the store's rows); row b attends over k/v rows starts[b] .. starts[b] + lens[b] - 1,
// all visible (its query is the last of them). Each row's result is attention()'s for that row
// alone. starts and lens may be dynamic (each replay takes its rows' slots and lengths).
Tensor attention_rows(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<DynInt>& starts,
                      const std::vector<DynInt>& lens, std::optional<double> scale, double softcap = 0.0);

// Fused ops: one kernel each, computing what the composition in the comment computes.
// linear(prologue(x), w) plus addend (a bias [N] or a residual of the output's shape, added in the
// kernel's epilogue; other shapes are added after): the prologue is rms_norm(x, norm_w, eps),
// swiglu of x's [gate | up] halves, or nothing.
Tensor fused_linear(const Tensor& x, const Tensor& w, LinearPrologue prologue,
                    const std::optional<Tensor>& norm_w, double eps,
                    const std::optional<Tensor>& addend);
Tensor rms_norm_linear(const Tensor& x, const std::optional<Tensor>& norm_w, const Tensor& w,
                       double eps, const std::optional<Tensor>& addend);
Tensor swiglu_linear(const Tensor& gate_up, const Tensor& w, const std::optional<Tensor>& addend);
// silu(gate) * up in f32; with no `up`, gate's last dim holds [gate | up] halves.
Tensor swiglu(const Tensor& gate, const std::optional<Tensor>& up);
// rope(q) returned (f32 [S, Hq, D]); rope(k) and v written to rows pos..pos+S-1 of the caches
// ([capacity, Hkv, D], written in place). q, k, v are [S, H, D] or [S, H * D] (any strides).
// pos may be dynamic (a compiled decode step): each replay writes at its own position. `row`: the
// rows are row + pos.. of the caches (a slot of a slot store; RoPE's position stays pos), also
// possibly dynamic.
Tensor rope_kv_write(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                     const Tensor& v_cache, DynInt pos, double base, bool neox, DynInt row = DynInt(0));
// rope_kv_write with a position and a first row per row of q (a batched decode step: row s of q, k
// and v at position pos[s], written to cache row rows[s] + pos[s]), each row as rope_kv_write alone.
Tensor rope_kv_write_rows(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                          const Tensor& v_cache, const std::vector<DynInt>& pos, const std::vector<DynInt>& rows,
                          double base, bool neox);

// Training (ops_training.cpp).
// [rows, D] f32 zeros plus, for each i in order, src[i, :] added into row ids[i] (np.add.at):
// the gradient of embedding / index_select. ids: any shape, n ids; src [n, D]. An id outside
// [0, rows) is a kernel error (raised at the next wait, naming the op and the shapes).
Tensor scatter_add_rows(const Tensor& ids, const Tensor& src, int64_t rows);
// What stays fixed across an optimizer's steps (kernels.h OptimizerStep has the update rules).
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::Adam;
  bool decoupled = false;  // AdamW
  bool nesterov = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0, momentum = 0;
};
// One step in place: param (contiguous f32), m/v (Adam moments or the SGD momentum buffer,
// contiguous f32 of param's shape) updated with grad. lr, bias1 = 1 - beta1^t and
// bias2 = 1 - beta2^t may be dynamic (a compiled training step replays with each step's values).
void optimizer_update(const OptimizerConfig& c, const Tensor& param, const Tensor& grad,
                      const std::optional<Tensor>& m, const std::optional<Tensor>& v, DynScalar lr,
                      DynScalar bias1, DynScalar bias2);

// Shape ops (views when possible).
Tensor reshape(const Tensor& x, const Shape& shape);  // one -1 allowed
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor squeeze(const Tensor& x, std::optional<int64_t> dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start, int64_t end);
Tensor slice(const Tensor& x, int64_t dim, std::optional<int64_t> start,
             std::optional<int64_t> stop, int64_t step);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
// x[start:stop] along dim (step 1) where a bound depends on a compiled function's scalar inputs:
// the view carries Tensor::dyn while recording (0 <= start <= stop <= len required; otherwise, or
// outside a recording, it is slice()).
Tensor slice_dynamic(const Tensor& x, int64_t dim, DynInt start, DynInt stop);
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);
Tensor stack(const std::vector<Tensor>& xs, int64_t dim);
std::vector<Tensor> split_sizes(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
std::vector<Tensor> split_n(const Tensor& x, int64_t n, int64_t dim);  // n equal parts
std::vector<Tensor> chunk(const Tensor& x, int64_t n, int64_t dim);

// Quantized weights: raw GGUF blocks, [rows, cols].
Tensor from_quantized(const void* raw, size_t raw_bytes, DType dtype, const Shape& shape);

}  // namespace tl
