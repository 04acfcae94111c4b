// Tests of the CPU kernels (cpp/backends/cpu/) called directly on host memory, each against a
// naive reference written here: elementwise ops with broadcasting and strided views, copies
// between dtypes, reductions, softmax, matmul, linear and gather for every weight dtype
// (quantized blocks built at random and dequantized by a reference decoder written from the
// GGUF block layouts), norms, RoPE, masks, attention, and the thread pool.
// Run with TL_CPU_NO_SIMD=1 as well to cover the portable (non-AVX2) paths.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_kernels_impl.h"
#include "backends/cpu/half.h"
#include "backends/cpu/thread_pool.h"

using namespace tl;

namespace {

int g_failures = 0;
int g_checks = 0;
std::mt19937 g_rng(12345);

#define CHECK(cond, ...)                                   \
  do {                                                     \
    ++g_checks;                                            \
    if (!(cond)) {                                         \
      ++g_failures;                                        \
      std::printf("FAIL %s:%d: ", __FILE__, __LINE__);     \
      std::printf(__VA_ARGS__);                            \
      std::printf("\n");                                   \
    }                                                      \
  } while (0)

std::vector<float> randn(size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g_rng);
  return v;
}

View make_view(void* data, DType t, std::vector<int64_t> shape, std::vector<int64_t> strides = {}) {
  View v;
  v.data = data;
  v.dtype = t;
  v.ndim = static_cast<int>(shape.size());
  int64_t s = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.shape[i] = shape[i];
    v.strides[i] = strides.empty() ? s : strides[i];
    s *= shape[i];
  }
  return v;
}

// Passes when every |got - want| <= atol + rtol * |want| (NaN matches NaN, inf matches inf).
bool close_all(const float* got, const double* want, size_t n, double atol, double rtol, const char* what) {
  double worst = 0.0;
  size_t where = 0;
  for (size_t i = 0; i < n; ++i) {
    double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    bool same_inf = std::isinf(got[i]) && std::isinf(want[i]) && (got[i] > 0) == (want[i] > 0);
    if (both_nan || same_inf || err == 0.0) continue;
    double ratio = err / (atol + rtol * std::fabs(want[i]));
    if (!(ratio <= worst)) {
      worst = ratio;
      where = i;
    }
  }
  bool ok = worst <= 1.0;
  CHECK(ok, "%s: element %zu got %.7g want %.7g", what, where, n ? got[where] : 0.0, n ? want[where] : 0.0);
  return ok;
}

// ------------------------------------------------------------------ half

void test_half() {
  using namespace tl::cpu;
  int bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0;
    if (is_nan) {
      if (!std::isnan(f)) ++bad;
      continue;
    }
    if (f32_to_f16(f) != h) ++bad;
    // Reference value from the definition.
    int e = (h >> 10) & 31, m = h & 1023;
    double ref = e == 0 ? std::ldexp(m, -24) : e == 31 ? INFINITY : std::ldexp(1024 + m, e - 25);
    if (h & 0x8000) ref = -ref;
    if (static_cast<double>(f) != ref) ++bad;
  }
  CHECK(bad == 0, "f16 round trip / exact decode: %d mismatches", bad);
  // Rounding: the f16 nearest to a float (ties to even), checked against neighbours.
  std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
  int bad_round = 0;
  for (int i = 0; i < 20000; ++i) {
    float x = i % 2 ? u(g_rng) : u(g_rng) * 1e-6f;
    uint16_t h = f32_to_f16(x);
    float y = f16_to_f32(h);
    if (std::fabs(x) >= 65520.0f) {
      if (!std::isinf(y)) ++bad_round;
      continue;
    }
    for (int d : {-1, 1}) {
      uint16_t n = static_cast<uint16_t>(h + d);
      float z = f16_to_f32(n);
      if (std::isnan(z) || ((n ^ h) & 0x8000)) continue;
      if (std::fabs(z - x) < std::fabs(y - x)) ++bad_round;
    }
  }
  CHECK(bad_round == 0, "f32->f16 not nearest: %d", bad_round);
  CHECK(f32_to_bf16(1.0f) == 0x3f80, "bf16(1)");
  CHECK(bf16_to_f32(f32_to_bf16(3.140625f)) == 3.140625f, "bf16 exact value");
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))), "bf16 NaN stays NaN");
}

// ------------------------------------------------------------------ thread pool

void test_thread_pool() {
  // Destroying a pool right after creating it (before its workers have started) must not hang.
  for (int i = 0; i < 300; ++i) {
    tl::cpu::ThreadPool quick(2 + i % 3);
    if (i % 2) quick.parallel_for(10, 1, [](int64_t, int64_t) {});
  }
  tl::cpu::ThreadPool pool(3);
  for (int rep = 0; rep < 200; ++rep) {
    int64_t n = 1 + rep * 37;
    std::vector<int> hits(static_cast<size_t>(n), 0);
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    int bad = 0;
    for (int h : hits) bad += h != 1;
    CHECK(bad == 0, "parallel_for n=%lld: %d indices not visited exactly once", (long long)n, bad);
  }
  // Nested and concurrent use runs serially instead of deadlocking.
  std::atomic<int64_t> total{0};
  pool.run(8, [&](int64_t) { pool.parallel_for(100, 1, [&](int64_t b, int64_t e) { total += e - b; }); });
  CHECK(total.load() == 800, "nested run total %lld", (long long)total.load());
  std::atomic<int64_t> t2{0};
  std::thread other([&] {
    for (int i = 0; i < 100; ++i) pool.parallel_for(1000, 10, [&](int64_t b, int64_t e) { t2 += e - b; });
  });
  for (int i = 0; i < 100; ++i) pool.parallel_for(1000, 10, [&](int64_t b, int64_t e) { t2 += e - b; });
  other.join();
  CHECK(t2.load() == 200000, "concurrent runs total %lld", (long long)t2.load());
  // Sleeping workers wake up for new jobs.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::atomic<int64_t> t3{0};
  pool.parallel_for(1000, 1, [&](int64_t b, int64_t e) { t3 += e - b; });
  CHECK(t3.load() == 1000, "after sleep total %lld", (long long)t3.load());
}

