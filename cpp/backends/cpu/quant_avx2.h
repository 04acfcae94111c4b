#pragma once
// AVX2 helpers shared by the quantized CPU kernels (kernels_matmul_quant.cpp: f32 activations;
// kernels_matmul_q8.cpp: 8-bit activations). x86-64 only. Every function carries the AVX2 target
// attribute: call them only from code that runs after the run-time AVX2 check, like the kernels.
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>

#define TL_INLINE inline __attribute__((always_inline))
#define TL_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace tl::cpu::avx2 {

TL_AVX2 TL_INLINE float hsum256(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// Lane j: hsum256(v[j]) for j = 0..7, bitwise (the same additions in the same association, two
// vectors at a time: the 128-bit halves, then lanes 0 + 2 and 1 + 3, then those two), in about a
// third of the instructions of eight hsum256.
TL_AVX2 TL_INLINE __m256 hsum256_x8(const __m256 v[8]) {
  __m256 t[4];
  for (int i = 0; i < 4; ++i)
    t[i] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x20),
                         _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x31));
  // t[i]: v[2i]'s four half sums in the low 128 bits, v[2i + 1]'s in the high
  const __m256 u0 = _mm256_add_ps(_mm256_shuffle_ps(t[0], t[1], 0x44), _mm256_shuffle_ps(t[0], t[1], 0xEE));
  const __m256 u1 = _mm256_add_ps(_mm256_shuffle_ps(t[2], t[3], 0x44), _mm256_shuffle_ps(t[2], t[3], 0xEE));
  // hadd: lanes v0 v2 v4 v6 | v1 v3 v5 v7, put in order
  return _mm256_permutevar8x32_ps(_mm256_hadd_ps(u0, u1), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// The f16 stored (unaligned) at p, as a float.
TL_AVX2 TL_INLINE float half_avx2(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Half h (0 or 1) of a Q6_K super-block at p (210 bytes: ql[128], qh[64], scales[16], d): its 128
// 6-bit quants, unbiased (0..63, the -32 not yet applied), as 4 vectors of 32 bytes: element
// l + 32c of the half is the low (c < 2) or high (c >= 2) nibble of ql[l + 32 (c % 2)] with bits
// 2c..2c+1 of qh[l] above it.
TL_AVX2 TL_INLINE void unpack_q6_k_half(const uint8_t* p, int h, __m256i q[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * h));
  const __m256i qb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * h + 32));
  const __m256i hv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * h));
  q[0] = _mm256_or_si256(_mm256_and_si256(qa, m4), _mm256_and_si256(_mm256_slli_epi16(hv, 4), m30));
  q[1] = _mm256_or_si256(_mm256_and_si256(qb, m4), _mm256_and_si256(_mm256_slli_epi16(hv, 2), m30));
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qa, 4), m4), _mm256_and_si256(hv, m30));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 4), m4),
                         _mm256_and_si256(_mm256_srli_epi16(hv, 2), m30));
}

// Chunk c (0..3) of a Q4_K or Q5_K super-block's quants at qs (32 bytes a chunk): `lo` gets its
// elements 64c..64c+31 (low nibbles), `hi` 64c+32..64c+63 (high nibbles), as bytes 0..15 (0..31
// with Q5_K's fifth bit, taken from the low two bits of qh, which the call then shifts on).
template <bool kFive>
TL_AVX2 TL_INLINE void unpack_k45_chunk(const uint8_t* qs, int c, __m256i& qh, __m256i& lo, __m256i& hi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
  lo = _mm256_and_si256(q, m4);
  hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
  if constexpr (kFive) {
    const __m256i bit4 = _mm256_set1_epi8(0x10);
    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4));
    hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4));
    qh = _mm256_srli_epi16(qh, 2);
  }
}

}  // namespace tl::cpu::avx2

#else
#define TL_INLINE inline __attribute__((always_inline))
#endif  // __x86_64__
