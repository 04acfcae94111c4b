// linear (x @ w^T) for plain and GGUF block-quantized weights (the matmul family: CUDA keeps it in
// matmul.cu).
// Block layouts are ggml's, byte for byte (see dtype.h). Weights are never expanded into a full
// f32 matrix: M == 1 (decode) takes one dot product per weight row, dequantizing inside it
// (hand-written AVX2 for Q4_0/Q4_1/Q5_0/Q8_0/Q4_K/Q5_K/Q6_K/F16/BF16: a block's quants are
// unpacked into registers, converted to f32 and FMA'd against x; auto-vectorised block
// dequantizers for the rest); 2 <= M <= 8 (a batched decode step) runs the several-row kernels
// (Q4_0/Q4_1/Q8_0: each weight block unpacked once for all rows, every row bitwise its one-row
// result; AVX-512VL, where the CPU has it, for a register tile of 8 rows of x by 2 weight rows);
// M > 8 (prefill) dequantizes a tile of weight rows into a small per-thread f32 buffer
// and multiplies every row of x against it, so each weight block is decoded once per call.
// Activations and accumulation stay f32 (no activation quantization); the opt-in 8-bit
// activation path (linear_q8_activations) lives in kernels_matmul_q8.cpp. expert_linear (the
// expert products of a mixture-of-experts layer) runs linear once per chosen expert on the rows
// routed to it, so it has the same kernels, threading and numbers as linear.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_kernels_impl.h"
#include "quant_avx2.h"

namespace tl::cpu {
namespace {

TL_INLINE float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// ---------------------------------------------------------------- block dequantizers

TL_INLINE void deq_q4_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

TL_INLINE void deq_q4_1(const uint8_t* b, float* y) {
  const float d = half_at(b), m = half_at(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

TL_INLINE void deq_q5_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
    int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = static_cast<float>(lo - 16) * d;
    y[j + 16] = static_cast<float>(hi - 16) * d;
  }
}

TL_INLINE void deq_q5_1(const uint8_t* b, float* y) {
  const float d = half_at(b), m = half_at(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
    int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = static_cast<float>(lo) * d + m;
    y[j + 16] = static_cast<float>(hi) * d + m;
  }
}

TL_INLINE void deq_q8_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block.
TL_INLINE void k_scale_min(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K/Q5_K: 8 sub-blocks of 32; bytes qs[32c .. 32c + 31] hold sub-block 2c in their low
// nibbles and sub-block 2c + 1 in their high nibbles; Q5_K's bit 5 of sub-block s is bit s of qh[l].
TL_INLINE void deq_q4_k(const uint8_t* b, float* y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int c = 0; c < 4; ++c) {
    int sc0, mn0, sc1, mn1;
    k_scale_min(scales, 2 * c, &sc0, &mn0);
    k_scale_min(scales, 2 * c + 1, &sc1, &mn1);
    const float d0 = d * static_cast<float>(sc0), m0 = dmin * static_cast<float>(mn0);
    const float d1 = d * static_cast<float>(sc1), m1 = dmin * static_cast<float>(mn1);
    const uint8_t* q = qs + 32 * c;
    float* yc = y + 64 * c;
    for (int l = 0; l < 32; ++l) {
      yc[l] = d0 * static_cast<float>(q[l] & 0x0F) - m0;
      yc[l + 32] = d1 * static_cast<float>(q[l] >> 4) - m1;
    }
  }
}

TL_INLINE void deq_q5_k(const uint8_t* b, float* y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int c = 0; c < 4; ++c) {
    int sc0, mn0, sc1, mn1;
    k_scale_min(scales, 2 * c, &sc0, &mn0);
    k_scale_min(scales, 2 * c + 1, &sc1, &mn1);
    const float d0 = d * static_cast<float>(sc0), m0 = dmin * static_cast<float>(mn0);
    const float d1 = d * static_cast<float>(sc1), m1 = dmin * static_cast<float>(mn1);
    const uint8_t* q = qs + 32 * c;
    float* yc = y + 64 * c;
    for (int l = 0; l < 32; ++l) {
      const int h0 = ((qh[l] >> (2 * c)) & 1) << 4, h1 = ((qh[l] >> (2 * c + 1)) & 1) << 4;
      yc[l] = d0 * static_cast<float>((q[l] & 0x0F) | h0) - m0;
      yc[l + 32] = d1 * static_cast<float>((q[l] >> 4) | h1) - m1;
    }
  }
}

TL_INLINE void deq_q6_k(const uint8_t* b, float* y) {
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half_at(b + 208);
  // Each 128-element half: element l + 32c takes low (c < 2) or high (c >= 2) nibbles of
  // ql[l + 32 (c % 2)] and bits 2c..2c+1 of qh[l]; scales cover 16 elements each.
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b + 64 * h;
    const uint8_t* qh = b + 128 + 32 * h;
    const int8_t* sc = scales + 8 * h;
    float* yh = y + 128 * h;
    for (int half16 = 0; half16 < 2; ++half16) {
      const float s0 = d * sc[half16], s1 = d * sc[2 + half16], s2 = d * sc[4 + half16], s3 = d * sc[6 + half16];
      for (int l = 16 * half16; l < 16 * half16 + 16; ++l) {
        const int q0 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        yh[l] = s0 * static_cast<float>(q0);
        yh[l + 32] = s1 * static_cast<float>(q1);
        yh[l + 64] = s2 * static_cast<float>(q2);
        yh[l + 96] = s3 * static_cast<float>(q3);
      }
    }
  }
}

template <DType T>
TL_INLINE void deq_block(const uint8_t* b, float* y) {
  if constexpr (T == DType::Q4_0) deq_q4_0(b, y);
  else if constexpr (T == DType::Q4_1) deq_q4_1(b, y);
  else if constexpr (T == DType::Q5_0) deq_q5_0(b, y);
  else if constexpr (T == DType::Q5_1) deq_q5_1(b, y);
  else if constexpr (T == DType::Q8_0) deq_q8_0(b, y);
  else if constexpr (T == DType::Q4_K) deq_q4_k(b, y);
  else if constexpr (T == DType::Q5_K) deq_q5_k(b, y);
  else if constexpr (T == DType::Q6_K) deq_q6_k(b, y);
  else if constexpr (T == DType::F32) std::memcpy(y, b, 4);
  else if constexpr (T == DType::F16) y[0] = half_at(b);
  else if constexpr (T == DType::BF16) {
    uint16_t h;
    std::memcpy(&h, b, 2);
    y[0] = bf16_to_f32(h);
  }
}

template <DType T>
constexpr int64_t kBlockElems = block_elems(T);
template <DType T>
constexpr int64_t kBlockBytes = block_bytes(T);

template <DType T>
TL_INLINE void dequantize_row_t(const uint8_t* src, int64_t n, float* dst) {
  if constexpr (T == DType::F16) {
    const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
  } else if constexpr (T == DType::BF16) {
    const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
  } else if constexpr (T == DType::F32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  } else {
    const int64_t nb = n / kBlockElems<T>;
    for (int64_t i = 0; i < nb; ++i) deq_block<T>(src + i * kBlockBytes<T>, dst + i * kBlockElems<T>);
  }
}