// ------------------------------------------------------------------ elementwise

double ref_binary(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Pow: return std::pow(a, b);
    case BinaryOp::Maximum: return std::max(a, b);
    case BinaryOp::Minimum: return std::min(a, b);
    case BinaryOp::Mod: { double r = std::fmod(a, b); if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
    case BinaryOp::LogicalAnd: return a != 0 && b != 0;
    case BinaryOp::LogicalOr: return a != 0 || b != 0;
  }
  return 0;
}

void test_binary(Kernels& k) {
  // a: [4, 5, 6] transposed view of a [6, 5, 4] buffer; b: [5, 1] broadcast over dims 0 and 2.
  const int64_t A = 4, B = 5, C = 6;
  std::vector<float> abuf = randn(A * B * C), bbuf = randn(B);
  for (auto& x : bbuf) x = std::fabs(x) + 0.5f;
  View a = make_view(abuf.data(), DType::F32, {A, B, C}, {1, A, A * B});
  View b = make_view(bbuf.data(), DType::F32, {A, B, C}, {0, 1, 0});
  for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Pow,
                      BinaryOp::Maximum, BinaryOp::Minimum, BinaryOp::Mod, BinaryOp::Lt, BinaryOp::Ge}) {
    bool cmp = op == BinaryOp::Lt || op == BinaryOp::Ge;
    std::vector<float> outf(A * B * C);
    std::vector<uint8_t> outb(A * B * C);
    View out = cmp ? make_view(outb.data(), DType::Bool, {A, B, C}) : make_view(outf.data(), DType::F32, {A, B, C});
    k.binary(op, a, b, out);
    std::vector<double> want(A * B * C);
    std::vector<float> got(A * B * C);
    for (int64_t i = 0; i < A; ++i)
      for (int64_t j = 0; j < B; ++j)
        for (int64_t l = 0; l < C; ++l) {
          size_t o = static_cast<size_t>((i * B + j) * C + l);
          double av = abuf[static_cast<size_t>(i + j * A + l * A * B)];
          want[o] = ref_binary(op, av, bbuf[static_cast<size_t>(j)]);
          got[o] = cmp ? outb[o] : outf[o];
        }
    close_all(got.data(), want.data(), got.size(), 1e-6, 1e-5, ("binary op " + std::to_string(int(op))).c_str());
  }
  // f16 inputs and output, scalar-first form.
  std::vector<uint16_t> h(64), ho(64);
  std::vector<float> hv = randn(64);
  for (int i = 0; i < 64; ++i) h[i] = tl::cpu::f32_to_f16(hv[i]);
  View hvw = make_view(h.data(), DType::F16, {8, 8});
  View hout = make_view(ho.data(), DType::F16, {8, 8});
  k.binary_scalar(BinaryOp::Sub, hvw, 2.5, true, hout);
  std::vector<float> got(64);
  std::vector<double> want(64);
  for (int i = 0; i < 64; ++i) {
    got[i] = tl::cpu::f16_to_f32(ho[i]);
    want[i] = 2.5 - tl::cpu::f16_to_f32(h[i]);
  }
  close_all(got.data(), want.data(), 64, 1e-3, 1e-3, "f16 scalar-first sub");
  // Integer arithmetic is exact and floor-divides/mods like Python.
  std::vector<int64_t> ia = {7, -7, 7, -7, 1LL << 40}, ib = {2, 2, -2, -2, 3}, io(5);
  View va = make_view(ia.data(), DType::I64, {5}), vb = make_view(ib.data(), DType::I64, {5});
  View vo = make_view(io.data(), DType::I64, {5});
  k.binary(BinaryOp::Mod, va, vb, vo);
  CHECK(io[0] == 1 && io[1] == 1 && io[2] == -1 && io[3] == -1 && io[4] == (1LL << 40) % 3, "int mod");
  k.binary(BinaryOp::Add, va, vb, vo);
  CHECK(io[4] == (1LL << 40) + 3, "int64 add exact");
}

void test_unary(Kernels& k) {
  const int64_t n = 1000;
  std::vector<float> x = randn(n, 2.0f), y(n);
  View vx = make_view(x.data(), DType::F32, {n}), vy = make_view(y.data(), DType::F32, {n});
  struct Case { UnaryOp op; std::function<double(double)> f; };
  std::vector<Case> cases = {
      {UnaryOp::Neg, [](double v) { return -v; }},
      {UnaryOp::Exp, [](double v) { return std::exp(v); }},
      {UnaryOp::Tanh, [](double v) { return std::tanh(v); }},
      {UnaryOp::Sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); }},
      {UnaryOp::Silu, [](double v) { return v / (1 + std::exp(-v)); }},
      {UnaryOp::GeluTanh, [](double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); }},
      {UnaryOp::GeluErf, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }},
      {UnaryOp::Relu, [](double v) { return v > 0 ? v : 0; }},
      {UnaryOp::Round, [](double v) { return std::nearbyint(v); }},
      {UnaryOp::Step, [](double v) { return v > 0 ? 1.0 : 0.0; }},
      {UnaryOp::Sin, [](double v) { return std::sin(v); }},
  };
  for (auto& c : cases) {
    k.unary(c.op, vx, vy);
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = c.f(x[i]);
    close_all(y.data(), want.data(), n, 1e-6, 1e-5, ("unary op " + std::to_string(int(c.op))).c_str());
  }
}

