// linear with 8-bit activations: the opt-in fast path (--fast), as llama.cpp computes its quantized
// matmuls. Every row of x is quantized once per call to blocks of 32 int8 with an f32 scale
// d = max|x_b| / 127 (round to nearest even), and every weight block's dot product is an integer
// one, scaled in f32. Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q5_K and Q6_K weights have this path (the
// K-quants' 32-element sub-blocks line up with the activation blocks; Q6_K's 16-element scales
// multiply the integer sums of each half); linear uses the exact one for every other dtype.
//
// Invariant: the result for weight row n and x row m is a function of those two rows only, the
// same bits on every path and for any number of x rows. Per block b (of 32; a K-quant's sub-block)
// the integer dot product isum_b is exact, and its float product p_b is fixed (block_product):
//   simple types: p_b = (dw_b * dx_b) * isum_b              [Q4_1: fma(m_b, dsum_b, that)]
//   Q4_K, Q5_K:   p_b = fma(-(dmin * mn_j), dsum_b, ((d * sc_j) * dx_b) * isum_b)
//   Q6_K:         p_b = (d * dx_b) * isum_b                 (isum_b carries the 16-element scales)
// The products are summed 8 blocks at a time in one fixed tree (tree8; blocks past the end count
// 0) and the groups' sums added in order. The vector kernels (kernels_matmul_q8_tile.inc) put the 8
// blocks of a group in the lanes of one vector (one weight row at a time: the weights stream in
// order, as from DRAM they must), or, for 3 to 8 rows of x with AVX-512 VNNI, two weight rows at a
// time with the (x row, weight row) pairs in the lanes and the 8 blocks in 8 vectors added in the
// same tree (with AVX2 alone, one weight row with the x rows in the lanes, the same way: the column
// kernel); either way each weight block is unpacked
// once for all the rows of x, and a batched decode step (tl serve --parallel under --fast) gives
// every row bitwise the one-row product. Longer x (a prompt piece under --fast) goes in groups of 8
// rows, each group the same kernels, so every row of a prompt is bitwise its one-row product too.
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

