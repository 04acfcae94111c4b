// Scaled dot-product attention with grouped-query heads, and the causal mask builder.
// One block per (query row, query head) and key split; each warp walks the block's keys 32 at a
// time, one key per lane for the scores (one max and one sum reduction per 32 keys), with an
// online softmax (running max, running sum, f32 accumulators of D/32 values per lane), and the
// warps' partial results are merged in shared memory. With few (row, head)
// tasks (decode) the keys are split over several blocks that write (max, sum, accumulators) to
// the backend's attention scratch; the last block of a task to finish (a per-task counter, after
// a memory fence: flash-decoding's split-K in one launch) merges the records, or, without
// counters, a second kernel does in stream order. k and v are read through their strides,
// so they may be the first Sk rows of a preallocated KV cache. A query that sees no key (all
// masked, or causal before the first key) gets a row of zeros, as on the CPU backend.
#include <algorithm>
#include <cmath>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

namespace tl {
namespace cuda {
namespace {

constexpr int kAttnWarps = 4;
constexpr int kMaxHeadDim = 512;
constexpr int kMaxSplits = 64;  // key splits of one (row, head) task
constexpr int64_t kTiledMinRows = 16;  // query rows from which prefill takes the tiled kernel

struct Strided3 {
  const void* data;
  DType dtype;
  int64_t s0, s1, s2;
};

Strided3 strided3(const View& v) {
  return Strided3{v.data, v.dtype, v.strides[0], v.strides[1], v.strides[2]};
}

// Whether x's rows of D elements can be read as float4s: f32, contiguous along D, 16-byte aligned
// (a KV cache, a q from a projection).
__device__ __forceinline__ bool rows_vec4(const Strided3& x, int64_t D) {
  return x.dtype == DType::F32 && x.s2 == 1 && (D & 3) == 0 && ((x.s0 | x.s1) & 3) == 0 &&
         (reinterpret_cast<uintptr_t>(x.data) & 15) == 0;
}

// Whether x's rows can be read 8 halves (16 bytes) at a time: f16, contiguous along D, 16-byte
// aligned (an f16 KV cache).
__device__ __forceinline__ bool rows_vec8h(const Strided3& x, int64_t D) {
  return x.dtype == DType::F16 && x.s2 == 1 && (D & 7) == 0 && ((x.s0 | x.s1) & 7) == 0 &&
         (reinterpret_cast<uintptr_t>(x.data) & 15) == 0;
}

// How add_values reads value rows: any floating dtype through load_float, or f32 / f16 directly.
enum class ValueLoad { Any, F32, F16 };

// part + q[0..7] . the 8 halves of `raw`, in order (each half converted exactly): a score's step
// over 8 key elements of an f16 cache, the same fmaf chain as over f32 keys.
__device__ __forceinline__ float dot_half8(const uint4& raw, const float* q, float part) {
  const __half2* h2 = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    const float2 f = __half22float2(h2[t]);
    part = fmaf(q[2 * t], f.x, part);
    part = fmaf(q[2 * t + 1], f.y, part);
  }
  return part;
}

// One warp's online softmax over its next 32 scores (s: this lane's, -inf where no key): false
// when all are -inf (nothing changes); else the running max m and sum l and the accumulators move
// to the new max, and p is this lane's weight for its value row.
template <int kPerLane>
__device__ __forceinline__ bool softmax_step(float s, float& m, float& l, float (&acc)[kPerLane], float& p) {
  const float cmax = warp_max(s);
  if (cmax == -INFINITY) return false;  // uniform across the warp
  const float m_new = fmaxf(m, cmax);
  const float corr = expf(m - m_new);  // 0 while m is still -inf
  p = s == -INFINITY ? 0.0f : expf(s - m_new);
  l = l * corr + warp_sum(p);
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) acc[r] *= corr;
  m = m_new;
  return true;
}

// acc[r] += p_jj * v[c0 + jj][hk][lane + 32 r] over the chunk's n_here keys, p_jj in lane jj.
// kRows value rows at a time, their loads issued before any use (a load behind a branch on its
// weight would wait out the memory latency once per key); f32 values are read without the
// per-element dtype switch (f16 ones likewise, converted exactly). A key of weight 0 (masked, or past the range) adds nothing, even
// where its row holds a NaN.
template <int kPerLane, ValueLoad kLoad, int kRows>
__device__ __forceinline__ void add_values(const Strided3& v, int64_t c0, int n_here, int64_t hk,
                                           int64_t D, int lane, float p, float (&acc)[kPerLane]) {
  for (int jb = 0; jb < n_here; jb += kRows) {
    float vv[kRows][kPerLane];
    float pp[kRows];
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      const int jj = jb + u;
      pp[u] = __shfl_sync(0xffffffffu, p, jj & 31);
      if (jj >= n_here) pp[u] = 0.0f;
      const int64_t vbase = (c0 + (jj < n_here ? jj : 0)) * v.s0 + hk * v.s1;
#pragma unroll
      for (int r = 0; r < kPerLane; ++r) {
        const int64_t d = lane + 32 * r;
        if constexpr (kLoad == ValueLoad::F32) {
          vv[u][r] = d < D ? __ldg(static_cast<const float*>(v.data) + vbase + d * v.s2) : 0.0f;
        } else if constexpr (kLoad == ValueLoad::F16) {
          vv[u][r] = d < D ? __half2float(__ldg(static_cast<const __half*>(v.data) + vbase + d * v.s2)) : 0.0f;
        } else {
          vv[u][r] = d < D ? load_float(v.data, v.dtype, vbase + d * v.s2) : 0.0f;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
#pragma unroll
      for (int r = 0; r < kPerLane; ++r) acc[r] = pp[u] != 0.0f ? fmaf(pp[u], vv[u][r], acc[r]) : acc[r];
    }
  }
}

// kRows: value rows per round of loads (add_values): 16 for head dims up to 64 (32 registers of
// values), else 8; TL_CUDA_ATTN_ROWS8=1 takes 8 everywhere (for A/B measurements).
template <int kPerLane, int kRows>
__global__ void __launch_bounds__(kAttnWarps * 32)
    attention_kernel(Strided3 q, Strided3 k, Strided3 v, const void* mask, DType mask_dtype,
                     int64_t mask_s0,
                     int64_t mask_s1, float scale, float softcap, bool causal, int64_t q_pos_offset, int64_t Sq,
                     int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D, float* out, float* partial,
                     unsigned* counters, const int64_t* dyn, int64_t min_chunk, bool l2) {
  __shared__ float s_max[kAttnWarps];
  __shared__ bool s_last;
  __shared__ float s_sum[kAttnWarps];
  __shared__ float s_acc[kAttnWarps][kPerLane * 32];
  __shared__ float s_q[kPerLane * 32];
  __shared__ float s_split_max[kMaxSplits], s_split_sum[kMaxSplits];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t group = Hq / Hkv;
  if (dyn != nullptr) {  // a replay graph's values: [Sk, q_pos_offset, k offset, v offset]
    Sk = dyn[0];
    q_pos_offset = dyn[1];
    k.data = static_cast<const char*>(k.data) + dyn[2];
    v.data = static_cast<const char*>(v.data) + dyn[3];
  }
  // Keys as float4 when k is contiguous f32 along D with 16-byte aligned rows (a KV cache).
  const bool k_vec4 = rows_vec4(k, D);
  const bool k_h8 = !k_vec4 && rows_vec8h(k, D);  // an f16 KV cache: 8 halves per load
  int64_t splits = gridDim.y;
  if (min_chunk > 1 && counters != nullptr) {
    // A replay graph's launch has splits for the longest context: only as many as the keys
    // fill with min_chunk each take part (the same count in every block, so the record layout,
    // the counter and the merge agree), the rest leave at once, before staging anything.
    const int64_t used = (Sk + min_chunk - 1) / min_chunk;
    splits = used < 1 ? 1 : (used < splits ? used : splits);
  }
  // (dyn is read before the wait: a replay's values are written before its graph starts.)
  if (l2 && Sq == 1 && blockIdx.y < splits && k.s2 == 1 && v.s2 == 1) {
    // One query row (decode): the keys and values of this block's split of its first head into
    // the L2 while the kernel before this one finishes (a programmatic dependent launch).
    const int64_t h = blockIdx.x % Hq, hk = h / group;
    int64_t keys = Sk;
    if (causal) keys = q_pos_offset < 0 ? 0 : (q_pos_offset + 1 < Sk ? q_pos_offset + 1 : Sk);
    const int64_t chunk = (Sk + splits - 1) / splits, j0 = blockIdx.y * chunk;
    const int64_t j1 = j0 + chunk < keys ? j0 + chunk : keys;
    const int64_t kes = k.dtype == DType::F32 ? 4 : 2, ves = v.dtype == DType::F32 ? 4 : 2;  // floating (checked)
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {  // a key's rows per thread
      prefetch_l2_lines(static_cast<const char*>(k.data) + (j * k.s0 + hk * k.s1) * kes, D * kes, 0, 1);
      prefetch_l2_lines(static_cast<const char*>(v.data) + (j * v.s0 + hk * v.s1) * ves, D * ves, 0, 1);
    }
  }
  pdl_wait();  // launched as a programmatic dependent launch (cuda_common.cuh)
  pdl_launch_dependents();
  if (blockIdx.y >= splits) return;
  for (int64_t task = blockIdx.x; task < Sq * Hq; task += gridDim.x) {
    const int64_t i = task / Hq;
    const int64_t h = task - i * Hq;
    const int64_t hk = h / group;
    float acc[kPerLane];
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) acc[r] = 0.0f;
    for (int64_t d = threadIdx.x; d < kPerLane * 32; d += blockDim.x) {
      s_q[d] = d < D ? load_float(q.data, q.dtype, i * q.s0 + h * q.s1 + d * q.s2) : 0.0f;
    }
    __syncthreads();
    int64_t keys = Sk;
    if (causal) {
      const int64_t last = q_pos_offset + i;  // keys j <= last are visible
      keys = last < 0 ? 0 : (last + 1 < Sk ? last + 1 : Sk);
    }
    const int64_t chunk = (Sk + splits - 1) / splits;
    const int64_t j0 = blockIdx.y * chunk;
    const int64_t j1 = j0 + chunk < keys ? j0 + chunk : keys;
    float m = -INFINITY, l = 0.0f;
    // Each warp takes 32 keys at a time, one key per lane: a lane computes its key's whole score
    // (q from shared memory), the warp reduces max and sum once per 32 keys, then every lane adds
    // the 32 weighted value rows for its dims (value rows read coalesced across the lanes).
    for (int64_t c0 = j0 + warp * 32; c0 < j1; c0 += kAttnWarps * 32) {
      const int64_t j = c0 + lane;
      float s = -INFINITY;
      if (j < j1) {
        const int64_t kbase = j * k.s0 + hk * k.s1;
        float part = 0.0f;
        if (k_vec4) {
          const float4* kr = reinterpret_cast<const float4*>(static_cast<const float*>(k.data) + kbase);
#pragma unroll 8
          for (int64_t d4 = 0; d4 < D / 4; ++d4) {
            const float4 kv = kr[d4];
            part = fmaf(s_q[4 * d4], kv.x, part);
            part = fmaf(s_q[4 * d4 + 1], kv.y, part);
            part = fmaf(s_q[4 * d4 + 2], kv.z, part);
            part = fmaf(s_q[4 * d4 + 3], kv.w, part);
          }
        } else if (k_h8) {
          // The same products in the same order as below, the halves converted exactly.
          const uint4* kr = reinterpret_cast<const uint4*>(static_cast<const __half*>(k.data) + kbase);
#pragma unroll 4
          for (int64_t d8 = 0; d8 < D / 8; ++d8) part = dot_half8(__ldg(kr + d8), s_q + 8 * d8, part);
        } else {
#pragma unroll 8
          for (int64_t d = 0; d < D; ++d) part = fmaf(s_q[d], load_float(k.data, k.dtype, kbase + d * k.s2), part);
        }
        s = part * scale;
        if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
        if (mask != nullptr) s += load_float(mask, mask_dtype, i * mask_s0 + j * mask_s1);
      }
      float p;
      if (!softmax_step<kPerLane>(s, m, l, acc, p)) continue;  // nothing visible in these 32 keys
      const int n_here = static_cast<int>(j1 - c0 < 32 ? j1 - c0 : 32);
      if (v.dtype == DType::F32) {
        add_values<kPerLane, ValueLoad::F32, kRows>(v, c0, n_here, hk, D, lane, p, acc);
      } else if (v.dtype == DType::F16) {
        add_values<kPerLane, ValueLoad::F16, kRows>(v, c0, n_here, hk, D, lane, p, acc);
      } else {
        add_values<kPerLane, ValueLoad::Any, kRows>(v, c0, n_here, hk, D, lane, p, acc);
      }
    }
    if (lane == 0) {
      s_max[warp] = m;
      s_sum[warp] = l;
    }
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) s_acc[warp][lane + 32 * r] = acc[r];
    __syncthreads();
    float gmax = -INFINITY;
#pragma unroll
    for (int w = 0; w < kAttnWarps; ++w) gmax = fmaxf(gmax, s_max[w]);
    float total = 0.0f;
    float weight[kAttnWarps];
#pragma unroll
    for (int w = 0; w < kAttnWarps; ++w) {
      weight[w] = s_max[w] == -INFINITY ? 0.0f : expf(s_max[w] - gmax);
      total += s_sum[w] * weight[w];
    }
    if (partial == nullptr) {
      const float inv = total > 0.0f ? 1.0f / total : 0.0f;
      for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float o = 0.0f;
#pragma unroll
        for (int w = 0; w < kAttnWarps; ++w) o = fmaf(s_acc[w][d], weight[w], o);
        out[task * D + d] = o * inv;
      }
    } else {
      float* rec = partial + (task * splits + blockIdx.y) * (D + 2);  // [max, sum, acc[D]]
      if (threadIdx.x == 0) {
        rec[0] = gmax;
        rec[1] = total;
      }
      for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float o = 0.0f;
#pragma unroll
        for (int w = 0; w < kAttnWarps; ++w) o = fmaf(s_acc[w][d], weight[w], o);
        rec[2 + d] = o;
      }
      if (counters != nullptr) {
        __threadfence();  // each thread's part of the record is visible to the merging block
        __syncthreads();  // ... and the whole record is written
        if (threadIdx.x == 0) {
          s_last = atomicAdd(&counters[task], 1u) == static_cast<unsigned>(splits - 1);
        }
        __syncthreads();
        if (s_last) {
          __threadfence();
          // Merge: one thread per split reads that split's (max, sum) into shared memory, so the
          // records' latency is paid once, not once per split; then each output dim sums its
          // splits' accumulators with loads that do not wait on each other.
          const float* base = partial + task * splits * (D + 2);
          for (int64_t s = threadIdx.x; s < splits; s += blockDim.x) {
            s_split_max[s] = __ldcg(base + s * (D + 2));
            s_split_sum[s] = __ldcg(base + s * (D + 2) + 1);
          }
          __syncthreads();
          float m_all = -INFINITY;
          for (int64_t s = 0; s < splits; ++s) m_all = fmaxf(m_all, s_split_max[s]);
          __syncthreads();  // every thread has read the maxima before they become weights
          for (int64_t s = threadIdx.x; s < splits; s += blockDim.x) {
            const float ms = s_split_max[s];
            s_split_max[s] = ms == -INFINITY ? 0.0f : expf(ms - m_all);  // the split's weight
          }
          __syncthreads();
          float l_all = 0.0f;
          for (int64_t s = 0; s < splits; ++s) l_all = fmaf(s_split_sum[s], s_split_max[s], l_all);
          const float inv = l_all > 0.0f ? 1.0f / l_all : 0.0f;
          for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
            float o = 0.0f;
#pragma unroll 8
            for (int64_t s = 0; s < splits; ++s) {
              const float w = s_split_max[s];
              if (w != 0.0f) o = fmaf(__ldcg(base + s * (D + 2) + 2 + d), w, o);
            }
            out[task * D + d] = o * inv;
          }
          if (threadIdx.x == 0) counters[task] = 0;  // ready for the next call
        }
      }
    }
    __syncthreads();
  }
}

