// Fused kernels: fused_linear (RMSNorm or SwiGLU prologue and residual-add epilogue around
// linear), swiglu and rope_kv_write, each one launch where the unfused ops take two to four.
// fused_linear with few rows (M <= kFusedMaxRows, the decode case) is one kernel: every block
// prepares the M input rows in shared memory (normalised with statistics in double, as rms_norm,
// or swiglu of their halves), then each
// warp (or, for quantized weights, each group of matvec.cuh's lanes) computes one output column
// exactly as linear's matrix-vector kernel does (same order, same f32 sums) and adds the addend
// before its single store; so the results equal
// rms_norm (swiglu) + linear + add on this backend. Larger M runs rms_norm (swiglu) into the
// caller's scratch, the tiled linear and an add kernel. RoPE angles are computed in double as in the rope kernel.

#include <algorithm>
#include <cstdint>

#include "cuda_common.cuh"
#include "cuda_kernels.h"
#include "matvec.cuh"
#include "quant_blocks.cuh"

namespace tl {
namespace cuda {
namespace {

constexpr int kFusedWarps = 4;
constexpr int kFusedMaxRows = 8;
// Dynamic shared memory for the staged rows; with the static scratch it stays under the 48 KiB a
// launch may use without opting in.
constexpr size_t kFusedMaxSharedBytes = 32 * 1024;
// The padded rows of the quantized kernel: up to the 48 KiB a launch may use without opting in,
// less the static scratch (K = 8192 fits for one row).
constexpr size_t kMatvec32MaxSharedBytes = 48 * 1024 - 512;
constexpr int kElementThreads = 256;


// The one f32 expression of SwiGLU (the swiglu kernel's, unary Silu's times up) and of an
// RMS-normalised element, shared by every kernel that computes them, so they round alike.
__device__ __forceinline__ float swiglu_value(float gate, float up) {
  return gate / (1.0f + exp_rounded(-gate)) * up;
}
__device__ __forceinline__ float rms_normed(float v, float inv, const void* nw, DType nw_dtype, int64_t d) {
  v = v * inv;
  return nw != nullptr ? v * load_float(nw, nw_dtype, d) : v;
}

// The padded rows four elements at a time (x 16-byte aligned, K a multiple of 32): float4 loads
// and stores, unrolled so that a thread's loads are in flight together; the same f32 expressions
// per element as below (the sum of squares adds each thread's elements in another order, in double).
__device__ void stage_rows_padded4(const float* x, int M, int64_t K, LinearPrologue prologue,
                                   const void* nw, DType nw_dtype, float eps, float* xs_base,
                                   double* scratch) {
  const int64_t K4 = K / 4;
  for (int m = 0; m < M; ++m) {
    float4* xs_row = reinterpret_cast<float4*>(xs_base + m * staged_row_floats(K));
    // element 4 * d4 of the row: group d4 / 8, float4 d4 % 8 of it
    auto put = [&](int64_t d4, float4 v) { xs_row[(d4 >> 3) * (kGroupStride / 4) + (d4 & 7)] = v; };
    if (prologue == LinearPrologue::SwiGLU) {
      const float4* gate = reinterpret_cast<const float4*>(x + m * 2 * K);
      const float4* up = gate + K4;
#pragma unroll 4
      for (int64_t d4 = threadIdx.x; d4 < K4; d4 += blockDim.x) {
        const float4 g = gate[d4], u = up[d4];
        put(d4, make_float4(swiglu_value(g.x, u.x), swiglu_value(g.y, u.y), swiglu_value(g.z, u.z),
                            swiglu_value(g.w, u.w)));
      }
      continue;
    }
    const float4* row = reinterpret_cast<const float4*>(x + m * K);
    float inv = 1.0f;
    const bool normalize = prologue == LinearPrologue::RmsNorm;
    if (normalize) {
      double ss = 0.0;
#pragma unroll 4
      for (int64_t d4 = threadIdx.x; d4 < K4; d4 += blockDim.x) {
        const float4 v = row[d4];
        ss += static_cast<double>(v.x * v.x);
        ss += static_cast<double>(v.y * v.y);
        ss += static_cast<double>(v.z * v.z);
        ss += static_cast<double>(v.w * v.w);
      }
      const double total = block_sum_double(ss, scratch);
      inv = static_cast<float>(1.0 / sqrt(total / static_cast<double>(K) + eps));
    }
#pragma unroll 4
    for (int64_t d4 = threadIdx.x; d4 < K4; d4 += blockDim.x) {
      float4 v = row[d4];
      if (normalize) {
        v = make_float4(rms_normed(v.x, inv, nw, nw_dtype, 4 * d4), rms_normed(v.y, inv, nw, nw_dtype, 4 * d4 + 1),
                        rms_normed(v.z, inv, nw, nw_dtype, 4 * d4 + 2), rms_normed(v.w, inv, nw, nw_dtype, 4 * d4 + 3));
      }
      put(d4, v);
    }
  }
  __syncthreads();
}

// The prepared rows xs [M, K] in shared memory: x's rows as they are, RMS-normalised (statistics
// in double, as rms_norm), or swiglu of their [gate | up] halves (x is then [M, 2K]). `padded`:
// each 32-element group takes kGroupStride floats (matvec.cuh's layout). Every thread returns
// after the block synchronised.
__device__ void stage_rows(const float* x, int M, int64_t K, LinearPrologue prologue,
                           const void* nw, DType nw_dtype, float eps, float* xs_base, bool padded) {
  __shared__ double scratch[32];
  if (padded && K % 32 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    stage_rows_padded4(x, M, K, prologue, nw, nw_dtype, eps, xs_base, scratch);
    return;
  }
  const int64_t row_floats = padded ? staged_row_floats(K) : K;
  for (int m = 0; m < M; ++m) {
    float* xs_row = xs_base + m * row_floats;
    auto at = [&](int64_t d) -> float& { return xs_row[padded ? (d >> 5) * kGroupStride + (d & 31) : d]; };
    if (prologue == LinearPrologue::SwiGLU) {
      const float* row = x + m * 2 * K;
      for (int64_t d = threadIdx.x; d < K; d += blockDim.x) {
        at(d) = swiglu_value(row[d], row[K + d]);
      }
      continue;
    }
    const float* row = x + m * K;
    float inv = 1.0f;
    const bool normalize = prologue == LinearPrologue::RmsNorm;
    if (normalize) {
      double ss = 0.0;
      for (int64_t d = threadIdx.x; d < K; d += blockDim.x) {
        const float v = row[d];
        ss += static_cast<double>(v * v);
      }
      const double total = block_sum_double(ss, scratch);
      inv = static_cast<float>(1.0 / sqrt(total / static_cast<double>(K) + eps));
    }
    for (int64_t d = threadIdx.x; d < K; d += blockDim.x) {
      at(d) = normalize ? rms_normed(row[d], inv, nw, nw_dtype, d) : row[d];
    }
  }
  __syncthreads();
}

template <DType WT>
__global__ void __launch_bounds__(kFusedWarps * 32)
    fused_matvec_kernel(const float* x, const uint8_t* w, size_t w_row_bytes,
                        LinearPrologue prologue, const void* nw, DType nw_dtype, float eps,
                        Addend add, float* out, int M, int64_t N, int64_t K) {
  pdl_wait();  // launched as a programmatic dependent launch (cuda_common.cuh)
  pdl_launch_dependents();
  extern __shared__ float xs[];
  stage_rows(x, M, K, prologue, nw, nw_dtype, eps, xs, false);
  const int lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kFusedWarps + (threadIdx.x >> 5);
  if (n >= N) return;
  const uint8_t* row = w + n * w_row_bytes;
  float acc[kFusedMaxRows] = {};
  if constexpr (quantized_dtype(WT)) {
    const int64_t chunks = K / 8;
    for (int64_t c = lane; c < chunks; c += 32) {
      float vals[8];
      dequant_chunk8<WT>(row, c, vals);
      const float* xc = xs + c * 8;
#pragma unroll
      for (int m = 0; m < kFusedMaxRows; ++m) {
        if (m < M) {
          float s = 0.0f;
#pragma unroll
          for (int i = 0; i < 8; ++i) s = fmaf(vals[i], xc[m * K + i], s);
          acc[m] += s;
        }
      }
    }
  } else {
    for (int64_t k = lane; k < K; k += 32) {
      const float wv = load_float(row, WT, k);
#pragma unroll
      for (int m = 0; m < kFusedMaxRows; ++m) {
        if (m < M) acc[m] = fmaf(wv, xs[m * K + k], acc[m]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kFusedMaxRows; ++m) {
    if (m < M) {
      float s = warp_sum(acc[m]);
      if (lane == 0) {
        if (add.data != nullptr) s = s + load_float(add.data, add.dtype, m * add.s0 + n * add.s1);
        out[m * N + n] = s;
      }
    }
  }
}

// Quantized w (matvec.cuh): x staged padded, LPR lanes per column, blocks looping over columns.
// Also linear's kernel for M <= 8 (prologue None, no addend), so the two sum alike.
constexpr int kMatvec32Threads = 256;

// COLS > 1 (one row of x only): each lane group takes COLS consecutive columns at once.
// PREFETCH: each lane loads its first weight group of its block's first columns before staging x,
// so that the weights' memory latency overlaps the staging (the same sums either way).
// PAIRS (kQuantPairs types, COLS = 1, no PREFETCH): matvec32_row takes the weight groups in pairs.
template <DType WT, int LPR, int MAXM, int COLS, bool PREFETCH, bool PAIRS = false>
__global__ void __launch_bounds__(kMatvec32Threads)
    fused_matvec32_kernel(const float* x, const uint8_t* __restrict__ w, size_t w_row_bytes,
                          LinearPrologue prologue, const void* nw, DType nw_dtype, float eps,
                          Addend add, float* out, int M, int64_t N, int64_t K, bool l2) {
  extern __shared__ float4 xs4[];  // float4: the rows are read 16 bytes at a time
  float* xs = reinterpret_cast<float*>(xs4);
  constexpr int kCols = kMatvec32Threads / LPR * COLS;
  if (l2) {
    // The block's weight rows (those of each of its passes: kCols consecutive rows each) into the
    // L2 while the kernel before this one finishes (a programmatic dependent launch).
    for (int64_t n0 = static_cast<int64_t>(blockIdx.x) * kCols; n0 < N; n0 += static_cast<int64_t>(gridDim.x) * kCols) {
      const int64_t rows = N - n0 < kCols ? N - n0 : kCols;
      prefetch_l2(w + n0 * w_row_bytes, rows * static_cast<int64_t>(w_row_bytes));
    }
  }
  pdl_wait();
  pdl_launch_dependents();
  const int sub = threadIdx.x % LPR;
  const int64_t groups = K / 32;
  // The lane group's first columns (those of the block's first pass) and their rows (a column
  // past N reads row N - 1, computed and not stored).
  const int64_t nb_first = static_cast<int64_t>(blockIdx.x) * kCols + static_cast<int64_t>(threadIdx.x / LPR) * COLS;
  Quant32 first[COLS];
  if constexpr (PREFETCH) {
    if (nb_first < N && sub < groups) {
#pragma unroll
      for (int c = 0; c < COLS; ++c) {
        load_quant32<WT>(w + (nb_first + c < N ? nb_first + c : N - 1) * w_row_bytes, sub, first[c]);
      }
    }
  }
  stage_rows(x, M, K, prologue, nw, nw_dtype, eps, xs, true);
  // The sums of each group's two halves, into the group's padding (dot32_rows reads them).
  for (int64_t t = threadIdx.x; t < M * groups * 2; t += blockDim.x) {
    const float4* h = reinterpret_cast<const float4*>(xs + (t >> 1) * kGroupStride + (t & 1) * 16);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 v = h[i];
      sum += (v.x + v.y) + (v.z + v.w);
    }
    xs[(t >> 1) * kGroupStride + 32 + (t & 1)] = sum;
  }
  __syncthreads();
  if constexpr (COLS > 1) {
    static_assert(MAXM == 1, "several columns at once only for one row of x");
    for (int64_t n0 = static_cast<int64_t>(blockIdx.x) * kCols; n0 < N; n0 += static_cast<int64_t>(gridDim.x) * kCols) {
      const int64_t nb = n0 + static_cast<int64_t>(threadIdx.x / LPR) * COLS;
      const uint8_t* rows[COLS];
#pragma unroll
      for (int c = 0; c < COLS; ++c) rows[c] = w + (nb + c < N ? nb + c : N - 1) * w_row_bytes;
      float acc[COLS] = {};
      if (nb < N) matvec32_cols<WT, LPR, COLS>(rows, xs, K, sub, acc, PREFETCH && nb == nb_first ? &first : nullptr);
#pragma unroll
      for (int c = 0; c < COLS; ++c) {
        float s = group_sum<LPR>(acc[c]);
        const int64_t n = nb + c;
        if (n < N && sub == 0) {
          if (add.data != nullptr) s = s + load_float(add.data, add.dtype, n * add.s1);
          out[n] = s;
        }
      }
    }
  } else {
    // The loop bound is the same for the whole block: every lane reaches group_sum's shuffles.
    for (int64_t n0 = static_cast<int64_t>(blockIdx.x) * kCols; n0 < N; n0 += static_cast<int64_t>(gridDim.x) * kCols) {
      const int64_t n = n0 + threadIdx.x / LPR;
      float acc[MAXM] = {};
      if (n < N) {
        matvec32_row<WT, LPR, MAXM, PAIRS>(w + n * w_row_bytes, xs, M, K, sub, acc,
                                           PREFETCH && n == nb_first ? first : nullptr);
      }
#pragma unroll
      for (int m = 0; m < MAXM; ++m) {
        if (m < M) {
          float s = group_sum<LPR>(acc[m]);
          if (n < N && sub == 0) {
            if (add.data != nullptr) s = s + load_float(add.data, add.dtype, m * add.s0 + n * add.s1);
            out[m * N + n] = s;
          }
        }
      }
    }
  }
}

// 8-bit activations (matvec.cuh): each block prepares its rows of x (the prologue applied, as
// stage_rows does it) a group of 32 per thread, straight from global memory into registers, and
// quantizes them into shared memory; then LPR lanes per column as in the exact kernel, COLS
// columns at once for one row. blockIdx.y picks a chunk of `chunk` (<= MAXM) rows (a prompt
// piece under --fast): each row's result is its one-row product, whatever the chunk.
template <DType WT, int LPR, int MAXM, int COLS>
__global__ void __launch_bounds__(kMatvec32Threads)
    fused_matvec_q8_kernel(const float* x, int64_t x_row, const uint8_t* __restrict__ w, size_t w_row_bytes,
                           LinearPrologue prologue, const void* nw, DType nw_dtype, float eps, Addend add,
                           float* out, int M_total, int chunk, int64_t N, int64_t K) {
  extern __shared__ float4 xq4[];
  __shared__ double scratch[32];
  Q8Group* xq = reinterpret_cast<Q8Group*>(xq4);
  constexpr int kCols = kMatvec32Threads / LPR * COLS;
  const int64_t groups = K / 32;
  const int m0 = static_cast<int>(blockIdx.y) * chunk;
  const int M = min(chunk, M_total - m0);
  pdl_wait();
  pdl_launch_dependents();
  for (int m = 0; m < M; ++m) {
    const float* row = x + static_cast<int64_t>(m0 + m) * x_row;
    float inv = 1.0f;
    if (prologue == LinearPrologue::RmsNorm) {
      const float4* r4 = reinterpret_cast<const float4*>(row);
      double ss = 0.0;
#pragma unroll 4
      for (int64_t d4 = threadIdx.x; d4 < K / 4; d4 += blockDim.x) {
        const float4 v = r4[d4];
        ss += static_cast<double>(v.x * v.x);
        ss += static_cast<double>(v.y * v.y);
        ss += static_cast<double>(v.z * v.z);
        ss += static_cast<double>(v.w * v.w);
      }
      const double total = block_sum_double(ss, scratch);
      inv = static_cast<float>(1.0 / sqrt(total / static_cast<double>(K) + eps));
    }
    for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
      float v[32];
      const float4* src = reinterpret_cast<const float4*>(row + g * 32);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float4 t = src[i];
        v[4 * i] = t.x;
        v[4 * i + 1] = t.y;
        v[4 * i + 2] = t.z;
        v[4 * i + 3] = t.w;
      }
      if (prologue == LinearPrologue::SwiGLU) {
        const float4* up = reinterpret_cast<const float4*>(row + K + g * 32);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float4 u = up[i];
          v[4 * i] = swiglu_value(v[4 * i], u.x);
          v[4 * i + 1] = swiglu_value(v[4 * i + 1], u.y);
          v[4 * i + 2] = swiglu_value(v[4 * i + 2], u.z);
          v[4 * i + 3] = swiglu_value(v[4 * i + 3], u.w);
        }
      } else if (prologue == LinearPrologue::RmsNorm) {
#pragma unroll
        for (int j = 0; j < 32; ++j) v[j] = rms_normed(v[j], inv, nw, nw_dtype, g * 32 + j);
      }
      quantize_q8_group(v, xq[m * groups + g]);
    }
  }
  __syncthreads();
  const int sub = threadIdx.x % LPR;
  if constexpr (COLS > 1) {
    static_assert(MAXM == 1, "several columns at once only for one row of x");
    for (int64_t n0 = static_cast<int64_t>(blockIdx.x) * kCols; n0 < N; n0 += static_cast<int64_t>(gridDim.x) * kCols) {
      const int64_t nb = n0 + static_cast<int64_t>(threadIdx.x / LPR) * COLS;
      const uint8_t* rows[COLS];
#pragma unroll
      for (int c = 0; c < COLS; ++c) rows[c] = w + (nb + c < N ? nb + c : N - 1) * w_row_bytes;
      float acc[COLS] = {};
      if (nb < N) {
        for (int64_t g = sub; g < groups; g += LPR) {
          Quant32 d[COLS];
#pragma unroll
          for (int c = 0; c < COLS; ++c) load_quant32<WT>(rows[c], g, d[c]);
#pragma unroll
          for (int c = 0; c < COLS; ++c) acc[c] = __fadd_rn(acc[c], dot_q8<WT>(d[c], xq[g]));
        }
      }
#pragma unroll
      for (int c = 0; c < COLS; ++c) {
        float s = group_sum<LPR>(acc[c]);
        const int64_t n = nb + c;
        if (n < N && sub == 0) {
          if (add.data != nullptr) s = s + load_float(add.data, add.dtype, m0 * add.s0 + n * add.s1);
          out[m0 * N + n] = s;
        }
      }
    }
  } else {
    // The loop bound is the same for the whole block: every lane reaches group_sum's shuffles.
    for (int64_t n0 = static_cast<int64_t>(blockIdx.x) * kCols; n0 < N; n0 += static_cast<int64_t>(gridDim.x) * kCols) {
      const int64_t n = n0 + threadIdx.x / LPR;
      float acc[MAXM] = {};
      if (n < N) {
        const uint8_t* row = w + n * w_row_bytes;
#pragma unroll 2
        for (int64_t g = sub; g < groups; g += LPR) {
          Quant32 d;
          load_quant32<WT>(row, g, d);
#pragma unroll
          for (int m = 0; m < MAXM; ++m) {
            if (m < M) acc[m] = __fadd_rn(acc[m], dot_q8<WT>(d, xq[m * groups + g]));
          }
        }
      }
#pragma unroll
      for (int m = 0; m < MAXM; ++m) {
        if (m < M) {
          float s = group_sum<LPR>(acc[m]);
          if (n < N && sub == 0) {
            const int64_t r = m0 + m;
            if (add.data != nullptr) s = s + load_float(add.data, add.dtype, r * add.s0 + n * add.s1);
            out[r * N + n] = s;
          }
        }
      }
    }
  }
}

__global__ void add_rows_kernel(float* out, int64_t M, int64_t N, Addend add) {
  pdl_wait();  // launched as a programmatic dependent launch (cuda_common.cuh)
  pdl_launch_dependents();
  const int64_t total = M * N;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = t / N, n = t - m * N;
    out[t] = out[t] + load_float(add.data, add.dtype, m * add.s0 + n * add.s1);
  }
}

__global__ void swiglu_kernel(const void* gate, DType g_dtype, int64_t gs0, int64_t gs1,
                              const void* up, DType u_dtype, int64_t us0, int64_t us1,
                              int64_t rows, int64_t n, float* out) {
  pdl_wait();  // launched as a programmatic dependent launch (cuda_common.cuh)
  pdl_launch_dependents();
  const int64_t total = rows * n;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = t / n, i = t - r * n;
    out[t] = swiglu_value(load_float(gate, g_dtype, r * gs0 + i * gs1), load_float(up, u_dtype, r * us0 + i * us1));
  }
}

