// Elementwise kernels: binary (tensor or scalar operand), unary, copy, fill, arange, where.
// Each thread walks the output in row-major order and finds every operand's element through its
// own strides (stride 0 = broadcast), so no operand is ever made contiguous first. Float math is
// f32; when no operand or result is floating the math is int64 (floor division and modulo, as
// NumPy does).
#include <cmath>
#include <cstring>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

namespace tl {
namespace cuda {
namespace {

constexpr int kThreads = 256;

// One operand of an elementwise kernel.
struct Operand {
  const void* data;
  DType dtype;
  bool contiguous;  // row-major dense: the element offset is the linear index
  Layout layout;
};

Operand operand_of(const View& v) {
  return Operand{v.data, v.dtype, v.is_contiguous(), layout_of(v)};
}

__device__ __forceinline__ int64_t offset_of(const Operand& o, int64_t i) {
  return o.contiguous ? i : strided_offset(o.layout, i);
}

bool is_comparison(BinaryOp op) {
  return op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::Lt || op == BinaryOp::Le ||
         op == BinaryOp::Gt || op == BinaryOp::Ge;
}

bool is_logical(BinaryOp op) { return op == BinaryOp::LogicalAnd || op == BinaryOp::LogicalOr; }

__device__ __forceinline__ float float_binary(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Pow: return powf(a, b);
    case BinaryOp::Maximum: return (isnan(a) || isnan(b)) ? nanf("") : fmaxf(a, b);
    case BinaryOp::Minimum: return (isnan(a) || isnan(b)) ? nanf("") : fminf(a, b);
    case BinaryOp::Mod: {
      float r = fmodf(a, b);
      if (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) r += b;
      return r;
    }
    case BinaryOp::Eq: return a == b ? 1.0f : 0.0f;
    case BinaryOp::Ne: return a != b ? 1.0f : 0.0f;
    case BinaryOp::Lt: return a < b ? 1.0f : 0.0f;
    case BinaryOp::Le: return a <= b ? 1.0f : 0.0f;
    case BinaryOp::Gt: return a > b ? 1.0f : 0.0f;
    case BinaryOp::Ge: return a >= b ? 1.0f : 0.0f;
    case BinaryOp::LogicalAnd: return (a != 0.0f && b != 0.0f) ? 1.0f : 0.0f;
    case BinaryOp::LogicalOr: return (a != 0.0f || b != 0.0f) ? 1.0f : 0.0f;
  }
  return 0.0f;
}

__device__ __forceinline__ int64_t int_pow(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exp & 1) ? -1 : 1;
    return 0;
  }
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) result *= base;
    base *= base;
    exp >>= 1;
  }
  return result;
}

__device__ __forceinline__ int64_t int_binary(BinaryOp op, int64_t a, int64_t b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: {  // x / 0 is 0; x / -1 wraps (INT64_MIN / -1 is INT64_MIN), as on the CPU
      if (b == 0) return 0;
      if (b == -1) return static_cast<int64_t>(0ULL - static_cast<unsigned long long>(a));
      int64_t q = a / b;
      if ((a % b != 0) && ((a < 0) != (b < 0))) --q;  // floor division
      return q;
    }
    case BinaryOp::Pow: return int_pow(a, b);
    case BinaryOp::Maximum: return a > b ? a : b;
    case BinaryOp::Minimum: return a < b ? a : b;
    case BinaryOp::Mod: {
      if (b == 0 || b == -1) return 0;
      int64_t r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
      return r;
    }
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
    case BinaryOp::LogicalAnd: return (a != 0 && b != 0);
    case BinaryOp::LogicalOr: return (a != 0 || b != 0);
  }
  return 0;
}

