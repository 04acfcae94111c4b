#pragma once
// Device-side helpers shared by every CUDA kernel file: element loads/stores that convert any
// plain dtype to and from f32 (or int64), the strided layout passed to kernels by value, and the
// launch check that turns a failed launch into a KernelError. Invariant: every index is int64
// and every launch is followed by check_launch(), so a bad launch is never silent.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "runtime/kernels.h"

namespace tl {
namespace cuda {

// Shape and element strides of one operand, small enough to pass to a kernel by value.
struct Layout {
  int ndim;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxDims];
};

// dtype predicates usable in `if constexpr` and device code (dtype.h's are host inline).
__host__ __device__ constexpr bool quantized_dtype(DType t) { return t >= DType::Q4_0; }

inline Layout layout_of(const View& v) {
  Layout l{};
  l.ndim = v.ndim;
  for (int i = 0; i < v.ndim; ++i) {
    l.shape[i] = v.shape[i];
    l.strides[i] = v.strides[i];
  }
  return l;
}

// Element offset of the row-major linear index `i` under `l`.
__device__ __forceinline__ int64_t strided_offset(const Layout& l, int64_t i) {
  int64_t off = 0;
  for (int d = l.ndim - 1; d >= 0; --d) {
    const int64_t extent = l.shape[d];
    const int64_t q = i / extent;
    off += (i - q * extent) * l.strides[d];
    i = q;
  }
  return off;
}

__device__ __forceinline__ float bf16_bits_to_float(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

__device__ __forceinline__ float half_bits_to_float(uint16_t bits) {
  return __half2float(__ushort_as_half(bits));
}

__device__ __forceinline__ float load_float(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F16: return __half2float(static_cast<const __half*>(p)[i]);
    case DType::BF16: return bf16_bits_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::I32: return static_cast<float>(static_cast<const int32_t*>(p)[i]);
    case DType::I64: return static_cast<float>(static_cast<const int64_t*>(p)[i]);
    case DType::Bool: return static_cast<const uint8_t*>(p)[i] != 0 ? 1.0f : 0.0f;
    default: return 0.0f;
  }
}

__device__ __forceinline__ int64_t float_to_int64(float f) {
  // Truncation toward zero, saturating at the int64 range; NaN -> 0 as on the CPU backend
  // (the hardware conversion alone gives INT64_MIN for NaN).
  return f != f ? 0 : __float2ll_rz(f);
}

__device__ __forceinline__ int64_t load_int(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return float_to_int64(static_cast<const float*>(p)[i]);
    case DType::F16: return float_to_int64(__half2float(static_cast<const __half*>(p)[i]));
    case DType::BF16: return float_to_int64(bf16_bits_to_float(static_cast<const uint16_t*>(p)[i]));
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::I64: return static_cast<const int64_t*>(p)[i];
    case DType::Bool: return static_cast<const uint8_t*>(p)[i] != 0 ? 1 : 0;
    default: return 0;
  }
}

__device__ __forceinline__ bool load_truth(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i] != 0.0f;
    case DType::F16: return __half2float(static_cast<const __half*>(p)[i]) != 0.0f;
    case DType::BF16: return bf16_bits_to_float(static_cast<const uint16_t*>(p)[i]) != 0.0f;
    case DType::I32: return static_cast<const int32_t*>(p)[i] != 0;
    case DType::I64: return static_cast<const int64_t*>(p)[i] != 0;
    case DType::Bool: return static_cast<const uint8_t*>(p)[i] != 0;
    default: return false;
  }
}

__device__ __forceinline__ void store_float(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = v; break;
    case DType::F16: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    case DType::BF16: static_cast<uint16_t*>(p)[i] = float_to_bf16_bits(v); break;
    case DType::I32: static_cast<int32_t*>(p)[i] = v != v ? 0 : __float2int_rz(v); break;  // saturates
    case DType::I64: static_cast<int64_t*>(p)[i] = float_to_int64(v); break;
    case DType::Bool: static_cast<uint8_t*>(p)[i] = v != 0.0f ? 1 : 0; break;
    default: break;
  }
}

__device__ __forceinline__ void store_int(void* p, DType t, int64_t i, int64_t v) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::F16: static_cast<__half*>(p)[i] = __float2half_rn(static_cast<float>(v)); break;
    case DType::BF16: static_cast<uint16_t*>(p)[i] = float_to_bf16_bits(static_cast<float>(v)); break;
    case DType::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::I64: static_cast<int64_t*>(p)[i] = v; break;
    case DType::Bool: static_cast<uint8_t*>(p)[i] = v != 0 ? 1 : 0; break;
    default: break;
  }
}

// e^x rounded once from double: the correctly rounded f32 result in practice, as glibc's expf
// gives on the CPU backend (CUDA's expf may be 1-2 ulp away, visible in printed results).
__device__ __forceinline__ float exp_rounded(float x) {
  return static_cast<float>(exp(static_cast<double>(x)));
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
// `scratch` holds 32 floats of shared memory; the call ends with the block synchronized.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = lane < warps ? scratch[lane] : 0.0f;
  total = warp_sum(total);
  return total;
}