struct Heads {  // a 3-D [S, H, D] view through strides
  void* data;
  DType dtype;
  int64_t s0, s1, s2;
};

Heads heads_of(const View& v) {
  return Heads{v.data, v.dtype, v.strides[0], v.strides[1], v.strides[2]};
}

// Work items: q pairs (S * Hq * D/2), then k pairs (S * Hkv * D/2), then v elements (S * Hkv * D).
__global__ void rope_kv_write_kernel(Heads q, Heads k, Heads v, Heads q_out, Heads k_dst,
                                     Heads v_dst, int64_t S, int64_t Hq, int64_t Hkv, int64_t D,
                                     int64_t pos_offset, double base, bool neox, const int64_t* dyn,
                                     const RopeFreqs freqs) {
  // Before the wait (a programmatic dependent launch, cuda_common.cuh) only what no earlier kernel
  // of the stream writes: the frequencies (this launch's arguments), a replay's values (written
  // before the graph starts, as attention_decode_gqa_kernel reads them) and the sine and cosine of
  // this thread's first rotation, so that they overlap the tail of the kernel before.
  __shared__ double s_inv[kMaxRopePairs];
  stage_rope_freqs(freqs, s_inv);
  if (dyn != nullptr) {  // a replay graph's values: [position, k_dst offset, v_dst offset]
    pos_offset = dyn[0];
    k_dst.data = static_cast<char*>(k_dst.data) + dyn[1];
    v_dst.data = static_cast<char*>(v_dst.data) + dyn[2];
  }
  const int64_t half = D / 2;
  const int64_t q_items = S * Hq * half, k_items = S * Hkv * half, v_items = S * Hkv * D;
  const int64_t total = q_items + k_items + v_items;
  // The rotation angle of q or k item t: its pair index i and its row's position.
  auto angle = [&](int64_t t) {
    const bool is_q = t < q_items;
    const int64_t e = is_q ? t : t - q_items;
    const int64_t H = is_q ? Hq : Hkv;
    const int64_t i = e % half, s = (e / half) / H;
    return static_cast<double>(pos_offset + s) * rope_inv_freq(freqs, s_inv, base, i, D);
  };
  const int64_t t_first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  double sn_first = 0.0, cs_first = 1.0;
  if (t_first < q_items + k_items) sincos(angle(t_first), &sn_first, &cs_first);
  pdl_wait();
  pdl_launch_dependents();
  for (int64_t t = t_first; t < total; t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (t >= q_items + k_items) {
      const int64_t e = t - q_items - k_items;
      const int64_t d = e % D, row = e / D, h = row % Hkv, s = row / Hkv;
      const float val = load_float(v.data, v.dtype, s * v.s0 + h * v.s1 + d * v.s2);
      store_float(v_dst.data, v_dst.dtype, s * v_dst.s0 + h * v_dst.s1 + d * v_dst.s2, val);
      continue;
    }
    const bool is_q = t < q_items;
    const Heads& src = is_q ? q : k;
    const Heads& dst = is_q ? q_out : k_dst;
    const int64_t H = is_q ? Hq : Hkv;
    const int64_t e = is_q ? t : t - q_items;
    const int64_t i = e % half, row = e / half, h = row % H, s = row / H;
    double sn = sn_first, cs = cs_first;
    if (t != t_first) sincos(angle(t), &sn, &cs);
    const int64_t d0 = neox ? i : 2 * i, d1 = neox ? i + half : 2 * i + 1;
    const int64_t sbase = s * src.s0 + h * src.s1, dbase = s * dst.s0 + h * dst.s1;
    const float x0 = load_float(src.data, src.dtype, sbase + d0 * src.s2);
    const float x1 = load_float(src.data, src.dtype, sbase + d1 * src.s2);
    const float c = static_cast<float>(cs), sv = static_cast<float>(sn);
    store_float(dst.data, dst.dtype, dbase + d0 * dst.s2, x0 * c - x1 * sv);
    store_float(dst.data, dst.dtype, dbase + d1 * dst.s2, x0 * sv + x1 * c);
  }
}