// Dot product of a short f32 run written so the compiler vectorises it for the target.
TL_INLINE float dot_inline(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  return s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// Elements dequantized per step in the generic dot: a multiple of every block size.
constexpr int64_t kDotChunk = 512;

template <DType T>
TL_INLINE float dot_row_generic_t(const uint8_t* w, const float* x, int64_t k) {
  alignas(32) float buf[kDotChunk];
  float acc = 0.0f;
  for (int64_t c = 0; c < k; c += kDotChunk) {
    int64_t n = std::min(kDotChunk, k - c);
    dequantize_row_t<T>(w + (c / kBlockElems<T>) * kBlockBytes<T>, n, buf);
    acc += dot_inline(buf, x + c, n);
  }
  return acc;
}

// Row dot product: w is one weight row of k elements, x is f32[k]; xsum holds the sums of x
// over each 32-element block (used by the offset-carrying formats' fast paths).
using RowDotFn = float (*)(const uint8_t* w, const float* x, const float* xsum, int64_t k);
using DequantRowFn = void (*)(const uint8_t* src, int64_t n, float* dst);

template <DType T>
float dot_row_portable(const uint8_t* w, const float* x, const float*, int64_t k) {
  return dot_row_generic_t<T>(w, x, k);
}
template <DType T>
void dequantize_row_portable(const uint8_t* src, int64_t n, float* dst) {
  dequantize_row_t<T>(src, n, dst);
}

#if defined(__x86_64__)
using avx2::half_avx2;
using avx2::hsum256;
using avx2::hsum256_x8;

template <DType T>
TL_AVX2 float dot_row_avx2_generic(const uint8_t* w, const float* x, const float*, int64_t k) {
  return dot_row_generic_t<T>(w, x, k);
}
template <DType T>
TL_AVX2 void dequantize_row_avx2(const uint8_t* src, int64_t n, float* dst) {
  dequantize_row_t<T>(src, n, dst);
}



// sum_j q_j * x_j for one block of 32 unsigned nibbles (low nibbles are elements 0..15).
TL_AVX2 TL_INLINE __m256 nibble_block_dot(const uint8_t* qs, const float* xb) {
  const __m128i mask = _mm_set1_epi8(0x0F);
  __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  __m128i lo = _mm_and_si128(q, mask);
  __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
  __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), _mm256_loadu_ps(xb));
  s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))), _mm256_loadu_ps(xb + 8), s);
  s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), _mm256_loadu_ps(xb + 16), s);
  s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))), _mm256_loadu_ps(xb + 24), s);
  return s;
}

// Q4_1: sum_b d_b * (q . x)_b + m_b * sum(x_b). The block-sum terms are explicit fused
// multiply-adds (not left to the compiler's contraction) so the several-row kernels below can
// repeat them exactly.
TL_AVX2 float dot_q4_1_avx2(const uint8_t* w, const float* x, const float* xsum, int64_t k) {
  const int64_t nb = k / 32;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float msum0 = 0.0f, msum1 = 0.0f;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const uint8_t* p0 = w + b * 20;
    const uint8_t* p1 = p0 + 20;
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(half_avx2(p0)), nibble_block_dot(p0 + 4, x + b * 32), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(half_avx2(p1)), nibble_block_dot(p1 + 4, x + b * 32 + 32), acc1);
    msum0 = std::fma(half_avx2(p0 + 2), xsum[b], msum0);
    msum1 = std::fma(half_avx2(p1 + 2), xsum[b + 1], msum1);
  }
  for (; b < nb; ++b) {
    const uint8_t* p = w + b * 20;
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(half_avx2(p)), nibble_block_dot(p + 4, x + b * 32), acc0);
    msum0 = std::fma(half_avx2(p + 2), xsum[b], msum0);
  }
  return hsum256(_mm256_add_ps(acc0, acc1)) + (msum0 + msum1);
}

// Q4_0: sum_b d_b * ((q . x)_b - 8 * sum(x_b)).
TL_AVX2 float dot_q4_0_avx2(const uint8_t* w, const float* x, const float* xsum, int64_t k) {
  const int64_t nb = k / 32;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float off0 = 0.0f, off1 = 0.0f;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const uint8_t* p0 = w + b * 18;
    const uint8_t* p1 = p0 + 18;
    const float d0 = half_avx2(p0), d1 = half_avx2(p1);
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0), nibble_block_dot(p0 + 2, x + b * 32), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1), nibble_block_dot(p1 + 2, x + b * 32 + 32), acc1);
    off0 = std::fma(d0, xsum[b], off0);
    off1 = std::fma(d1, xsum[b + 1], off1);
  }
  for (; b < nb; ++b) {
    const uint8_t* p = w + b * 18;
    const float d = half_avx2(p);
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d), nibble_block_dot(p + 2, x + b * 32), acc0);
    off0 = std::fma(d, xsum[b], off0);
  }
  return hsum256(_mm256_add_ps(acc0, acc1)) - 8.0f * (off0 + off1);
}

TL_AVX2 TL_INLINE __m256 int8_block_dot(const uint8_t* qs, const float* xb) {
  const __m128i* q = reinterpret_cast<const __m128i*>(qs);
  __m128i a = _mm_loadu_si128(q), b = _mm_loadu_si128(q + 1);
  __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(a)), _mm256_loadu_ps(xb));
  s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(a, 8))), _mm256_loadu_ps(xb + 8), s);
  s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), _mm256_loadu_ps(xb + 16), s);
  s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8))), _mm256_loadu_ps(xb + 24), s);
  return s;
}

TL_AVX2 float dot_q8_0_avx2(const uint8_t* w, const float* x, const float*, int64_t k) {
  const int64_t nb = k / 32;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const uint8_t* p0 = w + b * 34;
    const uint8_t* p1 = p0 + 34;
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(half_avx2(p0)), int8_block_dot(p0 + 2, x + b * 32), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(half_avx2(p1)), int8_block_dot(p1 + 2, x + b * 32 + 32), acc1);
  }
  for (; b < nb; ++b) {
    const uint8_t* p = w + b * 34;
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(half_avx2(p)), int8_block_dot(p + 2, x + b * 32), acc0);
  }
  return hsum256(_mm256_add_ps(acc0, acc1));
}

// ---------------------------------------------------------------- several rows of x at once
// A batched decode step (tl serve --parallel) multiplies a few rows of x (up to kRowGroup at a
// time) by each weight row. These kernels unpack each weight block once and run, for every row m,
// exactly the operations of the one-row kernel above in its order (the block's quants as floats,
// the same mul/fmadd chain, the even blocks into one accumulator and the odd ones into another,
// the block-sum terms as the same scalar fused multiply-adds), so out[m] is bitwise what the
// one-row kernel gives for row m alone. They take the block sums block-major: xs[b * kRowGroup + m]
// is the sum of block b of row m, so one vector holds block b's sums of every row.

constexpr int64_t kRowGroup = 8;