void test_copy_fill_arange_where(Kernels& k) {
  // f32 [3, 4] -> transposed f16 view in a [4, 3] buffer -> back to f32.
  std::vector<float> src = randn(12);
  std::vector<uint16_t> mid(12);
  std::vector<float> back(12);
  View s = make_view(src.data(), DType::F32, {3, 4});
  View m = make_view(mid.data(), DType::F16, {3, 4}, {1, 3});
  k.copy(s, m);
  View m2 = make_view(mid.data(), DType::F16, {3, 4}, {1, 3});
  View b = make_view(back.data(), DType::F32, {3, 4});
  k.copy(m2, b);
  std::vector<double> want(src.begin(), src.end());
  close_all(back.data(), want.data(), 12, 1e-3, 1e-3, "copy f32->f16 strided->f32");
  CHECK(tl::cpu::f16_to_f32(mid[1 * 3 + 0]) == tl::cpu::f16_to_f32(tl::cpu::f32_to_f16(src[1])), "copy wrote transposed");
  // int64 -> i32 exact, float -> int truncates.
  std::vector<float> fv = {1.7f, -1.7f, 3.0f};
  std::vector<int32_t> iv(3);
  k.copy(make_view(fv.data(), DType::F32, {3}), make_view(iv.data(), DType::I32, {3}));
  CHECK(iv[0] == 1 && iv[1] == -1 && iv[2] == 3, "float->int truncates");
  // fill a strided column.
  std::vector<float> buf(12, 0.0f);
  k.fill(make_view(buf.data(), DType::F32, {3}, {4}), 7.0);
  CHECK(buf[0] == 7 && buf[4] == 7 && buf[8] == 7 && buf[1] == 0, "fill strided");
  std::vector<int64_t> ar(5);
  k.arange(make_view(ar.data(), DType::I64, {5}), 3, -2);
  CHECK(ar[0] == 3 && ar[4] == -5, "arange i64");
  std::vector<uint8_t> cond = {1, 0, 1};
  std::vector<float> wa = {1, 2, 3}, wb = {9}, wo(3);
  k.where(make_view(cond.data(), DType::Bool, {3}), make_view(wa.data(), DType::F32, {3}),
          make_view(wb.data(), DType::F32, {3}, {0}), make_view(wo.data(), DType::F32, {3}));
  CHECK(wo[0] == 1 && wo[1] == 9 && wo[2] == 3, "where with broadcast b");
}

// ------------------------------------------------------------------ reduce, softmax

void test_reduce_softmax(Kernels& k) {
  const int64_t O = 3, N = 700, I = 5;
  std::vector<float> x = randn(O * N * I);
  View vx = make_view(x.data(), DType::F32, {O, N, I});
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min, ReduceOp::ArgMax, ReduceOp::ArgMin}) {
    for (int64_t inner : {I, int64_t{1}}) {
      // inner == 1 views the same data as [O, N * I, 1] (a reduction over contiguous rows).
      const int64_t outer = O, n = inner == 1 ? N * I : N;
      std::vector<float> of(outer * inner);
      std::vector<int64_t> oi(outer * inner);
      bool arg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
      View out = arg ? make_view(oi.data(), DType::I64, {outer, inner}) : make_view(of.data(), DType::F32, {outer, inner});
      k.reduce(op, vx, outer, n, inner, out);
      std::vector<double> want(outer * inner);
      std::vector<float> got(outer * inner);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          double acc = 0, best = 0;
          int64_t bi = 0;
          for (int64_t j = 0; j < n; ++j) {
            double v = x[static_cast<size_t>((o * n + j) * inner + i)];
            acc += v;
            bool better = op == ReduceOp::Max || op == ReduceOp::ArgMax ? v > best : v < best;
            if (j == 0 || better) { best = v; bi = j; }
          }
          size_t idx = static_cast<size_t>(o * inner + i);
          want[idx] = op == ReduceOp::Sum ? acc : op == ReduceOp::Mean ? acc / n : arg ? bi : best;
          got[idx] = arg ? static_cast<float>(oi[idx]) : of[idx];
        }
      close_all(got.data(), want.data(), got.size(), 1e-4, 1e-5, ("reduce op " + std::to_string(int(op))).c_str());
    }
  }
  std::vector<float> sm(O * N * I);
  k.softmax(vx, O, N, I, make_view(sm.data(), DType::F32, {O, N, I}));
  std::vector<double> want(O * N * I);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i) {
      double mx = -1e30, sum = 0;
      for (int64_t j = 0; j < N; ++j) mx = std::max(mx, (double)x[(o * N + j) * I + i]);
      for (int64_t j = 0; j < N; ++j) sum += std::exp(x[(o * N + j) * I + i] - mx);
      for (int64_t j = 0; j < N; ++j) want[(o * N + j) * I + i] = std::exp(x[(o * N + j) * I + i] - mx) / sum;
    }
  close_all(sm.data(), want.data(), sm.size(), 1e-7, 1e-5, "softmax middle axis");
}

// ------------------------------------------------------------------ matmul

void test_matmul(Kernels& k) {
  for (auto dims : std::vector<std::vector<int64_t>>{{2, 7, 13, 9}, {3, 1, 64, 40}, {1, 70, 33, 65}, {4, 130, 20, 3}}) {
    int64_t Bt = dims[0], M = dims[1], K = dims[2], N = dims[3];
    std::vector<float> a = randn(Bt * M * K), bT = randn(N * K), out(Bt * M * N);
    View va = make_view(a.data(), DType::F32, {Bt, M, K});
    // b is one [K, N] matrix broadcast over the batch, stored transposed ([N, K] buffer).
    View vb = make_view(bT.data(), DType::F32, {Bt, K, N}, {0, 1, K});
    k.matmul(va, vb, make_view(out.data(), DType::F32, {Bt, M, N}));
    std::vector<double> want(Bt * M * N);
    for (int64_t bi = 0; bi < Bt; ++bi)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double s = 0;
          for (int64_t kk = 0; kk < K; ++kk) s += (double)a[(bi * M + m) * K + kk] * bT[n * K + kk];
          want[(bi * M + m) * N + n] = s;
        }
    close_all(out.data(), want.data(), out.size(), 1e-4, 1e-4, "matmul transposed b");
    // Same product with b contiguous [K, N] in f16 and an f16 output.
    std::vector<uint16_t> bh(K * N), oh(Bt * M * N);
    for (int64_t kk = 0; kk < K; ++kk)
      for (int64_t n = 0; n < N; ++n) bh[kk * N + n] = tl::cpu::f32_to_f16(bT[n * K + kk]);
    k.matmul(va, make_view(bh.data(), DType::F16, {Bt, K, N}, {0, N, 1}), make_view(oh.data(), DType::F16, {Bt, M, N}));
    std::vector<float> got(Bt * M * N);
    for (size_t i = 0; i < got.size(); ++i) got[i] = tl::cpu::f16_to_f32(oh[i]);
    close_all(got.data(), want.data(), got.size(), 2e-2, 5e-3, "matmul f16 b, f16 out");
  }
}

