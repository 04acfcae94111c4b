// Cross-backend test (ggml's test-backend-ops idea): every Kernels method, on random shapes,
// dtypes, strides and broadcasts, runs on the CUDA backend and on the CPU backend from the same
// input bytes; the outputs must agree within the per-op tolerance printed with each failure.
// It also checks the CUDA Backend's own contract (ordering, errors, device-side id errors,
// out-of-memory, teardown from a completion callback). Without a usable CUDA device it prints
// "SKIP: <reason>" and exits 0. `--bench` instead times a SmolLM2-shaped decode step,
// `--bench-kernels` the matrix kernels against the bandwidth and FLOP rooflines; `--only TEXT`
// runs only the test groups whose name contains TEXT (e.g. `--only attention` under a tuning
// variable).
#include <algorithm>
#include <csignal>
#include <execinfo.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/half.h"
#include "runtime/backend.h"
#include "runtime/debug_config.h"
#include "cuda_kernels.h"

namespace {

using namespace tl;

std::mt19937_64 rng(12345);
int failures = 0;
int checks = 0;

int64_t rand_int(int64_t lo, int64_t hi) {  // inclusive
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}
float rand_normal() { return std::normal_distribution<float>(0.0f, 1.0f)(rng); }
bool coin() { return rand_int(0, 1) == 1; }

// Runs `fn` as one command buffer on `b` and waits; returns the command buffer's error.
std::string run_on(Backend& b, std::function<void(Kernels&)> fn) {
  auto error = std::make_shared<std::string>();
  b.submit({[fn](Kernels& k) { fn(k); }}, [error](const std::string& e) { *error = e; });
  b.synchronize();
  return *error;
}

// A tensor living on both backends with identical bytes: base allocation plus a view into it.
struct Dual {
  DType dtype = DType::F32;
  std::vector<int64_t> shape, strides;
  int64_t offset = 0;   // elements from the allocation's start
  size_t bytes = 0;     // of the allocation
  void* ptr[2] = {nullptr, nullptr};
  Backend* be[2] = {nullptr, nullptr};

  Dual() = default;
  Dual(const Dual&) = delete;
  Dual& operator=(const Dual&) = delete;
  ~Dual() {
    for (int s = 0; s < 2; ++s)
      if (ptr[s]) be[s]->deallocate(ptr[s], bytes);
  }

  View view(int side) const {
    View v;
    if (!ptr[side]) return v;  // absent operand
    v.dtype = dtype;
    v.ndim = static_cast<int>(shape.size());
    for (int i = 0; i < v.ndim; ++i) {
      v.shape[i] = shape[i];
      v.strides[i] = strides[i];
    }
    v.data = static_cast<char*>(ptr[side]) + offset * (is_quantized(dtype) ? 1 : block_bytes(dtype));
    return v;
  }
  std::vector<uint8_t> download(int side) const {
    std::vector<uint8_t> h(bytes);
    be[side]->copy_to_host(h.data(), ptr[side], bytes);
    return h;
  }
};

Backend* g_backends[2];  // 0: cpu (reference), 1: cuda

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> st(shape.size());
  int64_t s = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    st[i] = s;
    s *= shape[i];
  }
  return st;
}

void fill_random(DType t, std::vector<uint8_t>& h, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    switch (t) {
      case DType::F32: { float f = rand_normal(); std::memcpy(&h[i * 4], &f, 4); break; }
      case DType::F16: { uint16_t v = cpu::f32_to_f16(rand_normal()); std::memcpy(&h[i * 2], &v, 2); break; }
      case DType::BF16: { uint16_t v = cpu::f32_to_bf16(rand_normal()); std::memcpy(&h[i * 2], &v, 2); break; }
      case DType::I32: { int32_t v = static_cast<int32_t>(rand_int(-6, 6)); std::memcpy(&h[i * 4], &v, 4); break; }
      case DType::I64: { int64_t v = rand_int(-6, 6); std::memcpy(&h[i * 8], &v, 8); break; }
      case DType::Bool: h[i] = static_cast<uint8_t>(rand_int(0, 1)); break;
      default: h[i] = static_cast<uint8_t>(rand_int(0, 255)); break;
    }
  }
}

// Byte offsets of the f16 scale fields inside one block, so random blocks get sane scales.
std::vector<int> scale_offsets(DType t) {
  switch (t) {
    case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: return {0};
    case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: return {0, 2};
    case DType::Q6_K: return {208};
    default: return {};
  }
}

// Allocates `alloc_elems` elements (or bytes for quantized), fills them randomly, uploads the
// same bytes to both backends, and describes the view (shape, strides, offset).
std::unique_ptr<Dual> make_dual(DType t, std::vector<int64_t> shape, std::vector<int64_t> strides,
                                int64_t offset, int64_t alloc_elems) {
  auto d = std::make_unique<Dual>();
  d->dtype = t;
  d->shape = std::move(shape);
  d->strides = std::move(strides);
  d->offset = offset;
  d->bytes = is_quantized(t) ? static_cast<size_t>(alloc_elems)
                             : static_cast<size_t>(alloc_elems * block_bytes(t));
  if (d->bytes == 0) d->bytes = 8;
  std::vector<uint8_t> h(d->bytes);
  fill_random(t, h, is_quantized(t) ? static_cast<int64_t>(d->bytes) : alloc_elems);
  if (is_quantized(t)) {
    const int64_t bb = block_bytes(t);
    for (int64_t blk = 0; blk + bb <= static_cast<int64_t>(d->bytes); blk += bb) {
      for (int off : scale_offsets(t)) {
        uint16_t v = cpu::f32_to_f16(std::uniform_real_distribution<float>(0.002f, 0.05f)(rng));
        std::memcpy(&h[blk + off], &v, 2);
      }
    }
  }
  for (int s = 0; s < 2; ++s) {
    d->be[s] = g_backends[s];
    d->ptr[s] = g_backends[s]->allocate(d->bytes);
    g_backends[s]->copy_to_device(d->ptr[s], h.data(), d->bytes);
  }
  return d;
}

std::unique_ptr<Dual> contiguous(DType t, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  auto st = contiguous_strides(shape);
  return make_dual(t, shape, st, 0, n);
}

// A non-contiguous view of `shape`: a random permutation of a contiguous buffer, an offset,
// and (sometimes) every other element along the last dim.
std::unique_ptr<Dual> strided(DType t, std::vector<int64_t> shape) {
  const int nd = static_cast<int>(shape.size());
  std::vector<int> perm(nd);
  for (int i = 0; i < nd; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  const int64_t step = coin() ? 2 : 1;
  std::vector<int64_t> phys(nd);
  for (int i = 0; i < nd; ++i) phys[i] = shape[perm[i]];
  if (nd > 0) phys[nd - 1] *= step;
  auto pst = contiguous_strides(phys);
  std::vector<int64_t> st(nd);
  for (int i = 0; i < nd; ++i) st[perm[i]] = pst[i] * (i == nd - 1 ? step : 1);
  int64_t n = 1;
  for (int64_t s : phys) n *= s;
  const int64_t offset = rand_int(0, 3);
  return make_dual(t, shape, st, offset, n + offset);
}

// Sets stride 0 on some dims (broadcast) of an input view; the buffer stays valid.
void broadcast_some(Dual& d) {
  for (size_t i = 0; i < d.shape.size(); ++i)
    if (rand_int(0, 3) == 0) d.strides[i] = 0;
}

double element(const std::vector<uint8_t>& h, DType t, int64_t i) {
  switch (t) {
    case DType::F32: { float f; std::memcpy(&f, &h[i * 4], 4); return f; }
    case DType::F16: { uint16_t v; std::memcpy(&v, &h[i * 2], 2); return cpu::f16_to_f32(v); }
    case DType::BF16: { uint16_t v; std::memcpy(&v, &h[i * 2], 2); return cpu::bf16_to_f32(v); }
    case DType::I32: { int32_t v; std::memcpy(&v, &h[i * 4], 4); return v; }
    case DType::I64: { int64_t v; std::memcpy(&v, &h[i * 8], 8); return static_cast<double>(v); }
    case DType::Bool: return h[i];
    default: return 0;
  }
}

// Compares every element the view `d` covers on both sides: |gpu - cpu| <= atol + rtol*|cpu|,
// NaN equals NaN, infinities must match exactly.
// `arel` adds arel * max|cpu| to atol (sums whose terms cancel keep the error of the terms).
void compare(const std::string& what, const Dual& d, double rtol, double atol, double arel = 0) {
  ++checks;
  auto hc = d.download(0), hg = d.download(1);
  const int nd = static_cast<int>(d.shape.size());
  int64_t n = 1;
  for (int64_t s : d.shape) n *= s;
  if (arel > 0) {
    double mx = 0;
    for (int64_t i = 0; i < n; ++i) {
      int64_t rem = i, off = d.offset;
      for (int k = nd - 1; k >= 0; --k) {
        off += (rem % d.shape[k]) * d.strides[k];
        rem /= d.shape[k];
      }
      const double c = element(hc, d.dtype, off);
      if (std::isfinite(c)) mx = std::max(mx, std::fabs(c));
    }
    atol += arel * mx;
  }
  double worst = 0;
  int64_t bad = 0, first_bad = -1;
  double bc = 0, bg = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, off = d.offset;
    for (int k = nd - 1; k >= 0; --k) {
      off += (rem % d.shape[k]) * d.strides[k];
      rem /= d.shape[k];
    }
    const double c = element(hc, d.dtype, off), g = element(hg, d.dtype, off);
    bool ok;
    if (std::isnan(c) || std::isnan(g)) ok = std::isnan(c) && std::isnan(g);
    else if (std::isinf(c) || std::isinf(g)) ok = c == g;
    else {
      const double err = std::fabs(g - c);
      worst = std::max(worst, err / (atol + rtol * std::fabs(c)));
      ok = err <= atol + rtol * std::fabs(c);
    }
    if (!ok) {
      if (first_bad < 0) { first_bad = i; bc = c; bg = g; }
      ++bad;
    }
  }
  if (bad) {
    ++failures;
    std::printf("FAIL %s: %lld of %lld elements differ; first at %lld: cpu %.9g cuda %.9g "
                "(rtol %g atol %g)\n", what.c_str(), static_cast<long long>(bad),
                static_cast<long long>(n), static_cast<long long>(first_bad), bc, bg, rtol, atol);
  }
}

// Runs `call(kernels, side)` on both backends; both must succeed (or both fail when
// expect_error) before outputs are compared.
bool run_both(const std::string& what, const std::function<void(Kernels&, int)>& call,
              bool expect_error = false) {
  std::string err[2];
  for (int s = 0; s < 2; ++s) err[s] = run_on(*g_backends[s], [&call, s](Kernels& k) { call(k, s); });
  if (expect_error) {
    ++checks;
    if (err[0].empty() || err[1].empty()) {
      ++failures;
      std::printf("FAIL %s: expected an error on both; cpu '%s' cuda '%s'\n", what.c_str(),
                  err[0].c_str(), err[1].c_str());
    }
    return false;
  }
  if (!err[0].empty() || !err[1].empty()) {
    ++checks;
    ++failures;
    std::printf("FAIL %s: cpu error '%s', cuda error '%s'\n", what.c_str(), err[0].c_str(),
                err[1].c_str());
    return false;
  }
  return true;
}

std::vector<int64_t> random_shape(int max_nd, int64_t max_dim) {
  std::vector<int64_t> s(rand_int(1, max_nd));
  for (auto& d : s) d = rand_int(1, max_dim);
  return s;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

const DType kPlain[] = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::Bool};
const DType kFloats[] = {DType::F32, DType::F16, DType::BF16};
const DType kQuant[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                        DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};

