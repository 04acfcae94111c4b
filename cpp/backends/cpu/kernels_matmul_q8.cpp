// linear with 8-bit activations: the opt-in fast path, as llama.cpp computes its quantized
// matmuls. Every row of x is quantized once per call to blocks of 32 int8
// with an f32 scale d = max|x_b| / 127 (round to nearest even), and every weight block's dot
// product is an integer one (AVX2: maddubs + madd), scaled by d_w * d_x. Q4_0, Q4_1, Q5_0, Q8_0,
// Q4_K, Q5_K and Q6_K weights have this path (the K-quants' 32-element sub-blocks line up with
// the activation blocks; Q6_K's 16-element scales multiply the integer sums of each half);
// linear uses the exact one for every other dtype.
// Invariant: the portable and AVX2 code quantize x to the same integers and sum the same integer
// products per block, so they differ only in f32 summation order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_kernels_impl.h"
#include "quant_avx2.h"

namespace tl::cpu {
namespace {

constexpr int64_t kQ8Block = 32;

TL_INLINE float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// ---------------------------------------------------------------- portable

void quantize_block_portable(const float* x, int8_t* q, float* d, float* dsum) {
  float amax = 0.0f;
  for (int j = 0; j < kQ8Block; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  int sum = 0;
  for (int j = 0; j < kQ8Block; ++j) {
    int v = static_cast<int>(std::nearbyint(x[j] * id));
    v = std::min(127, std::max(-127, v));
    q[j] = static_cast<int8_t>(v);
    sum += v;
  }
  *d = amax / 127.0f;
  *dsum = *d * static_cast<float>(sum);
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block.
inline void k_scale_min(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// K-quants: sub-block j of super-block i is activation block 8i + j.
// Q4_K/Q5_K: d sc_j d_x isum_j - dmin mn_j dsum_j; Q6_K: d d_x (sc_2j isum_lo + sc_2j+1 isum_hi).
template <DType T>
float dot_q8_kquant_portable(const uint8_t* w, const Q8Row& a) {
  float acc = 0.0f;
  const int64_t nsb = a.nb / 8;
  for (int64_t i = 0; i < nsb; ++i) {
    if constexpr (T == DType::Q6_K) {
      const uint8_t* p = w + i * 210;
      const int8_t* sc = reinterpret_cast<const int8_t*>(p + 192);
      const float d = half_at(p + 208);
      for (int j = 0; j < 8; ++j) {
        const int h = j / 4, c = j % 4;
        const uint8_t* ql = p + 64 * h + 32 * (c % 2);
        const uint8_t* qh = p + 128 + 32 * h;
        const int8_t* xq = a.q + (i * 8 + j) * kQ8Block;
        int isum[2] = {0, 0};
        for (int l = 0; l < 32; ++l) {
          const int lo = c < 2 ? (ql[l] & 0x0F) : (ql[l] >> 4);
          const int q = (lo | (((qh[l] >> (2 * c)) & 3) << 4)) - 32;
          isum[l / 16] += q * xq[l];
        }
        acc += d * a.d[i * 8 + j] * static_cast<float>(sc[2 * j] * isum[0] + sc[2 * j + 1] * isum[1]);
      }
    } else {
      constexpr bool kFive = T == DType::Q5_K;
      const uint8_t* p = w + i * (kFive ? 176 : 144);
      const float d = half_at(p), dmin = half_at(p + 2);
      const uint8_t* qs = p + (kFive ? 48 : 16);
      for (int j = 0; j < 8; ++j) {
        int sc, mn;
        k_scale_min(p + 4, j, &sc, &mn);
        const int8_t* xq = a.q + (i * 8 + j) * kQ8Block;
        int isum = 0;
        for (int l = 0; l < 32; ++l) {
          int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F;
          if constexpr (kFive) q |= ((p[16 + l] >> j) & 1) << 4;
          isum += q * xq[l];
        }
        acc += d * static_cast<float>(sc) * a.d[i * 8 + j] * static_cast<float>(isum) -
               dmin * static_cast<float>(mn) * a.dsum[i * 8 + j];
      }
    }
  }
  return acc;
}

// One weight row (nb blocks) against the quantized x.
template <DType T>
float dot_q8_portable(const uint8_t* w, const Q8Row& a) {
  if constexpr (T == DType::Q4_K || T == DType::Q5_K || T == DType::Q6_K) return dot_q8_kquant_portable<T>(w, a);
  float acc = 0.0f;
  for (int64_t b = 0; b < a.nb; ++b) {
    const int8_t* xq = a.q + b * kQ8Block;
    int isum = 0;
    if constexpr (T == DType::Q8_0) {
      const uint8_t* p = w + b * 34;
      const int8_t* wq = reinterpret_cast<const int8_t*>(p + 2);
      for (int j = 0; j < 32; ++j) isum += wq[j] * xq[j];
      acc += half_at(p) * a.d[b] * static_cast<float>(isum);
    } else if constexpr (T == DType::Q5_0) {
      const uint8_t* p = w + b * 22;
      uint32_t qh;
      std::memcpy(&qh, p + 2, 4);
      const uint8_t* qs = p + 6;
      for (int j = 0; j < 16; ++j) {
        const int lo = ((qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4)) - 16;
        const int hi = ((qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4)) - 16;
        isum += lo * xq[j] + hi * xq[j + 16];
      }
      acc += half_at(p) * a.d[b] * static_cast<float>(isum);
    } else {
      const uint8_t* p = w + b * (T == DType::Q4_1 ? 20 : 18);
      const uint8_t* qs = p + (T == DType::Q4_1 ? 4 : 2);
      for (int j = 0; j < 16; ++j) isum += (qs[j] & 0x0F) * xq[j] + (qs[j] >> 4) * xq[j + 16];
      const float dw = half_at(p);
      if constexpr (T == DType::Q4_1)
        acc += dw * a.d[b] * static_cast<float>(isum) + half_at(p + 2) * a.dsum[b];
      else
        acc += dw * (a.d[b] * static_cast<float>(isum) - 8.0f * a.dsum[b]);
    }
  }
  return acc;
}

// ---------------------------------------------------------------- AVX2

#if defined(__x86_64__)
using avx2::half_avx2;
using avx2::hsum256;



TL_AVX2 TL_INLINE __m256i round_clamp127(__m256 v, __m256 scale) {
  const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(v, scale));
  return _mm256_max_epi32(_mm256_set1_epi32(-127), _mm256_min_epi32(_mm256_set1_epi32(127), q));
}

TL_AVX2 void quantize_block_avx2(const float* x, int8_t* q, float* d, float* dsum) {
  const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
  const __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                           _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const float amax = _mm_cvtss_f32(h);
  const __m256 id = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
  // cvtps rounds to nearest even (the default MXCSR mode), like std::nearbyint.
  const __m256i q0 = round_clamp127(v0, id), q1 = round_clamp127(v1, id);
  const __m256i q2 = round_clamp127(v2, id), q3 = round_clamp127(v3, id);
  const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q0, q1), _mm256_add_epi32(q2, q3));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
  // Packing works per 128-bit lane; the dword permute puts the 4-byte groups back in order.
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
  const __m256i ordered = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), ordered);
  *d = amax / 127.0f;
  *dsum = *d * static_cast<float>(_mm_cvtsi128_si32(s4));
}

