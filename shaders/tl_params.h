// Parameter structs passed to the Metal kernels with setBytes. This one header is included both by
// the shaders (Metal Shading Language) and by objc/metal_kernels.mm (C++), so the two sides can
// never disagree on a field's offset: every field is 4 or 8 bytes, 64-bit fields come first, and
// each struct's size is a multiple of 8 (checked by static_assert on the C++ side).
// Dtype codes equal the numeric values of tl::DType (cpp/runtime/dtype.h).
#ifndef TL_SHADERS_PARAMS_H
#define TL_SHADERS_PARAMS_H

#ifdef __METAL_VERSION__
typedef long tl_i64;
#else
#include <cstdint>
typedef int64_t tl_i64;
#endif

#define TL_MAX_DIMS 8

// Threadgroup sizes the kernels are written for (the host dispatches exactly these).
#define TL_REDUCE_THREADS 256  // reduce, softmax (a power of two)
#define TL_NORM_THREADS 256    // rms_norm, layer_norm (a power of two)
#define TL_LINEAR_THREADS 32   // linear (a power of two)
#define TL_ATTN_THREADS 128    // attention (a power of two)
#define TL_ATTN_MAX_D 512      // attention head size limit (a multiple of TL_ATTN_THREADS)
#define TL_TILE 16             // matmul tile edge: TL_TILE x TL_TILE threads

#define TL_F32 0
#define TL_F16 1
#define TL_BF16 2
#define TL_I32 3
#define TL_I64 4
#define TL_BOOL 5
#define TL_Q4_0 6
#define TL_Q4_1 7
#define TL_Q5_0 8
#define TL_Q5_1 9
#define TL_Q8_0 10
#define TL_Q4_K 11
#define TL_Q5_K 12
#define TL_Q6_K 13

// Shape and element strides of one operand (a tl::View without its pointer, which is bound as a
// buffer + offset instead).
struct TLViewDesc {
  tl_i64 shape[TL_MAX_DIMS];
  tl_i64 strides[TL_MAX_DIMS];
  int ndim;
  int dtype;
};

// binary, binary_scalar and where. `a`, `b` (and `c` = the condition for where) share out's
// shape; out is contiguous with n elements.
struct TLElementwiseParams {
  TLViewDesc a;
  TLViewDesc b;
  TLViewDesc c;
  tl_i64 n;
  tl_i64 scalar_i;   // binary_scalar: the scalar as int64 (integer compute)
  float scalar_f;    // binary_scalar: the scalar as f32 (float compute)
  int op;            // tl::BinaryOp or tl::UnaryOp value
  int out_dtype;
  int float_compute; // 1: compute in f32, 0: compute in int64
  int scalar_first;  // binary_scalar: s op a instead of a op s
  int pad0;
};

// copy, fill and arange. copy: src -> dst, same shape; fill/arange: dst only.
struct TLCopyParams {
  TLViewDesc src;
  TLViewDesc dst;
  tl_i64 n;
  tl_i64 value_i;   // fill value / arange start as int64
  tl_i64 step_i;    // arange step as int64
  float value_f;    // fill value / arange start as f32
  float step_f;     // arange step as f32
  int integer_compute;
  int exact_integers;  // arange with integer output: start and step are integers
};

// reduce and softmax over the middle axis of a contiguous [outer, n, inner] tensor.
struct TLReduceParams {
  tl_i64 outer;
  tl_i64 n;
  tl_i64 inner;
  int op;               // tl::ReduceOp value (reduce only)
  int in_dtype;
  int out_dtype;
  int integer_compute;  // reduce: 1 when the input is an integer type and the result is too
};

// matmul: a [batch, M, K], b [batch, K, N] with any strides, out contiguous [batch, M, N].
struct TLMatmulParams {
  TLViewDesc a;
  TLViewDesc b;
  tl_i64 batch;
  tl_i64 m;
  tl_i64 n;
  tl_i64 k;
  int out_dtype;
  int pad0;
};

// linear: x contiguous [M, K] f32, w contiguous [N, K] of any dtype, out contiguous [M, N] f32.
// gather_rows: table contiguous [V, D] of any dtype, ids [n], out contiguous [n, D].
struct TLRowsParams {
  tl_i64 m;          // linear: rows of x; gather: number of ids
  tl_i64 n;          // linear: rows of w; gather: rows of the table (V)
  tl_i64 k;          // linear: K; gather: D
  tl_i64 row_bytes;  // bytes of one row of w / table
  int w_dtype;       // dtype of w / table
  int ids_dtype;     // gather: I32 or I64
  int out_dtype;
  int pad0;
};

// expert_linear: x contiguous [T, x_rows, k] f32, w [experts * n, k], ids [T, topk], out [T, topk, n].
struct TLExpertParams {
  tl_i64 pairs;      // T * topk
  tl_i64 n;          // output columns: rows of one expert's matrix
  tl_i64 k;          // K
  tl_i64 row_bytes;  // bytes of one row of w
  tl_i64 experts;
  tl_i64 topk;       // ids per token
  tl_i64 x_rows;     // 1 (each token's row feeds all its experts) or topk
  int w_dtype;
  int ids_dtype;
};

