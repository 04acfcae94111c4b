// Matrix products: batched strided matmul, and linear (x @ w^T) for plain and quantized w.
// With cuBLAS (blas.h) every matmul whose operands it can express, and every linear with more
// than kMatvecMaxRows rows, is one cuBLAS GEMM: f32 as f32 (TF32 only when TL_CUDA_TF32=1),
// f16/bf16 on the tensor cores with f32 sums. A linear with a quantized or f16 weight (prefill,
// batched products) runs on the tensor cores too, as llama.cpp's cuBLAS path does: x's rows are
// rounded to f16 (a row whose largest magnitude lies outside [2^-4, 2^15) first scaled by an exact
// power of two, and its product row scaled back, so nothing overflows or sinks into f16's
// subnormals), a quantized weight dequantized to f16 in slices of
// rows (a bounded scratch), f32 sums (TL_CUDA_LINEAR_F16=0 keeps f32 operands: the weight then
// converted to f32, x as it is). A bf16 weight is converted to f32.
// Without cuBLAS both use one shared-memory tiled f32 kernel (64x64 output tile, 32-deep k
// steps, 4x4 outputs per thread), quantized w dequantized eight elements at a time into the tile.
// linear with few rows (M <= kMatvecMaxRows, the decode case) gives each output row of w to one
// warp (plain w) or a part of one (quantized w: matvec.cuh, the kernel in fused.cu), which reads
// that row once for all M rows of x. Every sum is f32. expert_linear (a mixture-of-experts layer's
// expert products) gives each (token, slot) pair's output row to one warp, which reads the pair's
// expert id on the device, so a replayed step follows new routing without the host.
#include <type_traits>

#include "blas.h"
#include "cuda_common.cuh"
#include "cuda_kernels.h"
#include "matvec.cuh"
#include "quant_blocks.cuh"

namespace tl {
namespace cuda {
namespace {

constexpr int kTileM = 64;
constexpr int kTileN = 64;
constexpr int kTileK = 32;
constexpr int kTileThreads = 256;  // 16 x 16 threads, each 4 x 4 outputs
constexpr int kMatvecWarps = 4;
constexpr int kMatvecMaxRows = 8;
static_assert(kMatvecMaxRows == kMatvecRows, "matvec.cuh accumulates kMatvecRows rows");
// The converted copy of weight rows before a cuBLAS product: at most this many bytes (32 MiB).
constexpr size_t kWeightScratchBytes = size_t(32) << 20;
// The f16 copy of x for a tensor-core linear: at most this many bytes (else f32 operands).
constexpr size_t kHalfXScratchBytes = size_t(32) << 20;
constexpr int kConvertThreads = 256;
constexpr int kHalfRowThreads = 256;
constexpr int kScaleRowsThreads = 256;
// A row of x whose largest magnitude reaches kHalfRowHigh (f16 would overflow near it) or stays
// below kHalfRowLow (its values would fall among f16's subnormals, 2^-24 apart) is scaled by a
// power of two before rounding to f16. Between them, every value within 2^-10 of the row's
// largest is a normal f16 (relative error 2^-11), and what lies below adds less than 2^-21 of it.
constexpr float kHalfRowHigh = 32768.0f;
constexpr float kHalfRowLow = 0.0625f;

// A 3-D operand [batch, rows, cols] read through strides.
struct Strided3 {
  const void* data;
  DType dtype;
  int64_t batch_stride, row_stride, col_stride;
};

// Shared tiles, k-major; the +1 column keeps the transposing stores free of bank conflicts.
struct Tiles {
  float a[kTileK][kTileM + 1];
  float b[kTileK][kTileN + 1];
};

__device__ __forceinline__ void multiply_tiles(const Tiles& t, float (&acc)[4][4]) {
  const int tx = threadIdx.x & 15;
  const int ty = threadIdx.x >> 4;
#pragma unroll 8
  for (int kk = 0; kk < kTileK; ++kk) {
    float av[4], bv[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) av[i] = t.a[kk][ty + 16 * i];
#pragma unroll
    for (int j = 0; j < 4; ++j) bv[j] = t.b[kk][tx + 16 * j];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
  }
}

// Loads the [kTileM x kTileK] tile of A at (row0, k0) into t.a[k][m]; zeros outside [M, K).
__device__ __forceinline__ void load_a_tile(Tiles& t, const Strided3& a, int64_t batch,
                                            int64_t row0, int64_t k0, int64_t M, int64_t K) {
  for (int e = threadIdx.x; e < kTileM * kTileK; e += kTileThreads) {
    const int kk = e % kTileK;
    const int mm = e / kTileK;
    const int64_t m = row0 + mm, k = k0 + kk;
    t.a[kk][mm] = (m < M && k < K)
                      ? load_float(a.data, a.dtype,
                                   batch * a.batch_stride + m * a.row_stride + k * a.col_stride)
                      : 0.0f;
  }
}

__device__ __forceinline__ void store_tile(const float (&acc)[4][4], void* out, DType out_dtype,
                                           int64_t out_base, int64_t row0, int64_t col0,
                                           int64_t M, int64_t N) {
  const int tx = threadIdx.x & 15;
  const int ty = threadIdx.x >> 4;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t m = row0 + ty + 16 * i;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = col0 + tx + 16 * j;
      if (n < N) store_float(out, out_dtype, out_base + m * N + n, acc[i][j]);
    }
  }
}

__global__ void __launch_bounds__(kTileThreads)
    matmul_kernel(Strided3 a, Strided3 b, void* out, DType out_dtype, int64_t batch, int64_t M,
                  int64_t N, int64_t K) {
  __shared__ Tiles tiles;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTileM;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTileN;
  for (int64_t bz = blockIdx.z; bz < batch; bz += gridDim.z) {
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < K; k0 += kTileK) {
      load_a_tile(tiles, a, bz, row0, k0, M, K);
      for (int e = threadIdx.x; e < kTileK * kTileN; e += kTileThreads) {
        const int nn = e % kTileN;
        const int kk = e / kTileN;
        const int64_t n = col0 + nn, k = k0 + kk;
        tiles.b[kk][nn] =
            (n < N && k < K)
                ? load_float(b.data, b.dtype, bz * b.batch_stride + k * b.row_stride + n * b.col_stride)
                : 0.0f;
      }
      __syncthreads();
      multiply_tiles(tiles, acc);
      __syncthreads();
    }
    store_tile(acc, out, out_dtype, bz * M * N, row0, col0, M, N);
  }
}

