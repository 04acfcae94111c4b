// Batched matmul out[b] = a[b] @ b[b] for strided 3-D views (batch stride 0 broadcasts).
// f32 products whose B is row-major (unit stride along N) run in the outer-product form (gemm_nn:
// A read at its own strides, nothing packed). Every other product runs as C = A . B^T with both
// operands K-contiguous: operands that already are (f32 a with unit K stride; a "transposed" f32
// b, i.e. unit K stride) are used in place, others are packed into per-thread f32 buffers first.
// out is f32 or f16, contiguous.
#include <algorithm>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

// C[m, n] = sum_k A[m, k] * B[k, n] with B row-major (unit stride along n, rows ldb apart) and A at
// any strides (sam between rows, sak between columns): the outer-product form, with a 4 x 16 tile of
// C in registers, A's elements broadcast and B's rows read as vectors. Nothing is packed, and short
// reductions (K = 9..32: a convolution's kernel window or channel count) cost no horizontal sums,
// which is what the dot-product form (gemm_nt) pays per output. Each output sums k in order.
void gemm_nn_portable(const float* a, int64_t sam, int64_t sak, int64_t M, const float* b, int64_t ldb,
                      int64_t N, int64_t K, float* c, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m) {
    float* crow = c + m * ldc;
    for (int64_t n = 0; n < N; ++n) crow[n] = 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      const float av = a[m * sam + k * sak];
      const float* brow = b + k * ldb;
      for (int64_t n = 0; n < N; ++n) crow[n] += av * brow[n];
    }
  }
}

#if defined(__x86_64__)
// Lanes 0..r-1 on (1 <= r <= 7): the masked loads read nothing past a row's last column.
__attribute__((target("avx2,fma"))) inline __m256i tail_mask(int64_t r) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(r)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

__attribute__((target("avx2,fma"))) void gemm_nn_avx2(const float* a, int64_t sam, int64_t sak, int64_t M,
                                                      const float* b, int64_t ldb, int64_t N, int64_t K,
                                                      float* c, int64_t ldc) {
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) {
    const float* a0 = a + m * sam;
    const float* a1 = a0 + sam;
    const float* a2 = a1 + sam;
    const float* a3 = a2 + sam;
    int64_t n = 0;
    for (; n + 16 <= N; n += 16) {
      __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps();
      __m256 c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
      __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
      for (int64_t k = 0; k < K; ++k) {
        const float* brow = b + k * ldb + n;
        const __m256 b0 = _mm256_loadu_ps(brow), b1 = _mm256_loadu_ps(brow + 8);
        __m256 v = _mm256_broadcast_ss(a0 + k * sak);
        c00 = _mm256_fmadd_ps(v, b0, c00);
        c01 = _mm256_fmadd_ps(v, b1, c01);
        v = _mm256_broadcast_ss(a1 + k * sak);
        c10 = _mm256_fmadd_ps(v, b0, c10);
        c11 = _mm256_fmadd_ps(v, b1, c11);
        v = _mm256_broadcast_ss(a2 + k * sak);
        c20 = _mm256_fmadd_ps(v, b0, c20);
        c21 = _mm256_fmadd_ps(v, b1, c21);
        v = _mm256_broadcast_ss(a3 + k * sak);
        c30 = _mm256_fmadd_ps(v, b0, c30);
        c31 = _mm256_fmadd_ps(v, b1, c31);
      }
      float* cr = c + m * ldc + n;
      _mm256_storeu_ps(cr, c00);
      _mm256_storeu_ps(cr + 8, c01);
      _mm256_storeu_ps(cr + ldc, c10);
      _mm256_storeu_ps(cr + ldc + 8, c11);
      _mm256_storeu_ps(cr + 2 * ldc, c20);
      _mm256_storeu_ps(cr + 2 * ldc + 8, c21);
      _mm256_storeu_ps(cr + 3 * ldc, c30);
      _mm256_storeu_ps(cr + 3 * ldc + 8, c31);
    }
    for (; n + 8 <= N; n += 8) {
      __m256 c0 = _mm256_setzero_ps(), c1 = _mm256_setzero_ps(), c2 = _mm256_setzero_ps();
      __m256 c3 = _mm256_setzero_ps();
      for (int64_t k = 0; k < K; ++k) {
        const __m256 bv = _mm256_loadu_ps(b + k * ldb + n);
        c0 = _mm256_fmadd_ps(_mm256_broadcast_ss(a0 + k * sak), bv, c0);
        c1 = _mm256_fmadd_ps(_mm256_broadcast_ss(a1 + k * sak), bv, c1);
        c2 = _mm256_fmadd_ps(_mm256_broadcast_ss(a2 + k * sak), bv, c2);
        c3 = _mm256_fmadd_ps(_mm256_broadcast_ss(a3 + k * sak), bv, c3);
      }
      float* cr = c + m * ldc + n;
      _mm256_storeu_ps(cr, c0);
      _mm256_storeu_ps(cr + ldc, c1);
      _mm256_storeu_ps(cr + 2 * ldc, c2);
      _mm256_storeu_ps(cr + 3 * ldc, c3);
    }
    if (n < N) {  // the last 1..7 columns: masked loads and stores of one vector per row
      const __m256i mask = tail_mask(N - n);
      __m256 c0 = _mm256_setzero_ps(), c1 = _mm256_setzero_ps(), c2 = _mm256_setzero_ps();
      __m256 c3 = _mm256_setzero_ps();
      for (int64_t k = 0; k < K; ++k) {
        const __m256 bv = _mm256_maskload_ps(b + k * ldb + n, mask);
        c0 = _mm256_fmadd_ps(_mm256_broadcast_ss(a0 + k * sak), bv, c0);
        c1 = _mm256_fmadd_ps(_mm256_broadcast_ss(a1 + k * sak), bv, c1);
        c2 = _mm256_fmadd_ps(_mm256_broadcast_ss(a2 + k * sak), bv, c2);
        c3 = _mm256_fmadd_ps(_mm256_broadcast_ss(a3 + k * sak), bv, c3);
      }
      float* cr = c + m * ldc + n;
      _mm256_maskstore_ps(cr, mask, c0);
      _mm256_maskstore_ps(cr + ldc, mask, c1);
      _mm256_maskstore_ps(cr + 2 * ldc, mask, c2);
      _mm256_maskstore_ps(cr + 3 * ldc, mask, c3);
    }
  }
  for (; m < M; ++m) {  // the last rows: one at a time, 8 columns per vector
    const float* ar = a + m * sam;
    float* cr = c + m * ldc;
    int64_t n = 0;
    for (; n + 8 <= N; n += 8) {
      __m256 acc = _mm256_setzero_ps();
      for (int64_t k = 0; k < K; ++k)
        acc = _mm256_fmadd_ps(_mm256_broadcast_ss(ar + k * sak), _mm256_loadu_ps(b + k * ldb + n), acc);
      _mm256_storeu_ps(cr + n, acc);
    }
    if (n < N) {
      const __m256i mask = tail_mask(N - n);
      __m256 acc = _mm256_setzero_ps();
      for (int64_t k = 0; k < K; ++k)
        acc = _mm256_fmadd_ps(_mm256_broadcast_ss(ar + k * sak), _mm256_maskload_ps(b + k * ldb + n, mask), acc);
      _mm256_maskstore_ps(cr + n, mask, acc);
    }
  }
}
#endif