struct FusedMatvecLauncher {
  const View& x;
  const View& w;
  LinearPrologue prologue;
  const View& nw;
  float eps;
  Addend add;
  const View& out;
  size_t shared_bytes;
  cudaStream_t stream;
  bool pdl;
  template <DType T>
  void operator()() {
    const int64_t M = x.shape[0], K = w.shape[1], N = w.shape[0];
    const unsigned grid = static_cast<unsigned>((N + kFusedWarps - 1) / kFusedWarps);
    launch_kernel(pdl, fused_matvec_kernel<T>, dim3(grid), dim3(kFusedWarps * 32), shared_bytes, stream,
        static_cast<const float*>(x.data), static_cast<const uint8_t*>(w.data), row_bytes(T, K),
        prologue, nw.data, nw.dtype, eps, add, static_cast<float*>(out.data),
        static_cast<int>(M), N, K);
  }
};

void require_float_view(const View& v, const char* op, const char* what) {
  if (v.data != nullptr && !is_floating(v.dtype)) {
    throw KernelError(std::string(op) + ": " + what + " must be floating, got " +
                      dtype_name(v.dtype));
  }
}

// Blocks of kMatvec32Threads threads a multiprocessor holds at once for `kernel` with `shared`
// dynamic bytes. The occupancy query costs host time on every launch (about a microsecond, ~120
// launches a decode step) for a handful of distinct shared sizes: the answers are remembered, per
// launch thread, keyed by kernel and shared size (kernels of one shared size differ in registers).
int blocks_per_sm(const void* kernel, size_t shared) {
  struct Known { const void* kernel; size_t shared; int per_sm; };
  thread_local Known known[32];
  thread_local int n_known = 0;
  for (int i = 0; i < n_known; ++i) {
    if (known[i].shared == shared && known[i].kernel == kernel) return known[i].per_sm;
  }
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kMatvec32Threads, shared) != cudaSuccess ||
      per_sm < 1) {
    (void)cudaGetLastError();
    per_sm = 1;
  }
  known[n_known < 32 ? n_known++ : 31] = Known{kernel, shared, per_sm};
  return per_sm;
}