// linear, many rows: w is [N, K] row-major, plain (any K) or quantized (K % 32 == 0).
template <DType WT>
__global__ void __launch_bounds__(kTileThreads)
    linear_tiled_kernel(const float* x, const uint8_t* w, size_t w_row_bytes, float* out,
                        int64_t M, int64_t N, int64_t K) {
  __shared__ Tiles tiles;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTileM;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTileN;
  const Strided3 xa{x, DType::F32, 0, K, 1};
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kTileK) {
    load_a_tile(tiles, xa, 0, row0, k0, M, K);
    if constexpr (quantized_dtype(WT)) {
      // 64 rows x 4 chunks of 8 = one chunk per thread.
      const int nn = threadIdx.x >> 2;
      const int ch = threadIdx.x & 3;
      const int64_t n = col0 + nn;
      float vals[8];
      if (n < N) {
        dequant_chunk8<WT>(w + n * w_row_bytes, k0 / 8 + ch, vals);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) vals[i] = 0.0f;
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) tiles.b[ch * 8 + i][nn] = vals[i];
    } else {
      for (int e = threadIdx.x; e < kTileK * kTileN; e += kTileThreads) {
        const int kk = e % kTileK;
        const int nn = e / kTileK;
        const int64_t n = col0 + nn, k = k0 + kk;
        tiles.b[kk][nn] = (n < N && k < K) ? load_float(w, WT, n * K + k) : 0.0f;
      }
    }
    __syncthreads();
    multiply_tiles(tiles, acc);
    __syncthreads();
  }
  store_tile(acc, out, DType::F32, 0, row0, col0, M, N);
}