// 32 unsigned weight values (u8) times 32 int8 activations, summed in pairs and then in fours:
// 8 int32 partial sums.
TL_AVX2 TL_INLINE __m256i dot_u8_i8(__m256i w, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

// The 32 nibbles of a Q4 block as bytes: elements 0..15 (low nibbles), then 16..31 (high).
TL_AVX2 TL_INLINE __m256i nibbles32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), mask), _mm_and_si128(q, mask));
}

// Byte j of the result is 0xFF where bit j of `bits` is set, else 0.
TL_AVX2 TL_INLINE __m256i bits_to_bytes(uint32_t bits) {
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

// The 32 signed values (q - 16) of a Q5_0 block, element j in byte j.
TL_AVX2 TL_INLINE __m256i q5_0_values(const uint8_t* p) {
  uint32_t qh;
  std::memcpy(&qh, p + 2, 4);
  return _mm256_or_si256(nibbles32(p + 6),
                         _mm256_andnot_si256(bits_to_bytes(qh), _mm256_set1_epi8(static_cast<char>(0xF0))));
}

// Signed weight bytes times int8 activations: 8 int32 sums of 4 products each.
TL_AVX2 TL_INLINE __m256i dot_i8_i8(__m256i w, __m256i x) {
  return dot_u8_i8(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
}

// Activation block j of a run of blocks.
TL_AVX2 TL_INLINE __m256i xblock(const int8_t* xq, int j) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + j * kQ8Block));
}

