// Elementwise kernels: binary (broadcast via stride-0 views), scalar forms, unary math, copy
// with dtype conversion between any strides, fill, arange, where. Each walks a coalesced loop
// nest row by row, converting a chunk of a row to f32 (or int64 when every operand is an
// integer type) in a stack buffer, applying the op in a tight loop, and converting back.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu_kernels_impl.h"

namespace tl::cpu {
namespace {

// Rows are split over the pool only when the whole op is big enough to pay for the dispatch.
constexpr int64_t kParallelElems = 1 << 15;

int64_t row_grain(const LoopNest& ln) {
  return std::max<int64_t>(1, kParallelElems / std::max<int64_t>(1, ln.inner()));
}

bool is_comparison(BinaryOp op) {
  switch (op) {
    case BinaryOp::Eq: case BinaryOp::Ne: case BinaryOp::Lt: case BinaryOp::Le:
    case BinaryOp::Gt: case BinaryOp::Ge: case BinaryOp::LogicalAnd: case BinaryOp::LogicalOr:
      return true;
    default:
      return false;
  }
}

inline float py_fmod(float a, float b) {
  float r = std::fmod(a, b);
  if (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) r += b;
  return r;
}

// Integer division and modulo: floor semantics; x / 0 and x % 0 are 0; x / -1 wraps (INT64_MIN / -1
// is INT64_MIN, as two's complement negation gives) and x % -1 is 0, on every backend -- the
// hardware divide would trap (SIGFPE) on INT64_MIN / -1.
inline int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return static_cast<int64_t>(0ULL - static_cast<uint64_t>(a));
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
inline int64_t py_mod(int64_t a, int64_t b) {
  if (b == 0 || b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
inline int64_t ipow(int64_t base, int64_t e) {
  if (e < 0) return base == 1 ? 1 : (base == -1 ? ((e & 1) ? -1 : 1) : 0);
  int64_t r = 1;
  while (e > 0) {
    if (e & 1) r *= base;
    base *= base;
    e >>= 1;
  }
  return r;
}

template <class T, class F>
inline void map2(const T* a, const T* b, T* o, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
}

void apply_binary_f32(BinaryOp op, const float* a, const float* b, float* o, int64_t n) {
  switch (op) {
    case BinaryOp::Add: return map2(a, b, o, n, [](float x, float y) { return x + y; });
    case BinaryOp::Sub: return map2(a, b, o, n, [](float x, float y) { return x - y; });
    case BinaryOp::Mul: return map2(a, b, o, n, [](float x, float y) { return x * y; });
    case BinaryOp::Div: return map2(a, b, o, n, [](float x, float y) { return x / y; });
    case BinaryOp::Pow: return map2(a, b, o, n, [](float x, float y) { return std::pow(x, y); });
    case BinaryOp::Maximum:
      return map2(a, b, o, n, [](float x, float y) { return (x != x || x > y) ? x : y; });
    case BinaryOp::Minimum:
      return map2(a, b, o, n, [](float x, float y) { return (x != x || x < y) ? x : y; });
    case BinaryOp::Mod: return map2(a, b, o, n, [](float x, float y) { return py_fmod(x, y); });
    case BinaryOp::Eq: return map2(a, b, o, n, [](float x, float y) { return x == y ? 1.f : 0.f; });
    case BinaryOp::Ne: return map2(a, b, o, n, [](float x, float y) { return x != y ? 1.f : 0.f; });
    case BinaryOp::Lt: return map2(a, b, o, n, [](float x, float y) { return x < y ? 1.f : 0.f; });
    case BinaryOp::Le: return map2(a, b, o, n, [](float x, float y) { return x <= y ? 1.f : 0.f; });
    case BinaryOp::Gt: return map2(a, b, o, n, [](float x, float y) { return x > y ? 1.f : 0.f; });
    case BinaryOp::Ge: return map2(a, b, o, n, [](float x, float y) { return x >= y ? 1.f : 0.f; });
    case BinaryOp::LogicalAnd:
      return map2(a, b, o, n, [](float x, float y) { return (x != 0.f && y != 0.f) ? 1.f : 0.f; });
    case BinaryOp::LogicalOr:
      return map2(a, b, o, n, [](float x, float y) { return (x != 0.f || y != 0.f) ? 1.f : 0.f; });
  }
}

void apply_binary_i64(BinaryOp op, const int64_t* a, const int64_t* b, int64_t* o, int64_t n) {
  using I = int64_t;
  switch (op) {
    case BinaryOp::Add: return map2(a, b, o, n, [](I x, I y) { return I(uint64_t(x) + uint64_t(y)); });
    case BinaryOp::Sub: return map2(a, b, o, n, [](I x, I y) { return I(uint64_t(x) - uint64_t(y)); });
    case BinaryOp::Mul: return map2(a, b, o, n, [](I x, I y) { return I(uint64_t(x) * uint64_t(y)); });
    case BinaryOp::Div: return map2(a, b, o, n, [](I x, I y) { return floor_div(x, y); });
    case BinaryOp::Pow: return map2(a, b, o, n, [](I x, I y) { return ipow(x, y); });
    case BinaryOp::Maximum: return map2(a, b, o, n, [](I x, I y) { return x > y ? x : y; });
    case BinaryOp::Minimum: return map2(a, b, o, n, [](I x, I y) { return x < y ? x : y; });
    case BinaryOp::Mod: return map2(a, b, o, n, [](I x, I y) { return py_mod(x, y); });
    case BinaryOp::Eq: return map2(a, b, o, n, [](I x, I y) { return I(x == y); });
    case BinaryOp::Ne: return map2(a, b, o, n, [](I x, I y) { return I(x != y); });
    case BinaryOp::Lt: return map2(a, b, o, n, [](I x, I y) { return I(x < y); });
    case BinaryOp::Le: return map2(a, b, o, n, [](I x, I y) { return I(x <= y); });
    case BinaryOp::Gt: return map2(a, b, o, n, [](I x, I y) { return I(x > y); });
    case BinaryOp::Ge: return map2(a, b, o, n, [](I x, I y) { return I(x >= y); });
    case BinaryOp::LogicalAnd: return map2(a, b, o, n, [](I x, I y) { return I(x != 0 && y != 0); });
    case BinaryOp::LogicalOr: return map2(a, b, o, n, [](I x, I y) { return I(x != 0 || y != 0); });
  }
}

// f32 compute unless every value involved is an integer (or bool).
bool binary_in_float(BinaryOp op, DType a, DType b, DType out) {
  if (is_floating(a) || is_floating(b)) return true;
  return !is_comparison(op) && is_floating(out);
}

// Runs `op` over a (and b, unless b_view is null and the scalar is used) into out.
void binary_impl(ThreadPool& pool, BinaryOp op, const View& a, const View* b, double scalar,
                 bool scalar_first, const View& out) {
  require_plain("binary", a);
  require_plain("binary", out);
  if (b) require_plain("binary", *b);
  const View* views[3] = {&out, &a, b ? b : &a};
  LoopNest ln = make_loop_nest(3, views);
  DType bt = b ? b->dtype : (scalar == std::floor(scalar) && std::fabs(scalar) < 9e18 ? DType::I64 : DType::F32);
  bool in_float = binary_in_float(op, a.dtype, bt, out.dtype);
  const int64_t inner = ln.inner();
  pool.parallel_for(ln.rows(), row_grain(ln), [&](int64_t r0, int64_t r1) {
    int64_t offs[3];
    if (in_float) {
      alignas(32) float ta[kChunk], tb[kChunk], to[kChunk];
      float fs = static_cast<float>(scalar);
      for (int64_t r = r0; r < r1; ++r) {
        ln.row_offsets(r, offs);
        for (int64_t c = 0; c < inner; c += kChunk) {
          int64_t n = std::min(kChunk, inner - c);
          const float* pa = ta;
          const float* pb = tb;
          const char* abase = element_ptr(a, offs[1] + c * ln.inner_stride(1));
          if (a.dtype == DType::F32 && ln.inner_stride(1) == 1)
            pa = reinterpret_cast<const float*>(abase);
          else
            load_f32(a.dtype, abase, ln.inner_stride(1), n, ta);
          if (b) {
            const char* bbase = element_ptr(*b, offs[2] + c * ln.inner_stride(2));
            if (b->dtype == DType::F32 && ln.inner_stride(2) == 1)
              pb = reinterpret_cast<const float*>(bbase);
            else
              load_f32(b->dtype, bbase, ln.inner_stride(2), n, tb);
          } else {
            std::fill(tb, tb + n, fs);
          }
          if (!b && scalar_first) std::swap(pa, pb);
          char* obase = element_ptr(out, offs[0] + c * ln.inner_stride(0));
          if (out.dtype == DType::F32 && ln.inner_stride(0) == 1) {
            apply_binary_f32(op, pa, pb, reinterpret_cast<float*>(obase), n);
          } else {
            apply_binary_f32(op, pa, pb, to, n);
            store_f32(out.dtype, obase, ln.inner_stride(0), n, to);
          }
        }
      }
    } else {
      int64_t ta[kChunk], tb[kChunk], to[kChunk];
      int64_t is = saturate_to_int(scalar, DType::I64);
      for (int64_t r = r0; r < r1; ++r) {
        ln.row_offsets(r, offs);
        for (int64_t c = 0; c < inner; c += kChunk) {
          int64_t n = std::min(kChunk, inner - c);
          load_i64(a.dtype, element_ptr(a, offs[1] + c * ln.inner_stride(1)), ln.inner_stride(1), n, ta);
          if (b)
            load_i64(b->dtype, element_ptr(*b, offs[2] + c * ln.inner_stride(2)), ln.inner_stride(2), n, tb);
          else
            std::fill(tb, tb + n, is);
          if (!b && scalar_first)
            apply_binary_i64(op, tb, ta, to, n);
          else
            apply_binary_i64(op, ta, tb, to, n);
          store_i64(out.dtype, element_ptr(out, offs[0] + c * ln.inner_stride(0)), ln.inner_stride(0), n, to);
        }
      }
    }
  });
}

template <class F>
inline void map1(const float* a, float* o, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
}

void apply_unary_f32(UnaryOp op, const float* a, float* o, int64_t n) {
  switch (op) {
    case UnaryOp::Neg: return map1(a, o, n, [](float x) { return -x; });
    case UnaryOp::Abs: return map1(a, o, n, [](float x) { return std::fabs(x); });
    case UnaryOp::Exp: return map1(a, o, n, [](float x) { return std::exp(x); });
    case UnaryOp::Log: return map1(a, o, n, [](float x) { return std::log(x); });
    case UnaryOp::Sqrt: return map1(a, o, n, [](float x) { return std::sqrt(x); });
    case UnaryOp::Rsqrt: return map1(a, o, n, [](float x) { return 1.0f / std::sqrt(x); });
    case UnaryOp::Sin: return map1(a, o, n, [](float x) { return std::sin(x); });
    case UnaryOp::Cos: return map1(a, o, n, [](float x) { return std::cos(x); });
    case UnaryOp::Tan: return map1(a, o, n, [](float x) { return std::tan(x); });
    case UnaryOp::Tanh: return map1(a, o, n, [](float x) { return std::tanh(x); });
    case UnaryOp::Sigmoid: return map1(a, o, n, [](float x) { return 1.0f / (1.0f + std::exp(-x)); });
    case UnaryOp::Relu: return map1(a, o, n, [](float x) { return x > 0.0f ? x : (x != x ? x : 0.0f); });
    case UnaryOp::GeluTanh:
      return map1(a, o, n, [](float x) {
        const float k = 0.7978845608028654f;  // sqrt(2 / pi)
        return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
      });
    case UnaryOp::GeluErf:
      return map1(a, o, n, [](float x) { return 0.5f * x * (1.0f + std::erf(x * 0.7071067811865476f)); });
    case UnaryOp::Silu: return map1(a, o, n, [](float x) { return x / (1.0f + std::exp(-x)); });
    case UnaryOp::Square: return map1(a, o, n, [](float x) { return x * x; });
    case UnaryOp::Floor: return map1(a, o, n, [](float x) { return std::floor(x); });
    case UnaryOp::Ceil: return map1(a, o, n, [](float x) { return std::ceil(x); });
    case UnaryOp::Round: return map1(a, o, n, [](float x) { return std::nearbyint(x); });
    case UnaryOp::LogicalNot: return map1(a, o, n, [](float x) { return x == 0.0f ? 1.0f : 0.0f; });
    case UnaryOp::Step: return map1(a, o, n, [](float x) { return x > 0.0f ? 1.0f : 0.0f; });
  }
}

// Integer-exact unary ops (others go through f32).
bool unary_integer_exact(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: case UnaryOp::Abs: case UnaryOp::Square: case UnaryOp::Relu:
    case UnaryOp::Floor: case UnaryOp::Ceil: case UnaryOp::Round: case UnaryOp::LogicalNot:
    case UnaryOp::Step:
      return true;
    default:
      return false;
  }
}

void apply_unary_i64(UnaryOp op, const int64_t* a, int64_t* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    int64_t x = a[i];
    switch (op) {
      case UnaryOp::Neg: o[i] = -x; break;
      case UnaryOp::Abs: o[i] = x < 0 ? -x : x; break;
      case UnaryOp::Square: o[i] = x * x; break;
      case UnaryOp::Relu: o[i] = x > 0 ? x : 0; break;
      case UnaryOp::LogicalNot: o[i] = x == 0; break;
      case UnaryOp::Step: o[i] = x > 0; break;
      default: o[i] = x; break;  // floor/ceil/round of an integer
    }
  }
}

}  // namespace

void CpuKernels::binary(BinaryOp op, const View& a, const View& b, const View& out) {
  binary_impl(pool(), op, a, &b, 0.0, false, out);
}

void CpuKernels::binary_scalar(BinaryOp op, const View& a, double s, bool scalar_first,
                               const View& out) {
  binary_impl(pool(), op, a, nullptr, s, scalar_first, out);
}

void CpuKernels::unary(UnaryOp op, const View& a, const View& out) {
  require_plain("unary", a);
  require_plain("unary", out);
  const View* views[2] = {&out, &a};
  LoopNest ln = make_loop_nest(2, views);
  bool in_int = !is_floating(a.dtype) && !is_floating(out.dtype) && unary_integer_exact(op);
  const int64_t inner = ln.inner();
  pool().parallel_for(ln.rows(), row_grain(ln), [&](int64_t r0, int64_t r1) {
    int64_t offs[2];
    for (int64_t r = r0; r < r1; ++r) {
      ln.row_offsets(r, offs);
      for (int64_t c = 0; c < inner; c += kChunk) {
        int64_t n = std::min(kChunk, inner - c);
        const char* abase = element_ptr(a, offs[1] + c * ln.inner_stride(1));
        char* obase = element_ptr(out, offs[0] + c * ln.inner_stride(0));
        if (in_int) {
          int64_t ta[kChunk], to[kChunk];
          load_i64(a.dtype, abase, ln.inner_stride(1), n, ta);
          apply_unary_i64(op, ta, to, n);
          store_i64(out.dtype, obase, ln.inner_stride(0), n, to);
        } else {
          alignas(32) float ta[kChunk], to[kChunk];
          const float* pa = ta;
          if (a.dtype == DType::F32 && ln.inner_stride(1) == 1)
            pa = reinterpret_cast<const float*>(abase);
          else
            load_f32(a.dtype, abase, ln.inner_stride(1), n, ta);
          if (out.dtype == DType::F32 && ln.inner_stride(0) == 1) {
            apply_unary_f32(op, pa, reinterpret_cast<float*>(obase), n);
          } else {
            apply_unary_f32(op, pa, to, n);
            store_f32(out.dtype, obase, ln.inner_stride(0), n, to);
          }
        }
      }
    }
  });
}

// A same-dtype copy between any strides, moved as raw elements of T (no conversion, so a NaN's
// payload and -0.0 survive as they do through memcpy). The loop nest's last two dims run as a tight
// double loop and the dims above them advance as an odometer: permutes and strided views of small
// images (rows of 4-16 elements, e.g. NCHW <-> NHWC) cost one pass over the data instead of a
// division per row and a round trip through an f32 buffer.
template <class T>
void copy_same_dtype(ThreadPool& pool, const LoopNest& ln, const View& src, const View& dst) {
  const int nd = ln.ndim;
  const int64_t n1 = ln.shape[nd - 1], d1 = ln.strides[0][nd - 1], s1 = ln.strides[1][nd - 1];
  const int64_t n2 = nd >= 2 ? ln.shape[nd - 2] : 1;
  const int64_t d2 = nd >= 2 ? ln.strides[0][nd - 2] : 0, s2 = nd >= 2 ? ln.strides[1][nd - 2] : 0;
  const int outer_dims = std::max(0, nd - 2);
  int64_t outer = 1;
  for (int d = 0; d < outer_dims; ++d) outer *= ln.shape[d];
  T* out = static_cast<T*>(dst.data);
  const T* in = static_cast<const T*>(src.data);
  const int64_t grain = std::max<int64_t>(1, kParallelElems / std::max<int64_t>(1, n1 * n2));
  pool.parallel_for(outer, grain, [&](int64_t o0, int64_t o1) {
    int64_t idx[kMaxDims] = {};
    int64_t od = 0, os = 0;
    for (int64_t d = outer_dims - 1, r = o0; d >= 0; --d) {
      idx[d] = r % ln.shape[d];
      r /= ln.shape[d];
      od += idx[d] * ln.strides[0][d];
      os += idx[d] * ln.strides[1][d];
    }
    for (int64_t o = o0; o < o1; ++o) {
      for (int64_t j = 0; j < n2; ++j) {
        T* pd = out + od + j * d2;
        const T* ps = in + os + j * s2;
        if (d1 == 1 && s1 == 1) {
          std::memmove(pd, ps, static_cast<size_t>(n1) * sizeof(T));
        } else {
          for (int64_t i = 0; i < n1; ++i) pd[i * d1] = ps[i * s1];
        }
      }
      for (int d = outer_dims - 1; d >= 0; --d) {  // advance the odometer to outer index o + 1
        od += ln.strides[0][d];
        os += ln.strides[1][d];
        if (++idx[d] < ln.shape[d]) break;
        od -= ln.strides[0][d] * ln.shape[d];
        os -= ln.strides[1][d] * ln.shape[d];
        idx[d] = 0;
      }
    }
  });
}

void CpuKernels::copy(const View& src, const View& dst) {
  require_plain("copy", src);
  require_plain("copy", dst);
  const View* views[2] = {&dst, &src};
  LoopNest ln = make_loop_nest(2, views);
  if (src.dtype == dst.dtype && ln.rows() * ln.inner() > 0) {
    switch (block_bytes(src.dtype)) {
      case 1: return copy_same_dtype<uint8_t>(pool(), ln, src, dst);
      case 2: return copy_same_dtype<uint16_t>(pool(), ln, src, dst);
      case 4: return copy_same_dtype<uint32_t>(pool(), ln, src, dst);
      case 8: return copy_same_dtype<uint64_t>(pool(), ln, src, dst);
      default: break;
    }
  }
  const int64_t inner = ln.inner();
  const bool same_contiguous = src.dtype == dst.dtype && ln.inner_stride(0) == 1 && ln.inner_stride(1) == 1;
  const bool in_int = !is_floating(src.dtype) && !is_floating(dst.dtype);
  const int64_t esize = block_bytes(src.dtype);
  pool().parallel_for(ln.rows(), row_grain(ln), [&](int64_t r0, int64_t r1) {
    int64_t offs[2];
    for (int64_t r = r0; r < r1; ++r) {
      ln.row_offsets(r, offs);
      if (same_contiguous) {
        std::memmove(element_ptr(dst, offs[0]), element_ptr(src, offs[1]), static_cast<size_t>(inner * esize));
        continue;
      }
      for (int64_t c = 0; c < inner; c += kChunk) {
        int64_t n = std::min(kChunk, inner - c);
        const char* sbase = element_ptr(src, offs[1] + c * ln.inner_stride(1));
        char* dbase = element_ptr(dst, offs[0] + c * ln.inner_stride(0));
        if (in_int) {
          int64_t t[kChunk];
          load_i64(src.dtype, sbase, ln.inner_stride(1), n, t);
          store_i64(dst.dtype, dbase, ln.inner_stride(0), n, t);
        } else {
          alignas(32) float t[kChunk];
          load_f32(src.dtype, sbase, ln.inner_stride(1), n, t);
          store_f32(dst.dtype, dbase, ln.inner_stride(0), n, t);
        }
      }
    }
  });
}

void CpuKernels::fill(const View& out, double value) {
  require_plain("fill", out);
  const View* views[1] = {&out};
  LoopNest ln = make_loop_nest(1, views);
  const int64_t inner = ln.inner();
  const bool in_int = !is_floating(out.dtype);
  pool().parallel_for(ln.rows(), row_grain(ln), [&](int64_t r0, int64_t r1) {
    alignas(32) float tf[kChunk];
    int64_t ti[kChunk];
    std::fill(tf, tf + kChunk, static_cast<float>(value));
    std::fill(ti, ti + kChunk, saturate_to_int(value, in_int ? out.dtype : DType::I64));
    int64_t off;
    for (int64_t r = r0; r < r1; ++r) {
      ln.row_offsets(r, &off);
      for (int64_t c = 0; c < inner; c += kChunk) {
        int64_t n = std::min(kChunk, inner - c);
        char* base = element_ptr(out, off + c * ln.inner_stride(0));
        if (in_int)
          store_i64(out.dtype, base, ln.inner_stride(0), n, ti);
        else
          store_f32(out.dtype, base, ln.inner_stride(0), n, tf);
      }
    }
  });
}

void CpuKernels::arange(const View& out, double start, double step) {
  require_plain("arange", out);
  const int64_t n = out.numel();
  const int64_t stride = out.ndim > 0 ? out.strides[out.ndim - 1] : 1;
  const bool in_int = !is_floating(out.dtype);
  for (int64_t c = 0; c < n; c += kChunk) {
    int64_t m = std::min(kChunk, n - c);
    char* base = element_ptr(out, c * stride);
    if (in_int) {
      int64_t t[kChunk];
      for (int64_t i = 0; i < m; ++i) t[i] = static_cast<int64_t>(std::llround(start + static_cast<double>(c + i) * step));
      store_i64(out.dtype, base, stride, m, t);
    } else {
      float t[kChunk];
      for (int64_t i = 0; i < m; ++i) t[i] = static_cast<float>(start + static_cast<double>(c + i) * step);
      store_f32(out.dtype, base, stride, m, t);
    }
  }
}

void CpuKernels::where(const View& cond, const View& a, const View& b, const View& out) {
  require_plain("where", cond);
  require_plain("where", a);
  require_plain("where", b);
  require_plain("where", out);
  const View* views[4] = {&out, &cond, &a, &b};
  LoopNest ln = make_loop_nest(4, views);
  const int64_t inner = ln.inner();
  const bool in_int = !is_floating(out.dtype) && !is_floating(a.dtype) && !is_floating(b.dtype);
  pool().parallel_for(ln.rows(), row_grain(ln), [&](int64_t r0, int64_t r1) {
    int64_t offs[4];
    for (int64_t r = r0; r < r1; ++r) {
      ln.row_offsets(r, offs);
      for (int64_t c = 0; c < inner; c += kChunk) {
        int64_t n = std::min(kChunk, inner - c);
        alignas(32) float tc[kChunk];
        load_f32(cond.dtype, element_ptr(cond, offs[1] + c * ln.inner_stride(1)), ln.inner_stride(1), n, tc);
        char* obase = element_ptr(out, offs[0] + c * ln.inner_stride(0));
        if (in_int) {
          int64_t ta[kChunk], tb[kChunk];
          load_i64(a.dtype, element_ptr(a, offs[2] + c * ln.inner_stride(2)), ln.inner_stride(2), n, ta);
          load_i64(b.dtype, element_ptr(b, offs[3] + c * ln.inner_stride(3)), ln.inner_stride(3), n, tb);
          for (int64_t i = 0; i < n; ++i) ta[i] = tc[i] != 0.0f ? ta[i] : tb[i];
          store_i64(out.dtype, obase, ln.inner_stride(0), n, ta);
        } else {
          alignas(32) float ta[kChunk], tb[kChunk];
          load_f32(a.dtype, element_ptr(a, offs[2] + c * ln.inner_stride(2)), ln.inner_stride(2), n, ta);
          load_f32(b.dtype, element_ptr(b, offs[3] + c * ln.inner_stride(3)), ln.inner_stride(3), n, tb);
          for (int64_t i = 0; i < n; ++i) ta[i] = tc[i] != 0.0f ? ta[i] : tb[i];
          store_f32(out.dtype, obase, ln.inner_stride(0), n, ta);
        }
      }
    }
  });
}

}  // namespace tl::cpu
