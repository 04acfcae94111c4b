// Shared helpers of the CPU kernels: dtype row conversions, the strided loop nest, the f32 dot
// product with its run-time AVX2 dispatch, and argument checks. Conversions are exact for
// integers (int64 paths never pass through float) and round to nearest even for f16/bf16.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "cpu_kernels_impl.h"
#include "runtime/debug_config.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tl::cpu {

[[noreturn]] void kernel_fail(const std::string& msg) { throw KernelError(msg); }

void require_plain(const char* op, const View& v) {
  if (is_quantized(v.dtype))
    kernel_fail(std::string(op) + ": quantized dtype " + dtype_name(v.dtype) + " not supported here");
}
void require_float(const char* op, const View& v) {
  if (!is_floating(v.dtype))
    kernel_fail(std::string(op) + ": expected a float tensor, got " + dtype_name(v.dtype));
}
void require_contiguous(const char* op, const View& v) {
  if (!v.is_contiguous()) kernel_fail(std::string(op) + ": operand must be contiguous");
}

bool cpu_has_avx2() {
#if defined(__x86_64__)
  // TL_CPU_NO_SIMD=1 forces the portable paths (tests run both).
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c") && !env_cpu_no_simd();
  return has;
#else
  return false;
#endif
}

bool cpu_has_avx512vl() {
#if defined(__x86_64__)
  // TL_CPU_NO_AVX512=1 keeps the AVX2 kernels (tests run both); __builtin_cpu_supports also checks
  // that the OS saves the AVX-512 registers.
  static const bool has = cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512vl") && !env_cpu_no_avx512();
  return has;
#else
  return false;
#endif
}

bool cpu_weight_prefetch() {
  // Measured on an AMD EPYC (Zen 4, 2 cores): an 8-row decode step of SmolLM2 with 8-bit
  // activations took 18.7 ms with the prefetches and 16.4 ms without (1 row: 7.9 -> 6.8 ms); its
  // hardware prefetchers follow the weight stream on their own and the prefetch instructions
  // only competed for load slots. On the Intel Xeon the prefetches were measured a gain.
  static const bool on = [] {
    const int env = env_cpu_weight_prefetch();
    if (env >= 0) return env == 1;
#if defined(__x86_64__)
    return !__builtin_cpu_is("amd");
#else
    return true;
#endif
  }();
  return on;
}

// ---------------------------------------------------------------- row conversions

namespace {

inline int64_t float_to_i64(float f) {
  if (!(f == f)) return 0;
  if (f >= 9.2233715e18f) return std::numeric_limits<int64_t>::max();
  if (f <= -9.2233715e18f) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(f);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma,f16c"))) void f16_to_f32_avx2(const uint16_t* s, float* d,
                                                               int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = f16_to_f32(s[i]);
}
__attribute__((target("avx2,fma,f16c"))) void f32_to_f16_avx2(const float* s, uint16_t* d,
                                                               int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) d[i] = f32_to_f16(s[i]);
}
#endif

}  // namespace

void load_f32(DType t, const void* src, int64_t stride, int64_t n, float* dst) {
  switch (t) {
    case DType::F32: {
      const float* s = static_cast<const float*>(src);
      if (stride == 1) {
        std::memcpy(dst, s, static_cast<size_t>(n) * 4);
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      }
      return;
    }
    case DType::F16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
#if defined(__x86_64__)
      if (stride == 1 && cpu_has_avx2()) {
        f16_to_f32_avx2(s, dst, n);
        return;
      }
#endif
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i * stride]);
      return;
    }
    case DType::BF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i * stride]);
      return;
    }
    case DType::I32: {
      const int32_t* s = static_cast<const int32_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i * stride]);
      return;
    }
    case DType::I64: {
      const int64_t* s = static_cast<const int64_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i * stride]);
      return;
    }
    case DType::Bool: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride] ? 1.0f : 0.0f;
      return;
    }
    default:
      kernel_fail(std::string("cannot read ") + dtype_name(t) + " elementwise");
  }
}

void store_f32(DType t, void* dst, int64_t stride, int64_t n, const float* src) {
  switch (t) {
    case DType::F32: {
      float* d = static_cast<float*>(dst);
      if (stride == 1) {
        std::memcpy(d, src, static_cast<size_t>(n) * 4);
      } else {
        for (int64_t i = 0; i < n; ++i) d[i * stride] = src[i];
      }
      return;
    }
    case DType::F16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
#if defined(__x86_64__)
      if (stride == 1 && cpu_has_avx2()) {
        f32_to_f16_avx2(src, d, n);
        return;
      }
#endif
      for (int64_t i = 0; i < n; ++i) d[i * stride] = f32_to_f16(src[i]);
      return;
    }
    case DType::BF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i * stride] = f32_to_bf16(src[i]);
      return;
    }
    case DType::I32: {
      int32_t* d = static_cast<int32_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i * stride] = static_cast<int32_t>(saturate_to_int(src[i], DType::I32));
      return;
    }
    case DType::I64: {
      int64_t* d = static_cast<int64_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i * stride] = float_to_i64(src[i]);
      return;
    }
    case DType::Bool: {
      uint8_t* d = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i * stride] = src[i] != 0.0f ? 1 : 0;
      return;
    }
    default:
      kernel_fail(std::string("cannot write ") + dtype_name(t) + " elementwise");
  }
}