// b_is_scalar: b is the scalar (bf/bi) rather than an operand; scalar_first swaps the operands.
template <bool kFloat>
__global__ void binary_kernel(BinaryOp op, Operand a, Operand b, bool b_is_scalar, float bf,
                              int64_t bi, bool scalar_first, void* out, DType out_dtype,
                              int64_t n, const int64_t* dyn) {
  pdl_wait();  // launched as a programmatic dependent launch (cuda_common.cuh)
  pdl_launch_dependents();
  if (dyn != nullptr) {  // a replay graph's scalar: [f32 bits, integer]
    bf = __int_as_float(static_cast<int>(dyn[0]));
    bi = dyn[1];
  }
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ia = offset_of(a, i);
    if (kFloat) {
      float x = load_float(a.data, a.dtype, ia);
      float y = b_is_scalar ? bf : load_float(b.data, b.dtype, offset_of(b, i));
      if (scalar_first) { const float t = x; x = y; y = t; }
      store_float(out, out_dtype, i, float_binary(op, x, y));
    } else {
      int64_t x = load_int(a.data, a.dtype, ia);
      int64_t y = b_is_scalar ? bi : load_int(b.data, b.dtype, offset_of(b, i));
      if (scalar_first) { const int64_t t = x; x = y; y = t; }
      store_int(out, out_dtype, i, int_binary(op, x, y));
    }
  }
}

__device__ __forceinline__ float float_unary(UnaryOp op, float x) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Abs: return fabsf(x);
    case UnaryOp::Exp: return exp_rounded(x);
    case UnaryOp::Log: return logf(x);
    case UnaryOp::Sqrt: return sqrtf(x);
    case UnaryOp::Rsqrt: return 1.0f / sqrtf(x);
    case UnaryOp::Sin: return sinf(x);
    case UnaryOp::Cos: return cosf(x);
    case UnaryOp::Tan: return tanf(x);
    case UnaryOp::Tanh: return tanhf(x);
    case UnaryOp::Sigmoid: return 1.0f / (1.0f + exp_rounded(-x));
    case UnaryOp::Relu: return x > 0.0f ? x : (isnan(x) ? x : 0.0f);
    case UnaryOp::GeluTanh: {
      const float c = 0.7978845608028654f;  // sqrt(2 / pi)
      return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
    }
    case UnaryOp::GeluErf: return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
    case UnaryOp::Silu: return x / (1.0f + exp_rounded(-x));
    case UnaryOp::Square: return x * x;
    case UnaryOp::Floor: return floorf(x);
    case UnaryOp::Ceil: return ceilf(x);
    case UnaryOp::Round: return rintf(x);  // half to even, as NumPy
    case UnaryOp::LogicalNot: return x == 0.0f ? 1.0f : 0.0f;
    case UnaryOp::Step: return x > 0.0f ? 1.0f : 0.0f;
  }
  return 0.0f;
}

// Integer unary ops that stay exact in int64; the rest go through f32.
__device__ __forceinline__ bool int_unary(UnaryOp op, int64_t x, int64_t* r) {
  switch (op) {
    case UnaryOp::Neg: *r = -x; return true;
    case UnaryOp::Abs: *r = x < 0 ? -x : x; return true;
    case UnaryOp::Square: *r = x * x; return true;
    case UnaryOp::Relu: *r = x > 0 ? x : 0; return true;
    case UnaryOp::Floor: case UnaryOp::Ceil: case UnaryOp::Round: *r = x; return true;
    case UnaryOp::LogicalNot: *r = x == 0; return true;
    case UnaryOp::Step: *r = x > 0; return true;
    default: return false;
  }
}

template <bool kFloat>
__global__ void unary_kernel(UnaryOp op, Operand a, void* out, DType out_dtype, int64_t n) {
  pdl_wait();  // launched as a programmatic dependent launch (cuda_common.cuh)
  pdl_launch_dependents();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ia = offset_of(a, i);
    if (kFloat) {
      store_float(out, out_dtype, i, float_unary(op, load_float(a.data, a.dtype, ia)));
    } else {
      const int64_t x = load_int(a.data, a.dtype, ia);
      int64_t r;
      if (int_unary(op, x, &r)) {
        store_int(out, out_dtype, i, r);
      } else {
        store_float(out, out_dtype, i, float_unary(op, static_cast<float>(x)));
      }
    }
  }
}

template <bool kFloat>
__global__ void copy_kernel(Operand src, Operand dst, int64_t n) {
  pdl_wait();  // launched as a programmatic dependent launch (cuda_common.cuh)
  pdl_launch_dependents();
  void* dst_data = const_cast<void*>(dst.data);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t is = offset_of(src, i);
    const int64_t id = offset_of(dst, i);
    if (kFloat) {
      store_float(dst_data, dst.dtype, id, load_float(src.data, src.dtype, is));
    } else {
      store_int(dst_data, dst.dtype, id, load_int(src.data, src.dtype, is));
    }
  }
}

