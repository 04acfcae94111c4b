// Reductions over the middle axis of a contiguous [outer, n, inner] tensor, and softmax.
// Sums accumulate in double (exact enough to match NumPy on long rows); integer inputs with an
// integer output sum exactly in int64. ArgMax/ArgMin return the first index of the extreme
// (a NaN counts as the extreme, as in NumPy). Softmax subtracts the row max before exp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_kernels_impl.h"

namespace tl::cpu {
namespace {

constexpr int64_t kParallelElems = 1 << 15;

// Reduces one (outer index, inner block [i0, i1)) slab; values are read in rows of the
// inner block so reads stay contiguous.
void reduce_slab_float(ReduceOp op, const View& in, int64_t o, int64_t n, int64_t inner,
                       int64_t i0, int64_t i1, const View& out) {
  const int64_t w = i1 - i0;
  alignas(32) float row[kChunk];
  double acc[kChunk];
  int64_t idx[kChunk];
  float best[kChunk];
  const bool is_arg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  const bool want_max = op == ReduceOp::Max || op == ReduceOp::ArgMax;
  int32_t idx32[kChunk];  // the arg loop's indices (i32 lanes vectorize with the f32 compares)
  for (int64_t j = 0; j < w; ++j) {
    acc[j] = 0.0;
    idx32[j] = 0;
    best[j] = want_max ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  }
  for (int64_t k = 0; k < n; ++k) {
    const float* r = row;
    if (in.dtype == DType::F32)
      r = reinterpret_cast<const float*>(element_ptr(in, (o * n + k) * inner + i0));
    else
      load_f32(in.dtype, element_ptr(in, (o * n + k) * inner + i0), 1, w, row);
    if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
      for (int64_t j = 0; j < w; ++j) acc[j] += r[j];
    } else if (k == 0) {
      for (int64_t j = 0; j < w; ++j) best[j] = r[j];
    } else {
      // Branch-free selects (they vectorize): v replaces best when it is more extreme or a NaN,
      // unless a NaN already won; ties keep the first index.
      float* __restrict bp = best;
      int32_t* __restrict ip = idx32;
      const float* __restrict rp = r;
      const int32_t k32 = static_cast<int32_t>(k);
      // The same select written four times (max/min x value/index) so each loop is branch-free.
      auto select = [&](auto more) {
        if (is_arg) {
          for (int64_t j = 0; j < w; ++j) {
            const float v = rp[j], b = bp[j];
            const bool take = (b == b) & ((v != v) | more(v, b));
            bp[j] = take ? v : b;
            ip[j] = take ? k32 : ip[j];
          }
        } else {
          for (int64_t j = 0; j < w; ++j) {
            const float v = rp[j], b = bp[j];
            const bool take = (b == b) & ((v != v) | more(v, b));
            bp[j] = take ? v : b;
          }
        }
      };
      if (want_max)
        select([](float v, float b) { return v > b; });
      else
        select([](float v, float b) { return v < b; });
    }
  }
  int64_t out_off = o * inner + i0;
  if (is_arg) {
    for (int64_t j = 0; j < w; ++j) idx[j] = idx32[j];
    store_i64(out.dtype, element_ptr(out, out_off), 1, w, idx);
    return;
  }
  float res[kChunk];
  for (int64_t j = 0; j < w; ++j) {
    if (op == ReduceOp::Sum) res[j] = static_cast<float>(acc[j]);
    else if (op == ReduceOp::Mean) res[j] = n > 0 ? static_cast<float>(acc[j] / static_cast<double>(n)) : std::numeric_limits<float>::quiet_NaN();
    else res[j] = best[j];
  }
  store_f32(out.dtype, element_ptr(out, out_off), 1, w, res);
}

// Rows reduced over a contiguous axis (inner == 1): one output per outer index.
void reduce_rows_float(ReduceOp op, const View& in, int64_t o, int64_t n, const View& out) {
  alignas(32) float row[kChunk];
  double sum = 0.0;
  const bool want_max = op == ReduceOp::Max || op == ReduceOp::ArgMax;
  float best = want_max ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  int64_t best_i = 0;
  bool have_nan = false;
  for (int64_t c = 0; c < n; c += kChunk) {
    int64_t m = std::min(kChunk, n - c);
    load_f32(in.dtype, element_ptr(in, o * n + c), 1, m, row);
    if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
      float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t j = 0;
      for (; j + 8 <= m; j += 8)
        for (int l = 0; l < 8; ++l) part[l] += row[j + l];
      double s = 0.0;
      for (; j < m; ++j) s += row[j];
      for (int l = 0; l < 8; ++l) s += part[l];
      sum += s;
    } else if (!have_nan) {
      for (int64_t j = 0; j < m; ++j) {
        float v = row[j];
        if (v != v) {
          best = v;
          best_i = c + j;
          have_nan = true;
          break;
        }
        if (want_max ? v > best : v < best) {
          best = v;
          best_i = c + j;
        }
      }
    }
  }
  if (op == ReduceOp::ArgMax || op == ReduceOp::ArgMin) {
    store_i64(out.dtype, element_ptr(out, o), 1, 1, &best_i);
    return;
  }
  float r;
  if (op == ReduceOp::Sum) r = static_cast<float>(sum);
  else if (op == ReduceOp::Mean) r = n > 0 ? static_cast<float>(sum / static_cast<double>(n)) : std::numeric_limits<float>::quiet_NaN();
  else r = best;
  store_f32(out.dtype, element_ptr(out, o), 1, 1, &r);
}

