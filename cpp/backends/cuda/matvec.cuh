#pragma once
// The quantized matrix-vector product of linear's and fused_linear's decode case (M <= 8 rows):
// one kernel (fused.cu) serves both, so they sum in the same order (fused_linear's results equal
// rms_norm/swiglu + linear + add). Each block stages the M rows of x in shared memory, every
// 32-element group padded to 36 floats so that the float4 reads of 8 consecutive groups hit
// distinct banks; then LPR lanes (8, 16 or 32, inside one warp) share one output column n: lane
// `sub` takes the groups g = sub, sub + LPR, ... of the weight row, reads each with wide loads as
// integers and a scale and offset per 16 elements (quant32) and adds its dot with each row of x
// to acc[m] (scale * sum(q x) + offset * sum(x), the sums of x staged with the rows); group_sum<LPR> adds the LPR
// partial sums. Fewer lanes per column for short rows keep every lane busy (K = 576 has only 18
// groups); blocks loop over columns, so x is staged once per block, not once per 4 columns. With
// one row of x and a tall weight, each lane group takes four columns at once (matvec32_cols).
#include "cuda_common.cuh"
#include "cuda_kernels.h"
#include "quant_blocks.cuh"
#include "runtime/kernels.h"

namespace tl {
namespace cuda {

constexpr int kMatvecRows = 8;

inline int matvec_lanes_per_row(int64_t K) {
  const int64_t groups = K / 32;
  return groups >= 32 ? 32 : groups >= 16 ? 16 : 8;
}

constexpr int kGroupStride = 36;  // floats per staged 32-element group

// Floats of one staged row of K elements.
__host__ __device__ inline int64_t staged_row_floats(int64_t K) { return K / 32 * kGroupStride; }

// A residual (or any addend) added to out[m, n] before its store; data nullptr: none.
struct Addend {
  const void* data;
  DType dtype;
  int64_t s0, s1;
};

// Launches the kernel (fused.cu) for out [M, N] = prologue(x) @ w^T + addend, w quantized [N, K];
// returns false, launching nothing, when w is not quantized, K is not a multiple of 32, w is not
// aligned for dequant32 or the staged rows do not fit in shared memory. `tuning`: the variants
// (early loads, pairs, four columns) it may take.
bool launch_quant_matvec(const float* x, const View& w, LinearPrologue prologue, const View& norm_w,
                         float eps, Addend add, float* out, int M, int sm_count,
                         const CudaTuning& tuning, cudaStream_t stream);

// The same product with x's rows quantized to 8 bits (linear_q8_activations and
// fused_linear_q8_activations; the kernel below this file's dot_q8): any number of rows, x rows
// x_row floats apart ([gate | up] halves for SwiGLU), each row's result its one-row product.
// false, launching nothing, where it does not apply (as launch_quant_matvec, and a row's quantized
// groups past the shared memory of a launch).
bool launch_quant_matvec_q8(const float* x, int64_t x_row, const View& w, LinearPrologue prologue,
                            const View& norm_w, float eps, Addend add, float* out, int M, int sm_count,
                            const CudaTuning& tuning, cudaStream_t stream);

// One 32-element group of a quantized weight row as quant32 reads it: the integers and the affine
// map of each 16-element half.
struct Quant32 {
  uint32_t q[8];
  float a[2], b[2];
};

template <DType WT>
__device__ __forceinline__ void load_quant32(const uint8_t* row, int64_t g, Quant32& d) {
  quant32<WT>(row, g, d.q, d.a, d.b);
}

// Weight types whose two 32-element groups 2p and 2p + 1 share their integers' 32 bytes (Q4_K:
// low and high nibbles): matvec32_row gives a lane both groups of a pair from one set of loads,
// so it issues half the loads and half the dependent rounds of them.
template <DType WT>
constexpr bool kQuantPairs = WT == DType::Q4_K;

// Groups 2p and 2p + 1 of a Q4_K row, as load_quant32 gives each.
__device__ __forceinline__ void load_quant32_pair_q4k(const uint8_t* row, int64_t p, Quant32& d0, Quant32& d1) {
  const uint8_t* blk = row + (p >> 2) * TL_Q4_K_BLOCK_BYTES;
  const int j = static_cast<int>(p & 3);
  const uint4 head = __ldg(reinterpret_cast<const uint4*>(blk));
  const uint32_t sc_words[3] = {head.y, head.z, head.w};
  float sc0, mn0, sc1, mn1;
  k_scale_min_w(sc_words, 2 * j, &sc0, &mn0);
  k_scale_min_w(sc_words, 2 * j + 1, &sc1, &mn1);
  uint32_t w[8];
  load16x2(blk + 16 + j * 32, w);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    d0.q[i] = w[i] & 0x0F0F0F0Fu;
    d1.q[i] = (w[i] >> 4) & 0x0F0F0F0Fu;
  }
  const float d = f16_bits(head.x & 0xFFFF), dmin = f16_bits(head.x >> 16);
  d0.a[0] = d0.a[1] = d * sc0;
  d0.b[0] = d0.b[1] = -(dmin * mn0);
  d1.a[0] = d1.a[1] = d * sc1;
  d1.b[0] = d1.b[1] = -(dmin * mn1);
}


// xs: the staged rows (staged_row_floats(K) floats each; floats 32 and 33 of each group hold the
// sums of its two 16-element halves). The weights come as integers and an affine map per half
// (quant32), so each element costs a byte-to-float conversion and one FMA.
// acc[m] += group g of the weight row (d) dotted with group g of row m of x.
template <int MAXM>
__device__ __forceinline__ void dot32_rows(const Quant32& d, const float* xs, int M, int64_t xrow,
                                           int64_t g, float (&acc)[MAXM]) {
  float qf[32];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
#pragma unroll
    for (int k = 0; k < 4; ++k) qf[4 * i + k] = byte_to_float(d.q[i], k);
  }
#pragma unroll
  for (int m = 0; m < MAXM; ++m) {
    if (m < M) {
      const float* xg = xs + m * xrow + g * kGroupStride;
      const float4* xv = reinterpret_cast<const float4*>(xg);
      float s[2] = {0.0f, 0.0f};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float4 v = xv[i];
        float& t = s[i >> 2];
        t = fmaf(qf[4 * i], v.x, t);
        t = fmaf(qf[4 * i + 1], v.y, t);
        t = fmaf(qf[4 * i + 2], v.z, t);
        t = fmaf(qf[4 * i + 3], v.w, t);
      }
      const float2 xsum = *reinterpret_cast<const float2*>(xg + 32);
      acc[m] += (d.a[0] * s[0] + d.b[0] * xsum.x) + (d.a[1] * s[1] + d.b[1] * xsum.y);
    }
  }
}