int64_t float_bits(float f) {
  int32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

template <bool kFloat>
__global__ void fill_kernel(Operand out, float vf, int64_t vi, int64_t n, const int64_t* dyn) {
  pdl_wait();  // launched as a programmatic dependent launch (cuda_common.cuh)
  pdl_launch_dependents();
  if (dyn != nullptr) {  // a replay graph's value: [f32 bits, integer]
    vf = __int_as_float(static_cast<int>(dyn[0]));
    vi = dyn[1];
  }
  void* data = const_cast<void*>(out.data);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = offset_of(out, i);
    if (kFloat) {
      store_float(data, out.dtype, o, vf);
    } else {
      store_int(data, out.dtype, o, vi);
    }
  }
}

__global__ void arange_kernel(void* out, DType dtype, double start, double step, int64_t n) {
  const bool floating = dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double v = start + static_cast<double>(i) * step;
    if (floating) {
      store_float(out, dtype, i, static_cast<float>(v));
    } else {
      store_int(out, dtype, i, llround(v));
    }
  }
}

template <bool kFloat>
__global__ void where_kernel(Operand cond, Operand a, Operand b, void* out, DType out_dtype,
                             int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const bool c = load_truth(cond.data, cond.dtype, offset_of(cond, i));
    const Operand& src = c ? a : b;
    const int64_t o = offset_of(src, i);
    if (kFloat) {
      store_float(out, out_dtype, i, load_float(src.data, src.dtype, o));
    } else {
      store_int(out, out_dtype, i, load_int(src.data, src.dtype, o));
    }
  }
}

void require_plain(const View& v, const char* op) {
  if (is_quantized(v.dtype)) {
    throw KernelError(std::string(op) + ": quantized dtype " + dtype_name(v.dtype) +
                      " is not an elementwise operand");
  }
}

bool arithmetic_into_float(BinaryOp op, DType out) {
  return is_floating(out) && !is_comparison(op) && !is_logical(op);
}

}  // namespace

void CudaKernels::binary(BinaryOp op, const View& a, const View& b, const View& out) {
  require_plain(a, "binary");
  require_plain(b, "binary");
  require_plain(out, "binary");
  const int64_t n = out.numel();
  if (n == 0) return;
  const bool fl = is_floating(a.dtype) || is_floating(b.dtype) || arithmetic_into_float(op, out.dtype);
  const unsigned grid = grid_for(n, kThreads);
  if (fl) {
    launch_kernel(tuning_.pdl, binary_kernel<true>, dim3(grid), dim3(kThreads), 0, stream_, op, operand_of(a),
                  operand_of(b), false, 0.0f, 0, false, out.data, out.dtype, n, nullptr);
  } else {
    launch_kernel(tuning_.pdl, binary_kernel<false>, dim3(grid), dim3(kThreads), 0, stream_, op, operand_of(a),
                  operand_of(b), false, 0.0f, 0, false, out.data, out.dtype, n, nullptr);
  }
  check_launch("binary");
}

void CudaKernels::binary_scalar(BinaryOp op, const View& a, double s, bool scalar_first,
                                const View& out) {
  require_plain(a, "binary");
  require_plain(out, "binary");
  const int64_t n = out.numel();
  if (n == 0) return;
  // As on the CPU backend: an integral scalar within int64 range keeps integer math integral.
  const bool integral_scalar = std::isfinite(s) && std::floor(s) == s && std::fabs(s) < 9e18;
  const bool fl = is_floating(a.dtype) || !integral_scalar || arithmetic_into_float(op, out.dtype);
  const unsigned grid = grid_for(n, kThreads);
  Operand none{};
  const float sf = static_cast<float>(s);
  const int64_t si = fl ? 0 : static_cast<int64_t>(s);
  // In a replay graph the float or integer kernel stays the captured one (the key).
  const DynArgs dyn = dyn_args({float_bits(sf), si}, {}, fl ? 1 : 0);
  if (!dyn.launch) return;
  if (fl) {
    launch_kernel(tuning_.pdl, binary_kernel<true>, dim3(grid), dim3(kThreads), 0, stream_, op, operand_of(a), none, true, sf, 0,
                                                         scalar_first, out.data, out.dtype, n, dyn.device);
  } else {
    launch_kernel(tuning_.pdl, binary_kernel<false>, dim3(grid), dim3(kThreads), 0, stream_, op, operand_of(a), none, true, 0.0f, si,
                                                          scalar_first, out.data, out.dtype, n, dyn.device);
  }
  check_launch("binary_scalar");
}

