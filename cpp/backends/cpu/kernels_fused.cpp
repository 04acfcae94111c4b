// Fused kernels: fused_linear (RMSNorm or SwiGLU prologue, residual-add epilogue), swiglu,
// rope_kv_write. On the CPU they are the reference the other backends are checked against, so
// each computes exactly what its unfused composition computes, bit for bit: the prologue's rows
// go through the rms_norm or swiglu kernel into the caller's scratch, the dot products through the
// linear kernel, and the epilogue, SwiGLU and RoPE use the same f32 expressions (and
// double-precision angles) as binary Add, unary Silu * Mul and rope.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_kernels_impl.h"

namespace tl::cpu {

void CpuKernels::fused_linear(const View& x, const View& w, LinearPrologue prologue,
                              const View& norm_w, float eps, const View& addend,
                              const View& scratch, const View& out) {
  if (x.ndim != 2 || out.ndim != 2) kernel_fail("fused_linear: expected 2-D x and out");
  const int64_t M = x.shape[0], N = out.shape[1];
  const View* input = &x;
  if (prologue != LinearPrologue::None) {
    const int64_t K = w.ndim == 2 ? w.shape[1] : 0;
    if (!scratch.data || scratch.dtype != DType::F32 || scratch.numel() != M * K)
      kernel_fail("fused_linear: a prologue needs an f32 scratch [M, K]");
    if (prologue == LinearPrologue::RmsNorm) {
      rms_norm(x, norm_w, eps, scratch);
    } else {
      if (x.shape[1] != 2 * K) kernel_fail("fused_linear: the SwiGLU prologue needs x [M, 2K]");
      View gate = x, up = x;
      gate.shape[1] = up.shape[1] = K;
      up.data = element_ptr(x, K);
      swiglu(gate, up, scratch);
    }
    input = &scratch;
  }
  linear(*input, w, out);
  if (!addend.data) return;
  require_float("fused_linear", addend);
  if (addend.ndim != 2 || addend.shape[0] != M || addend.shape[1] != N)
    kernel_fail("fused_linear: addend must be [M, N]");
  float* od = static_cast<float*>(out.data);
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, N));
  pool().parallel_for(M, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(N));
    for (int64_t r = r0; r < r1; ++r) {
      load_f32(addend.dtype, element_ptr(addend, r * addend.strides[0]), addend.strides[1], N,
               row.data());
      float* o = od + r * N;
      for (int64_t n = 0; n < N; ++n) o[n] = o[n] + row[static_cast<size_t>(n)];
    }
  });
}

void CpuKernels::swiglu(const View& gate, const View& up, const View& out) {
  require_float("swiglu", gate);
  require_float("swiglu", up);
  require_contiguous("swiglu", out);
  if (out.dtype != DType::F32) kernel_fail("swiglu: out must be f32");
  if (gate.ndim != 2 || up.ndim != 2 || out.ndim != 2 || gate.shape[0] != up.shape[0] ||
      gate.shape[1] != up.shape[1] || out.shape[0] != gate.shape[0] || out.shape[1] != gate.shape[1])
    kernel_fail("swiglu: gate, up and out must be 2-D of one shape");
  const int64_t rows = gate.shape[0], n = gate.shape[1];
  float* od = static_cast<float*>(out.data);
  // Tasks of kSwigluCols columns of a row, ~4K elements a chunk of tasks: a decode step's few rows
  // (8 x 1536 for SmolLM2) go to both threads, where tasks of whole rows at 16K elements a chunk
  // left the step's 8 rows on one thread; f32 rows with unit stride are read in place. Every
  // element is the same f32 expression whichever task computes it.
  constexpr int64_t kSwigluCols = 256;
  const int64_t per_row = (n + kSwigluCols - 1) / kSwigluCols;
  const bool g_direct = gate.dtype == DType::F32 && gate.strides[1] == 1;
  const bool u_direct = up.dtype == DType::F32 && up.strides[1] == 1;
  pool().parallel_for(rows * per_row, std::max<int64_t>(1, 4096 / kSwigluCols), [&](int64_t t0, int64_t t1) {
    float gbuf[kSwigluCols], ubuf[kSwigluCols];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = t / per_row, c0 = (t % per_row) * kSwigluCols, cn = std::min(kSwigluCols, n - c0);
      const char* gp = element_ptr(gate, r * gate.strides[0] + c0 * gate.strides[1]);
      const char* up_ = element_ptr(up, r * up.strides[0] + c0 * up.strides[1]);
      const float* g = g_direct ? reinterpret_cast<const float*>(gp) : gbuf;
      const float* u = u_direct ? reinterpret_cast<const float*>(up_) : ubuf;
      if (!g_direct) load_f32(gate.dtype, gp, gate.strides[1], cn, gbuf);
      if (!u_direct) load_f32(up.dtype, up_, up.strides[1], cn, ubuf);
      float* o = od + r * n + c0;
      for (int64_t i = 0; i < cn; ++i) {
        const float x = g[i];
        const float silu = x / (1.0f + std::exp(-x));
        o[i] = silu * u[i];
      }
    }
  });
}