// Blocks of a matrix-vector launch over N columns, `cols` a block at a time: all resident at once
// (one wave, no tail), as many as fit on every multiprocessor; more would only stage x again.
int64_t one_wave_blocks(const void* kernel, size_t shared, int64_t N, int64_t cols, int sm_count) {
  const int64_t blocks = (N + cols - 1) / cols;
  const int64_t cap = static_cast<int64_t>(sm_count) * blocks_per_sm(kernel, shared);
  return blocks < cap ? blocks : cap;
}

struct Matvec32Launcher {
  static constexpr int64_t kPrefetchMaxBytes = 2 << 20;  // early weight loads up to this size (go())
  const float* x;
  const View& w;
  LinearPrologue prologue;
  const View& nw;
  float eps;
  Addend add;
  float* out;
  int M;
  int sm_count;
  const CudaTuning& tuning;
  cudaStream_t stream;
  bool launched = false;
  template <DType T>
  void operator()() {
    const int64_t K = w.shape[1], N = w.shape[0];
    const size_t shared = static_cast<size_t>(M) * staged_row_floats(K) * sizeof(float);
    if (K % 32 != 0 || shared > kMatvec32MaxSharedBytes ||
        reinterpret_cast<uintptr_t>(w.data) % (kDequant32Align16<T> ? 16 : 2) != 0) {
      return;
    }
    const int lpr = matvec_lanes_per_row(K);
    // Pairs of groups (Q4_K, one column per lane group): the lanes share K / 64 pairs. Not for
    // weights the early loads serve (go()): those lose more without them than pairs gain
    // (H200, ncu: Q4_K 576x1536 6.2 -> 8.1 us with pairs; 2048x8192 16.8 -> 14.2, 2048x2048
    // 6.7 -> 6.3; 1B-shape decode 897 -> 944 tok/s).
    const bool pairs = kQuantPairs<T> && K % 64 == 0 && tuning.matvec_pairs &&
                       static_cast<int64_t>(row_bytes(T, K)) * N > kPrefetchMaxBytes;
    const int plpr = matvec_lanes_per_row(K / 2);
    // One row: four columns per lane group where that still gives every multiprocessor a block's
    // worth of columns (skinny matrices keep one column per group: more blocks). Not for Q6_K,
    // whose 16 words a group per column made it slower (measured on an H200: 17 -> 22 us).
    const bool four = T != DType::Q6_K && M == 1 && tuning.matvec_four &&
                      N / (kMatvec32Threads / lpr * 4) >= static_cast<int64_t>(sm_count);
    if (four) {
      lpr == 32 ? go<T, 32, 1, 4>(N, K, shared) : lpr == 16 ? go<T, 16, 1, 4>(N, K, shared) : go<T, 8, 1, 4>(N, K, shared);
    } else if (pairs && M == 1) {
      plpr == 32 ? go_pairs<T, 32, 1>(N, K, shared) : plpr == 16 ? go_pairs<T, 16, 1>(N, K, shared) : go_pairs<T, 8, 1>(N, K, shared);
    } else if (pairs) {
      plpr == 32 ? go_pairs<T, 32, kMatvecRows>(N, K, shared)
                 : plpr == 16 ? go_pairs<T, 16, kMatvecRows>(N, K, shared) : go_pairs<T, 8, kMatvecRows>(N, K, shared);
    } else if (M == 1) {
      lpr == 32 ? go<T, 32, 1, 1>(N, K, shared) : lpr == 16 ? go<T, 16, 1, 1>(N, K, shared) : go<T, 8, 1, 1>(N, K, shared);
    } else {
      lpr == 32 ? go<T, 32, kMatvecRows, 1>(N, K, shared)
                : lpr == 16 ? go<T, 16, kMatvecRows, 1>(N, K, shared) : go<T, 8, kMatvecRows, 1>(N, K, shared);
    }
    launched = true;
  }
  template <DType T, int LPR, int MAXM, int COLS>
  void go(int64_t N, int64_t K, size_t shared) {
    // The early weight loads pay off on small weights, whose few blocks are one latency chain
    // each (SmolLM2's 0.2-1.8 MiB projections: 5-15 % less kernel time, decode +7 %), and cost on
    // large ones (9-34 MiB: up to 70 % more kernel time, the cause not isolated; measured on an
    // H200 with bench/gpu/ncu_matvec.py). Unrolling the
    // four-column loop by 2 instead (both groups' loads in flight, 102-177 registers) was slower on
    // the large ones too (Q4_K 8192x2048: 11.1 -> 14.0 us).
    // TL_CUDA_MATVEC_PREFETCH=0 / 1: never / always (for A/B measurements).
    const int mode = tuning.matvec_prefetch;
    const bool prefetch = mode < 0 ? static_cast<int64_t>(row_bytes(T, K)) * N <= kPrefetchMaxBytes : mode == 1;
    prefetch ? go_with<T, LPR, MAXM, COLS, true>(N, K, shared) : go_with<T, LPR, MAXM, COLS, false>(N, K, shared);
  }
  template <DType T, int LPR, int MAXM>
  void go_pairs(int64_t N, int64_t K, size_t shared) {
    if constexpr (kQuantPairs<T>) go_with<T, LPR, MAXM, 1, false, true>(N, K, shared);
  }
  template <DType T, int LPR, int MAXM, int COLS, bool PREFETCH, bool PAIRS = false>
  void go_with(int64_t N, int64_t K, size_t shared) {
    const auto kernel = fused_matvec32_kernel<T, LPR, MAXM, COLS, PREFETCH, PAIRS>;
    const int64_t blocks = one_wave_blocks(reinterpret_cast<const void*>(kernel), shared, N,
                                           kMatvec32Threads / LPR * COLS, sm_count);
    launch_kernel(tuning.pdl, kernel, dim3(static_cast<unsigned>(blocks)), dim3(kMatvec32Threads), shared, stream,
                  x, static_cast<const uint8_t*>(w.data), row_bytes(T, K), prologue, nw.data, nw.dtype, eps,
                  add, out, M, N, K, tuning.pdl && tuning.l2_prefetch);
  }
};