// linear, M <= kMatvecMaxRows: one warp per output column n (a row of w).
template <DType WT>
__global__ void __launch_bounds__(kMatvecWarps * 32)
    linear_matvec_kernel(const float* x, const uint8_t* w, size_t w_row_bytes, float* out,
                         int M, int64_t N, int64_t K) {
  pdl_wait();  // launched as a programmatic dependent launch (cuda_common.cuh)
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kMatvecWarps + (threadIdx.x >> 5);
  if (n >= N) return;
  const uint8_t* row = w + n * w_row_bytes;
  float acc[kMatvecMaxRows] = {};
  if constexpr (quantized_dtype(WT)) {
    const int64_t chunks = K / 8;
    for (int64_t c = lane; c < chunks; c += 32) {
      float vals[8];
      dequant_chunk8<WT>(row, c, vals);
      const float* xc = x + c * 8;
#pragma unroll
      for (int m = 0; m < kMatvecMaxRows; ++m) {
        if (m < M) {
          float s = 0.0f;
#pragma unroll
          for (int i = 0; i < 8; ++i) s = fmaf(vals[i], xc[m * K + i], s);
          acc[m] += s;
        }
      }
    }
  } else {
    for (int64_t k = lane; k < K; k += 32) {
      const float wv = load_float(row, WT, k);
#pragma unroll
      for (int m = 0; m < kMatvecMaxRows; ++m) {
        if (m < M) acc[m] = fmaf(wv, x[m * K + k], acc[m]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kMatvecMaxRows; ++m) {
    if (m < M) {
      const float s = warp_sum(acc[m]);
      if (lane == 0) out[m * N + n] = s;
    }
  }
}

// expert_linear: warp (threadIdx.x / 32) of block (bx, by) computes out[p, n] for n = bx *
// kMatvecWarps + warp and the pairs p = by, by + gridDim.y, ...: row n of expert ids[p]'s matrix
// (rows ids[p] * N + n of w) dotted with the pair's row of x. An id outside [0, experts) writes 0
// and goes to the command buffer's error slot.
template <DType WT>
__global__ void __launch_bounds__(kMatvecWarps * 32)
    expert_linear_kernel(const float* x, const uint8_t* w, size_t w_row_bytes, const void* ids,
                         DType ids_dtype, int64_t experts, int64_t k, int64_t X, float* out,
                         int64_t pairs, int64_t N, int64_t K, DeviceErrorSlot* slot) {
  const int lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kMatvecWarps + (threadIdx.x >> 5);
  if (n >= N) return;
  for (int64_t p = blockIdx.y; p < pairs; p += gridDim.y) {
    const int64_t e = load_int(ids, ids_dtype, p);
    if (e < 0 || e >= experts) {
      if (lane == 0) {
        if (slot != nullptr && atomicCAS(&slot->code, 0, kErrorExpertIdOutOfRange) == 0) {
          slot->value = e;
          slot->limit = experts;
        }
        out[p * N + n] = 0.0f;
      }
      continue;
    }
    const uint8_t* row = w + (e * N + n) * w_row_bytes;
    const float* xr = x + ((p / k) * X + (X == 1 ? 0 : p % k)) * K;
    float acc = 0.0f;
    if constexpr (quantized_dtype(WT)) {
      for (int64_t c = lane; c < K / 8; c += 32) {
        float vals[8];
        dequant_chunk8<WT>(row, c, vals);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc = fmaf(vals[i], xr[c * 8 + i], acc);
      }
    } else {
      for (int64_t kk = lane; kk < K; kk += 32) acc = fmaf(load_float(row, WT, kk), xr[kk], acc);
    }
    const float sum = warp_sum(acc);
    if (lane == 0) out[p * N + n] = sum;
  }
}

// Launches expert_linear_kernel<T> for the weight dtype chosen at run time.
struct ExpertLauncher {
  const View& x;
  const View& w;
  const View& ids;
  const View& out;
  int64_t experts;
  DeviceErrorSlot* slot;
  cudaStream_t stream;
  template <DType T>
  void operator()() {
    const int64_t T_ = ids.shape[0], k = ids.shape[1], X = x.shape[1], K = x.shape[2];
    const int64_t N = w.shape[0] / experts, pairs = T_ * k;
    const dim3 grid(static_cast<unsigned>((N + kMatvecWarps - 1) / kMatvecWarps),
                    static_cast<unsigned>(pairs < 65535 ? pairs : 65535));
    expert_linear_kernel<T><<<grid, kMatvecWarps * 32, 0, stream>>>(
        static_cast<const float*>(x.data), static_cast<const uint8_t*>(w.data), row_bytes(T, K), ids.data,
        ids.dtype, experts, k, X, static_cast<float*>(out.data), pairs, N, K, slot);
  }
};

// rows [n0, n0 + rows) of a quantized or f16/bf16 [N, K] weight as f32 [rows, K] (for cuBLAS).
// `wide`: w is aligned for dequant32 (kDequant32Align16); otherwise four 8-element chunks.
// Quantized: each lane of a warp expands one 32-element group (32 consecutive groups of the
// output per warp, contiguous since out is [rows, K]) into its row of the warp's shared tile, and
// the warp then writes the tile 128 bytes per store (a lane storing its own group directly would
// touch 32 lines per store).
__device__ __forceinline__ void store_converted(float* out, int64_t i, float v) { out[i] = v; }
__device__ __forceinline__ void store_converted(__half* out, int64_t i, float v) {
  out[i] = __float2half_rn(v);
}

template <DType WT, typename OutT>
__global__ void __launch_bounds__(kConvertThreads)
    convert_rows_kernel(const uint8_t* w, size_t w_row_bytes, int64_t n0, int64_t rows, int64_t K,
                        bool wide, OutT* out) {
  if constexpr (quantized_dtype(WT)) {
    __shared__ float tile[kConvertThreads / 32][32][33];  // 33: a column read hits 32 banks
    const int lane = threadIdx.x & 31;
    float (*mine)[33] = tile[threadIdx.x >> 5];
    const int64_t groups = K / 32, total = rows * groups;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t t0 = blockIdx.x * static_cast<int64_t>(blockDim.x) + (threadIdx.x - lane); t0 < total; t0 += stride) {
      const int64_t t = t0 + lane;
      if (t < total) {
        const int64_t r = t / groups, g = t - r * groups;
        float v[32];
        const uint8_t* row = w + (n0 + r) * w_row_bytes;
        if (wide) {
          dequant32<WT>(row, g, v);
        } else {
#pragma unroll
          for (int c = 0; c < 4; ++c) dequant_chunk8<WT>(row, g * 4 + c, v + 8 * c);
        }
#pragma unroll
        for (int e = 0; e < 32; ++e) mine[lane][e] = v[e];
      }
      __syncwarp();
      const int64_t here = total - t0 < 32 ? total - t0 : 32;
      for (int i = 0; i < here; ++i) store_converted(out, (t0 + i) * 32 + lane, mine[i][lane]);
      __syncwarp();  // the tile is read before the next groups overwrite it
    }
  } else {
    const int64_t total = rows * K;
    for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
         t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      store_converted(out, t, load_float(w, WT, n0 * K + t));
    }
  }
}

// x [M, K] f32 as f16 for a tensor-core product, one block per row. A row whose largest
// magnitude is finite, nonzero and outside [kHalfRowLow, kHalfRowHigh) is first divided by the
// power of two s that brings it into [2^14, 2^15) (exact), and scale[m] = s (1 for every other
// row: a row with inf or NaN rounds as it is, keeping them); scale_rows_kernel multiplies the
// product's row by s afterwards.
__global__ void __launch_bounds__(kHalfRowThreads)
    rows_to_half_kernel(const float* x, int64_t K, __half* out, float* scale) {
  __shared__ float part[kHalfRowThreads / 32];
  const int64_t m = blockIdx.x;
  const float* row = x + m * K;
  float mx = 0.0f;
  for (int64_t k = threadIdx.x; k < K; k += kHalfRowThreads) mx = fmaxf(mx, fabsf(row[k]));
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = mx;
  __syncthreads();
  mx = part[0];
#pragma unroll
  for (int i = 1; i < kHalfRowThreads / 32; ++i) mx = fmaxf(mx, part[i]);
  float s = 1.0f;
  if (isfinite(mx) && mx > 0.0f && (mx >= kHalfRowHigh || mx < kHalfRowLow)) {
    int e;
    (void)frexpf(mx, &e);  // mx in [2^(e-1), 2^e)
    s = ldexpf(1.0f, e - 15 > -100 ? e - 15 : -100);  // 1/s stays finite for tiny rows
  }
  const float inv = 1.0f / s;  // exact: s is a power of two
  __half* dst = out + m * K;
  for (int64_t k = threadIdx.x; k < K; k += kHalfRowThreads) dst[k] = __float2half_rn(row[k] * inv);
  if (threadIdx.x == 0) scale[m] = s;
}

// out [M, ldc]: row m's first N values times scale[m], for the rows rows_to_half_kernel scaled.
__global__ void scale_rows_kernel(float* out, int64_t ldc, int64_t N, const float* scale) {
  const float s = scale[blockIdx.x];
  if (s == 1.0f) return;
  float* row = out + static_cast<int64_t>(blockIdx.x) * ldc;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) row[n] *= s;
}

