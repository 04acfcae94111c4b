// Batched matmul: out[b] = a[b] @ b[b] with a [batch, M, K] and b [batch, K, N] of any float
// dtype and any strides (batch stride 0 broadcasts; a transposed operand just has swapped strides),
// out contiguous [batch, M, N] in f32 or f16. TL_TILE x TL_TILE threads per threadgroup each own one
// output element; tiles of a and b are staged in threadgroup memory and accumulated in f32.
// Every thread of a threadgroup reaches every barrier (out-of-range threads load zeros).
#include "tl_common.h"

// CPU twin: Kernels::matmul (cpp/backends/cpu/kernels_matmul.cpp).
kernel void tl_matmul(constant TLMatmulParams& p [[buffer(0)]],
                      device const uchar* a [[buffer(1)]],
                      device const uchar* b [[buffer(2)]],
                      device uchar* out [[buffer(3)]],
                      uint3 group [[threadgroup_position_in_grid]],
                      uint3 local [[thread_position_in_threadgroup]]) {
  threadgroup float a_tile[TL_TILE][TL_TILE];
  threadgroup float b_tile[TL_TILE][TL_TILE];
  long batch = group.z;
  long row = long(group.y) * TL_TILE + local.y;
  long col = long(group.x) * TL_TILE + local.x;
  long a_base = batch * p.a.strides[0];
  long b_base = batch * p.b.strides[0];

  float acc = 0.0f;
  for (long k0 = 0; k0 < p.k; k0 += TL_TILE) {
    long ka = k0 + local.x;  // column of a this thread stages
    long kb = k0 + local.y;  // row of b this thread stages
    a_tile[local.y][local.x] =
        (row < p.m && ka < p.k)
            ? tl_load_f(a, a_base + row * p.a.strides[1] + ka * p.a.strides[2], p.a.dtype)
            : 0.0f;
    b_tile[local.y][local.x] =
        (kb < p.k && col < p.n)
            ? tl_load_f(b, b_base + kb * p.b.strides[1] + col * p.b.strides[2], p.b.dtype)
            : 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int kk = 0; kk < TL_TILE; ++kk) acc += a_tile[local.y][kk] * b_tile[kk][local.x];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (row < p.m && col < p.n) {
    tl_store_f(out, (batch * p.m + row) * p.n + col, p.out_dtype, acc);
  }
}
