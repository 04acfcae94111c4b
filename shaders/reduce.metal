// Reductions and softmax over the middle axis of a contiguous [outer, n, inner] tensor. Each
// threadgroup of TL_REDUCE_THREADS threads computes one (outer, inner) output at a time (the
// threadgroups stride over all outputs); threads stride over n and combine through threadgroup
// memory. Semantics follow the CPU twin: a NaN is the extreme for Max/Min/ArgMax/ArgMin (as in
// NumPy), ArgMax/ArgMin return the first index of the extreme, integer inputs with an integer
// result reduce exactly in int64. Loop bounds around barriers are uniform across a threadgroup.
#include "tl_common.h"

// Op codes equal tl::ReduceOp.
#define TL_ROP_SUM 0
#define TL_ROP_MEAN 1
#define TL_ROP_MAX 2
#define TL_ROP_MIN 3
#define TL_ROP_ARGMAX 4
#define TL_ROP_ARGMIN 5

// True when candidate (va, ia) beats the current (vb, ib); index -1 means "nothing yet". A NaN
// beats every number; between equals (or two NaNs) the lower index wins.
inline bool tl_float_better(float va, long ia, float vb, long ib, bool want_max) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  bool a_nan = isnan(va);
  bool b_nan = isnan(vb);
  if (a_nan || b_nan) return a_nan && (!b_nan || ia < ib);
  if (va == vb) return ia < ib;
  return want_max ? va > vb : va < vb;
}

inline bool tl_int_better(long va, long ia, long vb, long ib, bool want_max) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  if (va == vb) return ia < ib;
  return want_max ? va > vb : va < vb;
}

