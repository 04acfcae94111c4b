// Unary math. Same shape in and out, any strides on the input, out contiguous. Compute is f32
// unless the host clears float_compute (integer input and output), in which case the ops that
// make sense on integers run in int64. Round is round-half-to-even, as NumPy's round.
#include "tl_common.h"

// Op codes equal tl::UnaryOp.
#define TL_UOP_NEG 0
#define TL_UOP_ABS 1
#define TL_UOP_EXP 2
#define TL_UOP_LOG 3
#define TL_UOP_SQRT 4
#define TL_UOP_RSQRT 5
#define TL_UOP_SIN 6
#define TL_UOP_COS 7
#define TL_UOP_TAN 8
#define TL_UOP_TANH 9
#define TL_UOP_SIGMOID 10
#define TL_UOP_RELU 11
#define TL_UOP_GELU_TANH 12
#define TL_UOP_GELU_ERF 13
#define TL_UOP_SILU 14
#define TL_UOP_SQUARE 15
#define TL_UOP_FLOOR 16
#define TL_UOP_CEIL 17
#define TL_UOP_ROUND 18
#define TL_UOP_LOGICAL_NOT 19
#define TL_UOP_STEP 20

// erf is not in the Metal standard library: Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7).
inline float tl_erf(float x) {
  float sign = x < 0.0f ? -1.0f : 1.0f;
  float ax = fabs(x);
  float t = 1.0f / (1.0f + 0.3275911f * ax);
  float poly = t * (0.254829592f +
               t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  return sign * (1.0f - poly * exp(-ax * ax));
}

inline float tl_unary_f(int op, float x) {
  switch (op) {
    case TL_UOP_NEG: return -x;
    case TL_UOP_ABS: return fabs(x);
    case TL_UOP_EXP: return exp(x);
    case TL_UOP_LOG: return log(x);
    case TL_UOP_SQRT: return sqrt(x);
    case TL_UOP_RSQRT: return 1.0f / sqrt(x);
    case TL_UOP_SIN: return sin(x);
    case TL_UOP_COS: return cos(x);
    case TL_UOP_TAN: return tan(x);
    case TL_UOP_TANH: return tanh(x);
    case TL_UOP_SIGMOID: return 1.0f / (1.0f + exp(-x));
    case TL_UOP_RELU: return x > 0.0f ? x : 0.0f;
    case TL_UOP_GELU_TANH: {
      const float sqrt_2_over_pi = 0.7978845608028654f;
      return 0.5f * x * (1.0f + tanh(sqrt_2_over_pi * (x + 0.044715f * x * x * x)));
    }
    case TL_UOP_GELU_ERF: return 0.5f * x * (1.0f + tl_erf(x * 0.7071067811865476f));
    case TL_UOP_SILU: return x / (1.0f + exp(-x));
    case TL_UOP_SQUARE: return x * x;
    case TL_UOP_FLOOR: return floor(x);
    case TL_UOP_CEIL: return ceil(x);
    case TL_UOP_ROUND: return rint(x);
    case TL_UOP_LOGICAL_NOT: return x == 0.0f ? 1.0f : 0.0f;
    case TL_UOP_STEP: return x > 0.0f ? 1.0f : 0.0f;
    default: return 0.0f;
  }
}

// Integer versions; the host only clears float_compute for these ops.
inline long tl_unary_i(int op, long x) {
  switch (op) {
    case TL_UOP_NEG: return -x;
    case TL_UOP_ABS: return x < 0 ? -x : x;
    case TL_UOP_RELU: return x > 0 ? x : 0;
    case TL_UOP_SQUARE: return x * x;
    case TL_UOP_FLOOR: case TL_UOP_CEIL: case TL_UOP_ROUND: return x;
    case TL_UOP_LOGICAL_NOT: return x == 0 ? 1 : 0;
    case TL_UOP_STEP: return x > 0 ? 1 : 0;
    default: return 0;
  }
}

// CPU twin: Kernels::unary (cpp/backends/cpu/kernels_elementwise.cpp). Operand a is in p.a.
kernel void tl_unary(constant TLElementwiseParams& p [[buffer(0)]],
                     device const uchar* a [[buffer(1)]],
                     device uchar* out [[buffer(3)]],
                     uint gid [[thread_position_in_grid]],
                     uint grid [[threads_per_grid]]) {
  for (long i = gid; i < p.n; i += grid) {
    long ia = tl_offset(p.a, i);
    if (p.float_compute) {
      tl_store_f(out, i, p.out_dtype, tl_unary_f(p.op, tl_load_f(a, ia, p.a.dtype)));
    } else {
      tl_store_i(out, i, p.out_dtype, tl_unary_i(p.op, tl_load_i(a, ia, p.a.dtype)));
    }
  }
}

// CPU twin: Kernels::swiglu (cpp/backends/cpu/kernels_fused.cpp). out [rows, n] f32 =
// silu(gate) * up with unary Silu's expression; gate is `a`, up is `b` (any strides).
kernel void tl_swiglu(constant TLElementwiseParams& p [[buffer(0)]],
                      device const uchar* gate [[buffer(1)]],
                      device const uchar* up [[buffer(2)]],
                      device float* out [[buffer(3)]],
                      uint gid [[thread_position_in_grid]],
                      uint grid [[threads_per_grid]]) {
  for (long i = gid; i < p.n; i += grid) {
    float g = tl_load_f(gate, tl_offset(p.a, i), p.a.dtype);
    float silu = g / (1.0f + exp(-g));
    out[i] = silu * tl_load_f(up, tl_offset(p.b, i), p.b.dtype);
  }
}