template <DType WT>
void launch_linear(const View& x, const View& w, const View& out, cudaStream_t stream, bool pdl) {
  const int64_t M = x.shape[0], K = x.shape[1], N = w.shape[0];
  const size_t w_row_bytes = row_bytes(WT, K);
  const auto* xp = static_cast<const float*>(x.data);
  const auto* wp = static_cast<const uint8_t*>(w.data);
  auto* op = static_cast<float*>(out.data);
  if (M <= kMatvecMaxRows) {
    const unsigned grid = static_cast<unsigned>((N + kMatvecWarps - 1) / kMatvecWarps);
    launch_kernel(pdl, linear_matvec_kernel<WT>, dim3(grid), dim3(kMatvecWarps * 32), 0, stream,
        xp, wp, w_row_bytes, op, static_cast<int>(M), N, K);
  } else {
    const dim3 grid(static_cast<unsigned>((N + kTileN - 1) / kTileN),
                    static_cast<unsigned>((M + kTileM - 1) / kTileM));
    linear_tiled_kernel<WT><<<grid, kTileThreads, 0, stream>>>(xp, wp, w_row_bytes, op, M, N, K);
  }
}

// Launches launch_linear<T> for the weight dtype chosen at run time (see dispatch_quantized).
struct LinearLauncher {
  const View& x;
  const View& w;
  const View& out;
  cudaStream_t stream;
  bool pdl;
  template <DType T>
  void operator()() { launch_linear<T>(x, w, out, stream, pdl); }
};

