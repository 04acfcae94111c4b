// Debug delay injection (TL_DEBUG_DELAY_US): one GPU thread runs a chain of dependent
// multiply-adds so that the next kernel of a serial encoder starts later. Metal shaders have no
// clock, so the length is approximate (the host scales iterations per microsecond).
#include "tl_common.h"

// CPU twin: Kernels::delay (cpp/backends/cpu/kernels_delay.cpp: the worker sleeps).
kernel void tl_delay(constant TLDelayParams& p [[buffer(0)]],
                     device float* sink [[buffer(1)]],
                     uint gid [[thread_position_in_grid]]) {
  if (gid != 0) return;
  float v = 1.0f;
  for (long i = 0; i < p.iterations; ++i) v = v * 0.9999999f + 1.0e-7f;
  if (v == 12345.0f) sink[0] = v;  // depends on the loop, so the loop is not removed
}
