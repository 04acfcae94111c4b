// Reductions and softmax over the middle axis of a contiguous [outer, n, inner] tensor. One
// threadgroup of TL_REDUCE_THREADS threads per (outer, inner) output; threads stride over n and
// combine through threadgroup memory. ArgMax/ArgMin keep the first index on ties; the host
// dispatches exactly TL_REDUCE_THREADS threads per threadgroup (a power of two).
#include "tl_common.h"

#define TL_REDUCE_THREADS 256

// Op codes equal tl::ReduceOp.
#define TL_ROP_SUM 0
#define TL_ROP_MEAN 1
#define TL_ROP_MAX 2
#define TL_ROP_MIN 3
#define TL_ROP_ARGMAX 4
#define TL_ROP_ARGMIN 5

// True when (va, ia) should win over (vb, ib) for argmax (want_max) or argmin.
inline bool tl_arg_better(float va, long ia, float vb, long ib, bool want_max) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  if (va == vb) return ia < ib;
  return want_max ? va > vb : va < vb;
}

// CPU twin: Kernels::reduce (cpp/backends/cpu/, reduce family).
kernel void tl_reduce(constant TLReduceParams& p [[buffer(0)]],
                      device const uchar* in [[buffer(1)]],
                      device uchar* out [[buffer(2)]],
                      uint group [[threadgroup_position_in_grid]],
                      uint tid [[thread_position_in_threadgroup]]) {
  threadgroup float values[TL_REDUCE_THREADS];
  threadgroup long indices[TL_REDUCE_THREADS];
  long o = long(group) / p.inner;
  long j = long(group) % p.inner;
  if (o >= p.outer) return;  // uniform per threadgroup, so no barrier is skipped by half a group
  long base = o * p.n * p.inner + j;

  if (p.op == TL_ROP_ARGMAX || p.op == TL_ROP_ARGMIN) {
    bool want_max = p.op == TL_ROP_ARGMAX;
    float best = 0.0f;
    long best_index = -1;
    for (long r = tid; r < p.n; r += TL_REDUCE_THREADS) {
      float v = tl_load_f(in, base + r * p.inner, p.in_dtype);
      if (tl_arg_better(v, r, best, best_index, want_max)) { best = v; best_index = r; }
    }
    values[tid] = best;
    indices[tid] = best_index;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint half_count = TL_REDUCE_THREADS / 2; half_count > 0; half_count /= 2) {
      if (tid < half_count &&
          tl_arg_better(values[tid + half_count], indices[tid + half_count], values[tid],
                        indices[tid], want_max)) {
        values[tid] = values[tid + half_count];
        indices[tid] = indices[tid + half_count];
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (tid == 0) tl_store_i(out, o * p.inner + j, p.out_dtype, indices[0] < 0 ? 0 : indices[0]);
    return;
  }

  float acc;
  if (p.op == TL_ROP_MAX) acc = -INFINITY;
  else if (p.op == TL_ROP_MIN) acc = INFINITY;
  else acc = 0.0f;
  for (long r = tid; r < p.n; r += TL_REDUCE_THREADS) {
    float v = tl_load_f(in, base + r * p.inner, p.in_dtype);
    if (p.op == TL_ROP_MAX) acc = max(acc, v);
    else if (p.op == TL_ROP_MIN) acc = min(acc, v);
    else acc += v;
  }
  float total;
  if (p.op == TL_ROP_MAX) {
    total = tl_threadgroup_max(values, acc, tid, TL_REDUCE_THREADS);
  } else if (p.op == TL_ROP_MIN) {
    total = -tl_threadgroup_max(values, -acc, tid, TL_REDUCE_THREADS);
  } else {
    total = tl_threadgroup_sum(values, acc, tid, TL_REDUCE_THREADS);
    if (p.op == TL_ROP_MEAN) total /= float(p.n);
  }
  if (tid == 0) tl_store_f(out, o * p.inner + j, p.out_dtype, total);
}

// CPU twin: Kernels::softmax (cpp/backends/cpu/, reduce family). Subtracts the row maximum
// before exp; a row that is all -inf yields NaN, as the naive formula does.
kernel void tl_softmax(constant TLReduceParams& p [[buffer(0)]],
                       device const uchar* in [[buffer(1)]],
                       device uchar* out [[buffer(2)]],
                       uint group [[threadgroup_position_in_grid]],
                       uint tid [[thread_position_in_threadgroup]]) {
  threadgroup float scratch[TL_REDUCE_THREADS];
  long o = long(group) / p.inner;
  long j = long(group) % p.inner;
  if (o >= p.outer) return;
  long base = o * p.n * p.inner + j;

  float local_max = -INFINITY;
  for (long r = tid; r < p.n; r += TL_REDUCE_THREADS) {
    local_max = max(local_max, tl_load_f(in, base + r * p.inner, p.in_dtype));
  }
  float row_max = tl_threadgroup_max(scratch, local_max, tid, TL_REDUCE_THREADS);
  float local_sum = 0.0f;
  for (long r = tid; r < p.n; r += TL_REDUCE_THREADS) {
    local_sum += exp(tl_load_f(in, base + r * p.inner, p.in_dtype) - row_max);
  }
  float row_sum = tl_threadgroup_sum(scratch, local_sum, tid, TL_REDUCE_THREADS);
  for (long r = tid; r < p.n; r += TL_REDUCE_THREADS) {
    long at = base + r * p.inner;
    tl_store_f(out, at, p.out_dtype, exp(tl_load_f(in, at, p.in_dtype) - row_max) / row_sum);
  }
}