void reduce_int(ReduceOp op, const View& in, int64_t outer, int64_t n, int64_t inner,
                const View& out) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      int64_t acc = 0, best = 0, best_i = 0;
      for (int64_t k = 0; k < n; ++k) {
        int64_t v;
        load_i64(in.dtype, element_ptr(in, (o * n + k) * inner + i), 1, 1, &v);
        if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
          acc += v;
        } else if (k == 0 || ((op == ReduceOp::Max || op == ReduceOp::ArgMax) ? v > best : v < best)) {
          best = v;
          best_i = k;
        }
      }
      int64_t r = op == ReduceOp::Sum ? acc : (op == ReduceOp::ArgMax || op == ReduceOp::ArgMin) ? best_i : best;
      if (op == ReduceOp::Mean) {
        float m = n > 0 ? static_cast<float>(static_cast<double>(acc) / n) : 0.0f;
        store_f32(out.dtype, element_ptr(out, o * inner + i), 1, 1, &m);
      } else {
        store_i64(out.dtype, element_ptr(out, o * inner + i), 1, 1, &r);
      }
    }
  }
}

}  // namespace

void CpuKernels::reduce(ReduceOp op, const View& in, int64_t outer, int64_t n, int64_t inner,
                        const View& out) {
  require_plain("reduce", in);
  require_plain("reduce", out);
  require_contiguous("reduce", in);
  require_contiguous("reduce", out);
  const bool is_arg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  if ((is_arg || op == ReduceOp::Max || op == ReduceOp::Min) && n == 0)
    kernel_fail("reduce: cannot take max/min/argmax/argmin of an empty axis");
  if (!is_floating(in.dtype) && (is_arg ? true : !is_floating(out.dtype))) {
    reduce_int(op, in, outer, n, inner, out);
    return;
  }
  if (inner == 1) {
    int64_t grain = std::max<int64_t>(1, kParallelElems / std::max<int64_t>(1, n));
    pool().parallel_for(outer, grain, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) reduce_rows_float(op, in, o, n, out);
    });
    return;
  }
  if (is_arg && n > std::numeric_limits<int32_t>::max())  // the slab loop keeps indices in i32 lanes
    kernel_fail("reduce: argmax/argmin over an axis of more than 2**31 - 1 elements");
  const int64_t blocks = (inner + kChunk - 1) / kChunk;
  int64_t grain = std::max<int64_t>(1, kParallelElems / std::max<int64_t>(1, n * std::min(inner, kChunk)));
  pool().parallel_for(outer * blocks, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      int64_t o = t / blocks, b = t % blocks;
      int64_t i0 = b * kChunk, i1 = std::min(inner, i0 + kChunk);
      reduce_slab_float(op, in, o, n, inner, i0, i1, out);
    }
  });
}

void CpuKernels::softmax(const View& in, int64_t outer, int64_t n, int64_t inner, const View& out) {
  require_float("softmax", in);
  require_float("softmax", out);
  require_contiguous("softmax", in);
  require_contiguous("softmax", out);
  if (n == 0) return;
  int64_t grain = std::max<int64_t>(1, kParallelElems / std::max<int64_t>(1, n));
  pool().parallel_for(outer * inner, grain, [&](int64_t t0, int64_t t1) {
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t t = t0; t < t1; ++t) {
      int64_t o = t / inner, i = t % inner;
      int64_t base = o * n * inner + i;
      load_f32(in.dtype, element_ptr(in, base), inner, n, row.data());
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < n; ++k) mx = std::max(mx, row[k]);
      if (mx == -std::numeric_limits<float>::infinity()) mx = 0.0f;  // all -inf: yields NaN like NumPy
      double sum = 0.0;
      for (int64_t k = 0; k < n; ++k) {
        row[k] = std::exp(row[k] - mx);
        sum += row[k];
      }
      float inv = static_cast<float>(1.0 / sum);
      for (int64_t k = 0; k < n; ++k) row[k] *= inv;
      store_f32(out.dtype, element_ptr(out, base), inner, n, row.data());
    }
  });
}

}  // namespace tl::cpu
