// Row normalizations (rms_norm, layer_norm: one block per row, statistics summed in double as
// on the CPU backend) and rotary position
// embedding (one thread per rotated pair; reads both elements before writing either, so it is
// safe in place). RoPE angles are computed in double so that long positions keep their
// precision: theta_i = pos * base^(-2i/D).
#include "cuda_common.cuh"
#include "cuda_kernels.h"

namespace tl {
namespace cuda {
namespace {

constexpr int kNormThreads = 256;
constexpr int kRopeThreads = 256;

__global__ void rms_norm_kernel(const void* x, DType x_dtype, const void* w, DType w_dtype,
                                float eps, int64_t rows, int64_t D, void* out, DType out_dtype) {
  pdl_wait();  // launched as a programmatic dependent launch (cuda_common.cuh)
  pdl_launch_dependents();
  __shared__ double scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * D;
    double ss = 0.0;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      const float v = load_float(x, x_dtype, base + d);
      ss += static_cast<double>(v * v);
    }
    const double total = block_sum_double(ss, scratch);
    const float inv = static_cast<float>(1.0 / sqrt(total / static_cast<double>(D) + eps));
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      float v = load_float(x, x_dtype, base + d) * inv;
      if (w != nullptr) v *= load_float(w, w_dtype, d);
      store_float(out, out_dtype, base + d, v);
    }
  }
}

__global__ void layer_norm_kernel(const void* x, DType x_dtype, const void* w, DType w_dtype,
                                  const void* b, DType b_dtype, float eps, int64_t rows,
                                  int64_t D, void* out, DType out_dtype) {
  __shared__ double scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * D;
    double s = 0.0;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) s += load_float(x, x_dtype, base + d);
    const float mean = static_cast<float>(block_sum_double(s, scratch) / static_cast<double>(D));
    double sq = 0.0;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      const double c = static_cast<double>(load_float(x, x_dtype, base + d)) - mean;
      sq += c * c;
    }
    const double var = block_sum_double(sq, scratch) / static_cast<double>(D);
    const float inv = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      float v = (load_float(x, x_dtype, base + d) - mean) * inv;
      if (w != nullptr) v *= load_float(w, w_dtype, d);
      if (b != nullptr) v += load_float(b, b_dtype, d);
      store_float(out, out_dtype, base + d, v);
    }
  }
}

__global__ void rope_kernel(const void* x, DType x_dtype, void* out, DType out_dtype,
                            int64_t outer, int64_t S, int64_t H, int64_t D, int64_t pos_offset,
                            double base, bool neox, const int64_t* dyn, const RopeFreqs freqs) {
  pdl_wait();  // launched as a programmatic dependent launch (cuda_common.cuh)
  pdl_launch_dependents();
  __shared__ double s_inv[kMaxRopePairs];
  stage_rope_freqs(freqs, s_inv);
  if (dyn != nullptr) pos_offset = dyn[0];  // a replay graph's position
  const int64_t half = D / 2;
  const int64_t total = outer * S * H * half;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = t % half;
    const int64_t row = t / half;  // (outer, s, h) flattened
    const int64_t s = (row / H) % S;
    const double pos = static_cast<double>(pos_offset + s);
    const double theta = pos * rope_inv_freq(freqs, s_inv, base, i, D);
    double sn, cs;
    sincos(theta, &sn, &cs);
    const int64_t i0 = row * D + (neox ? i : 2 * i);
    const int64_t i1 = row * D + (neox ? i + half : 2 * i + 1);
    const float x0 = load_float(x, x_dtype, i0);
    const float x1 = load_float(x, x_dtype, i1);
    const float c = static_cast<float>(cs), sv = static_cast<float>(sn);
    store_float(out, out_dtype, i0, x0 * c - x1 * sv);
    store_float(out, out_dtype, i1, x0 * sv + x1 * c);
  }
}

unsigned row_grid(int64_t rows) { return static_cast<unsigned>(rows < 65535 ? rows : 65535); }

void require_float(const View& v, const char* op) {
  if (v.data != nullptr && !is_floating(v.dtype)) {
    throw KernelError(std::string(op) + ": expects floating operands, got " +
                      dtype_name(v.dtype));
  }
}

}  // namespace

void CudaKernels::rms_norm(const View& x, const View& w, float eps, const View& out) {
  require_float(x, "rms_norm");
  require_float(w, "rms_norm");
  require_float(out, "rms_norm");
  const int64_t D = x.shape[x.ndim - 1];
  const int64_t rows = D == 0 ? 0 : x.numel() / D;
  if (rows == 0) return;
  launch_kernel(tuning_.pdl, rms_norm_kernel, dim3(row_grid(rows)), dim3(kNormThreads), 0, stream_, 
      x.data, x.dtype, w.data, w.dtype, eps, rows, D, out.data, out.dtype);
  check_launch("rms_norm");
}

void CudaKernels::layer_norm(const View& x, const View& w, const View& b, float eps,
                             const View& out) {
  require_float(x, "layer_norm");
  require_float(w, "layer_norm");
  require_float(b, "layer_norm");
  require_float(out, "layer_norm");
  const int64_t D = x.shape[x.ndim - 1];
  const int64_t rows = D == 0 ? 0 : x.numel() / D;
  if (rows == 0) return;
  layer_norm_kernel<<<row_grid(rows), kNormThreads, 0, stream_>>>(
      x.data, x.dtype, w.data, w.dtype, b.data, b.dtype, eps, rows, D, out.data, out.dtype);
  check_launch("layer_norm");
}

void CudaKernels::rope(const View& x, int64_t pos_offset, float base, bool neox,
                       const View& out) {
  require_float(x, "rope");
  require_float(out, "rope");
  if (x.ndim != 4) throw KernelError("rope: cuda kernel expects a 4-D [outer, S, H, D] view");
  const int64_t outer = x.shape[0], S = x.shape[1], H = x.shape[2], D = x.shape[3];
  if (D % 2 != 0) throw KernelError("rope: head dim must be even, got " + std::to_string(D));
  const int64_t total = outer * S * H * (D / 2);
  if (total == 0) return;
  const DynArgs dyn = dyn_args({pos_offset}, {});
  if (!dyn.launch) return;
  launch_kernel(tuning_.pdl, rope_kernel, dim3(grid_for(total, kRopeThreads)), dim3(kRopeThreads), 0, stream_, 
      x.data, x.dtype, out.data, out.dtype, outer, S, H, D, pos_offset, static_cast<double>(base),
      neox, dyn.device, rope_freqs(static_cast<double>(base), D, tuning_.rope_device_pow));
  check_launch("rope");
}

}  // namespace cuda
}  // namespace tl
