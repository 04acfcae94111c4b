#pragma once
// Every environment variable of the runtime and its backends is read here and nowhere else (the
// accessors below; docs/develop.md documents them), when a device starts:
//   TL_BACKEND, TL_THREADS                                   which backend starts; kernel threads
//   TL_DEBUG_POISON, TL_DEBUG_DELAY_US, TL_NO_CACHE,         debug switches (DebugConfig; also
//   TL_DEBUG_MEMORY, TL_OPS_PER_COMMAND_BUFFER               changeable at run time by set_debug())
//   TL_MAX_COMMAND_BUFFERS_IN_FLIGHT, TL_MAX_MB_IN_FLIGHT    the queue's bounds
//   TL_CACHE_LIMIT_MB, TL_MAX_ALLOC_MB                       the buffer pool's bounds
//   TL_CPU_NO_SIMD                                           CPU kernels: portable paths only
//   TL_CPU_NO_AVX512                                         CPU kernels: AVX2 where AVX-512VL would serve
//   TL_CPU_WEIGHT_PREFETCH                                   CPU kernels: 8-bit products' weight prefetch
//   TL_Q8_ACTIVATIONS                                        8-bit activations in decode linear ops (also set_q8_activations())
//   TL_CUDA_DEVICE, TL_CUDA_LAUNCH_STATS                     CUDA backend: device index; stats at exit
//   TL_CUDA_BLAS, TL_CUDA_TF32, TL_CUBLAS_PATH               CUDA backend: cuBLAS on/off, TF32
//                                                            products, where libcublas is (blas.cu)
//   TL_CUDA_LINEAR_F16, TL_CUDA_OWN_GEMM, TL_CUDA_GEMM_BK64  CUDA backend: quantized/f16-weight
//                                                            products on f16 tensor cores, by TL's
//                                                            kernel or cuBLAS's (matmul.cu)
//   TL_CUDA_MATVEC_PREFETCH, TL_CUDA_MATVEC_PAIRS,           CUDA backend: kernel variants, for A/B
//   TL_CUDA_MATVEC_FOUR, TL_CUDA_ROPE_DEVICE_POW,            measurements (CudaTuning,
//   TL_CUDA_ATTN_ROWS8, TL_CUDA_ATTN_MIN_CHUNK,              cuda_kernels.h)
//   TL_CUDA_ATTN_GQA, TL_CUDA_ATTN_GQA_CHUNK,
//   TL_CUDA_ATTN_GQA_SPLITS, TL_CUDA_ATTN_TILE_ROWS,
//   TL_CUDA_PDL, TL_CUDA_L2_PREFETCH
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "errors.h"

namespace tl {

struct DebugConfig {
  std::atomic<bool> poison{false};        // fill buffers with 0xFF (NaN) when they are recycled
  std::atomic<uint32_t> delay_us{0};      // random 0..delay_us sleep before each command
  std::atomic<bool> no_cache{false};      // free buffers at once instead of caching them
  std::atomic<bool> trace{false};         // one stderr line per allocation, reuse and free
  std::atomic<int> ops_per_command_buffer{64};
  // linear ops encoded while this is on quantize their activations to 8 bits (approximate, faster):
  // products of at most q8_rows rows of x (1: matrix-vector products, decode only; 0: every
  // product, prefill too, as `--fast` sets it; any other count: products of up to that many rows)
  std::atomic<bool> q8_activations{false};
  std::atomic<int> q8_rows{1};
  // whether a linear op of M rows with quantized weights takes the 8-bit activation path now
  bool q8_takes(int64_t M) const {
    if (!q8_activations.load(std::memory_order_relaxed)) return false;
    const int rows = q8_rows.load(std::memory_order_relaxed);
    return rows == 0 || M <= rows;
  }