// Launches convert_rows_kernel<T, OutT> for the weight dtype chosen at run time.
template <typename OutT>
struct ConvertLauncher {
  const uint8_t* w;
  size_t w_row_bytes;
  int64_t n0, rows, K;
  OutT* out;
  cudaStream_t stream;
  template <DType T>
  void operator()() {
    bool wide = false;
    if constexpr (quantized_dtype(T)) {
      wide = reinterpret_cast<uintptr_t>(w) % (kDequant32Align16<T> ? 16 : 2) == 0;
    }
    const int64_t items = quantized_dtype(T) ? rows * (K / 32) : rows * K;
    convert_rows_kernel<T, OutT><<<grid_for(items, kConvertThreads), kConvertThreads, 0, stream>>>(
        w, w_row_bytes, n0, rows, K, wide, out);
  }
};

}  // namespace

CudaKernels::~CudaKernels() {
  if (weight_scratch_ != nullptr) (void)cudaFree(weight_scratch_);
}

void* CudaKernels::weight_scratch(size_t bytes) {
  if (weight_scratch_bytes_ >= bytes) return weight_scratch_;
  capture_guard("linear: growing the weight scratch");
  if (weight_scratch_ != nullptr) {
    (void)cudaFree(weight_scratch_);  // waits for the device, so no queued kernel still reads it
    weight_scratch_ = nullptr;
    weight_scratch_bytes_ = 0;
  }
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  weight_scratch_ = p;
  weight_scratch_bytes_ = bytes;
  return weight_scratch_;
}