void load_i64(DType t, const void* src, int64_t stride, int64_t n, int64_t* dst) {
  switch (t) {
    case DType::I64: {
      const int64_t* s = static_cast<const int64_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      return;
    }
    case DType::I32: {
      const int32_t* s = static_cast<const int32_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      return;
    }
    case DType::Bool: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride] ? 1 : 0;
      return;
    }
    default: {
      float tmp[kChunk];
      for (int64_t i = 0; i < n; i += kChunk) {
        int64_t m = std::min(kChunk, n - i);
        load_f32(t, static_cast<const char*>(src) + i * stride * block_bytes(t), stride, m, tmp);
        for (int64_t j = 0; j < m; ++j) dst[i + j] = float_to_i64(tmp[j]);
      }
    }
  }
}

void store_i64(DType t, void* dst, int64_t stride, int64_t n, const int64_t* src) {
  switch (t) {
    case DType::I64: {
      int64_t* d = static_cast<int64_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i * stride] = src[i];
      return;
    }
    case DType::I32: {
      int32_t* d = static_cast<int32_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i * stride] = static_cast<int32_t>(src[i]);
      return;
    }
    case DType::Bool: {
      uint8_t* d = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i * stride] = src[i] != 0 ? 1 : 0;
      return;
    }
    default: {
      float tmp[kChunk];
      for (int64_t i = 0; i < n; i += kChunk) {
        int64_t m = std::min(kChunk, n - i);
        for (int64_t j = 0; j < m; ++j) tmp[j] = static_cast<float>(src[i + j]);
        store_f32(t, static_cast<char*>(dst) + i * stride * block_bytes(t), stride, m, tmp);
      }
    }
  }
}

// ---------------------------------------------------------------- loop nest

LoopNest make_loop_nest(int nops, const View* const* views) {
  LoopNest ln;
  ln.nops = nops;
  const View& ref = *views[0];
  for (int d = 0; d < ref.ndim; ++d) {
    if (ref.shape[d] == 1) continue;
    int nd = ln.ndim;
    bool merge = nd > 0;
    for (int o = 0; o < nops && merge; ++o)
      merge = views[o]->strides[d] * ref.shape[d] == ln.strides[o][nd - 1] ||
              (views[o]->strides[d] == 0 && ln.strides[o][nd - 1] == 0);
    if (merge) {
      // All operands continue the previous dim: fold this dim into it.
      ln.shape[nd - 1] *= ref.shape[d];
      for (int o = 0; o < nops; ++o) ln.strides[o][nd - 1] = views[o]->strides[d];
    } else {
      ln.shape[nd] = ref.shape[d];
      for (int o = 0; o < nops; ++o) ln.strides[o][nd] = views[o]->strides[d];
      ln.ndim = nd + 1;
    }
  }
  if (ln.ndim == 0) {
    ln.ndim = 1;
    ln.shape[0] = ref.numel();  // 1 element, or 0 for an empty shape
    for (int o = 0; o < nops; ++o) ln.strides[o][0] = 1;
  }
  return ln;
}

void LoopNest::row_offsets(int64_t r, int64_t* offsets) const {
  for (int o = 0; o < nops; ++o) offsets[o] = 0;
  for (int d = ndim - 2; d >= 0; --d) {
    int64_t i = r % shape[d];
    r /= shape[d];
    for (int o = 0; o < nops; ++o) offsets[o] += i * strides[o][d];
  }
}

// ---------------------------------------------------------------- f32 dot / axpy

namespace {
float dot_f32_scalar(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  return s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float dot_f32_avx2(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  float r = _mm_cvtss_f32(h);
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}
__attribute__((target("avx2,fma"))) void axpy_f32_avx2(float alpha, const float* x, float* y,
                                                       int64_t n) {
  __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += alpha * x[i];
}
#endif
}  // namespace

float dot_f32(const float* a, const float* b, int64_t n) {
#if defined(__x86_64__)
  if (cpu_has_avx2()) return dot_f32_avx2(a, b, n);
#endif
  return dot_f32_scalar(a, b, n);
}

void axpy_f32(float alpha, const float* x, float* y, int64_t n) {
#if defined(__x86_64__)
  if (cpu_has_avx2()) return axpy_f32_avx2(alpha, x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace tl::cpu
