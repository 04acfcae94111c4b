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

// ---- 32 elements at a time, with wide loads (the matrix-vector kernels and the f32 conversion
// before cuBLAS). dequant32<T>(row, g, out) writes elements [32g, 32g + 32) of the row, with
// the same f32 expressions as dequant_chunk8 (the same values). Rows of the 32-element formats
// and of Q6_K are only 2-byte aligned; Q4_K and Q5_K rows need the row start 16-byte aligned
// (kDequant32Align16; the callers check the weight pointer and fall back otherwise).

template <DType T>
constexpr bool kDequant32Align16 = T == DType::Q4_K || T == DType::Q5_K;

__device__ __forceinline__ uint32_t u16_at(const uint8_t* p) {
  return __ldg(reinterpret_cast<const uint16_t*>(p));
}

// NW little-endian 32-bit words from a 2-byte-aligned address: word loads from the 4-byte
// aligned address below, re-joined with a funnel shift when p is 2 mod 4. Reads no byte outside
// [p, p + 4 NW) but the two below p in the same word.
template <int NW>
__device__ __forceinline__ void words_a2(const uint8_t* p, uint32_t (&w)[NW]) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uint32_t* q = reinterpret_cast<const uint32_t*>(a & ~uintptr_t(3));
  if ((a & 2) == 0) {
#pragma unroll
    for (int i = 0; i < NW; ++i) w[i] = __ldg(q + i);
  } else {
    uint32_t prev = __ldg(q);
#pragma unroll
    for (int i = 0; i < NW; ++i) {
      const uint32_t next = i + 1 < NW ? __ldg(q + i + 1) : u16_at(p + 4 * NW - 2);
      w[i] = __funnelshift_r(prev, next, 16);
      prev = next;
    }
  }
}

__device__ __forceinline__ uint32_t byte_of(const uint32_t* w, int i) { return (w[i >> 2] >> (8 * (i & 3))) & 0xFFu; }

__device__ __forceinline__ float f16_bits(uint32_t bits) { return half_bits_to_float(static_cast<uint16_t>(bits)); }

template <DType T>
__device__ __forceinline__ void dequant32(const uint8_t* row, int64_t g, float* out);

template <>
__device__ __forceinline__ void dequant32<DType::Q4_0>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* blk = row + g * TL_Q4_0_BLOCK_BYTES;
  const float d = f16_bits(u16_at(blk));
  uint32_t q[4];
  words_a2<4>(blk + 2, q);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const uint32_t b = byte_of(q, j);
    out[j] = d * static_cast<float>(static_cast<int>(b & 0x0F) - 8);
    out[j + 16] = d * static_cast<float>(static_cast<int>(b >> 4) - 8);
  }
}

template <>
__device__ __forceinline__ void dequant32<DType::Q4_1>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* blk = row + g * TL_Q4_1_BLOCK_BYTES;
  uint32_t q[5];
  words_a2<5>(blk, q);
  const float d = f16_bits(q[0] & 0xFFFF), m = f16_bits(q[0] >> 16);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const uint32_t b = byte_of(q + 1, j);
    out[j] = d * static_cast<float>(b & 0x0F) + m;
    out[j + 16] = d * static_cast<float>(b >> 4) + m;
  }
}

template <>
__device__ __forceinline__ void dequant32<DType::Q5_0>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* blk = row + g * TL_Q5_0_BLOCK_BYTES;
  const float d = f16_bits(u16_at(blk));
  uint32_t q[5];  // qh, then 16 bytes of nibbles
  words_a2<5>(blk + 2, q);
  const uint32_t qh = q[0];
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const uint32_t b = byte_of(q + 1, j);
    const int lo = static_cast<int>(b & 0x0F) | static_cast<int>(((qh >> j) & 1) << 4);
    const int hi = static_cast<int>(b >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
    out[j] = d * static_cast<float>(lo - 16);
    out[j + 16] = d * static_cast<float>(hi - 16);
  }
}

template <>
__device__ __forceinline__ void dequant32<DType::Q5_1>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* blk = row + g * TL_Q5_1_BLOCK_BYTES;
  uint32_t q[6];  // d|m, qh, 16 bytes of nibbles
  words_a2<6>(blk, q);
  const float d = f16_bits(q[0] & 0xFFFF), m = f16_bits(q[0] >> 16);
  const uint32_t qh = q[1];
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const uint32_t b = byte_of(q + 2, j);
    const uint32_t lo = (b & 0x0F) | (((qh >> j) & 1) << 4);
    const uint32_t hi = (b >> 4) | (((qh >> (j + 16)) & 1) << 4);
    out[j] = d * static_cast<float>(lo) + m;
    out[j + 16] = d * static_cast<float>(hi) + m;
  }
}

