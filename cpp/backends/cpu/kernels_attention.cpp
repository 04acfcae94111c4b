// Attention kernels: causal_mask and grouped-query attention. Attention accumulates in f32 with an
// online softmax (running max, rescaled sums) over exactly the keys a query may see, so a causal
// query never reads keys beyond its position; with few query rows and many keys the keys are split
// over threads and the partial softmaxes merged (flash-decoding). (CUDA: attention.cu.)
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_kernels_impl.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tl::cpu {

void CpuKernels::causal_mask(int64_t offset, const View& out) {
  require_float("causal_mask", out);
  require_contiguous("causal_mask", out);
  if (out.ndim != 2) kernel_fail("causal_mask: expected a 2-D output");
  const int64_t n = out.shape[0], m = out.shape[1];
  std::vector<float> row(static_cast<size_t>(m));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j)
      row[static_cast<size_t>(j)] = j <= i + offset ? 0.0f : -std::numeric_limits<float>::infinity();
    store_f32(out.dtype, element_ptr(out, i * m), 1, m, row.data());
  }
}

namespace {

// Keys handled per step inside one attention task: their K (and V) rows are converted to f32
// once into a per-thread buffer when they are not f32 rows already.
constexpr int64_t kKeyChunk = 64;

// s[j] = exp(s[j] - sub) for j < n; returns the sum. exp(-inf) is exactly 0.
float exp_sub_sum_portable(float* s, int64_t n, float sub) {
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - sub);
    sum += s[j];
  }
  return static_cast<float>(sum);
}

#if defined(__x86_64__)
#define TL_AVX2 __attribute__((target("avx2,fma,f16c")))

// exp(x) for x <= 0 (scores minus their max): x = n ln2 + r with |r| <= ln2 / 2, a degree-6
// Taylor polynomial for e^r (relative error ~2e-7), and 2^n built in the exponent bits.
// Below -87.3 the result is 0.
TL_AVX2 inline __m256 exp_nonpositive_avx2(__m256 x) {
  const __m256 valid = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_GE_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(bits)), valid);
}

// acc[g, :] += sum_j p[g, j] * v[j, :] for g < G (G <= 3), j < nc; p rows ldp apart, v rows ldv
// apart, acc rows D apart. Two 8-wide column blocks at a time, every head's accumulators held in
// registers across all keys: no loads or stores of acc inside the key loop.
TL_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
TL_AVX2 inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline float load1(const float* p) { return *p; }
inline float load1(const uint16_t* p) { return f16_to_f32(*p); }

template <int G, class V>
TL_AVX2 void pv_accumulate_avx2(const float* p, int64_t ldp, const V* v, int64_t ldv, int64_t nc, float* acc,
                                int64_t D) {
  int64_t d = 0;
  // 32 columns a pass while they fit (G * 4 accumulators, 12 at most): each key's G probabilities
  // broadcast once per 32 columns, not per 16 (the loads were this loop's bound; the sums per
  // element are the same, in the same order)
  for (; d + 32 <= D; d += 32) {
    __m256 a[G][4];
    for (int g = 0; g < G; ++g)
      for (int c = 0; c < 4; ++c) a[g][c] = _mm256_loadu_ps(acc + g * D + d + 8 * c);
    for (int64_t j = 0; j < nc; ++j) {
      const V* vr = v + j * ldv + d;
      const __m256 v0 = load8(vr), v1 = load8(vr + 8), v2 = load8(vr + 16), v3 = load8(vr + 24);
      for (int g = 0; g < G; ++g) {
        const __m256 pg = _mm256_broadcast_ss(p + g * ldp + j);
        a[g][0] = _mm256_fmadd_ps(pg, v0, a[g][0]);
        a[g][1] = _mm256_fmadd_ps(pg, v1, a[g][1]);
        a[g][2] = _mm256_fmadd_ps(pg, v2, a[g][2]);
        a[g][3] = _mm256_fmadd_ps(pg, v3, a[g][3]);
      }
    }
    for (int g = 0; g < G; ++g)
      for (int c = 0; c < 4; ++c) _mm256_storeu_ps(acc + g * D + d + 8 * c, a[g][c]);
  }
  for (; d + 16 <= D; d += 16) {
    __m256 a0[G], a1[G];
    for (int g = 0; g < G; ++g) {
      a0[g] = _mm256_loadu_ps(acc + g * D + d);
      a1[g] = _mm256_loadu_ps(acc + g * D + d + 8);
    }
    for (int64_t j = 0; j < nc; ++j) {
      const __m256 v0 = load8(v + j * ldv + d), v1 = load8(v + j * ldv + d + 8);
      for (int g = 0; g < G; ++g) {
        const __m256 pg = _mm256_broadcast_ss(p + g * ldp + j);
        a0[g] = _mm256_fmadd_ps(pg, v0, a0[g]);
        a1[g] = _mm256_fmadd_ps(pg, v1, a1[g]);
      }
    }
    for (int g = 0; g < G; ++g) {
      _mm256_storeu_ps(acc + g * D + d, a0[g]);
      _mm256_storeu_ps(acc + g * D + d + 8, a1[g]);
    }
  }
  for (; d < D; ++d)
    for (int g = 0; g < G; ++g) {
      float s = acc[g * D + d];
      for (int64_t j = 0; j < nc; ++j) s += p[g * ldp + j] * load1(v + j * ldv + d);
      acc[g * D + d] = s;
    }
}

