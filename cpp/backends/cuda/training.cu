// Training kernels: scatter_add_rows (the gradient of embedding / index_select rows) and
// optimizer_update (one fused Adam, AdamW or SGD step in place).
// Invariants: scatter_add_rows gives each thread one output column and walks the ids in order,
// so repeated ids add up in the same order on every run (deterministic, no atomics; the price is
// parallelism bounded by the row width D). optimizer_update uses round-to-nearest intrinsics
// (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn) so nothing is contracted into an FMA: it
// computes the CPU kernel's f32 expressions, rounding for rounding.
#include "cuda_common.cuh"
#include "cuda_kernels.h"

namespace tl {
namespace cuda {
namespace {

constexpr int kThreads = 256;

__global__ void scatter_add_rows_kernel(const void* ids, DType ids_dtype, int64_t n, const float* src,
                                        float* out, int64_t V, int64_t D, DeviceErrorSlot* slot) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < D;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = load_int(ids, ids_dtype, i);
      if (id < 0 || id >= V) {
        if (c == 0 && slot != nullptr && atomicCAS(&slot->code, 0, kErrorScatterIdOutOfRange) == 0) {
          slot->value = id;
          slot->limit = V;
          slot->position = i;  // the first bad id in order: only column 0 reports, walking i upwards
          slot->count = n;
          slot->width = D;
        }
        continue;
      }
      out[id * D + c] = __fadd_rn(out[id * D + c], src[i * D + c]);
    }
  }
}

__global__ void adam_kernel(OptimizerStep s, int64_t n, float* p, const float* g, float* m, float* v) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float w = p[i], gi = g[i];
    if (s.decoupled) {
      w = __fmul_rn(w, s.decay);
    } else if (s.weight_decay != 0.0f) {
      gi = __fadd_rn(gi, __fmul_rn(w, s.weight_decay));
    }
    const float mi = __fadd_rn(__fmul_rn(m[i], s.beta1), __fmul_rn(gi, s.one_minus_beta1));
    const float vi = __fadd_rn(__fmul_rn(v[i], s.beta2), __fmul_rn(__fmul_rn(gi, gi), s.one_minus_beta2));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fsqrt_rn(__fdiv_rn(vi, s.bias2)), s.eps);
    p[i] = __fsub_rn(w, __fmul_rn(__fdiv_rn(mi, denom), s.step));
  }
}

__global__ void sgd_kernel(OptimizerStep s, int64_t n, float* p, const float* g, float* buf) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float w = p[i];
    float gi = g[i];
    if (s.weight_decay != 0.0f) gi = __fadd_rn(gi, __fmul_rn(w, s.weight_decay));
    if (buf != nullptr) {
      const float b = __fadd_rn(__fmul_rn(buf[i], s.momentum), gi);
      buf[i] = b;
      gi = s.nesterov ? __fadd_rn(gi, __fmul_rn(b, s.momentum)) : b;
    }
    p[i] = __fsub_rn(w, __fmul_rn(gi, s.step));
  }
}

void require_f32_contiguous(const View& v, const char* op) {
  if (v.dtype != DType::F32 || !v.is_contiguous())
    throw KernelError(std::string(op) + ": cuda kernel expects contiguous f32 operands");
}

}  // namespace

void CudaKernels::scatter_add_rows(const View& ids, const View& src, const View& out) {
  if (ids.dtype != DType::I32 && ids.dtype != DType::I64)
    throw KernelError("scatter_add_rows: ids must be i32 or i64");
  require_f32_contiguous(src, "scatter_add_rows");
  require_f32_contiguous(out, "scatter_add_rows");
  if (out.ndim != 2 || src.ndim != 2 || src.shape[1] != out.shape[1] || src.shape[0] != ids.numel())
    throw KernelError("scatter_add_rows: expected out [V, D], src [n, D] and ids [n]");
  const int64_t V = out.shape[0], D = out.shape[1], n = ids.numel();
  if (n == 0 || D == 0) return;
  DeviceErrorSlot* slot = error_slot_ ? error_slot_() : nullptr;
  scatter_add_rows_kernel<<<grid_for(D, kThreads), kThreads, 0, stream_>>>(
      ids.data, ids.dtype, n, static_cast<const float*>(src.data), static_cast<float*>(out.data), V, D, slot);
  check_launch("scatter_add_rows");
}

void CudaKernels::optimizer_update(const OptimizerStep& s, const View& param, const View& grad,
                                   const View& m, const View& v) {
  for (const View* t : {&param, &grad, &m, &v}) {
    if (!t->data) continue;
    require_f32_contiguous(*t, "optimizer_update");
    if (t->numel() != param.numel()) throw KernelError("optimizer_update: operands differ in size");
  }
  const int64_t n = param.numel();
  if (n == 0) return;
  float* p = static_cast<float*>(param.data);
  const float* g = static_cast<const float*>(grad.data);
  if (s.kind == OptimizerKind::Adam) {
    if (!m.data || !v.data) throw KernelError("optimizer_update: Adam needs m and v");
    adam_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_>>>(s, n, p, g, static_cast<float*>(m.data),
                                                                  static_cast<float*>(v.data));
  } else {
    sgd_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_>>>(s, n, p, g, static_cast<float*>(m.data));
  }
  check_launch("optimizer_update");
}

}  // namespace cuda
}  // namespace tl