// linear through cuBLAS: out [M, N] = x [M, K] @ w^T. An f32 w is read in place (as w^T: unit
// row stride). A quantized or f16 w runs on the tensor cores (see the top of this file): x
// rounded to f16 once, a quantized w dequantized to f16 slices of rows, an f16 w read in place;
// with TL_CUDA_LINEAR_F16=0, a bf16 w, or an x too large for the scratch, w is converted to f32
// slices and x read as it is. False: not done.
bool CudaKernels::linear_blas(const View& x, const View& w, const View& out) {
  capture_guard("linear through cuBLAS");
  const int64_t M = x.shape[0], K = x.shape[1], N = w.shape[0];
  const GemmOperand xa{x.data, DType::F32, 0, K, 1};
  if (w.dtype == DType::F32) {
    const GemmOperand wt{w.data, DType::F32, 0, 1, K};
    return blas_->gemm(xa, wt, out.data, DType::F32, 1, M, N, K, N);
  }
  const bool half = tuning_.linear_f16 && (is_quantized(w.dtype) || w.dtype == DType::F16) &&
                    static_cast<size_t>(M * K) * sizeof(__half) <= kHalfXScratchBytes;
  const size_t elem = half ? sizeof(__half) : sizeof(float);
  const int64_t rows_max = static_cast<int64_t>(kWeightScratchBytes / elem) / K;
  if (rows_max < 1) return false;
  const int64_t slice = w.dtype == DType::F16 && half ? 0 : (N < rows_max ? N : rows_max);
  auto align = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t w_bytes = align(static_cast<size_t>(slice * K) * elem);
  const size_t x_bytes = half ? align(static_cast<size_t>(M * K) * sizeof(__half)) : 0;
  const size_t scale_bytes = half ? static_cast<size_t>(M) * sizeof(float) : 0;
  auto* base = static_cast<uint8_t*>(weight_scratch(w_bytes + x_bytes + scale_bytes));
  if (base == nullptr) return false;
  auto* op = static_cast<float*>(out.data);
  // w converted into `scratch` (f32 or f16) slice by slice, each slice's product with xo written
  // into its columns of out.
  auto by_slices = [&](const GemmOperand& xo, auto* scratch, DType scratch_dtype) {
    using OutT = std::remove_pointer_t<decltype(scratch)>;
    const size_t w_row_bytes = row_bytes(w.dtype, K);
    for (int64_t n0 = 0; n0 < N; n0 += slice) {
      const int64_t rows = N - n0 < slice ? N - n0 : slice;
      ConvertLauncher<OutT> convert{static_cast<const uint8_t*>(w.data), w_row_bytes, n0, rows, K,
                                    scratch, stream_};
      switch (w.dtype) {
        case DType::F16: convert.template operator()<DType::F16>(); break;
        case DType::BF16: convert.template operator()<DType::BF16>(); break;
        default:
          if (!dispatch_quantized(w.dtype, convert)) return false;
      }
      check_launch("linear");
      const GemmOperand st{scratch, scratch_dtype, 0, 1, K};
      if (!blas_->gemm(xo, st, op + n0, DType::F32, 1, M, rows, K, N)) {
        return false;  // only before the first slice: the shapes are the same for every slice
      }
    }
    return true;
  };
  if (!half) return by_slices(xa, reinterpret_cast<float*>(base), DType::F32);
  auto* xh = reinterpret_cast<__half*>(base + w_bytes);
  auto* scale = reinterpret_cast<float*>(base + w_bytes + x_bytes);
  rows_to_half_kernel<<<static_cast<unsigned>(M), kHalfRowThreads, 0, stream_>>>(
      static_cast<const float*>(x.data), K, xh, scale);
  check_launch("linear");
  const GemmOperand xs{xh, DType::F16, 0, K, 1};
  const bool done = w.dtype == DType::F16
                        ? blas_->gemm(xs, GemmOperand{w.data, DType::F16, 0, 1, K}, op, DType::F32, 1, M, N, K, N)
                        : by_slices(xs, reinterpret_cast<__half*>(base), DType::F16);
  if (!done) return false;
  scale_rows_kernel<<<static_cast<unsigned>(M), kScaleRowsThreads, 0, stream_>>>(op, N, N, scale);
  check_launch("linear");
  return true;
}

