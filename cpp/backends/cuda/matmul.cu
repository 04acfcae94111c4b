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
#include <cstdint>
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

// ---------------------------------------------------------------- f16 tensor-core product
// out [M, N] (row stride ldc, f32) = a [M, K] @ b^T, a and b f16, row-major with K contiguous and
// 16-byte aligned rows (K a multiple of 8): a linear's x rounded to f16 and its weight rows as f16.
// TL's own kernel for what cuBLAS does here: by default for products below 2^31 multiply-adds
// (TL_CUDA_OWN_GEMM=3; cuBLAS above), everywhere where cuBLAS is missing or TL_CUDA_OWN_GEMM=1-2
// asks, so that a small model's prompt need not load cuBLAS (about 205 MiB of host memory). On an
// H100 it was 0.8x (SmolLM2-sized products) to 0.57x (1B-sized) cuBLAS's speed in a 512-token
// prefill; a SmolLM2-shaped prompt of 512 tokens takes ~8.3 ms with it, ~7 with cuBLAS (H200). Blocks of BM x BN outputs, warps of WM x WN, each k-step of 32 copied
// into shared memory by cp.async kStages deep, fragments read with ldmatrix, products by mma.sync
// m16n8k16 with f32 sums (the order of the sums is the tensor cores', as cuBLAS's is). Rows past
// M or N and columns past K are copied as zeros. Two shapes: 64 x 64 blocks of four warps, and
// 128 x 128 blocks of eight for products that fill the GPU twice over with them; a product whose
// blocks would not fill it splits K over up to 8 blocks per output tile, each writing its sums to a
// scratch, added in split order by gemm_split_sum_kernel (deterministic).
constexpr int kGemmStages = 3;
constexpr int kGemmMaxSplits = 8;
constexpr int64_t kGemmSplitFloats = int64_t(4) << 20;  // the split-K scratch: at most 16 MiB

// Halves per staged row of a BK-wide k-step: BK + 8 (80 or 144 bytes: ldmatrix's eight rows fall
// in distinct banks).
template <int BK>
__host__ __device__ constexpr int gemm_row() { return BK + 8; }

template <int BM, int BN, int BK>
constexpr size_t gemm_shared_bytes() {
  return static_cast<size_t>(kGemmStages) * (BM + BN) * gemm_row<BK>() * sizeof(__half);
}

// BK: k-step width (32 or 64). Split z (blockIdx.z) takes k-steps [z * split_steps, (z + 1) * split_steps) and writes to
// out + z * split_stride. row_scale (unsplit products only; else nullptr): row m's sums are stored
// times row_scale[m] where that is not 1 (what scale_rows_kernel would do after, in the same launch).
template <int BM, int BN, int WM, int WN, int BK>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    gemm_f16_kernel(const __half* a, const __half* b, float* out, int64_t M, int64_t N, int64_t K,
                    int64_t ldc, int split_steps, int64_t split_stride, const float* row_scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int kWarpsN = BN / WN, kThreads = (BM / WM) * kWarpsN * 32;
  constexpr int MI = WM / 16, NI = WN / 8;
  constexpr int kRow = gemm_row<BK>(), kPieces = BK / 8;  // 16-byte pieces of a staged row
  static_assert(NI % 2 == 0, "B fragments are read two n8 tiles at a time");
  extern __shared__ __align__(16) char gemm_shared[];
  auto* sa = reinterpret_cast<__half(*)[BM][kRow]>(gemm_shared);
  auto* sb = reinterpret_cast<__half(*)[BN][kRow]>(gemm_shared + kGemmStages * BM * kRow * sizeof(__half));
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / kWarpsN, wn = warp % kWarpsN;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM, n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int all_steps = static_cast<int>((K + BK - 1) / BK);
  const int first = blockIdx.z * split_steps;
  const int steps = all_steps - first < split_steps ? all_steps - first : split_steps;
  out += blockIdx.z * split_stride;
  auto load = [&](int stage, int kt) {
    // (BM + BN) rows x kPieces pieces of 16 bytes
#pragma unroll
    for (int c = tid; c < (BM + BN) * kPieces; c += kThreads) {
      const int row = c / kPieces, piece = c % kPieces;
      const int64_t k = static_cast<int64_t>(kt) * BK + piece * 8;
      if (row < BM) {
        const int64_t am = m0 + row;
        const bool ok = am < M && k < K;
        cp_async16(&sa[stage][row][piece * 8], ok ? a + am * K + k : a, ok);
      } else {
        const int64_t bn = n0 + row - BM;
        const bool ok = bn < N && k < K;
        cp_async16(&sb[stage][row - BM][piece * 8], ok ? b + bn * K + k : b, ok);
      }
    }
  };
  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
#pragma unroll
  for (int s = 0; s < kGemmStages - 1; ++s) {
    if (s < steps) load(s, first + s);
    cp_async_commit();
  }
  for (int kt = 0; kt < steps; ++kt) {
    cp_async_wait<kGemmStages - 2>();
    __syncthreads();  // step kt is in shared memory, and every warp is done with step kt - 1's stage
    if (kt + kGemmStages - 1 < steps) load((kt + kGemmStages - 1) % kGemmStages, first + kt + kGemmStages - 1);
    cp_async_commit();
    const int st = kt % kGemmStages;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t af[MI][4], bf[NI][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        const __half* p = &sa[st][wm * WM + mi * 16 + (lane & 15)][kk + (lane >> 4) * 8];
        const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(p));
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(af[mi][0]), "=r"(af[mi][1]), "=r"(af[mi][2]), "=r"(af[mi][3])
                     : "r"(addr));
      }
