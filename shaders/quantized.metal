// linear: out = x @ w^T with x contiguous [M, K] f32, w contiguous [N, K] of any dtype including
// the GGUF block types, out contiguous [M, N] f32. One threadgroup of TL_LINEAR_THREADS threads per
// output element (n, m): threads stride over w's blocks (or elements for plain dtypes), each block
// is decoded inside the dot product (never into an f32 copy of w), partial sums meet in threadgroup
// memory. M == 1 is the decode matrix-vector case; M > 1 uses the same kernel over a 2-D grid.
// Threadgroups stride over (n, m) so any N fits the grid; loop bounds are uniform per group.
#include "tl_common.h"

// CPU twin: Kernels::linear (cpp/backends/cpu/kernels_matmul_quant.cpp).
kernel void tl_linear(constant TLRowsParams& p [[buffer(0)]],
                      device const float* x [[buffer(1)]],
                      device const uchar* w [[buffer(2)]],
                      device float* out [[buffer(3)]],
                      uint2 first_group [[threadgroup_position_in_grid]],
                      uint2 group_count [[threadgroups_per_grid]],
                      uint2 local [[thread_position_in_threadgroup]]) {
  // Position attributes of one kernel share one vector width (an MSL rule), hence uint2 local.
  threadgroup float scratch[TL_LINEAR_THREADS];
  uint tid = local.x;
  for (long m = first_group.y; m < p.m; m += group_count.y) {
    for (long n = first_group.x; n < p.n; n += group_count.x) {
      device const uchar* w_row = w + n * p.row_bytes;
      device const float* x_row = x + m * p.k;
      float partial = 0.0f;
      if (p.w_dtype >= TL_Q4_0) {
        int elems = tl_block_elems(p.w_dtype);
        int bytes = tl_block_bytes(p.w_dtype);
        long blocks = p.k / elems;
        for (long blk = tid; blk < blocks; blk += TL_LINEAR_THREADS) {
          partial += tl_block_dot(w_row + blk * bytes, p.w_dtype, x_row + blk * elems);
        }
      } else {
        for (long kk = tid; kk < p.k; kk += TL_LINEAR_THREADS) {
          partial += tl_load_f(w_row, kk, p.w_dtype) * x_row[kk];
        }
      }
      float total = tl_threadgroup_sum(scratch, partial, tid, TL_LINEAR_THREADS);
      if (tid == 0) out[m * p.n + n] = total;
    }
  }
}

// CPU twin: Kernels::expert_linear (cpp/backends/cpu/kernels_matmul_quant.cpp). As tl_linear, one
// threadgroup per output: pair q (a token's chosen expert) and column n take row n of expert
// ids[q]'s matrix (rows ids[q] * n.. of w) dotted with the pair's row of x. The id is read here, on
// the GPU, so a replayed command follows new routing; an id outside [0, experts) gives zeros and
// the first one is recorded in the error record.
kernel void tl_expert_linear(constant TLExpertParams& p [[buffer(0)]],
                             device const float* x [[buffer(1)]],
                             device const uchar* w [[buffer(2)]],
                             device const uchar* ids [[buffer(3)]],
                             device float* out [[buffer(4)]],
                             device TLErrorRecord* error [[buffer(5)]],
                             uint2 first_group [[threadgroup_position_in_grid]],
                             uint2 group_count [[threadgroups_per_grid]],
                             uint2 local [[thread_position_in_threadgroup]]) {
  threadgroup float scratch[TL_LINEAR_THREADS];
  uint tid = local.x;
  for (long q = first_group.y; q < p.pairs; q += group_count.y) {
    long e = tl_load_i(ids, q, p.ids_dtype);
    bool valid = e >= 0 && e < p.experts;  // the same for the whole threadgroup: barriers stay uniform
    if (!valid && tid == 0 && first_group.x == 0) {
      int expected = TL_ERROR_NONE;
      bool won = false;
      while (!won && expected == TL_ERROR_NONE) {
        won = atomic_compare_exchange_weak_explicit((device atomic_int*)&error->code, &expected,
                                                    TL_ERROR_EXPERT_ID_OUT_OF_RANGE,
                                                    memory_order_relaxed, memory_order_relaxed);
      }
      if (won) {
        error->value = e;
        error->limit = p.experts;
      }
    }
    device const float* x_row = x + ((q / p.topk) * p.x_rows + (p.x_rows == 1 ? 0 : q % p.topk)) * p.k;
    for (long n = first_group.x; n < p.n; n += group_count.x) {
      float partial = 0.0f;
      if (valid) {
        device const uchar* w_row = w + (e * p.n + n) * p.row_bytes;
        if (p.w_dtype >= TL_Q4_0) {
          int elems = tl_block_elems(p.w_dtype);
          int bytes = tl_block_bytes(p.w_dtype);
          long blocks = p.k / elems;
          for (long blk = tid; blk < blocks; blk += TL_LINEAR_THREADS) {
            partial += tl_block_dot(w_row + blk * bytes, p.w_dtype, x_row + blk * elems);
          }
        } else {
          for (long kk = tid; kk < p.k; kk += TL_LINEAR_THREADS) {
            partial += tl_load_f(w_row, kk, p.w_dtype) * x_row[kk];
          }
        }
      }
      float total = tl_threadgroup_sum(scratch, partial, tid, TL_LINEAR_THREADS);
      if (tid == 0) out[q * p.n + n] = total;
    }
  }
}