void CudaKernels::matmul(const View& a, const View& b, const View& out) {
  if (a.ndim != 3 || b.ndim != 3 || out.ndim != 3) {
    throw KernelError("matmul: cuda kernel expects 3-D views");
  }
  if (!is_floating(a.dtype) || !is_floating(b.dtype) ||
      (out.dtype != DType::F32 && out.dtype != DType::F16)) {
    throw KernelError(std::string("matmul: unsupported dtypes ") + dtype_name(a.dtype) + ", " +
                      dtype_name(b.dtype) + " -> " + dtype_name(out.dtype));
  }
  const int64_t batch = out.shape[0], M = out.shape[1], N = out.shape[2], K = a.shape[2];
  if (batch == 0 || M == 0 || N == 0) return;
  if (K == 0) {
    fill(out, 0.0);
    return;
  }
  if (blas_ != nullptr && blas_->available()) capture_guard("matmul through cuBLAS");
  if (blas_ != nullptr && blas_->available() &&
      blas_->gemm(GemmOperand{a.data, a.dtype, a.strides[0], a.strides[1], a.strides[2]},
                  GemmOperand{b.data, b.dtype, b.strides[0], b.strides[1], b.strides[2]},
                  out.data, out.dtype, batch, M, N, K, N)) {
    g_device_ops.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const Strided3 sa{a.data, a.dtype, a.strides[0], a.strides[1], a.strides[2]};
  const Strided3 sb{b.data, b.dtype, b.strides[0], b.strides[1], b.strides[2]};
  const dim3 grid(static_cast<unsigned>((N + kTileN - 1) / kTileN),
                  static_cast<unsigned>((M + kTileM - 1) / kTileM),
                  static_cast<unsigned>(batch < 65535 ? batch : 65535));
  matmul_kernel<<<grid, kTileThreads, 0, stream_>>>(sa, sb, out.data, out.dtype, batch, M, N, K);
  check_launch("matmul");
}

void CudaKernels::linear(const View& x, const View& w, const View& out) {
  if (x.dtype != DType::F32 || out.dtype != DType::F32) {
    throw KernelError(std::string("linear: cuda kernel expects f32 x and out, got ") +
                      dtype_name(x.dtype) + " and " + dtype_name(out.dtype));
  }
  const int64_t M = x.shape[0], K = x.shape[1], N = w.shape[0];
  if (M == 0 || N == 0) return;
  if (K == 0) {
    fill(out, 0.0);
    return;
  }
  if (is_quantized(w.dtype) && K % block_elems(w.dtype) != 0) {
    throw KernelError(std::string("linear: ") + dtype_name(w.dtype) + " weight has " +
                      std::to_string(K) + " columns, not a multiple of its block size");
  }
  if (M > kMatvecMaxRows && blas_ != nullptr && blas_->available() && linear_blas(x, w, out)) {
    g_device_ops.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (M <= kMatvecMaxRows && is_quantized(w.dtype) &&
      launch_quant_matvec(static_cast<const float*>(x.data), w, LinearPrologue::None, View{}, 0.0f,
                          Addend{nullptr, DType::F32, 0, 0}, static_cast<float*>(out.data),
                          static_cast<int>(M), static_cast<int>(sm_count_), tuning_, stream_)) {
    check_launch("linear");
    return;
  }
  LinearLauncher launch{x, w, out, stream_, tuning_.pdl};
  switch (w.dtype) {
    case DType::F32: launch.operator()<DType::F32>(); break;
    case DType::F16: launch.operator()<DType::F16>(); break;
    case DType::BF16: launch.operator()<DType::BF16>(); break;
    default:
      if (!dispatch_quantized(w.dtype, launch)) {
        throw KernelError(std::string("linear: unsupported weight dtype ") + dtype_name(w.dtype));
      }
  }
  check_launch("linear");
}

void CudaKernels::expert_linear(const View& x, const View& w, const View& ids, int64_t experts,
                                const View& out) {
  if (x.dtype != DType::F32 || out.dtype != DType::F32) {
    throw KernelError(std::string("expert_linear: cuda kernel expects f32 x and out, got ") +
                      dtype_name(x.dtype) + " and " + dtype_name(out.dtype));
  }
  if (ids.dtype != DType::I32 && ids.dtype != DType::I64) {
    throw KernelError(std::string("expert_linear: ids must be i32 or i64, got ") + dtype_name(ids.dtype));
  }
  if (x.ndim != 3 || w.ndim != 2 || ids.ndim != 2 || experts <= 0 || w.shape[0] % experts != 0) {
    throw KernelError("expert_linear: bad operand shapes");
  }
  const int64_t K = x.shape[2], N = w.shape[0] / experts, pairs = ids.shape[0] * ids.shape[1];
  if (pairs == 0 || N == 0) return;
  if (K == 0) {
    fill(out, 0.0);
    return;
  }
  if (is_quantized(w.dtype) && K % block_elems(w.dtype) != 0) {
    throw KernelError(std::string("expert_linear: ") + dtype_name(w.dtype) + " weight has " +
                      std::to_string(K) + " columns, not a multiple of its block size");
  }
  DeviceErrorSlot* slot = error_slot_ ? error_slot_() : nullptr;
  ExpertLauncher launch{x, w, ids, out, experts, slot, stream_};
  switch (w.dtype) {
    case DType::F32: launch.operator()<DType::F32>(); break;
    case DType::F16: launch.operator()<DType::F16>(); break;
    case DType::BF16: launch.operator()<DType::BF16>(); break;
    default:
      if (!dispatch_quantized(w.dtype, launch)) {
        throw KernelError(std::string("expert_linear: unsupported weight dtype ") + dtype_name(w.dtype));
      }
  }
  check_launch("expert_linear");
}

}  // namespace cuda
}  // namespace tl