void gemm_nn(const float* a, int64_t sam, int64_t sak, int64_t M, const float* b, int64_t ldb, int64_t N,
             int64_t K, float* c, int64_t ldc) {
#if defined(__x86_64__)
  if (cpu_has_avx2()) return gemm_nn_avx2(a, sam, sak, M, b, ldb, N, K, c, ldc);
#endif
  gemm_nn_portable(a, sam, sak, M, b, ldb, N, K, c, ldc);
}

// f32 operands with B row-major (unit stride along N) and an f32 output: the outer-product path.
void matmul_nn(ThreadPool& pool, const View& a, const View& b, const View& out) {
  const int64_t B = out.shape[0], M = a.shape[1], K = a.shape[2], N = b.shape[2];
  const float* ap = static_cast<const float*>(a.data);
  const float* bp = static_cast<const float*>(b.data);
  float* op = static_cast<float*>(out.data);
  const int64_t flops_per_batch = M * N * std::max<int64_t>(K, 1);
  if (B >= 2 * pool.size() || flops_per_batch < (1 << 16)) {
    const int64_t grain = std::max<int64_t>(1, (1 << 17) / std::max<int64_t>(1, flops_per_batch));
    pool.parallel_for(B, grain, [&](int64_t b0, int64_t b1) {
      for (int64_t bi = b0; bi < b1; ++bi)
        gemm_nn(ap + bi * a.strides[0], a.strides[1], a.strides[2], M, bp + bi * b.strides[0], b.strides[1], N,
                K, op + bi * M * N, N);
    });
    return;
  }
  // Few large products: blocks of 64 rows x 64 columns over the pool.
  const int64_t col_tiles = (N + 63) / 64, row_blocks = (M + 63) / 64;
  for (int64_t bi = 0; bi < B; ++bi) {
    pool.parallel_for(col_tiles * row_blocks, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t m0 = (t / col_tiles) * 64, mr = std::min<int64_t>(64, M - m0);
        const int64_t n0 = (t % col_tiles) * 64, nr = std::min<int64_t>(64, N - n0);
        gemm_nn(ap + bi * a.strides[0] + m0 * a.strides[1], a.strides[1], a.strides[2], mr,
                bp + bi * b.strides[0] + n0, b.strides[1], nr, K, op + (bi * M + m0) * N + n0, N);
      }
    });
  }
}

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
  if (a.dtype == DType::F32 && b.dtype == DType::F32 && out.dtype == DType::F32 && K > 0 &&
      (b.strides[2] == 1 || N == 1) && !(b.strides[1] == 1 && K > 1) && !(M > 512 && K > 512 && N > 512)) {
    // B row-major (and not also K-contiguous, which the dot-product path takes as it lies). Large
    // products in all three sizes stay on the packed dot-product path: gemm_nn does not block K, and
    // its B panel (K rows of 16 columns) leaves L1 there (1024^3: 43 ms against 27 ms packed), while
    // packing pays off only over many rows (8 x 768 x 3072: 0.85 ms outer-product, 9.6 ms packed).
    matmul_nn(pool(), a, b, out);
    return;
  }

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
