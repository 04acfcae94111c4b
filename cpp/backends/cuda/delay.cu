// Debug delay injection (TL_DEBUG_DELAY_US): a one-thread kernel that spins on the GPU's
// global nanosecond timer, so the delay sits on the device timeline between two kernels and
// widens every race window there, exactly as the CPU backend's sleep does in its worker.
#include "cuda_common.cuh"
#include "cuda_kernels.h"

namespace tl {
namespace cuda {
namespace {

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(uint64_t ns) {
  const uint64_t start = global_ns();
  while (global_ns() - start < ns) {
    __nanosleep(1000);
  }
}

}  // namespace

cudaError_t probe_kernel_image() {
  cudaFuncAttributes attributes{};
  return cudaFuncGetAttributes(&attributes, spin_kernel);
}

void CudaKernels::delay(uint32_t us) {
  if (us == 0) return;
  spin_kernel<<<1, 1, 0, stream_>>>(static_cast<uint64_t>(us) * 1000u);
  check_launch("delay");
}

}  // namespace cuda
}  // namespace tl