void quantize_block_portable(const float* x, int8_t* q, float* d, float* dsum, int32_t* qsum) {
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
  *qsum = sum;
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

// One row of the quantized x.
struct Q8Row {
  const int8_t* q;
  const float* d;
  const float* dsum;
  int64_t nb;
};

// The integer dot product of weight block b's 32 values (offsets applied) with x's block b.
template <DType T>
int block_isum(const uint8_t* w, int64_t b, const int8_t* xq) {
  int isum = 0;
  if constexpr (T == DType::Q8_0) {
    const int8_t* wq = reinterpret_cast<const int8_t*>(w + b * 34 + 2);
    for (int j = 0; j < 32; ++j) isum += wq[j] * xq[j];
  } else if constexpr (T == DType::Q5_0) {
    const uint8_t* p = w + b * 22;
    uint32_t qh;
    std::memcpy(&qh, p + 2, 4);
    for (int j = 0; j < 16; ++j) {
      const int lo = ((p[6 + j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4)) - 16;
      const int hi = ((p[6 + j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4)) - 16;
      isum += lo * xq[j] + hi * xq[j + 16];
    }
  } else {
    constexpr int kOff = T == DType::Q4_0 ? 8 : 0;
    const uint8_t* qs = w + b * (T == DType::Q4_1 ? 20 : 18) + (T == DType::Q4_1 ? 4 : 2);
    for (int j = 0; j < 16; ++j) isum += ((qs[j] & 0x0F) - kOff) * xq[j] + ((qs[j] >> 4) - kOff) * xq[j + 16];
  }
  return isum;
}

// The sum of 8 products in hsum256's order (quant_avx2.h): lane i with lane i + 4, then the two
// halves of that, then its two lanes. The vector kernels sum 8 lanes, or 8 vectors lane by lane,
// in this order.
inline float tree8(const float p[8]) {
  return ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
}

// Block b's product: the canonical float steps of the file's invariant.
template <DType T>
float block_product(const uint8_t* w, int64_t b, const Q8Row& a) {
  if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    constexpr bool kFive = T == DType::Q5_K;
    const int64_t i = b / 8;
    const int j = static_cast<int>(b % 8);
    const uint8_t* p = w + i * (kFive ? 176 : 144);
    const float d = half_at(p), dmin = half_at(p + 2);
    const uint8_t* qs = p + (kFive ? 48 : 16);
    int sc, mn;
    k_scale_min(p + 4, j, &sc, &mn);
    const int8_t* xq = a.q + b * kQ8Block;
    int isum = 0;
    for (int l = 0; l < 32; ++l) {
      int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F;
      if constexpr (kFive) q |= ((p[16 + l] >> j) & 1) << 4;
      isum += q * xq[l];
    }
    const float prod = ((d * static_cast<float>(sc)) * a.d[b]) * static_cast<float>(isum);
    return std::fma(-(dmin * static_cast<float>(mn)), a.dsum[b], prod);
  } else if constexpr (T == DType::Q6_K) {
    const int64_t i = b / 8;
    const int j = static_cast<int>(b % 8);
    const uint8_t* p = w + i * 210;
    const int8_t* sc = reinterpret_cast<const int8_t*>(p + 192);
    const int h = j / 4, c = j % 4;
    const uint8_t* ql = p + 64 * h + 32 * (c % 2);
    const uint8_t* qh = p + 128 + 32 * h;
    const int8_t* xq = a.q + b * kQ8Block;
    int half_sum[2] = {0, 0};
    for (int l = 0; l < 32; ++l) {
      const int lo = c < 2 ? (ql[l] & 0x0F) : (ql[l] >> 4);
      const int q = (lo | (((qh[l] >> (2 * c)) & 3) << 4)) - 32;
      half_sum[l / 16] += q * xq[l];
    }
    const int isum = sc[2 * j] * half_sum[0] + sc[2 * j + 1] * half_sum[1];
    return (half_at(p + 208) * a.d[b]) * static_cast<float>(isum);
  } else {
    constexpr size_t kBytes = T == DType::Q8_0 ? 34 : T == DType::Q5_0 ? 22 : T == DType::Q4_1 ? 20 : 18;
    const uint8_t* p = w + b * kBytes;
    const float prod = (half_at(p) * a.d[b]) * static_cast<float>(block_isum<T>(w, b, a.q + b * kQ8Block));
    if constexpr (T == DType::Q4_1) return std::fma(half_at(p + 2), a.dsum[b], prod);
    return prod;
  }
}

// One weight row against one quantized row of x: the blocks' products summed 8 at a time (tree8,
// blocks past the row's end counting 0), the groups' sums added in order.
template <DType T>
float dot_portable(const uint8_t* w, const Q8Row& a) {
  float acc = 0.0f;
  for (int64_t g0 = 0; g0 < a.nb; g0 += 8) {
    float p[8];
    for (int k = 0; k < 8; ++k) p[k] = g0 + k < a.nb ? block_product<T>(w, g0 + k, a) : 0.0f;
    acc += tree8(p);
  }
  return acc;
}

using DotFn = float (*)(const uint8_t* w, const Q8Row& a);

DotFn dot_fn(DType t) {
  switch (t) {
    case DType::Q4_0: return &dot_portable<DType::Q4_0>;
    case DType::Q4_1: return &dot_portable<DType::Q4_1>;
    case DType::Q5_0: return &dot_portable<DType::Q5_0>;
    case DType::Q8_0: return &dot_portable<DType::Q8_0>;
    case DType::Q4_K: return &dot_portable<DType::Q4_K>;
    case DType::Q5_K: return &dot_portable<DType::Q5_K>;
    case DType::Q6_K: return &dot_portable<DType::Q6_K>;
    default: return nullptr;
  }
}

// A group of up to 8 rows of x for the vector kernels. Per row, its blocks' values padded with
// zeros to a whole number of groups of 8 blocks; for the pair kernel, per block the values of
// lane l = x row l (zeros past mg), and those and the rows' bytes laid out twice (xp, lane2_).
struct Q8Group {
  int64_t nb = 0;
  int mg = 0;
  const int8_t* q[8] = {};
  const float* d[8] = {};
  const float* dsum[8] = {};
  const int32_t* qsum[8] = {};
  const float* lane_d = nullptr;       // [nb][8]
  const float* lane_dsum = nullptr;    // [nb][8]
  const int32_t* lane_qsum = nullptr;  // [nb][8]
  // for the pair kernel: per block, for each 4 bytes j of it, those 4 bytes of every row twice
  // side by side; the lane values of each row twice
  const int8_t* xp = nullptr;           // [nb][8][8][2][4]
  const float* lane2_d = nullptr;       // [nb][16]
  const float* lane2_dsum = nullptr;    // [nb][16]
  const int32_t* lane2_qsum = nullptr;  // [nb][16]: -(qsum << the type's offset shift)
  // for the AVX2 column kernel: per block, for each 4 bytes j of it, those 4 bytes of every row
  const int8_t* xc = nullptr;  // [nb][8][8][4]
};
// Groups of at least this many rows of x take the pair kernel for the simple types (AVX-512 VNNI;
// kernels_matmul_q8_tile.inc's pair_simple_columns) or, with AVX2 alone, the column kernel
// (column_simple). SmolLM2's step of Q4_1 products, 1 thread: 3 rows 11.5 ms through the pair
// kernel against 15.9 through row_simple; 2 rows 11.6-12.9 against 11.6. AVX2 (Zen 3), Q4_0: the
// column kernel 17.1 ms for 4 rows against row_simple's 24.5, 13.1 for 2 rows through row_simple.
constexpr int kColumnRows = 3;
// Groups of kLanesMinRows..kLanesRows rows of Q4_0/Q4_1 products take, for each whole chunk of 8
// weight rows, the column kernel's weight-rows-in-the-lanes form (avx2_rows::lanes_nibbles), whose
// passes scale with the rows where the column kernel's cost is that of 8. SmolLM2's step of Q4_1
// products, 1 thread, Zen 3 (bench_kernels_cpu --rows, three alternated rounds): 3 rows 13.1-17.5 ms
// against the column kernel's 23.1-25.5; 5 and 6 rows even (22-25 either way); 7 and 8 rows
// 27-34 against 22-27. Two rows (a batched step of two streams) too: 9.7-9.8 ms against
// row_simple's 14.7-15.7 (then more than 3 or 4 rows cost; 6 alternated rounds on 2026-12-08).
// One row stays with row_simple (11.3 against 11.1 ms, best of 6: the weight stream bounds both).
constexpr int kLanesRows = 4;
constexpr int kLanesMinRows = 2;
// The same for Q8_0 (avx2_rows::lanes_q8_0: SmolLM2's lm_head at 3-8 rows), from 3 rows to 6.
// SmolLM2's step of products, all Q8_0, 1 thread (bench_kernels_cpu --rows 0.15 1 q8_0, best of 4
// alternated rounds, 2026-12-08): 3 rows 16.8 ms against the column kernel's 26.9, 4 rows 21.2
// against 26.6, 5 rows 22.6 against 29.4, 6 rows 24.8 against 27.3; 7 and 8 even (27-30), 2 rows
// even with row_simple (13.8).
constexpr int kLanesRowsQ8 = 6;
constexpr int kLanesMinRowsQ8 = 3;
// out[m * ldo] = the weight row at w times row m of the group, for its mg rows.
using RowFn = void (*)(const uint8_t* w, const Q8Group& g, float* out, int64_t ldo);
// out[m * ldo] and out[m * ldo + 1] = the weight rows at w0 and w1 times row m of the group.
using PairFn = void (*)(const uint8_t* w0, const uint8_t* w1, const Q8Group& g, float* out, int64_t ldo);

// ---------------------------------------------------------------- AVX2 and AVX-512 VNNI

#if defined(__x86_64__)

TL_AVX2 TL_INLINE __m256i round_clamp127(__m256 v, __m256 scale) {
  const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(v, scale));
  return _mm256_max_epi32(_mm256_set1_epi32(-127), _mm256_min_epi32(_mm256_set1_epi32(127), q));
}

TL_AVX2 void quantize_block_avx2(const float* x, int8_t* q, float* d, float* dsum, int32_t* qsum) {
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
  *qsum = _mm_cvtsi128_si32(s4);
  *dsum = *d * static_cast<float>(*qsum);
}

// Byte j of the result is 0xFF where bit j of `bits` is set, else 0.
TL_AVX2 TL_INLINE __m256i bits_to_bytes(uint32_t bits) {
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

namespace avx2_rows {
#define TL_Q8_TARGET TL_AVX2
#define TL_Q8_VNNI 0
#include "kernels_matmul_q8_tile.inc"
#undef TL_Q8_TARGET
#undef TL_Q8_VNNI
}  // namespace avx2_rows

namespace vnni_rows {
#define TL_Q8_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
#define TL_Q8_VNNI 1
#include "kernels_matmul_q8_tile.inc"
#undef TL_Q8_TARGET
#undef TL_Q8_VNNI
}  // namespace vnni_rows

bool cpu_has_avx512vnni() {
  static const bool has = cpu_has_avx512vl() && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
}
#endif  // __x86_64__

using QuantizeBlockFn = void (*)(const float* x, int8_t* q, float* d, float* dsum, int32_t* qsum);

QuantizeBlockFn quantize_block_fn() {
#if defined(__x86_64__)
  if (cpu_has_avx2()) return &quantize_block_avx2;
#endif
  return &quantize_block_portable;
}

// The vector kernel for dtype t and mg rows of x, or nullptr where only the portable dot runs.
RowFn row_fn(DType t, int mg) {
#if defined(__x86_64__)
  if (cpu_has_avx512vnni()) return vnni_rows::row_fn(t, mg);
  if (cpu_has_avx2()) return avx2_rows::row_fn(t, mg);
#endif
  (void)t;
  (void)mg;
  return nullptr;
}

}  // namespace

bool has_q8_matvec(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q8_0 || t == DType::Q4_K ||
         t == DType::Q5_K || t == DType::Q6_K;
}

void quantize_activations_q8(const float* x, int64_t m, int64_t k, Q8Activations& out, ThreadPool* pool) {
  if (k % kQ8Block != 0) kernel_fail("8-bit activations: K=" + std::to_string(k) + " is not a multiple of 32");
  out.m = m;
  out.nb = k / kQ8Block;
  out.q.resize(static_cast<size_t>(m * k));
  out.d.resize(static_cast<size_t>(m * out.nb));
  out.dsum.resize(static_cast<size_t>(m * out.nb));
  out.qsum.resize(static_cast<size_t>(m * out.nb));
  const QuantizeBlockFn quantize = quantize_block_fn();
  auto blocks = [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      quantize(x + b * kQ8Block, out.q.data() + b * kQ8Block, out.d.data() + b, out.dsum.data() + b,
               out.qsum.data() + b);
  };
  // each block on its own, so splitting them among threads changes no bit (a prompt piece's
  // thousands of blocks; a decode step's few run on the caller)
  if (pool) pool->parallel_for(m * out.nb, 2048, blocks);
  else blocks(0, m * out.nb);
}

namespace {
// p rounded up to a multiple of 64 bytes (the buffers above hold 64 bytes more than they use).
template <typename E>
E* align64(E* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<E*>((at + 63) & ~static_cast<uintptr_t>(63));
}
}  // namespace

void q8_matmul(ThreadPool& pool, DType t, const uint8_t* w, size_t wrow, int64_t N, const Q8Activations& a,
               float* out) {
  const DotFn dot = dot_fn(t);
  if (!dot) kernel_fail(std::string("8-bit activations: no integer dot product for ") + dtype_name(t));
  const int64_t nb = a.nb, M = a.m, groups = (M + 7) / 8, nbp = (nb + 7) / 8 * 8;
  RowFn rows[8];
  for (int mg = 1; mg <= 8; ++mg) rows[mg - 1] = row_fn(t, mg);
  // x in groups of 8 rows (the last one shorter): per row its values padded to nbp blocks, and
  // for the pair kernel per block by lane
  // (the caller's thread's buffers, named by references: the pool's threads fill them too, and a
  // thread_local named inside their lambdas would be their own)
  thread_local std::vector<float> tl_padded_f, tl_lane_f;
  thread_local std::vector<int32_t> tl_padded_i, tl_lane_i;
  thread_local std::vector<int8_t> tl_pairs, tl_columns;
  thread_local std::vector<float> tl_lane2_f;
  thread_local std::vector<int32_t> tl_lane2_i;
  std::vector<float>& padded_f = tl_padded_f;
  std::vector<float>& lane_f = tl_lane_f;
  std::vector<int32_t>& padded_i = tl_padded_i;
  std::vector<int32_t>& lane_i = tl_lane_i;
  std::vector<int8_t>& pairs = tl_pairs;
  std::vector<int8_t>& columns = tl_columns;
  std::vector<float>& lane2_f = tl_lane2_f;
  std::vector<int32_t>& lane2_i = tl_lane2_i;
  // groups of kColumnRows or more rows of the simple types: the pair kernel (AVX-512 VNNI) or the
  // column kernel (AVX2 alone); both need Q8Group's lane values, laid out below only for them
  PairFn pair = nullptr;
  RowFn column = nullptr;
#if defined(__x86_64__)
  avx2_rows::LanesFn lanes = nullptr;  // the column kernel's 8-weight-row form (Q4_0, Q4_1, Q8_0)
  const bool vnni = cpu_has_avx512vnni(), avx2 = !vnni && cpu_has_avx2();
  if (M >= kColumnRows) {
    if (vnni) pair = vnni_rows::pair_fn(t);
    else if (avx2) column = avx2_rows::column_fn(t);
  }
  if (avx2 && M >= kLanesMinRows) lanes = avx2_rows::lanes_fn(t);
  const bool q8_0 = t == DType::Q8_0;
  const int lanes_min = q8_0 ? kLanesMinRowsQ8 : kLanesMinRows, lanes_max = q8_0 ? kLanesRowsQ8 : kLanesRows;
  // one group whose every chunk of 8 weight rows takes the lanes kernel: the column kernel would
  // never run, so its layouts (Q8Group's lane values and xc) are not made
  if (lanes && N % 8 == 0 && M >= lanes_min && M <= std::min(lanes_max, 8)) column = nullptr;
#endif
  padded_f.assign(static_cast<size_t>(M * nbp * 2), 0.0f);
  padded_i.assign(static_cast<size_t>(M * nbp), 0);
  // the layouts below are copies, split among threads by groups of 8 rows where there are several
  // (a prompt piece); a decode step's one group is laid out by the caller
  auto by_groups = [&](auto&& body) {
    if (groups >= 4) pool.parallel_for(groups, 1, [&](int64_t g0, int64_t g1) { for (int64_t gi = g0; gi < g1; ++gi) body(gi); });
    else for (int64_t gi = 0; gi < groups; ++gi) body(gi);
  };
  by_groups([&](int64_t gi) {
    for (int64_t m = 8 * gi; m < std::min<int64_t>(M, 8 * gi + 8); ++m) {
      std::copy(a.d.begin() + m * nb, a.d.begin() + (m + 1) * nb, padded_f.begin() + m * nbp * 2);
      std::copy(a.dsum.begin() + m * nb, a.dsum.begin() + (m + 1) * nb, padded_f.begin() + m * nbp * 2 + nbp);
      std::copy(a.qsum.begin() + m * nb, a.qsum.begin() + (m + 1) * nb, padded_i.begin() + m * nbp);
    }
  });
  std::vector<Q8Group> gs(static_cast<size_t>(groups));
  for (int64_t gi = 0; gi < groups; ++gi) {
    Q8Group& g = gs[gi];
    g.nb = nb;
    g.mg = static_cast<int>(std::min<int64_t>(8, M - 8 * gi));
    for (int m = 0; m < g.mg; ++m) {
      const int64_t row = 8 * gi + m;
      g.q[m] = a.q.data() + row * nb * kQ8Block;
      g.d[m] = padded_f.data() + row * nbp * 2;
      g.dsum[m] = g.d[m] + nbp;
      g.qsum[m] = padded_i.data() + row * nbp;
    }
  }
  if (pair || column) {
    lane_f.assign(static_cast<size_t>(groups * nb * 16), 0.0f);
    lane_i.assign(static_cast<size_t>(groups * nb * 8), 0);
    if (column) columns.resize(static_cast<size_t>(groups * nb * 256 + 64));
    if (pair) {
      // 64 bytes over, for 64-byte alignment (a 512-bit load across two cache lines costs two:
      // the pair kernel's 8-row step took 14.1-14.6 ms or 11.5-11.8 as the allocations fell)
      pairs.resize(static_cast<size_t>(groups * nb * 512 + 64));
      lane2_f.resize(static_cast<size_t>(groups * nb * 32 + 16));
      lane2_i.resize(static_cast<size_t>(groups * nb * 16 + 16));
    }
    by_groups([&](int64_t gi) {
      Q8Group& g = gs[gi];
      float* ld = lane_f.data() + gi * nb * 16;
      float* ls = ld + nb * 8;
      int32_t* lq = lane_i.data() + gi * nb * 8;
      for (int m = 0; m < g.mg; ++m)
        for (int64_t b = 0; b < nb; ++b) {
          ld[b * 8 + m] = g.d[m][b];
          ls[b * 8 + m] = g.dsum[m][b];
          lq[b * 8 + m] = g.qsum[m][b];
        }
      g.lane_d = ld;
      g.lane_dsum = ls;
      g.lane_qsum = lq;
#if defined(__x86_64__)
      if (pair) {
        int8_t* xp = align64(pairs.data()) + gi * nb * 512;
        float* ld2 = align64(lane2_f.data()) + gi * nb * 32;
        int32_t* lq2 = align64(lane2_i.data()) + gi * nb * 16;
        vnni_rows::layout_pairs(g, vnni_rows::pair_offset_shift(t), xp, ld2, ld2 + nb * 16, lq2);
        g.xp = xp;
        g.lane2_d = ld2;
        g.lane2_dsum = ld2 + nb * 16;
        g.lane2_qsum = lq2;
      }
      if (column) {
        int8_t* xc = align64(columns.data()) + gi * nb * 256;
        avx2_rows::layout_columns(g, xc);
        g.xc = xc;
      }
#endif
    });
  }
  // Chunks of 8 weight rows, multiplied with every group of x while they are in cache: group by
  // group, each group's x (at most 12 KiB for K = 1536) and the chunk's rows staying in L1 while
  // the 8 rows take it (a prompt piece of 512 rows has 64 groups: going through all of them per
  // weight row streamed x from L2 each time); at least ~32 KiB of weights per chunk so that small
  // matrices skip the dispatch. The rows stream through memory in order, prefetched
  // kMatvecPrefetchBytes ahead (as in linear's exact path; not on AMD: cpu_weight_prefetch).
  // Every (weight row, group) product is computed on its own, so the order changes no bit.
  const int64_t chunks = (N + 7) / 8;
  const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(32768 / std::max<size_t>(8 * wrow * groups, 1)));
  const size_t total = static_cast<size_t>(N) * wrow;
  const bool prefetch = cpu_weight_prefetch();
  pool.parallel_for(chunks, grain, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t n0 = 8 * c, n1 = std::min(N, 8 * c + 8);
      for (int64_t n = n0; prefetch && n < n1; ++n) {
        const size_t ahead = static_cast<size_t>(n) * wrow + kMatvecPrefetchBytes;
        if (ahead < total) prefetch_bytes(w + ahead, std::min(wrow, total - ahead));
      }
      for (const Q8Group& g : gs) {
        const int64_t m0 = 8 * (&g - gs.data());
        const RowFn row = rows[g.mg - 1];
        const bool paired = pair && g.mg >= kColumnRows;
        const bool columned = column && g.mg >= kColumnRows;
#if defined(__x86_64__)
        if (lanes && g.mg >= lanes_min && g.mg <= lanes_max && n1 - n0 == 8) {  // a whole chunk: its 8 rows at once
          lanes(w + static_cast<size_t>(n0) * wrow, wrow, g, out + m0 * N + n0, N);
          continue;
        }
#endif
        for (int64_t n = n0; n < n1; ++n) {
          const size_t at = static_cast<size_t>(n) * wrow;
          if (paired && n + 1 < n1) {
            pair(w + at, w + at + wrow, g, out + m0 * N + n, N);
            ++n;
          } else if (paired) {
            // an odd last row: paired with itself (each lane's result depends on its own pair alone)
            float two[16];
            pair(w + at, w + at, g, two, 2);
            for (int m = 0; m < g.mg; ++m) out[(m0 + m) * N + n] = two[2 * m];
          } else if (columned) {
            column(w + at, g, out + m0 * N + n, N);
          } else if (row) {
            row(w + at, g, out + m0 * N + n, N);
          } else {
            for (int m = 0; m < g.mg; ++m) {
              const Q8Row xr{g.q[m], g.d[m], g.dsum[m], nb};
              out[(m0 + m) * N + n] = dot(w + at, xr);
            }
          }
        }
      }
    }
  });
}

}  // namespace tl::cpu
