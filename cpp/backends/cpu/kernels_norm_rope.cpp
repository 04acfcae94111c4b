// Normalisation and position kernels: rms_norm, layer_norm, rope (adjacent pairs and NeoX halves).
// All accumulate in f32 (norm statistics in double) and read f16/bf16 operands through f32 row
// conversions. (The CUDA backend keeps the same family in norm_rope.cu.)
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_kernels_impl.h"

namespace tl::cpu {
namespace {

void load_params(const View& p, int64_t D, std::vector<float>& dst, const char* what) {
  if (!p.data) return;
  require_float(what, p);
  if (p.numel() != D) kernel_fail(std::string(what) + ": weight has " + std::to_string(p.numel()) + " elements, expected " + std::to_string(D));
  dst.resize(static_cast<size_t>(D));
  const int64_t stride = p.ndim > 0 ? p.strides[p.ndim - 1] : 1;
  load_f32(p.dtype, p.data, stride, D, dst.data());
}

void row_dims(const View& x, int64_t* rows, int64_t* D) {
  *D = x.ndim > 0 ? x.shape[x.ndim - 1] : 1;
  *rows = *D > 0 ? x.numel() / *D : 0;
}

}  // namespace

void CpuKernels::rms_norm(const View& x, const View& w, float eps, const View& out) {
  require_float("rms_norm", x);
  require_float("rms_norm", out);
  require_contiguous("rms_norm", x);
  require_contiguous("rms_norm", out);
  int64_t rows, D;
  row_dims(x, &rows, &D);
  std::vector<float> wv;
  load_params(w, D, wv, "rms_norm");
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, D));
  pool().parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(D));
    for (int64_t r = r0; r < r1; ++r) {
      float* v = row.data();
      load_f32(x.dtype, element_ptr(x, r * D), 1, D, v);
      float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t i = 0;
      for (; i + 8 <= D; i += 8)
        for (int j = 0; j < 8; ++j) part[j] += v[i + j] * v[i + j];
      double ss = 0.0;
      for (; i < D; ++i) ss += static_cast<double>(v[i]) * v[i];
      for (int j = 0; j < 8; ++j) ss += part[j];
      const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(D) + eps));
      if (wv.empty()) {
        for (int64_t k = 0; k < D; ++k) v[k] *= scale;
      } else {
        for (int64_t k = 0; k < D; ++k) v[k] = (v[k] * scale) * wv[k];
      }
      store_f32(out.dtype, element_ptr(out, r * D), 1, D, v);
    }
  });
}

void CpuKernels::layer_norm(const View& x, const View& w, const View& b, float eps,
                            const View& out) {
  require_float("layer_norm", x);
  require_float("layer_norm", out);
  require_contiguous("layer_norm", x);
  require_contiguous("layer_norm", out);
  int64_t rows, D;
  row_dims(x, &rows, &D);
  std::vector<float> wv, bv;
  load_params(w, D, wv, "layer_norm");
  load_params(b, D, bv, "layer_norm");
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, D));
  pool().parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(D));
    for (int64_t r = r0; r < r1; ++r) {
      float* v = row.data();
      load_f32(x.dtype, element_ptr(x, r * D), 1, D, v);
      double sum = 0.0;
      for (int64_t k = 0; k < D; ++k) sum += v[k];
      const float mean = static_cast<float>(sum / static_cast<double>(D));
      double var = 0.0;
      for (int64_t k = 0; k < D; ++k) {
        double d = static_cast<double>(v[k]) - mean;
        var += d * d;
      }
      const float inv = static_cast<float>(1.0 / std::sqrt(var / static_cast<double>(D) + eps));
      for (int64_t k = 0; k < D; ++k) {
        float y = (v[k] - mean) * inv;
        if (!wv.empty()) y *= wv[k];
        if (!bv.empty()) y += bv[k];
        v[k] = y;
      }
      store_f32(out.dtype, element_ptr(out, r * D), 1, D, v);
    }
  });
}

void CpuKernels::rope(const View& x, int64_t pos_offset, float base, bool neox, const View& out) {
  require_float("rope", x);
  require_float("rope", out);
  require_contiguous("rope", x);
  require_contiguous("rope", out);
  if (x.ndim != 4) kernel_fail("rope: expected a 4-D [outer, S, H, D] view");
  const int64_t outer = x.shape[0], S = x.shape[1], H = x.shape[2], D = x.shape[3];
  if (D % 2 != 0) kernel_fail("rope: head dim must be even, got " + std::to_string(D));
  const int64_t half = D / 2;
  // cos/sin per (position, pair), computed in double: theta_i = pos * base^(-2i/D).
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[static_cast<size_t>(i)] = std::pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / static_cast<double>(D));
  std::vector<float> cs(static_cast<size_t>(S * half)), sn(static_cast<size_t>(S * half));
  for (int64_t s = 0; s < S; ++s) {
    const double pos = static_cast<double>(pos_offset + s);
    for (int64_t i = 0; i < half; ++i) {
      double theta = pos * inv_freq[static_cast<size_t>(i)];
      cs[static_cast<size_t>(s * half + i)] = static_cast<float>(std::cos(theta));
      sn[static_cast<size_t>(s * half + i)] = static_cast<float>(std::sin(theta));
    }
  }
  const int64_t rows = outer * S * H;
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, D));
  pool().parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> v(static_cast<size_t>(D)), o(static_cast<size_t>(D));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t s = (r / H) % S;
      const float* c = cs.data() + s * half;
      const float* si = sn.data() + s * half;
      load_f32(x.dtype, element_ptr(x, r * D), 1, D, v.data());
      if (neox) {
        for (int64_t i = 0; i < half; ++i) {
          float x0 = v[i], x1 = v[i + half];
          o[i] = x0 * c[i] - x1 * si[i];
          o[i + half] = x0 * si[i] + x1 * c[i];
        }
      } else {
        for (int64_t i = 0; i < half; ++i) {
          float x0 = v[2 * i], x1 = v[2 * i + 1];
          o[2 * i] = x0 * c[i] - x1 * si[i];
          o[2 * i + 1] = x0 * si[i] + x1 * c[i];
        }
      }
      store_f32(out.dtype, element_ptr(out, r * D), 1, D, o.data());
    }
  });
}

}  // namespace tl::cpu