double tol_for(DType t) { return t == DType::BF16 ? 1e-2 : t == DType::F16 ? 2e-3 : 2e-5; }

void test_binary() {
  for (int op_i = 0; op_i <= static_cast<int>(BinaryOp::LogicalOr); ++op_i) {
    const BinaryOp op = static_cast<BinaryOp>(op_i);
    const bool cmp = op_i >= static_cast<int>(BinaryOp::Eq);
    for (int rep = 0; rep < 6; ++rep) {
      DType ta = kPlain[rand_int(0, 4)], tb = kPlain[rand_int(0, 4)];
      DType to = cmp ? DType::Bool : (is_floating(ta) || is_floating(tb) ? DType::F32 : DType::I64);
      if (rep == 5) to = is_floating(to) ? DType::F16 : to;
      auto shape = random_shape(4, 7);
      auto a = coin() ? strided(ta, shape) : contiguous(ta, shape);
      auto b = strided(tb, shape);
      broadcast_some(*b);
      auto o = contiguous(to, shape);
      const std::string what = std::string("binary op ") + std::to_string(op_i) + " " +
                               dtype_name(ta) + "," + dtype_name(tb) + "->" + dtype_name(to) +
                               " " + shape_str(shape);
      if (!run_both(what, [&](Kernels& k, int s) { k.binary(op, a->view(s), b->view(s), o->view(s)); }))
        continue;
      const double rt = op == BinaryOp::Pow ? 1e-4 : std::max(tol_for(to), 1e-6);
      compare(what, *o, rt, rt * 1e-2);
    }
    for (int rep = 0; rep < 3; ++rep) {
      DType ta = kPlain[rand_int(0, 4)];
      const double sc = rep == 0 ? 2.0 : (rep == 1 ? -1.5 : 3.0);
      DType to = cmp ? DType::Bool : (is_floating(ta) || rep == 1 ? DType::F32 : DType::I64);
      auto shape = random_shape(3, 9);
      auto a = strided(ta, shape);
      auto o = contiguous(to, shape);
      const bool first = coin();
      const std::string what = std::string("binary_scalar op ") + std::to_string(op_i) + " " +
                               dtype_name(ta) + " s=" + std::to_string(sc) + (first ? " first" : "");
      if (!run_both(what, [&](Kernels& k, int s) { k.binary_scalar(op, a->view(s), sc, first, o->view(s)); }))
        continue;
      compare(what, *o, 1e-5, 1e-6);
    }
  }
}

void test_unary() {
  for (int op_i = 0; op_i <= static_cast<int>(UnaryOp::Step); ++op_i) {
    const UnaryOp op = static_cast<UnaryOp>(op_i);
    for (int rep = 0; rep < 4; ++rep) {
      DType ta = rep == 3 ? DType::I64 : kFloats[rand_int(0, 2)];
      DType to = op == UnaryOp::LogicalNot ? DType::Bool : (rep == 3 ? DType::I64 : (rep == 2 ? DType::F16 : DType::F32));
      auto shape = random_shape(4, 8);
      auto a = strided(ta, shape);
      auto o = contiguous(to, shape);
      const std::string what = std::string("unary op ") + std::to_string(op_i) + " " +
                               dtype_name(ta) + "->" + dtype_name(to) + " " + shape_str(shape);
      if (!run_both(what, [&](Kernels& k, int s) { k.unary(op, a->view(s), o->view(s)); })) continue;
      compare(what, *o, std::max(tol_for(to), 2e-6), 2e-6);
    }
  }
}

void test_copy_fill_arange_where() {
  for (DType ts : kPlain) {
    for (DType td : kPlain) {
      auto shape = random_shape(4, 6);
      auto src = strided(ts, shape);
      auto dst = strided(td, shape);
      const std::string what = std::string("copy ") + dtype_name(ts) + "->" + dtype_name(td) + " " + shape_str(shape);
      if (!run_both(what, [&](Kernels& k, int s) { k.copy(src->view(s), dst->view(s)); })) continue;
      compare(what, *dst, tol_for(td), 0);
    }
  }
  for (DType t : kPlain) {
    auto shape = random_shape(4, 6);
    auto o = strided(t, shape);
    const double v = 3.25;
    const std::string what = std::string("fill ") + dtype_name(t);
    if (run_both(what, [&](Kernels& k, int s) { k.fill(o->view(s), v); })) compare(what, *o, 0, 0);
  }
  for (DType t : {DType::F32, DType::I64, DType::I32, DType::F16}) {
    const int64_t n = rand_int(1, 3000);
    auto o = contiguous(t, {n});
    const std::string what = std::string("arange ") + dtype_name(t);
    if (run_both(what, [&](Kernels& k, int s) { k.arange(o->view(s), -3.0, 0.5); })) compare(what, *o, 1e-6, 0);
  }
  for (int rep = 0; rep < 6; ++rep) {
    auto shape = random_shape(4, 6);
    DType ta = kPlain[rand_int(0, 4)], tb = kPlain[rand_int(0, 4)];
    DType to = is_floating(ta) || is_floating(tb) ? DType::F32 : DType::I64;
    auto c = strided(DType::Bool, shape);
    broadcast_some(*c);
    auto a = strided(ta, shape);
    auto b = contiguous(tb, shape);
    broadcast_some(*b);
    auto o = contiguous(to, shape);
    const std::string what = std::string("where ") + dtype_name(ta) + "," + dtype_name(tb);
    if (run_both(what, [&](Kernels& k, int s) { k.where(c->view(s), a->view(s), b->view(s), o->view(s)); }))
      compare(what, *o, 0, 0);
  }
}

void test_reduce_softmax() {
  for (int op_i = 0; op_i <= static_cast<int>(ReduceOp::ArgMin); ++op_i) {
    const ReduceOp op = static_cast<ReduceOp>(op_i);
    const bool arg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
    for (int rep = 0; rep < 6; ++rep) {
      const int64_t outer = rand_int(1, 5), n = rep == 5 ? rand_int(8192, 60000) : rand_int(1, 300);
      const int64_t inner = rep % 2 ? 1 : rand_int(1, 40);
      DType ti = rep == 4 ? DType::I64 : kFloats[rand_int(0, 1)];
      DType to = arg ? DType::I64 : (ti == DType::I64 && op != ReduceOp::Mean ? DType::I64 : DType::F32);
      auto in = contiguous(ti, {outer, n, inner});
      auto o = contiguous(to, {outer, inner});
      const std::string what = std::string("reduce op ") + std::to_string(op_i) + " " +
                               dtype_name(ti) + " [" + std::to_string(outer) + "," +
                               std::to_string(n) + "," + std::to_string(inner) + "]";
      if (!run_both(what, [&](Kernels& k, int s) { k.reduce(op, in->view(s), outer, n, inner, o->view(s)); }))
        continue;
      compare(what, *o, arg ? 0 : 1e-4, arg ? 0 : 1e-4 * std::sqrt(static_cast<double>(n)));
    }
  }
  for (int rep = 0; rep < 6; ++rep) {
    const int64_t outer = rand_int(1, 6), n = rep == 5 ? rand_int(8192, 50000) : rand_int(1, 700);
    const int64_t inner = rep % 2 ? 1 : rand_int(2, 9);
    DType t = kFloats[rand_int(0, 1)];
    auto in = contiguous(t, {outer, n, inner});
    auto o = contiguous(DType::F32, {outer, n, inner});
    const std::string what = std::string("softmax ") + dtype_name(t) + " n=" + std::to_string(n) +
                             " inner=" + std::to_string(inner);
    if (run_both(what, [&](Kernels& k, int s) { k.softmax(in->view(s), outer, n, inner, o->view(s)); }))
      compare(what, *o, 1e-4, 1e-7);
  }
}

void test_matmul() {
  for (int rep = 0; rep < 12; ++rep) {
    const int64_t B = rand_int(1, 3), M = rand_int(1, 90), K = rand_int(1, 150), N = rand_int(1, 90);
    DType ta = kFloats[rand_int(0, 2)], tb = kFloats[rand_int(0, 1)];
    DType to = rep % 4 == 3 ? DType::F16 : DType::F32;
    auto a = coin() ? contiguous(ta, {B, M, K}) : strided(ta, {B, M, K});
    auto b = strided(tb, {B, K, N});
    if (rep % 3 == 0) b->strides[0] = 0;  // broadcast batch
    auto o = contiguous(to, {B, M, N});
    const std::string what = std::string("matmul ") + dtype_name(ta) + "x" + dtype_name(tb) + "->" +
                             dtype_name(to) + " " + shape_str({B, M, K, N});
    if (run_both(what, [&](Kernels& k, int s) { k.matmul(a->view(s), b->view(s), o->view(s)); }))
      compare(what, *o, to == DType::F16 ? 2e-3 : 1e-4, 1e-6, 1e-5);
  }
}

void test_linear() {
  std::vector<DType> types(std::begin(kFloats), std::end(kFloats));
  types.insert(types.end(), std::begin(kQuant), std::end(kQuant));
  for (DType wt : types) {
    // M = 2 and 5: rows long enough for 32 lanes per column in the matrix-vector kernel
    // (K >= 1024), the weight starting one block into its allocation (another 4-byte phase of
    // the 2-byte-aligned formats); M = 70 and 200: cuBLAS where it is loaded.
    for (int64_t M : {1, 2, 3, 5, 8, 9, 70, 200}) {
      const int64_t blk = block_elems(wt);
      const bool long_rows = M == 2 || M == 5;
      const int64_t K = !is_quantized(wt) ? rand_int(1, long_rows ? 3000 : 300)
                        : long_rows      ? blk * (blk == 256 ? rand_int(4, 10) : rand_int(32, 80))
                                         : blk * rand_int(1, blk == 256 ? 3 : 20);
      const int64_t N = rand_int(1, 140);
      const int64_t w_off = is_quantized(wt) && long_rows ? block_bytes(wt) : 0;
      auto x = contiguous(DType::F32, {M, K});
      auto w = is_quantized(wt) ? make_dual(wt, {N, K}, {K, 1}, w_off,
                                            static_cast<int64_t>(row_bytes(wt, K)) * N + w_off)
                                : contiguous(wt, {N, K});
      auto o = contiguous(DType::F32, {M, N});
      const std::string what = std::string("linear w=") + dtype_name(wt) + " M=" + std::to_string(M) +
                               " K=" + std::to_string(K) + " N=" + std::to_string(N);
      // More than 8 rows with a quantized or f16 weight: the tensor cores, x rounded to f16.
      const bool half = M > 8 && (is_quantized(wt) || wt == DType::F16);
      if (run_both(what, [&](Kernels& k, int s) { k.linear(x->view(s), w->view(s), o->view(s)); }))
        compare(what, *o, half ? 1e-3 : 1e-4, 1e-6, half ? 2e-3 : 1e-5);
    }
  }
  // Prompt-sized products on the tensor cores (cuBLAS; TL's f16 kernel with TL_CUDA_OWN_GEMM=2 or without cuBLAS):
  // 64 x 64 blocks with K split over 2 to 8 of them, 128 x 128 blocks (the last case: enough of
  // them to fill an H100 twice), edges in M and N, K = 2048 and one not a multiple of 32.
  struct Big { DType wt; int64_t M, K, N; };
  for (const Big& b : {Big{DType::Q4_K, 300, 2048, 700}, Big{DType::F16, 131, 2056, 333},
                       Big{DType::Q8_0, 512, 576, 1536}, Big{DType::Q4_1, 77, 1568, 65},
                       Big{DType::Q4_K, 1000, 512, 4400}}) {
    auto x = contiguous(DType::F32, {b.M, b.K});
    auto w = is_quantized(b.wt) ? make_dual(b.wt, {b.N, b.K}, {b.K, 1}, 0, static_cast<int64_t>(row_bytes(b.wt, b.K)) * b.N)
                                : contiguous(b.wt, {b.N, b.K});
    auto o = contiguous(DType::F32, {b.M, b.N});
    const std::string what = std::string("linear (prompt-sized) w=") + dtype_name(b.wt) + " M=" + std::to_string(b.M) +
                             " K=" + std::to_string(b.K) + " N=" + std::to_string(b.N);
    if (run_both(what, [&](Kernels& k, int s) { k.linear(x->view(s), w->view(s), o->view(s)); }))
      compare(what, *o, 1e-3, 1e-6, 2e-3);
  }
}