// One block's 32 quants as floats, in the order nibble_block_dot / int8_block_dot use them.
TL_AVX2 TL_INLINE void nibble_block_floats(const uint8_t* qs, __m256* f) {
  const __m128i mask = _mm_set1_epi8(0x0F);
  __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  __m128i lo = _mm_and_si128(q, mask);
  __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
  f[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
  f[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
  f[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
  f[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
}

TL_AVX2 TL_INLINE void int8_block_floats(const uint8_t* qs, __m256* f) {
  const __m128i* q = reinterpret_cast<const __m128i*>(qs);
  __m128i a = _mm_loadu_si128(q), b = _mm_loadu_si128(q + 1);
  f[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(a));
  f[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(a, 8)));
  f[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  f[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));
}

TL_AVX2 TL_INLINE __m256 floats_block_dot(const __m256* f, const float* xb) {
  __m256 s = _mm256_mul_ps(f[0], _mm256_loadu_ps(xb));
  s = _mm256_fmadd_ps(f[1], _mm256_loadu_ps(xb + 8), s);
  s = _mm256_fmadd_ps(f[2], _mm256_loadu_ps(xb + 16), s);
  s = _mm256_fmadd_ps(f[3], _mm256_loadu_ps(xb + 24), s);
  return s;
}

// The row's result from its accumulators: hsum(even + odd) and the block-sum terms (the even
// blocks' and the odd blocks'), as the one-row kernels end. kType: 0 Q4_0, 1 Q4_1, 2 Q8_0.
template <int kType>
TL_AVX2 TL_INLINE float finish_row(__m256 even, __m256 odd, float s_even, float s_odd) {
  const float h = hsum256(_mm256_add_ps(even, odd));
  if constexpr (kType == 1) return h + (s_even + s_odd);
  else if constexpr (kType == 0) return h - 8.0f * (s_even + s_odd);  // exact: 8x is a power of two
  else return h;
}

// Block b of a weight row into the accumulators (acc, sums) of MR rows of x.
template <int kType, int MR>
TL_AVX2 TL_INLINE void rows_block(const uint8_t* w, int64_t b, const float* x, int64_t ldx, const float* xs,
                                  __m256* acc, float* sums) {
  constexpr int64_t kBytes = kType == 0 ? 18 : kType == 1 ? 20 : 34;
  constexpr int64_t kQs = kType == 1 ? 4 : 2;
  const uint8_t* p = w + b * kBytes;
  const float d = half_avx2(p);
  const float c = kType == 1 ? half_avx2(p + 2) : d;  // the factor of the block sums (Q4_1: m; Q4_0: d)
  const __m256 vd = _mm256_set1_ps(d);
  __m256 f[4];
  if constexpr (kType == 2) int8_block_floats(p + kQs, f);
  else nibble_block_floats(p + kQs, f);
  for (int m = 0; m < MR; ++m) {
    acc[m] = _mm256_fmadd_ps(vd, floats_block_dot(f, x + m * ldx + b * 32), acc[m]);
    if constexpr (kType != 2) sums[m] = std::fma(c, xs[b * kRowGroup + m], sums[m]);
  }
}

// MR rows at once, MR a constant so that the 2 * MR accumulators stay in the 16 registers of AVX2;
// the blocks are taken in pairs (even ones into acc0, odd ones into acc1, as the one-row kernels do).
template <int kType, int MR>
TL_AVX2 TL_INLINE void dot_rows_block_avx2(const uint8_t* w, const float* x, int64_t ldx, const float* xs,
                                           int64_t k, float* out, int64_t ldo) {
  const int64_t nb = k / 32;
  __m256 acc0[MR], acc1[MR];
  float s0[MR], s1[MR];
  for (int m = 0; m < MR; ++m) {
    acc0[m] = acc1[m] = _mm256_setzero_ps();
    s0[m] = s1[m] = 0.0f;
  }
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    rows_block<kType, MR>(w, b, x, ldx, xs, acc0, s0);
    rows_block<kType, MR>(w, b + 1, x, ldx, xs, acc1, s1);
  }
  if (b < nb) rows_block<kType, MR>(w, b, x, ldx, xs, acc0, s0);
  for (int m = 0; m < MR; ++m) out[m * ldo] = finish_row<kType>(acc0[m], acc1[m], s0[m], s1[m]);
}

// out[m * ldo + n] = dot(weight row n, row m of x) for nw weight rows wrow bytes apart and
// rows <= kRowGroup rows of x.
template <int kType>
TL_AVX2 void dot_rows_avx2(const uint8_t* w, size_t wrow, int64_t nw, const float* x, int64_t ldx,
                           const float* xs, int64_t k, int64_t rows, float* out, int64_t ldo) {
  for (int64_t n = 0; n < nw; ++n) {
    const uint8_t* wn = w + n * wrow;
    int64_t m = 0;
    for (; m + 4 <= rows; m += 4)
      dot_rows_block_avx2<kType, 4>(wn, x + m * ldx, ldx, xs + m, k, out + m * ldo + n, ldo);
    switch (rows - m) {
      case 3: dot_rows_block_avx2<kType, 3>(wn, x + m * ldx, ldx, xs + m, k, out + m * ldo + n, ldo); break;
      case 2: dot_rows_block_avx2<kType, 2>(wn, x + m * ldx, ldx, xs + m, k, out + m * ldo + n, ldo); break;
      case 1: dot_rows_block_avx2<kType, 1>(wn, x + m * ldx, ldx, xs + m, k, out + m * ldo + n, ldo); break;
      default: break;
    }
  }
}

// The same arithmetic with AVX-512VL, whose 32 vector registers (the same 256-bit operations)
// hold a tile of MR <= 8 rows of x by NR = 2 weight rows: every x vector loaded feeds both weight
// rows and every unpacked weight block all MR rows, where the AVX2 kernel spends one load per
// multiply-add and unpacks a block once per 4 rows. A pass takes every other block (b0 = 0: the
// even ones, acc0 of the one-row kernel; b0 = 1: the odd ones), so one accumulator per (row of x,
// weight row) is live; the block-sum terms of all MR rows are one vector per weight row, lane m
// row m's scalar sum (the same fused multiply-adds, one lane each).
#define TL_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl")))
// The tile's loops must unroll completely for its accumulators to live in registers.
#define TL_UNROLL _Pragma("GCC unroll 16")

// 8 floats of x loaded into a register, for all NR weight rows: the empty asm keeps the compiler
// from folding the load into each multiply-add as a memory operand, which loads the same vector NR
// times (measured 10-20 % slower at NR = 2: the loads then compete with the multiply-adds).
TL_AVX512 TL_INLINE __m256 load_once(const float* p) {
  __m256 v = _mm256_loadu_ps(p);
  __asm__("" : "+v"(v));
  return v;
}

template <int kType, int MR, int NR>
TL_AVX512 TL_INLINE void tile_pass(const uint8_t* w, size_t wrow, const float* x, int64_t ldx, const float* xs,
                                   int64_t b0, int64_t nb, __m256 (&acc)[MR][NR], __m256 (&sums)[NR]) {
  constexpr int64_t kBytes = kType == 0 ? 18 : kType == 1 ? 20 : 34;
  constexpr int64_t kQs = kType == 1 ? 4 : 2;
  TL_UNROLL
  for (int n = 0; n < NR; ++n) {
    sums[n] = _mm256_setzero_ps();
    TL_UNROLL
    for (int m = 0; m < MR; ++m) acc[m][n] = _mm256_setzero_ps();
  }
  for (int64_t b = b0; b < nb; b += 2) {
    __m256 f[NR][4], vd[NR];
    TL_UNROLL
    for (int n = 0; n < NR; ++n) {
      const uint8_t* p = w + n * wrow + b * kBytes;
      const float d = half_avx2(p);
      vd[n] = _mm256_set1_ps(d);
      if constexpr (kType == 2) int8_block_floats(p + kQs, f[n]);
      else nibble_block_floats(p + kQs, f[n]);
      if constexpr (kType != 2)
        sums[n] = _mm256_fmadd_ps(_mm256_set1_ps(kType == 1 ? half_avx2(p + 2) : d),
                                  _mm256_loadu_ps(xs + b * kRowGroup), sums[n]);
    }
    TL_UNROLL
    for (int m = 0; m < MR; ++m) {
      const float* xb = x + m * ldx + b * 32;
      __m256 s[NR];
      __m256 xv = load_once(xb);
      TL_UNROLL
      for (int n = 0; n < NR; ++n) s[n] = _mm256_mul_ps(f[n][0], xv);
      TL_UNROLL
      for (int j = 1; j < 4; ++j) {
        xv = load_once(xb + 8 * j);
        TL_UNROLL
        for (int n = 0; n < NR; ++n) s[n] = _mm256_fmadd_ps(f[n][j], xv, s[n]);
      }
      TL_UNROLL
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm256_fmadd_ps(vd[n], s[n], acc[m][n]);
    }
  }
}

template <int kType, int MR, int NR>
TL_AVX512 void dot_tile_avx512(const uint8_t* w, size_t wrow, const float* x, int64_t ldx, const float* xs,
                               int64_t nb, float* out, int64_t ldo) {
  __m256 acc[MR][NR], sums[NR];
  tile_pass<kType, MR, NR>(w, wrow, x, ldx, xs, 0, nb, acc, sums);
  alignas(32) float s_even[NR][8];
  __m256 even[MR][NR];
  TL_UNROLL
  for (int n = 0; n < NR; ++n) {
    _mm256_store_ps(s_even[n], sums[n]);
    TL_UNROLL
    for (int m = 0; m < MR; ++m) even[m][n] = acc[m][n];
  }
  tile_pass<kType, MR, NR>(w, wrow, x, ldx, xs, 1, nb, acc, sums);
  alignas(32) float s_odd[NR][8];
  TL_UNROLL
  for (int n = 0; n < NR; ++n) _mm256_store_ps(s_odd[n], sums[n]);
  TL_UNROLL
  for (int m = 0; m < MR; ++m)
    TL_UNROLL
    for (int n = 0; n < NR; ++n) out[m * ldo + n] = finish_row<kType>(even[m][n], acc[m][n], s_even[n][m], s_odd[n][m]);
}

template <int kType, int MR>
TL_AVX512 void dot_rows_mr_avx512(const uint8_t* w, size_t wrow, int64_t nw, const float* x, int64_t ldx,
                                  const float* xs, int64_t nb, float* out, int64_t ldo) {
  int64_t n = 0;
  for (; n + 2 <= nw; n += 2) dot_tile_avx512<kType, MR, 2>(w + n * wrow, wrow, x, ldx, xs, nb, out + n, ldo);
  if (n < nw) dot_tile_avx512<kType, MR, 1>(w + n * wrow, wrow, x, ldx, xs, nb, out + n, ldo);
}

template <int kType>
TL_AVX512 void dot_rows_avx512(const uint8_t* w, size_t wrow, int64_t nw, const float* x, int64_t ldx,
                               const float* xs, int64_t k, int64_t rows, float* out, int64_t ldo) {
  const int64_t nb = k / 32;
  switch (rows) {
    case 8: return dot_rows_mr_avx512<kType, 8>(w, wrow, nw, x, ldx, xs, nb, out, ldo);
    case 7: return dot_rows_mr_avx512<kType, 7>(w, wrow, nw, x, ldx, xs, nb, out, ldo);
    case 6: return dot_rows_mr_avx512<kType, 6>(w, wrow, nw, x, ldx, xs, nb, out, ldo);
    case 5: return dot_rows_mr_avx512<kType, 5>(w, wrow, nw, x, ldx, xs, nb, out, ldo);
    case 4: return dot_rows_mr_avx512<kType, 4>(w, wrow, nw, x, ldx, xs, nb, out, ldo);
    case 3: return dot_rows_mr_avx512<kType, 3>(w, wrow, nw, x, ldx, xs, nb, out, ldo);
    case 2: return dot_rows_mr_avx512<kType, 2>(w, wrow, nw, x, ldx, xs, nb, out, ldo);
    default: return dot_rows_mr_avx512<kType, 1>(w, wrow, nw, x, ldx, xs, nb, out, ldo);
  }
}

// sum_j v_j * x_j for 32 signed bytes v (element j is byte j) and 32 floats.
TL_AVX2 TL_INLINE __m256 i8x32_dot(__m256i v, const float* xb) {
  const __m128i a = _mm256_castsi256_si128(v), b = _mm256_extracti128_si256(v, 1);
  __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(a)), _mm256_loadu_ps(xb));
  s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(a, 8))), _mm256_loadu_ps(xb + 8), s);
  s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), _mm256_loadu_ps(xb + 16), s);
  s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8))), _mm256_loadu_ps(xb + 24), s);
  return s;
}

