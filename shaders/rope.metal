// Rotary position embedding on a contiguous [outer, S, H, D] tensor; one thread per rotated pair.
// Row s sits at position pos_offset + s; theta_i = pos * base^(-2i/D). neox = 0 rotates adjacent
// pairs (2i, 2i+1), neox = 1 rotates (i, i + D/2). Angles are f32 (Metal has no double), so at
// positions in the thousands the result differs from an f64 reference by about 1e-4.
#include "tl_common.h"

// CPU twin: Kernels::rope (cpp/backends/cpu/kernels_nn.cpp).
kernel void tl_rope(constant TLNormParams& p [[buffer(0)]],
                    device const uchar* x [[buffer(1)]],
                    device uchar* out [[buffer(3)]],
                    uint gid [[thread_position_in_grid]],
                    uint grid [[threads_per_grid]]) {
  long half_d = p.d / 2;
  long pairs = p.rows * p.seq * p.heads * half_d;  // p.rows holds `outer`
  for (long t = gid; t < pairs; t += grid) {
    long i = t % half_d;
    long row = t / half_d;  // index over (outer, s, h)
    long s = (row / p.heads) % p.seq;
    float pos = float(p.pos_offset + s);
    float freq = exp2(-2.0f * float(i) / float(p.d) * log2(p.base));
    float angle = pos * freq;
    float c = cos(angle);
    float sn = sin(angle);
    long i0 = p.neox ? i : 2 * i;
    long i1 = p.neox ? i + half_d : 2 * i + 1;
    long base = row * p.d;
    float x0 = tl_load_f(x, base + i0, p.x_dtype);
    float x1 = tl_load_f(x, base + i1, p.x_dtype);
    tl_store_f(out, base + i0, p.out_dtype, x0 * c - x1 * sn);
    tl_store_f(out, base + i1, p.out_dtype, x0 * sn + x1 * c);
  }
}
