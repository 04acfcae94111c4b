// Causal mask and scaled dot-product attention with grouped-query heads. attention runs one
// threadgroup of TL_ATTN_THREADS threads per (query row i, query head h) and walks the keys in
// chunks of TL_ATTN_THREADS with an online softmax (running max and sum, rescaled per chunk), so
// no [Sq, Sk] score matrix is ever stored and Sk is unbounded. D <= TL_ATTN_MAX_D (host-checked).
// Every branch that skips a barrier depends only on values uniform across the threadgroup.
#include "tl_common.h"

#define TL_ATTN_DIMS_PER_THREAD (TL_ATTN_MAX_D / TL_ATTN_THREADS)

// CPU twin: Kernels::causal_mask (cpp/backends/cpu/kernels_attention.cpp).
// out [n, m] f32: 0 where j <= i + offset, -inf elsewhere. n is in p.sq, m in p.mask_cols.
kernel void tl_causal_mask(constant TLAttentionParams& p [[buffer(0)]],
                           device float* out [[buffer(1)]],
                           uint gid [[thread_position_in_grid]],
                           uint grid [[threads_per_grid]]) {
  long total = p.sq * p.mask_cols;
  for (long t = gid; t < total; t += grid) {
    long i = t / p.mask_cols;
    long j = t % p.mask_cols;
    out[t] = (j <= i + p.q_pos_offset) ? 0.0f : -INFINITY;
  }
}

// CPU twin: Kernels::attention (cpp/backends/cpu/kernels_attention.cpp). q [Sq, Hq, D],
// k/v [Sk, Hkv, D] (any strides), optional additive mask [Sq, Sk] f32, out contiguous
// [Sq, Hq, D] f32. A query row that sees no key (everything masked) gets zeros.
kernel void tl_attention(constant TLAttentionParams& p [[buffer(0)]],
                         device const uchar* q [[buffer(1)]],
                         device const uchar* k [[buffer(2)]],
                         device const uchar* v [[buffer(3)]],
                         device const uchar* mask [[buffer(4)]],
                         device float* out [[buffer(5)]],
                         uint2 group [[threadgroup_position_in_grid]],
                         uint2 local [[thread_position_in_threadgroup]]) {
  // Position attributes of one kernel share one vector width (an MSL rule), hence uint2 local.
  uint tid = local.x;
  threadgroup float q_row[TL_ATTN_MAX_D];
  threadgroup float probs[TL_ATTN_THREADS];
  threadgroup float scratch[TL_ATTN_THREADS];

  long h = group.x;
  long i = group.y;
  if (h >= p.hq || i >= p.sq) return;  // uniform per threadgroup
  long kv_head = h / (p.hq / p.hkv);

  for (long d = tid; d < p.d; d += TL_ATTN_THREADS) {
    q_row[d] = tl_load_f(q, i * p.q.strides[0] + h * p.q.strides[1] + d * p.q.strides[2],
                         p.q.dtype);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  long key_end = p.sk;
  if (p.causal && p.q_pos_offset + i + 1 < key_end) key_end = p.q_pos_offset + i + 1;

  float running_max = -INFINITY;
  float running_sum = 0.0f;
  float acc[TL_ATTN_DIMS_PER_THREAD];
  for (int c = 0; c < TL_ATTN_DIMS_PER_THREAD; ++c) acc[c] = 0.0f;

  for (long j0 = 0; j0 < key_end; j0 += TL_ATTN_THREADS) {
    long j = j0 + tid;
    float score = -INFINITY;
    if (j < key_end) {
      long k_base = j * p.k.strides[0] + kv_head * p.k.strides[1];
      float dot = 0.0f;
      for (long d = 0; d < p.d; ++d) {
        dot += q_row[d] * tl_load_f(k, k_base + d * p.k.strides[2], p.k.dtype);
      }
      score = dot * p.scale;
      if (p.softcap > 0.0f) {
        score = p.softcap * tanh(score / p.softcap);
      }
      if (p.has_mask) {
        score += tl_load_f(mask, i * p.mask.strides[0] + j * p.mask.strides[1], p.mask.dtype);
      }
    }
    float chunk_max = tl_threadgroup_max(scratch, score, tid, TL_ATTN_THREADS);
    float new_max = max(running_max, chunk_max);
    if (new_max == -INFINITY) continue;  // nothing visible yet; uniform across the threadgroup
    float prob = score == -INFINITY ? 0.0f : exp(score - new_max);
    probs[tid] = prob;
    float correction = running_max == -INFINITY ? 0.0f : exp(running_max - new_max);
    float chunk_sum = tl_threadgroup_sum(scratch, prob, tid, TL_ATTN_THREADS);  // publishes probs
    running_sum = running_sum * correction + chunk_sum;
    long count = key_end - j0 < TL_ATTN_THREADS ? key_end - j0 : long(TL_ATTN_THREADS);
    for (int c = 0; c < TL_ATTN_DIMS_PER_THREAD; ++c) {
      long d = tid + c * TL_ATTN_THREADS;
      if (d >= p.d) break;
      float weighted = 0.0f;
      for (long t = 0; t < count; ++t) {
        long v_at = (j0 + t) * p.v.strides[0] + kv_head * p.v.strides[1] + d * p.v.strides[2];
        weighted += probs[t] * tl_load_f(v, v_at, p.v.dtype);
      }
      acc[c] = acc[c] * correction + weighted;
    }
    running_max = new_max;
    threadgroup_barrier(mem_flags::mem_threadgroup);  // probs is rewritten by the next chunk
  }

  float inv = running_sum > 0.0f ? 1.0f / running_sum : 0.0f;
  for (int c = 0; c < TL_ATTN_DIMS_PER_THREAD; ++c) {
    long d = tid + c * TL_ATTN_THREADS;
    if (d >= p.d) break;
    out[(i * p.hq + h) * p.d + d] = acc[c] * inv;
  }
}