#pragma unroll
      for (int nj = 0; nj < NI / 2; ++nj) {
        const __half* p = &sb[st][wn * WN + nj * 16 + (lane >> 4) * 8 + (lane & 7)][kk + ((lane >> 3) & 1) * 8];
        const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(p));
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(bf[2 * nj][0]), "=r"(bf[2 * nj][1]), "=r"(bf[2 * nj + 1][0]), "=r"(bf[2 * nj + 1][1])
                     : "r"(addr));
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
          asm volatile(
              "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
              "{%8, %9}, {%0, %1, %2, %3};"
              : "+f"(acc[mi][ni][0]), "+f"(acc[mi][ni][1]), "+f"(acc[mi][ni][2]), "+f"(acc[mi][ni][3])
              : "r"(af[mi][0]), "r"(af[mi][1]), "r"(af[mi][2]), "r"(af[mi][3]), "r"(bf[ni][0]), "r"(bf[ni][1]));
    }
  }
  cp_async_wait<0>();
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
      const int64_t col = n0 + wn * WN + ni * 8 + (lane & 3) * 2;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = m0 + wm * WM + mi * 16 + (lane >> 2) + h * 8;
        if (row >= M) continue;
        float* o = out + row * ldc + col;
        float v0 = acc[mi][ni][2 * h], v1 = acc[mi][ni][2 * h + 1];
        if (row_scale != nullptr) {
          const float rs = row_scale[row];
          if (rs != 1.0f) {
            v0 *= rs;
            v1 *= rs;
          }
        }
        if (col < N) o[0] = v0;
        if (col + 1 < N) o[1] = v1;
      }
    }
  }
#endif
}

// out [M, N] (row stride ldc) = the sum over the splits of partial [splits][M][N], in split order,
// times row_scale[m] where that is given and not 1.
__global__ void gemm_split_sum_kernel(const float* partial, int splits, int64_t M, int64_t N, float* out,
                                      int64_t ldc, const float* row_scale) {
  const int64_t total = M * N;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = partial[t];
    for (int z = 1; z < splits; ++z) s += partial[z * total + t];
    const int64_t m = t / N;
    if (row_scale != nullptr && row_scale[m] != 1.0f) s *= row_scale[m];
    out[m * ldc + (t - m * N)] = s;
  }
}

using GemmKernel = void (*)(const __half*, const __half*, float*, int64_t, int64_t, int64_t, int64_t, int, int64_t,
                            const float*);