// The same for 32 unsigned bytes.
TL_AVX2 TL_INLINE __m256 u8x32_dot(__m256i v, const float* xb) {
  const __m128i a = _mm256_castsi256_si128(v), b = _mm256_extracti128_si256(v, 1);
  __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(a)), _mm256_loadu_ps(xb));
  s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(a, 8))), _mm256_loadu_ps(xb + 8), s);
  s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)), _mm256_loadu_ps(xb + 16), s);
  s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8))), _mm256_loadu_ps(xb + 24), s);
  return s;
}

// 16 signed bytes (the low or high half of v, elements 0..15 or 16..31) against 16 floats.
TL_AVX2 TL_INLINE __m256 i8x16_dot(__m128i a, const float* xb) {
  const __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(a)), _mm256_loadu_ps(xb));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(a, 8))), _mm256_loadu_ps(xb + 8), s);
}

// Byte j of the result is 0xFF where bit j of `bits` is set, else 0.
TL_AVX2 TL_INLINE __m256i bits_to_bytes(uint32_t bits) {
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));  // all bits but bit (j % 8)
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

// The 32 signed 5-bit values (q - 16) of a Q5_0 block as bytes, element j in byte j.
TL_AVX2 TL_INLINE __m256i q5_0_values(const uint8_t* p) {
  uint32_t qh;
  std::memcpy(&qh, p + 2, 4);
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 6));
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
  // nibble - 16 is the nibble with 0xF0 set (as int8); with the high bit set it is the nibble itself.
  return _mm256_or_si256(nib, _mm256_andnot_si256(bits_to_bytes(qh), _mm256_set1_epi8(static_cast<char>(0xF0))));
}

// Q5_0: sum_b d_b * sum_j (q_j - 16) x_j, the signed values built in registers.
TL_AVX2 float dot_q5_0_avx2(const uint8_t* w, const float* x, const float*, int64_t k) {
  const int64_t nb = k / 32;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const uint8_t* p0 = w + b * 22;
    const uint8_t* p1 = p0 + 22;
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(half_avx2(p0)), i8x32_dot(q5_0_values(p0), x + b * 32), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(half_avx2(p1)), i8x32_dot(q5_0_values(p1), x + b * 32 + 32), acc1);
  }
  for (; b < nb; ++b) {
    const uint8_t* p = w + b * 22;
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(half_avx2(p)), i8x32_dot(q5_0_values(p), x + b * 32), acc0);
  }
  return hsum256(_mm256_add_ps(acc0, acc1));
}

// The 8 six-bit scales (bytes 0..7) and 8 mins (bytes 8..15) of a Q4_K/Q5_K super-block (as
// k_scale_min decodes them, four at a time).
TL_INLINE void k_scales_mins(const uint8_t* s, uint32_t out[4]) {
  constexpr uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
  uint32_t u[3];
  std::memcpy(u, s, 12);
  out[0] = u[0] & kmask1;                                      // scales 0..3
  out[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);    // scales 4..7
  out[2] = u[1] & kmask1;                                      // mins 0..3
  out[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);  // mins 4..7
}

