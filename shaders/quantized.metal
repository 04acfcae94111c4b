// linear: out = x @ w^T with x contiguous [M, K] f32, w contiguous [N, K] of any dtype including
// the GGUF block types, out contiguous [M, N] f32. One threadgroup of TL_LINEAR_THREADS threads per
// output element (n, m): threads stride over w's blocks (or elements for plain dtypes), each block
// is decoded inside the dot product (never into an f32 copy of w), partial sums meet in threadgroup
// memory. M == 1 is the decode matrix-vector case; M > 1 uses the same kernel over a 2-D grid.
// Threadgroups stride over (n, m) so any N fits the grid; loop bounds are uniform per group.
#include "tl_common.h"

// CPU twin: Kernels::linear (cpp/backends/cpu/kernels_quant.cpp).
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
