// Binary elementwise ops with broadcasting (stride-0 dims), the scalar variant, and where.
// Inputs already have out's shape and may have any strides; out is contiguous. Compute is f32 when
// float_compute is set (the host sets it when an input or the output is floating), else int64.
// Each thread handles elements gid, gid + grid, ... (grid-stride loop), so any n fits one dispatch.
#include "tl_common.h"

// Op codes equal tl::BinaryOp.
#define TL_OP_ADD 0
#define TL_OP_SUB 1
#define TL_OP_MUL 2
#define TL_OP_DIV 3
#define TL_OP_POW 4
#define TL_OP_MAXIMUM 5
#define TL_OP_MINIMUM 6
#define TL_OP_MOD 7
#define TL_OP_EQ 8
#define TL_OP_NE 9
#define TL_OP_LT 10
#define TL_OP_LE 11
#define TL_OP_GT 12
#define TL_OP_GE 13
#define TL_OP_LOGICAL_AND 14
#define TL_OP_LOGICAL_OR 15

// pow that keeps the sign for a negative base with an integral exponent (Metal's pow is only
// defined for x >= 0).
inline float tl_pow_f(float x, float y) {
  if (x >= 0.0f || isnan(x)) return pow(x, y);
  if (floor(y) != y) return NAN;
  float r = pow(-x, y);
  return fmod(fabs(y), 2.0f) == 1.0f ? -r : r;
}

// Floor-style modulo (the result has the divisor's sign), as NumPy's mod.
inline float tl_mod_f(float a, float b) {
  float r = fmod(a, b);
  if (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) r += b;
  return r;
}

// x % 0 and x % -1 are 0; x / 0 is 0 and x / -1 wraps (LONG_MIN / -1 is LONG_MIN), as on the CPU.
inline long tl_mod_i(long a, long b) {
  if (b == 0 || b == -1) return 0;
  long r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

inline long tl_div_i(long a, long b) {
  if (b == 0) return 0;
  if (b == -1) return long(0ul - ulong(a));
  long q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;  // floor division
  return q;
}

inline long tl_pow_i(long base, long exponent) {
  if (exponent < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exponent % 2 == 0) ? 1 : -1;
    return 0;
  }
  long result = 1;
  while (exponent > 0) {
    if (exponent & 1) result *= base;
    base *= base;
    exponent >>= 1;
  }
  return result;
}

// Result of one op in f32; comparisons and logical ops return 0 or 1.
inline float tl_binary_f(int op, float a, float b) {
  switch (op) {
    case TL_OP_ADD: return a + b;
    case TL_OP_SUB: return a - b;
    case TL_OP_MUL: return a * b;
    case TL_OP_DIV: return a / b;
    case TL_OP_POW: return tl_pow_f(a, b);
    case TL_OP_MAXIMUM: return (isnan(a) || isnan(b)) ? NAN : max(a, b);
    case TL_OP_MINIMUM: return (isnan(a) || isnan(b)) ? NAN : min(a, b);
    case TL_OP_MOD: return tl_mod_f(a, b);
    case TL_OP_EQ: return a == b ? 1.0f : 0.0f;
    case TL_OP_NE: return a != b ? 1.0f : 0.0f;
    case TL_OP_LT: return a < b ? 1.0f : 0.0f;
    case TL_OP_LE: return a <= b ? 1.0f : 0.0f;
    case TL_OP_GT: return a > b ? 1.0f : 0.0f;
    case TL_OP_GE: return a >= b ? 1.0f : 0.0f;
    case TL_OP_LOGICAL_AND: return (a != 0.0f && b != 0.0f) ? 1.0f : 0.0f;
    case TL_OP_LOGICAL_OR: return (a != 0.0f || b != 0.0f) ? 1.0f : 0.0f;
    default: return 0.0f;
  }
}