// Q4_K/Q5_K: sum over super-blocks of sum_j d sc_j (q . x)_j - dmin mn_j sum(x_j), the 32-element
// sums sum(x_j) taken from xsum.
template <bool kFive>
TL_AVX2 TL_INLINE float dot_k45_avx2(const uint8_t* w, const float* x, const float* xsum, int64_t k) {
  constexpr int64_t kBytes = kFive ? 176 : 144;
  const int64_t nb = k / 256;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), macc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = w + i * kBytes;
    uint32_t sm[4];
    k_scales_mins(p + 4, sm);
    const __m128i smv = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sm));
    const __m256 sc = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(smv)), _mm256_set1_ps(half_avx2(p)));
    const __m256 mn = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(smv, 8))),
                                    _mm256_set1_ps(half_avx2(p + 2)));
    macc = _mm256_fmadd_ps(mn, _mm256_loadu_ps(xsum + i * 8), macc);
    alignas(32) float scf[8];
    _mm256_store_ps(scf, sc);
    const uint8_t* qs = p + (kFive ? 48 : 16);
    const float* xb = x + i * 256;
    __m256i qh = kFive ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)) : _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      __m256i lo, hi;
      avx2::unpack_k45_chunk<kFive>(qs, c, qh, lo, hi);
      acc0 = _mm256_fmadd_ps(_mm256_set1_ps(scf[2 * c]), u8x32_dot(lo, xb + 64 * c), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_set1_ps(scf[2 * c + 1]), u8x32_dot(hi, xb + 64 * c + 32), acc1);
    }
  }
  return hsum256(_mm256_add_ps(acc0, acc1)) - hsum256(macc);
}

TL_AVX2 float dot_q4_k_avx2(const uint8_t* w, const float* x, const float* xsum, int64_t k) {
  return dot_k45_avx2<false>(w, x, xsum, k);
}
TL_AVX2 float dot_q5_k_avx2(const uint8_t* w, const float* x, const float* xsum, int64_t k) {
  return dot_k45_avx2<true>(w, x, xsum, k);
}

// Q6_K: sum over super-blocks of d * sum_g sc_g * sum_j (q_j - 32) x_j over the 16 groups of 16.
TL_AVX2 float dot_q6_k_avx2(const uint8_t* w, const float* x, const float*, int64_t k) {
  const int64_t nb = k / 256;
  const __m256i off = _mm256_set1_epi8(32);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = w + i * 210;
    const __m256 d = _mm256_set1_ps(half_avx2(p + 208));
    const __m128i scb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192));
    alignas(32) float scf[16];
    _mm256_store_ps(scf, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(scb)), d));
    _mm256_store_ps(scf + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(scb, 8))), d));
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      avx2::unpack_q6_k_half(p, h, q);  // minus 32 below
      const float* xb = x + i * 256 + h * 128;
      const float* s = scf + 8 * h;
      for (int c = 0; c < 4; ++c) {
        const __m256i v = _mm256_sub_epi8(q[c], off);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(s[2 * c]), i8x16_dot(_mm256_castsi256_si128(v), xb + 32 * c), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(s[2 * c + 1]),
                               i8x16_dot(_mm256_extracti128_si256(v, 1), xb + 32 * c + 16), acc1);
      }
    }
  }
  return hsum256(_mm256_add_ps(acc0, acc1));
}

TL_AVX2 float dot_f16_avx2(const uint8_t* w, const float* x, const float*, int64_t k) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(w);
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))), _mm256_loadu_ps(x + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i + 8))), _mm256_loadu_ps(x + i + 8), s1);
  }
  float r = hsum256(_mm256_add_ps(s0, s1));
  for (; i < k; ++i) r += _cvtsh_ss(h[i]) * x[i];
  return r;
}

TL_AVX2 float dot_bf16_avx2(const uint8_t* w, const float* x, const float*, int64_t k) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(w);
  __m256 s0 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    __m256i v = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))), 16);
    s0 = _mm256_fmadd_ps(_mm256_castsi256_ps(v), _mm256_loadu_ps(x + i), s0);
  }
  float r = hsum256(s0);
  for (; i < k; ++i) r += bf16_to_f32(h[i]) * x[i];
  return r;
}

TL_AVX2 void dequantize_q4_1_avx2(const uint8_t* src, int64_t n, float* dst) {
  const __m128i mask = _mm_set1_epi8(0x0F);
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* p = src + b * 20;
    const __m256 d = _mm256_set1_ps(half_avx2(p)), m = _mm256_set1_ps(half_avx2(p + 2));
    __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4));
    __m128i lo = _mm_and_si128(q, mask), hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
    float* y = dst + b * 32;
    _mm256_storeu_ps(y, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), d, m));
    _mm256_storeu_ps(y + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))), d, m));
    _mm256_storeu_ps(y + 16, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), d, m));
    _mm256_storeu_ps(y + 24, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))), d, m));
  }
}

TL_AVX2 void dequantize_q8_0_avx2(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* p = src + b * 34;
    const __m256 d = _mm256_set1_ps(half_avx2(p));
    const __m128i* q = reinterpret_cast<const __m128i*>(p + 2);
    __m128i a = _mm_loadu_si128(q), c = _mm_loadu_si128(q + 1);
    float* y = dst + b * 32;
    _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(a)), d));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(a, 8))), d));
    _mm256_storeu_ps(y + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c)), d));
    _mm256_storeu_ps(y + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(c, 8))), d));
  }
}