// ------------------------------------------------------------ decode, grouped-query heads
// One query row (decode) with 2 to 8 query heads per kv head, head dim 64, 128 or 256, keys and
// values f32 or f16 in contiguous rows (a KV cache): one block per (kv head, key split), one warp
// per query head of the group. The block copies each tile of 32 keys and their values into shared
// memory once, coalesced (cp.async, the next tile in flight while this one is used), and every warp
// reads its key rows (one per lane, for the scores) and value rows (for the accumulators) from
// there. attention_kernel instead reads the keys and values once per query head, and its one key
// row per lane makes each load instruction touch 32 rows. Each score is attention_kernel's fmaf
// chain over d, its online softmax per 32 keys, its (max, sum, accumulators) records and merge,
// with one counter per kv head. The keys per split depend only on the key count (gqa_chunk: up to
// 32 splits of at least 32 keys, the best of 16, 32 and 64 splits and of 32, 64 and 128 keys in
// `test_cuda_vs_cpu --bench` on an H100), so a replay graph's launch (the most splits, the unused
// ones leaving at once) and an eager launch split the same keys the same way: the same results,
// bit for bit.
constexpr int kGqaTile = 32;  // keys per tile: one per lane for the scores
constexpr int kGqaMaxGroup = 8;

template <int kD, typename KV>
struct GqaShape {
  static constexpr int kRowK = kD * static_cast<int>(sizeof(KV)) + 16;  // padded: 16-byte reads of
                                                                        // 32 rows, no bank conflict
  static constexpr int kRowV = kD * static_cast<int>(sizeof(KV));
  static constexpr int kStage = kGqaTile * (kRowK + kRowV);
  static constexpr size_t kShared = 2 * static_cast<size_t>(kStage) + kGqaMaxGroup * kD * sizeof(float);
};