// Lane `sub`'s share of one weight row against the M staged rows: the groups sub, sub + LPR, ...
// in that order. `first`: group `sub`, already loaded by the caller (the kernel issues those loads
// before it stages x, so their memory latency overlaps the staging), or nullptr.
// MAXM: the most rows the caller may pass (1 for the common decode case: fewer registers).
// PAIRS (kQuantPairs types, K a multiple of 64, no `first`): lane `sub` takes the pairs of groups
// sub, sub + LPR, ..., each pair's two groups in order.
template <DType WT, int LPR, int MAXM, bool PAIRS = false>
__device__ __forceinline__ void matvec32_row(const uint8_t* row, const float* xs, int M, int64_t K,
                                             int sub, float (&acc)[MAXM], const Quant32* first) {
  const int64_t groups = K / 32, xrow = staged_row_floats(K);
  if constexpr (PAIRS) {
    static_assert(kQuantPairs<WT>, "pairs of groups only where two groups share their loads");
#pragma unroll 2
    for (int64_t p = sub; p < groups / 2; p += LPR) {
      Quant32 d0, d1;
      load_quant32_pair_q4k(row, p, d0, d1);
      dot32_rows<MAXM>(d0, xs, M, xrow, 2 * p, acc);
      dot32_rows<MAXM>(d1, xs, M, xrow, 2 * p + 1, acc);
    }
    return;
  }
  int64_t g = sub;
  if (first != nullptr) {
    if (g < groups) dot32_rows<MAXM>(*first, xs, M, xrow, g, acc);
    g += LPR;
  }
#pragma unroll 2
  for (; g < groups; g += LPR) {
    Quant32 d;
    load_quant32<WT>(row, g, d);
    dot32_rows<MAXM>(d, xs, M, xrow, g, acc);
  }
}