void CudaKernels::unary(UnaryOp op, const View& a, const View& out) {
  require_plain(a, "unary");
  require_plain(out, "unary");
  const int64_t n = out.numel();
  if (n == 0) return;
  const bool fl = is_floating(a.dtype) || is_floating(out.dtype);
  const unsigned grid = grid_for(n, kThreads);
  if (fl) {
    launch_kernel(tuning_.pdl, unary_kernel<true>, dim3(grid), dim3(kThreads), 0, stream_, op, operand_of(a), out.data, out.dtype, n);
  } else {
    launch_kernel(tuning_.pdl, unary_kernel<false>, dim3(grid), dim3(kThreads), 0, stream_, op, operand_of(a), out.data, out.dtype, n);
  }
  check_launch("unary");
}

void CudaKernels::copy(const View& src, const View& dst) {
  require_plain(src, "copy");
  require_plain(dst, "copy");
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (src.dtype == dst.dtype && src.is_contiguous() && dst.is_contiguous()) {
    const cudaError_t err = cudaMemcpyAsync(dst.data, src.data, n * block_bytes(dst.dtype),
                                            cudaMemcpyDeviceToDevice, stream_);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      throw KernelError(std::string("cuda: copy: ") + cudaGetErrorString(err));
    }
    g_device_ops.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const bool fl = is_floating(src.dtype) || is_floating(dst.dtype);
  const unsigned grid = grid_for(n, kThreads);
  if (fl) {
    launch_kernel(tuning_.pdl, copy_kernel<true>, dim3(grid), dim3(kThreads), 0, stream_, operand_of(src), operand_of(dst), n);
  } else {
    launch_kernel(tuning_.pdl, copy_kernel<false>, dim3(grid), dim3(kThreads), 0, stream_, operand_of(src), operand_of(dst), n);
  }
  check_launch("copy");
}

void CudaKernels::fill(const View& out, double value) {
  require_plain(out, "fill");
  const int64_t n = out.numel();
  if (n == 0) return;
  const unsigned grid = grid_for(n, kThreads);
  const float vf = static_cast<float>(value);
  const int64_t vi = is_floating(out.dtype) ? 0 : saturate_to_int(value, out.dtype);
  const DynArgs dyn = dyn_args({float_bits(vf), vi}, {});
  if (!dyn.launch) return;
  if (is_floating(out.dtype)) {
    launch_kernel(tuning_.pdl, fill_kernel<true>, dim3(grid), dim3(kThreads), 0, stream_, operand_of(out), vf, 0, n, dyn.device);
  } else {
    launch_kernel(tuning_.pdl, fill_kernel<false>, dim3(grid), dim3(kThreads), 0, stream_, operand_of(out), 0.0f, vi, n, dyn.device);
  }
  check_launch("fill");
}

void CudaKernels::arange(const View& out, double start, double step) {
  require_plain(out, "arange");
  const int64_t n = out.numel();
  if (n == 0) return;
  arange_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_>>>(out.data, out.dtype, start,
                                                                  step, n);
  check_launch("arange");
}

void CudaKernels::where(const View& cond, const View& a, const View& b, const View& out) {
  require_plain(cond, "where");
  require_plain(a, "where");
  require_plain(b, "where");
  require_plain(out, "where");
  const int64_t n = out.numel();
  if (n == 0) return;
  const unsigned grid = grid_for(n, kThreads);
  if (is_floating(out.dtype) || is_floating(a.dtype) || is_floating(b.dtype)) {
    where_kernel<true><<<grid, kThreads, 0, stream_>>>(operand_of(cond), operand_of(a),
                                                        operand_of(b), out.data, out.dtype, n);
  } else {
    where_kernel<false><<<grid, kThreads, 0, stream_>>>(operand_of(cond), operand_of(a),
                                                         operand_of(b), out.data, out.dtype, n);
  }
  check_launch("where");
}

}  // namespace cuda
}  // namespace tl
