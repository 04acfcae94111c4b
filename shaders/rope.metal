// Rotary position embedding on a contiguous [outer, S, H, D] tensor; one thread per rotated pair.
// Row s sits at position pos_offset + s; theta_i = pos * base^(-2i/D). neox = 0 rotates adjacent
// pairs (2i, 2i+1), neox = 1 rotates (i, i + D/2). Metal has no double, so the host passes each
// frequency as f32 hi + lo, the product pos * freq is kept as an unevaluated sum (fma gives the
// rounding error exactly) and reduced by 2*pi in two parts (Cody-Waite) before sin/cos: angles at
// positions in the thousands stay within about 1e-7 of the CPU twin's double computation.
#include "tl_common.h"

// 2*pi as f32 hi + lo.
#define TL_TWO_PI_HI 6.28318548202514648f
#define TL_TWO_PI_LO (-1.7484555314695172e-7f)

// theta = pos * (hi + lo) reduced to about [-pi, pi].
inline float tl_rope_angle(float pos, float hi, float lo) {
  float product = pos * hi;
  float error = fma(pos, hi, -product) + pos * lo;
  float turns = rint(product * 0.15915494309189535f);
  float reduced = fma(-turns, TL_TWO_PI_HI, product);
  reduced = fma(-turns, TL_TWO_PI_LO, reduced);
  return reduced + error;
}

// CPU twin: Kernels::rope (cpp/backends/cpu/kernels_norm_rope.cpp).
kernel void tl_rope(constant TLRopeParams& p [[buffer(0)]],
                    device const uchar* x [[buffer(1)]],
                    device uchar* out [[buffer(3)]],
                    uint gid [[thread_position_in_grid]],
                    uint grid [[threads_per_grid]]) {
  long half_d = p.d / 2;
  long pairs = p.outer * p.seq * p.heads * half_d;
  for (long t = gid; t < pairs; t += grid) {
    long i = t % half_d;
    long row = t / half_d;  // index over (outer, s, h)
    long s = (row / p.heads) % p.seq;
    float angle = tl_rope_angle(float(p.pos_offset + s), p.freq_hi[i], p.freq_lo[i]);
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

// CPU twin: Kernels::rope_kv_write (cpp/backends/cpu/kernels_fused.cpp). Work items: the q pairs,
// then the k pairs (rotated into k_dst), then the v elements (copied into v_dst); all operands
// are read and written through their strides, so q, k, v may be column slices of one QKV matrix.
kernel void tl_rope_kv_write(constant TLRopeKVParams& p [[buffer(0)]],
                             device const uchar* q [[buffer(1)]],
                             device const uchar* k [[buffer(2)]],
                             device const uchar* v [[buffer(3)]],
                             device float* q_out [[buffer(4)]],
                             device uchar* k_dst [[buffer(5)]],
                             device uchar* v_dst [[buffer(6)]],
                             uint gid [[thread_position_in_grid]],
                             uint grid [[threads_per_grid]]) {
  long half_d = p.d / 2;
  long q_items = p.seq * p.hq * half_d;
  long k_items = p.seq * p.hkv * half_d;
  long total = q_items + k_items + p.seq * p.hkv * p.d;
  for (long t = gid; t < total; t += grid) {
    if (t >= q_items + k_items) {
      long e = t - q_items - k_items;
      long dd = e % p.d, row = e / p.d, h = row % p.hkv, s = row / p.hkv;
      float val = tl_load_f(v, s * p.v.strides[0] + h * p.v.strides[1] + dd * p.v.strides[2], p.v.dtype);
      tl_store_f(v_dst, s * p.v_dst.strides[0] + h * p.v_dst.strides[1] + dd * p.v_dst.strides[2],
                 p.v_dst.dtype, val);
      continue;
    }
    bool is_q = t < q_items;
    long heads = is_q ? p.hq : p.hkv;
    long e = is_q ? t : t - q_items;
    long i = e % half_d, row = e / half_d, h = row % heads, s = row / heads;
    float angle = tl_rope_angle(float(p.pos_offset + s), p.freq_hi[i], p.freq_lo[i]);
    float c = cos(angle);
    float sn = sin(angle);
    long i0 = p.neox ? i : 2 * i;
    long i1 = p.neox ? i + half_d : 2 * i + 1;
    if (is_q) {
      long src = s * p.q.strides[0] + h * p.q.strides[1];
      float x0 = tl_load_f(q, src + i0 * p.q.strides[2], p.q.dtype);
      float x1 = tl_load_f(q, src + i1 * p.q.strides[2], p.q.dtype);
      long dst = (s * p.hq + h) * p.d;
      q_out[dst + i0] = x0 * c - x1 * sn;
      q_out[dst + i1] = x0 * sn + x1 * c;
    } else {
      long src = s * p.k.strides[0] + h * p.k.strides[1];
      float x0 = tl_load_f(k, src + i0 * p.k.strides[2], p.k.dtype);
      float x1 = tl_load_f(k, src + i1 * p.k.strides[2], p.k.dtype);
      long dst = s * p.k_dst.strides[0] + h * p.k_dst.strides[1];
      tl_store_f(k_dst, dst + i0 * p.k_dst.strides[2], p.k_dst.dtype, x0 * c - x1 * sn);
      tl_store_f(k_dst, dst + i1 * p.k_dst.strides[2], p.k_dst.dtype, x0 * sn + x1 * c);
    }
  }
}
