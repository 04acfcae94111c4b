// Neural-network kernels: rms_norm, layer_norm, rope (adjacent pairs and NeoX halves),
// causal_mask, and grouped-query attention. All accumulate in f32 (norm statistics in double)
// and read f16/bf16 operands through f32 row conversions. Attention uses a numerically stable
// softmax (max subtracted) over exactly the keys a query may see, so a causal query never
// reads keys beyond its position.
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

void CpuKernels::causal_mask(int64_t offset, const View& out) {
  require_float("causal_mask", out);
  require_contiguous("causal_mask", out);
  if (out.ndim != 2) kernel_fail("causal_mask: expected a 2-D output");
  const int64_t n = out.shape[0], m = out.shape[1];
  std::vector<float> row(static_cast<size_t>(m));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j)
      row[static_cast<size_t>(j)] = j <= i + offset ? 0.0f : -std::numeric_limits<float>::infinity();
    store_f32(out.dtype, element_ptr(out, i * m), 1, m, row.data());
  }
}

void CpuKernels::attention(const View& q, const View& k, const View& v, const View& mask,
                           float scale, bool causal, int64_t q_pos_offset, const View& out) {
  require_float("attention", q);
  require_float("attention", k);
  require_float("attention", v);
  require_contiguous("attention", out);
  if (out.dtype != DType::F32) kernel_fail("attention: out must be f32");
  if (q.ndim != 3 || k.ndim != 3 || v.ndim != 3 || out.ndim != 3)
    kernel_fail("attention: q, k, v and out must be 3-D");
  const int64_t Sq = q.shape[0], Hq = q.shape[1], D = q.shape[2];
  const int64_t Sk = k.shape[0], Hkv = k.shape[1];
  if (k.shape[2] != D || v.shape[0] != Sk || v.shape[1] != Hkv || v.shape[2] != D)
    kernel_fail("attention: k/v shapes do not match q");
  if (Hkv == 0 || Hq % Hkv != 0) kernel_fail("attention: query heads must be a multiple of kv heads");
  if (mask.data) {
    if (mask.ndim != 2 || mask.shape[0] != Sq || mask.shape[1] != Sk) kernel_fail("attention: mask must be [Sq, Sk]");
    require_float("attention", mask);
  }
  const int64_t group = Hq / Hkv;
  float* od = static_cast<float*>(out.data);
  const bool k_direct = k.dtype == DType::F32 && k.strides[2] == 1;
  const bool v_direct = v.dtype == DType::F32 && v.strides[2] == 1;

  // One task per (query row, kv head): the group's query heads share the key/value rows.
  const int64_t tasks = Sq * Hkv;
  int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, Sk * D * group));
  pool().parallel_for(tasks, grain, [&](int64_t t0, int64_t t1) {
    std::vector<float> qrow(static_cast<size_t>(group * D)), scores(static_cast<size_t>(group * Sk));
    std::vector<float> krow(static_cast<size_t>(D)), mrow(static_cast<size_t>(Sk)), acc(static_cast<size_t>(group * D));
    std::vector<float> kbuf(k_direct ? 0 : static_cast<size_t>(Sk * D)), kq(static_cast<size_t>(Sk * group));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i = t / Hkv, kh = t % Hkv;
      int64_t n_keys = Sk;
      if (causal) n_keys = std::min<int64_t>(Sk, std::max<int64_t>(0, q_pos_offset + i + 1));
      for (int64_t g = 0; g < group; ++g) {
        const int64_t h = kh * group + g;
        load_f32(q.dtype, element_ptr(q, i * q.strides[0] + h * q.strides[1]), q.strides[2], D, qrow.data() + g * D);
        for (int64_t d = 0; d < D; ++d) qrow[static_cast<size_t>(g * D + d)] *= scale;
      }
      if (mask.data) load_f32(mask.dtype, element_ptr(mask, i * mask.strides[0]), mask.strides[1], n_keys, mrow.data());
      // Scores of the group's query heads against every visible key, as one small GEMM
      // (keys x group) with the key rows used in place when they already are f32 rows.
      const float* kp;
      int64_t ldk;
      if (k_direct) {
        kp = reinterpret_cast<const float*>(element_ptr(k, kh * k.strides[1]));
        ldk = k.strides[0];
      } else {
        for (int64_t j = 0; j < n_keys; ++j)
          load_f32(k.dtype, element_ptr(k, j * k.strides[0] + kh * k.strides[1]), k.strides[2], D, kbuf.data() + j * D);
        kp = kbuf.data();
        ldk = D;
      }
      if (n_keys > 0) gemm_nt_f32(kp, ldk, n_keys, qrow.data(), D, group, D, kq.data(), group);
      for (int64_t g = 0; g < group; ++g)
        for (int64_t j = 0; j < n_keys; ++j)
          scores[static_cast<size_t>(g * Sk + j)] =
              kq[static_cast<size_t>(j * group + g)] + (mask.data ? mrow[static_cast<size_t>(j)] : 0.0f);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t g = 0; g < group; ++g) {
        float* sc = scores.data() + g * Sk;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < n_keys; ++j) mx = std::max(mx, sc[j]);
        if (n_keys == 0 || mx == -std::numeric_limits<float>::infinity()) {
          std::fill(sc, sc + n_keys, 0.0f);  // no visible key: the output row is zeros
          continue;
        }
        double sum = 0.0;
        for (int64_t j = 0; j < n_keys; ++j) {
          sc[j] = std::exp(sc[j] - mx);
          sum += sc[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < n_keys; ++j) sc[j] *= inv;
      }
      for (int64_t j = 0; j < n_keys; ++j) {
        const float* vp;
        const char* vbase = element_ptr(v, j * v.strides[0] + kh * v.strides[1]);
        if (v_direct) {
          vp = reinterpret_cast<const float*>(vbase);
        } else {
          load_f32(v.dtype, vbase, v.strides[2], D, krow.data());
          vp = krow.data();
        }
        for (int64_t g = 0; g < group; ++g) {
          float p = scores[static_cast<size_t>(g * Sk + j)];
          if (p != 0.0f) axpy_f32(p, vp, acc.data() + g * D, D);
        }
      }
      for (int64_t g = 0; g < group; ++g) {
        const int64_t h = kh * group + g;
        std::copy(acc.begin() + g * D, acc.begin() + (g + 1) * D, od + (i * Hq + h) * D);
      }
    }
  });
}

}  // namespace tl::cpu