// Keys per split block for Sk keys: enough that there are at most `splits` (<= kMaxSplits)
// splits, a multiple of the tile, at least min_chunk (a multiple of the tile).
__host__ __device__ __forceinline__ int64_t gqa_chunk(int64_t Sk, int64_t min_chunk, int64_t splits) {
  int64_t c = (Sk + splits - 1) / splits;
  c = (c + kGqaTile - 1) / kGqaTile * kGqaTile;
  return c > min_chunk ? c : min_chunk;
}

// Starts copying keys c0 .. c0 + n - 1 of kv head hk (their key and value rows) into `stage`;
// `vec`: rows 16-byte aligned (else element by element, plain loads and stores).
template <int kD, typename KV>
__device__ __forceinline__ void gqa_load_tile(char* stage, const Strided3& k, const Strided3& v,
                                              int64_t hk, int64_t c0, int n, bool vec) {
  using S = GqaShape<kD, KV>;
  constexpr int kPieces = kD * static_cast<int>(sizeof(KV)) / 16;  // 16-byte pieces of a row
  constexpr int kPer = 16 / static_cast<int>(sizeof(KV));
  const KV* kb = static_cast<const KV*>(k.data);
  const KV* vb = static_cast<const KV*>(v.data);
  char* vs = stage + kGqaTile * S::kRowK;
  if (vec) {
    for (int t = threadIdx.x; t < n * kPieces; t += blockDim.x) {
      const int row = t / kPieces, piece = t - row * kPieces;
      const int64_t j = c0 + row;
      cp_async16(stage + row * S::kRowK + piece * 16, kb + j * k.s0 + hk * k.s1 + piece * kPer);
      cp_async16(vs + row * S::kRowV + piece * 16, vb + j * v.s0 + hk * v.s1 + piece * kPer);
    }
  } else {
    for (int t = threadIdx.x; t < n * kD; t += blockDim.x) {
      const int row = t / kD, d = t - row * kD;
      const int64_t j = c0 + row;
      reinterpret_cast<KV*>(stage + row * S::kRowK)[d] = kb[j * k.s0 + hk * k.s1 + d];
      reinterpret_cast<KV*>(vs + row * S::kRowV)[d] = vb[j * v.s0 + hk * v.s1 + d];
    }
  }
  cp_async_commit();
}

