#pragma once
// Internals shared by the CPU kernel files (one file per kernel family). CpuKernels holds the
// thread pool; the free functions here convert rows between storage dtypes and f32/int64,
// walk strided views row by row, and dequantize GGUF blocks. Row helpers take element strides
// and never allocate; every kernel file stays free of per-element dtype switches.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cpu_kernels.h"
#include "half.h"
#include "thread_pool.h"

namespace tl::cpu {

class CpuKernels final : public Kernels {
 public:
  explicit CpuKernels(int threads) : pool_(threads) {}

  void binary(BinaryOp op, const View& a, const View& b, const View& out) override;
  void binary_scalar(BinaryOp op, const View& a, double s, bool scalar_first,
                     const View& out) override;
  void unary(UnaryOp op, const View& a, const View& out) override;
  void copy(const View& src, const View& dst) override;
  void fill(const View& out, double value) override;
  void arange(const View& out, double start, double step) override;
  void where(const View& cond, const View& a, const View& b, const View& out) override;
  void reduce(ReduceOp op, const View& in, int64_t outer, int64_t n, int64_t inner,
              const View& out) override;
  void softmax(const View& in, int64_t outer, int64_t n, int64_t inner, const View& out) override;
  void matmul(const View& a, const View& b, const View& out) override;
  void linear(const View& x, const View& w, const View& out) override;
  void linear_q8_activations(const View& x, const View& w, const View& out) override;
  void expert_linear(const View& x, const View& w, const View& ids, int64_t experts,
                     const View& out) override;
  void gather_rows(const View& table, const View& ids, const View& out) override;
  void scatter_add_rows(const View& ids, const View& src, const View& out) override;
  void optimizer_update(const OptimizerStep& s, const View& param, const View& grad, const View& m,
                        const View& v) override;
  void rms_norm(const View& x, const View& w, float eps, const View& out) override;
  void layer_norm(const View& x, const View& w, const View& b, float eps,
                  const View& out) override;
  void rope(const View& x, int64_t pos_offset, float base, bool neox, const View& out) override;
  void causal_mask(int64_t offset, const View& out) override;
  void attention(const View& q, const View& k, const View& v, const View& mask, float scale,
                 bool causal, int64_t q_pos_offset, const View& out, float softcap = 0.0f) override;
  void attention_rows(const View& q, const View& k, const View& v, const int64_t* starts, const int64_t* lens,
                      float scale, const View& out, float softcap = 0.0f) override;
  void fused_linear(const View& x, const View& w, LinearPrologue prologue, const View& norm_w,
                    float eps, const View& addend, const View& scratch, const View& out) override;
  void swiglu(const View& gate, const View& up, const View& out) override;
  void rope_kv_write(const View& q, const View& k, const View& v, int64_t pos_offset, float base,
                     bool neox, const View& q_out, const View& k_dst, const View& v_dst) override;
  void delay(uint32_t us) override;

  ThreadPool& pool() { return pool_; }

 private:
  // attention and attention_rows: with starts and lens (attention_rows), row i's keys are k's rows
  // starts[i] .. starts[i] + lens[i] - 1, all visible; without, rows 0.. as causal and the offset say.
  void attend(const View& q, const View& k, const View& v, const View& mask, float scale, bool causal,
              int64_t q_pos_offset, const View& out, float softcap, const int64_t* starts, const int64_t* lens);

  ThreadPool pool_;
};

[[noreturn]] void kernel_fail(const std::string& msg);
void require_plain(const char* op, const View& v);
void require_float(const char* op, const View& v);
void require_contiguous(const char* op, const View& v);

// Address of element `index` (in elements) of a plain-dtype view.
inline char* element_ptr(const View& v, int64_t index) {
  return static_cast<char*>(v.data) + index * block_bytes(v.dtype);
}

// Row conversions for plain dtypes. `src`/`dst` point at the row's first element; stride is in
// elements (0 broadcasts one element). Bool loads as 0/1 and stores nonzero as 1; float -> int
// stores truncate toward zero (NaN stores 0).
void load_f32(DType t, const void* src, int64_t stride, int64_t n, float* dst);
void store_f32(DType t, void* dst, int64_t stride, int64_t n, const float* src);
void load_i64(DType t, const void* src, int64_t stride, int64_t n, int64_t* dst);
void store_i64(DType t, void* dst, int64_t stride, int64_t n, const int64_t* src);

// A loop nest over up to 4 operands of one shape: size-1 dims dropped, adjacent dims merged
// where every operand is contiguous across them. Rows are the innermost dim.
struct LoopNest {
  static constexpr int kMaxOps = 4;
  int nops = 0;
  int ndim = 0;  // >= 1
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxOps][kMaxDims] = {};

