// Reductions and softmax over the middle axis of a contiguous [outer, n, inner] tensor.
// Integer inputs reduced to an integer (or arg) result are exact in int64; sums (and softmax
// denominators) accumulate in double as on the CPU backend; everything else is f32.
// inner == 1 (the last axis, the common case): one block per row, a tree reduction in f32.
// inner > 1: one thread per (outer, inner) column walking n, so that a warp reads adjacent
// columns. Max/Min propagate NaN; ArgMax/ArgMin take a NaN as the extreme and keep the first
// index on ties, as NumPy does.
#include <cmath>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

namespace tl {
namespace cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kWideRowThreads = 1024;  // few long rows (the argmax over a vocabulary)
constexpr int kColThreads = 256;

struct Best {
  float value;
  int64_t index;
};

// True when (v, i) should replace the current best (b) for ArgMax (want_max) or ArgMin.
__device__ __forceinline__ bool replaces(Best b, float v, int64_t i, bool want_max) {
  const bool vn = isnan(v), bn = isnan(b.value);
  if (bn || vn) {
    if (bn && vn) return i < b.index;
    return vn;  // a NaN wins over any number
  }
  if (v == b.value) return i < b.index;
  return want_max ? v > b.value : v < b.value;
}

__device__ __forceinline__ float combine(ReduceOp op, float acc, float v) {
  switch (op) {
    case ReduceOp::Max: return (isnan(acc) || isnan(v)) ? nanf("") : fmaxf(acc, v);
    case ReduceOp::Min: return (isnan(acc) || isnan(v)) ? nanf("") : fminf(acc, v);
    default: return acc + v;
  }
}

__device__ __forceinline__ float identity_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::Max: return -INFINITY;
    case ReduceOp::Min: return INFINITY;
    default: return 0.0f;
  }
}

__global__ void reduce_rows_kernel(ReduceOp op, const void* in, DType in_dtype, int64_t outer,
                                   int64_t n, void* out, DType out_dtype) {
  pdl_wait();  // launched as a programmatic dependent launch (cuda_common.cuh)
  pdl_launch_dependents();
  __shared__ float s_value[kWideRowThreads];
  __shared__ int64_t s_index[kWideRowThreads];
  __shared__ double s_double[32];
  const bool arg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  const bool want_max = op == ReduceOp::ArgMax;
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const int64_t base = row * n;
    if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
      double sum = 0.0;
      for (int64_t k = threadIdx.x; k < n; k += blockDim.x) sum += load_float(in, in_dtype, base + k);
      sum = block_sum_double(sum, s_double);
      if (threadIdx.x == 0) {
        store_float(out, out_dtype, row,
                    static_cast<float>(op == ReduceOp::Mean ? sum / static_cast<double>(n) : sum));
      }
      __syncthreads();
      continue;
    }
    float acc = identity_of(op);
    Best best{want_max ? -INFINITY : INFINITY, INT64_MAX};
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      const float v = load_float(in, in_dtype, base + k);
      if (arg) {
        if (replaces(best, v, k, want_max)) best = Best{v, k};
      } else {
        acc = combine(op, acc, v);
      }
    }
    s_value[threadIdx.x] = arg ? best.value : acc;
    s_index[threadIdx.x] = best.index;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
      if (threadIdx.x < stride) {
        const float v = s_value[threadIdx.x + stride];
        if (arg) {
          const int64_t i = s_index[threadIdx.x + stride];
          Best b{s_value[threadIdx.x], s_index[threadIdx.x]};
          if (i != INT64_MAX && (b.index == INT64_MAX || replaces(b, v, i, want_max))) {
            s_value[threadIdx.x] = v;
            s_index[threadIdx.x] = i;
          }
        } else {
          s_value[threadIdx.x] = combine(op, s_value[threadIdx.x], v);
        }
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      if (arg) {
        store_int(out, out_dtype, row, s_index[0] == INT64_MAX ? 0 : s_index[0]);
      } else {
        store_float(out, out_dtype, row, s_value[0]);
      }
    }
    __syncthreads();
  }
}

__global__ void reduce_columns_kernel(ReduceOp op, const void* in, DType in_dtype, int64_t outer,
                                      int64_t n, int64_t inner, void* out, DType out_dtype) {
  const bool arg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  const bool want_max = op == ReduceOp::ArgMax;
  const int64_t total = outer * inner;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = t / inner;
    const int64_t j = t - o * inner;
    const int64_t base = o * n * inner + j;
    float acc = identity_of(op);
    double sum = 0.0;
    Best best{want_max ? -INFINITY : INFINITY, INT64_MAX};
    for (int64_t k = 0; k < n; ++k) {
      const float v = load_float(in, in_dtype, base + k * inner);
      if (arg) {
        if (replaces(best, v, k, want_max)) best = Best{v, k};
      } else if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
        sum += v;
      } else {
        acc = combine(op, acc, v);
      }
    }
    if (arg) {
      store_int(out, out_dtype, t, best.index == INT64_MAX ? 0 : best.index);
    } else if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
      store_float(out, out_dtype, t,
                  static_cast<float>(op == ReduceOp::Mean ? sum / static_cast<double>(n) : sum));
    } else {
      store_float(out, out_dtype, t, acc);
    }
  }
}