// C[m, n] = sum_k A[m, k] * B[n, k] with 4 x 3 register tiles (then 4 x 2, then dots); A rows lda apart, B rows ldb.
TL_AVX2 void gemm_nt_avx2(const float* a, int64_t lda, int64_t m_rows, const float* b, int64_t ldb,
                          int64_t n_rows, int64_t k, float* c, int64_t ldc) {
  const int64_t k8 = k & ~int64_t{7};
  int64_t m = 0;
  for (; m + 4 <= m_rows; m += 4) {
    const float* a0 = a + m * lda;
    const float* a1 = a0 + lda;
    const float* a2 = a1 + lda;
    const float* a3 = a2 + lda;
    int64_t n = 0;
    for (; n + 3 <= n_rows; n += 3) {
      const float* b0 = b + n * ldb;
      const float* b1 = b0 + ldb;
      const float* b2 = b1 + ldb;
      __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c02 = _mm256_setzero_ps();
      __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps(), c12 = _mm256_setzero_ps();
      __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(), c22 = _mm256_setzero_ps();
      __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c32 = _mm256_setzero_ps();
      for (int64_t i = 0; i < k8; i += 8) {
        const __m256 vb0 = _mm256_loadu_ps(b0 + i), vb1 = _mm256_loadu_ps(b1 + i), vb2 = _mm256_loadu_ps(b2 + i);
        __m256 va = _mm256_loadu_ps(a0 + i);
        c00 = _mm256_fmadd_ps(va, vb0, c00);
        c01 = _mm256_fmadd_ps(va, vb1, c01);
        c02 = _mm256_fmadd_ps(va, vb2, c02);
        va = _mm256_loadu_ps(a1 + i);
        c10 = _mm256_fmadd_ps(va, vb0, c10);
        c11 = _mm256_fmadd_ps(va, vb1, c11);
        c12 = _mm256_fmadd_ps(va, vb2, c12);
        va = _mm256_loadu_ps(a2 + i);
        c20 = _mm256_fmadd_ps(va, vb0, c20);
        c21 = _mm256_fmadd_ps(va, vb1, c21);
        c22 = _mm256_fmadd_ps(va, vb2, c22);
        va = _mm256_loadu_ps(a3 + i);
        c30 = _mm256_fmadd_ps(va, vb0, c30);
        c31 = _mm256_fmadd_ps(va, vb1, c31);
        c32 = _mm256_fmadd_ps(va, vb2, c32);
      }
      alignas(32) float r[16];  // r[0..11]: the 12 sums, each hsum256's (r[12..15] repeat r[8..11])
      const __m256 first[8] = {c00, c01, c02, c10, c11, c12, c20, c21};
      const __m256 rest[8] = {c22, c30, c31, c32, c22, c30, c31, c32};
      _mm256_store_ps(r, hsum256_x8(first));
      _mm256_store_ps(r + 8, hsum256_x8(rest));
      const float* ar[4] = {a0, a1, a2, a3};
      const float* br[3] = {b0, b1, b2};
      for (int64_t i = k8; i < k; ++i)
        for (int mi = 0; mi < 4; ++mi)
          for (int ni = 0; ni < 3; ++ni) r[mi * 3 + ni] += ar[mi][i] * br[ni][i];
      for (int mi = 0; mi < 4; ++mi)
        for (int ni = 0; ni < 3; ++ni) c[(m + mi) * ldc + n + ni] = r[mi * 3 + ni];
    }
    for (; n + 2 <= n_rows; n += 2) {
      const float* b0 = b + n * ldb;
      const float* b1 = b0 + ldb;
      __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
      __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
      __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
      __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
      for (int64_t i = 0; i < k8; i += 8) {
        __m256 vb0 = _mm256_loadu_ps(b0 + i), vb1 = _mm256_loadu_ps(b1 + i);
        __m256 va = _mm256_loadu_ps(a0 + i);
        c00 = _mm256_fmadd_ps(va, vb0, c00);
        c01 = _mm256_fmadd_ps(va, vb1, c01);
        va = _mm256_loadu_ps(a1 + i);
        c10 = _mm256_fmadd_ps(va, vb0, c10);
        c11 = _mm256_fmadd_ps(va, vb1, c11);
        va = _mm256_loadu_ps(a2 + i);
        c20 = _mm256_fmadd_ps(va, vb0, c20);
        c21 = _mm256_fmadd_ps(va, vb1, c21);
        va = _mm256_loadu_ps(a3 + i);
        c30 = _mm256_fmadd_ps(va, vb0, c30);
        c31 = _mm256_fmadd_ps(va, vb1, c31);
      }
      alignas(32) float r[8];
      const __m256 sums[8] = {c00, c01, c10, c11, c20, c21, c30, c31};
      _mm256_store_ps(r, hsum256_x8(sums));
      for (int64_t i = k8; i < k; ++i) {
        r[0] += a0[i] * b0[i]; r[1] += a0[i] * b1[i];
        r[2] += a1[i] * b0[i]; r[3] += a1[i] * b1[i];
        r[4] += a2[i] * b0[i]; r[5] += a2[i] * b1[i];
        r[6] += a3[i] * b0[i]; r[7] += a3[i] * b1[i];
      }
      c[m * ldc + n] = r[0]; c[m * ldc + n + 1] = r[1];
      c[(m + 1) * ldc + n] = r[2]; c[(m + 1) * ldc + n + 1] = r[3];
      c[(m + 2) * ldc + n] = r[4]; c[(m + 2) * ldc + n + 1] = r[5];
      c[(m + 3) * ldc + n] = r[6]; c[(m + 3) * ldc + n + 1] = r[7];
    }
    for (; n < n_rows; ++n)
      for (int64_t mm = m; mm < m + 4; ++mm) c[mm * ldc + n] = dot_f32(a + mm * lda, b + n * ldb, k);
  }
  for (; m < m_rows; ++m)
    for (int64_t n = 0; n < n_rows; ++n) c[m * ldc + n] = dot_f32(a + m * lda, b + n * ldb, k);
}
#endif  // __x86_64__

void gemm_nt_portable(const float* a, int64_t lda, int64_t m_rows, const float* b, int64_t ldb,
                      int64_t n_rows, int64_t k, float* c, int64_t ldc) {
  for (int64_t m = 0; m < m_rows; ++m)
    for (int64_t n = 0; n < n_rows; ++n) c[m * ldc + n] = dot_inline(a + m * lda, b + n * ldb, k);
}

// out[m * ldo + n] = dot(weight row n, row m of x) for nw weight rows (wrow bytes apart) and
// rows <= kRowGroup rows of x (stride ldx, block sums xs block-major), bitwise the one-row dot of each.
using RowsDotFn = void (*)(const uint8_t* w, size_t wrow, int64_t nw, const float* x, int64_t ldx,
                           const float* xs, int64_t k, int64_t rows, float* out, int64_t ldo);

struct WeightKernels {
  RowDotFn dot = nullptr;
  DequantRowFn dequantize = nullptr;
  RowsDotFn dot_rows = nullptr;  // only where written (x86-64 AVX2 or AVX-512VL: Q4_0, Q4_1, Q8_0)
};

template <DType T>
WeightKernels kernels_for() {
  WeightKernels k{&dot_row_portable<T>, &dequantize_row_portable<T>};
#if defined(__x86_64__)
  if (cpu_has_avx2()) {
    k.dot = &dot_row_avx2_generic<T>;
    k.dequantize = &dequantize_row_avx2<T>;
    if constexpr (T == DType::Q4_0) {
      k.dot = &dot_q4_0_avx2;
      k.dot_rows = cpu_has_avx512vl() ? &dot_rows_avx512<0> : &dot_rows_avx2<0>;
    }
    if constexpr (T == DType::Q5_0) k.dot = &dot_q5_0_avx2;
    if constexpr (T == DType::Q4_K) k.dot = &dot_q4_k_avx2;
    if constexpr (T == DType::Q5_K) k.dot = &dot_q5_k_avx2;
    if constexpr (T == DType::Q6_K) k.dot = &dot_q6_k_avx2;
    if constexpr (T == DType::Q4_1) {
      k.dot = &dot_q4_1_avx2;
      k.dot_rows = cpu_has_avx512vl() ? &dot_rows_avx512<1> : &dot_rows_avx2<1>;
      k.dequantize = &dequantize_q4_1_avx2;
    }
    if constexpr (T == DType::Q8_0) {
      k.dot = &dot_q8_0_avx2;
      k.dot_rows = cpu_has_avx512vl() ? &dot_rows_avx512<2> : &dot_rows_avx2<2>;
      k.dequantize = &dequantize_q8_0_avx2;
    }
    if constexpr (T == DType::F16) k.dot = &dot_f16_avx2;
    if constexpr (T == DType::BF16) k.dot = &dot_bf16_avx2;
  }
#endif
  return k;
}

WeightKernels weight_kernels(DType t) {
  switch (t) {
    case DType::F32: return kernels_for<DType::F32>();
    case DType::F16: return kernels_for<DType::F16>();
    case DType::BF16: return kernels_for<DType::BF16>();
    case DType::Q4_0: return kernels_for<DType::Q4_0>();
    case DType::Q4_1: return kernels_for<DType::Q4_1>();
    case DType::Q5_0: return kernels_for<DType::Q5_0>();
    case DType::Q5_1: return kernels_for<DType::Q5_1>();
    case DType::Q8_0: return kernels_for<DType::Q8_0>();
    case DType::Q4_K: return kernels_for<DType::Q4_K>();
    case DType::Q5_K: return kernels_for<DType::Q5_K>();
    case DType::Q6_K: return kernels_for<DType::Q6_K>();
    default: kernel_fail(std::string("linear: weights of dtype ") + dtype_name(t) + " are not supported");
  }
}

void gemm_nt(const float* a, int64_t lda, int64_t m_rows, const float* b, int64_t ldb,
             int64_t n_rows, int64_t k, float* c, int64_t ldc) {
#if defined(__x86_64__)
  if (cpu_has_avx2()) return gemm_nt_avx2(a, lda, m_rows, b, ldb, n_rows, k, c, ldc);
#endif
  gemm_nt_portable(a, lda, m_rows, b, ldb, n_rows, k, c, ldc);
}