template <>
__device__ __forceinline__ void dequant32<DType::Q8_0>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* blk = row + g * TL_Q8_0_BLOCK_BYTES;
  const float d = f16_bits(u16_at(blk));
  uint32_t q[8];
  words_a2<8>(blk + 2, q);
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    out[j] = d * static_cast<float>(static_cast<int8_t>(byte_of(q, j)));
  }
}

// Scale and min of sub-block sb from the 12 scale bytes held in three words.
__device__ __forceinline__ void k_scale_min_w(const uint32_t* s, int sb, float* scale, float* min) {
  if (sb < 4) {
    *scale = static_cast<float>(byte_of(s, sb) & 63);
    *min = static_cast<float>(byte_of(s, sb + 4) & 63);
  } else {
    *scale = static_cast<float>((byte_of(s, sb + 4) & 0x0F) | ((byte_of(s, sb - 4) >> 6) << 4));
    *min = static_cast<float>((byte_of(s, sb + 4) >> 4) | ((byte_of(s, sb) >> 6) << 4));
  }
}

__device__ __forceinline__ void load16x2(const uint8_t* p, uint32_t (&w)[8]) {
  const uint4 a = __ldg(reinterpret_cast<const uint4*>(p));
  const uint4 b = __ldg(reinterpret_cast<const uint4*>(p) + 1);
  w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
  w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
}

template <>
__device__ __forceinline__ void dequant32<DType::Q4_K>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* blk = row + (g >> 3) * TL_Q4_K_BLOCK_BYTES;
  const int sb = static_cast<int>(g & 7);
  const uint4 head = __ldg(reinterpret_cast<const uint4*>(blk));  // d, dmin, 12 scale bytes
  const uint32_t sc_words[3] = {head.y, head.z, head.w};
  float sc, mn;
  k_scale_min_w(sc_words, sb, &sc, &mn);
  const float d = f16_bits(head.x & 0xFFFF) * sc;
  const float dm = f16_bits(head.x >> 16) * mn;
  uint32_t q[8];
  load16x2(blk + 16 + (sb >> 1) * 32, q);
  const int shift = (sb & 1) * 4;
#pragma unroll
  for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>((byte_of(q, j) >> shift) & 0x0F) - dm;
}

template <>
__device__ __forceinline__ void dequant32<DType::Q5_K>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* blk = row + (g >> 3) * TL_Q5_K_BLOCK_BYTES;
  const int sb = static_cast<int>(g & 7);
  const uint4 head = __ldg(reinterpret_cast<const uint4*>(blk));
  const uint32_t sc_words[3] = {head.y, head.z, head.w};
  float sc, mn;
  k_scale_min_w(sc_words, sb, &sc, &mn);
  const float d = f16_bits(head.x & 0xFFFF) * sc;
  const float dm = f16_bits(head.x >> 16) * mn;
  uint32_t qh[8], q[8];
  load16x2(blk + 16, qh);
  load16x2(blk + 48 + (sb >> 1) * 32, q);
  const int shift = (sb & 1) * 4;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const uint32_t lo = (byte_of(q, j) >> shift) & 0x0F;
    const uint32_t hi = (byte_of(qh, j) >> sb) & 1;
    out[j] = d * static_cast<float>(lo | (hi << 4)) - dm;
  }
}

template <>
__device__ __forceinline__ void dequant32<DType::Q6_K>(const uint8_t* row, int64_t g, float* out) {
  const uint8_t* blk = row + (g >> 3) * TL_Q6_K_BLOCK_BYTES;
  const int sb = static_cast<int>(g & 7);
  const int half = sb >> 2;            // which 128-element half
  const int r = (sb & 3) * 32;         // first element inside the half
  const int lo_shift = (r >> 6) * 4;
  const int hi_shift = (r >> 5) * 2;
  uint32_t ql[8], qh[8];
  words_a2<8>(blk + half * 64 + (r & 63), ql);
  words_a2<8>(blk + 128 + half * 32, qh);
  const uint32_t scales = u16_at(blk + 192 + sb * 2);
  const float dd = f16_bits(u16_at(blk + 208));
  const float d0 = dd * static_cast<float>(static_cast<int8_t>(scales & 0xFF));
  const float d1 = dd * static_cast<float>(static_cast<int8_t>(scales >> 8));
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int lo = static_cast<int>((byte_of(ql, j) >> lo_shift) & 0x0F);
    const int hi = static_cast<int>((byte_of(qh, j) >> hi_shift) & 3);
    out[j] = (j < 16 ? d0 : d1) * static_cast<float>((lo | (hi << 4)) - 32);
  }
}

