#pragma once
// Dequantization of GGUF/ggml blocks on the device, eight consecutive elements at a time.
// A "chunk" is elements [8c, 8c + 8) of one row; every supported block holds a whole number of
// chunks (TL_QK = 32 or TL_QK_K = 256 elements, runtime/quant_blocks.h), so a chunk never straddles
// two blocks: chunk c is in block c / 4 (c >> 2) or c / 32 (c >> 5). The byte layouts are
// ggml's exactly (the same bytes the CPU backend reads); all arithmetic is f32.
#include <cstdint>

#include "cuda_common.cuh"
#include "runtime/quant_blocks.h"

static_assert(TL_QK == 4 * 8 && TL_QK_K == 32 * 8, "chunk indexing below assumes 32- and 256-element blocks");

namespace tl {
namespace cuda {

__device__ __forceinline__ float f16_at(const uint8_t* p) {
  return half_bits_to_float(static_cast<uint16_t>(p[0] | (p[1] << 8)));
}

__device__ __forceinline__ uint32_t u32_at(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// 6-bit scale and min of sub-block `sb` (0..7) from the 12 packed bytes of a Q4_K/Q5_K block.
__device__ __forceinline__ void k_scale_min(const uint8_t* s, int sb, float* scale, float* min) {
  if (sb < 4) {
    *scale = static_cast<float>(s[sb] & 63);
    *min = static_cast<float>(s[sb + 4] & 63);
  } else {
    *scale = static_cast<float>((s[sb + 4] & 0x0F) | ((s[sb - 4] >> 6) << 4));
    *min = static_cast<float>((s[sb + 4] >> 4) | ((s[sb] >> 6) << 4));
  }
}

// Writes elements [8c, 8c + 8) of the quantized row starting at `row` into out[0..7].
template <DType T>
__device__ __forceinline__ void dequant_chunk8(const uint8_t* row, int64_t c, float* out);

template <>
__device__ __forceinline__ void dequant_chunk8<DType::Q4_0>(const uint8_t* row, int64_t c,
                                                            float* out) {
  const uint8_t* blk = row + (c >> 2) * TL_Q4_0_BLOCK_BYTES;
  const int s = static_cast<int>(c & 3);
  const float d = f16_at(blk);
  const uint8_t* qs = blk + 2 + (s & 1) * 8;
  const int shift = (s >> 1) * 4;
#pragma unroll
  for (int k = 0; k < 8; ++k) out[k] = d * static_cast<float>(((qs[k] >> shift) & 0x0F) - 8);
}

template <>
__device__ __forceinline__ void dequant_chunk8<DType::Q4_1>(const uint8_t* row, int64_t c,
                                                            float* out) {
  const uint8_t* blk = row + (c >> 2) * TL_Q4_1_BLOCK_BYTES;
  const int s = static_cast<int>(c & 3);
  const float d = f16_at(blk);
  const float m = f16_at(blk + 2);
  const uint8_t* qs = blk + 4 + (s & 1) * 8;
  const int shift = (s >> 1) * 4;
#pragma unroll
  for (int k = 0; k < 8; ++k) out[k] = d * static_cast<float>((qs[k] >> shift) & 0x0F) + m;
}

template <>
__device__ __forceinline__ void dequant_chunk8<DType::Q5_0>(const uint8_t* row, int64_t c,
                                                            float* out) {
  const uint8_t* blk = row + (c >> 2) * TL_Q5_0_BLOCK_BYTES;
  const int s = static_cast<int>(c & 3);
  const float d = f16_at(blk);
  const uint32_t qh = u32_at(blk + 2);
  const uint8_t* qs = blk + 6 + (s & 1) * 8;
  const int shift = (s >> 1) * 4;
  const int j0 = s * 8;  // element index inside the block
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int lo = (qs[k] >> shift) & 0x0F;
    const int hi = (qh >> (j0 + k)) & 1;
    out[k] = d * static_cast<float>((lo | (hi << 4)) - 16);
  }
}

template <>
__device__ __forceinline__ void dequant_chunk8<DType::Q5_1>(const uint8_t* row, int64_t c,
                                                            float* out) {
  const uint8_t* blk = row + (c >> 2) * TL_Q5_1_BLOCK_BYTES;
  const int s = static_cast<int>(c & 3);
  const float d = f16_at(blk);
  const float m = f16_at(blk + 2);
  const uint32_t qh = u32_at(blk + 4);
  const uint8_t* qs = blk + 8 + (s & 1) * 8;
  const int shift = (s >> 1) * 4;
  const int j0 = s * 8;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int lo = (qs[k] >> shift) & 0x0F;
    const int hi = (qh >> (j0 + k)) & 1;
    out[k] = d * static_cast<float>(lo | (hi << 4)) + m;
  }
}

template <>
__device__ __forceinline__ void dequant_chunk8<DType::Q8_0>(const uint8_t* row, int64_t c,
                                                            float* out) {
  const uint8_t* blk = row + (c >> 2) * TL_Q8_0_BLOCK_BYTES;
  const float d = f16_at(blk);
  const int8_t* qs = reinterpret_cast<const int8_t*>(blk + 2 + (c & 3) * 8);
#pragma unroll
  for (int k = 0; k < 8; ++k) out[k] = d * static_cast<float>(qs[k]);
}

template <>
__device__ __forceinline__ void dequant_chunk8<DType::Q4_K>(const uint8_t* row, int64_t c,
                                                            float* out) {
  const uint8_t* blk = row + (c >> 5) * TL_Q4_K_BLOCK_BYTES;
  const int e0 = static_cast<int>(c & 31) * 8;  // first element inside the 256-element block
  const int sb = e0 >> 5;                        // sub-block of 32 elements
  float sc, mn;
  k_scale_min(blk + 4, sb, &sc, &mn);
  const float d = f16_at(blk) * sc;
  const float dm = f16_at(blk + 2) * mn;
  const uint8_t* qs = blk + 16 + (sb >> 1) * 32 + (e0 & 31);
  const int shift = (sb & 1) * 4;
#pragma unroll
  for (int k = 0; k < 8; ++k) out[k] = d * static_cast<float>((qs[k] >> shift) & 0x0F) - dm;
}

template <>
__device__ __forceinline__ void dequant_chunk8<DType::Q5_K>(const uint8_t* row, int64_t c,
                                                            float* out) {
  const uint8_t* blk = row + (c >> 5) * TL_Q5_K_BLOCK_BYTES;
  const int e0 = static_cast<int>(c & 31) * 8;
  const int sb = e0 >> 5;
  float sc, mn;
  k_scale_min(blk + 4, sb, &sc, &mn);
  const float d = f16_at(blk) * sc;
  const float dm = f16_at(blk + 2) * mn;
  const uint8_t* qh = blk + 16 + (e0 & 31);
  const uint8_t* qs = blk + 48 + (sb >> 1) * 32 + (e0 & 31);
  const int shift = (sb & 1) * 4;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int lo = (qs[k] >> shift) & 0x0F;
    const int hi = (qh[k] >> sb) & 1;
    out[k] = d * static_cast<float>(lo | (hi << 4)) - dm;
  }
}