// Weight rows dequantized together in the M > 1 path (tile = kTileRows x K floats per thread).
constexpr int64_t kTileRows = 24;  // a multiple of the 3-row register tile
// Rows of x multiplied against one tile at a time (keeps those x rows in L1/L2).
constexpr int64_t kXRowsPerPass = 64;
// Up to this many rows of x take the matvec path with a several-row kernel (weights streamed once,
// each block unpacked once) rather than dequantizing tiles for a GEMM.
constexpr int64_t kSmallBatchRows = 8;

}  // namespace

float quant_row_dot(DType t, bool simd, const void* w, const float* x, int64_t k) {
  if (k % block_elems(t) != 0) kernel_fail("quant_row_dot: K not a multiple of the block");
  std::vector<float> xsum(static_cast<size_t>((k + 31) / 32));
  for (int64_t b = 0; b < k / 32; ++b) {
    float s = 0.0f;
    for (int j = 0; j < 32; ++j) s += x[b * 32 + j];
    xsum[static_cast<size_t>(b)] = s;
  }
  WeightKernels wk = weight_kernels(t);
  if (!simd) {
    switch (t) {
#define TL_PORTABLE_DOT(T) \
  case DType::T: wk.dot = &dot_row_portable<DType::T>; break;
      TL_PORTABLE_DOT(F32) TL_PORTABLE_DOT(F16) TL_PORTABLE_DOT(BF16) TL_PORTABLE_DOT(Q4_0)
      TL_PORTABLE_DOT(Q4_1) TL_PORTABLE_DOT(Q5_0) TL_PORTABLE_DOT(Q5_1) TL_PORTABLE_DOT(Q8_0)
      TL_PORTABLE_DOT(Q4_K) TL_PORTABLE_DOT(Q5_K) TL_PORTABLE_DOT(Q6_K)
#undef TL_PORTABLE_DOT
      default: break;
    }
  }
  return wk.dot(static_cast<const uint8_t*>(w), x, xsum.data(), k);
}

void dequantize_row(DType t, const void* src, int64_t n, float* dst) {
  if (n % block_elems(t) != 0)
    kernel_fail(std::string("dequantize: row length not a multiple of the ") + dtype_name(t) + " block");
  weight_kernels(t).dequantize(static_cast<const uint8_t*>(src), n, dst);
}

void gemm_nt_f32(const float* a, int64_t lda, int64_t m_rows, const float* b, int64_t ldb,
                 int64_t n_rows, int64_t k, float* c, int64_t ldc) {
  gemm_nt(a, lda, m_rows, b, ldb, n_rows, k, c, ldc);
}

namespace {

// The shape and dtype rules of linear (and linear_q8_activations); returns M, K, N.
void check_linear(const View& x, const View& w, const View& out, int64_t* M, int64_t* K, int64_t* N) {
  if (x.dtype != DType::F32 || out.dtype != DType::F32)
    kernel_fail("linear: x and out must be f32");
  if (x.ndim != 2 || w.ndim != 2 || out.ndim != 2) kernel_fail("linear: expected 2-D operands");
  *M = x.shape[0];
  *K = x.shape[1];
  *N = w.shape[0];
  if (w.shape[1] != *K || out.shape[0] != *M || out.shape[1] != *N)
    kernel_fail("linear: shape mismatch");
  if (*K % block_elems(w.dtype) != 0)
    kernel_fail(std::string("linear: K=") + std::to_string(*K) + " is not a multiple of the " +
                dtype_name(w.dtype) + " block size");
}

// Splits N weight rows into chunks of whole 4-row groups (the last group may be short), at least
// ~32 KiB of weights per chunk so that small matrices don't pay for the dispatch.
template <class F>
void for_row_groups(ThreadPool& pool, int64_t N, size_t wrow, F&& body) {
  const int64_t groups = (N + 3) / 4;
  const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(32768 / std::max<size_t>(4 * wrow, 1)));
  pool.parallel_for(groups, grain, [&](int64_t g0, int64_t g1) { body(4 * g0, std::min(N, 4 * g1)); });
}

}  // namespace

void CpuKernels::linear_q8_activations(const View& x, const View& w, const View& out) {
  int64_t M, K, N;
  check_linear(x, w, out, &M, &K, &N);
  if (M == 0 || N == 0 || !has_q8_matvec(w.dtype)) return linear(x, w, out);
  thread_local Q8Activations act;
  quantize_activations_q8(static_cast<const float*>(x.data), M, K, act, &pool());
  q8_matmul(pool(), w.dtype, static_cast<const uint8_t*>(w.data), row_bytes(w.dtype, K), N, act,
            static_cast<float*>(out.data));
}

void CpuKernels::linear(const View& x, const View& w, const View& out) {
  int64_t M, K, N;
  check_linear(x, w, out, &M, &K, &N);
  if (M == 0 || N == 0) return;
  const WeightKernels wk = weight_kernels(w.dtype);
  const uint8_t* wdata = static_cast<const uint8_t*>(w.data);
  const size_t wrow = row_bytes(w.dtype, K);
  const float* xd = static_cast<const float*>(x.data);
  float* od = static_cast<float*>(out.data);

  if (M <= kSmallBatchRows) {
    // M == 1 (decode), and a few rows (a batched decode step of several sequences, tl serve
    // --parallel): the weights stream once, and each row of the result is bitwise what M == 1
    // gives for that row alone (the several-row kernels where written, kRowGroup rows of x at a
    // time, else one dot per row), so a batched step chooses exactly the tokens of the sequences
    // decoded one by one.
    // Block sums: row-major (row m's at xsum + m * nxs) for the one-row dots, block-major in
    // groups of kRowGroup rows (xsum[(g * nxs + b) * kRowGroup + m % kRowGroup]) for dot_rows.
    const bool rows_kernel = M > 1 && wk.dot_rows != nullptr;
    const int64_t nxs = (K + 31) / 32, groups = (M + kRowGroup - 1) / kRowGroup;
    thread_local std::vector<float> xsum_buf;
    xsum_buf.assign(static_cast<size_t>(rows_kernel ? groups * nxs * kRowGroup : M * nxs), 0.0f);
    float* xsum = xsum_buf.data();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t b = 0; b < K / 32; ++b) {
        float s = 0.0f;
        for (int j = 0; j < 32; ++j) s += xd[m * K + b * 32 + j];
        xsum[rows_kernel ? ((m / kRowGroup) * nxs + b) * kRowGroup + m % kRowGroup : m * nxs + b] = s;
      }
    // One row at a time: the weights stream through memory in order, which the hardware
    // prefetchers follow best (kernels reading 2 or 4 rows at once measured 15-40 % slower per
    // token once the weights come from DRAM rather than cache).
    // Rows are contiguous, so prefetching each row's bytes kMatvecPrefetchBytes ahead covers the stream.
    // The several-row kernels are bound by their multiply-adds, not by the weight stream: they
    // take two adjacent rows at a time and leave the stream to the hardware prefetchers (the
    // prefetches measured 5-7 % of an 8-row step, stalled on full fill buffers).
    const size_t total = static_cast<size_t>(N) * wrow;
    for_row_groups(pool(), N, wrow, [&](int64_t n0, int64_t n1) {
      const int64_t step = rows_kernel ? 2 : 1;
      for (int64_t n = n0; n < n1; n += step) {
        const int64_t nw = std::min(step, n1 - n);
        const size_t at = static_cast<size_t>(n) * wrow, ahead = at + kMatvecPrefetchBytes;
        if (!rows_kernel && ahead < total) prefetch_bytes(wdata + ahead, std::min(wrow, total - ahead));
        if (M == 1)
          od[n] = wk.dot(wdata + at, xd, xsum, K);
        else if (rows_kernel)
          for (int64_t g = 0; g < groups; ++g) {
            const int64_t m0 = g * kRowGroup;
            wk.dot_rows(wdata + at, wrow, nw, xd + m0 * K, K, xsum + g * nxs * kRowGroup, K,
                        std::min(kRowGroup, M - m0), od + m0 * N + n, N);
          }
        else
          for (int64_t m = 0; m < M; ++m) od[m * N + n] = wk.dot(wdata + at, xd + m * K, xsum + m * nxs, K);
      }
    });
    return;
  }

  if (w.dtype == DType::F32) {
    const float* wf = reinterpret_cast<const float*>(wdata);
    int64_t tiles = (N + kTileRows - 1) / kTileRows;
    pool().parallel_for(tiles, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t m0 = 0; m0 < M; m0 += kXRowsPerPass) {
        int64_t mr = std::min(kXRowsPerPass, M - m0);
        for (int64_t t = t0; t < t1; ++t) {
          int64_t n0 = t * kTileRows, nr = std::min(kTileRows, N - n0);
          gemm_nt(xd + m0 * K, K, mr, wf + n0 * K, K, nr, K, od + m0 * N + n0, N);
        }
      }
    });
    return;
  }

  int64_t tiles = (N + kTileRows - 1) / kTileRows;
  pool().parallel_for(tiles, 1, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> tile;
    tile.resize(static_cast<size_t>(kTileRows * K));
    for (int64_t t = t0; t < t1; ++t) {
      int64_t n0 = t * kTileRows, nr = std::min(kTileRows, N - n0);
      for (int64_t r = 0; r < nr; ++r) wk.dequantize(wdata + (n0 + r) * wrow, K, tile.data() + r * K);
      gemm_nt(xd, K, M, tile.data(), K, nr, K, od + n0, N);
    }
  });
}