// fused_matvec_q8_kernel's launch: false (nothing launched) where it does not apply: K not a
// multiple of 32, x or w not aligned for its wide loads, or a row's quantized groups past the
// shared memory a launch may use without opting in.
struct MatvecQ8Launcher {
  const float* x;
  int64_t x_row;
  const View& w;
  LinearPrologue prologue;
  const View& nw;
  float eps;
  Addend add;
  float* out;
  int M;
  int sm_count;
  const CudaTuning& tuning;
  cudaStream_t stream;
  bool launched = false;
  template <DType T>
  void operator()() {
    // Q5_1: the CPU backend has no 8-bit path for it (linear_q8_activations is its exact linear),
    // so neither has this one
    if constexpr (T != DType::Q5_1) launch<T>();
  }
  template <DType T>
  void launch() {
    const int64_t K = w.shape[1], N = w.shape[0];
    const size_t row_shared = static_cast<size_t>(K / 32) * sizeof(Q8Group);
    if (K % 32 != 0 || row_shared > kMatvec32MaxSharedBytes || reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
        reinterpret_cast<uintptr_t>(w.data) % (kDequant32Align16<T> ? 16 : 2) != 0) {
      return;
    }
    const int chunk = static_cast<int>(std::min<int64_t>({M, kMatvecRows, static_cast<int64_t>(kMatvec32MaxSharedBytes / row_shared)}));
    if ((static_cast<int64_t>(M) + chunk - 1) / chunk > 65535) return;  // gridDim.y's limit
    const int lpr = matvec_lanes_per_row(K);
    const bool four = M == 1 && N / (kMatvec32Threads / lpr * 4) >= static_cast<int64_t>(sm_count);
    if (four) {
      lpr == 32 ? go<T, 32, 1, 4>(N, K, chunk) : lpr == 16 ? go<T, 16, 1, 4>(N, K, chunk) : go<T, 8, 1, 4>(N, K, chunk);
    } else if (M == 1) {
      lpr == 32 ? go<T, 32, 1, 1>(N, K, chunk) : lpr == 16 ? go<T, 16, 1, 1>(N, K, chunk) : go<T, 8, 1, 1>(N, K, chunk);
    } else {
      lpr == 32 ? go<T, 32, kMatvecRows, 1>(N, K, chunk)
                : lpr == 16 ? go<T, 16, kMatvecRows, 1>(N, K, chunk) : go<T, 8, kMatvecRows, 1>(N, K, chunk);
    }
    launched = true;
  }
  template <DType T, int LPR, int MAXM, int COLS>
  void go(int64_t N, int64_t K, int chunk) {
    const auto kernel = fused_matvec_q8_kernel<T, LPR, MAXM, COLS>;
    const size_t shared = static_cast<size_t>(chunk) * static_cast<size_t>(K / 32) * sizeof(Q8Group);
    const int64_t blocks = one_wave_blocks(reinterpret_cast<const void*>(kernel), shared, N,
                                           kMatvec32Threads / LPR * COLS, sm_count);
    const unsigned chunks = static_cast<unsigned>((M + chunk - 1) / chunk);
    launch_kernel(tuning.pdl, kernel, dim3(static_cast<unsigned>(blocks), chunks), dim3(kMatvec32Threads), shared,
                  stream, x, x_row, static_cast<const uint8_t*>(w.data), row_bytes(T, K), prologue, nw.data,
                  nw.dtype, eps, add, out, M, chunk, N, K);
  }
};

}  // namespace

