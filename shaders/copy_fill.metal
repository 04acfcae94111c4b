// copy (with dtype conversion, any strides on both sides), fill (any strides) and arange
// (contiguous 1-D). Integer-to-integer copies and integer fills run in int64 so that i64 values
// beyond 2^24 survive; everything else goes through f32.
#include "tl_common.h"

// CPU twin: Kernels::copy (cpp/backends/cpu/kernels_elementwise.cpp).
kernel void tl_copy(constant TLCopyParams& p [[buffer(0)]],
                    device const uchar* src [[buffer(1)]],
                    device uchar* dst [[buffer(2)]],
                    uint gid [[thread_position_in_grid]],
                    uint grid [[threads_per_grid]]) {
  for (long i = gid; i < p.n; i += grid) {
    long is = tl_offset(p.src, i);
    long at = tl_offset(p.dst, i);
    if (p.integer_compute) {
      tl_store_i(dst, at, p.dst.dtype, tl_load_i(src, is, p.src.dtype));
    } else {
      tl_store_f(dst, at, p.dst.dtype, tl_load_f(src, is, p.src.dtype));
    }
  }
}

// CPU twin: Kernels::fill (cpp/backends/cpu/kernels_elementwise.cpp).
kernel void tl_fill(constant TLCopyParams& p [[buffer(0)]],
                    device uchar* dst [[buffer(2)]],
                    uint gid [[thread_position_in_grid]],
                    uint grid [[threads_per_grid]]) {
  for (long i = gid; i < p.n; i += grid) {
    long at = tl_offset(p.dst, i);
    if (p.integer_compute) {
      tl_store_i(dst, at, p.dst.dtype, p.value_i);
    } else {
      tl_store_f(dst, at, p.dst.dtype, p.value_f);
    }
  }
}

// CPU twin: Kernels::arange (cpp/backends/cpu/kernels_elementwise.cpp). out[i] = start + i * step;
// an integer output takes the value rounded half away from zero (llround on the CPU).
kernel void tl_arange(constant TLCopyParams& p [[buffer(0)]],
                      device uchar* dst [[buffer(2)]],
                      uint gid [[thread_position_in_grid]],
                      uint grid [[threads_per_grid]]) {
  for (long i = gid; i < p.n; i += grid) {
    if (p.integer_compute && p.exact_integers) {
      tl_store_i(dst, i, p.dst.dtype, p.value_i + i * p.step_i);
    } else if (p.integer_compute) {
      tl_store_i(dst, i, p.dst.dtype, long(round(p.value_f + float(i) * p.step_f)));
    } else {
      tl_store_f(dst, i, p.dst.dtype, p.value_f + float(i) * p.step_f);
    }
  }
}