// acc[c] += group g of weight row c (d[c]) dotted with the staged group xg of one row of x: each
// float4 of x read once for all COLS rows. Per column the same operations in the same order as
// dot32_rows, so the same sums.
template <int COLS>
__device__ __forceinline__ void dot32_cols(const Quant32 (&d)[COLS], const float* xg, float (&acc)[COLS]) {
  const float4* xv = reinterpret_cast<const float4*>(xg);
  float s[COLS][2];
#pragma unroll
  for (int c = 0; c < COLS; ++c) s[c][0] = s[c][1] = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float4 v = xv[i];
#pragma unroll
    for (int c = 0; c < COLS; ++c) {
      float& t = s[c][i >> 2];
      t = fmaf(byte_to_float(d[c].q[i], 0), v.x, t);
      t = fmaf(byte_to_float(d[c].q[i], 1), v.y, t);
      t = fmaf(byte_to_float(d[c].q[i], 2), v.z, t);
      t = fmaf(byte_to_float(d[c].q[i], 3), v.w, t);
    }
  }
  const float2 xsum = *reinterpret_cast<const float2*>(xg + 32);
#pragma unroll
  for (int c = 0; c < COLS; ++c) {
    acc[c] += (d[c].a[0] * s[c][0] + d[c].b[0] * xsum.x) + (d[c].a[1] * s[c][1] + d[c].b[1] * xsum.y);
  }
}

// One row of x (M = 1) against COLS weight rows at once: the COLS rows' loads are in flight
// together (the kernel is latency-bound otherwise). `first`: group `sub` of each row, already
// loaded (as matvec32_row's), or nullptr.
template <DType WT, int LPR, int COLS>
__device__ __forceinline__ void matvec32_cols(const uint8_t* const (&rows)[COLS], const float* xs,
                                              int64_t K, int sub, float (&acc)[COLS],
                                              const Quant32 (*first)[COLS]) {
  const int64_t groups = K / 32;
  int64_t g = sub;
  if (first != nullptr) {
    if (g < groups) dot32_cols<COLS>(*first, xs + g * kGroupStride, acc);
    g += LPR;
  }
  for (; g < groups; g += LPR) {
    Quant32 d[COLS];
#pragma unroll
    for (int c = 0; c < COLS; ++c) load_quant32<WT>(rows[c], g, d[c]);
    dot32_cols<COLS>(d, xs + g * kGroupStride, acc);
  }
}

// ---- 8-bit activations (linear_q8_activations, fused_linear_q8_activations; --fast): each staged
// 32-element group of x is quantized as the CPU's kernels_matmul_q8.cpp does it (d = max|x| / 127,
// q = x * (127 / max|x|) rounded to nearest even, clamped to +-127), so both backends multiply the
// same integers, and the dot with a weight group is two integer dot products of 16 (dp4a: four
// byte products a step) scaled in f32. Every float operation below is written out (__fmul_rn,
// __fadd_rn, fmaf): no contraction choice of the compiler can make one kernel variant round a
// (row, column) pair differently from another, so a row's result does not depend on the other
// rows or on the kernel variant that computed it.