template <int kD, typename KV>
__global__ void __launch_bounds__(kGqaMaxGroup * 32)
    attention_decode_gqa_kernel(Strided3 q, Strided3 k, Strided3 v, const void* mask, DType mask_dtype,
                                int64_t mask_s1, float scale, float softcap, bool causal,
                                int64_t q_pos_offset, int64_t Sk, int64_t min_chunk,
                                int64_t max_splits, float* out,
                                float* partial, unsigned* counters, const int64_t* dyn, bool l2) {
  using S = GqaShape<kD, KV>;
  constexpr int kPerLane = kD / 32;
  extern __shared__ __align__(16) char gqa_shared[];
  __shared__ float s_weight[kGqaMaxGroup][kMaxSplits];
  __shared__ bool s_last;
  const int lane = threadIdx.x & 31;
  const int g = threadIdx.x >> 5;  // this warp's query head within the group
  const int group = blockDim.x >> 5;
  const int64_t hk = blockIdx.x;
  const int64_t h = hk * group + g;
  if (dyn != nullptr) {  // a replay graph's values: [Sk, q_pos_offset, k offset, v offset]
    Sk = dyn[0];
    q_pos_offset = dyn[1];
    k.data = static_cast<const char*>(k.data) + dyn[2];
    v.data = static_cast<const char*>(v.data) + dyn[3];
  }
  const int64_t chunk = gqa_chunk(Sk, min_chunk, max_splits);
  const int64_t splits = Sk > 0 ? (Sk + chunk - 1) / chunk : 1;
  int64_t keys = Sk;
  if (causal) keys = q_pos_offset < 0 ? 0 : (q_pos_offset + 1 < Sk ? q_pos_offset + 1 : Sk);
  const int64_t j0 = blockIdx.y * chunk;
  const int64_t j1 = j0 + chunk < keys ? j0 + chunk : keys;
  const int64_t n_keys = j1 > j0 ? j1 - j0 : 0;
  constexpr int64_t kes = sizeof(KV);
  if (l2 && blockIdx.y < splits) {
    // This split's key and value rows into the L2 while the kernel before this one finishes (a
    // programmatic dependent launch; dyn is written before the graph starts).
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
      prefetch_l2_lines(static_cast<const KV*>(k.data) + j * k.s0 + hk * k.s1, kD * kes, 0, 1);
      prefetch_l2_lines(static_cast<const KV*>(v.data) + j * v.s0 + hk * v.s1, kD * kes, 0, 1);
    }
  }
  pdl_wait();  // launched as a programmatic dependent launch (cuda_common.cuh)
  pdl_launch_dependents();
  if (blockIdx.y >= splits) return;  // a replay graph's split past the keys
  const bool vec = ((reinterpret_cast<uintptr_t>(k.data) | reinterpret_cast<uintptr_t>(v.data)) & 15) == 0;
  float* sq = reinterpret_cast<float*>(gqa_shared + 2 * S::kStage) + g * kD;
  const int tiles = static_cast<int>((n_keys + kGqaTile - 1) / kGqaTile);
  auto tile_keys = [&](int t) {
    const int64_t left = n_keys - static_cast<int64_t>(t) * kGqaTile;
    return static_cast<int>(left < kGqaTile ? left : kGqaTile);
  };
  if (tiles > 0) gqa_load_tile<kD, KV>(gqa_shared, k, v, hk, j0, tile_keys(0), vec);
  if (tiles > 1) gqa_load_tile<kD, KV>(gqa_shared + S::kStage, k, v, hk, j0 + kGqaTile, tile_keys(1), vec);
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) sq[lane + 32 * r] = load_float(q.data, q.dtype, h * q.s1 + (lane + 32 * r) * q.s2);
  float acc[kPerLane];
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) acc[r] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int t = 0; t < tiles; ++t) {
    if (t + 1 < tiles) {
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // the tile (and, the first time, every warp's q) is in shared memory
    char* stage = gqa_shared + (t & 1) * S::kStage;
    const int n_here = tile_keys(t);
    const int64_t c0 = j0 + static_cast<int64_t>(t) * kGqaTile;
    float s = -INFINITY;
    if (lane < n_here) {
      float part = 0.0f;
      const char* kr = stage + lane * S::kRowK;
      if constexpr (sizeof(KV) == 4) {
        const float4* k4 = reinterpret_cast<const float4*>(kr);
        const float4* q4 = reinterpret_cast<const float4*>(sq);
#pragma unroll
        for (int c = 0; c < kD / 4; ++c) {
          const float4 kv = k4[c], qv = q4[c];
          part = fmaf(qv.x, kv.x, part);
          part = fmaf(qv.y, kv.y, part);
          part = fmaf(qv.z, kv.z, part);
          part = fmaf(qv.w, kv.w, part);
        }
      } else {
        const uint4* k8 = reinterpret_cast<const uint4*>(kr);
#pragma unroll
        for (int c = 0; c < kD / 8; ++c) part = dot_half8(k8[c], sq + 8 * c, part);
      }
      s = part * scale;
      if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
      if (mask != nullptr) s += load_float(mask, mask_dtype, (c0 + lane) * mask_s1);
    }
    float p;
    if (softmax_step<kPerLane>(s, m, l, acc, p)) {
      const KV* vr = reinterpret_cast<const KV*>(stage + kGqaTile * S::kRowK);
      // Every row of the tile: a key of weight 0 (masked, past the keys: its row not copied) adds
      // nothing, even where its row holds a NaN.
#pragma unroll 8
      for (int jj = 0; jj < kGqaTile; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
        for (int r = 0; r < kPerLane; ++r) {
          float vv;
          if constexpr (sizeof(KV) == 4) {
            vv = vr[jj * kD + lane + 32 * r];
          } else {
            vv = __half2float(vr[jj * kD + lane + 32 * r]);
          }
          acc[r] = pj != 0.0f ? fmaf(pj, vv, acc[r]) : acc[r];
        }
      }
    }
    __syncthreads();  // every warp is done with this stage
    if (t + 2 < tiles) gqa_load_tile<kD, KV>(stage, k, v, hk, c0 + 2 * kGqaTile, tile_keys(t + 2), vec);
  }
  if (splits == 1) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) out[h * kD + lane + 32 * r] = acc[r] * inv;
    return;
  }
  float* rec = partial + (h * splits + blockIdx.y) * (kD + 2);  // [max, sum, acc[D]]
  if (lane == 0) {
    rec[0] = m;
    rec[1] = l;
  }
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) rec[2 + lane + 32 * r] = acc[r];
  __threadfence();  // each thread's part of the records is visible to the merging block
  __syncthreads();  // ... and every warp's record is written
  if (threadIdx.x == 0) s_last = atomicAdd(&counters[hk], 1u) == static_cast<unsigned>(splits - 1);
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  // The last split block of this kv head merges: each warp its query head's records. The loads
  // are issued together (the (max, sum) pairs of splits lane and lane + 32 at once, then 16 splits'
  // accumulators at a time) so that the merge waits for the L2 a few times, not once per split; the
  // sums run in split order as before.
  static_assert(kMaxSplits <= 64, "a lane holds the (max, sum) of two splits");
  const float* base = partial + h * splits * (kD + 2);
  float ms[2], ls[2];
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    const int64_t sp = lane + 32 * u;
    ms[u] = sp < splits ? __ldcg(base + sp * (kD + 2)) : -INFINITY;
    ls[u] = sp < splits ? __ldcg(base + sp * (kD + 2) + 1) : 0.0f;
  }
  const float m_all = warp_max(fmaxf(ms[0], ms[1]));
  float l_part = 0.0f;
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    const int64_t sp = lane + 32 * u;
    if (sp < splits) {
      const float w = ms[u] == -INFINITY ? 0.0f : expf(ms[u] - m_all);
      s_weight[g][sp] = w;
      l_part = fmaf(ls[u], w, l_part);
    }
  }
  const float l_all = warp_sum(l_part);
  __syncwarp();
  const float inv = l_all > 0.0f ? 1.0f / l_all : 0.0f;
  // splits whose accumulators are loaded before they are summed (32 values a lane)
  constexpr int kBatch = 32 / kPerLane;
  float o[kPerLane];
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) o[r] = 0.0f;
  for (int64_t s0 = 0; s0 < splits; s0 += kBatch) {
    float a[kBatch][kPerLane];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
#pragma unroll
      for (int r = 0; r < kPerLane; ++r) {
        a[u][r] = s0 + u < splits ? __ldcg(base + (s0 + u) * (kD + 2) + 2 + lane + 32 * r) : 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (s0 + u < splits) {
        const float w = s_weight[g][s0 + u];
#pragma unroll
        for (int r = 0; r < kPerLane; ++r) o[r] = w != 0.0f ? fmaf(a[u][r], w, o[r]) : o[r];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) out[h * kD + lane + 32 * r] = o[r] * inv;
  if (threadIdx.x == 0) counters[hk] = 0;  // ready for the next call
}

// Prefill (many query rows): flash attention's tiling in f32. A block takes kTileQ query rows of
// one head and walks the visible keys BK at a time; the tile's queries, keys, values and
// weights sit in shared memory, so each key and value row is read from memory once per block
// instead of once per query row. Thread t computes the R rows g, g + 16, ... (g = t / 16; R of 1, 2
// or 4: tiles of 16, 32 or 64 query rows) against keys l, l + 16, ... of the tile (l = t % 16): each score is the same sequential f32 dot
// product over d as attention_kernel's, then scale, softcap and mask as there; the 16 threads of a
// row (a half warp) reduce its max and sum with shuffles, and each accumulates its rows' outputs
// for the dims 4l + 64u .. 4l + 64u + 3. Online softmax per row (running max and sum); a key of
// weight 0 adds nothing, even where its value row holds a NaN; a row that sees no key gets zeros.
// Each row's arithmetic is the same whatever R, so the tile height changes no result. Smaller
// tiles make more blocks, each with a shorter chain of work: a prompt of few heads (SmolLM2: 9, 512
// rows) otherwise leaves most multiprocessors idle while the blocks of its last rows, which see
// every key, finish. Under the causal mask the blocks of the last rows (the most keys) start first.
constexpr int kTileThreads = 256;

template <int DT, int BK, int R>
struct TileShape {
  static constexpr int kTileQ = 16 * R;        // query rows per block
  static constexpr int kStride = DT + 4;       // floats per q/k/v row in shared memory
  static constexpr int kPStride = BK + 4;      // floats per weight row
  static constexpr int kCols = BK / 16;        // keys per thread
  static constexpr int kChunks = DT / 64;      // float4 columns of the output per thread
  static constexpr size_t kSharedBytes =
      sizeof(float) * (static_cast<size_t>(kTileQ + 2 * BK) * kStride + static_cast<size_t>(kTileQ) * kPStride);
};

// rows [r0, r0 + rows) of x (head h) into dst [rows][DT], zeros past D and past `valid` rows.
template <int DT>
__device__ __forceinline__ void load_tile(const Strided3& x, int64_t r0, int rows, int valid, int64_t h,
                                          int64_t D, bool vec4, float* dst, int stride) {
  if (vec4) {
    constexpr int kQuads = DT / 4;
    for (int t = threadIdx.x; t < rows * kQuads; t += blockDim.x) {
      const int r = t / kQuads, d4 = t - r * kQuads;
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (r < valid && 4 * d4 < D) {
        v = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(x.data) + (r0 + r) * x.s0 + h * x.s1) + d4);
      }
      *reinterpret_cast<float4*>(dst + r * stride + 4 * d4) = v;
    }
  } else {
    for (int t = threadIdx.x; t < rows * DT; t += blockDim.x) {
      const int r = t / DT, d = t - r * DT;
      dst[r * stride + d] = r < valid && d < D ? load_float(x.data, x.dtype, (r0 + r) * x.s0 + h * x.s1 + d * x.s2) : 0.0f;
    }
  }
}