// The tensor-core linear (more than 8 rows, a quantized or f16 weight) on rows of x that f16
// cannot hold as they are: rows reaching 2^15 up to 1e30 (divided by a power of two, multiplied
// back), rows of tiny values, one row with an infinity (f16 weight: it must stay inf / NaN as on
// the CPU). Each row is checked within 2e-3 of its own largest |value| (a global bound would let
// the small rows through).
void test_linear_half_range() {
  const float row_scale[] = {1.0f, 1e5f, 3.3e4f, 1e30f, 1e-6f, 65504.0f, 1.0f, 7.0e4f, 1.0f, 2.0f, 1e3f, 1.0f};
  const int64_t M = sizeof(row_scale) / sizeof(row_scale[0]), K = 512, N = 40;
  for (DType wt : {DType::Q8_0, DType::Q4_K, DType::Q4_1, DType::F16}) {
    auto x = contiguous(DType::F32, {M, K});
    std::vector<float> hx(static_cast<size_t>(M * K));
    for (auto& v : hx) v = rand_normal();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) hx[m * K + k] *= row_scale[m];
    if (wt == DType::F16) hx[6 * K + 7] = INFINITY;
    for (int s = 0; s < 2; ++s) g_backends[s]->copy_to_device(x->ptr[s], hx.data(), hx.size() * 4);
    auto w = is_quantized(wt) ? make_dual(wt, {N, K}, {K, 1}, 0, static_cast<int64_t>(row_bytes(wt, K)) * N)
                              : contiguous(wt, {N, K});
    auto o = contiguous(DType::F32, {M, N});
    const std::string what = std::string("linear (f16 range) w=") + dtype_name(wt);
    if (!run_both(what, [&](Kernels& k, int s) { k.linear(x->view(s), w->view(s), o->view(s)); })) continue;
    ++checks;
    auto hc = o->download(0), hg = o->download(1);
    int64_t bad = 0;
    for (int64_t m = 0; m < M; ++m) {
      double mx = 0;
      for (int64_t n = 0; n < N; ++n) {
        const double c = element(hc, DType::F32, m * N + n);
        if (std::isfinite(c)) mx = std::max(mx, std::fabs(c));
      }
      for (int64_t n = 0; n < N; ++n) {
        const double c = element(hc, DType::F32, m * N + n), g = element(hg, DType::F32, m * N + n);
        bool ok;
        if (std::isnan(c) || std::isnan(g)) ok = std::isnan(c) && std::isnan(g);
        else if (std::isinf(c) || std::isinf(g)) ok = c == g;
        else ok = std::fabs(g - c) <= 2e-3 * mx + 1e-30;
        if (!ok && bad++ == 0)
          std::printf("FAIL %s: row %lld col %lld: cpu %.9g cuda %.9g (row max %.6g)\n", what.c_str(),
                      static_cast<long long>(m), static_cast<long long>(n), c, g, mx);
      }
    }
    if (bad) ++failures;
  }
}

// One row against a tall weight (N = 9,000 > 2 blocks of columns per multiprocessor): the
// matrix-vector kernel then takes four columns per lane group (fused.cu).
void test_linear_tall() {
  for (DType wt : {DType::Q4_0, DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    const int64_t M = 1, N = 9000, K = block_elems(wt) == 256 ? 1280 : 1024;
    auto x = contiguous(DType::F32, {M, K});
    auto w = make_dual(wt, {N, K}, {K, 1}, 0, static_cast<int64_t>(row_bytes(wt, K)) * N);
    auto o = contiguous(DType::F32, {M, N});
    const std::string what = std::string("linear (tall) w=") + dtype_name(wt) + " K=" + std::to_string(K) +
                             " N=" + std::to_string(N);
    if (run_both(what, [&](Kernels& k, int s) { k.linear(x->view(s), w->view(s), o->view(s)); }))
      compare(what, *o, 1e-4, 1e-6, 1e-5);
  }
}

// fused_linear on one row and on a few (the decode shapes): each prologue, with and without a
// residual addend, the weight rows of the real models' widths (K = 576, 2048, 8192 for the K-quants'
// 256-element blocks and the 32-element formats alike) and N taking four columns per lane
// group where K >= 1024 and N > 32 x the multiprocessor count (fused.cu's four-column kernel), one
// column below that.
void test_fused_linear() {
  const LinearPrologue pros[] = {LinearPrologue::None, LinearPrologue::RmsNorm, LinearPrologue::SwiGLU};
  for (DType wt : kQuant) {
    for (int64_t K : {576, 2048, 8192}) {
      if (K % block_elems(wt) != 0) continue;
      for (LinearPrologue pro : pros) {
        for (int64_t M : {1, 3}) {
          const bool with_add = coin();
          const int64_t N = K == 8192 ? rand_int(100, 700) : rand_int(1000, 6000);
          const int64_t in_cols = pro == LinearPrologue::SwiGLU ? 2 * K : K;
          auto x = contiguous(DType::F32, {M, in_cols});
          auto w = make_dual(wt, {N, K}, {K, 1}, 0, static_cast<int64_t>(row_bytes(wt, K)) * N);
          auto nw = contiguous(DType::F32, {K});
          auto add = contiguous(DType::F32, {M, N});
          auto scratch = contiguous(DType::F32, {M, K});
          auto o = contiguous(DType::F32, {M, N});
          const std::string what = std::string("fused_linear w=") + dtype_name(wt) + " prologue=" +
                                   std::to_string(static_cast<int>(pro)) + (with_add ? " +addend" : "") +
                                   " M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N);
          if (run_both(what, [&](Kernels& k, int s) {
                k.fused_linear(x->view(s), w->view(s), pro, pro == LinearPrologue::RmsNorm ? nw->view(s) : View{},
                               1e-5f, with_add ? add->view(s) : View{},
                               pro == LinearPrologue::None ? View{} : scratch->view(s), o->view(s));
              }))
            compare(what, *o, 1e-4, 1e-5, 1e-5);
        }
      }
    }
  }
}

// linear_q8_activations and fused_linear_q8_activations (8-bit activations, --fast): the CPU runs
// its 8-bit kernel (the fused form as its three kernels, Kernels' default), CUDA its one kernel
// (fused.cu). Both quantize x alike, so without a prologue they differ only in the order of the
// f32 sums; after one, the two prepared rows may differ in a last bit and an element then round to
// the next integer (a few 1e-3 of the row's largest result at most). Shapes: the real models'
// widths; N large enough for four columns per lane group on one row; 11 rows in chunks (K = 8192:
// three rows a block). Then on CUDA alone every row of a many-row product must equal its one-row
// product bit for bit (what a batched decode step and a prompt piece rely on). Q5_1 has no 8-bit
// path on either backend (the exact linear).
void test_q8_activations() {
  const LinearPrologue pros[] = {LinearPrologue::None, LinearPrologue::RmsNorm, LinearPrologue::SwiGLU};
  for (DType wt : kQuant) {
    for (int64_t K : {576, 2048, 8192}) {
      if (K % block_elems(wt) != 0) continue;
      for (LinearPrologue pro : pros) {
        for (int64_t M : {1, 3, 11}) {
          const bool with_add = coin();
          const int64_t N = K == 8192 ? rand_int(100, 700) : M == 1 && coin() ? rand_int(5000, 9000) : rand_int(50, 1500);
          const int64_t in_cols = pro == LinearPrologue::SwiGLU ? 2 * K : K;
          auto x = contiguous(DType::F32, {M, in_cols});
          auto w = make_dual(wt, {N, K}, {K, 1}, 0, static_cast<int64_t>(row_bytes(wt, K)) * N);
          auto nw = contiguous(DType::F32, {K});
          auto add = contiguous(DType::F32, {M, N});
          auto scratch = contiguous(DType::F32, {M, K});
          auto o = contiguous(DType::F32, {M, N});
          const std::string what = std::string("fused_linear_q8_activations w=") + dtype_name(wt) + " prologue=" +
                                   std::to_string(static_cast<int>(pro)) + (with_add ? " +addend" : "") +
                                   " M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N);
          auto call = [&](Kernels& k, int s, const View& xv, const View& av, const View& ov) {
            if (pro == LinearPrologue::None && !with_add) {
              k.linear_q8_activations(xv, w->view(s), ov);
            } else {
              k.fused_linear_q8_activations(xv, w->view(s), pro, pro == LinearPrologue::RmsNorm ? nw->view(s) : View{},
                                            1e-5f, with_add ? av : View{},
                                            pro == LinearPrologue::None ? View{} : scratch->view(s), ov);
            }
          };
          if (!run_both(what, [&](Kernels& k, int s) { call(k, s, x->view(s), add->view(s), o->view(s)); })) continue;
          // (Q5_1 with more than 8 rows: the exact product on the tensor cores, x rounded to f16)
          compare(what, *o, 1e-4, 1e-5, pro == LinearPrologue::None && !(wt == DType::Q5_1 && M > 8) ? 1e-5 : 3e-3);
          if (M == 1 || wt == DType::Q5_1) continue;  // Q5_1: no 8-bit path (exact on both backends)
          ++checks;
          const auto whole = o->download(1);
          auto one = contiguous(DType::F32, {1, N});
          int64_t bad_rows = 0;
          for (int64_t m = 0; m < M; ++m) {
            View xv = x->view(1), av = add->view(1), ov = one->view(1);
            xv.data = static_cast<float*>(xv.data) + m * in_cols;
            xv.shape[0] = 1;
            av.data = static_cast<float*>(av.data) + m * N;
            av.shape[0] = 1;
            const std::string err = run_on(*g_backends[1], [&](Kernels& k) { call(k, 1, xv, av, ov); });
            const auto row = one->download(1);
            if (!err.empty() || std::memcmp(row.data(), whole.data() + m * N * 4, static_cast<size_t>(N) * 4) != 0) ++bad_rows;
          }
          if (bad_rows) {
            ++failures;
            std::printf("FAIL %s: %lld rows differ from their one-row product\n", what.c_str(),
                        static_cast<long long>(bad_rows));
          }
        }
      }
    }
  }
}

// expert_linear: every weight type, decode (T = 1) and prompt shapes, x shared by a token's
// experts (X = 1) or one row per expert (X = k); ids read on the device; a bad id is an error.
void test_expert_linear() {
  std::vector<DType> types(std::begin(kFloats), std::end(kFloats));
  types.insert(types.end(), std::begin(kQuant), std::end(kQuant));
  for (DType wt : types) {
    const int64_t E = rand_int(2, 6), k = rand_int(1, E), T = coin() ? 1 : rand_int(2, 12);
    const int64_t K = is_quantized(wt) ? block_elems(wt) * rand_int(1, 3) : rand_int(1, 100);
    const int64_t N = rand_int(1, 70), X = coin() ? 1 : k;
    auto x = contiguous(DType::F32, {T, X, K});
    auto w = make_dual(wt, {E * N, K}, {K, 1}, 0, static_cast<int64_t>(row_bytes(wt, K)) * E * N);
    DType tid = coin() ? DType::I32 : DType::I64;
    auto ids = contiguous(tid, {T, k});
    std::vector<uint8_t> h(T * k * block_bytes(tid));
    for (int64_t i = 0; i < T * k; ++i) {
      int64_t v = rand_int(0, E - 1);
      if (tid == DType::I32) { int32_t v32 = static_cast<int32_t>(v); std::memcpy(&h[i * 4], &v32, 4); }
      else std::memcpy(&h[i * 8], &v, 8);
    }
    for (int s = 0; s < 2; ++s) g_backends[s]->copy_to_device(ids->ptr[s], h.data(), h.size());
    auto o = contiguous(DType::F32, {T, k, N});
    const std::string what = std::string("expert_linear w=") + dtype_name(wt) + " E=" + std::to_string(E) +
                             " k=" + std::to_string(k) + " T=" + std::to_string(T) + " K=" + std::to_string(K) +
                             " N=" + std::to_string(N) + " X=" + std::to_string(X);
    if (run_both(what, [&](Kernels& kn, int s) { kn.expert_linear(x->view(s), w->view(s), ids->view(s), E, o->view(s)); }))
      compare(what, *o, 1e-4, 1e-6, 1e-5);
    int64_t badv = E + rand_int(0, 5);
    if (tid == DType::I32) { int32_t v32 = static_cast<int32_t>(badv); std::memcpy(&h[0], &v32, 4); }
    else std::memcpy(&h[0], &badv, 8);
    for (int s = 0; s < 2; ++s) g_backends[s]->copy_to_device(ids->ptr[s], h.data(), h.size());
    run_both(what + " (id out of range)",
             [&](Kernels& kn, int s) { kn.expert_linear(x->view(s), w->view(s), ids->view(s), E, o->view(s)); }, true);
  }
}

void test_gather() {
  std::vector<DType> types(std::begin(kFloats), std::end(kFloats));
  types.insert(types.end(), std::begin(kQuant), std::end(kQuant));
  for (DType tt : types) {
    const int64_t V = rand_int(1, 60);
    const int64_t D = is_quantized(tt) ? block_elems(tt) * rand_int(1, 3) : rand_int(1, 200);
    const int64_t n = rand_int(1, 40);
    auto table = is_quantized(tt) ? make_dual(tt, {V, D}, {D, 1}, 0, static_cast<int64_t>(row_bytes(tt, D)) * V)
                                  : contiguous(tt, {V, D});
    DType tid = coin() ? DType::I32 : DType::I64;
    auto ids = contiguous(tid, {n});
    std::vector<uint8_t> h(n * block_bytes(tid));
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = rand_int(0, V - 1);
      if (tid == DType::I32) { int32_t v32 = static_cast<int32_t>(v); std::memcpy(&h[i * 4], &v32, 4); }
      else std::memcpy(&h[i * 8], &v, 8);
    }
    for (int s = 0; s < 2; ++s) g_backends[s]->copy_to_device(ids->ptr[s], h.data(), h.size());
    DType to = coin() ? DType::F32 : DType::F16;
    auto o = contiguous(to, {n, D});
    const std::string what = std::string("gather_rows ") + dtype_name(tt) + " V=" + std::to_string(V) +
                             " D=" + std::to_string(D) + " ids " + dtype_name(tid);
    if (run_both(what, [&](Kernels& k, int s) { k.gather_rows(table->view(s), ids->view(s), o->view(s)); }))
      compare(what, *o, tol_for(to), 1e-7);
    // An id out of range is an error of the command buffer on both backends.
    int64_t badv = V + rand_int(0, 5);
    if (tid == DType::I32) { int32_t v32 = static_cast<int32_t>(badv); std::memcpy(&h[0], &v32, 4); }
    else std::memcpy(&h[0], &badv, 8);
    for (int s = 0; s < 2; ++s) g_backends[s]->copy_to_device(ids->ptr[s], h.data(), h.size());
    run_both(what + " (id out of range)",
             [&](Kernels& k, int s) { k.gather_rows(table->view(s), ids->view(s), o->view(s)); }, true);
  }
}