// Integer input with an integer result (or an arg reduction): exact int64, one thread per
// output; ties keep the first index.
__global__ void reduce_int_kernel(ReduceOp op, const void* in, DType in_dtype, int64_t outer,
                                  int64_t n, int64_t inner, void* out, DType out_dtype) {
  const bool want_max = op == ReduceOp::Max || op == ReduceOp::ArgMax;
  const int64_t total = outer * inner;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = t / inner;
    const int64_t j = t - o * inner;
    const int64_t base = o * n * inner + j;
    int64_t acc = 0, best = 0, best_i = 0;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t v = load_int(in, in_dtype, base + k * inner);
      if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
        acc += v;
      } else if (k == 0 || (want_max ? v > best : v < best)) {
        best = v;
        best_i = k;
      }
    }
    switch (op) {
      case ReduceOp::Sum: store_int(out, out_dtype, t, acc); break;
      case ReduceOp::Mean:
        store_float(out, out_dtype, t,
                    n > 0 ? static_cast<float>(static_cast<double>(acc) / static_cast<double>(n)) : 0.0f);
        break;
      case ReduceOp::ArgMax: case ReduceOp::ArgMin: store_int(out, out_dtype, t, best_i); break;
      default: store_int(out, out_dtype, t, best); break;
    }
  }
}

__global__ void softmax_rows_kernel(const void* in, DType in_dtype, int64_t outer, int64_t n,
                                    void* out, DType out_dtype) {
  pdl_wait();  // launched as a programmatic dependent launch (cuda_common.cuh)
  pdl_launch_dependents();
  __shared__ float scratch[32];
  __shared__ double scratch_double[32];
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const int64_t base = row * n;
    float m = -INFINITY;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      m = fmaxf(m, load_float(in, in_dtype, base + k));
    }
    // Block-wide max: per-warp max, then the warp maxima through shared memory.
    m = warp_max(m);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = m;
    __syncthreads();
    const int warps = blockDim.x >> 5;
    float bm = (threadIdx.x & 31) < warps ? scratch[threadIdx.x & 31] : -INFINITY;
    bm = warp_max(bm);
    const float shift = isinf(bm) ? 0.0f : bm;  // all -inf: exp gives 0s, then 0/0 = NaN
    double s = 0.0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      s += exp_rounded(load_float(in, in_dtype, base + k) - shift);
    }
    const double total = block_sum_double(s, scratch_double);
    const float inv = static_cast<float>(1.0 / total);
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      store_float(out, out_dtype, base + k, exp_rounded(load_float(in, in_dtype, base + k) - shift) * inv);
    }
    __syncthreads();
  }
}

__global__ void softmax_columns_kernel(const void* in, DType in_dtype, int64_t outer, int64_t n,
                                       int64_t inner, void* out, DType out_dtype) {
  const int64_t total = outer * inner;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = t / inner;
    const int64_t j = t - o * inner;
    const int64_t base = o * n * inner + j;
    float m = -INFINITY;
    for (int64_t k = 0; k < n; ++k) m = fmaxf(m, load_float(in, in_dtype, base + k * inner));
    const float shift = isinf(m) ? 0.0f : m;
    double s = 0.0;
    for (int64_t k = 0; k < n; ++k) s += exp_rounded(load_float(in, in_dtype, base + k * inner) - shift);
    const float inv = static_cast<float>(1.0 / s);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t idx = base + k * inner;
      store_float(out, out_dtype, idx, exp_rounded(load_float(in, in_dtype, idx) - shift) * inv);
    }
  }
}

unsigned row_grid(int64_t rows) { return static_cast<unsigned>(rows < 65535 ? rows : 65535); }

}  // namespace

void CudaKernels::reduce(ReduceOp op, const View& in, int64_t outer, int64_t n, int64_t inner,
                         const View& out) {
  if (is_quantized(in.dtype) || is_quantized(out.dtype)) {
    throw KernelError(std::string("reduce: quantized dtype ") + dtype_name(in.dtype) +
                      " is not supported");
  }
  const bool arg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  if ((arg || op == ReduceOp::Max || op == ReduceOp::Min) && n == 0) {
    throw KernelError("reduce: cannot take max/min/argmax/argmin of an empty axis");
  }
  if (outer == 0 || inner == 0) return;
  if (!is_floating(in.dtype) && (arg || !is_floating(out.dtype))) {
    reduce_int_kernel<<<grid_for(outer * inner, kColThreads), kColThreads, 0, stream_>>>(
        op, in.data, in.dtype, outer, n, inner, out.data, out.dtype);
  } else if (inner == 1) {
    const int threads = (outer < 64 && n >= 8192) ? kWideRowThreads : kRowThreads;
    launch_kernel(tuning_.pdl, reduce_rows_kernel, dim3(row_grid(outer)), dim3(threads), 0, stream_, op, in.data, in.dtype, outer,
                                                                      n, out.data, out.dtype);
  } else {
    reduce_columns_kernel<<<grid_for(outer * inner, kColThreads), kColThreads, 0, stream_>>>(
        op, in.data, in.dtype, outer, n, inner, out.data, out.dtype);
  }
  check_launch("reduce");
}

void CudaKernels::softmax(const View& in, int64_t outer, int64_t n, int64_t inner,
                          const View& out) {
  if (!is_floating(out.dtype) || is_quantized(in.dtype)) {
    throw KernelError(std::string("softmax: unsupported dtypes ") + dtype_name(in.dtype) +
                      " -> " + dtype_name(out.dtype));
  }
  if (outer == 0 || inner == 0 || n == 0) return;
  if (inner == 1) {
    const int threads = (outer < 64 && n >= 8192) ? kWideRowThreads : kRowThreads;
    launch_kernel(tuning_.pdl, softmax_rows_kernel, dim3(row_grid(outer)), dim3(threads), 0, stream_, in.data, in.dtype, outer, n,
                                                                       out.data, out.dtype);
  } else {
    softmax_columns_kernel<<<grid_for(outer * inner, kColThreads), kColThreads, 0, stream_>>>(
        in.data, in.dtype, outer, n, inner, out.data, out.dtype);
  }
  check_launch("softmax");
}

}  // namespace cuda
}  // namespace tl
