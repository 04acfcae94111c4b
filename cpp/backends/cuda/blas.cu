// cuBLAS loaded with dlopen (see blas.h for why): the library is opened once per process, each
// backend creates its own handle bound to its stream. Row-major products are expressed through
// cuBLAS's column-major GEMM as out^T = b^T a^T.
#include "blas.h"

#include <dlfcn.h>
#include <library_types.h>

#include <climits>
#include <cstdlib>
#include <mutex>
#include <string>

namespace tl {
namespace cuda {
namespace {

// The cuBLAS ABI pieces used here (cublas_api.h; values stable since CUDA 11).
using Status = int;  // cublasStatus_t; 0 is CUBLAS_STATUS_SUCCESS
constexpr int kOpN = 0;              // CUBLAS_OP_N
constexpr int kOpT = 1;              // CUBLAS_OP_T
constexpr int kCompute32F = 68;      // CUBLAS_COMPUTE_32F
constexpr int kCompute32FTF32 = 77;  // CUBLAS_COMPUTE_32F_FAST_TF32
constexpr int kGemmDefault = -1;     // CUBLAS_GEMM_DEFAULT

using CreateFn = Status (*)(void** handle);
using DestroyFn = Status (*)(void* handle);
using SetStreamFn = Status (*)(void* handle, cudaStream_t stream);
using GemmStridedBatchedExFn = Status (*)(void* handle, int transa, int transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long strideA, const void* B,
                                          cudaDataType Btype, int ldb, long long strideB,
                                          const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount, int computeType,
                                          int algo);

struct Library {
  CreateFn create = nullptr;
  DestroyFn destroy = nullptr;
  SetStreamFn set_stream = nullptr;
  GemmStridedBatchedExFn gemm = nullptr;
  std::string description;  // "libcublas.so.13" or why it is missing
  bool loaded = false;
};

// TL_CUBLAS_PATH first (a file), then the sonames the loader finds (LD_LIBRARY_PATH, ld.so.conf,
// a library already loaded into the process, e.g. by PyTorch), then the usual toolkit folders.
const Library& library() {
  static Library lib;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string tried;
    std::string candidates[16];
    int n = 0;
    if (const char* p = std::getenv("TL_CUBLAS_PATH"); p != nullptr && *p) candidates[n++] = p;
    for (const char* so : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) candidates[n++] = so;
    for (const char* dir : {"/usr/local/cuda/lib64/", "/usr/local/cuda/targets/x86_64-linux/lib/"}) {
      for (const char* so : {"libcublas.so.13", "libcublas.so.12"}) candidates[n++] = std::string(dir) + so;
    }
    void* h = nullptr;
    for (int i = 0; i < n && h == nullptr; ++i) {
      h = dlopen(candidates[i].c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h != nullptr) lib.description = candidates[i];
    }
    if (h == nullptr) {
      lib.description = "cuBLAS not found (libcublas.so.13 or .12; set TL_CUBLAS_PATH)";
      return;
    }
    lib.create = reinterpret_cast<CreateFn>(dlsym(h, "cublasCreate_v2"));
    lib.destroy = reinterpret_cast<DestroyFn>(dlsym(h, "cublasDestroy_v2"));
    lib.set_stream = reinterpret_cast<SetStreamFn>(dlsym(h, "cublasSetStream_v2"));
    lib.gemm = reinterpret_cast<GemmStridedBatchedExFn>(dlsym(h, "cublasGemmStridedBatchedEx"));
    if (!lib.create || !lib.destroy || !lib.set_stream || !lib.gemm) {
      lib.description += " lacks the cuBLAS entry points TL uses";
      return;  // the library stays open: unloading a CUDA library mid-process is not worth it
    }
    lib.loaded = true;
  });
  return lib;
}

bool data_type(DType t, cudaDataType* out) {
  switch (t) {
    case DType::F32: *out = CUDA_R_32F; return true;
    case DType::F16: *out = CUDA_R_16F; return true;
    case DType::BF16: *out = CUDA_R_16BF; return true;
    default: return false;
  }
}

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

// The column-major operand whose op() is the transpose of the row-major [rows, cols] matrix
// with strides (rs, cs): unit column stride reads it as a column-major [cols, rows] matrix with
// leading dimension rs (op N); unit row stride as a column-major [rows, cols] one with leading
// dimension cs (op T). A dimension of extent 1 accepts any stride. False: no such layout.
bool transposed_operand(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int* op, int64_t* ld) {
  if (cols == 1) cs = 1;
  if (rows == 1) rs = cols > 1 ? cols : 1;
  if (cs == 1 && rs >= (cols > 1 ? cols : 1)) {
    *op = kOpN;
    *ld = rs;
    return true;
  }
  if (rows == 1) rs = 1;
  if (rs == 1 && cs >= (rows > 1 ? rows : 1)) {
    *op = kOpT;
    *ld = cs;
    return true;
  }
  return false;
}

}  // namespace