// One K-quant row (a.nb / 8 super-blocks) against the quantized x.
template <DType T>
TL_AVX2 float dot_q8_kquant_avx2(const uint8_t* w, const Q8Row& a) {
  const int64_t nsb = a.nb / 8;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), macc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nsb; ++i) {
    const int8_t* xq = a.q + i * 8 * kQ8Block;
    const float* dx = a.d + i * 8;
    if constexpr (T == DType::Q6_K) {
      const uint8_t* p = w + i * 210;
      const float d = half_avx2(p + 208);
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192));
      const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);  // 16 scales as int16
      alignas(32) int16_t scs[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(scs), sc16);
      const __m256i off = _mm256_set1_epi8(32);
      for (int h = 0; h < 2; ++h) {
        __m256i q[4];
        avx2::unpack_q6_k_half(p, h, q);
        for (int c = 0; c < 4; ++c) {
          const int j = 4 * h + c;
          const __m256i v = _mm256_sub_epi8(q[c], off);
          const __m256i xv = xblock(xq, j);
          // pairs of products (int16), then each 16-element half times its scale, summed in fours
          const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(v), _mm256_sign_epi8(xv, v));
          const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(scs[2 * j + 1]), _mm_set1_epi16(scs[2 * j]));
          const __m256i prod = _mm256_madd_epi16(pairs, scale);
          __m256& acc = (c & 1) ? acc1 : acc0;
          acc = _mm256_fmadd_ps(_mm256_set1_ps(d * dx[j]), _mm256_cvtepi32_ps(prod), acc);
        }
      }
    } else {
      constexpr bool kFive = T == DType::Q5_K;
      const uint8_t* p = w + i * (kFive ? 176 : 144);
      const float d = half_avx2(p), dmin = half_avx2(p + 2);
      alignas(16) uint8_t sc[8], mn[8];
      for (int j = 0; j < 8; ++j) {
        int s, m;
        k_scale_min(p + 4, j, &s, &m);
        sc[j] = static_cast<uint8_t>(s);
        mn[j] = static_cast<uint8_t>(m);
      }
      uint64_t mn64;
      std::memcpy(&mn64, mn, 8);
      const __m256 mnf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(mn64))));
      macc = _mm256_fmadd_ps(_mm256_mul_ps(mnf, _mm256_set1_ps(dmin)), _mm256_loadu_ps(a.dsum + i * 8), macc);
      const uint8_t* qs = p + (kFive ? 48 : 16);
      __m256i qh = kFive ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)) : _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        __m256i lo, hi;
        avx2::unpack_k45_chunk<kFive>(qs, c, qh, lo, hi);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d * static_cast<float>(sc[2 * c]) * dx[2 * c]),
                               _mm256_cvtepi32_ps(dot_u8_i8(lo, xblock(xq, 2 * c))), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d * static_cast<float>(sc[2 * c + 1]) * dx[2 * c + 1]),
                               _mm256_cvtepi32_ps(dot_u8_i8(hi, xblock(xq, 2 * c + 1))), acc1);
      }
    }
  }
  return hsum256(_mm256_add_ps(acc0, acc1)) - hsum256(macc);
}

// R rows (1..4) at w + r * stride.
template <DType T, int R>
TL_AVX2 void dot_q8_avx2(const uint8_t* w, size_t stride, const Q8Row& a, float* out) {
  __m256 acc[R];
  float extra[R];  // Q4_1: sum_b m_b * dsum_b; Q4_0: sum_b d_b * dsum_b
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
    extra[r] = 0.0f;
  }
  for (int64_t b = 0; b < a.nb; ++b) {
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + b * kQ8Block));
    const float dx = a.d[b];
    for (int r = 0; r < R; ++r) {
      if constexpr (T == DType::Q8_0) {
        const uint8_t* p = w + r * stride + b * 34;
        const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
        // |w| * (x with w's sign): unsigned times signed, as maddubs needs.
        const __m256i prod = dot_u8_i8(_mm256_abs_epi8(wq), _mm256_sign_epi8(xq, wq));
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(half_avx2(p) * dx),
                                 _mm256_cvtepi32_ps(prod), acc[r]);
      } else if constexpr (T == DType::Q5_0) {
        const uint8_t* p = w + r * stride + b * 22;
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(half_avx2(p) * dx),
                                 _mm256_cvtepi32_ps(dot_i8_i8(q5_0_values(p), xq)), acc[r]);
      } else {
        const uint8_t* p = w + r * stride + b * (T == DType::Q4_1 ? 20 : 18);
        const __m256i prod = dot_u8_i8(nibbles32(p + (T == DType::Q4_1 ? 4 : 2)), xq);
        const float dw = half_avx2(p);
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx), _mm256_cvtepi32_ps(prod), acc[r]);
        if constexpr (T == DType::Q4_1)
          extra[r] += half_avx2(p + 2) * a.dsum[b];
        else
          extra[r] += dw * a.dsum[b];
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const float s = hsum256(acc[r]);
    if constexpr (T == DType::Q8_0 || T == DType::Q5_0) out[r] = s;
    else if constexpr (T == DType::Q4_1) out[r] = s + extra[r];
    else out[r] = s - 8.0f * extra[r];
  }
}
#endif  // __x86_64__

using QuantizeBlockFn = void (*)(const float* x, int8_t* q, float* d, float* dsum);
// out[r] = row r . x for `rows` (1..4) rows at w + r * stride.
using Q8RowsFn = void (*)(const uint8_t* w, size_t stride, int rows, const Q8Row& a, float* out);