// scores[g, j] = q[g, :] . k[j, :] for g < G (G <= 3), j < nc; q rows D apart (f32), k rows ldk
// apart (f32 or f16, read in place), scores rows lds apart.
template <int G, class K>
TL_AVX2 void qk_scores_avx2(const float* q, const K* k, int64_t ldk, int64_t nc, float* scores, int64_t lds,
                            int64_t D) {
  const int64_t D8 = D & ~int64_t{7};
  for (int64_t j = 0; j < nc; ++j) {
    const K* kr = k + j * ldk;
    __m256 a[G];
    for (int g = 0; g < G; ++g) a[g] = _mm256_setzero_ps();
    for (int64_t d = 0; d < D8; d += 8) {
      const __m256 kv = load8(kr + d);
      for (int g = 0; g < G; ++g) a[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * D + d), kv, a[g]);
    }
    for (int g = 0; g < G; ++g) {
      __m128 h = _mm_add_ps(_mm256_castps256_ps128(a[g]), _mm256_extractf128_ps(a[g], 1));
      h = _mm_add_ps(h, _mm_movehl_ps(h, h));
      h = _mm_add_ss(h, _mm_movehdup_ps(h));
      float sum = _mm_cvtss_f32(h);
      for (int64_t d = D8; d < D; ++d) sum += q[g * D + d] * load1(kr + d);
      scores[g * lds + j] = sum;
    }
  }
}

TL_AVX2 float exp_sub_sum_avx2(float* s, int64_t n, float sub) {
  const __m256 vs = _mm256_set1_ps(sub);
  __m256 acc = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp_nonpositive_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), vs));
    _mm256_storeu_ps(s + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float sum = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
  if (j < n) {
    alignas(32) float tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t t = j; t < n; ++t) tail[t - j] = s[t] - sub;
    _mm256_store_ps(tail, exp_nonpositive_avx2(_mm256_load_ps(tail)));
    for (int64_t t = j; t < n; ++t) {
      s[t] = tail[t - j];
      sum += tail[t - j];
    }
  }
  return sum;
}
#endif

void pv_accumulate_portable(const float* p, int64_t ldp, int group, const float* v, int64_t ldv, int64_t nc,
                            float* acc, int64_t D) {
  for (int g = 0; g < group; ++g)
    for (int64_t j = 0; j < nc; ++j) {
      const float pj = p[g * ldp + j];
      if (pj == 0.0f) continue;
      const float* vr = v + j * ldv;
      float* a = acc + g * D;
      for (int64_t d = 0; d < D; ++d) a[d] += pj * vr[d];
    }
}