Blas::Blas(cudaStream_t stream, bool tf32) : tf32_(tf32) {
  const Library& lib = library();
  if (!lib.loaded) return;
  void* h = nullptr;
  if (lib.create(&h) != 0 || h == nullptr) return;
  if (lib.set_stream(h, stream) != 0) {
    lib.destroy(h);
    return;
  }
  handle_ = h;
}

Blas::~Blas() {
  if (handle_ != nullptr) library().destroy(handle_);
}

const std::string& Blas::description() const { return library().description; }

bool Blas::gemm(const GemmOperand& a, const GemmOperand& b, void* out, DType out_dtype,
                int64_t batch, int64_t M, int64_t N, int64_t K, int64_t ldc) {
  if (handle_ == nullptr || a.dtype != b.dtype) return false;
  cudaDataType in_type, out_type;
  if (!data_type(a.dtype, &in_type) || !data_type(out_dtype, &out_type)) return false;
  // cuBLAS pairs f32 inputs with an f32 output only; f16/bf16 inputs with their own type or f32.
  if (a.dtype == DType::F32 && out_dtype != DType::F32) return false;
  if (a.dtype != DType::F32 && out_dtype != DType::F32 && out_dtype != a.dtype) return false;
  if (!fits_int(M) || !fits_int(N) || !fits_int(K) || !fits_int(batch) || !fits_int(ldc) ||
      batch == 0 || M == 0 || N == 0 || K == 0 ||
      (batch > 1 && (a.batch_stride < 0 || b.batch_stride < 0))) {
    return false;
  }
  // Column-major: C (N x M, ld ldc) = op(A) (N x K) op(B) (K x M), with op(A) = b^T, op(B) = a^T.
  int op_a, op_b;
  int64_t lda, ldb;
  if (!transposed_operand(K, N, b.row_stride, b.col_stride, &op_a, &lda) ||
      !transposed_operand(M, K, a.row_stride, a.col_stride, &op_b, &ldb) || !fits_int(lda) ||
      !fits_int(ldb)) {
    return false;
  }
  const long long stride_a = batch > 1 ? b.batch_stride : 0;
  const long long stride_b = batch > 1 ? a.batch_stride : 0;
  const long long stride_c = M * ldc;
  const float alpha = 1.0f, beta = 0.0f;
  const int compute = (a.dtype == DType::F32 && tf32_) ? kCompute32FTF32 : kCompute32F;
  const Status st = library().gemm(
      handle_, op_a, op_b, static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &alpha,
      b.data, in_type, static_cast<int>(lda), stride_a, a.data, in_type, static_cast<int>(ldb),
      stride_b, &beta, out, out_type, static_cast<int>(ldc), stride_c, static_cast<int>(batch),
      compute, kGemmDefault);
  if (st != 0) {
    throw KernelError("cuda: cuBLAS matrix product failed (status " + std::to_string(st) + ")");
  }
  return true;
}

}  // namespace cuda
}  // namespace tl