template <>
__device__ __forceinline__ void dequant_chunk8<DType::Q6_K>(const uint8_t* row, int64_t c,
                                                            float* out) {
  const uint8_t* blk = row + (c >> 5) * TL_Q6_K_BLOCK_BYTES;
  const int e0 = static_cast<int>(c & 31) * 8;
  const int half = e0 >> 7;   // which 128-element half
  const int r = e0 & 127;
  const int lo_shift = (r >> 6) * 4;
  const int hi_shift = (r >> 5) * 2;
  const uint8_t* ql = blk + half * 64 + (r & 63);
  const uint8_t* qh = blk + 128 + half * 32 + (r & 31);
  const int8_t scale = static_cast<int8_t>(blk[192 + (e0 >> 4)]);
  const float d = f16_at(blk + 208) * static_cast<float>(scale);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int lo = (ql[k] >> lo_shift) & 0x0F;
    const int hi = (qh[k] >> hi_shift) & 3;
    out[k] = d * static_cast<float>((lo | (hi << 4)) - 32);
  }
}

// Calls f.template operator()<T>() with T the quantized dtype `t` (a run-time to compile-time
// switch). Returns false for a dtype that is not quantized.
template <class F>
bool dispatch_quantized(DType t, F&& f) {
  switch (t) {
    case DType::Q4_0: f.template operator()<DType::Q4_0>(); return true;
    case DType::Q4_1: f.template operator()<DType::Q4_1>(); return true;
    case DType::Q5_0: f.template operator()<DType::Q5_0>(); return true;
    case DType::Q5_1: f.template operator()<DType::Q5_1>(); return true;
    case DType::Q8_0: f.template operator()<DType::Q8_0>(); return true;
    case DType::Q4_K: f.template operator()<DType::Q4_K>(); return true;
    case DType::Q5_K: f.template operator()<DType::Q5_K>(); return true;
    case DType::Q6_K: f.template operator()<DType::Q6_K>(); return true;
    default: return false;
  }
}

}  // namespace cuda
}  // namespace tl