// acc[g, :] += sum_j p[g, j] * v[j, :] for g < group, j < nc (the P.V product of one key chunk).
void pv_accumulate(const float* p, int64_t ldp, int group, const float* v, int64_t ldv, int64_t nc, float* acc,
                   int64_t D) {
#if defined(__x86_64__)
  if (cpu_has_avx2()) {
    for (int g = 0; g < group; g += 3) {
      const float* pg = p + g * ldp;
      float* ag = acc + g * D;
      switch (std::min(3, group - g)) {
        case 3: pv_accumulate_avx2<3, float>(pg, ldp, v, ldv, nc, ag, D); break;
        case 2: pv_accumulate_avx2<2, float>(pg, ldp, v, ldv, nc, ag, D); break;
        default: pv_accumulate_avx2<1, float>(pg, ldp, v, ldv, nc, ag, D); break;
      }
    }
    return;
  }
#endif
  pv_accumulate_portable(p, ldp, group, v, ldv, nc, acc, D);
}

#if defined(__x86_64__)
// The f16 cache read in place (AVX2 only): scores of `group` heads and their P.V accumulation.
void qk_scores_f16(const float* q, int group, const uint16_t* k, int64_t ldk, int64_t nc, float* scores,
                   int64_t lds, int64_t D) {
  for (int g = 0; g < group; g += 3) {
    switch (std::min(3, group - g)) {
      case 3: qk_scores_avx2<3, uint16_t>(q + g * D, k, ldk, nc, scores + g * lds, lds, D); break;
      case 2: qk_scores_avx2<2, uint16_t>(q + g * D, k, ldk, nc, scores + g * lds, lds, D); break;
      default: qk_scores_avx2<1, uint16_t>(q + g * D, k, ldk, nc, scores + g * lds, lds, D); break;
    }
  }
}

void pv_accumulate_f16(const float* p, int64_t ldp, int group, const uint16_t* v, int64_t ldv, int64_t nc,
                       float* acc, int64_t D) {
  for (int g = 0; g < group; g += 3) {
    switch (std::min(3, group - g)) {
      case 3: pv_accumulate_avx2<3, uint16_t>(p + g * ldp, ldp, v, ldv, nc, acc + g * D, D); break;
      case 2: pv_accumulate_avx2<2, uint16_t>(p + g * ldp, ldp, v, ldv, nc, acc + g * D, D); break;
      default: pv_accumulate_avx2<1, uint16_t>(p + g * ldp, ldp, v, ldv, nc, acc + g * D, D); break;
    }
  }
}
#endif

float exp_sub_sum(float* s, int64_t n, float sub) {
#if defined(__x86_64__)
  if (cpu_has_avx2()) return exp_sub_sum_avx2(s, n, sub);
#endif
  return exp_sub_sum_portable(s, n, sub);
}

// The partial result of one attention task: for each query head g of a kv group, over a range of
// keys, the running max m_g, the sum l_g of exp(score - m_g) and acc_g = sum exp(score - m_g) v.
struct PartialSoftmax {
  float* m;    // [group]
  float* l;    // [group]
  float* acc;  // [group, D]
};

}  // namespace

void CpuKernels::attention(const View& q, const View& k, const View& v, const View& mask,
                           float scale, bool causal, int64_t q_pos_offset, const View& out, float softcap) {
  attend(q, k, v, mask, scale, causal, q_pos_offset, out, softcap, nullptr, nullptr);
}

// Every row's (kv head, split) tasks in one parallel_for: a batched step's B rows x Hkv heads share
// the threads evenly, where B calls of Hkv tasks each (SmolLM2: 3 heads on 2 threads) left a thread
// waiting in each, and one call a layer replaces B. A row's tasks are those attention() gives it alone
// (the same splits, chunks and arithmetic), so its result is bitwise that call's.
void CpuKernels::attention_rows(const View& q, const View& k, const View& v, const int64_t* starts,
                                const int64_t* lens, float scale, const View& out, float softcap) {
  if (q.ndim != 3 || k.ndim != 3) kernel_fail("attention_rows: q, k, v and out must be 3-D");
  for (int64_t b = 0; b < q.shape[0]; ++b)
    if (starts[b] < 0 || lens[b] < 1 || starts[b] + lens[b] > k.shape[0])
      kernel_fail("attention_rows: row " + std::to_string(b) + "'s keys " + std::to_string(starts[b]) + ".." +
                  std::to_string(starts[b] + lens[b]) + " do not fit " + std::to_string(k.shape[0]) + " rows");
  attend(q, k, v, View{}, scale, true, 0, out, softcap, starts, lens);
}