bool launch_quant_matvec_q8(const float* x, int64_t x_row, const View& w, LinearPrologue prologue,
                            const View& norm_w, float eps, Addend add, float* out, int M, int sm_count,
                            const CudaTuning& tuning, cudaStream_t stream) {
  if (M < 1) return false;
  MatvecQ8Launcher launch{x, x_row, w, prologue, norm_w, eps, add, out, M, sm_count, tuning, stream};
  return dispatch_quantized(w.dtype, launch) && launch.launched;
}

bool launch_quant_matvec(const float* x, const View& w, LinearPrologue prologue, const View& norm_w,
                         float eps, Addend add, float* out, int M, int sm_count,
                         const CudaTuning& tuning, cudaStream_t stream) {
  if (M < 1 || M > kMatvecRows) return false;
  Matvec32Launcher launch{x, w, prologue, norm_w, eps, add, out, M, sm_count, tuning, stream};
  return dispatch_quantized(w.dtype, launch) && launch.launched;
}

void CudaKernels::fused_linear(const View& x, const View& w, LinearPrologue prologue,
                               const View& norm_w, float eps, const View& addend,
                               const View& scratch, const View& out) {
  if (x.dtype != DType::F32 || out.dtype != DType::F32 || x.ndim != 2 || out.ndim != 2) {
    throw KernelError("fused_linear: cuda kernel expects 2-D f32 x and out");
  }
  require_float_view(norm_w, "fused_linear", "the norm weight");
  require_float_view(addend, "fused_linear", "the addend");
  const int64_t M = x.shape[0], K = w.shape[1], N = w.shape[0];
  if (M == 0 || N == 0) return;
  if (is_quantized(w.dtype) && K % block_elems(w.dtype) != 0) {
    throw KernelError(std::string("fused_linear: ") + dtype_name(w.dtype) + " weight has " +
                      std::to_string(K) + " columns, not a multiple of its block size");
  }
  if (prologue == LinearPrologue::SwiGLU && x.shape[1] != 2 * K) {
    throw KernelError("fused_linear: the SwiGLU prologue needs x [M, 2K]");
  }
  const Addend add{addend.data, addend.dtype, addend.data ? addend.strides[0] : 0,
                   addend.data ? addend.strides[1] : 0};
  if (K > 0 && M <= kFusedMaxRows && is_quantized(w.dtype) &&
      launch_quant_matvec(static_cast<const float*>(x.data), w, prologue, norm_w, eps, add,
                          static_cast<float*>(out.data), static_cast<int>(M),
                          static_cast<int>(sm_count_), tuning_, stream_)) {
    check_launch("fused_linear");
    return;
  }
  const size_t shared_bytes = static_cast<size_t>(M * K) * sizeof(float);
  if (K > 0 && M <= kFusedMaxRows && shared_bytes <= kFusedMaxSharedBytes) {
    FusedMatvecLauncher launch{x, w, prologue, norm_w, eps, add, out, shared_bytes, stream_, tuning_.pdl};
    switch (w.dtype) {
      case DType::F32: launch.operator()<DType::F32>(); break;
      case DType::F16: launch.operator()<DType::F16>(); break;
      case DType::BF16: launch.operator()<DType::BF16>(); break;
      default:
        if (!dispatch_quantized(w.dtype, launch)) {
          throw KernelError(std::string("fused_linear: unsupported weight dtype ") +
                            dtype_name(w.dtype));
        }
    }
    check_launch("fused_linear");
    return;
  }
  if (prologue != LinearPrologue::None && scratch.data == nullptr) {
    throw KernelError("fused_linear: a prologue needs a scratch buffer");
  }
  if (prologue == LinearPrologue::RmsNorm) {
    rms_norm(x, norm_w, eps, scratch);
  } else if (prologue == LinearPrologue::SwiGLU) {
    View gate = x, up = x;
    gate.shape[1] = up.shape[1] = K;
    up.data = static_cast<float*>(x.data) + K;
    swiglu(gate, up, scratch);
  }
  linear(prologue != LinearPrologue::None ? scratch : x, w, out);
  if (add.data != nullptr) {
    launch_kernel(tuning_.pdl, add_rows_kernel, dim3(grid_for(M * N, kElementThreads)), dim3(kElementThreads), 0,
                  stream_, static_cast<float*>(out.data), M, N, add);
    check_launch("fused_linear");
  }
}

