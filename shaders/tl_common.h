// Helpers shared by every Metal kernel: dtype-generic loads and stores (float compute is f32 and
// integer compute is int64, as in cpp/runtime/kernels.h), strided index arithmetic, and the
// decoding of GGUF quantized blocks. Block layouts are exactly ggml's (see cpp/runtime/dtype.h);
// blocks are read byte by byte or as half, never as wider words, because blocks of 18/20/22/34/210
// bytes leave rows only 2-byte aligned. The CPU twins of the decoders are the dequantizers in
// cpp/backends/cpu/kernels_matmul_quant.cpp; the tests compare both against the gguf package.
#ifndef TL_SHADERS_COMMON_H
#define TL_SHADERS_COMMON_H

#include <metal_stdlib>
using namespace metal;

#include "tl_params.h"
#include "../cpp/runtime/quant_blocks.h"

// ---- plain dtypes ----------------------------------------------------------------------------

inline bool tl_is_integer_dtype(int dtype) {
  return dtype == TL_I32 || dtype == TL_I64 || dtype == TL_BOOL;
}

inline float tl_bf16_to_float(ushort bits) { return as_type<float>(uint(bits) << 16); }

inline ushort tl_float_to_bf16(float v) {
  uint bits = as_type<uint>(v);
  if (isnan(v)) return ushort(0x7FC0);
  bits += 0x7FFFu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return ushort(bits >> 16);
}

inline float tl_load_f(device const uchar* base, long i, int dtype) {
  switch (dtype) {
    case TL_F32: return ((device const float*)base)[i];
    case TL_F16: return float(((device const half*)base)[i]);
    case TL_BF16: return tl_bf16_to_float(((device const ushort*)base)[i]);
    case TL_I32: return float(((device const int*)base)[i]);
    case TL_I64: return float(((device const long*)base)[i]);
    case TL_BOOL: return base[i] != 0 ? 1.0f : 0.0f;
    default: return 0.0f;
  }
}

// Float -> integer truncates toward zero and saturates at the target's range; NaN gives 0 (the
// same rule as dtype.h's saturate_to_int on the host and the CPU and CUDA kernels).
inline long tl_float_to_long(float v) {
  if (isnan(v)) return 0;
  if (v >= 9.2233715e18f) return 9223372036854775807L;
  if (v <= -9.2233715e18f) return -9223372036854775807L - 1;
  return long(v);
}
inline int tl_float_to_int(float v) {
  if (isnan(v)) return 0;
  if (v >= 2147483648.0f) return 2147483647;
  if (v <= -2147483648.0f) return -2147483647 - 1;
  return int(v);
}

inline long tl_load_i(device const uchar* base, long i, int dtype) {
  switch (dtype) {
    case TL_F32: return tl_float_to_long(((device const float*)base)[i]);
    case TL_F16: return tl_float_to_long(float(((device const half*)base)[i]));
    case TL_BF16: return tl_float_to_long(tl_bf16_to_float(((device const ushort*)base)[i]));
    case TL_I32: return long(((device const int*)base)[i]);
    case TL_I64: return ((device const long*)base)[i];
    case TL_BOOL: return base[i] != 0 ? 1 : 0;
    default: return 0;
  }
}

inline void tl_store_f(device uchar* base, long i, int dtype, float v) {
  switch (dtype) {
    case TL_F32: ((device float*)base)[i] = v; break;
    case TL_F16: ((device half*)base)[i] = half(v); break;
    case TL_BF16: ((device ushort*)base)[i] = tl_float_to_bf16(v); break;
    case TL_I32: ((device int*)base)[i] = tl_float_to_int(v); break;
    case TL_I64: ((device long*)base)[i] = tl_float_to_long(v); break;
    case TL_BOOL: base[i] = v != 0.0f ? uchar(1) : uchar(0); break;
    default: break;
  }
}

inline void tl_store_i(device uchar* base, long i, int dtype, long v) {
  switch (dtype) {
    case TL_F32: ((device float*)base)[i] = float(v); break;
    case TL_F16: ((device half*)base)[i] = half(float(v)); break;
    case TL_BF16: ((device ushort*)base)[i] = tl_float_to_bf16(float(v)); break;
    case TL_I32: ((device int*)base)[i] = int(v); break;
    case TL_I64: ((device long*)base)[i] = v; break;
    case TL_BOOL: base[i] = v != 0 ? uchar(1) : uchar(0); break;
    default: break;
  }
}