template <int DT, int BK, int R>
__global__ void __launch_bounds__(kTileThreads)
    attention_tiled_kernel(Strided3 q, Strided3 k, Strided3 v, const void* mask, DType mask_dtype,
                           int64_t mask_s0, int64_t mask_s1, float scale, float softcap, bool causal,
                           int64_t q_pos_offset, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv,
                           int64_t D, float* out) {
  using Shape = TileShape<DT, BK, R>;
  constexpr int kStride = Shape::kStride, kPStride = Shape::kPStride, kCols = Shape::kCols;
  constexpr int kChunks = Shape::kChunks, kTileQ = Shape::kTileQ;
  extern __shared__ float4 tile_shared[];
  float* qs = reinterpret_cast<float*>(tile_shared);
  float* ks = qs + kTileQ * kStride;
  float* vs = ks + BK * kStride;
  float* ps = vs + BK * kStride;
  const int g = threadIdx.x >> 4, l = threadIdx.x & 15;
  const int64_t i0 = static_cast<int64_t>(causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * kTileQ;
  const int64_t h = blockIdx.y, hk = h / (Hq / Hkv);
  const int q_valid = static_cast<int>(Sq - i0 < kTileQ ? Sq - i0 : kTileQ);
  const bool k4 = rows_vec4(k, D), v4 = rows_vec4(v, D);
  load_tile<DT>(q, i0, kTileQ, q_valid, h, D, rows_vec4(q, D), qs, kStride);
  // keys past the tile's last query are invisible under the causal mask
  int64_t keys = Sk;
  if (causal) {
    const int64_t last = q_pos_offset + i0 + q_valid - 1;
    keys = last < 0 ? 0 : (last + 1 < Sk ? last + 1 : Sk);
  }
  float m[R], lsum[R], acc[R][kChunks][4];
#pragma unroll
  for (int rr = 0; rr < R; ++rr) {
    m[rr] = -INFINITY;
    lsum[rr] = 0.0f;
#pragma unroll
    for (int u = 0; u < kChunks; ++u) acc[rr][u][0] = acc[rr][u][1] = acc[rr][u][2] = acc[rr][u][3] = 0.0f;
  }
  for (int64_t j0 = 0; j0 < keys; j0 += BK) {
    const int k_valid = static_cast<int>(keys - j0 < BK ? keys - j0 : BK);
    __syncthreads();  // the previous tile's keys, values and weights are no longer read
    load_tile<DT>(k, j0, BK, k_valid, hk, D, k4, ks, kStride);
    load_tile<DT>(v, j0, BK, k_valid, hk, D, v4, vs, kStride);
    __syncthreads();
    float sc[R][kCols];
#pragma unroll
    for (int rr = 0; rr < R; ++rr) {
#pragma unroll
      for (int cc = 0; cc < kCols; ++cc) sc[rr][cc] = 0.0f;
    }
    for (int d = 0; d < DT; d += 4) {
      float4 qv[R], kv[kCols];
#pragma unroll
      for (int rr = 0; rr < R; ++rr) qv[rr] = *reinterpret_cast<const float4*>(qs + (g + 16 * rr) * kStride + d);
#pragma unroll
      for (int cc = 0; cc < kCols; ++cc) kv[cc] = *reinterpret_cast<const float4*>(ks + (l + 16 * cc) * kStride + d);
#pragma unroll
      for (int rr = 0; rr < R; ++rr) {
#pragma unroll
        for (int cc = 0; cc < kCols; ++cc) {
          float t = sc[rr][cc];
          t = fmaf(qv[rr].x, kv[cc].x, t);
          t = fmaf(qv[rr].y, kv[cc].y, t);
          t = fmaf(qv[rr].z, kv[cc].z, t);
          t = fmaf(qv[rr].w, kv[cc].w, t);
          sc[rr][cc] = t;
        }
      }
    }
#pragma unroll
    for (int rr = 0; rr < R; ++rr) {
      const int64_t i = i0 + g + 16 * rr;
      float rmax = -INFINITY;
#pragma unroll
      for (int cc = 0; cc < kCols; ++cc) {
        const int jj = l + 16 * cc;
        const int64_t j = j0 + jj;
        float s = -INFINITY;
        if (jj < k_valid && i < Sq && (!causal || j <= q_pos_offset + i)) {
          s = sc[rr][cc] * scale;
          if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
          if (mask != nullptr) s += load_float(mask, mask_dtype, i * mask_s0 + j * mask_s1);
        }
        sc[rr][cc] = s;
        rmax = fmaxf(rmax, s);
      }
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) rmax = fmaxf(rmax, __shfl_xor_sync(0xffffffffu, rmax, o));
      const float m_new = fmaxf(m[rr], rmax);
      // nothing visible yet: the weights stay 0 and the running values unchanged
      const float corr = m_new == -INFINITY ? 1.0f : expf(m[rr] - m_new);
      float psum = 0.0f;
#pragma unroll
      for (int cc = 0; cc < kCols; ++cc) {
        const float p = sc[rr][cc] == -INFINITY ? 0.0f : expf(sc[rr][cc] - m_new);
        ps[(g + 16 * rr) * kPStride + l + 16 * cc] = p;
        psum += p;
      }
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) psum += __shfl_xor_sync(0xffffffffu, psum, o);
      lsum[rr] = lsum[rr] * corr + psum;
      m[rr] = m_new;
#pragma unroll
      for (int u = 0; u < kChunks; ++u) {
        acc[rr][u][0] *= corr;
        acc[rr][u][1] *= corr;
        acc[rr][u][2] *= corr;
        acc[rr][u][3] *= corr;
      }
    }
    __syncthreads();  // every row's weights are in ps
    for (int jj = 0; jj < k_valid; ++jj) {
      float p[R];
#pragma unroll
      for (int rr = 0; rr < R; ++rr) p[rr] = ps[(g + 16 * rr) * kPStride + jj];
#pragma unroll
      for (int u = 0; u < kChunks; ++u) {
        const float4 vv = *reinterpret_cast<const float4*>(vs + jj * kStride + 4 * l + 64 * u);
#pragma unroll
        for (int rr = 0; rr < R; ++rr) {
          if (p[rr] != 0.0f) {
            acc[rr][u][0] = fmaf(p[rr], vv.x, acc[rr][u][0]);
            acc[rr][u][1] = fmaf(p[rr], vv.y, acc[rr][u][1]);
            acc[rr][u][2] = fmaf(p[rr], vv.z, acc[rr][u][2]);
            acc[rr][u][3] = fmaf(p[rr], vv.w, acc[rr][u][3]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < R; ++rr) {
    const int64_t i = i0 + g + 16 * rr;
    if (i >= Sq) continue;
    const float inv = lsum[rr] > 0.0f ? 1.0f / lsum[rr] : 0.0f;
    float* o = out + (i * Hq + h) * D;
#pragma unroll
    for (int u = 0; u < kChunks; ++u) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t d = 4 * l + 64 * u + e;
        if (d < D) o[d] = acc[rr][u][e] * inv;
      }
    }
  }
}

// Launches attention_tiled_kernel<DT, BK, R> (its shared memory above the default 48 KiB, asked
// for once); false, launching nothing, where the device allows less.
template <int DT, int BK, int R>
bool launch_attention_tiled_rows(const View& q, const View& k, const View& v, const void* mp, DType mdt,
                                 int64_t ms0, int64_t ms1, float scale, float softcap, bool causal,
                                 int64_t q_pos_offset, float* op, cudaStream_t stream) {
  using Shape = TileShape<DT, BK, R>;
  static const bool allowed = allow_dynamic_shared(attention_tiled_kernel<DT, BK, R>, Shape::kSharedBytes);
  if (!allowed) return false;
  const int64_t Sq = q.shape[0], Hq = q.shape[1], D = q.shape[2];
  const dim3 grid(static_cast<unsigned>((Sq + Shape::kTileQ - 1) / Shape::kTileQ), static_cast<unsigned>(Hq));
  attention_tiled_kernel<DT, BK, R><<<grid, kTileThreads, Shape::kSharedBytes, stream>>>(
      strided3(q), strided3(k), strided3(v), mp, mdt, ms0, ms1, scale, softcap, causal, q_pos_offset,
      Sq, k.shape[0], Hq, k.shape[1], D, op);
  return true;
}

// Query rows per tile for an Sq-row prompt of Hq heads: `rows` (16, 32 or 64) where
// TL_CUDA_ATTN_TILE_ROWS sets it; else the tallest tile that still makes at least ~3 blocks per
// multiprocessor (tall tiles read each key and value row fewer times; short ones finish sooner).
int attention_tile_rows(int64_t Sq, int64_t Hq, int64_t sms, int rows) {
  if (rows != 0) return rows;
  for (int r : {64, 32}) {
    if (((Sq + r - 1) / r) * Hq >= 3 * sms) return r;
  }
  return 16;
}

template <int DT, int BK>
bool launch_attention_tiled(int rows, const View& q, const View& k, const View& v, const void* mp, DType mdt,
                            int64_t ms0, int64_t ms1, float scale, float softcap, bool causal,
                            int64_t q_pos_offset, float* op, cudaStream_t stream) {
  if (rows == 64) {
    return launch_attention_tiled_rows<DT, BK, 4>(q, k, v, mp, mdt, ms0, ms1, scale, softcap, causal, q_pos_offset, op, stream);
  }
  if (rows == 32) {
    return launch_attention_tiled_rows<DT, BK, 2>(q, k, v, mp, mdt, ms0, ms1, scale, softcap, causal, q_pos_offset, op, stream);
  }
  return launch_attention_tiled_rows<DT, BK, 1>(q, k, v, mp, mdt, ms0, ms1, scale, softcap, causal, q_pos_offset, op, stream);
}

// Merges the key splits' (max, sum, accumulators) records of each (row, head) task.
__global__ void attention_combine_kernel(const float* partial, int splits, int64_t tasks, int64_t D,
                                         float* out) {
  pdl_wait();  // launched as a programmatic dependent launch (cuda_common.cuh)
  pdl_launch_dependents();
  for (int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    const float* base = partial + task * splits * (D + 2);
    float gmax = -INFINITY;
    for (int s = 0; s < splits; ++s) gmax = fmaxf(gmax, base[s * (D + 2)]);
    float total = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float ms = base[s * (D + 2)];
      if (ms != -INFINITY) total += base[s * (D + 2) + 1] * expf(ms - gmax);
    }
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      float o = 0.0f;
      for (int s = 0; s < splits; ++s) {
        const float ms = base[s * (D + 2)];
        if (ms != -INFINITY) o = fmaf(base[s * (D + 2) + 2 + d], expf(ms - gmax), o);
      }
      out[task * D + d] = o * inv;
    }
  }
}