// --fast computes exactly on CUDA unless TL_CUDA_Q8_MATVEC=1. The 8-bit kernel measured faster than
// the exact one alone, on large weights (ncu on an H100, bench/gpu/ncu_matvec.py with
// TL_BENCH_MATVEC_Q8=1: 1.05-1.40x on 9-34 MiB Q4_1 / Q8_0 / Q4_K products; 0.74-0.94x on 0.2-4 MiB
// ones, Q6_K slower), but end to end slower: on an H200 (2026-11-28, bench/llm.py --gpu
// --tl-variants default,fast) the 1B shape decoded at 912 tok/s with it against 1,063 exact (813
// against 932 at 2,048 tokens), the SmolLM2 shape the same. With the flag it takes a Q4_1, Q8_0 or
// Q4_K weight of at least 8 MiB for up to kMatvecRows rows (a batched step's rows then get bitwise
// what each gets alone); prompts stay on the tensor cores.
Kernels::Q8Plan CudaKernels::q8_plan(DType w, int64_t M, int64_t N, int64_t K) const {
  constexpr size_t kMinBytes = size_t{8} << 20;
  if (!tuning_.q8_matvec) return Q8Plan::Exact;
  const bool measured = w == DType::Q4_1 || w == DType::Q8_0 || w == DType::Q4_K;
  return measured && M <= kMatvecRows && K % block_elems(w) == 0 && row_bytes(w, K) * static_cast<size_t>(N) >= kMinBytes
             ? Q8Plan::Fused
             : Q8Plan::Exact;
}