// Element offset (in elements) of the element whose row-major linear index over `desc`'s shape is
// `linear`. Strides may be 0 (broadcast) or negative.
inline long tl_offset(constant TLViewDesc& desc, long linear) {
  long offset = 0;
  for (int dim = desc.ndim - 1; dim >= 0; --dim) {
    long extent = desc.shape[dim];
    long index = linear % extent;
    linear /= extent;
    offset += index * desc.strides[dim];
  }
  return offset;
}

// ---- GGUF quantized blocks -----------------------------------------------------------------

inline float tl_half_at(device const uchar* p) { return float(*((device const half*)p)); }

// Block sizes from cpp/runtime/quant_blocks.h (the one copy, shared with the C++ and CUDA code).
inline int tl_block_elems(int dtype) {
  return (dtype == TL_Q4_K || dtype == TL_Q5_K || dtype == TL_Q6_K) ? TL_QK_K : TL_QK;
}

inline int tl_block_bytes(int dtype) {
  switch (dtype) {
    case TL_Q4_0: return TL_Q4_0_BLOCK_BYTES;
    case TL_Q4_1: return TL_Q4_1_BLOCK_BYTES;
    case TL_Q5_0: return TL_Q5_0_BLOCK_BYTES;
    case TL_Q5_1: return TL_Q5_1_BLOCK_BYTES;
    case TL_Q8_0: return TL_Q8_0_BLOCK_BYTES;
    case TL_Q4_K: return TL_Q4_K_BLOCK_BYTES;
    case TL_Q5_K: return TL_Q5_K_BLOCK_BYTES;
    case TL_Q6_K: return TL_Q6_K_BLOCK_BYTES;
    default: return 0;
  }
}

// 4-bit quant of element e (0..31) of a 32-element block whose 16 nibble bytes start at qs:
// elements 0..15 are the low nibbles of bytes 0..15, elements 16..31 their high nibbles.
inline uint tl_nibble32(device const uchar* qs, int e) {
  return e < 16 ? (qs[e] & 0xFu) : (qs[e - 16] >> 4);
}

// Fifth bit of element e from the 4 little-endian bytes of qh (Q5_0 / Q5_1).
inline uint tl_high_bit32(device const uchar* qh, int e) { return (qh[e >> 3] >> (e & 7)) & 1u; }