// Max/Min/ArgMax/ArgMin of one output in f32.
inline void tl_float_extreme_one(constant TLReduceParams& p, device const uchar* input,
                                 device uchar* out, long o, long j, uint tid,
                                 threadgroup float* values, threadgroup long* indices) {
  bool want_max = p.op == TL_ROP_MAX || p.op == TL_ROP_ARGMAX;
  long base = o * p.n * p.inner + j;
  float best = 0.0f;
  long best_index = -1;
  for (long r = tid; r < p.n; r += TL_REDUCE_THREADS) {
    float v = tl_load_f(input, base + r * p.inner, p.in_dtype);
    if (tl_float_better(v, r, best, best_index, want_max)) {
      best = v;
      best_index = r;
    }
  }
  values[tid] = best;
  indices[tid] = best_index;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint half_count = TL_REDUCE_THREADS / 2; half_count > 0; half_count /= 2) {
    if (tid < half_count &&
        tl_float_better(values[tid + half_count], indices[tid + half_count], values[tid],
                        indices[tid], want_max)) {
      values[tid] = values[tid + half_count];
      indices[tid] = indices[tid + half_count];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (tid == 0) {
    long at = o * p.inner + j;
    if (p.op == TL_ROP_ARGMAX || p.op == TL_ROP_ARGMIN) {
      tl_store_i(out, at, p.out_dtype, indices[0] < 0 ? 0 : indices[0]);
    } else {
      tl_store_f(out, at, p.out_dtype, values[0]);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);  // values/indices are reused by the next output
}

// Sum/Mean of one output in f32.
inline void tl_float_sum_one(constant TLReduceParams& p, device const uchar* input,
                             device uchar* out, long o, long j, uint tid,
                             threadgroup float* values) {
  long base = o * p.n * p.inner + j;
  float acc = 0.0f;
  for (long r = tid; r < p.n; r += TL_REDUCE_THREADS) {
    acc += tl_load_f(input, base + r * p.inner, p.in_dtype);
  }
  float total = tl_threadgroup_sum(values, acc, tid, TL_REDUCE_THREADS);
  if (p.op == TL_ROP_MEAN) total = p.n > 0 ? total / float(p.n) : NAN;
  if (tid == 0) tl_store_f(out, o * p.inner + j, p.out_dtype, total);
}

// Every op of one output in int64 (integer input, integer result or an index).
inline void tl_int_reduce_one(constant TLReduceParams& p, device const uchar* input,
                              device uchar* out, long o, long j, uint tid,
                              threadgroup long* values, threadgroup long* indices) {
  bool is_sum = p.op == TL_ROP_SUM || p.op == TL_ROP_MEAN;
  bool want_max = p.op == TL_ROP_MAX || p.op == TL_ROP_ARGMAX;
  long base = o * p.n * p.inner + j;
  long acc = 0;
  long best_index = -1;
  for (long r = tid; r < p.n; r += TL_REDUCE_THREADS) {
    long v = tl_load_i(input, base + r * p.inner, p.in_dtype);
    if (is_sum) {
      acc += v;
    } else if (tl_int_better(v, r, acc, best_index, want_max)) {
      acc = v;
      best_index = r;
    }
  }
  values[tid] = acc;
  indices[tid] = best_index;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint half_count = TL_REDUCE_THREADS / 2; half_count > 0; half_count /= 2) {
    if (tid < half_count) {
      if (is_sum) {
        values[tid] += values[tid + half_count];
      } else if (tl_int_better(values[tid + half_count], indices[tid + half_count], values[tid],
                               indices[tid], want_max)) {
        values[tid] = values[tid + half_count];
        indices[tid] = indices[tid + half_count];
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (tid == 0) {
    long at = o * p.inner + j;
    if (p.op == TL_ROP_MEAN) {
      tl_store_f(out, at, p.out_dtype, p.n > 0 ? float(values[0]) / float(p.n) : 0.0f);
    } else if (p.op == TL_ROP_ARGMAX || p.op == TL_ROP_ARGMIN) {
      tl_store_i(out, at, p.out_dtype, indices[0] < 0 ? 0 : indices[0]);
    } else {
      tl_store_i(out, at, p.out_dtype, values[0]);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
}

// CPU twin: Kernels::reduce (cpp/backends/cpu/kernels_reduce.cpp).
kernel void tl_reduce(constant TLReduceParams& p [[buffer(0)]],
                      device const uchar* input [[buffer(1)]],
                      device uchar* out [[buffer(2)]],
                      uint first_group [[threadgroup_position_in_grid]],
                      uint group_count [[threadgroups_per_grid]],
                      uint tid [[thread_position_in_threadgroup]]) {
  threadgroup float float_values[TL_REDUCE_THREADS];
  threadgroup long int_values[TL_REDUCE_THREADS];
  threadgroup long indices[TL_REDUCE_THREADS];
  bool is_sum = p.op == TL_ROP_SUM || p.op == TL_ROP_MEAN;
  for (long g = first_group; g < p.outer * p.inner; g += group_count) {
    long o = g / p.inner;
    long j = g % p.inner;
    if (p.integer_compute) {
      tl_int_reduce_one(p, input, out, o, j, tid, int_values, indices);
    } else if (is_sum) {
      tl_float_sum_one(p, input, out, o, j, tid, float_values);
    } else {
      tl_float_extreme_one(p, input, out, o, j, tid, float_values, indices);
    }
  }
}

// CPU twin: Kernels::softmax (cpp/backends/cpu/kernels_reduce.cpp). Subtracts the row maximum
// before exp; a row that is all -inf yields NaN, as the naive formula does.
kernel void tl_softmax(constant TLReduceParams& p [[buffer(0)]],
                       device const uchar* input [[buffer(1)]],
                       device uchar* out [[buffer(2)]],
                       uint first_group [[threadgroup_position_in_grid]],
                       uint group_count [[threadgroups_per_grid]],
                       uint tid [[thread_position_in_threadgroup]]) {
  threadgroup float scratch[TL_REDUCE_THREADS];
  for (long g = first_group; g < p.outer * p.inner; g += group_count) {
    long o = g / p.inner;
    long j = g % p.inner;
    long base = o * p.n * p.inner + j;
    float local_max = -INFINITY;
    for (long r = tid; r < p.n; r += TL_REDUCE_THREADS) {
      local_max = max(local_max, tl_load_f(input, base + r * p.inner, p.in_dtype));
    }
    float row_max = tl_threadgroup_max(scratch, local_max, tid, TL_REDUCE_THREADS);
    float local_sum = 0.0f;
    for (long r = tid; r < p.n; r += TL_REDUCE_THREADS) {
      local_sum += exp(tl_load_f(input, base + r * p.inner, p.in_dtype) - row_max);
    }
    float row_sum = tl_threadgroup_sum(scratch, local_sum, tid, TL_REDUCE_THREADS);
    for (long r = tid; r < p.n; r += TL_REDUCE_THREADS) {
      long at = base + r * p.inner;
      tl_store_f(out, at, p.out_dtype, exp(tl_load_f(input, at, p.in_dtype) - row_max) / row_sum);
    }
  }
}

// Column forms for inner > 1: one thread per (outer, inner) output walks the n values of its
// column (stride inner), so neighbouring threads read neighbouring addresses and no threadgroup
// is spent on a short axis. Same semantics as tl_reduce / tl_softmax.

// CPU twin: Kernels::reduce (cpp/backends/cpu/kernels_reduce.cpp), columns form.
kernel void tl_reduce_columns(constant TLReduceParams& p [[buffer(0)]],
                              device const uchar* input [[buffer(1)]],
                              device uchar* out [[buffer(2)]],
                              uint gid [[thread_position_in_grid]],
                              uint grid [[threads_per_grid]]) {
  bool is_sum = p.op == TL_ROP_SUM || p.op == TL_ROP_MEAN;
  bool want_max = p.op == TL_ROP_MAX || p.op == TL_ROP_ARGMAX;
  bool arg = p.op == TL_ROP_ARGMAX || p.op == TL_ROP_ARGMIN;
  for (long g = gid; g < p.outer * p.inner; g += grid) {
    long o = g / p.inner;
    long j = g % p.inner;
    long base = o * p.n * p.inner + j;
    if (p.integer_compute) {
      long acc = 0;
      long best_index = -1;
      for (long r = 0; r < p.n; ++r) {
        long v = tl_load_i(input, base + r * p.inner, p.in_dtype);
        if (is_sum) {
          acc += v;
        } else if (tl_int_better(v, r, acc, best_index, want_max)) {
          acc = v;
          best_index = r;
        }
      }
      if (p.op == TL_ROP_MEAN) {
        tl_store_f(out, g, p.out_dtype, p.n > 0 ? float(acc) / float(p.n) : 0.0f);
      } else if (arg) {
        tl_store_i(out, g, p.out_dtype, best_index < 0 ? 0 : best_index);
      } else {
        tl_store_i(out, g, p.out_dtype, acc);
      }
    } else if (is_sum) {
      float acc = 0.0f;
      for (long r = 0; r < p.n; ++r) acc += tl_load_f(input, base + r * p.inner, p.in_dtype);
      if (p.op == TL_ROP_MEAN) acc = p.n > 0 ? acc / float(p.n) : NAN;
      tl_store_f(out, g, p.out_dtype, acc);
    } else {
      float best = 0.0f;
      long best_index = -1;
      for (long r = 0; r < p.n; ++r) {
        float v = tl_load_f(input, base + r * p.inner, p.in_dtype);
        if (tl_float_better(v, r, best, best_index, want_max)) {
          best = v;
          best_index = r;
        }
      }
      if (arg) {
        tl_store_i(out, g, p.out_dtype, best_index < 0 ? 0 : best_index);
      } else {
        tl_store_f(out, g, p.out_dtype, best);
      }
    }
  }
}

// CPU twin: Kernels::softmax (cpp/backends/cpu/kernels_reduce.cpp), columns form.
kernel void tl_softmax_columns(constant TLReduceParams& p [[buffer(0)]],
                               device const uchar* input [[buffer(1)]],
                               device uchar* out [[buffer(2)]],
                               uint gid [[thread_position_in_grid]],
                               uint grid [[threads_per_grid]]) {
  for (long g = gid; g < p.outer * p.inner; g += grid) {
    long o = g / p.inner;
    long j = g % p.inner;
    long base = o * p.n * p.inner + j;
    float row_max = -INFINITY;
    for (long r = 0; r < p.n; ++r) row_max = max(row_max, tl_load_f(input, base + r * p.inner, p.in_dtype));
    float row_sum = 0.0f;
    for (long r = 0; r < p.n; ++r) row_sum += exp(tl_load_f(input, base + r * p.inner, p.in_dtype) - row_max);
    for (long r = 0; r < p.n; ++r) {
      long at = base + r * p.inner;
      tl_store_f(out, at, p.out_dtype, exp(tl_load_f(input, at, p.in_dtype) - row_max) / row_sum);
    }
  }
}