void CudaKernels::fused_linear_q8_activations(const View& x, const View& w, LinearPrologue prologue,
                                              const View& norm_w, float eps, const View& addend,
                                              const View& scratch, const View& out) {
  if (x.dtype != DType::F32 || out.dtype != DType::F32 || x.ndim != 2 || out.ndim != 2) {
    throw KernelError("fused_linear: cuda kernel expects 2-D f32 x and out");
  }
  require_float_view(norm_w, "fused_linear", "the norm weight");
  require_float_view(addend, "fused_linear", "the addend");
  const int64_t M = x.shape[0], K = w.shape[1], N = w.shape[0];
  if (M == 0 || N == 0) return;
  if (prologue == LinearPrologue::SwiGLU && x.shape[1] != 2 * K) {
    throw KernelError("fused_linear: the SwiGLU prologue needs x [M, 2K]");
  }
  const Addend add{addend.data, addend.dtype, addend.data ? addend.strides[0] : 0,
                   addend.data ? addend.strides[1] : 0};
  if (K > 0 && M <= INT32_MAX && is_quantized(w.dtype) && K % block_elems(w.dtype) == 0 &&
      launch_quant_matvec_q8(static_cast<const float*>(x.data), x.shape[1], w, prologue, norm_w, eps, add,
                             static_cast<float*>(out.data), static_cast<int>(M), static_cast<int>(sm_count_),
                             tuning_, stream_)) {
    check_launch("fused_linear");
    return;
  }
  Kernels::fused_linear_q8_activations(x, w, prologue, norm_w, eps, addend, scratch, out);
}

void CudaKernels::swiglu(const View& gate, const View& up, const View& out) {
  require_float_view(gate, "swiglu", "gate");
  require_float_view(up, "swiglu", "up");
  if (out.dtype != DType::F32 || gate.ndim != 2 || up.ndim != 2) {
    throw KernelError("swiglu: cuda kernel expects 2-D gate and up and an f32 out");
  }
  const int64_t rows = gate.shape[0], n = gate.shape[1];
  if (rows * n == 0) return;
  launch_kernel(tuning_.pdl, swiglu_kernel, dim3(grid_for(rows * n, kElementThreads)), dim3(kElementThreads), 0, stream_,
      gate.data, gate.dtype, gate.strides[0], gate.strides[1], up.data, up.dtype, up.strides[0],
      up.strides[1], rows, n, static_cast<float*>(out.data));
  check_launch("swiglu");
}

void CudaKernels::rope_kv_write(const View& q, const View& k, const View& v, int64_t pos_offset,
                                float base, bool neox, const View& q_out, const View& k_dst,
                                const View& v_dst) {
  for (const View* t : {&q, &k, &v, &q_out, &k_dst, &v_dst}) {
    require_float_view(*t, "rope_kv_write", "every operand");
    if (t->ndim != 3) throw KernelError("rope_kv_write: cuda kernel expects 3-D views");
  }
  const int64_t S = q.shape[0], Hq = q.shape[1], D = q.shape[2], Hkv = k.shape[1];
  if (D % 2 != 0) throw KernelError("rope_kv_write: head dim must be even, got " + std::to_string(D));
  const int64_t total = S * Hq * (D / 2) + S * Hkv * (D / 2) + S * Hkv * D;
  if (total == 0) return;
  const DynArgs dyn = dyn_args({pos_offset}, {k_dst.data, v_dst.data});
  if (!dyn.launch) return;
  launch_kernel(tuning_.pdl, rope_kv_write_kernel, dim3(grid_for(total, kElementThreads)), dim3(kElementThreads), 0, stream_,
      heads_of(q), heads_of(k), heads_of(v), heads_of(q_out), heads_of(k_dst), heads_of(v_dst), S,
      Hq, Hkv, D, pos_offset, static_cast<double>(base), neox, dyn.device,
      rope_freqs(static_cast<double>(base), D, tuning_.rope_device_pow));
  check_launch("rope_kv_write");
}

}  // namespace cuda
}  // namespace tl