// scatter_add_rows (repeated ids add in id order on both) and the fused optimizer step (the CUDA
// kernel rounds like the CPU one: no FMA contraction), several steps in place.
void test_training() {
  for (int rep = 0; rep < 4; ++rep) {
    const int64_t V = rand_int(1, 30), D = rand_int(1, 300), n = rand_int(1, 200);
    DType tid = coin() ? DType::I32 : DType::I64;
    auto ids = contiguous(tid, {n});
    std::vector<uint8_t> h(n * block_bytes(tid));
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = rand_int(0, std::min<int64_t>(V - 1, 4));  // many repeats
      if (tid == DType::I32) { int32_t v32 = static_cast<int32_t>(v); std::memcpy(&h[i * 4], &v32, 4); }
      else std::memcpy(&h[i * 8], &v, 8);
    }
    for (int s = 0; s < 2; ++s) g_backends[s]->copy_to_device(ids->ptr[s], h.data(), h.size());
    auto src = contiguous(DType::F32, {n, D});
    auto out = contiguous(DType::F32, {V, D});
    const std::string what = "scatter_add_rows V=" + std::to_string(V) + " D=" + std::to_string(D) +
                             " n=" + std::to_string(n);
    if (run_both(what, [&](Kernels& k, int s) { k.scatter_add_rows(ids->view(s), src->view(s), out->view(s)); }))
      compare(what, *out, 0, 0);
    int64_t badv = V + rand_int(0, 5);
    if (tid == DType::I32) { int32_t v32 = static_cast<int32_t>(badv); std::memcpy(&h[0], &v32, 4); }
    else std::memcpy(&h[0], &badv, 8);
    for (int s = 0; s < 2; ++s) g_backends[s]->copy_to_device(ids->ptr[s], h.data(), h.size());
    run_both(what + " (id out of range)",
             [&](Kernels& k, int s) { k.scatter_add_rows(ids->view(s), src->view(s), out->view(s)); }, true);
  }
  for (int kind = 0; kind < 4; ++kind) {
    const int64_t n = rand_int(1, 5000);
    auto p = contiguous(DType::F32, {n});
    auto g = contiguous(DType::F32, {n});
    auto m = contiguous(DType::F32, {n});
    auto v = contiguous(DType::F32, {n});
    std::vector<uint8_t> hv = v->download(0);
    for (int64_t i = 0; i < n; ++i) {
      float f;
      std::memcpy(&f, &hv[i * 4], 4);
      f = std::fabs(f);
      std::memcpy(&hv[i * 4], &f, 4);
    }
    for (int s = 0; s < 2; ++s) g_backends[s]->copy_to_device(v->ptr[s], hv.data(), hv.size());
    OptimizerStep st;
    st.kind = kind < 2 ? OptimizerKind::Adam : OptimizerKind::Sgd;
    st.decoupled = kind == 1;
    st.nesterov = kind == 3;
    st.step = 0.01f / (1.0f - 0.9f);
    st.decay = 1.0f - 0.01f * 0.1f;
    st.weight_decay = kind == 1 ? 0.0f : 0.05f;
    st.beta1 = 0.9f;
    st.one_minus_beta1 = 0.1f;
    st.beta2 = 0.999f;
    st.one_minus_beta2 = 0.001f;
    st.bias2 = 0.001f;
    st.eps = 1e-8f;
    st.momentum = 0.9f;
    View none;
    const bool adam = st.kind == OptimizerKind::Adam;
    const std::string what = std::string("optimizer_update ") + (adam ? (st.decoupled ? "adamw" : "adam") : "sgd") +
                             " n=" + std::to_string(n);
    bool ok = true;
    for (int step = 0; step < 3 && ok; ++step)
      ok = run_both(what, [&](Kernels& k, int s) {
        k.optimizer_update(st, p->view(s), g->view(s), m->view(s), adam ? v->view(s) : none);
      });
    if (ok) {
      compare(what + " param", *p, 0, 0);
      compare(what + " m", *m, 0, 0);
      if (adam) compare(what + " v", *v, 0, 0);
    }
  }
}

void test_norm_rope_mask() {
  for (int rep = 0; rep < 6; ++rep) {
    const int64_t rows = rand_int(1, 20), D = rand_int(1, 1200);
    DType t = kFloats[rand_int(0, 1)];
    auto x = contiguous(t, {rows, D});
    auto w = contiguous(DType::F32, {D});
    auto b = contiguous(DType::F32, {D});
    auto o = contiguous(t, {rows, D});
    const bool with_w = rep % 2 == 0;
    View none;
    std::string what = std::string("rms_norm ") + dtype_name(t) + " D=" + std::to_string(D);
    if (run_both(what, [&](Kernels& k, int s) { k.rms_norm(x->view(s), with_w ? w->view(s) : none, 1e-5f, o->view(s)); }))
      compare(what, *o, std::max(tol_for(t), 1e-5), 1e-5);
    what = std::string("layer_norm ") + dtype_name(t) + " D=" + std::to_string(D);
    if (run_both(what, [&](Kernels& k, int s) {
          k.layer_norm(x->view(s), with_w ? w->view(s) : none, with_w ? b->view(s) : none, 1e-5f, o->view(s));
        }))
      compare(what, *o, std::max(tol_for(t), 1e-4), 1e-4);
  }
  for (int rep = 0; rep < 8; ++rep) {
    const int64_t outer = rand_int(1, 2), S = rand_int(1, 12), H = rand_int(1, 5), D = 2 * rand_int(1, 64);
    const bool neox = rep % 2 == 1;
    const int64_t pos = rand_int(0, 3000);
    DType t = rep == 7 ? DType::F16 : DType::F32;
    auto x = contiguous(t, {outer, S, H, D});
    auto o = contiguous(t, {outer, S, H, D});
    const std::string what = std::string("rope ") + (neox ? "neox" : "adjacent") + " pos=" + std::to_string(pos) +
                             " D=" + std::to_string(D);
    if (run_both(what, [&](Kernels& k, int s) { k.rope(x->view(s), pos, 10000.0f, neox, o->view(s)); }))
      compare(what, *o, std::max(tol_for(t), 1e-5), 1e-5);
    // in place
    if (run_both(what + " in place", [&](Kernels& k, int s) { k.rope(x->view(s), pos, 100000.0f, neox, x->view(s)); }))
      compare(what + " in place", *x, std::max(tol_for(t), 1e-5), 1e-5);
  }
  for (int rep = 0; rep < 3; ++rep) {
    const int64_t n = rand_int(1, 50), m = rand_int(1, 80), off = rand_int(-5, 40);
    auto o = contiguous(DType::F32, {n, m});
    const std::string what = "causal_mask offset " + std::to_string(off);
    if (run_both(what, [&](Kernels& k, int s) { k.causal_mask(off, o->view(s)); })) compare(what, *o, 0, 0);
  }
}

