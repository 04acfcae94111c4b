// Batched matmul out[b] = a[b] @ b[b] for strided 3-D views (batch stride 0 broadcasts).
// Every product runs as C = A . B^T with both operands K-contiguous: operands that already
// are (f32 a with unit K stride; a "transposed" f32 b, i.e. unit K stride) are used in place,
// others are packed into per-thread f32 buffers first. out is f32 or f16, contiguous.
#include <algorithm>
#include <vector>

#include "cpu_kernels_impl.h"

namespace tl::cpu {
namespace {

// Returns A's batch `bi` as K-contiguous f32 rows, packing into `buf` when needed.
const float* a_rows(const View& a, int64_t bi, std::vector<float>& buf, int64_t* lda) {
  const int64_t M = a.shape[1], K = a.shape[2];
  const char* base = element_ptr(a, bi * a.strides[0]);
  if (a.dtype == DType::F32 && (a.strides[2] == 1 || K == 1)) {
    *lda = a.strides[1];
    return reinterpret_cast<const float*>(base);
  }
  buf.resize(static_cast<size_t>(M * K));
  for (int64_t m = 0; m < M; ++m)
    load_f32(a.dtype, base + m * a.strides[1] * block_bytes(a.dtype), a.strides[2], K, buf.data() + m * K);
  *lda = K;
  return buf.data();
}

// Returns B's batch `bi` transposed ([N, K], K-contiguous), packing into `buf` when needed.
const float* b_cols(const View& b, int64_t bi, std::vector<float>& buf, int64_t* ldb) {
  const int64_t K = b.shape[1], N = b.shape[2];
  const char* base = element_ptr(b, bi * b.strides[0]);
  if (b.dtype == DType::F32 && (b.strides[1] == 1 || K == 1)) {
    *ldb = b.strides[2];
    return reinterpret_cast<const float*>(base);
  }
  buf.resize(static_cast<size_t>(N * K));
  for (int64_t n = 0; n < N; ++n)
    load_f32(b.dtype, base + n * b.strides[2] * block_bytes(b.dtype), b.strides[1], K, buf.data() + n * K);
  *ldb = K;
  return buf.data();
}

constexpr int64_t kTileCols = 32;

}  // namespace

void CpuKernels::matmul(const View& a, const View& b, const View& out) {
  require_plain("matmul", a);
  require_plain("matmul", b);
  require_float("matmul", out);
  require_contiguous("matmul", out);
  if (a.ndim != 3 || b.ndim != 3 || out.ndim != 3) kernel_fail("matmul: expected 3-D views");
  const int64_t B = out.shape[0], M = a.shape[1], K = a.shape[2], N = b.shape[2];
  if (b.shape[1] != K || out.shape[1] != M || out.shape[2] != N || a.shape[0] != B || b.shape[0] != B)
    kernel_fail("matmul: shape mismatch");
  if (B == 0 || M == 0 || N == 0) return;

  auto store_out = [&](int64_t bi, const float* c, int64_t m0, int64_t mr, int64_t n0, int64_t nr, int64_t ldc) {
    for (int64_t m = 0; m < mr; ++m)
      store_f32(out.dtype, element_ptr(out, (bi * M + m0 + m) * N + n0), 1, nr, c + m * ldc);
  };
  auto zero_k = [&](int64_t bi) {
    std::vector<float> z(static_cast<size_t>(N), 0.0f);
    for (int64_t m = 0; m < M; ++m) store_f32(out.dtype, element_ptr(out, (bi * M + m) * N), 1, N, z.data());
  };

  const int64_t flops_per_batch = M * N * std::max<int64_t>(K, 1);
  if (B >= 2 * pool().size() || flops_per_batch < (1 << 16)) {
    // Many small products: one batch per task.
    int64_t grain = std::max<int64_t>(1, (1 << 17) / std::max<int64_t>(1, flops_per_batch));
    pool().parallel_for(B, grain, [&](int64_t b0, int64_t b1) {
      std::vector<float> abuf, bbuf, cbuf;
      for (int64_t bi = b0; bi < b1; ++bi) {
        if (K == 0) { zero_k(bi); continue; }
        int64_t lda, ldb;
        const float* ap = a_rows(a, bi, abuf, &lda);
        const float* bp = b_cols(b, bi, bbuf, &ldb);
        if (out.dtype == DType::F32) {
          gemm_nt_f32(ap, lda, M, bp, ldb, N, K, static_cast<float*>(out.data) + bi * M * N, N);
        } else {
          cbuf.resize(static_cast<size_t>(M * N));
          gemm_nt_f32(ap, lda, M, bp, ldb, N, K, cbuf.data(), N);
          store_out(bi, cbuf.data(), 0, M, 0, N, N);
        }
      }
    });
    return;
  }
  // Few large products: pack once, split the columns (and rows) over the pool.
  std::vector<float> abuf, bbuf;
  for (int64_t bi = 0; bi < B; ++bi) {
    if (K == 0) { zero_k(bi); continue; }
    int64_t lda, ldb;
    const float* ap = a_rows(a, bi, abuf, &lda);
    const float* bp = b_cols(b, bi, bbuf, &ldb);
    const int64_t col_tiles = (N + kTileCols - 1) / kTileCols;
    const int64_t row_blocks = (M + 63) / 64;
    pool().parallel_for(col_tiles * row_blocks, 1, [&](int64_t t0, int64_t t1) {
      std::vector<float> cbuf;
      for (int64_t t = t0; t < t1; ++t) {
        int64_t m0 = (t / col_tiles) * 64, mr = std::min<int64_t>(64, M - m0);
        int64_t n0 = (t % col_tiles) * kTileCols, nr = std::min(kTileCols, N - n0);
        if (out.dtype == DType::F32) {
          gemm_nt_f32(ap + m0 * lda, lda, mr, bp + n0 * ldb, ldb, nr, K,
                      static_cast<float*>(out.data) + (bi * M + m0) * N + n0, N);
        } else {
          cbuf.resize(static_cast<size_t>(mr * nr));
          gemm_nt_f32(ap + m0 * lda, lda, mr, bp + n0 * ldb, ldb, nr, K, cbuf.data(), nr);
          store_out(bi, cbuf.data(), m0, mr, n0, nr, nr);
        }
      }
    });
  }
}

}  // namespace tl::cpu