// rms_norm, layer_norm: x, out contiguous [rows, d].
struct TLNormParams {
  tl_i64 rows;
  tl_i64 d;
  float eps;
  int x_dtype;
  int out_dtype;
  int w_dtype;  // -1 when w is absent
  int b_dtype;  // -1 when b is absent
  int pad0;
};

// rope: x, out contiguous [outer, seq, heads, d]. freq[i] = base^(-2i/d), computed by the host in
// double and passed as f32 hi + lo parts, so angles at large positions keep f32 accuracy after
// the reduction by 2*pi (Metal has no double).
#define TL_ROPE_MAX_HALF 256  // d <= 512
struct TLRopeParams {
  tl_i64 outer;
  tl_i64 seq;
  tl_i64 heads;
  tl_i64 d;
  tl_i64 pos_offset;
  int x_dtype;
  int out_dtype;
  int neox;
  int pad0;
  float freq_hi[TL_ROPE_MAX_HALF];
  float freq_lo[TL_ROPE_MAX_HALF];
};

// fused_linear: out [M, N] = prologue(x) @ w^T (+ addend, any strides). Dispatched in two phases
// of one kernel: phase 0 (only with a prologue) writes the prepared rows into scratch [M, K], one
// threadgroup per row: RMS-normalised rows of x [M, K] (prologue 1) or swiglu of the halves of
// x [M, 2K] (prologue 2); phase 1 is linear over scratch (or x) plus the addend.
struct TLFusedLinearParams {
  TLViewDesc addend;  // [M, N] when has_addend
  tl_i64 m;
  tl_i64 n;
  tl_i64 k;
  tl_i64 row_bytes;   // bytes of one row of w
  float eps;
  int w_dtype;
  int nw_dtype;       // -1 when the norm weight is absent
  int prologue;       // tl::LinearPrologue: 0 none, 1 rms_norm, 2 swiglu
  int has_addend;
  int phase;          // 0: normalise into scratch, 1: products
};
// rope_kv_write: q [S, Hq, D], k and v [S, Hkv, D] in, q_out contiguous [S, Hq, D] f32, k_dst and
// v_dst [S, Hkv, D] (views into the caches); frequencies as in TLRopeParams.
struct TLRopeKVParams {
  TLViewDesc q;
  TLViewDesc k;
  TLViewDesc v;
  TLViewDesc k_dst;
  TLViewDesc v_dst;
  tl_i64 seq;
  tl_i64 hq;
  tl_i64 hkv;
  tl_i64 d;
  tl_i64 pos_offset;
  int neox;
  int pad0;
  float freq_hi[TL_ROPE_MAX_HALF];
  float freq_lo[TL_ROPE_MAX_HALF];
};
// causal_mask (out [n, m]) and attention.
struct TLAttentionParams {
  TLViewDesc q;
  TLViewDesc k;
  TLViewDesc v;
  TLViewDesc mask;      // [Sq, Sk] f32 when has_mask
  tl_i64 sq;
  tl_i64 sk;
  tl_i64 hq;
  tl_i64 hkv;
  tl_i64 d;
  tl_i64 q_pos_offset;  // causal_mask: the offset
  tl_i64 mask_cols;     // causal_mask: m
  float scale;
  int causal;
  int has_mask;
  float softcap;        // > 0: scores become softcap * tanh(score / softcap) before the mask
};

// delay: spin for about `iterations` dependent multiply-adds on one GPU thread.
// optimizer_update: one Adam / AdamW / SGD step in place over n contiguous f32 elements
// (tl::OptimizerStep, cpp/runtime/kernels.h, has the rules and the meaning of each constant).
#define TL_OPT_ADAM 0
#define TL_OPT_SGD 1
struct TLOptimizerParams {
  tl_i64 n;
  float step;
  float decay;
  float weight_decay;
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float bias2;
  float eps;
  float momentum;
  int kind;        // TL_OPT_ADAM or TL_OPT_SGD
  int decoupled;   // AdamW
  int nesterov;
  int has_m;       // SGD: a momentum buffer is bound
};

struct TLDelayParams {
  tl_i64 iterations;
};

// Layout of the per-command-buffer error record that kernels which can detect bad data at run
// time (gather_rows, scatter_add_rows, expert_linear) write; the completion handler turns it into the command buffer's error.
#define TL_ERROR_NONE 0
#define TL_ERROR_GATHER_ID_OUT_OF_RANGE 1
#define TL_ERROR_SCATTER_ID_OUT_OF_RANGE 2
#define TL_ERROR_EXPERT_ID_OUT_OF_RANGE 3
struct TLErrorRecord {
  int code;       // written with an atomic compare-exchange from TL_ERROR_NONE: first error wins
  int pad0;
  tl_i64 value;   // the offending id
  tl_i64 limit;   // the valid range is [0, limit)
};

#endif  // TL_SHADERS_PARAMS_H