// ------------------------------------------------------------------ quantized weights

float h2f(const uint8_t* p) { uint16_t h; std::memcpy(&h, p, 2); return tl::cpu::f16_to_f32(h); }
void put_half(uint8_t* p, float f) { uint16_t h = tl::cpu::f32_to_f16(f); std::memcpy(p, &h, 2); }

// Reference decoder, element by element, straight from the ggml block layouts.
float ref_element(DType t, const uint8_t* b, int e) {
  auto bit = [](const uint8_t* bytes, int i) { return (bytes[i / 8] >> (i % 8)) & 1; };
  auto nib = [](const uint8_t* qs, int e32) { return e32 < 16 ? (qs[e32] & 15) : (qs[e32 - 16] >> 4); };
  auto scale_min = [](const uint8_t* s, int j, int* sc, int* mn) {
    if (j < 4) { *sc = s[j] & 63; *mn = s[j + 4] & 63; }
    else { *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4); *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4); }
  };
  switch (t) {
    case DType::Q4_0: return h2f(b) * (nib(b + 2, e) - 8);
    case DType::Q4_1: return h2f(b) * nib(b + 4, e) + h2f(b + 2);
    case DType::Q5_0: return h2f(b) * ((nib(b + 6, e) | (bit(b + 2, e) << 4)) - 16);
    case DType::Q5_1: return h2f(b) * (nib(b + 8, e) | (bit(b + 4, e) << 4)) + h2f(b + 2);
    case DType::Q8_0: return h2f(b) * static_cast<int8_t>(b[2 + e]);
    case DType::Q4_K: case DType::Q5_K: {
      int s = e / 32, l = e % 32, sc, mn;
      scale_min(b + 4, s, &sc, &mn);
      const uint8_t* qs = b + (t == DType::Q4_K ? 16 : 48);
      int q = (qs[(s / 2) * 32 + l] >> (4 * (s % 2))) & 15;
      if (t == DType::Q5_K) q |= ((b[16 + l] >> s) & 1) << 4;
      return h2f(b) * sc * q - h2f(b + 2) * mn;
    }
    case DType::Q6_K: {
      int half = e / 128, r = e % 128;
      int lo = (b[64 * half + r % 64] >> (4 * (r / 64))) & 15;
      int hi = (b[128 + 32 * half + r % 32] >> (2 * (r / 32))) & 3;
      return h2f(b + 208) * static_cast<int8_t>(b[192 + e / 16]) * ((lo | (hi << 4)) - 32);
    }
    case DType::F32: { float f; std::memcpy(&f, b, 4); return f; }
    case DType::F16: return h2f(b);
    case DType::BF16: { uint16_t h; std::memcpy(&h, b, 2); return tl::cpu::bf16_to_f32(h); }
    default: return NAN;
  }
}

// Random but valid blocks: random quant bits, small finite scales.
std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t cols) {
  size_t rb = row_bytes(t, cols);
  std::vector<uint8_t> w(rb * rows);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& x : w) x = static_cast<uint8_t>(byte(g_rng));
  std::uniform_real_distribution<float> sc(0.001f, 0.05f);
  const int64_t be = block_elems(t), bb = block_bytes(t);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t blk = 0; blk < cols / be; ++blk) {
      uint8_t* p = w.data() + r * rb + blk * bb;
      switch (t) {
        case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: put_half(p, sc(g_rng)); break;
        case DType::Q4_1: case DType::Q5_1: put_half(p, sc(g_rng)); put_half(p + 2, -sc(g_rng) * 8); break;
        case DType::Q4_K: case DType::Q5_K: put_half(p, sc(g_rng) * 0.1f); put_half(p + 2, sc(g_rng) * 0.1f); break;
        case DType::Q6_K: put_half(p + 208, sc(g_rng) * 0.05f); break;
        case DType::F32: { float f = std::normal_distribution<float>(0, 0.1f)(g_rng); std::memcpy(p, &f, 4); break; }
        case DType::F16: put_half(p, std::normal_distribution<float>(0, 0.1f)(g_rng)); break;
        case DType::BF16: { uint16_t h = tl::cpu::f32_to_bf16(std::normal_distribution<float>(0, 0.1f)(g_rng)); std::memcpy(p, &h, 2); break; }
        default: break;
      }
    }
  return w;
}

std::vector<double> ref_dequant(DType t, const std::vector<uint8_t>& w, int64_t rows, int64_t cols) {
  std::vector<double> out(rows * cols);
  size_t rb = row_bytes(t, cols);
  const int64_t be = block_elems(t), bb = block_bytes(t);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = ref_element(t, w.data() + r * rb + (c / be) * bb, static_cast<int>(c % be));
  return out;
}

