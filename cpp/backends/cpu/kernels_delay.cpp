// delay (TL_DEBUG_DELAY_US): the worker sleeps before the next kernel.
#include <chrono>
#include <thread>

#include "cpu_kernels_impl.h"

namespace tl::cpu {

void CpuKernels::delay(uint32_t us) {
  if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
}

}  // namespace tl::cpu