void test_attention() {
  for (int rep = 0; rep < 30; ++rep) {
    // rep 0-3: decode-like long contexts (the key-split path; groups of 3, 4 and 8 query heads a kv
    // head, which the kernel takes together), then random shapes; from rep 16 prefill-sized ones
    // (the tiled kernel: 16 or more query rows), some with a softcap.
    struct Fixed { int64_t Hkv, group, D, Sq, Sk; };
    const Fixed fixed[] = {{3, 3, 64, 1, 1500}, {3, 3, 64, 2, 800}, {2, 4, 64, 1, 1300}, {1, 8, 128, 1, 900}};
    const bool fx = rep < 4;
    const bool prefill = rep >= 16;
    const int64_t Hkv = fx ? fixed[rep].Hkv : rand_int(1, 3);
    const int64_t group = fx ? fixed[rep].group : std::vector<int64_t>{1, 2, 3, 4, 8}[rand_int(0, 4)];
    const int64_t Hq = Hkv * group;
    const int64_t D = fx ? fixed[rep].D : std::vector<int64_t>{16, 32, 64, 80, 128, 256}[rand_int(0, 5)];
    const int64_t Sq = fx ? fixed[rep].Sq : prefill ? rand_int(16, 200) : (rep % 3 == 0 ? 1 : rand_int(1, 20));
    const int64_t Sk = fx ? fixed[rep].Sk : prefill ? Sq + rand_int(0, 100) : rand_int(1, 300);
    const float softcap = prefill && rep % 3 == 0 ? 20.0f : 0.0f;
    const int64_t Smax = Sk + rand_int(0, 20);
    const bool causal = rep % 2 == 0, with_mask = rep % 4 == 1;
    const int64_t qpos = causal ? std::max<int64_t>(0, Sk - Sq - rand_int(-2, 2)) : 0;
    DType tkv = rep % 5 == 4 || rep == 2 ? DType::F16 : DType::F32;  // rep 2: an f16 cache, 1300 keys
    auto q = coin() ? contiguous(DType::F32, {Sq, Hq, D}) : strided(DType::F32, {Sq, Hq, D});
    // k, v: the first Sk rows of a cache [Smax, Hkv, D], or of a head-major cache [Hkv, Smax, D].
    auto cache = [&](bool head_major) {
      if (head_major) return make_dual(tkv, {Sk, Hkv, D}, {D, Smax * D, 1}, 0, Hkv * Smax * D);
      return make_dual(tkv, {Sk, Hkv, D}, {Hkv * D, D, 1}, 0, Smax * Hkv * D);
    };
    auto k = cache(coin());
    auto v = cache(coin());
    auto mask = contiguous(DType::F32, {Sq, Sk});
    auto o = contiguous(DType::F32, {Sq, Hq, D});
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    View none;
    const std::string what = "attention Sq=" + std::to_string(Sq) + " Sk=" + std::to_string(Sk) +
                             " Hq=" + std::to_string(Hq) + " Hkv=" + std::to_string(Hkv) +
                             " D=" + std::to_string(D) + (causal ? " causal" : "") +
                             (with_mask ? " mask" : "") + (softcap > 0.0f ? " softcap" : "") +
                             " kv " + dtype_name(tkv);
    if (run_both(what, [&](Kernels& kk, int s) {
          kk.attention(q->view(s), k->view(s), v->view(s), with_mask ? mask->view(s) : none, scale,
                       causal, qpos, o->view(s), softcap);
        }))
      compare(what, *o, 1e-4, 1e-5);
  }
  // One query row with grouped-query heads (on CUDA the kernel that shares each kv head's keys and
  // values among its query heads): head dims 64, 128 and 256, f32 and f16 caches, 2 to 8 query
  // heads a kv head, key counts around its 32-key tiles and splits, splits of several tiles, a
  // cache view that starts past row 0 (a sliding window) or one element off 16-byte alignment (the
  // element-by-element copy), keys hidden by causality, a mask, a softcap.
  struct Gqa {
    int64_t Hkv, group, D, Sk, start, hidden;  // start: first cache row (-1: one element in)
    DType t;
    bool mask;
    float softcap;
  };
  const Gqa gqa[] = {
      {3, 3, 64, 1, 0, 0, DType::F32, false, 0.0f},     {3, 3, 64, 31, 0, 0, DType::F32, false, 0.0f},
      {3, 3, 64, 33, 5, 1, DType::F16, true, 0.0f},     {8, 4, 64, 64, 0, 0, DType::F32, false, 0.0f},
      {8, 4, 64, 65, 0, 2, DType::F16, false, 0.0f},    {8, 4, 64, 2048, 0, 0, DType::F32, false, 0.0f},
      {2, 4, 64, 4500, 0, 3, DType::F16, false, 0.0f},  {4, 2, 128, 300, 7, 0, DType::F32, true, 0.0f},
      {1, 8, 128, 129, 0, 0, DType::F16, false, 0.0f},  {1, 4, 256, 700, 0, 0, DType::F32, false, 30.0f},
      {2, 2, 256, 100, 3, 5, DType::F16, true, 0.0f},   {3, 3, 64, 200, -1, 0, DType::F32, false, 0.0f},
      {2, 4, 128, 90, -1, 0, DType::F16, true, 0.0f},   {3, 3, 64, 5, 0, 5, DType::F32, false, 0.0f},
  };
  for (const Gqa& c : gqa) {
    const int64_t Hq = c.Hkv * c.group, D = c.D, Sk = c.Sk;
    const int64_t row = c.Hkv * D;
    const int64_t off = c.start < 0 ? 1 : c.start * row;
    auto cache = [&]() { return make_dual(c.t, {Sk, c.Hkv, D}, {row, D, 1}, off, off + (Sk + 2) * row); };
    auto k = cache();
    auto v = cache();
    auto q = contiguous(DType::F32, {1, Hq, D});
    auto mask = contiguous(DType::F32, {1, std::max<int64_t>(Sk, 1)});
    auto o = contiguous(DType::F32, {1, Hq, D});
    const int64_t qpos = Sk - 1 - c.hidden;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    View none;
    const std::string what = "attention decode Sk=" + std::to_string(Sk) + " Hq=" + std::to_string(Hq) +
                             " Hkv=" + std::to_string(c.Hkv) + " D=" + std::to_string(D) + " start " +
                             std::to_string(c.start) + " hidden " + std::to_string(c.hidden) +
                             (c.mask ? " mask" : "") + (c.softcap > 0.0f ? " softcap" : "") + " kv " +
                             dtype_name(c.t);
    if (run_both(what, [&](Kernels& kk, int s) {
          kk.attention(q->view(s), k->view(s), v->view(s), c.mask ? mask->view(s) : none, scale, true, qpos,
                       o->view(s), c.softcap);
        }))
      compare(what, *o, 1e-4, 1e-5);
  }
}

// Replays of a decode-like compiled step, submitted with a ReplayPlan as Recording::replay does:
// Outside copies of the step's inputs into fixed slots, a body of Static commands and Dynamic ones
// (rope, rope_kv_write, attention over the first pos+1 cache rows) whose position, key count and
// cache rows change at every step, and an Outside copy of the result. On CUDA the body runs as one
// CUDA graph from the second replay on, its Dynamic kernels reading their values from the graph's
// table: a stale value shows as a mismatch against the CPU backend. Variants: 0 plain (and a
// sliding window: keys from pos-5 on, a moving start), 1 with a matmul (cuBLAS: no graph), 2 an id out
// of range (the device error slot inside a graph: the error must come back at every replay, never
// stick to a later one), 3 a Dynamic copy into the cache (a kernel without a value table: no graph).
std::string run_cmds(Backend& b, std::vector<Command> cmds,
                     std::shared_ptr<const ReplayPlan> plan = nullptr) {
  auto error = std::make_shared<std::string>();
  if (plan) {
    b.submit_replay(std::move(cmds), std::move(plan), [error](const std::string& e) { *error = e; });
  } else {
    b.submit(std::move(cmds), [error](const std::string& e) { *error = e; });
  }
  b.synchronize();
  return *error;
}