// 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes of Q4_K / Q5_K.
inline void tl_k_scale_min(device const uchar* s, int j, thread float& scale, thread float& min_q) {
  if (j < 4) {
    scale = float(s[j] & 63u);
    min_q = float(s[j + 4] & 63u);
  } else {
    scale = float((s[j + 4] & 0xFu) | ((s[j - 4] >> 6) << 4));
    min_q = float((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Element e of one quantized block. Used by gather_rows and by the linear kernel's tail-free
// per-element path; the linear kernel's hot loop uses tl_block_dot below.
inline float tl_dequant_elem(device const uchar* block, int dtype, int e) {
  switch (dtype) {
    case TL_Q4_0: {
      float d = tl_half_at(block);
      return d * (float(tl_nibble32(block + 2, e)) - 8.0f);
    }
    case TL_Q4_1: {
      float d = tl_half_at(block);
      float m = tl_half_at(block + 2);
      return d * float(tl_nibble32(block + 4, e)) + m;
    }
    case TL_Q5_0: {
      float d = tl_half_at(block);
      uint q = tl_nibble32(block + 6, e) | (tl_high_bit32(block + 2, e) << 4);
      return d * (float(q) - 16.0f);
    }
    case TL_Q5_1: {
      float d = tl_half_at(block);
      float m = tl_half_at(block + 2);
      uint q = tl_nibble32(block + 8, e) | (tl_high_bit32(block + 4, e) << 4);
      return d * float(q) + m;
    }
    case TL_Q8_0: {
      float d = tl_half_at(block);
      return d * float(((device const char*)(block + 2))[e]);
    }
    case TL_Q4_K: {
      // d, dmin, 12 scale bytes, 128 bytes: 4 chunks of 32 bytes; chunk c holds sub-block 2c in
      // its low nibbles and sub-block 2c+1 in its high nibbles.
      int j = e >> 5;
      int l = e & 31;
      float scale, min_q;
      tl_k_scale_min(block + 4, j, scale, min_q);
      uchar byte = block[16 + (j >> 1) * 32 + l];
      uint q = (j & 1) ? uint(byte >> 4) : uint(byte & 0xFu);
      return tl_half_at(block) * scale * float(q) - tl_half_at(block + 2) * min_q;
    }
    case TL_Q5_K: {
      // As Q4_K, plus 32 bytes of high bits after the scales: bit j of qh[l] belongs to
      // element 32*j + l.
      int j = e >> 5;
      int l = e & 31;
      float scale, min_q;
      tl_k_scale_min(block + 4, j, scale, min_q);
      uchar byte = block[48 + (j >> 1) * 32 + l];
      uint q = (j & 1) ? uint(byte >> 4) : uint(byte & 0xFu);
      q |= ((uint(block[16 + l]) >> j) & 1u) << 4;
      return tl_half_at(block) * scale * float(q) - tl_half_at(block + 2) * min_q;
    }
    case TL_Q6_K: {
      // 128 bytes ql, 64 bytes qh, 16 int8 scales (one per 16 elements), f16 d. Each half h of
      // 128 elements: low nibbles from ql[64h + r % 64] (shift 4 when r >= 64), high two bits from
      // qh[32h + r % 32] at shift 2 * (r / 32).
      int h = e >> 7;
      int r = e & 127;
      uint lo = (uint(block[h * 64 + (r & 63)]) >> ((r >> 6) * 4)) & 0xFu;
      uint hi = (uint(block[128 + h * 32 + (r & 31)]) >> ((r >> 5) * 2)) & 3u;
      int q = int(lo | (hi << 4)) - 32;
      float scale = float(((device const char*)(block + 192))[e >> 4]);
      return tl_half_at(block + 208) * scale * float(q);
    }
    default:
      return 0.0f;
  }
}

// Dot product of one quantized block with the matching `elems` values of x (f32).
inline float tl_block_dot(device const uchar* block, int dtype, device const float* x) {
  float sum = 0.0f;
  switch (dtype) {
    case TL_Q4_0: case TL_Q4_1: case TL_Q5_0: case TL_Q5_1: case TL_Q8_0: {
      for (int e = 0; e < 32; ++e) sum += tl_dequant_elem(block, dtype, e) * x[e];
      return sum;
    }
    case TL_Q4_K: case TL_Q5_K: {
      int qs_at = dtype == TL_Q4_K ? 16 : 48;
      float d = tl_half_at(block);
      float dmin = tl_half_at(block + 2);
      for (int j = 0; j < 8; ++j) {
        float scale, min_q;
        tl_k_scale_min(block + 4, j, scale, min_q);
        device const uchar* qs = block + qs_at + (j >> 1) * 32;
        float dot = 0.0f;
        float xsum = 0.0f;
        for (int l = 0; l < 32; ++l) {
          uint q = (j & 1) ? uint(qs[l] >> 4) : uint(qs[l] & 0xFu);
          if (dtype == TL_Q5_K) q |= ((uint(block[16 + l]) >> j) & 1u) << 4;
          float xv = x[j * 32 + l];
          dot += float(q) * xv;
          xsum += xv;
        }
        sum += d * scale * dot - dmin * min_q * xsum;
      }
      return sum;
    }
    case TL_Q6_K: {
      for (int e = 0; e < 256; ++e) sum += tl_dequant_elem(block, dtype, e) * x[e];
      return sum;
    }
    default:
      return 0.0f;
  }
}

// Element k of a row of any dtype (plain or quantized) that starts at `row`.
inline float tl_row_elem(device const uchar* row, int dtype, long k) {
  if (dtype >= TL_Q4_0) {
    int elems = tl_block_elems(dtype);
    device const uchar* block = row + (k / elems) * tl_block_bytes(dtype);
    return tl_dequant_elem(block, dtype, int(k % elems));
  }
  return tl_load_f(row, k, dtype);
}

// ---- threadgroup reductions ------------------------------------------------------------------
// `scratch` holds one slot per thread; every thread of the threadgroup must call these (they
// contain barriers), and `count` must be a power of two.

inline float tl_threadgroup_sum(threadgroup float* scratch, float value, uint tid, uint count) {
  scratch[tid] = value;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint half_count = count / 2; half_count > 0; half_count /= 2) {
    if (tid < half_count) scratch[tid] += scratch[tid + half_count];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  float total = scratch[0];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return total;
}

inline float tl_threadgroup_max(threadgroup float* scratch, float value, uint tid, uint count) {
  scratch[tid] = value;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint half_count = count / 2; half_count > 0; half_count /= 2) {
    if (tid < half_count) scratch[tid] = max(scratch[tid], scratch[tid + half_count]);
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  float total = scratch[0];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return total;
}

#endif  // TL_SHADERS_COMMON_H