// CPU twin: Kernels::fused_linear (cpp/backends/cpu/kernels_fused.cpp). Phase 0 (only with a
// prologue) writes the prepared rows to scratch, one threadgroup per row: RMS-normalised rows of
// x, or swiglu of x's [gate | up] halves; phase 1 computes each output as tl_linear does, from
// scratch or x, and adds the addend before storing.
kernel void tl_fused_linear(constant TLFusedLinearParams& p [[buffer(0)]],
                            device const float* x [[buffer(1)]],
                            device const uchar* w [[buffer(2)]],
                            device float* out [[buffer(3)]],
                            device const uchar* nw [[buffer(4)]],
                            device const uchar* addend [[buffer(5)]],
                            device float* scratch [[buffer(6)]],
                            uint2 first_group [[threadgroup_position_in_grid]],
                            uint2 group_count [[threadgroups_per_grid]],
                            uint2 local [[thread_position_in_threadgroup]]) {
  threadgroup float partials[TL_LINEAR_THREADS];
  uint tid = local.x;
  if (p.phase == 0 && p.prologue == 2) {
    for (long m = first_group.x; m < p.m; m += group_count.x) {
      device const float* row = x + m * 2 * p.k;
      for (long i = tid; i < p.k; i += TL_LINEAR_THREADS) {
        float g = row[i];
        scratch[m * p.k + i] = g / (1.0f + exp(-g)) * row[p.k + i];
      }
    }
    return;
  }
  if (p.phase == 0) {
    for (long m = first_group.x; m < p.m; m += group_count.x) {
      device const float* row = x + m * p.k;
      float local_sq = 0.0f;
      for (long i = tid; i < p.k; i += TL_LINEAR_THREADS) local_sq += row[i] * row[i];
      float sum_sq = tl_threadgroup_sum(partials, local_sq, tid, TL_LINEAR_THREADS);
      float inv = 1.0f / sqrt(sum_sq / float(p.k) + p.eps);
      for (long i = tid; i < p.k; i += TL_LINEAR_THREADS) {
        float v = row[i] * inv;
        if (p.nw_dtype >= 0) v *= tl_load_f(nw, i, p.nw_dtype);
        scratch[m * p.k + i] = v;
      }
    }
    return;
  }
  device const float* input = p.prologue != 0 ? scratch : x;
  for (long m = first_group.y; m < p.m; m += group_count.y) {
    for (long n = first_group.x; n < p.n; n += group_count.x) {
      device const uchar* w_row = w + n * p.row_bytes;
      device const float* x_row = input + m * p.k;
      float partial = 0.0f;
      if (p.w_dtype >= TL_Q4_0) {
        int elems = tl_block_elems(p.w_dtype);
        int bytes = tl_block_bytes(p.w_dtype);
        long blocks = p.k / elems;
        for (long blk = tid; blk < blocks; blk += TL_LINEAR_THREADS) {
          partial += tl_block_dot(w_row + blk * bytes, p.w_dtype, x_row + blk * elems);
        }
      } else {
        for (long kk = tid; kk < p.k; kk += TL_LINEAR_THREADS) {
          partial += tl_load_f(w_row, kk, p.w_dtype) * x_row[kk];
        }
      }
      float total = tl_threadgroup_sum(partials, partial, tid, TL_LINEAR_THREADS);
      if (tid == 0) {
        if (p.has_addend) {
          total = total + tl_load_f(addend, m * p.addend.strides[0] + n * p.addend.strides[1],
                                    p.addend.dtype);
        }
        out[m * p.n + n] = total;
      }
    }
  }
}