// Head dim 32 (attention_kernel on CUDA) and 64 (the grouped-query decode kernel).
void test_graph_replay(int64_t Dh) {
  const int64_t H = 4, Hkv = 2, Smax = 40, d = H * Dh, V = d, steps = 12;  // ids < d
  auto kc = contiguous(DType::F32, {Smax, Hkv, Dh});
  auto vc = contiguous(DType::F32, {Smax, Hkv, Dh});
  auto xin = contiguous(DType::F32, {steps, Hkv * Dh});
  auto qin = contiguous(DType::F32, {steps, H, Dh});
  auto qslot = contiguous(DType::F32, {1, H, Dh});
  auto xslot = contiguous(DType::F32, {1, Hkv, Dh});
  auto vrow = contiguous(DType::F32, {1, Hkv, Dh});
  auto q = contiguous(DType::F32, {1, H, Dh});
  auto q2 = contiguous(DType::F32, {1, H, Dh});
  auto att = contiguous(DType::F32, {1, H, Dh});
  auto acc = contiguous(DType::F32, {1, d});
  auto act = contiguous(DType::F32, {1, d});
  auto ids = contiguous(DType::I64, {1});
  auto posi = contiguous(DType::I64, {1});
  auto posf = contiguous(DType::I64, {1});  // integer out: an integral addend takes the integer kernel
  auto table = contiguous(DType::F32, {V, 8});
  auto emb = contiguous(DType::F32, {1, 8});
  auto ma = contiguous(DType::F32, {1, 8, 8});
  auto mo = contiguous(DType::F32, {1, 8, 8});
  auto rowv = [](View v, int64_t row, std::vector<int64_t> shape) {
    View r = v;
    r.data = static_cast<float*>(v.data) + row * v.strides[0];
    r.ndim = static_cast<int>(shape.size());
    int64_t st = 1;
    for (int i = r.ndim - 1; i >= 0; --i) {
      r.shape[i] = shape[i];
      r.strides[i] = st;
      st *= shape[i];
    }
    return r;
  };
  using K = ReplayCommandKind;
  // Each variant is its own recording (its own id and graph), as two compiled functions are.
  // Each variant's step results go to rows of its own tensor (after a failed command buffer, what
  // the rest of it wrote is unspecified: CUDA runs every kernel, the CPU stops at the error).
  std::unique_ptr<Dual> embs;
  auto step_cmds = [&](int side, int64_t t, int variant, std::vector<K>* kinds) {
    const bool window = variant == 4, turns_fractional = variant == 5;
    if (window || turns_fractional) variant = 0;
    const int64_t pos = 4 + t;
    const int64_t start = window && pos > 5 ? pos - 5 : 0;  // a sliding window's first key
    std::vector<Command> c;
    auto add = [&](K kind, Command cmd) {
      kinds->push_back(kind);
      c.push_back(std::move(cmd));
    };
    View qs = qslot->view(side), xs = xslot->view(side), vr = vrow->view(side);
    View qv = q->view(side), q2v = q2->view(side), attv = att->view(side), accv = acc->view(side);
    View actv = act->view(side);
    View k_all = rowv(kc->view(side), start, {pos + 1 - start, Hkv, Dh});
    View v_all = rowv(vc->view(side), start, {pos + 1 - start, Hkv, Dh});
    View kdst = rowv(kc->view(side), pos, {1, Hkv, Dh}), vdst = rowv(vc->view(side), pos, {1, Hkv, Dh});
    const View qsrc = rowv(qin->view(side), t, {1, H, Dh}), xsrc = rowv(xin->view(side), t, {1, Hkv, Dh});
    const View att_flat = rowv(attv, 0, {1, d});
    const View idv = ids->view(side), tab = table->view(side), embv = emb->view(side);
    const View emb_out = rowv(embs->view(side), t, {1, 8});
    const View mav = ma->view(side), mov = mo->view(side);
    add(K::Outside, [=](Kernels& k) { k.copy(qsrc, qs); });
    add(K::Outside, [=](Kernels& k) { k.copy(xsrc, xs); });
    add(K::Static, [=](Kernels& k) { k.binary(BinaryOp::Mul, xs, xs, vr); });
    if (variant == 3) {
      add(K::Static, [=](Kernels& k) { k.copy(qs, qv); });
      add(K::Dynamic, [=](Kernels& k) { k.copy(xs, kdst); });
      add(K::Dynamic, [=](Kernels& k) { k.copy(vr, vdst); });
    } else {
      add(K::Dynamic, [=](Kernels& k) { k.rope_kv_write(qs, xs, vr, pos, 10000.0f, false, qv, kdst, vdst); });
    }
    const View q4 = rowv(qv, 0, {1, 1, H, Dh}), q24 = rowv(q2v, 0, {1, 1, H, Dh});
    add(K::Dynamic, [=](Kernels& k) { k.rope(q4, pos, 500.0f, true, q24); });
    add(K::Dynamic, [=](Kernels& k) {
      k.attention(q2v, k_all, v_all, View{}, 0.17f, true, pos - start, attv);
    });
    for (int i = 0; i < 11; ++i) {
      add(K::Static, [=](Kernels& k) { k.binary(BinaryOp::Add, accv, att_flat, accv); });
    }
    add(K::Static, [=](Kernels& k) { k.unary(UnaryOp::Silu, accv, actv); });
    if (variant == 1) {
      add(K::Static, [=](Kernels& k) { k.matmul(mav, mav, mov); });
    } else {
      const double scale = 0.5 + 0.0625 * static_cast<double>(t);
      add(K::Dynamic, [=](Kernels& k) { k.binary_scalar(BinaryOp::Mul, actv, scale, false, actv); });
    }
    // A scalar argument made a tensor (a decode step's token id) and integer arithmetic on it; in
    // variant 5 the scalar turns fractional at step 6, which takes the float kernel: that replay's
    // graph is stale and the rest run launch by launch.
    const View pv = posi->view(side), pf = posf->view(side);
    const double addend = turns_fractional && t >= 6 ? 0.5 : 1.0;
    add(K::Dynamic, [=](Kernels& k) { k.fill(pv, static_cast<double>(pos)); });
    add(K::Dynamic, [=](Kernels& k) { k.binary_scalar(BinaryOp::Add, pv, addend, false, pf); });
    if (variant == 2) {
      add(K::Static, [=](Kernels& k) { k.fill(idv, static_cast<double>(V + 3)); });
    } else {
      add(K::Static, [=](Kernels& k) { k.reduce(ReduceOp::ArgMax, actv, 1, d, 1, idv); });
    }
    add(K::Static, [=](Kernels& k) { k.gather_rows(tab, idv, embv); });
    add(K::Outside, [=](Kernels& k) { k.copy(embv, emb_out); });
    return c;
  };
  static uint64_t recording_id = 1u << 30;  // ids no Recording of this process takes
  for (int variant : {0, 2, 1, 3, 4, 5}) {
    const int kind = variant == 4 || variant == 5 ? 0 : variant;
    embs = contiguous(DType::F32, {steps, 8});
    const uint64_t graphs_before = cuda::graph_launches(*g_backends[1]);
    std::shared_ptr<ReplayPlan> plan[2];
    ++recording_id;
    for (int64_t t = 0; t < steps; ++t) {
      const std::string what = "graph replay Dh " + std::to_string(Dh) + " variant " + std::to_string(variant) +
                               " step " + std::to_string(t);
      std::string err[2];
      for (int s = 0; s < 2; ++s) {
        auto p = std::make_shared<ReplayPlan>();
        p->recording_id = recording_id;
        std::vector<Command> cmds = step_cmds(s, t, variant, &p->kinds);
        err[s] = run_cmds(*g_backends[s], std::move(cmds), p);
      }
      ++checks;
      if (kind == 2) {
        if (err[0].empty() || err[1].empty()) {
          ++failures;
          std::printf("FAIL %s: expected an id error on both; cpu '%s' cuda '%s'\n", what.c_str(),
                      err[0].c_str(), err[1].c_str());
        }
        continue;
      }
      if (!err[0].empty() || !err[1].empty()) {
        ++failures;
        std::printf("FAIL %s: cpu error '%s', cuda error '%s'\n", what.c_str(), err[0].c_str(), err[1].c_str());
        continue;
      }
      compare(what + " k cache", *kc, 1e-5, 1e-5);
      compare(what + " v cache", *vc, 1e-5, 1e-5);
      compare(what + " attention", *att, 1e-4, 1e-5);
      compare(what + " accumulator", *acc, 1e-4, 1e-4);
      compare(what + " ids", *ids, 0, 0);
      compare(what + " position", *posi, 0, 0);
      compare(what + " position plus", *posf, 0, 0);
      compare(what + " gathered rows", *embs, 0, 0);
      if (kind == 1) compare(what + " matmul", *mo, 1e-4, 1e-4);
    }
    // Graphs: from the second replay on for the plain, windowed and error variants; none where a
    // command cannot be in one (variant 3). (TL_CUDA_GRAPHS=0 turns them all off.)
    const uint64_t graphs = cuda::graph_launches(*g_backends[1]) - graphs_before;
    const bool expect_graphs = env_cuda_graphs() && (kind == 0 || kind == 2);
    if (kind == 1) continue;  // a graph only without cuBLAS (TL_CUDA_BLAS=0 or no library found)
    const uint64_t expected = !expect_graphs ? 0 : variant == 5 ? 5 : static_cast<uint64_t>(steps - 1);
    ++checks;
    if (graphs != expected) {
      ++failures;
      std::printf("FAIL graph replay variant %d: %llu of %lld replays as graphs, expected %llu\n", variant,
                  static_cast<unsigned long long>(graphs), static_cast<long long>(steps),
                  static_cast<unsigned long long>(expected));
    }
  }
}

// The CUDA Backend's own contract.
void test_backend_contract(Backend& gpu) {
  auto expect = [](bool ok, const std::string& what) {
    ++checks;
    if (!ok) {
      ++failures;
      std::printf("FAIL backend: %s\n", what.c_str());
    }
  };
  // Many command buffers in flight complete exactly once each, in submission order.
  {
    const int kBuffers = 200;
    auto order = std::make_shared<std::vector<int>>();
    auto mu = std::make_shared<std::mutex>();
    void* buf = gpu.allocate(4 << 20);
    View v;
    v.data = buf;
    v.dtype = DType::F32;
    v.ndim = 1;
    v.shape[0] = 1 << 20;
    v.strides[0] = 1;
    for (int i = 0; i < kBuffers; ++i) {
      const double val = i;
      gpu.submit({[v, val](Kernels& k) { k.fill(v, val); }, [v](Kernels& k) { k.unary(UnaryOp::Sqrt, v, v); }},
                 [order, mu, i](const std::string&) {
                   std::lock_guard<std::mutex> lock(*mu);
                   order->push_back(i);
                 });
    }
    gpu.synchronize();
    bool in_order = static_cast<int>(order->size()) == kBuffers;
    for (int i = 0; in_order && i < kBuffers; ++i) in_order = (*order)[i] == i;
    expect(in_order, "200 command buffers complete once each, in order");
    float last = 0;
    gpu.copy_to_host(&last, static_cast<char*>(buf) + 4 * 1000, 4);
    expect(std::fabs(last - std::sqrt(199.0f)) < 1e-5f, "the last command buffer's result is visible after synchronize");
    // A host-side error skips the rest of its command buffer and names the failure.
    auto err = std::make_shared<std::string>();
    gpu.submit({[](Kernels&) { throw KernelError("planted failure"); },
                [v](Kernels& k) { k.fill(v, 7.0); }},
               [err](const std::string& e) { *err = e; });
    gpu.synchronize();
    gpu.copy_to_host(&last, static_cast<char*>(buf) + 4 * 1000, 4);
    expect(*err == "planted failure", "a thrown KernelError becomes the command buffer's error");
    expect(std::fabs(last - std::sqrt(199.0f)) < 1e-5f, "commands after a failure are skipped");
    // The next command buffer is clean again.
    *err = "unset";
    gpu.submit({[v](Kernels& k) { k.fill(v, 1.0); }}, [err](const std::string& e) { *err = e; });
    gpu.synchronize();
    expect(err->empty(), "a command buffer after a failed one reports no error");
    gpu.deallocate(buf, 4 << 20);
  }
  // Out of memory is nullptr, and the device keeps working.
  {
    void* huge = gpu.allocate(size_t(1) << 50);
    expect(huge == nullptr, "allocate(1 PiB) returns nullptr");
    void* small = gpu.allocate(1024);
    expect(small != nullptr, "allocation works after an out-of-memory");
    gpu.fill_bytes(small, 0xAB, 1024);
    uint8_t back[1024];
    gpu.copy_to_host(back, small, 1024);
    expect(back[0] == 0xAB && back[1023] == 0xAB, "fill_bytes reaches every byte");
    gpu.deallocate(small, 1024);
  }
  // Delay injection: a spin kernel of ~2 ms on the device timeline.
  {
    const auto t0 = std::chrono::steady_clock::now();
    auto err = std::make_shared<std::string>("unset");
    gpu.submit({[](Kernels& k) { k.delay(2000); }}, [err](const std::string& e) { *err = e; });
    gpu.synchronize();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    expect(err->empty() && ms >= 1.9, "delay(2000) takes at least ~2 ms (took " + std::to_string(ms) + " ms)");
  }
}

// The backend may be destroyed by its own completion callback (the runtime's last reference
// to the device dropped there): no hang, no crash.
void test_destroy_from_completion() {
  std::shared_ptr<Backend> gpu(make_cuda_backend().release());
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  auto keep = std::make_shared<std::shared_ptr<Backend>>(gpu);
  gpu->submit({[](Kernels& k) { k.delay(20000); }}, [keep, &mu, &cv, &done](const std::string&) {
    keep->reset();  // may run the destructor here, on the completion thread
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    cv.notify_all();
  });
  gpu.reset();
  std::unique_lock<std::mutex> lock(mu);
  const bool ok = cv.wait_for(lock, std::chrono::seconds(10), [&] { return done; });
  ++checks;
  if (!ok) {
    ++failures;
    std::printf("FAIL backend: destroying the backend from its completion callback hung\n");
  }
}

// Device buffers of the benchmarks: random contents made quickly (xorshift), quantized blocks with
// sane scales, f32 as small normal values, Bool as a zeroed output; released together.
struct BenchBuffers {
  Backend& gpu;
  struct Buf { void* p; size_t n; };
  std::vector<Buf> bufs;
  void* alloc(size_t bytes, DType qt) {
    void* p = gpu.allocate(bytes);
    if (p == nullptr) { std::printf("BENCH out of device memory\n"); std::exit(1); }
    std::vector<uint8_t> h(bytes);  // Bool: an output, left as zeros
    uint64_t state = rng() | 1;
    for (size_t i = 0; qt != DType::Bool && i + 8 <= bytes; i += 8) {  // xorshift: 256 MiB quickly
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      std::memcpy(&h[i], &state, 8);
    }
    if (is_quantized(qt)) {
      const int64_t bb = block_bytes(qt);
      for (size_t b = 0; b + bb <= bytes; b += bb)
        for (int off : scale_offsets(qt)) { uint16_t v = cpu::f32_to_f16(0.01f); std::memcpy(&h[b + off], &v, 2); }
    } else if (qt == DType::F32) {
      for (size_t i = 0; i + 4 <= bytes; i += 4) { float f = rand_normal() * 0.1f; std::memcpy(&h[i], &f, 4); }
    }
    gpu.copy_to_device(p, h.data(), bytes);
    bufs.push_back({p, bytes});
    return p;
  }
  void release() {
    for (auto& bf : bufs) gpu.deallocate(bf.p, bf.n);
    bufs.clear();
  }
  ~BenchBuffers() { release(); }
};

View bench_view(void* p, DType t, std::vector<int64_t> shape) {
  View v;
  v.data = p;
  v.dtype = t;
  v.ndim = static_cast<int>(shape.size());
  auto st = contiguous_strides(shape);
  for (int i = 0; i < v.ndim; ++i) { v.shape[i] = shape[i]; v.strides[i] = st[i]; }
  return v;
}