__device__ __forceinline__ double warp_sum_double(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// block_sum in double, for the sums the CPU backend also keeps in double (reductions, softmax
// denominators, layer_norm statistics), so both backends round the same way far more often.
__device__ __forceinline__ double block_sum_double(double v, double* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = warp_sum_double(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double total = lane < warps ? scratch[lane] : 0.0;
  return warp_sum_double(total);
}

// Grid size for a grid-stride loop over n elements with `threads` threads per block.
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  const int64_t cap = 65536;  // grid-stride loops cover the rest
  return static_cast<unsigned>(blocks < cap ? blocks : cap);
}

// RoPE's inverse frequencies base^(-2i/D) for i < D/2, computed on the host with std::pow exactly
// as the CPU backend does (kernels_norm_rope.cpp) and passed by value: a kernel parameter needs no
// device memory and stays fixed in a replay graph (whose base and D do not change). Each pair then
// costs one double multiply and sincos, not the device's pow besides. n = 0 when D/2 exceeds
// kMaxRopePairs or with `device_pow` (TL_CUDA_ROPE_DEVICE_POW): the kernel computes them with the
// device's pow.
constexpr int kMaxRopePairs = 256;
struct RopeFreqs {
  double inv[kMaxRopePairs];
  int n;
};

inline RopeFreqs rope_freqs(double base, int64_t D, bool device_pow) {
  // The last launch's table, per launch thread: a model's every layer asks for the same one.
  thread_local RopeFreqs f{};
  thread_local double last_base = 0.0;
  thread_local int64_t last_D = -1;
  thread_local bool last_device_pow = false;
  if (base == last_base && D == last_D && device_pow == last_device_pow) return f;
  last_base = base;
  last_D = D;
  last_device_pow = device_pow;
  const int64_t half = D / 2;
  f.n = half <= kMaxRopePairs && !device_pow ? static_cast<int>(half) : 0;
  for (int i = 0; i < f.n; ++i) {
    f.inv[i] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(D));
  }
  return f;
}

// The block's copy of the frequencies in shared memory (read at a different index by every lane:
// from the parameter space that would serialise); every thread of the block must call it.
__device__ __forceinline__ void stage_rope_freqs(const RopeFreqs& f, double* s_inv) {
  for (int i = threadIdx.x; i < f.n; i += blockDim.x) s_inv[i] = f.inv[i];
  __syncthreads();
}

__device__ __forceinline__ double rope_inv_freq(const RopeFreqs& f, const double* s_inv, double base,
                                                int64_t i, int64_t D) {
  return i < f.n ? s_inv[i] : pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(D));
}

// Device operations (kernel launches and stream copies) issued by the kernels, for the
// TL_CUDA_LAUNCH_STATS report the backend prints when it is destroyed.
inline std::atomic<uint64_t> g_device_ops{0};

// Programmatic dependent launch (compute capability 9.0+; CudaTuning::pdl): a kernel launched by
// launch_kernel with `pdl` may start while the kernel before it in the stream still runs. Such a
// kernel must call pdl_wait() in every block before it reads or writes anything an earlier kernel
// could touch (its inputs, outputs, scratch, error slots; only L2 prefetches of data it will read
// may come first: the L2 is the device's point of coherence, so a prefetch never returns stale
// data), and then pdl_launch_dependents(), which lets the next kernel be scheduled. The wait returns
// once the kernel before has completed and its writes are visible; that kernel waited for its own
// predecessor before it touched anything, so the stream's order holds transitively. Both are
// no-ops in a kernel launched without the attribute, and below sm_90.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Asks the L2 to fetch the 128-byte lines of [p, p + bytes), the calling thread taking lines
// first, first + stride, ...; a hint: nothing is read into the SM.
__device__ __forceinline__ void prefetch_l2_lines(const void* p, int64_t bytes, unsigned first, unsigned stride) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(p) & ~static_cast<uintptr_t>(127);
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes);
  for (uintptr_t a = start + 128 * static_cast<uintptr_t>(first); a < end; a += 128 * static_cast<uintptr_t>(stride)) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
  }
}

// prefetch_l2_lines spread over the block's threads.
__device__ __forceinline__ void prefetch_l2(const void* p, int64_t bytes) {
  prefetch_l2_lines(p, bytes, threadIdx.x, blockDim.x);
}

// 16 bytes global -> shared without passing through registers (cp.async, sm_80+; before, a plain
// copy); `valid` false: the 16 bytes are zero-filled (gmem must still be a valid address).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid = true) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(bytes) : "memory");
#else
  *static_cast<uint4*>(smem) = valid ? *static_cast<const uint4*>(gmem) : make_uint4(0, 0, 0, 0);
#endif
}

// Closes this thread's group of cp_async16 copies.
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

// Waits until at most kPending of this thread's committed copy groups are still in flight (their
// data is then visible to other threads after a barrier).
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
#endif
}

// Lets `kernel` take `bytes` of dynamic shared memory (above the default 48 KiB); false, the error
// cleared, where the device allows less.
template <typename Kernel>
bool allow_dynamic_shared(Kernel kernel, size_t bytes) {
  const cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (err != cudaSuccess) (void)cudaGetLastError();
  return err == cudaSuccess;
}

// kernel<<<grid, block, shared, stream>>>(args...), as a programmatic dependent launch when `pdl`
// (the kernel then keeps pdl_wait's contract above). Followed by check_launch, as every launch.
template <typename... Params, typename... Args>
void launch_kernel(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                   cudaStream_t stream, Args&&... args) {
  if (!pdl) {
    kernel<<<grid, block, shared, stream>>>(std::forward<Args>(args)...);
    return;
  }
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = 1;
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);  // its error: check_launch's
}

// Throws KernelError naming `what` if the last launch failed.
inline void check_launch(const char* what) {
  g_device_ops.fetch_add(1, std::memory_order_relaxed);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw KernelError(std::string("cuda: ") + what + ": " + cudaGetErrorString(err));
  }
}

}  // namespace cuda
}  // namespace tl