// ---- The matrix-vector form: quant32<T>(row, g, q, a, b) gives the 32 elements of group g as
// unsigned integers q (element j in byte j & 3 of word j >> 2, each 0..255) and, per 16-element
// half h, an affine map: element j of half h is a[h] * q_j + b[h] (Q8_0: q = int8 + 128). A dot
// with x then costs one byte-to-float conversion and one FMA per element; the map is applied
// once per half to the sums of q x and of x. Same values as dequant32 up to rounding.

// Bits 0..3 of `bits` to bit 4 of bytes 0..3 (the fifth bit of four Q5_0/Q5_1 elements).
__device__ __forceinline__ uint32_t spread4_to_bit4(uint32_t bits) {
  return ((bits * 0x00204081u) & 0x01010101u) << 4;
}

template <DType T>
__device__ __forceinline__ void quant32(const uint8_t* row, int64_t g, uint32_t (&q)[8], float (&a)[2],
                                        float (&b)[2]);

template <>
__device__ __forceinline__ void quant32<DType::Q4_0>(const uint8_t* row, int64_t g, uint32_t (&q)[8],
                                                     float (&a)[2], float (&b)[2]) {
  const uint8_t* blk = row + g * TL_Q4_0_BLOCK_BYTES;
  const float d = f16_bits(u16_at(blk));
  uint32_t w[4];
  words_a2<4>(blk + 2, w);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    q[i] = w[i] & 0x0F0F0F0Fu;
    q[i + 4] = (w[i] >> 4) & 0x0F0F0F0Fu;
  }
  a[0] = a[1] = d;
  b[0] = b[1] = -8.0f * d;
}

template <>
__device__ __forceinline__ void quant32<DType::Q4_1>(const uint8_t* row, int64_t g, uint32_t (&q)[8],
                                                     float (&a)[2], float (&b)[2]) {
  const uint8_t* blk = row + g * TL_Q4_1_BLOCK_BYTES;
  uint32_t w[5];
  words_a2<5>(blk, w);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    q[i] = w[i + 1] & 0x0F0F0F0Fu;
    q[i + 4] = (w[i + 1] >> 4) & 0x0F0F0F0Fu;
  }
  a[0] = a[1] = f16_bits(w[0] & 0xFFFF);
  b[0] = b[1] = f16_bits(w[0] >> 16);
}

template <>
__device__ __forceinline__ void quant32<DType::Q5_0>(const uint8_t* row, int64_t g, uint32_t (&q)[8],
                                                     float (&a)[2], float (&b)[2]) {
  const uint8_t* blk = row + g * TL_Q5_0_BLOCK_BYTES;
  const float d = f16_bits(u16_at(blk));
  uint32_t w[5];
  words_a2<5>(blk + 2, w);
  const uint32_t qh = w[0];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    q[i] = (w[i + 1] & 0x0F0F0F0Fu) | spread4_to_bit4((qh >> (4 * i)) & 0xF);
    q[i + 4] = ((w[i + 1] >> 4) & 0x0F0F0F0Fu) | spread4_to_bit4((qh >> (16 + 4 * i)) & 0xF);
  }
  a[0] = a[1] = d;
  b[0] = b[1] = -16.0f * d;
}

template <>
__device__ __forceinline__ void quant32<DType::Q5_1>(const uint8_t* row, int64_t g, uint32_t (&q)[8],
                                                     float (&a)[2], float (&b)[2]) {
  const uint8_t* blk = row + g * TL_Q5_1_BLOCK_BYTES;
  uint32_t w[6];
  words_a2<6>(blk, w);
  const uint32_t qh = w[1];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    q[i] = (w[i + 2] & 0x0F0F0F0Fu) | spread4_to_bit4((qh >> (4 * i)) & 0xF);
    q[i + 4] = ((w[i + 2] >> 4) & 0x0F0F0F0Fu) | spread4_to_bit4((qh >> (16 + 4 * i)) & 0xF);
  }
  a[0] = a[1] = f16_bits(w[0] & 0xFFFF);
  b[0] = b[1] = f16_bits(w[0] >> 16);
}

