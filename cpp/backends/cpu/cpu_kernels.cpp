// make_cpu_kernels() and the kernels that belong to no family (delay injection).
#include <chrono>
#include <thread>

#include "cpu_kernels_impl.h"

namespace tl {

std::unique_ptr<Kernels> make_cpu_kernels(int threads) {
  return std::make_unique<cpu::CpuKernels>(threads);
}

namespace cpu {

void CpuKernels::delay(uint32_t us) {
  if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
}

}  // namespace cpu
}  // namespace tl