inline long tl_binary_i(int op, long a, long b) {
  switch (op) {
    case TL_OP_ADD: return a + b;
    case TL_OP_SUB: return a - b;
    case TL_OP_MUL: return a * b;
    case TL_OP_DIV: return tl_div_i(a, b);
    case TL_OP_POW: return tl_pow_i(a, b);
    case TL_OP_MAXIMUM: return a > b ? a : b;
    case TL_OP_MINIMUM: return a < b ? a : b;
    case TL_OP_MOD: return tl_mod_i(a, b);
    case TL_OP_EQ: return a == b ? 1 : 0;
    case TL_OP_NE: return a != b ? 1 : 0;
    case TL_OP_LT: return a < b ? 1 : 0;
    case TL_OP_LE: return a <= b ? 1 : 0;
    case TL_OP_GT: return a > b ? 1 : 0;
    case TL_OP_GE: return a >= b ? 1 : 0;
    case TL_OP_LOGICAL_AND: return (a != 0 && b != 0) ? 1 : 0;
    case TL_OP_LOGICAL_OR: return (a != 0 || b != 0) ? 1 : 0;
    default: return 0;
  }
}

// CPU twin: Kernels::binary (cpp/backends/cpu/kernels_elementwise.cpp).
kernel void tl_binary(constant TLElementwiseParams& p [[buffer(0)]],
                      device const uchar* a [[buffer(1)]],
                      device const uchar* b [[buffer(2)]],
                      device uchar* out [[buffer(3)]],
                      uint gid [[thread_position_in_grid]],
                      uint grid [[threads_per_grid]]) {
  for (long i = gid; i < p.n; i += grid) {
    long ia = tl_offset(p.a, i);
    long ib = tl_offset(p.b, i);
    if (p.float_compute) {
      float r = tl_binary_f(p.op, tl_load_f(a, ia, p.a.dtype), tl_load_f(b, ib, p.b.dtype));
      tl_store_f(out, i, p.out_dtype, r);
    } else {
      long r = tl_binary_i(p.op, tl_load_i(a, ia, p.a.dtype), tl_load_i(b, ib, p.b.dtype));
      tl_store_i(out, i, p.out_dtype, r);
    }
  }
}

// CPU twin: Kernels::binary_scalar (cpp/backends/cpu/kernels_elementwise.cpp).
kernel void tl_binary_scalar(constant TLElementwiseParams& p [[buffer(0)]],
                             device const uchar* a [[buffer(1)]],
                             device uchar* out [[buffer(3)]],
                             uint gid [[thread_position_in_grid]],
                             uint grid [[threads_per_grid]]) {
  for (long i = gid; i < p.n; i += grid) {
    long ia = tl_offset(p.a, i);
    if (p.float_compute) {
      float x = tl_load_f(a, ia, p.a.dtype);
      float r = p.scalar_first ? tl_binary_f(p.op, p.scalar_f, x) : tl_binary_f(p.op, x, p.scalar_f);
      tl_store_f(out, i, p.out_dtype, r);
    } else {
      long x = tl_load_i(a, ia, p.a.dtype);
      long r = p.scalar_first ? tl_binary_i(p.op, p.scalar_i, x) : tl_binary_i(p.op, x, p.scalar_i);
      tl_store_i(out, i, p.out_dtype, r);
    }
  }
}

// CPU twin: Kernels::where (cpp/backends/cpu/kernels_elementwise.cpp). c is the condition.
kernel void tl_where(constant TLElementwiseParams& p [[buffer(0)]],
                     device const uchar* a [[buffer(1)]],
                     device const uchar* b [[buffer(2)]],
                     device uchar* out [[buffer(3)]],
                     device const uchar* cond [[buffer(4)]],
                     uint gid [[thread_position_in_grid]],
                     uint grid [[threads_per_grid]]) {
  for (long i = gid; i < p.n; i += grid) {
    bool take_a = tl_load_i(cond, tl_offset(p.c, i), p.c.dtype) != 0;
    if (p.c.dtype == TL_F32 || p.c.dtype == TL_F16 || p.c.dtype == TL_BF16) {
      take_a = tl_load_f(cond, tl_offset(p.c, i), p.c.dtype) != 0.0f;
    }
    if (p.float_compute) {
      float r = take_a ? tl_load_f(a, tl_offset(p.a, i), p.a.dtype)
                       : tl_load_f(b, tl_offset(p.b, i), p.b.dtype);
      tl_store_f(out, i, p.out_dtype, r);
    } else {
      long r = take_a ? tl_load_i(a, tl_offset(p.a, i), p.a.dtype)
                      : tl_load_i(b, tl_offset(p.b, i), p.b.dtype);
      tl_store_i(out, i, p.out_dtype, r);
    }
  }
}
