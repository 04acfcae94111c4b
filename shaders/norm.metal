// RMSNorm and LayerNorm over the last axis of a contiguous [rows, d] tensor. One threadgroup of
// TL_NORM_THREADS threads per row (threadgroups stride over rows); statistics in f32 through threadgroup memory. The weight and
// bias are optional (dtype -1 when absent); the host binds a placeholder buffer in their slots.
#include "tl_common.h"

// CPU twin: Kernels::rms_norm (cpp/backends/cpu/kernels_norm_rope.cpp).
kernel void tl_rms_norm(constant TLNormParams& p [[buffer(0)]],
                        device const uchar* x [[buffer(1)]],
                        device const uchar* w [[buffer(2)]],
                        device uchar* out [[buffer(3)]],
                        uint first_row [[threadgroup_position_in_grid]],
                        uint row_step [[threadgroups_per_grid]],
                        uint tid [[thread_position_in_threadgroup]]) {
  threadgroup float scratch[TL_NORM_THREADS];
  for (long row = first_row; row < p.rows; row += row_step) {
    long base = row * p.d;
    float local = 0.0f;
    for (long i = tid; i < p.d; i += TL_NORM_THREADS) {
      float v = tl_load_f(x, base + i, p.x_dtype);
      local += v * v;
    }
    float sum_sq = tl_threadgroup_sum(scratch, local, tid, TL_NORM_THREADS);
    float inv = 1.0f / sqrt(sum_sq / float(p.d) + p.eps);
    for (long i = tid; i < p.d; i += TL_NORM_THREADS) {
      float v = tl_load_f(x, base + i, p.x_dtype) * inv;
      if (p.w_dtype >= 0) v *= tl_load_f(w, i, p.w_dtype);
      tl_store_f(out, base + i, p.out_dtype, v);
    }
  }
}

// CPU twin: Kernels::layer_norm (cpp/backends/cpu/kernels_norm_rope.cpp). Two passes (mean, then the
// centred sum of squares) for accuracy on rows with a large mean.
kernel void tl_layer_norm(constant TLNormParams& p [[buffer(0)]],
                          device const uchar* x [[buffer(1)]],
                          device const uchar* w [[buffer(2)]],
                          device uchar* out [[buffer(3)]],
                          device const uchar* b [[buffer(4)]],
                          uint first_row [[threadgroup_position_in_grid]],
                          uint row_step [[threadgroups_per_grid]],
                          uint tid [[thread_position_in_threadgroup]]) {
  threadgroup float scratch[TL_NORM_THREADS];
  for (long row = first_row; row < p.rows; row += row_step) {
    long base = row * p.d;
    float local = 0.0f;
    for (long i = tid; i < p.d; i += TL_NORM_THREADS) local += tl_load_f(x, base + i, p.x_dtype);
    float mean = tl_threadgroup_sum(scratch, local, tid, TL_NORM_THREADS) / float(p.d);
    float local_sq = 0.0f;
    for (long i = tid; i < p.d; i += TL_NORM_THREADS) {
      float c = tl_load_f(x, base + i, p.x_dtype) - mean;
      local_sq += c * c;
    }
    float var = tl_threadgroup_sum(scratch, local_sq, tid, TL_NORM_THREADS) / float(p.d);
    float inv = 1.0f / sqrt(var + p.eps);
    for (long i = tid; i < p.d; i += TL_NORM_THREADS) {
      float v = (tl_load_f(x, base + i, p.x_dtype) - mean) * inv;
      if (p.w_dtype >= 0) v *= tl_load_f(w, i, p.w_dtype);
      if (p.b_dtype >= 0) v += tl_load_f(b, i, p.b_dtype);
      tl_store_f(out, base + i, p.out_dtype, v);
    }
  }
}