void test_linear_and_gather(Kernels& k) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                  DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const int64_t K = block_elems(t) == 256 ? 512 : 160, N = 37;
    std::vector<uint8_t> w = random_weights(t, N, K);
    std::vector<double> wd = ref_dequant(t, w, N, K);
    View vw = make_view(w.data(), t, {N, K});
    for (int64_t M : {1, 2, 5, 70}) {
      std::vector<float> x = randn(M * K), out(M * N);
      k.linear(make_view(x.data(), DType::F32, {M, K}), vw, make_view(out.data(), DType::F32, {M, N}));
      std::vector<double> want(M * N);
      double scale = 0;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double s = 0, a = 0;
          for (int64_t c = 0; c < K; ++c) {
            s += x[m * K + c] * wd[n * K + c];
            a += std::fabs(x[m * K + c] * wd[n * K + c]);
          }
          want[m * N + n] = s;
          scale = std::max(scale, a);
        }
      std::string what = std::string("linear ") + dtype_name(t) + " M=" + std::to_string(M);
      close_all(out.data(), want.data(), out.size(), 1e-5 * scale + 1e-6, 1e-5, what.c_str());
    }
    // gather rows 3, 0, 36 into f32 and f16.
    std::vector<int32_t> ids = {3, 0, 36};
    std::vector<float> g(3 * K);
    k.gather_rows(vw, make_view(ids.data(), DType::I32, {3}), make_view(g.data(), DType::F32, {3, K}));
    std::vector<double> want(3 * K);
    for (int i = 0; i < 3; ++i)
      for (int64_t c = 0; c < K; ++c) want[i * K + c] = wd[ids[i] * K + c];
    close_all(g.data(), want.data(), g.size(), 0, 1e-6, (std::string("gather ") + dtype_name(t)).c_str());
    std::vector<uint16_t> gh(3 * K);
    k.gather_rows(vw, make_view(ids.data(), DType::I32, {3}), make_view(gh.data(), DType::F16, {3, K}));
    for (size_t i = 0; i < g.size(); ++i) g[i] = tl::cpu::f16_to_f32(gh[i]);
    close_all(g.data(), want.data(), g.size(), 1e-4, 1e-3, (std::string("gather to f16 ") + dtype_name(t)).c_str());
  }
  // Out-of-range ids raise KernelError.
  std::vector<float> table(8 * 4, 1.0f), out(4);
  std::vector<int64_t> bad = {8};
  bool threw = false;
  try {
    k.gather_rows(make_view(table.data(), DType::F32, {8, 4}), make_view(bad.data(), DType::I64, {1}),
                  make_view(out.data(), DType::F32, {1, 4}));
  } catch (const KernelError&) {
    threw = true;
  }
  CHECK(threw, "gather_rows with id 8 of 8 rows must throw KernelError");
}

// Matrix-vector shapes around the 4-row groups of the decode kernels: N = 1..9 (every tail), a
// single block (K = 32) and a long row, for the formats with hand-written AVX2 dots.
void test_linear_row_groups(Kernels& k) {
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::F16}) {
    for (int64_t K : {32, 96, 1536}) {
      for (int64_t N = 1; N <= 9; ++N) {
        std::vector<uint8_t> w = random_weights(t, N, K);
        std::vector<double> wd = ref_dequant(t, w, N, K);
        std::vector<float> x = randn(K), out(N);
        k.linear(make_view(x.data(), DType::F32, {1, K}), make_view(w.data(), t, {N, K}),
                 make_view(out.data(), DType::F32, {1, N}));
        std::vector<double> want(N);
        double scale = 0;
        for (int64_t n = 0; n < N; ++n) {
          for (int64_t c = 0; c < K; ++c) {
            want[n] += x[c] * wd[n * K + c];
            scale = std::max(scale, std::fabs(x[c] * wd[n * K + c]));
          }
        }
        std::string what = std::string("linear rows ") + dtype_name(t) + " K=" + std::to_string(K) + " N=" + std::to_string(N);
        close_all(out.data(), want.data(), out.size(), 1e-5 * scale * std::sqrt(double(K)) + 1e-6, 1e-5, what.c_str());
      }
    }
  }
}

// The matrix-vector kernels of Gemma 3's weight formats (Q5_0, Q4_K, Q6_K; also Q5_K, Q4_0, Q8_0):
// linear with M = 1 (the AVX2 row dots where the CPU has them) against the portable row dot and
// a float64 dot with the reference decoder, on random blocks plus all-zero and all-one bit
// patterns; K not a multiple of 256 for Q5_0, one output row and many (split across threads).
void test_linear_matvec_formats(Kernels& k) {
  struct Case { DType t; int64_t K; };
  const Case cases[] = {{DType::Q5_0, 32}, {DType::Q5_0, 160}, {DType::Q5_0, 640}, {DType::Q5_0, 2048},
                        {DType::Q4_K, 256}, {DType::Q4_K, 1024}, {DType::Q4_K, 2048},
                        {DType::Q5_K, 256}, {DType::Q5_K, 1280},
                        {DType::Q6_K, 256}, {DType::Q6_K, 768}, {DType::Q6_K, 2048},
                        {DType::Q4_0, 640}, {DType::Q8_0, 640}};
  for (const Case& c : cases) {
    for (int64_t N : {1, 7, 300}) {
      const DType t = c.t;
      const int64_t K = c.K;
      std::vector<uint8_t> w = random_weights(t, N, K);
      const size_t rb = row_bytes(t, K);
      if (N >= 7) {
        // row 1: every quant bit set, row 2: none (scales kept from the random blocks, but Q4_K/
        // Q5_K scale bytes are part of the pattern too: 6-bit scales and mins all 63 or all 0).
        const int64_t be = block_elems(t), bb = block_bytes(t);
        for (int pat = 0; pat < 2; ++pat) {
          uint8_t* row = w.data() + (1 + pat) * rb;
          for (int64_t blk = 0; blk < K / be; ++blk) {
            uint8_t* p = row + blk * bb;
            const uint8_t v = pat == 0 ? 0xFF : 0x00;
            switch (t) {
              case DType::Q5_0: std::memset(p + 2, v, 20); break;
              case DType::Q4_0: std::memset(p + 2, v, 16); break;
              case DType::Q8_0: std::memset(p + 2, pat == 0 ? 0x80 : 0x7F, 32); break;  // -128 and 127
              case DType::Q4_K: std::memset(p + 4, v, 140); break;
              case DType::Q5_K: std::memset(p + 4, v, 172); break;
              case DType::Q6_K: std::memset(p, v, 192); std::memset(p + 192, pat == 0 ? 0x80 : 0x7F, 16); break;
              default: break;
            }
          }
        }
      }
      std::vector<double> wd = ref_dequant(t, w, N, K);
      std::vector<float> x = randn(K), out(N);
      k.linear(make_view(x.data(), DType::F32, {1, K}), make_view(w.data(), t, {N, K}),
               make_view(out.data(), DType::F32, {1, N}));
      std::vector<double> want(N), portable(N);
      std::vector<float> port_f(N);
      double worst_ref = 0, worst_port = 0;
      int64_t at_ref = 0, at_port = 0;
      bool same_as_kernel = true;
      for (int64_t n = 0; n < N; ++n) {
        double s = 0, a = 0;
        for (int64_t i = 0; i < K; ++i) {
          s += x[i] * wd[n * K + i];
          a += std::fabs(x[i] * wd[n * K + i]);
        }
        const float p = tl::cpu::quant_row_dot(t, false, w.data() + n * rb, x.data(), K);
        const float simd = tl::cpu::quant_row_dot(t, true, w.data() + n * rb, x.data(), K);
        same_as_kernel = same_as_kernel && simd == out[n];
        // f32 sums of K products: a few ulps of the sum of magnitudes
        const double tol = 2e-6 * a + 1e-30;
        const double er = std::fabs(out[n] - s) / tol, ep = std::fabs(static_cast<double>(out[n]) - p) / tol;
        if (er > worst_ref) { worst_ref = er; at_ref = n; }
        if (ep > worst_port) { worst_port = ep; at_port = n; }
        want[n] = s;
        port_f[n] = p;
      }
      std::string what = std::string("matvec ") + dtype_name(t) + " K=" + std::to_string(K) + " N=" + std::to_string(N);
      CHECK(worst_ref <= 1.0, "%s: row %lld got %.8g, float64 reference %.8g (%.2f of tolerance)", what.c_str(),
            (long long)at_ref, out[at_ref], want[at_ref], worst_ref);
      CHECK(worst_port <= 1.0, "%s: row %lld got %.8g, portable %.8g (%.2f of tolerance)", what.c_str(),
            (long long)at_port, out[at_port], port_f[at_port], worst_port);
      CHECK(same_as_kernel, "%s: linear differs from its row kernel", what.c_str());
    }
  }
}