template <>
__device__ __forceinline__ void quant32<DType::Q8_0>(const uint8_t* row, int64_t g, uint32_t (&q)[8],
                                                     float (&a)[2], float (&b)[2]) {
  const uint8_t* blk = row + g * TL_Q8_0_BLOCK_BYTES;
  const float d = f16_bits(u16_at(blk));
  words_a2<8>(blk + 2, q);
#pragma unroll
  for (int i = 0; i < 8; ++i) q[i] ^= 0x80808080u;  // int8 + 128, as unsigned bytes
  a[0] = a[1] = d;
  b[0] = b[1] = -128.0f * d;
}

template <>
__device__ __forceinline__ void quant32<DType::Q4_K>(const uint8_t* row, int64_t g, uint32_t (&q)[8],
                                                     float (&a)[2], float (&b)[2]) {
  const uint8_t* blk = row + (g >> 3) * TL_Q4_K_BLOCK_BYTES;
  const int sb = static_cast<int>(g & 7);
  const uint4 head = __ldg(reinterpret_cast<const uint4*>(blk));
  const uint32_t sc_words[3] = {head.y, head.z, head.w};
  float sc, mn;
  k_scale_min_w(sc_words, sb, &sc, &mn);
  uint32_t w[8];
  load16x2(blk + 16 + (sb >> 1) * 32, w);
  const int shift = (sb & 1) * 4;
#pragma unroll
  for (int i = 0; i < 8; ++i) q[i] = (w[i] >> shift) & 0x0F0F0F0Fu;
  a[0] = a[1] = f16_bits(head.x & 0xFFFF) * sc;
  b[0] = b[1] = -(f16_bits(head.x >> 16) * mn);
}

template <>
__device__ __forceinline__ void quant32<DType::Q5_K>(const uint8_t* row, int64_t g, uint32_t (&q)[8],
                                                     float (&a)[2], float (&b)[2]) {
  const uint8_t* blk = row + (g >> 3) * TL_Q5_K_BLOCK_BYTES;
  const int sb = static_cast<int>(g & 7);
  const uint4 head = __ldg(reinterpret_cast<const uint4*>(blk));
  const uint32_t sc_words[3] = {head.y, head.z, head.w};
  float sc, mn;
  k_scale_min_w(sc_words, sb, &sc, &mn);
  uint32_t qh[8], w[8];
  load16x2(blk + 16, qh);
  load16x2(blk + 48 + (sb >> 1) * 32, w);
  const int shift = (sb & 1) * 4;
#pragma unroll
  for (int i = 0; i < 8; ++i) q[i] = ((w[i] >> shift) & 0x0F0F0F0Fu) | (((qh[i] >> sb) & 0x01010101u) << 4);
  a[0] = a[1] = f16_bits(head.x & 0xFFFF) * sc;
  b[0] = b[1] = -(f16_bits(head.x >> 16) * mn);
}

template <>
__device__ __forceinline__ void quant32<DType::Q6_K>(const uint8_t* row, int64_t g, uint32_t (&q)[8],
                                                     float (&a)[2], float (&b)[2]) {
  const uint8_t* blk = row + (g >> 3) * TL_Q6_K_BLOCK_BYTES;
  const int sb = static_cast<int>(g & 7);
  const int half = sb >> 2;
  const int r = (sb & 3) * 32;
  const int lo_shift = (r >> 6) * 4;
  const int hi_shift = (r >> 5) * 2;
  uint32_t ql[8], qh[8];
  words_a2<8>(blk + half * 64 + (r & 63), ql);
  words_a2<8>(blk + 128 + half * 32, qh);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    q[i] = ((ql[i] >> lo_shift) & 0x0F0F0F0Fu) | (((qh[i] >> hi_shift) & 0x03030303u) << 4);
  }
  const uint32_t scales = u16_at(blk + 192 + sb * 2);
  const float dd = f16_bits(u16_at(blk + 208));
  a[0] = dd * static_cast<float>(static_cast<int8_t>(scales & 0xFF));
  a[1] = dd * static_cast<float>(static_cast<int8_t>(scales >> 8));
  b[0] = -32.0f * a[0];
  b[1] = -32.0f * a[1];
}

// Byte k (0..3) of v as a float, exactly: 2^23 + byte built by a byte permute, minus 2^23.
__device__ __forceinline__ float byte_to_float(uint32_t v, int k) {
  return __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7440u + static_cast<unsigned>(k))) - 8388608.0f;
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
