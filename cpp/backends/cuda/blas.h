#pragma once
// cuBLAS for the CUDA backend's matrix products, loaded at run time with dlopen.
// Invariant: nothing here is linked against libcublas, so `_core` imports and the CUDA backend
// runs on a machine without it (the products then use TL's own kernels, and the backend says so
// once on stderr); every call below runs on the backend's launch thread, on its one stream.
// Why dlopen rather than linking CUDA::cublas: a wheel built with CUDA must still import where
// only the driver is installed, and CI compiles this path with no cuBLAS download (its CUDA
// toolkit has the compiler and runtime only). The few entry points and enum values used are
// declared here; they are part of cuBLAS's stable C ABI (cublas_api.h, CUDA 11 and later).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "runtime/kernels.h"

namespace tl {
namespace cuda {

// A row-major matrix operand [rows, cols] read through element strides, with a batch stride.
struct GemmOperand {
  const void* data;
  DType dtype;
  int64_t batch_stride, row_stride, col_stride;
};

class Blas {
 public:
  // Loads the library (once per process). `tf32`: f32 products may round their inputs to TF32
  // on the tensor cores (TL_CUDA_TF32=1, like torch.backends.cuda.matmul.allow_tf32).
  Blas(cudaStream_t stream, bool tf32);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // False when cuBLAS could not be loaded or its handle not created (then the kernels fall back).
  bool available() const { return handle_ != nullptr; }
  // Where the library was found, or why not (for the one stderr line).
  const std::string& description() const;

  // out[b] = a[b] @ b[b] for b < batch: a [M, K], b [K, N], out [M, N] contiguous (batch stride
  // M*N) of dtype out_dtype. Returns false without doing anything when cuBLAS cannot express it
  // (strides that are not a matrix layout, mixed input dtypes, sizes beyond int32, an output
  // dtype cuBLAS does not pair with the inputs); the caller then uses its own kernel.
  // f16/bf16 inputs run on the tensor cores with f32 sums; f32 inputs as f32 (TF32 if enabled).
  bool gemm(const GemmOperand& a, const GemmOperand& b, void* out, DType out_dtype, int64_t batch,
            int64_t M, int64_t N, int64_t K, int64_t ldc);

 private:
  void* handle_ = nullptr;
  bool tf32_ = false;
};

}  // namespace cuda
}  // namespace tl