// The 8-bit activation path, against a reference written from its definition: x quantized per
// block of 32 to q = round_half_even(x * 127 / max|x|) with d = max|x| / 127, integer dot products
// per block, scaled by the weight block's d (and its m for Q4_1 times d * sum(q)). Every row of an
// M-row product is bitwise the product of that row alone (what lets tl serve --fast batch decode
// steps): M = 1..8 (the decode sizes the ops layer sends here; 3..8 take the pair kernel where
// the CPU has AVX-512 VNNI) and 13 (two groups of x rows); N not a multiple of the chunks of 8
// weight rows, and N = 40 (whole chunks alone: where the lanes kernels take every chunk, the column
// kernel's layouts are not made); K of whole and partial groups of 8 blocks.
void test_linear_q8_activations(Kernels& k) {
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const bool kq = block_elems(t) == 256;
    for (int64_t K : kq ? std::vector<int64_t>{256, 512, 1280} : std::vector<int64_t>{32, 160, 576}) {
      for (int64_t N : {1, 3, 4, 7, 37, 40}) {
        for (int64_t M : {1, 2, 3, 4, 5, 6, 7, 8, 13}) {
          if (M > 1 && N != 7 && N != 37 && N != 40) continue;
          std::vector<uint8_t> w = random_weights(t, N, K);
          std::vector<double> wd = ref_dequant(t, w, N, K);
          std::vector<float> x = randn(M * K);
          x[0] = 0.0f;                                                   // exact zeros quantize to 0
          if (K >= 64) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);  // an all-zero block
          std::vector<float> out(M * N), exact(M * N);
          View vx = make_view(x.data(), DType::F32, {M, K}), vw = make_view(w.data(), t, {N, K});
          k.linear_q8_activations(vx, vw, make_view(out.data(), DType::F32, {M, N}));
          k.linear(vx, vw, make_view(exact.data(), DType::F32, {M, N}));
          std::vector<double> xq(M * K);  // dequantized activations
          for (int64_t b = 0; b < M * K / 32; ++b) {
            float amax = 0;
            for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
            const float id = amax > 0 ? 127.0f / amax : 0.0f, d = amax / 127.0f;
            for (int j = 0; j < 32; ++j) {
              double q = std::nearbyint(x[b * 32 + j] * id);
              xq[b * 32 + j] = std::min(127.0, std::max(-127.0, q)) * d;
            }
          }
          std::vector<double> want(M * N);
          double scale = 0, diff = 0;
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
              for (int64_t c = 0; c < K; ++c) {
                want[m * N + n] += xq[m * K + c] * wd[n * K + c];
                scale = std::max(scale, std::fabs(xq[m * K + c] * wd[n * K + c]));
              }
              diff = std::max(diff, std::fabs(static_cast<double>(exact[m * N + n]) - want[m * N + n]));
            }
          std::string what = std::string("linear 8-bit activations ") + dtype_name(t) + " M=" + std::to_string(M) +
                             " K=" + std::to_string(K) + " N=" + std::to_string(N);
          close_all(out.data(), want.data(), out.size(), 1e-5 * scale * std::sqrt(double(K)) + 1e-6, 1e-5, what.c_str());
          // The quantized path really ran: its result is not the exact one.
          CHECK(diff > 1e-6 * scale, "%s: result equals the exact linear", what.c_str());
          // Each row bitwise the product of that row alone.
          for (int64_t m = 0; m < M && M > 1; ++m) {
            std::vector<float> alone(N);
            k.linear_q8_activations(make_view(x.data() + m * K, DType::F32, {1, K}), vw,
                                    make_view(alone.data(), DType::F32, {1, N}));
            CHECK(std::memcmp(alone.data(), out.data() + m * N, N * sizeof(float)) == 0,
                  "%s: row %lld differs from the row alone", what.c_str(), static_cast<long long>(m));
          }
        }
      }
    }
  }
  // Formats without an integer dot compute linear exactly.
  for (DType t : {DType::Q5_1, DType::F16, DType::F32}) {
    const int64_t K = 256, N = 5, M = 2;
    std::vector<uint8_t> w = random_weights(t, N, K);
    std::vector<float> x = randn(M * K), a(M * N), b(M * N);
    View vx = make_view(x.data(), DType::F32, {M, K}), vw = make_view(w.data(), t, {N, K});
    k.linear_q8_activations(vx, vw, make_view(a.data(), DType::F32, {M, N}));
    k.linear(vx, vw, make_view(b.data(), DType::F32, {M, N}));
    CHECK(a == b, "linear_q8_activations %s falls back to the exact linear", dtype_name(t));
  }
}