  void load_env();  // overwrite every field from the environment
};

namespace env_detail {

// An integer environment variable in [lo, hi], `fallback` when unset or empty. Anything else (not
// a whole decimal number, out of range, overflowing) throws TLError with one line naming it, so
// that a typo never turns into a silently wrapped limit.
inline int64_t env_int(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  std::string s(v);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.pop_back();
  size_t start = s.find_first_not_of(" \t");
  if (start == std::string::npos) return fallback;
  s = s.substr(start);
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(s.c_str(), &end, 10);
  bool whole = end != s.c_str() && *end == '\0';
  if (!whole || errno == ERANGE || x < lo || x > hi)
    throw TLError(std::string(name) + "=" + v + ": must be a whole number from " +
                  std::to_string(lo) + " to " + std::to_string(hi));
  return x;
}

// `unset`: the value of a missing or empty variable (true for switches that are on by default).
inline bool env_flag(const char* name, bool unset = false) {
  const char* v = std::getenv(name);
  if (!v || !*v) return unset;
  std::string s(v);
  return !(s == "0" || s == "false" || s == "False" || s == "no" || s == "off");
}

}  // namespace env_detail

// Named accessors, one per variable (a missing or empty variable gives the default).
inline std::string env_backend_name() {
  const char* v = std::getenv("TL_BACKEND");
  return (v && *v) ? std::string(v) : std::string("cpu");
}
// Integer variables must be whole numbers in their range; MiB values go up to 2^40 MiB (1 EiB) so
// that the shift to bytes cannot overflow.
constexpr int64_t kMaxEnvMiB = int64_t(1) << 40;
inline int env_threads() { return static_cast<int>(env_detail::env_int("TL_THREADS", 0, 0, 4096)); }
inline int64_t env_max_command_buffers_in_flight() {
  return env_detail::env_int("TL_MAX_COMMAND_BUFFERS_IN_FLIGHT", 8, 1, 1000000);
}
inline int64_t env_max_mb_in_flight(int64_t fallback) {
  return env_detail::env_int("TL_MAX_MB_IN_FLIGHT", fallback, 1, kMaxEnvMiB);
}
// -1 (unset): the pool's default
inline int64_t env_cache_limit_mb() { return env_detail::env_int("TL_CACHE_LIMIT_MB", -1, 0, kMaxEnvMiB); }
// 0 (unset): the pool's default
inline int64_t env_max_alloc_mb() { return env_detail::env_int("TL_MAX_ALLOC_MB", 0, 0, kMaxEnvMiB); }
inline bool env_cpu_no_simd() { return env_detail::env_flag("TL_CPU_NO_SIMD"); }
inline bool env_cpu_no_avx512() { return env_detail::env_flag("TL_CPU_NO_AVX512"); }
// the 8-bit-activation products' software prefetch of the weights: -1 (unset) by CPU vendor, 0 never, 1 always
inline int env_cpu_weight_prefetch() {
  return static_cast<int>(env_detail::env_int("TL_CPU_WEIGHT_PREFETCH", -1, 0, 1));
}
inline bool env_cuda_launch_stats() { return env_detail::env_flag("TL_CUDA_LAUNCH_STATS"); }
// cuBLAS for the CUDA backend's matrix products (default on; 0 keeps TL's own kernels)
inline bool env_cuda_blas() { return env_detail::env_flag("TL_CUDA_BLAS", true); }
// CUDA graphs for compiled functions' replays (default on; 0 launches kernel by kernel)
inline bool env_cuda_graphs() { return env_detail::env_flag("TL_CUDA_GRAPHS", true); }
// f32 products through cuBLAS may round their inputs to TF32 (off by default)
inline bool env_cuda_tf32() { return env_detail::env_flag("TL_CUDA_TF32"); }
// linear products with a quantized or f16 weight and more than a few rows on the tensor cores,
// x rounded to f16 (default on; 0 keeps f32 operands)
inline bool env_cuda_linear_f16() { return env_detail::env_flag("TL_CUDA_LINEAR_F16", true); }
// Kernel variants of the CUDA backend, for A/B measurements (docs/develop.md): the matrix-vector
// kernel's early weight loads (-1 unset: up to 2 MiB of weights; 0 never; 1 always), Q4_K groups in
// pairs and four columns per lane group (default on), RoPE's frequencies from the device's pow
// (default: the host's), decode attention's value rows 8 per round (default 16 for head dims up to
// 64) and keys per split block in a replay graph (default 128).
inline int env_cuda_matvec_prefetch() {
  return static_cast<int>(env_detail::env_int("TL_CUDA_MATVEC_PREFETCH", -1, 0, 1));
}
inline bool env_cuda_matvec_pairs() { return env_detail::env_flag("TL_CUDA_MATVEC_PAIRS", true); }
inline bool env_cuda_matvec_four() { return env_detail::env_flag("TL_CUDA_MATVEC_FOUR", true); }
inline bool env_cuda_rope_device_pow() { return env_detail::env_flag("TL_CUDA_ROPE_DEVICE_POW"); }
inline bool env_cuda_attn_rows8() { return env_detail::env_flag("TL_CUDA_ATTN_ROWS8"); }
// --fast on CUDA: the 8-bit activation matrix-vector kernel (off by default: end to end it measured
// slower than the exact kernels on an H200, see cpp/backends/cuda/README.md)
inline bool env_cuda_q8_matvec() { return env_detail::env_flag("TL_CUDA_Q8_MATVEC"); }
inline int64_t env_cuda_attn_min_chunk() {
  return env_detail::env_int("TL_CUDA_ATTN_MIN_CHUNK", 128, 32, 65536);
}
// Prompt-sized products with quantized or f16 weights on the tensor cores: 0 through cuBLAS
// (started then; TL's kernel where cuBLAS is missing), 1 TL's 64 x 64 kernel alone, 2 TL's kernel
// with its block shape and K splits chosen per product, 3 (default) as 2 below 2^31 multiply-adds
// and cuBLAS above (matmul.cu).
inline int env_cuda_own_gemm() { return static_cast<int>(env_detail::env_int("TL_CUDA_OWN_GEMM", 3, 0, 3)); }
// TL's f16 product kernel's 64 x 64 blocks in k-steps of 64 halves (default; 0: of 32).
inline bool env_cuda_gemm_bk64() { return env_detail::env_flag("TL_CUDA_GEMM_BK64", true); }
// Decode attention's kernel for grouped-query heads (default on; 0: attention_kernel, one block
// per query head), its least keys per split block (default 32, rounded up to a multiple of 32) and
// its most splits (default 32, at most 64).
inline bool env_cuda_attn_gqa() { return env_detail::env_flag("TL_CUDA_ATTN_GQA", true); }
inline int64_t env_cuda_attn_gqa_chunk() {
  return (env_detail::env_int("TL_CUDA_ATTN_GQA_CHUNK", 32, 32, 65536) + 31) / 32 * 32;
}
inline int64_t env_cuda_attn_gqa_splits() { return env_detail::env_int("TL_CUDA_ATTN_GQA_SPLITS", 32, 1, 64); }
// Prefill attention's query rows per block (attention.cu): 0 (default) chosen per prompt from its
// rows and heads; 1..64 rounded down to 16, 32 or 64 (at least 16).
inline int env_cuda_attn_tile_rows() {
  const int64_t v = env_detail::env_int("TL_CUDA_ATTN_TILE_ROWS", 0, 0, 64);
  return v == 0 ? 0 : v >= 64 ? 64 : v >= 32 ? 32 : 16;
}
// Programmatic dependent launches of the decode kernels on sm_90+ (default on; 0: every kernel
// waits for the one before it to finish before it is scheduled) and, with them, the L2 prefetch of a
// kernel's weights (and attention's keys and values) before it waits (default on).
inline bool env_cuda_pdl() { return env_detail::env_flag("TL_CUDA_PDL", true); }
inline bool env_cuda_l2_prefetch() { return env_detail::env_flag("TL_CUDA_L2_PREFETCH", true); }
inline const char* env_cuda_device() {  // nullptr when unset; the CUDA backend parses it
  const char* v = std::getenv("TL_CUDA_DEVICE");
  return (v && *v) ? v : nullptr;
}

inline void DebugConfig::load_env() {
  using env_detail::env_flag;
  using env_detail::env_int;
  DebugConfig& c = *this;
  c.poison = env_flag("TL_DEBUG_POISON");
  c.delay_us = static_cast<uint32_t>(env_int("TL_DEBUG_DELAY_US", 0, 0, 1000000));
  c.no_cache = env_flag("TL_NO_CACHE");
  c.trace = env_flag("TL_DEBUG_MEMORY");
  c.ops_per_command_buffer = static_cast<int>(env_int("TL_OPS_PER_COMMAND_BUFFER", 64, 1, 1000000));
  c.q8_activations = env_flag("TL_Q8_ACTIVATIONS");
  c.q8_rows = 1;
}

}  // namespace tl
