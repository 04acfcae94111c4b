// make_cpu_kernels(): the CPU backend's Kernels object (its methods live in kernels_<family>*.cpp).
#include "cpu_kernels_impl.h"

namespace tl {

std::unique_ptr<Kernels> make_cpu_kernels(int threads) {
  return std::make_unique<cpu::CpuKernels>(threads);
}

}  // namespace tl