// A SmolLM2-135M-shaped decode step at the Kernels level (30 layers, d 576, 9/3 heads of 64,
// FFN 1536, Q4_1 weights, Q8_0 tied embedding/logits), timed over many tokens.
void bench_decode(Backend& gpu, int ctx) {
  const int64_t d = 576, H = 9, Hkv = 3, Dh = 64, F = 1536, V = 49152, L = 30, Smax = 8192;
  BenchBuffers buffers{gpu, {}};
  auto alloc = [&](size_t bytes, bool random_q = false, DType qt = DType::F32) {
    return buffers.alloc(bytes, random_q ? qt : DType::F32);
  };
  auto view = bench_view;
  const DType wq = DType::Q4_1;
  struct Layer { View wq, wk, wv, wo, wg, wu, wd, n1, n2; void *kc, *vc; };
  std::vector<Layer> layers(L);
  for (auto& ly : layers) {
    ly.wq = view(alloc(row_bytes(wq, d) * d, true, wq), wq, {d, d});
    ly.wk = view(alloc(row_bytes(wq, d) * Hkv * Dh, true, wq), wq, {Hkv * Dh, d});
    ly.wv = view(alloc(row_bytes(wq, d) * Hkv * Dh, true, wq), wq, {Hkv * Dh, d});
    ly.wo = view(alloc(row_bytes(wq, d) * d, true, wq), wq, {d, d});
    ly.wg = view(alloc(row_bytes(wq, d) * F, true, wq), wq, {F, d});
    ly.wu = view(alloc(row_bytes(wq, d) * F, true, wq), wq, {F, d});
    ly.wd = view(alloc(row_bytes(wq, F) * d, true, wq), wq, {d, F});
    ly.n1 = view(alloc(d * 4), DType::F32, {d});
    ly.n2 = view(alloc(d * 4), DType::F32, {d});
    ly.kc = alloc(Smax * Hkv * Dh * 4);
    ly.vc = alloc(Smax * Hkv * Dh * 4);
  }
  View emb = view(alloc(row_bytes(DType::Q8_0, d) * V, true, DType::Q8_0), DType::Q8_0, {V, d});
  View xres = view(alloc(d * 4), DType::F32, {1, d}), h = view(alloc(d * 4), DType::F32, {1, d});
  View q = view(alloc(d * 4), DType::F32, {1, d}), kx = view(alloc(Hkv * Dh * 4), DType::F32, {1, Hkv * Dh});
  View vx = view(alloc(Hkv * Dh * 4), DType::F32, {1, Hkv * Dh}), att = view(alloc(d * 4), DType::F32, {1, d});
  View g = view(alloc(F * 4), DType::F32, {1, F}), u = view(alloc(F * 4), DType::F32, {1, F});
  View logits = view(alloc(V * 4), DType::F32, {1, V});
  View ids = view(alloc(8), DType::I64, {1});
  int64_t zero = 0;
  gpu.copy_to_device(ids.data, &zero, 8);

  auto step = [&](int64_t pos, std::vector<Command>& cmds) {
    cmds.push_back([=](Kernels& k) { k.gather_rows(emb, ids, xres); });
    for (const Layer& ly : layers) {
      View k_slot = view(static_cast<float*>(ly.kc) + pos * Hkv * Dh, DType::F32, {1, Hkv * Dh});
      View v_slot = view(static_cast<float*>(ly.vc) + pos * Hkv * Dh, DType::F32, {1, Hkv * Dh});
      View kall = view(ly.kc, DType::F32, {pos + 1, Hkv, Dh});
      View vall = view(ly.vc, DType::F32, {pos + 1, Hkv, Dh});
      cmds.push_back([=](Kernels& k) { k.rms_norm(xres, ly.n1, 1e-5f, h); });
      cmds.push_back([=](Kernels& k) { k.linear(h, ly.wq, q); });
      cmds.push_back([=](Kernels& k) { k.linear(h, ly.wk, kx); });
      cmds.push_back([=](Kernels& k) { k.linear(h, ly.wv, vx); });
      cmds.push_back([=](Kernels& k) { k.rope(view(q.data, DType::F32, {1, 1, H, Dh}), pos, 100000.f, false, view(q.data, DType::F32, {1, 1, H, Dh})); });
      cmds.push_back([=](Kernels& k) { k.rope(view(kx.data, DType::F32, {1, 1, Hkv, Dh}), pos, 100000.f, false, view(k_slot.data, DType::F32, {1, 1, Hkv, Dh})); });
      cmds.push_back([=](Kernels& k) { k.copy(vx, v_slot); });
      cmds.push_back([=](Kernels& k) {
        k.attention(view(q.data, DType::F32, {1, H, Dh}), kall, vall, View{}, 0.125f, true, pos,
                    view(att.data, DType::F32, {1, H, Dh}));
      });
      cmds.push_back([=](Kernels& k) { k.linear(att, ly.wo, h); });
      cmds.push_back([=](Kernels& k) { k.binary(BinaryOp::Add, xres, h, xres); });
      cmds.push_back([=](Kernels& k) { k.rms_norm(xres, ly.n2, 1e-5f, h); });
      cmds.push_back([=](Kernels& k) { k.linear(h, ly.wg, g); });
      cmds.push_back([=](Kernels& k) { k.linear(h, ly.wu, u); });
      cmds.push_back([=](Kernels& k) { k.unary(UnaryOp::Silu, g, g); });
      cmds.push_back([=](Kernels& k) { k.binary(BinaryOp::Mul, g, u, g); });
      cmds.push_back([=](Kernels& k) { k.linear(g, ly.wd, h); });
      cmds.push_back([=](Kernels& k) { k.binary(BinaryOp::Add, xres, h, xres); });
    }
    cmds.push_back([=](Kernels& k) { k.rms_norm(xres, View{}, 1e-5f, h); });
    cmds.push_back([=](Kernels& k) { k.linear(h, emb, logits); });
    cmds.push_back([=](Kernels& k) { k.reduce(ReduceOp::ArgMax, logits, 1, V, 1, ids); });
  };
  // Warm up to position ctx, then time 64 tokens, one command buffer and one host read each.
  std::vector<Command> cmds;
  for (int64_t pos = 0; pos < ctx; ++pos) {
    cmds.clear();
    step(pos, cmds);
    gpu.submit(cmds, [](const std::string&) {});
  }
  gpu.synchronize();
  const int tokens = 64;
  size_t launches = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < tokens; ++t) {
    cmds.clear();
    step(ctx + t, cmds);
    launches = cmds.size();
    gpu.submit(cmds, [](const std::string&) {});
    int64_t next = 0;
    gpu.synchronize();
    gpu.copy_to_host(&next, ids.data, 8);  // the sampled id goes back to the host every token
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("BENCH decode (SmolLM2-135M shapes, Q4_1 + Q8_0 logits, kernels only): ctx %d: "
              "%.1f tokens/s, %.3f ms/token, %zu kernel calls/token\n",
              ctx, tokens / s, 1e3 * s / tokens, launches);
  // Where a decode step's time goes: each kernel kind of the step, 300 calls in one command
  // buffer (launch gaps included), in microseconds per call, times its calls per token.
  if (ctx == 256) {
    const int64_t pos = ctx;
    View kall = view(layers[0].kc, DType::F32, {pos + 1, Hkv, Dh});
    View vall = view(layers[0].vc, DType::F32, {pos + 1, Hkv, Dh});
    struct Item { const char* name; int per_token; Command cmd; };
    const Layer ly = layers[0];
    std::vector<Item> items = {
        {"linear q4_1 576->576 (q, o)", 2 * 30, [=](Kernels& k) { k.linear(h, ly.wq, q); }},
        {"linear q4_1 576->192 (k, v)", 2 * 30, [=](Kernels& k) { k.linear(h, ly.wk, kx); }},
        {"linear q4_1 576->1536 (gate, up)", 2 * 30, [=](Kernels& k) { k.linear(h, ly.wg, g); }},
        {"linear q4_1 1536->576 (down)", 30, [=](Kernels& k) { k.linear(g, ly.wd, h); }},
        {"linear q8_0 576->49152 (logits)", 1, [=](Kernels& k) { k.linear(h, emb, logits); }},
        {"attention 9/3 heads, 257 keys", 30, [=](Kernels& k) {
           k.attention(view(q.data, DType::F32, {1, H, Dh}), kall, vall, View{}, 0.125f, true, pos,
                       view(att.data, DType::F32, {1, H, Dh}));
         }},
        {"(attention, 2048 keys)", 0, [=](Kernels& k) {
           k.attention(view(q.data, DType::F32, {1, H, Dh}), view(ly.kc, DType::F32, {2048, Hkv, Dh}),
                       view(ly.vc, DType::F32, {2048, Hkv, Dh}), View{}, 0.125f, true, 2047,
                       view(att.data, DType::F32, {1, H, Dh}));
         }},
        {"(attention, 8192 keys)", 0, [=](Kernels& k) {
           k.attention(view(q.data, DType::F32, {1, H, Dh}), view(ly.kc, DType::F32, {8192, Hkv, Dh}),
                       view(ly.vc, DType::F32, {8192, Hkv, Dh}), View{}, 0.125f, true, 8191,
                       view(att.data, DType::F32, {1, H, Dh}));
         }},
        // The 1B shape's heads (32 query heads, 8 kv heads) over the same cache memory; q and the
        // output in the logits buffer.
        {"(attention 32/8 heads, 2048 keys)", 0, [=](Kernels& k) {
           k.attention(view(logits.data, DType::F32, {1, 32, Dh}), view(ly.kc, DType::F32, {2048, 8, Dh}),
                       view(ly.vc, DType::F32, {2048, 8, Dh}), View{}, 0.125f, true, 2047,
                       view(static_cast<float*>(logits.data) + 4096, DType::F32, {1, 32, Dh}));
         }},
        {"(same, f16 cache)", 0, [=](Kernels& k) {
           k.attention(view(logits.data, DType::F32, {1, 32, Dh}), view(ly.kc, DType::F16, {2048, 8, Dh}),
                       view(ly.vc, DType::F16, {2048, 8, Dh}), View{}, 0.125f, true, 2047,
                       view(static_cast<float*>(logits.data) + 4096, DType::F32, {1, 32, Dh}));
         }},
        {"rms_norm 576", 2 * 30 + 1, [=](Kernels& k) { k.rms_norm(xres, ly.n1, 1e-5f, h); }},
        {"rope 9 heads", 2 * 30, [=](Kernels& k) { k.rope(view(q.data, DType::F32, {1, 1, H, Dh}), pos, 100000.f, false, view(q.data, DType::F32, {1, 1, H, Dh})); }},
        {"binary add 576", 2 * 30, [=](Kernels& k) { k.binary(BinaryOp::Add, xres, h, xres); }},
        {"unary silu 1536 / mul", 2 * 30, [=](Kernels& k) { k.unary(UnaryOp::Silu, g, g); }},
        {"copy 192 (v to cache)", 30, [=](Kernels& k) { k.copy(vx, view(ly.vc, DType::F32, {1, Hkv * Dh})); }},
        {"argmax 49152", 1, [=](Kernels& k) { k.reduce(ReduceOp::ArgMax, logits, 1, V, 1, ids); }},
    };
    double total_us = 0;
    for (const Item& it : items) {
      std::vector<Command> c(300, it.cmd);
      for (int warm = 0; warm < 2; ++warm) {  // the second is captured when graphs are on
        gpu.submit(c, [](const std::string&) {});
        gpu.synchronize();
      }
      const auto a = std::chrono::steady_clock::now();
      gpu.submit(c, [](const std::string&) {});
      gpu.synchronize();
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count() / 300;
      total_us += us * it.per_token;
      std::printf("BENCH   %-34s %7.2f us/call x %3d/token = %8.1f us/token\n", it.name, us, it.per_token,
                  us * it.per_token);
    }
    std::printf("BENCH   sum of the above: %.1f us/token (launch-bound kernels dominate when this is "
                "close to the measured step)\n", total_us);
  }
  // Prompt-style linear throughput: M = 128 rows through the FFN up projection.
  {
    View xm = view(alloc(128 * d * 4), DType::F32, {128, d});
    View om = view(alloc(128 * F * 4), DType::F32, {128, F});
    const int reps = 200;
    std::vector<Command> c;
    for (int i = 0; i < reps; ++i) c.push_back([=](Kernels& k) { k.linear(xm, layers[0].wg, om); });
    gpu.submit(c, [](const std::string&) {});
    gpu.synchronize();
    const auto a = std::chrono::steady_clock::now();
    gpu.submit(c, [](const std::string&) {});
    gpu.synchronize();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
    std::printf("BENCH linear q4_1 M=128 K=%lld N=%lld: %.1f us/call, %.2f TFLOP/s\n",
                static_cast<long long>(d), static_cast<long long>(F), 1e6 * sec / reps,
                2.0 * 128 * d * F * reps / sec / 1e12);
  }
}