__global__ void causal_mask_kernel(int64_t offset, int64_t n, int64_t m, float* out) {
  const int64_t total = n * m;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = t / m;
    const int64_t j = t - i * m;
    out[t] = j <= i + offset ? 0.0f : -INFINITY;
  }
}

}  // namespace

void CudaKernels::attention(const View& q, const View& k, const View& v, const View& mask,
                            float scale, bool causal, int64_t q_pos_offset, const View& out,
                            float softcap) {
  if (q.ndim != 3 || k.ndim != 3 || v.ndim != 3) {
    throw KernelError("attention: cuda kernel expects 3-D q, k, v views");
  }
  if (!is_floating(q.dtype) || !is_floating(k.dtype) || !is_floating(v.dtype) ||
      out.dtype != DType::F32) {
    throw KernelError("attention: q, k, v must be floating and out f32");
  }
  if (mask.data != nullptr && !is_floating(mask.dtype)) {
    throw KernelError(std::string("attention: mask must be floating, got ") +
                      dtype_name(mask.dtype));
  }
  const int64_t Sq = q.shape[0], Hq = q.shape[1], D = q.shape[2];
  const int64_t Sk = k.shape[0], Hkv = k.shape[1];
  if (Hkv == 0 || Hq % Hkv != 0) {
    throw KernelError("attention: query heads must be a multiple of kv heads");
  }
  if (D > kMaxHeadDim) {
    throw KernelError("attention: head dim " + std::to_string(D) +
                      " is larger than the cuda kernel's limit of " + std::to_string(kMaxHeadDim));
  }
  if (Sq == 0 || Hq == 0 || D == 0) return;
  // In a replay graph the key count, the query position and where the keys start change at each
  // replay (read by the kernel), so the split count cannot depend on them: as many splits as the
  // GPU wants, each of at least 128 keys, the ones past the keys empty.
  const DynArgs dyn = dyn_args({Sk, q_pos_offset}, {k.data, v.data});
  if (!dyn.launch) return;
  if (attention_decode_gqa(q, k, v, mask, scale, causal, q_pos_offset, out, softcap, dyn.device)) return;
  const int64_t tasks = Sq * Hq;
  // Split the keys over more blocks when the (row, head) tasks alone can't fill the GPU.
  int64_t splits = 1;
  if (attention_scratch_ != nullptr && tasks < 2 * sm_count_ && (Sk >= 128 || dyn.device != nullptr)) {
    splits = (4 * sm_count_ + tasks - 1) / tasks;  // blocks enough for a few per multiprocessor
    // at least ~128 keys per block: 32 per warp
    const int64_t by_keys = dyn.device != nullptr ? kMaxSplits : (Sk + 127) / 128;
    const int64_t by_scratch = static_cast<int64_t>(attention_scratch_floats_) / (tasks * (D + 2));
    splits = std::min<int64_t>({splits, by_keys, by_scratch, kMaxSplits});
    if (splits < 1) splits = 1;
  }
  const void* mp = mask.data;
  const int64_t ms0 = mask.data ? mask.strides[0] : 0, ms1 = mask.data ? mask.strides[1] : 0;
  auto* op = static_cast<float*>(out.data);
  // Prefill: the tiled kernel once the query rows fill a few tiles (not in a replay graph, whose
  // key count changes per replay).
  if (dyn.device == nullptr && Sq >= kTiledMinRows && D <= 256 && Hq <= 65535) {
    const int rows = attention_tile_rows(Sq, Hq, sm_count_, tuning_.attn_tile_rows);
    const bool launched =
        D <= 64    ? launch_attention_tiled<64, 64>(rows, q, k, v, mp, mask.dtype, ms0, ms1, scale, softcap, causal, q_pos_offset, op, stream_)
        : D <= 128 ? launch_attention_tiled<128, 32>(rows, q, k, v, mp, mask.dtype, ms0, ms1, scale, softcap, causal, q_pos_offset, op, stream_)
                   : launch_attention_tiled<256, 32>(rows, q, k, v, mp, mask.dtype, ms0, ms1, scale, softcap, causal, q_pos_offset, op, stream_);
    if (launched) {
      check_launch("attention");
      return;
    }
  }
  // Keys per split block in a replay graph (TL_CUDA_ATTN_MIN_CHUNK, for A/B measurements).
  const int64_t min_chunk = dyn.device != nullptr ? tuning_.attn_min_chunk : 1;
  float* partial = splits > 1 ? attention_scratch_ : nullptr;
  // The last split block of each task merges in the same launch when there is a counter per task.
  unsigned* counters =
      partial != nullptr && tasks <= static_cast<int64_t>(kAttentionCounters) ? attention_counters_ : nullptr;
  const dim3 grid(static_cast<unsigned>(tasks < (1 << 30) ? tasks : (1 << 30)),
                  static_cast<unsigned>(splits));
  const bool rows8 = tuning_.attn_rows8;
  // (The inner condition keeps the 16-row variant from being instantiated for wider heads.)
#define TL_LAUNCH_ATTENTION(PER_LANE)                                                    \
  launch_kernel(tuning_.pdl, PER_LANE <= 2 && !rows8 ? attention_kernel<PER_LANE, PER_LANE <= 2 ? 16 : 8> \
                                                     : attention_kernel<PER_LANE, 8>,       \
      grid, dim3(kAttnWarps * 32), 0, stream_,                                             \
      strided3(q), strided3(k), strided3(v), mp, mask.dtype, ms0, ms1, scale, softcap,    \
      causal, q_pos_offset, Sq, Sk, Hq, Hkv, D, op, partial, counters, dyn.device, min_chunk, \
      tuning_.pdl && tuning_.l2_prefetch)
  if (D <= 32) {
    TL_LAUNCH_ATTENTION(1);
  } else if (D <= 64) {
    TL_LAUNCH_ATTENTION(2);
  } else if (D <= 128) {
    TL_LAUNCH_ATTENTION(4);
  } else if (D <= 256) {
    TL_LAUNCH_ATTENTION(8);
  } else {
    TL_LAUNCH_ATTENTION(16);
  }
#undef TL_LAUNCH_ATTENTION
  check_launch("attention");
  if (partial != nullptr && counters == nullptr) {
    launch_kernel(tuning_.pdl, attention_combine_kernel, dim3(static_cast<unsigned>(tasks < 65535 ? tasks : 65535)),
                  dim3(128), 0, stream_, partial, static_cast<int>(splits), tasks, D, op);
    check_launch("attention");
  }
}