void CpuKernels::attend(const View& q, const View& k, const View& v, const View& mask, float scale, bool causal,
                        int64_t q_pos_offset, const View& out, float softcap, const int64_t* starts,
                        const int64_t* lens) {
  require_float("attention", q);
  require_float("attention", k);
  require_float("attention", v);
  require_contiguous("attention", out);
  if (out.dtype != DType::F32) kernel_fail("attention: out must be f32");
  if (q.ndim != 3 || k.ndim != 3 || v.ndim != 3 || out.ndim != 3)
    kernel_fail("attention: q, k, v and out must be 3-D");
  const int64_t Sq = q.shape[0], Hq = q.shape[1], D = q.shape[2];
  const int64_t Sk = k.shape[0], Hkv = k.shape[1];
  if (k.shape[2] != D || v.shape[0] != Sk || v.shape[1] != Hkv || v.shape[2] != D)
    kernel_fail("attention: k/v shapes do not match q");
  if (Hkv == 0 || Hq % Hkv != 0) kernel_fail("attention: query heads must be a multiple of kv heads");
  if (mask.data) {
    if (mask.ndim != 2 || mask.shape[0] != Sq || mask.shape[1] != Sk) kernel_fail("attention: mask must be [Sq, Sk]");
    require_float("attention", mask);
  }
  if (Sq == 0 || Hq == 0 || D == 0) return;
  const int64_t group = Hq / Hkv;
  float* od = static_cast<float*>(out.data);
  const bool k_direct = k.dtype == DType::F32 && k.strides[2] == 1;
  const bool v_direct = v.dtype == DType::F32 && v.strides[2] == 1;
  const bool f16_direct = cpu_has_avx2() && k.dtype == DType::F16 && v.dtype == DType::F16 && k.strides[2] == 1 &&
                          v.strides[2] == 1;
  auto visible_keys = [&](int64_t i) {
    if (lens) return lens[i];
    return causal ? std::min<int64_t>(Sk, std::max<int64_t>(0, q_pos_offset + i + 1)) : Sk;
  };
  // the most keys a row of r0..r1 sees (without lens, the last row's: visible keys grow with the row)
  auto most_keys = [&](int64_t r0, int64_t r1) {
    if (!lens) return visible_keys(r1 - 1);
    int64_t most = 0;
    for (int64_t i = r0; i < r1; ++i) most = std::max(most, lens[i]);
    return most;
  };

  // Split the keys of a (query row, kv head) over several tasks when one row's kv heads would not
  // give every thread work (decode) and there are many keys (flash-decoding); each split keeps its
  // own running softmax and the splits are merged at the end. A row's split count depends only on
  // its visible keys, the kv heads and the pool, never on how many rows the call has, so a row's
  // result is bitwise the same whether its prompt came whole or in pieces (the server's prefill
  // budget, a prompt cache hit leaving one or two new tokens) or as a decode step. Rows go in
  // blocks whose split records fit kMaxPartialFloats.
  const int64_t threads = static_cast<int64_t>(pool().size());
  auto row_splits = [&](int64_t keys) -> int64_t {
    if (Hkv >= 4 * threads) return 1;
    const int64_t want = (4 * threads + Hkv - 1) / Hkv;
    return std::max<int64_t>(1, std::min<int64_t>(keys / 128, std::max<int64_t>(want, keys / 1024)));
  };
  constexpr int64_t kMaxPartialFloats = int64_t{1} << 20;
  const int64_t slot = group * (D + 2);  // floats of one PartialSoftmax
  const int64_t most_splits = row_splits(most_keys(0, Sq));
  const int64_t block_rows =
      most_splits > 1 ? std::max<int64_t>(1, kMaxPartialFloats / (Hkv * most_splits * slot)) : Sq;
  thread_local std::vector<float> partial_buf;
  for (int64_t r0 = 0; r0 < Sq; r0 += block_rows) {
    const int64_t r1 = std::min(Sq, r0 + block_rows);
    const int64_t splits = row_splits(most_keys(r0, r1));
    if (splits > 1) partial_buf.resize(static_cast<size_t>((r1 - r0) * Hkv * splits * slot));
    float* const partial = partial_buf.data();  // the calling thread's buffer, shared with the tasks

    const int64_t tasks = (r1 - r0) * Hkv * splits;
    // ~8K multiply-adds of scores a chunk of tasks: a decode row's kv heads go to both threads from
    // ~43 keys on (SmolLM2), where a bound of 64K kept a batched step's 240 calls (8 rows x 30
    // layers, ~100 keys) on one thread while the other waited (attention of such a step 8.9 -> 7.2
    // ms, a whole 8-row --fast step at ~120 keys 29.8 -> 27.1 ms, medians of 6-7 alternated runs on
    // 2 shared Zen 3 cores). Which thread runs a task changes no bit of it.
    const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, most_keys(r0, r1) * D * group / splits));
    pool().parallel_for(tasks, grain, [&](int64_t t0, int64_t t1) {
      thread_local std::vector<float> qrow, scores, kq, kbuf, vbuf, mrow, own;
      qrow.resize(static_cast<size_t>(group * D));
      scores.resize(static_cast<size_t>(group * kKeyChunk));
      kq.resize(static_cast<size_t>(kKeyChunk * group));
      if (!k_direct && !f16_direct) kbuf.resize(static_cast<size_t>(kKeyChunk * D));
      if (!v_direct && !f16_direct) vbuf.resize(static_cast<size_t>(kKeyChunk * D));
      if (mask.data) mrow.resize(static_cast<size_t>(kKeyChunk));
      own.resize(static_cast<size_t>(slot));
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t split = t % splits, row_head = t / splits;
        const int64_t i = r0 + row_head / Hkv, kh = row_head % Hkv;
        const int64_t n_keys = visible_keys(i);
        const int64_t first = starts ? starts[i] : 0;  // k's row of the row's key 0
        // this row's own split count: the splits past it get no keys (their records stay empty)
        const int64_t row_split_count = row_splits(n_keys);
        const int64_t per = (n_keys + row_split_count - 1) / row_split_count;
        const int64_t j_begin = std::min(n_keys, split * per), j_end = std::min(n_keys, j_begin + per);
        float* ps = splits > 1 ? partial + t * slot : own.data();
        PartialSoftmax part{ps, ps + group, ps + 2 * group};
        for (int64_t g = 0; g < group; ++g) {
          const int64_t h = kh * group + g;
          load_f32(q.dtype, element_ptr(q, i * q.strides[0] + h * q.strides[1]), q.strides[2], D, qrow.data() + g * D);
          for (int64_t d = 0; d < D; ++d) qrow[static_cast<size_t>(g * D + d)] *= scale;
          part.m[g] = -std::numeric_limits<float>::infinity();
          part.l[g] = 0.0f;
        }
        std::fill(part.acc, part.acc + group * D, 0.0f);
        for (int64_t j0 = j_begin; j0 < j_end; j0 += kKeyChunk) {
          const int64_t nc = std::min(kKeyChunk, j_end - j0);
          // Scores of the group's query heads against the chunk's keys: f16 rows read in place
          // (AVX2), f32 rows in place through one small GEMM (keys x group), other dtypes
          // converted to f32 rows first.
          const char* kbase = element_ptr(k, (first + j0) * k.strides[0] + kh * k.strides[1]);
          const char* vbase = element_ptr(v, (first + j0) * v.strides[0] + kh * v.strides[1]);
          if (f16_direct) {
  #if defined(__x86_64__)
            qk_scores_f16(qrow.data(), static_cast<int>(group), reinterpret_cast<const uint16_t*>(kbase), k.strides[0],
                          nc, scores.data(), kKeyChunk, D);
  #endif
          } else {
            const float* kp;
            int64_t ldk;
            if (k_direct) {
              kp = reinterpret_cast<const float*>(kbase);
              ldk = k.strides[0];
            } else {
              for (int64_t j = 0; j < nc; ++j)
                load_f32(k.dtype, element_ptr(k, (first + j0 + j) * k.strides[0] + kh * k.strides[1]), k.strides[2], D,
                         kbuf.data() + j * D);
              kp = kbuf.data();
              ldk = D;
            }
            gemm_nt_f32(kp, ldk, nc, qrow.data(), D, group, D, kq.data(), group);
            for (int64_t g = 0; g < group; ++g)
              for (int64_t j = 0; j < nc; ++j) scores[static_cast<size_t>(g * kKeyChunk + j)] = kq[static_cast<size_t>(j * group + g)];
          }
          if (mask.data)
            load_f32(mask.dtype, element_ptr(mask, i * mask.strides[0] + j0 * mask.strides[1]), mask.strides[1], nc,
                     mrow.data());
          for (int64_t g = 0; g < group; ++g) {
            float* sc = scores.data() + g * kKeyChunk;
            float mx = -std::numeric_limits<float>::infinity();
            if (softcap > 0.0f)
              for (int64_t j = 0; j < nc; ++j) sc[j] = softcap * std::tanh(sc[j] / softcap);
            for (int64_t j = 0; j < nc; ++j) {
              if (mask.data) sc[j] += mrow[static_cast<size_t>(j)];
              mx = std::max(mx, sc[j]);
            }
            if (mx == -std::numeric_limits<float>::infinity()) {  // no visible key in this chunk
              std::fill(sc, sc + nc, 0.0f);
              continue;
            }
            if (mx > part.m[g]) {  // rescale what was summed under the old max
              const float c = part.m[g] == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(part.m[g] - mx);
              float* acc = part.acc + g * D;
              part.l[g] *= c;
              for (int64_t d = 0; d < D; ++d) acc[d] *= c;
              part.m[g] = mx;
            }
            part.l[g] += exp_sub_sum(sc, nc, part.m[g]);
          }
          if (f16_direct) {
  #if defined(__x86_64__)
            pv_accumulate_f16(scores.data(), kKeyChunk, static_cast<int>(group), reinterpret_cast<const uint16_t*>(vbase),
                              v.strides[0], nc, part.acc, D);
  #endif
          } else if (v_direct) {
            pv_accumulate(scores.data(), kKeyChunk, static_cast<int>(group), reinterpret_cast<const float*>(vbase),
                          v.strides[0], nc, part.acc, D);
          } else {
            for (int64_t j = 0; j < nc; ++j)
              load_f32(v.dtype, element_ptr(v, (first + j0 + j) * v.strides[0] + kh * v.strides[1]), v.strides[2], D,
                       vbuf.data() + j * D);
            pv_accumulate(scores.data(), kKeyChunk, static_cast<int>(group), vbuf.data(), D, nc, part.acc, D);
          }
        }
        if (splits == 1) {
          for (int64_t g = 0; g < group; ++g) {
            float* o = od + (i * Hq + kh * group + g) * D;
            const float inv = part.l[g] > 0.0f ? 1.0f / part.l[g] : 0.0f;  // no visible key: zeros
            for (int64_t d = 0; d < D; ++d) o[d] = part.acc[g * D + d] * inv;
          }
        }
      }
    });
    if (splits == 1) continue;
    // Merge the splits of every (query row, kv head) of the block: rescale each to the common max (a
    // row's empty splits, past its own count, are skipped, so it sums what it would alone).
    const int64_t merge_grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, group * D * splits));
    pool().parallel_for((r1 - r0) * Hkv, merge_grain, [&](int64_t m0, int64_t m1) {
      for (int64_t rh = m0; rh < m1; ++rh) {
        const int64_t i = r0 + rh / Hkv, kh = rh % Hkv;
        for (int64_t g = 0; g < group; ++g) {
          float mx = -std::numeric_limits<float>::infinity();
          for (int64_t sp = 0; sp < splits; ++sp) mx = std::max(mx, partial[(rh * splits + sp) * slot + g]);
          float* o = od + (i * Hq + kh * group + g) * D;
          std::fill(o, o + D, 0.0f);
          if (mx == -std::numeric_limits<float>::infinity()) continue;  // no visible key: zeros
          float l = 0.0f;
          for (int64_t sp = 0; sp < splits; ++sp) {
            const float* ps = partial + (rh * splits + sp) * slot;
            if (ps[g] == -std::numeric_limits<float>::infinity()) continue;
            const float c = std::exp(ps[g] - mx);
            l += c * ps[group + g];
            axpy_f32(c, ps + 2 * group + g * D, o, D);
          }
          const float inv = 1.0f / l;
          for (int64_t d = 0; d < D; ++d) o[d] *= inv;
        }
      }
    });
  }
}

}  // namespace tl::cpu
