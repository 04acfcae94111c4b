#pragma once
// The quantized matrix-vector core shared by linear's and fused_linear's decode kernels, so that
// both sum in the same order (fused_linear's results equal rms_norm/swiglu + linear + add).
// LPR lanes (8, 16 or 32, a power of two inside one warp) share one output column n: lane `sub`
// takes the 32-element groups g = sub, sub + LPR, ... of the weight row, dequantizes each with
// wide loads (dequant32) and adds its dot with each of the M <= kMatvecRows rows of x (read as
// float4: x rows 16-byte aligned, K a multiple of 32) to acc[m]; group_sum<LPR> then adds the
// LPR partial sums. Fewer lanes per column for short rows keep every lane busy (K = 576 has only
// 18 groups).
#include "cuda_common.cuh"
#include "quant_blocks.cuh"

namespace tl {
namespace cuda {

constexpr int kMatvecRows = 8;

inline int matvec_lanes_per_row(int64_t K) {
  const int64_t groups = K / 32;
  return groups >= 32 ? 32 : groups >= 16 ? 16 : 8;
}

template <DType WT, int LPR>
__device__ __forceinline__ void matvec32_row(const uint8_t* row, const float* x, int M, int64_t K,
                                             int sub, float (&acc)[kMatvecRows]) {
  const int64_t groups = K / 32;
#pragma unroll 2
  for (int64_t g = sub; g < groups; g += LPR) {
    float wv[32];
    dequant32<WT>(row, g, wv);
#pragma unroll
    for (int m = 0; m < kMatvecRows; ++m) {
      if (m < M) {
        const float4* xv = reinterpret_cast<const float4*>(x + m * K + g * 32);
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float4 v = xv[i];
          s = fmaf(wv[4 * i], v.x, s);
          s = fmaf(wv[4 * i + 1], v.y, s);
          s = fmaf(wv[4 * i + 2], v.z, s);
          s = fmaf(wv[4 * i + 3], v.w, s);
        }
        acc[m] += s;
      }
    }
  }
}

// Sum over the LPR consecutive lanes of a column group; every lane of the warp must call it.
template <int LPR>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = LPR / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

}  // namespace cuda
}  // namespace tl
