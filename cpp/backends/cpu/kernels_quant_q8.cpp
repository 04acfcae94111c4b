// linear with 8-bit activations: the opt-in fast path, as llama.cpp computes its quantized
// matmuls. Every row of x is quantized once per call to blocks of 32 int8
// with an f32 scale d = max|x_b| / 127 (round to nearest even), and every weight block's dot
// product is an integer one (AVX2: maddubs + madd), scaled by d_w * d_x. Only Q4_0, Q4_1 and
// Q8_0 weights have this path; linear uses the exact one for every other dtype.
// Invariant: the portable and AVX2 code quantize x to the same integers and sum the same integer
// products per block, so they differ only in f32 summation order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_kernels_impl.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define TL_INLINE inline __attribute__((always_inline))

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

// One weight row (nb blocks) against the quantized x.
template <DType T>
float dot_q8_portable(const uint8_t* w, const Q8Row& a) {
  float acc = 0.0f;
  for (int64_t b = 0; b < a.nb; ++b) {
    const int8_t* xq = a.q + b * kQ8Block;
    int isum = 0;
    if constexpr (T == DType::Q8_0) {
      const uint8_t* p = w + b * 34;
      const int8_t* wq = reinterpret_cast<const int8_t*>(p + 2);
      for (int j = 0; j < 32; ++j) isum += wq[j] * xq[j];
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
#define TL_AVX2 __attribute__((target("avx2,fma,f16c")))

TL_AVX2 TL_INLINE float half_avx2(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

TL_AVX2 TL_INLINE float hsum256(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

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
    if constexpr (T == DType::Q8_0) out[r] = s;
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
  switch (rows) {
    case 4: return dot_q8_avx2<T, 4>(w, stride, a, out);
    case 3: return dot_q8_avx2<T, 3>(w, stride, a, out);
    case 2: return dot_q8_avx2<T, 2>(w, stride, a, out);
    default: return dot_q8_avx2<T, 1>(w, stride, a, out);
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
    default: return nullptr;
  }
}

}  // namespace

bool has_q8_matvec(DType t) { return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q8_0; }

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
  pool.parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t n = 4 * g;
      const int cnt = static_cast<int>(std::min<int64_t>(4, N - n));
      for (int64_t i = 0; i < a.m; ++i) {
        const Q8Row row{a.q.data() + i * a.nb * kQ8Block, a.d.data() + i * a.nb, a.dsum.data() + i * a.nb, a.nb};
        if (a.m == 1) {
          // one weight row at a time for a single x row: the weights stream through memory in order
          for (int r = 0; r < cnt; ++r) rows(w + (n + r) * wrow, wrow, 1, row, out + n + r);
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
