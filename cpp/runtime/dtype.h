#pragma once
// Element types of tensors. Plain types hold one element per slot; the GGUF block-quantized
// types (Q4_0 ... Q6_K) hold `block_elems` elements in `block_bytes` bytes, laid out exactly as
// ggml/GGUF store them, so weights are uploaded byte for byte and never dequantized in memory.
// A quantized tensor is always 2-D [rows, cols], row-major, cols a multiple of block_elems.
#include <cstddef>
#include <cstdint>
#include <string>

#include "quant_blocks.h"

namespace tl {

enum class DType : uint8_t {
  F32, F16, BF16, I32, I64, Bool,
  Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K,
};

inline bool is_quantized(DType t) { return t >= DType::Q4_0; }
inline bool is_floating(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
inline bool is_integer(DType t) { return t == DType::I32 || t == DType::I64; }

// Elements per block (1 for plain types); the quantized sizes come from quant_blocks.h.
constexpr int64_t block_elems(DType t) {
  switch (t) {
    case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: case DType::Q8_0: return TL_QK;
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: return TL_QK_K;
    default: return 1;
  }
}

// Bytes per block (the element size for plain types). Values match ggml's type_traits.
constexpr int64_t block_bytes(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::Bool: return 1;
    case DType::Q4_0: return TL_Q4_0_BLOCK_BYTES;
    case DType::Q4_1: return TL_Q4_1_BLOCK_BYTES;
    case DType::Q5_0: return TL_Q5_0_BLOCK_BYTES;
    case DType::Q5_1: return TL_Q5_1_BLOCK_BYTES;
    case DType::Q8_0: return TL_Q8_0_BLOCK_BYTES;
    case DType::Q4_K: return TL_Q4_K_BLOCK_BYTES;
    case DType::Q5_K: return TL_Q5_K_BLOCK_BYTES;
    case DType::Q6_K: return TL_Q6_K_BLOCK_BYTES;
  }
  return 0;
}

// Bytes of one row of `cols` elements (cols must be a multiple of block_elems).
inline size_t row_bytes(DType t, int64_t cols) {
  return static_cast<size_t>(cols / block_elems(t) * block_bytes(t));
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::Bool: return "bool";
    case DType::Q4_0: return "q4_0";
    case DType::Q4_1: return "q4_1";
    case DType::Q5_0: return "q5_0";
    case DType::Q5_1: return "q5_1";
    case DType::Q8_0: return "q8_0";
    case DType::Q4_K: return "q4_k";
    case DType::Q5_K: return "q5_k";
    case DType::Q6_K: return "q6_k";
  }
  return "?";
}

// Parses the names above; returns false for an unknown name.
inline bool dtype_from_name(const std::string& s, DType* out) {
  static const DType all[] = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64,
                              DType::Bool, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                              DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  for (DType t : all) {
    if (s == dtype_name(t)) { *out = t; return true; }
  }
  return false;
}

// Casts into integer dtypes, the same on every backend: a float (or a double scalar) truncates
// toward zero and saturates at the target's range, NaN gives 0; bool is "!= 0". Integer to a
// narrower integer wraps (two's complement, as NumPy's astype).
inline int64_t saturate_to_int(double v, DType t) {
  if (t == DType::Bool) return v != 0.0 ? 1 : 0;
  if (v != v) return 0;
  const double lo = t == DType::I32 ? -2147483648.0 : -9223372036854775808.0;
  const double hi = t == DType::I32 ? 2147483647.0 : 9223372036854775807.0;
  if (v <= lo) return t == DType::I32 ? INT32_MIN : INT64_MIN;
  if (v >= hi) return t == DType::I32 ? INT32_MAX : INT64_MAX;
  return static_cast<int64_t>(v);
}

}  // namespace tl