bool CudaKernels::prepare_attention_gqa() {
  bool ok = true;
  ok = allow_dynamic_shared(attention_decode_gqa_kernel<64, float>, GqaShape<64, float>::kShared) && ok;
  ok = allow_dynamic_shared(attention_decode_gqa_kernel<128, float>, GqaShape<128, float>::kShared) && ok;
  ok = allow_dynamic_shared(attention_decode_gqa_kernel<256, float>, GqaShape<256, float>::kShared) && ok;
  ok = allow_dynamic_shared(attention_decode_gqa_kernel<64, __half>, GqaShape<64, __half>::kShared) && ok;
  ok = allow_dynamic_shared(attention_decode_gqa_kernel<128, __half>, GqaShape<128, __half>::kShared) && ok;
  ok = allow_dynamic_shared(attention_decode_gqa_kernel<256, __half>, GqaShape<256, __half>::kShared) && ok;
  return ok;
}

bool CudaKernels::attention_decode_gqa(const View& q, const View& k, const View& v, const View& mask,
                                       float scale, bool causal, int64_t q_pos_offset, const View& out,
                                       float softcap, const int64_t* dyn) {
  const int64_t Sq = q.shape[0], Hq = q.shape[1], D = q.shape[2];
  const int64_t Sk = k.shape[0], Hkv = k.shape[1];
  const int64_t group = Hq / Hkv;
  const bool f32 = k.dtype == DType::F32;
  const int64_t per16 = f32 ? 4 : 8;  // elements in 16 bytes
  auto rows_ok = [&](const View& x) {
    return x.strides[2] == 1 && x.strides[0] % per16 == 0 && x.strides[1] % per16 == 0;
  };
  if (!tuning_.attn_gqa || !attention_gqa_ready_ || Sq != 1 || group < 2 || group > kGqaMaxGroup ||
      (D != 64 && D != 128 && D != 256) || k.dtype != v.dtype ||
      (k.dtype != DType::F32 && k.dtype != DType::F16) || !rows_ok(k) || !rows_ok(v) ||
      attention_counters_ == nullptr || Hkv > static_cast<int64_t>(kAttentionCounters) || Hkv > 65535 ||
      Hq * (D + 2) * kMaxSplits > static_cast<int64_t>(attention_scratch_floats_)) {
    return false;
  }
  const int64_t min_chunk = tuning_.attn_gqa_chunk, max_splits = tuning_.attn_gqa_splits;
  // A replay graph: as many splits as any key count may use (gqa_chunk's bound); eager: as many as
  // these keys use.
  const int64_t chunk = gqa_chunk(Sk, min_chunk, max_splits);
  const int64_t splits = dyn != nullptr ? max_splits : (Sk > 0 ? (Sk + chunk - 1) / chunk : 1);
  const dim3 grid(static_cast<unsigned>(Hkv), static_cast<unsigned>(splits));
  const dim3 block(static_cast<unsigned>(group * 32));
  const void* mp = mask.data;
  const int64_t ms1 = mask.data ? mask.strides[1] : 0;
  auto* op = static_cast<float*>(out.data);
  const bool l2 = tuning_.pdl && tuning_.l2_prefetch;
#define TL_LAUNCH_GQA(DIM, KV)                                                                       \
  launch_kernel(tuning_.pdl, attention_decode_gqa_kernel<DIM, KV>, grid, block,                      \
                GqaShape<DIM, KV>::kShared, stream_, strided3(q), strided3(k), strided3(v), mp,      \
                mask.dtype, ms1, scale, softcap, causal, q_pos_offset, Sk, min_chunk, max_splits, op, \
                attention_scratch_, attention_counters_, dyn, l2)
  if (f32) {
    if (D == 64) TL_LAUNCH_GQA(64, float);
    else if (D == 128) TL_LAUNCH_GQA(128, float);
    else TL_LAUNCH_GQA(256, float);
  } else {
    if (D == 64) TL_LAUNCH_GQA(64, __half);
    else if (D == 128) TL_LAUNCH_GQA(128, __half);
    else TL_LAUNCH_GQA(256, __half);
  }
#undef TL_LAUNCH_GQA
  check_launch("attention");
  return true;
}

void CudaKernels::causal_mask(int64_t offset, const View& out) {
  if (out.dtype != DType::F32 || out.ndim != 2) {
    throw KernelError("causal_mask: output must be a 2-D f32 view");
  }
  const int64_t n = out.shape[0], m = out.shape[1];
  if (n * m == 0) return;
  causal_mask_kernel<<<grid_for(n * m, 256), 256, 0, stream_>>>(offset, n, m,
                                                                 static_cast<float*>(out.data));
  check_launch("causal_mask");
}

}  // namespace cuda
}  // namespace tl