// One quantized group of x in shared memory: the 32 int8 (element j in byte j & 3 of word j >> 2,
// as Quant32's q), the scale d and the integer sums of the two 16-element halves.
struct alignas(16) Q8Group {
  uint32_t q[8];
  float d;
  int sum[2];
  int pad;
};
static_assert(sizeof(Q8Group) == 48, "three 16-byte words: conflict-free for 8 consecutive groups");

// Quantizes the 32 floats v of one group into g.
__device__ __forceinline__ void quantize_q8_group(const float (&v)[32], Q8Group& g) {
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(v[j]));
  const float id = amax > 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
  int sum[2] = {0, 0};
  Q8Group r;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    uint32_t word = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int q = max(-127, min(127, __float2int_rn(__fmul_rn(v[4 * i + k], id))));
      sum[i >> 2] += q;
      word |= (static_cast<uint32_t>(q) & 0xFFu) << (8 * k);
    }
    r.q[i] = word;
  }
  r.d = __fdiv_rn(amax, 127.0f);
  r.sum[0] = sum[0];
  r.sum[1] = sum[1];
  r.pad = 0;
  g = r;
}

// Sum over 4 bytes of unsigned a times signed b, plus c.
__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// The integer a weight type's q carries on top of its signed value where its offset b is a whole
// multiple of its scale a (b = -Z a): the dot then subtracts Z * sum(qx) in integers, exactly.
// 0: an affine type (Q4_1, Q5_1, Q4_K, Q5_K), whose offset multiplies d * sum(qx) in f32.
template <DType WT>
constexpr int kQuantZero = WT == DType::Q4_0 ? 8 : WT == DType::Q5_0 ? 16 : WT == DType::Q8_0 ? 128
                           : WT == DType::Q6_K ? 32 : 0;

// Group d of a weight row dotted with the quantized group xg of x.
template <DType WT>
__device__ __forceinline__ float dot_q8(const Quant32& d, const Q8Group& xg) {
  const uint4 x0 = *reinterpret_cast<const uint4*>(&xg.q[0]);
  const uint4 x1 = *reinterpret_cast<const uint4*>(&xg.q[4]);
  const float4 meta = *reinterpret_cast<const float4*>(&xg.d);
  int i0 = dp4a_us(d.q[0], x0.x, 0);
  i0 = dp4a_us(d.q[1], x0.y, i0);
  i0 = dp4a_us(d.q[2], x0.z, i0);
  i0 = dp4a_us(d.q[3], x0.w, i0);
  int i1 = dp4a_us(d.q[4], x1.x, 0);
  i1 = dp4a_us(d.q[5], x1.y, i1);
  i1 = dp4a_us(d.q[6], x1.z, i1);
  i1 = dp4a_us(d.q[7], x1.w, i1);
  const float dx = meta.x;
  const int s0 = __float_as_int(meta.y), s1 = __float_as_int(meta.z);
  if constexpr (kQuantZero<WT> != 0) {
    const float p0 = __fmul_rn(__fmul_rn(d.a[0], dx), static_cast<float>(i0 - kQuantZero<WT> * s0));
    const float p1 = __fmul_rn(__fmul_rn(d.a[1], dx), static_cast<float>(i1 - kQuantZero<WT> * s1));
    return __fadd_rn(p0, p1);
  } else {
    const float p0 = fmaf(d.b[0], __fmul_rn(dx, static_cast<float>(s0)),
                          __fmul_rn(__fmul_rn(d.a[0], dx), static_cast<float>(i0)));
    const float p1 = fmaf(d.b[1], __fmul_rn(dx, static_cast<float>(s1)),
                          __fmul_rn(__fmul_rn(d.a[1], dx), static_cast<float>(i1)));
    return __fadd_rn(p0, p1);
  }
}

// Sum over the LPR consecutive lanes of a column group; every lane of the warp must call it.
template <int LPR>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = LPR / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

}  // namespace cuda
}  // namespace tl