// ------------------------------------------------------------------ nn

void test_norms(Kernels& k) {
  const int64_t R = 5, D = 96;
  std::vector<float> x = randn(R * D), w = randn(D), b = randn(D), out(R * D);
  k.rms_norm(make_view(x.data(), DType::F32, {R, D}), make_view(w.data(), DType::F32, {D}), 1e-5f,
             make_view(out.data(), DType::F32, {R, D}));
  std::vector<double> want(R * D);
  for (int64_t r = 0; r < R; ++r) {
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += (double)x[r * D + d] * x[r * D + d];
    double inv = 1 / std::sqrt(ss / D + 1e-5);
    for (int64_t d = 0; d < D; ++d) want[r * D + d] = x[r * D + d] * inv * w[d];
  }
  close_all(out.data(), want.data(), out.size(), 1e-6, 1e-5, "rms_norm");
  k.layer_norm(make_view(x.data(), DType::F32, {R, D}), make_view(w.data(), DType::F32, {D}),
               make_view(b.data(), DType::F32, {D}), 1e-5f, make_view(out.data(), DType::F32, {R, D}));
  for (int64_t r = 0; r < R; ++r) {
    double mean = 0, var = 0;
    for (int64_t d = 0; d < D; ++d) mean += x[r * D + d];
    mean /= D;
    for (int64_t d = 0; d < D; ++d) var += (x[r * D + d] - mean) * (x[r * D + d] - mean);
    var /= D;
    for (int64_t d = 0; d < D; ++d) want[r * D + d] = (x[r * D + d] - mean) / std::sqrt(var + 1e-5) * w[d] + b[d];
  }
  close_all(out.data(), want.data(), out.size(), 1e-5, 1e-5, "layer_norm");
}

void test_rope(Kernels& k) {
  const int64_t O = 2, S = 3, H = 2, D = 8, off = 5;
  const float base = 10000.0f;
  std::vector<float> x = randn(O * S * H * D), out(x.size());
  for (bool neox : {false, true}) {
    k.rope(make_view(x.data(), DType::F32, {O, S, H, D}), off, base, neox, make_view(out.data(), DType::F32, {O, S, H, D}));
    std::vector<double> want(x.size());
    for (int64_t o = 0; o < O; ++o)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t h = 0; h < H; ++h) {
          const float* v = x.data() + ((o * S + s) * H + h) * D;
          double* w = want.data() + ((o * S + s) * H + h) * D;
          for (int64_t i = 0; i < D / 2; ++i) {
            double th = (off + s) * std::pow(base, -2.0 * i / D);
            int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + D / 2 : 2 * i + 1;
            w[i0] = v[i0] * std::cos(th) - v[i1] * std::sin(th);
            w[i1] = v[i0] * std::sin(th) + v[i1] * std::cos(th);
          }
        }
    close_all(out.data(), want.data(), out.size(), 1e-5, 1e-5, neox ? "rope neox" : "rope adjacent");
  }
  std::vector<float> mask(3 * 5);
  k.causal_mask(2, make_view(mask.data(), DType::F32, {3, 5}));
  CHECK(mask[0 * 5 + 2] == 0 && std::isinf(mask[0 * 5 + 3]) && mask[2 * 5 + 4] == 0 && mask[1 * 5 + 3] == 0 &&
            std::isinf(mask[1 * 5 + 4]),
        "causal_mask with offset 2");
}

void test_attention(Kernels& k) {
  // q [Sq, Hq, D]; k/v are the first Sk rows of an f16 cache [cap, Hkv, D].
  const int64_t Sq = 3, Hq = 6, Hkv = 2, D = 16, Sk = 7, cap = 12, pos = 4;
  std::vector<float> q = randn(Sq * Hq * D), kf = randn(cap * Hkv * D), vf = randn(cap * Hkv * D);
  std::vector<uint16_t> kh(kf.size()), vh(vf.size());
  for (size_t i = 0; i < kf.size(); ++i) {
    kh[i] = tl::cpu::f32_to_f16(kf[i]);
    vh[i] = tl::cpu::f32_to_f16(vf[i]);
    kf[i] = tl::cpu::f16_to_f32(kh[i]);
    vf[i] = tl::cpu::f16_to_f32(vh[i]);
  }
  std::vector<float> mask = randn(Sq * Sk), out(Sq * Hq * D);
  const float scale = 0.25f;
  for (int variant = 0; variant < 3; ++variant) {
    bool causal = variant != 1, use_mask = variant != 0;
    bool f16 = variant != 2;
    View vk = f16 ? make_view(kh.data(), DType::F16, {Sk, Hkv, D}) : make_view(kf.data(), DType::F32, {Sk, Hkv, D});
    View vv = f16 ? make_view(vh.data(), DType::F16, {Sk, Hkv, D}) : make_view(vf.data(), DType::F32, {Sk, Hkv, D});
    View vm = use_mask ? make_view(mask.data(), DType::F32, {Sq, Sk}) : View{};
    k.attention(make_view(q.data(), DType::F32, {Sq, Hq, D}), vk, vv, vm, scale, causal, pos,
                make_view(out.data(), DType::F32, {Sq, Hq, D}));
    std::vector<double> want(out.size());
    for (int64_t i = 0; i < Sq; ++i)
      for (int64_t h = 0; h < Hq; ++h) {
        int64_t kvh = h / (Hq / Hkv);
        std::vector<double> s(Sk, -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < Sk; ++j) {
          if (causal && j > pos + i) continue;
          double d = 0;
          for (int64_t c = 0; c < D; ++c) d += (double)q[(i * Hq + h) * D + c] * kf[(j * Hkv + kvh) * D + c];
          s[j] = d * scale + (use_mask ? mask[i * Sk + j] : 0.0);
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < Sk; ++j) sum += std::exp(s[j] - mx);
        for (int64_t c = 0; c < D; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < Sk; ++j) acc += std::exp(s[j] - mx) / sum * vf[(j * Hkv + kvh) * D + c];
          want[(i * Hq + h) * D + c] = acc;
        }
      }
    close_all(out.data(), want.data(), out.size(), 1e-5, 1e-4, ("attention variant " + std::to_string(variant)).c_str());
  }
}