void CpuKernels::rope_kv_write(const View& q, const View& k, const View& v, int64_t pos_offset,
                               float base, bool neox, const View& q_out, const View& k_dst,
                               const View& v_dst) {
  for (const View* t : {&q, &k, &v, &k_dst, &v_dst}) require_float("rope_kv_write", *t);
  require_contiguous("rope_kv_write", q_out);
  if (q_out.dtype != DType::F32) kernel_fail("rope_kv_write: q_out must be f32");
  if (q.ndim != 3 || k.ndim != 3 || v.ndim != 3 || k_dst.ndim != 3 || v_dst.ndim != 3)
    kernel_fail("rope_kv_write: q, k, v and the cache views must be 3-D");
  const int64_t S = q.shape[0], Hq = q.shape[1], D = q.shape[2], Hkv = k.shape[1];
  if (D % 2 != 0) kernel_fail("rope_kv_write: head dim must be even, got " + std::to_string(D));
  for (const View* t : {&k, &v, &k_dst, &v_dst})
    if (t->shape[0] != S || t->shape[1] != Hkv || t->shape[2] != D)
      kernel_fail("rope_kv_write: k, v and the cache views must be [S, Hkv, D]");
  const int64_t half = D / 2;
  // The rope kernel's angles: theta_i = pos * base^(-2i/D) in double, cos/sin rounded to f32.
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[static_cast<size_t>(i)] =
        std::pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / static_cast<double>(D));
  std::vector<float> cs(static_cast<size_t>(S * half)), sn(static_cast<size_t>(S * half));
  for (int64_t s = 0; s < S; ++s) {
    const double pos = static_cast<double>(pos_offset + s);
    for (int64_t i = 0; i < half; ++i) {
      double theta = pos * inv_freq[static_cast<size_t>(i)];
      cs[static_cast<size_t>(s * half + i)] = static_cast<float>(std::cos(theta));
      sn[static_cast<size_t>(s * half + i)] = static_cast<float>(std::sin(theta));
    }
  }
  // Rows: S * Hq query rows, then S * Hkv key rows, then S * Hkv value rows.
  const int64_t rows = S * (Hq + 2 * Hkv);
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, D));
  pool().parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> in(static_cast<size_t>(D)), o(static_cast<size_t>(D));
    for (int64_t r = r0; r < r1; ++r) {
      const View* src;
      const View* dst;
      int64_t s, h;
      bool rotate = true;
      if (r < S * Hq) {
        src = &q, dst = &q_out, s = r / Hq, h = r % Hq;
      } else if (r < S * (Hq + Hkv)) {
        src = &k, dst = &k_dst, s = (r - S * Hq) / Hkv, h = (r - S * Hq) % Hkv;
      } else {
        src = &v, dst = &v_dst, s = (r - S * (Hq + Hkv)) / Hkv, h = (r - S * (Hq + Hkv)) % Hkv;
        rotate = false;
      }
      load_f32(src->dtype, element_ptr(*src, s * src->strides[0] + h * src->strides[1]),
               src->strides[2], D, in.data());
      if (rotate) {
        const float* c = cs.data() + s * half;
        const float* si = sn.data() + s * half;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
          const float x0 = in[static_cast<size_t>(i0)], x1 = in[static_cast<size_t>(i1)];
          o[static_cast<size_t>(i0)] = x0 * c[i] - x1 * si[i];
          o[static_cast<size_t>(i1)] = x0 * si[i] + x1 * c[i];
        }
      } else {
        std::copy(in.begin(), in.end(), o.begin());
      }
      store_f32(dst->dtype, element_ptr(*dst, s * dst->strides[0] + h * dst->strides[1]),
                dst->strides[2], D, o.data());
    }
  });
}

}  // namespace tl::cpu