template <DType T>
void rows_portable(const uint8_t* w, size_t stride, int rows, const Q8Row& a, float* out) {
  for (int r = 0; r < rows; ++r) out[r] = dot_q8_portable<T>(w + r * stride, a);
}

#if defined(__x86_64__)
template <DType T>
TL_AVX2 void rows_avx2(const uint8_t* w, size_t stride, int rows, const Q8Row& a, float* out) {
  if constexpr (T == DType::Q4_K || T == DType::Q5_K || T == DType::Q6_K) {
    for (int r = 0; r < rows; ++r) out[r] = dot_q8_kquant_avx2<T>(w + r * stride, a);
  } else {
    switch (rows) {
      case 4: return dot_q8_avx2<T, 4>(w, stride, a, out);
      case 3: return dot_q8_avx2<T, 3>(w, stride, a, out);
      case 2: return dot_q8_avx2<T, 2>(w, stride, a, out);
      default: return dot_q8_avx2<T, 1>(w, stride, a, out);
    }
  }
}
#endif

QuantizeBlockFn quantize_block_fn() {
#if defined(__x86_64__)
  if (cpu_has_avx2()) return &quantize_block_avx2;
#endif
  return &quantize_block_portable;
}

template <DType T>
Q8RowsFn rows_fn_for() {
#if defined(__x86_64__)
  if (cpu_has_avx2()) return &rows_avx2<T>;
#endif
  return &rows_portable<T>;
}

Q8RowsFn rows_fn(DType t) {
  switch (t) {
    case DType::Q4_0: return rows_fn_for<DType::Q4_0>();
    case DType::Q4_1: return rows_fn_for<DType::Q4_1>();
    case DType::Q8_0: return rows_fn_for<DType::Q8_0>();
    case DType::Q5_0: return rows_fn_for<DType::Q5_0>();
    case DType::Q4_K: return rows_fn_for<DType::Q4_K>();
    case DType::Q5_K: return rows_fn_for<DType::Q5_K>();
    case DType::Q6_K: return rows_fn_for<DType::Q6_K>();
    default: return nullptr;
  }
}

}  // namespace

bool has_q8_matvec(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q8_0 || t == DType::Q4_K ||
         t == DType::Q5_K || t == DType::Q6_K;
}

void quantize_activations_q8(const float* x, int64_t m, int64_t k, Q8Activations& out) {
  if (k % kQ8Block != 0) kernel_fail("8-bit activations: K=" + std::to_string(k) + " is not a multiple of 32");
  out.m = m;
  out.nb = k / kQ8Block;
  out.q.resize(static_cast<size_t>(m * k));
  out.d.resize(static_cast<size_t>(m * out.nb));
  out.dsum.resize(static_cast<size_t>(m * out.nb));
  const QuantizeBlockFn quantize = quantize_block_fn();
  for (int64_t b = 0; b < m * out.nb; ++b)
    quantize(x + b * kQ8Block, out.q.data() + b * kQ8Block, out.d.data() + b, out.dsum.data() + b);
}

void q8_matmul(ThreadPool& pool, DType t, const uint8_t* w, size_t wrow, int64_t N, const Q8Activations& a,
               float* out) {
  const Q8RowsFn rows = rows_fn(t);
  if (!rows) kernel_fail(std::string("8-bit activations: no integer dot product for ") + dtype_name(t));
  // Groups of 4 weight rows, each multiplied with every row of x while it is in cache; at least
  // ~32 KiB of weights per chunk so that small matrices skip the dispatch.
  const int64_t groups = (N + 3) / 4;
  const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(32768 / std::max<size_t>(4 * wrow * a.m, 1)));
  const size_t total = static_cast<size_t>(N) * wrow;
  pool.parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t n = 4 * g;
      const int cnt = static_cast<int>(std::min<int64_t>(4, N - n));
      for (int64_t i = 0; i < a.m; ++i) {
        const Q8Row row{a.q.data() + i * a.nb * kQ8Block, a.d.data() + i * a.nb, a.dsum.data() + i * a.nb, a.nb};
        if (a.m == 1) {
          // one weight row at a time for a single x row: the weights stream through memory in
          // order, prefetched kMatvecPrefetchBytes ahead (as in linear's exact path)
          for (int r = 0; r < cnt; ++r) {
            const size_t at = static_cast<size_t>(n + r) * wrow, ahead = at + kMatvecPrefetchBytes;
            if (ahead < total) prefetch_bytes(w + ahead, std::min(wrow, total - ahead));
            rows(w + at, wrow, 1, row, out + n + r);
          }
        } else {
          float o[4];
          rows(w + n * wrow, wrow, cnt, row, o);
          std::copy(o, o + cnt, out + i * N + n);
        }
      }
    }
  });
}

}  // namespace tl::cpu