// Decode-shaped attention (few query rows, many keys), where the keys are split over tasks and the
// partial softmaxes merged: f32 and f16 caches, head dims with and without a SIMD tail, causal
// limits inside the cache, an additive mask with -inf entries and a query row that sees no key.
void test_attention_long(Kernels& k) {
  struct Case { int64_t Sq, Hq, Hkv, D, Sk, pos; bool causal, use_mask, f16; };
  const Case cases[] = {
      {1, 9, 3, 64, 4100, 4099, true, false, false}, {1, 9, 3, 64, 4100, 4099, true, false, true},
      {1, 6, 2, 40, 1000, 700, true, true, true},    {2, 4, 4, 16, 300, 290, true, false, false},
      {1, 2, 1, 64, 129, 0, false, true, false},     {3, 6, 3, 8, 2000, 1500, false, true, true},
  };
  for (const Case& c : cases) {
    const int64_t Sq = c.Sq, Hq = c.Hq, Hkv = c.Hkv, D = c.D, Sk = c.Sk;
    std::vector<float> q = randn(Sq * Hq * D), kf = randn(Sk * Hkv * D), vf = randn(Sk * Hkv * D);
    std::vector<uint16_t> kh(kf.size()), vh(vf.size());
    for (size_t i = 0; i < kf.size(); ++i) {
      kh[i] = tl::cpu::f32_to_f16(kf[i]);
      vh[i] = tl::cpu::f32_to_f16(vf[i]);
      if (c.f16) {
        kf[i] = tl::cpu::f16_to_f32(kh[i]);
        vf[i] = tl::cpu::f16_to_f32(vh[i]);
      }
    }
    std::vector<float> mask(Sq * Sk, 0.0f), out(Sq * Hq * D);
    if (c.use_mask) {
      mask = randn(Sq * Sk);
      for (int64_t j = 0; j < Sk; j += 3) mask[j] = -INFINITY;
      if (Sq > 1) std::fill(mask.begin() + Sk, mask.begin() + 2 * Sk, -INFINITY);  // row 1 sees nothing
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    View vk = c.f16 ? make_view(kh.data(), DType::F16, {Sk, Hkv, D}) : make_view(kf.data(), DType::F32, {Sk, Hkv, D});
    View vv = c.f16 ? make_view(vh.data(), DType::F16, {Sk, Hkv, D}) : make_view(vf.data(), DType::F32, {Sk, Hkv, D});
    k.attention(make_view(q.data(), DType::F32, {Sq, Hq, D}), vk, vv,
                c.use_mask ? make_view(mask.data(), DType::F32, {Sq, Sk}) : View{}, scale, c.causal, c.pos,
                make_view(out.data(), DType::F32, {Sq, Hq, D}));
    std::vector<double> want(out.size(), 0.0);
    for (int64_t i = 0; i < Sq; ++i)
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t kvh = h / (Hq / Hkv);
        const int64_t n = c.causal ? std::min(Sk, c.pos + i + 1) : Sk;
        std::vector<double> sc(n);
        double mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          double d = 0;
          for (int64_t e = 0; e < D; ++e) d += (double)q[(i * Hq + h) * D + e] * kf[(j * Hkv + kvh) * D + e];
          sc[j] = d * scale + mask[i * Sk + j];
          mx = std::max(mx, sc[j]);
        }
        if (mx == -INFINITY) continue;  // no visible key: zeros
        double sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += std::exp(sc[j] - mx);
        for (int64_t j = 0; j < n; ++j) {
          const double p = std::exp(sc[j] - mx) / sum;
          for (int64_t e = 0; e < D; ++e) want[(i * Hq + h) * D + e] += p * vf[(j * Hkv + kvh) * D + e];
        }
      }
    std::string what = "attention long Sq=" + std::to_string(Sq) + " D=" + std::to_string(D) + " Sk=" +
                       std::to_string(Sk) + (c.f16 ? " f16" : " f32") + (c.use_mask ? " mask" : "");
    close_all(out.data(), want.data(), out.size(), 2e-6, 1e-4, what.c_str());
  }
}

}  // namespace

int main() {
  for (int threads : {1, 2, 3}) {
    auto k = make_cpu_kernels(threads);
    test_binary(*k);
    test_unary(*k);
    test_copy_fill_arange_where(*k);
    test_reduce_softmax(*k);
    test_matmul(*k);
    test_linear_and_gather(*k);
    test_linear_row_groups(*k);
    test_linear_matvec_formats(*k);
    test_linear_q8_activations(*k);
    test_norms(*k);
    test_rope(*k);
    test_attention(*k);
    test_attention_long(*k);
  }
  test_half();
  test_thread_pool();
  std::printf("test_cpu_kernels: %d checks, %d failures\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
