#pragma once
// The CPU backend: device memory is 64-byte-aligned host memory; one worker thread runs submitted
// command buffers strictly in submission order (R4 holds trivially: commands run one after the
// other) and calls each completion function exactly once, after the last command of its command
// buffer. A command that throws ends its command buffer: the rest is skipped and the first error
// message is passed to the completion function. It is truly asynchronous (docs/runtime.md): submit()
// returns before any command runs.
#include <memory>

#include "runtime/backend.h"

namespace tl {

// Defined in cpu_backend.cpp; `kernels` is owned by the backend. Tests pass their own kernels.
std::unique_ptr<Backend> make_cpu_backend_with(std::unique_ptr<Kernels> kernels);

}  // namespace tl