void CpuKernels::expert_linear(const View& x, const View& w, const View& ids, int64_t experts,
                               const View& out) {
  if (x.dtype != DType::F32 || out.dtype != DType::F32) kernel_fail("expert_linear: x and out must be f32");
  if (x.ndim != 3 || w.ndim != 2 || ids.ndim != 2 || out.ndim != 3) kernel_fail("expert_linear: bad ranks");
  if (ids.dtype != DType::I32 && ids.dtype != DType::I64) kernel_fail("expert_linear: ids must be i32 or i64");
  const int64_t T = ids.shape[0], k = ids.shape[1], X = x.shape[1], K = x.shape[2];
  if (experts <= 0 || w.shape[0] % experts != 0 || w.shape[1] != K || x.shape[0] != T ||
      (X != 1 && X != k) || out.shape[0] != T || out.shape[1] != k || out.shape[2] != w.shape[0] / experts)
    kernel_fail("expert_linear: shape mismatch");
  const int64_t N = w.shape[0] / experts, pairs = T * k;
  if (pairs == 0 || N == 0) return;
  const size_t wrow = row_bytes(w.dtype, K);
  const float* xd = static_cast<const float*>(x.data);
  float* od = static_cast<float*>(out.data);
  auto x_row = [&](int64_t p) { return xd + ((p / k) * X + (X == 1 ? 0 : p % k)) * K; };
  auto id_at = [&](int64_t p) -> int64_t {
    return ids.dtype == DType::I32 ? static_cast<const int32_t*>(ids.data)[p] : static_cast<const int64_t*>(ids.data)[p];
  };
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t e = id_at(p);
    if (e < 0 || e >= experts)
      kernel_fail("expert_linear: expert id " + std::to_string(e) + " is out of range for " +
                  std::to_string(experts) + " experts");
  }
  if (T == 1) {
    // One token (decode): the rows of all k experts in one parallel loop (one dispatch, not k),
    // each row's dot product exactly as linear's matrix-vector path computes it.
    const WeightKernels wk = weight_kernels(w.dtype);
    const uint8_t* wdata = static_cast<const uint8_t*>(w.data);
    const int64_t nb = (K + 31) / 32;
    // (the pool's workers read the block sums through this pointer: a thread_local named inside
    // the lambda would be each worker's own, empty vector)
    thread_local std::vector<float> xsum_buf;
    xsum_buf.assign(static_cast<size_t>(X * nb), 0.0f);
    const float* xsum = xsum_buf.data();
    for (int64_t r = 0; r < X; ++r)
      for (int64_t b = 0; b < K / 32; ++b) {
        float acc = 0.0f;
        for (int j = 0; j < 32; ++j) acc += xd[r * K + b * 32 + j];
        xsum_buf[static_cast<size_t>(r * nb + b)] = acc;
      }
    const int64_t groups = (N + 3) / 4;
    const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(32768 / std::max<size_t>(4 * wrow, 1)));
    pool().parallel_for(k * groups, grain, [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t p = g / groups, n0 = (g % groups) * 4, n1 = std::min(N, n0 + 4);
        const uint8_t* base = wdata + static_cast<size_t>(id_at(p) * N) * wrow;
        const float* xs = xsum + (X == 1 ? 0 : p) * nb;
        for (int64_t n = n0; n < n1; ++n) od[p * N + n] = wk.dot(base + static_cast<size_t>(n) * wrow, x_row(p), xs, K);
      }
    });
    return;
  }
  // The pairs (token, slot) of each expert, in order: expert e's rows of x go through one linear.
  thread_local std::vector<int64_t> order, start, next;
  order.resize(static_cast<size_t>(pairs));
  start.assign(static_cast<size_t>(experts + 1), 0);
  for (int64_t p = 0; p < pairs; ++p) ++start[static_cast<size_t>(id_at(p) + 1)];
  for (int64_t e = 0; e < experts; ++e) start[static_cast<size_t>(e + 1)] += start[static_cast<size_t>(e)];
  next.assign(start.begin(), start.end() - 1);
  for (int64_t p = 0; p < pairs; ++p) order[static_cast<size_t>(next[static_cast<size_t>(id_at(p))]++)] = p;
  thread_local std::vector<float> xs, ys;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t b = start[static_cast<size_t>(e)], m = start[static_cast<size_t>(e + 1)] - b;
    if (m == 0) continue;
    View we = w;
    we.data = static_cast<uint8_t*>(w.data) + static_cast<size_t>(e * N) * wrow;
    we.shape[0] = N;
    View xv{}, ov{};
    xv.dtype = ov.dtype = DType::F32;
    xv.ndim = ov.ndim = 2;
    xv.shape[0] = ov.shape[0] = m;
    xv.shape[1] = K;
    ov.shape[1] = N;
    xv.strides[0] = K;
    ov.strides[0] = N;
    xv.strides[1] = ov.strides[1] = 1;
    if (m == 1) {  // read x's row and write out's row in place
      const int64_t p = order[static_cast<size_t>(b)];
      xv.data = const_cast<float*>(x_row(p));
      ov.data = od + p * N;
      linear(xv, we, ov);
      continue;
    }
    xs.resize(static_cast<size_t>(m * K));
    ys.resize(static_cast<size_t>(m * N));
    for (int64_t i = 0; i < m; ++i)
      std::copy_n(x_row(order[static_cast<size_t>(b + i)]), K, xs.data() + i * K);
    xv.data = xs.data();
    ov.data = ys.data();
    linear(xv, we, ov);
    for (int64_t i = 0; i < m; ++i)
      std::copy_n(ys.data() + i * N, N, od + order[static_cast<size_t>(b + i)] * N);
  }
}

}  // namespace tl::cpu
