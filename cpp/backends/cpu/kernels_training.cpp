// Training kernels: scatter_add_rows (the gradient of embedding / index_select rows) and
// optimizer_update (one fused Adam, AdamW or SGD step in place). Invariants: scatter_add_rows
// adds the rows of each output column in id order on one thread (threads split the columns),
// so repeated ids sum in the same order on every run; optimizer_update evaluates, per element,
// the same f32 expressions in the same order as the unfused ops of optimizers.py (binary mul,
// add, div, unary sqrt), so the fused step equals the op-by-op step bit for bit on the CPU.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cpu_kernels_impl.h"

namespace tl::cpu {

namespace {
constexpr int64_t kOptimizerGrain = 1 << 14;  // elements per task

std::string shape_text(const View& v) {
  std::string s = "[";
  for (int i = 0; i < v.ndim; ++i) s += (i ? ", " : "") + std::to_string(v.shape[i]);
  return s + "]";
}
// out[ids[i]] += src[i] in id order (out [V, 1], src [n, 1]), each id range-checked as it is read
// (a failed command's output is never handed out, R2, so stopping part way leaves nothing visible).
template <class I>
void scatter_add_elements(const I* ids, int64_t n, const View& src, const View& out) {
  const int64_t V = out.shape[0];
  const float* s = static_cast<const float*>(src.data);
  float* o = static_cast<float*>(out.data);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    if (static_cast<uint64_t>(id) >= static_cast<uint64_t>(V))  // also catches id < 0
      kernel_fail("scatter_add_rows: id " + std::to_string(id) + " (position " + std::to_string(i) +
                  ") is out of range for " + shape_text(out) + " rows (src " + shape_text(src) + ")");
    o[id] += s[i];
  }
}
}  // namespace

void CpuKernels::scatter_add_rows(const View& ids, const View& src, const View& out) {
  if (ids.dtype != DType::I32 && ids.dtype != DType::I64)
    kernel_fail("scatter_add_rows: ids must be i32 or i64");
  if (src.dtype != DType::F32 || out.dtype != DType::F32)
    kernel_fail("scatter_add_rows: src and out must be f32");
  require_contiguous("scatter_add_rows", src);
  require_contiguous("scatter_add_rows", out);
  require_contiguous("scatter_add_rows", ids);
  if (out.ndim != 2 || src.ndim != 2 || src.shape[1] != out.shape[1] || src.shape[0] != ids.numel())
    kernel_fail("scatter_add_rows: expected out [V, D], src [n, D] and ids [n]");
  const int64_t V = out.shape[0], D = out.shape[1], n = ids.numel();
  if (D == 1) {  // one-element rows (col2im of an element gather): one pass, ids read in place
    if (ids.dtype == DType::I64)
      scatter_add_elements(static_cast<const int64_t*>(ids.data), n, src, out);
    else
      scatter_add_elements(static_cast<const int32_t*>(ids.data), n, src, out);
    return;
  }
  std::vector<int64_t> idx(static_cast<size_t>(n));
  load_i64(ids.dtype, ids.data, 1, n, idx.data());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = idx[static_cast<size_t>(i)];
    if (id < 0 || id >= V)
      kernel_fail("scatter_add_rows: id " + std::to_string(id) + " (position " + std::to_string(i) +
                  " of ids " + shape_text(ids) + ") is out of range for " + shape_text(out) +
                  " rows (src " + shape_text(src) + ")");
  }
  const float* s = static_cast<const float*>(src.data);
  float* o = static_cast<float*>(out.data);
  // Each task owns a range of columns and walks every id in order: deterministic, no atomics.
  const int64_t grain = std::max<int64_t>(16, kOptimizerGrain / std::max<int64_t>(1, n));
  pool().parallel_for(D, grain, [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n; ++i) {
      const float* srow = s + i * D;
      float* orow = o + idx[static_cast<size_t>(i)] * D;
      for (int64_t c = c0; c < c1; ++c) orow[c] += srow[c];
    }
  });
}

void CpuKernels::optimizer_update(const OptimizerStep& st, const View& param, const View& grad,
                                  const View& m, const View& v) {
  const View* operands[] = {&param, &grad, &m, &v};
  for (const View* t : operands) {
    if (!t->data) continue;
    if (t->dtype != DType::F32) kernel_fail("optimizer_update: every operand must be f32");
    require_contiguous("optimizer_update", *t);
    if (t->numel() != param.numel()) kernel_fail("optimizer_update: operands differ in size");
  }
  const bool adam = st.kind == OptimizerKind::Adam;
  if (adam && (!m.data || !v.data)) kernel_fail("optimizer_update: Adam needs m and v");
  float* p = static_cast<float*>(param.data);
  const float* g = static_cast<const float*>(grad.data);
  float* mm = static_cast<float*>(m.data);
  float* vv = static_cast<float*>(v.data);
  const OptimizerStep s = st;
  pool().parallel_for(param.numel(), kOptimizerGrain, [&](int64_t i0, int64_t i1) {
    if (adam) {
      for (int64_t i = i0; i < i1; ++i) {
        float w = p[i], gi = g[i];
        if (s.decoupled) {
          w = w * s.decay;
        } else if (s.weight_decay != 0.0f) {
          gi = gi + w * s.weight_decay;
        }
        const float mi = mm[i] * s.beta1 + gi * s.one_minus_beta1;
        const float vi = vv[i] * s.beta2 + (gi * gi) * s.one_minus_beta2;
        mm[i] = mi;
        vv[i] = vi;
        const float denom = std::sqrt(vi / s.bias2) + s.eps;
        p[i] = w - (mi / denom) * s.step;
      }
      return;
    }
    for (int64_t i = i0; i < i1; ++i) {
      const float w = p[i];
      float gi = g[i];
      if (s.weight_decay != 0.0f) gi = gi + w * s.weight_decay;
      if (mm) {
        const float b = mm[i] * s.momentum + gi;
        mm[i] = b;
        gi = s.nesterov ? gi + b * s.momentum : b;
      }
      p[i] = w - gi * s.step;
    }
  });
}

}  // namespace tl::cpu