  int64_t inner() const { return shape[ndim - 1]; }
  int64_t inner_stride(int op) const { return strides[op][ndim - 1]; }
  int64_t rows() const {
    int64_t r = 1;
    for (int d = 0; d < ndim - 1; ++d) r *= shape[d];
    return r;
  }
  // Element offsets of row `r`'s first element, one per operand.
  void row_offsets(int64_t r, int64_t* offsets) const;
};
LoopNest make_loop_nest(int nops, const View* const* views);

// Elements processed per stack-buffer chunk in row loops.
constexpr int64_t kChunk = 512;

// ---- quantized blocks (kernels_matmul_quant.cpp) ----
// Dequantizes `n` elements (a multiple of the block size) of one row of type `t` into dst.
void dequantize_row(DType t, const void* src, int64_t n, float* dst);

// ---- 8-bit activations (kernels_matmul_q8.cpp) ----
// m rows of x quantized to blocks of 32 int8: q[m, K], and per block the scale d, the integer sum
// of its q (qsum) and d * qsum (dsum).
struct Q8Activations {
  int64_t m = 0, nb = 0;  // rows, blocks per row
  std::vector<int8_t> q;
  std::vector<float> d, dsum;
  std::vector<int32_t> qsum;
};
// Whether weights of dtype t have an integer dot product with 8-bit activations.
bool has_q8_matvec(DType t);
// Quantizes x[m, k] (k a multiple of 32) into out, reusing its storage; with a pool, the blocks of
// a long x split among its threads (the same bits).
void quantize_activations_q8(const float* x, int64_t m, int64_t k, Q8Activations& out, ThreadPool* pool = nullptr);
// out[i, n] = w_n . x_i for the N rows of w (wrow bytes apart) and the m quantized rows of x; row i
// of out is bitwise what the product with row i of x alone (m == 1) gives.
void q8_matmul(ThreadPool& pool, DType t, const uint8_t* w, size_t wrow, int64_t N, const Q8Activations& a,
               float* out);

// f32 dot product, vectorised (AVX2/FMA when the CPU has it).
float dot_f32(const float* a, const float* b, int64_t n);
// C[m, n] = sum_k A[m, k] * B[n, k] (both operands K-contiguous; rows lda/ldb apart), AVX2
// register-tiled when available.
void gemm_nt_f32(const float* a, int64_t lda, int64_t m_rows, const float* b, int64_t ldb,
                 int64_t n_rows, int64_t k, float* c, int64_t ldc);
// y[i] += alpha * x[i]
void axpy_f32(float alpha, const float* x, float* y, int64_t n);

// Matrix-vector products (one row of x) read the weights one row at a time and prefetch each row's
// bytes this far ahead of the row being read. Once the weights come from DRAM, one core's in-order
// stream with only the hardware prefetchers reached about 5.3 GB/s on the 2-core test machine, and
// 7.7-8.1 GB/s with this prefetch (Q8_0 262144x640, Gemma's output projection: 33 -> 22-23 ms on 1
// thread, 17 -> 11 ms on 2); 1-2 KiB measured best, 4-8 KiB gave about half the gain.
constexpr size_t kMatvecPrefetchBytes = 2048;

// Prefetch the n bytes at p (n small: one weight row) into the caches; never faults.
inline void prefetch_bytes(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  for (size_t off = 0; off < n; off += 64) __builtin_prefetch(c + off, 0, 3);
}

// Whether the 8-bit-activation products (q8_matmul) prefetch their weight rows in software:
// TL_CPU_WEIGHT_PREFETCH=0/1, else on except on AMD CPUs (kernels_common.cpp says why).
bool cpu_weight_prefetch();

// Whether the running CPU has AVX2 + FMA + F16C (always false off x86-64).
bool cpu_has_avx2();
// Whether it also has AVX-512F and AVX-512VL (and TL_CPU_NO_AVX512 is unset): the several-row
// linear kernels then use 32 vector registers.
bool cpu_has_avx512vl();

// One weight row (k elements of dtype t) dotted with f32 x, through the kernel linear uses for a
// matrix-vector product (simd) or the portable reference one (!simd). For tests.
float quant_row_dot(DType t, bool simd, const void* w, const float* x, int64_t k);

}  // namespace tl::cpu