// Kernel microbenchmarks against the roofline (`--bench-kernels`): HBM bandwidth measured here by
// a 1 GiB f32 copy (bytes read + written); quantized matrix-vector products (M = 1) on
// 8192x2048 and 2048x8192 weights, rotating over enough copies (>= 256 MiB) that the 50 MB L2
// cannot hold them, as achieved weight bytes per second and the share of that bandwidth; and
// prompt-sized products in TFLOP/s. Times are per call from back-to-back calls in one command
// buffer (launch gaps included: an upper bound on the kernel time), median of 3.
void bench_kernels(Backend& gpu) {
  BenchBuffers buffers{gpu, {}};
  auto alloc = [&](size_t bytes, DType qt) { return buffers.alloc(bytes, qt); };
  auto view = bench_view;
  // Seconds per call of `calls` (median of 3 runs after a warm-up run).
  auto time_calls = [&](const std::vector<Command>& c) {
    gpu.submit(c, [](const std::string&) {});
    gpu.synchronize();
    std::vector<double> t;
    for (int r = 0; r < 3; ++r) {
      const auto a = std::chrono::steady_clock::now();
      gpu.submit(c, [](const std::string&) {});
      gpu.synchronize();
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count() / c.size());
    }
    std::sort(t.begin(), t.end());
    return t[1];
  };
  double hbm = 0;
  {
    const int64_t n = int64_t(1) << 28;  // 1 GiB of f32
    View a = view(alloc(n * 4, DType::Bool), DType::F32, {n}), b = view(alloc(n * 4, DType::Bool), DType::F32, {n});
    std::vector<Command> c(20, [=](Kernels& k) { k.copy(a, b); });
    const double s = time_calls(c);
    hbm = 2.0 * n * 4 / s;
    std::printf("BENCH copy 1 GiB f32: %.1f us, %.0f GB/s (read + write): the bandwidth roofline below\n", s * 1e6, hbm / 1e9);
    buffers.release();
  }
  {  // the cost of one launch: a 1-element fill
    View f = view(alloc(4, DType::Bool), DType::F32, {1});
    std::vector<Command> c(200, [=](Kernels& k) { k.fill(f, 1.0); });
    std::printf("BENCH launch (1-element fill): %.2f us/call\n", time_calls(c) * 1e6);
  }
  const DType types[] = {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  // N (rows of w), K: the roofline pair of issue 24, then the 1B-shaped model's qkv, o and gate/up
  // and the SmolLM2-shaped model's (latency-bound: a few hundred KiB each)
  const int64_t shapes[][2] = {{8192, 2048}, {2048, 8192}, {3072, 2048}, {2048, 2048}, {16384, 2048},
                               {960, 576}, {576, 576}, {3072, 576}, {576, 1536}};
  for (DType t : types) {
    for (const auto& sh : shapes) {
      const int64_t N = sh[0], K = sh[1];
      if (K % block_elems(t) != 0) continue;
      const size_t wbytes = row_bytes(t, K) * N;
      const int copies = static_cast<int>((size_t(256) << 20) / wbytes + 1);
      std::vector<View> ws;
      for (int i = 0; i < copies; ++i) ws.push_back(view(alloc(wbytes, t), t, {N, K}));
      View x = view(alloc(K * 4, DType::F32), DType::F32, {1, K});
      View o = view(alloc(N * 4, DType::Bool), DType::F32, {1, N});
      std::vector<Command> c;
      for (int r = 0; r < 4; ++r)
        for (const View& w : ws) c.push_back([=](Kernels& k) { k.linear(x, w, o); });
      std::vector<Command> c1(c.size(), [=](Kernels& k) { k.linear(x, ws[0], o); });
      const double s1 = time_calls(c1);  // one weight: from L2 once it fits there
      const double s = time_calls(c);
      std::printf("BENCH matvec %-5s N=%5lld K=%5lld: one weight (in L2) %6.2f us/call; rotating: %6.2f us/call, "
                  "%6.0f GB/s of weights, %3.0f%% of the copy bandwidth\n",
                  dtype_name(t), static_cast<long long>(N), static_cast<long long>(K), s1 * 1e6, s * 1e6,
                  wbytes / s / 1e9, 100.0 * wbytes / s / hbm);
      buffers.release();
    }
  }
  // Prompt-sized products: 512 rows through a 1B-shaped FFN weight (Q4_K), and the f32 layer of
  // the 4096-8192-4096 MLP at batch 1024.
  {
    const int64_t M = 512, K = 2048, N = 8192;
    View w = view(alloc(row_bytes(DType::Q4_K, K) * N, DType::Q4_K), DType::Q4_K, {N, K});
    View x = view(alloc(M * K * 4, DType::F32), DType::F32, {M, K});
    View o = view(alloc(M * N * 4, DType::Bool), DType::F32, {M, N});
    std::vector<Command> c(20, [=](Kernels& k) { k.linear(x, w, o); });
    const double s = time_calls(c);
    std::printf("BENCH linear q4_k M=%lld K=%lld N=%lld: %.1f us/call, %.1f TFLOP/s\n", static_cast<long long>(M),
                static_cast<long long>(K), static_cast<long long>(N), s * 1e6, 2.0 * M * K * N / s / 1e12);
    buffers.release();
  }
  {
    const int64_t M = 1024, K = 4096, N = 8192;
    View a = view(alloc(M * K * 4, DType::F32), DType::F32, {1, M, K});
    View b = view(alloc(K * N * 4, DType::F32), DType::F32, {1, K, N});
    View o = view(alloc(M * N * 4, DType::Bool), DType::F32, {1, M, N});
    std::vector<Command> c(20, [=](Kernels& k) { k.matmul(a, b, o); });
    const double s = time_calls(c);
    std::printf("BENCH matmul f32 %lldx%lldx%lld: %.1f us/call, %.1f TFLOP/s\n", static_cast<long long>(M),
                static_cast<long long>(K), static_cast<long long>(N), s * 1e6, 2.0 * M * K * N / s / 1e12);
    buffers.release();
  }
}

// --bench-matvec: eight one-row products per weight type and shape (eight copies of the weight in
// turn, so each comes from memory), printed in launch order as "MATVEC <type> <N> <K> <bytes>", for
// a profiler (ncu) to time the kernels themselves: a launch-bound loop on the host measures the host.
// TL_BENCH_MATVEC_Q8=1: the products with 8-bit activations (linear_q8_activations) instead.
void bench_matvec(Backend& gpu) {
  const char* q8_env = std::getenv("TL_BENCH_MATVEC_Q8");
  const bool q8 = q8_env != nullptr && std::string(q8_env) == "1";
  const DType types[] = {DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q6_K};
  const int64_t shapes[][2] = {{8192, 2048}, {2048, 8192}, {16384, 2048}, {3072, 2048}, {2048, 2048},
                               {960, 576}, {3072, 576}, {576, 576}, {576, 1536}, {49152, 576}};
  for (DType t : types) {
    for (const auto& sh : shapes) {
      const int64_t N = sh[0], K = sh[1];
      if (K % block_elems(t) != 0) continue;
      const size_t wbytes = row_bytes(t, K) * N;
      BenchBuffers buffers{gpu, {}};
      const View xv = bench_view(buffers.alloc(K * 4, DType::F32), DType::F32, {1, K});
      const View ov = bench_view(buffers.alloc(N * 4, DType::Bool), DType::F32, {1, N});
      std::vector<Command> cmds;
      for (int i = 0; i < 8; ++i) {
        const View wv = bench_view(buffers.alloc(wbytes, t), t, {N, K});
        cmds.push_back([=](Kernels& k) {
          if (q8)
            k.linear_q8_activations(xv, wv, ov);
          else
            k.linear(xv, wv, ov);
        });
      }
      gpu.submit(cmds, [](const std::string&) {});
      gpu.synchronize();
      std::printf("MATVEC %s %lld %lld %zu\n", dtype_name(t), static_cast<long long>(N), static_cast<long long>(K), wbytes);
    }
  }
}

}  // namespace

// A crash names the check group it happened in (stderr is unbuffered; stdout may be lost) and the frames.
const char* g_group = "start-up";

void on_crash(int sig) {
  const char head[] = "test_cuda_vs_cpu: crashed (signal) in ";
  ssize_t ignored = write(2, head, sizeof head - 1);
  ignored = write(2, g_group, std::strlen(g_group));
  ignored = write(2, "\n", 1);
  (void)ignored;
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// `--only TEXT` (see the top of this file).
const char* g_only = nullptr;
#define RUN(call)                                                                      \
  if (g_only == nullptr || std::strstr(#call, g_only) != nullptr) {                    \
    g_group = #call;                                                                  \
    std::fprintf(stderr, "-- %s\n", #call);                                           \
    call;                                                                             \
  }

int main(int argc, char** argv) {
  std::signal(SIGSEGV, on_crash);
  std::signal(SIGBUS, on_crash);
  bool bench = false, bench_k = false, bench_mv = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--bench") == 0) bench = true;
    else if (std::strcmp(argv[i], "--bench-kernels") == 0) bench_k = true;
    else if (std::strcmp(argv[i], "--bench-matvec") == 0) bench_mv = true;
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) g_only = argv[++i];
    else rng.seed(std::strtoull(argv[i], nullptr, 10));
  }
  std::unique_ptr<Backend> gpu;
  try {
    gpu = make_cuda_backend();
  } catch (const std::exception& e) {
    std::printf("SKIP: %s\n", e.what());
    return 0;
  }
  if (bench_mv) {
    bench_matvec(*gpu);
    return 0;
  }
  if (bench_k) {
    bench_kernels(*gpu);
    return 0;
  }
  if (bench) {
    for (int ctx : {16, 256, 1024}) bench_decode(*gpu, ctx);
    return 0;
  }
  auto cpu = make_cpu_backend(0);
  g_backends[0] = cpu.get();
  g_backends[1] = gpu.get();
  RUN(test_binary());
  RUN(test_unary());
  RUN(test_copy_fill_arange_where());
  RUN(test_reduce_softmax());
  RUN(test_matmul());
  RUN(test_linear());
  RUN(test_linear_tall());
  RUN(test_linear_half_range());
  RUN(test_fused_linear());
  RUN(test_q8_activations());
  RUN(test_expert_linear());
  RUN(test_gather());
  RUN(test_training());
  RUN(test_norm_rope_mask());
  RUN(test_attention());
  RUN(test_graph_replay(32));
  RUN(test_graph_replay(64));
  RUN(test_backend_contract(*gpu));
  RUN(test_destroy_from_completion());
  std::printf("%s: %d checks, %d failures\n", failures ? "FAILED" : "OK", checks, failures);
  return failures ? 1 : 0;
}