constexpr GemmKernel kGemmSmall = gemm_f16_kernel<64, 64, 32, 32, 32>;
constexpr GemmKernel kGemmSmallWide = gemm_f16_kernel<64, 64, 32, 32, 64>;  // 64-wide k-steps
constexpr GemmKernel kGemmLarge = gemm_f16_kernel<128, 128, 64, 32, 32>;

// Whether gemm_f16_kernel can take a [rows, K] f16 operand at p: K a multiple of 8, 16-byte
// aligned rows (the device's support is the caller's: sm_80+).
bool gemm_f16_operand_ok(const void* p, int64_t K) {
  return K % 8 == 0 && (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

// How launch_gemm_f16 runs an M x N x K product: the 128 x 128 blocks (k-steps of 32), or the
// 64 x 64 ones with `splits` (>= 1) splits of K, each of at least 256 elements of K, in k-steps of
// 64 (`wide`, the default) or, with TL_CUDA_GEMM_BK64=0, 32. `variant` 1: always 64 x 64, unsplit (TL_CUDA_OWN_GEMM=1).
struct GemmPlan {
  bool large;
  int splits;
  bool wide;
  int bk() const { return wide ? 64 : 32; }
};

GemmPlan gemm_plan(int64_t M, int64_t N, int64_t K, int64_t sms, int variant, bool wide) {
  if (variant == 1) return {false, 1, wide};
  const int64_t large_blocks = ((M + 127) / 128) * ((N + 127) / 128);
  if (large_blocks >= 2 * sms) return {true, 1, false};
  const int bk = wide ? 64 : 32;
  const int64_t blocks = ((M + 63) / 64) * ((N + 63) / 64), steps = (K + bk - 1) / bk;
  int64_t s = (2 * sms + blocks - 1) / blocks;
  s = std::min<int64_t>({s, steps * bk / 256, kGemmMaxSplits, kGemmSplitFloats / (M * N)});
  if (s < 2) return {false, 1, wide};
  const int64_t per = (steps + s - 1) / s;
  return {false, static_cast<int>((steps + per - 1) / per), wide};
}

// Floats of split-K scratch the plan needs.
int64_t gemm_partial_floats(const GemmPlan& plan, int64_t M, int64_t N) {
  return plan.splits > 1 ? plan.splits * M * N : 0;
}

// row_scale: as gemm_f16_kernel's (nullptr: none).
void launch_gemm_f16(const GemmPlan& plan, const __half* a, const __half* b, float* out, int64_t M, int64_t N,
                     int64_t K, int64_t ldc, float* partial, const float* row_scale, cudaStream_t stream) {
  const int steps = static_cast<int>((K + plan.bk() - 1) / plan.bk());
  if (plan.large) {
    const dim3 grid(static_cast<unsigned>((N + 127) / 128), static_cast<unsigned>((M + 127) / 128));
    kGemmLarge<<<grid, 256, gemm_shared_bytes<128, 128, 32>(), stream>>>(a, b, out, M, N, K, ldc, steps, 0, row_scale);
    return;
  }
  const int per = (steps + plan.splits - 1) / plan.splits;
  const dim3 grid(static_cast<unsigned>((N + 63) / 64), static_cast<unsigned>((M + 63) / 64),
                  static_cast<unsigned>(plan.splits));
  const GemmKernel small = plan.wide ? kGemmSmallWide : kGemmSmall;
  const size_t shared = plan.wide ? gemm_shared_bytes<64, 64, 64>() : gemm_shared_bytes<64, 64, 32>();
  if (plan.splits == 1) {
    small<<<grid, 128, shared, stream>>>(a, b, out, M, N, K, ldc, per, 0, row_scale);
    return;
  }
  small<<<grid, 128, shared, stream>>>(a, b, partial, M, N, K, N, per, M * N, nullptr);
  gemm_split_sum_kernel<<<grid_for(M * N, 256), 256, 0, stream>>>(partial, plan.splits, M, N, out, ldc, row_scale);
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

bool CudaKernels::prepare_gemm() {
  const bool small = allow_dynamic_shared(kGemmSmall, gemm_shared_bytes<64, 64, 32>());
  const bool wide = allow_dynamic_shared(kGemmSmallWide, gemm_shared_bytes<64, 64, 64>());
  const bool large = allow_dynamic_shared(kGemmLarge, gemm_shared_bytes<128, 128, 32>());
  return small && wide && large;
}

Blas* CudaKernels::blas() {
  if (!blas_tried_ && blas_factory_) {
    capture_guard("starting cuBLAS");
    blas_tried_ = true;
    blas_ = blas_factory_();
  }
  return blas_ != nullptr && blas_->available() ? blas_ : nullptr;
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

// linear with more rows than the matrix-vector kernel takes: out [M, N] = x [M, K] @ w^T. A
// quantized or f16 w runs on the tensor cores (see the top of this file): x rounded to f16 once, a
// quantized w dequantized to f16 slices of rows, an f16 w read in place; the products by cuBLAS,
// or by TL's own kernel (gemm_f16_kernel) below 2^31 multiply-adds, where cuBLAS is missing, or as
// TL_CUDA_OWN_GEMM asks.
// An f32 w, and with TL_CUDA_LINEAR_F16=0, a bf16 w or an x too large for the scratch (w converted
// to f32 slices, x read as it is), go through cuBLAS. False: not done (the caller's own kernels
// then run).
bool CudaKernels::linear_large(const View& x, const View& w, const View& out) {
  const int64_t M = x.shape[0], K = x.shape[1], N = w.shape[0];
  const bool half = tuning_.linear_f16 && (is_quantized(w.dtype) || w.dtype == DType::F16) &&
                    static_cast<size_t>(M * K) * sizeof(__half) <= kHalfXScratchBytes;
  // TL_CUDA_OWN_GEMM: 0 cuBLAS, TL's kernel where cuBLAS is missing; 1 the plain 64 x 64
  // kernel; 2 the planned one (gemm_plan); 3 (default) the planned one below 2^31 multiply-adds,
  // cuBLAS above.
  const int variant = tuning_.own_gemm;
  const bool own_ok = half && own_gemm_ok_ && K % 8 == 0 && (w.dtype != DType::F16 || gemm_f16_operand_ok(w.data, K));
  bool own = own_ok && variant > 0 && (variant != 3 || static_cast<double>(M) * N * K < 2147483648.0);
  Blas* blas = nullptr;
  if (!own) {
    capture_guard("linear through cuBLAS");
    blas = this->blas();
    if (blas == nullptr && !own_ok) return false;
    own = blas == nullptr;
  }
  if (own) capture_guard("linear on the tensor cores (its scratch)");
  const GemmOperand xa{x.data, DType::F32, 0, K, 1};
  if (w.dtype == DType::F32) {
    const GemmOperand wt{w.data, DType::F32, 0, 1, K};
    return blas->gemm(xa, wt, out.data, DType::F32, 1, M, N, K, N);
  }
  const size_t elem = half ? sizeof(__half) : sizeof(float);
  const int64_t rows_max = static_cast<int64_t>(kWeightScratchBytes / elem) / K;
  if (rows_max < 1) return false;
  const int64_t slice = w.dtype == DType::F16 && half ? 0 : (N < rows_max ? N : rows_max);
  auto align = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t w_bytes = align(static_cast<size_t>(slice * K) * elem);
  const size_t x_bytes = half ? align(static_cast<size_t>(M * K) * sizeof(__half)) : 0;
  const size_t scale_bytes = half ? align(static_cast<size_t>(M) * sizeof(float)) : 0;
  // Every slice but the last has `slice` rows (an f16 w: one slice of N); the last, fewer.
  const int64_t slice_rows = slice > 0 ? slice : N;
  const bool wide = tuning_.gemm_bk64;
  const GemmPlan plan = own ? gemm_plan(M, slice_rows, K, sm_count_, variant, wide) : GemmPlan{false, 1, false};
  const GemmPlan last_plan = own ? gemm_plan(M, N % slice_rows == 0 ? slice_rows : N % slice_rows, K, sm_count_, variant, wide)
                                 : GemmPlan{false, 1, false};
  const size_t partial_bytes = static_cast<size_t>(std::max(gemm_partial_floats(plan, M, slice_rows),
                                                            gemm_partial_floats(last_plan, M, N % slice_rows))) *
                               sizeof(float);
  auto* base = static_cast<uint8_t*>(weight_scratch(w_bytes + x_bytes + scale_bytes + partial_bytes));
  if (base == nullptr) return false;
  auto* op = static_cast<float*>(out.data);
  // out's columns [n0, n0 + rows) = xo @ wo^T, wo [rows, K]
  auto* partial = reinterpret_cast<float*>(base + w_bytes + x_bytes + scale_bytes);
  // x's row scales (rows_to_half_kernel's, f16 operands only): TL's kernel applies them as it
  // stores; after cuBLAS, scale_rows_kernel does.
  auto* scale = half ? reinterpret_cast<float*>(base + w_bytes + x_bytes) : nullptr;
  auto product = [&](const GemmOperand& xo, const GemmOperand& wo, int64_t n0, int64_t rows) {
    if (own) {
      launch_gemm_f16(rows == slice_rows ? plan : last_plan, static_cast<const __half*>(xo.data),
                      static_cast<const __half*>(wo.data), op + n0, M, rows, K, N, partial, scale, stream_);
      check_launch("linear");
      return true;
    }
    return blas->gemm(xo, wo, op + n0, DType::F32, 1, M, rows, K, N);
  };
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
      if (!product(xo, GemmOperand{scratch, scratch_dtype, 0, 1, K}, n0, rows)) {
        return false;  // only before the first slice: the shapes are the same for every slice
      }
    }
    return true;
  };
  if (!half) return by_slices(xa, reinterpret_cast<float*>(base), DType::F32);
  auto* xh = reinterpret_cast<__half*>(base + w_bytes);
  rows_to_half_kernel<<<static_cast<unsigned>(M), kHalfRowThreads, 0, stream_>>>(
      static_cast<const float*>(x.data), K, xh, scale);
  check_launch("linear");
  const GemmOperand xs{xh, DType::F16, 0, K, 1};
  const bool done = w.dtype == DType::F16 ? product(xs, GemmOperand{w.data, DType::F16, 0, 1, K}, 0, N)
                                          : by_slices(xs, reinterpret_cast<__half*>(base), DType::F16);
  if (!done) return false;
  if (!own) {
    scale_rows_kernel<<<static_cast<unsigned>(M), kScaleRowsThreads, 0, stream_>>>(op, N, N, scale);
    check_launch("linear");
  }
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
  Blas* blas = this->blas();
  if (blas != nullptr) capture_guard("matmul through cuBLAS");
  if (blas != nullptr &&
      blas->gemm(GemmOperand{a.data, a.dtype, a.strides[0], a.strides[1], a.strides[2]},
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
  if (M > kMatvecMaxRows && linear_large(x, w, out)) {
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

// 8-bit activations (--fast): fused.cu's kernel (matvec.cuh) for every row count, each row its
// one-row product; the exact linear where that kernel does not apply.
void CudaKernels::linear_q8_activations(const View& x, const View& w, const View& out) {
  const int64_t M = x.ndim == 2 ? x.shape[0] : 0, K = w.ndim == 2 ? w.shape[1] : 0, N = w.shape[0];
  if (x.dtype == DType::F32 && out.dtype == DType::F32 && x.ndim == 2 && out.ndim == 2 && is_quantized(w.dtype) &&
      M > 0 && M <= INT32_MAX && N > 0 && K > 0 && x.shape[1] == K && K % block_elems(w.dtype) == 0 &&
      launch_quant_matvec_q8(static_cast<const float*>(x.data), K, w, LinearPrologue::None, View{}, 0.0f,
                             Addend{nullptr, DType::F32, 0, 0}, static_cast<float*>(out.data), static_cast<int>(M),
                             static_cast<int>(sm_count_), tuning_, stream_)) {
    check_launch("linear");
    return;
  }
  linear(x, w, out);
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
