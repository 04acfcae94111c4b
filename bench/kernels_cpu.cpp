// Microbenchmark of the CPU kernels' hot paths (not a test): quantized linear as decode
// (matrix-vector, M = 1) and prefill (M = 128) on SmolLM2-135M shapes, with 1 and 2 threads.
// M = 1 also through the opt-in 8-bit activation path (linear_q8_activations).
// Reports the best-of-5-rounds time per call (wall and process CPU time: on a loaded machine the
// CPU time and the fastest single call are the steadier figures), weight bytes streamed per second (GB/s) and GFLOP/s,
// then a kernel-only Llama forward pass (prefill 128 tokens, 128 decode steps) in tokens/s.
// Build (no CMake target builds it; name the binary bench_kernels_cpu):
//   g++ -O3 -std=c++17 -Icpp bench/kernels_cpu.cpp cpp/backends/cpu/{thread_pool,cpu_kernels,kernels_*}.cpp -lpthread -o bench_kernels_cpu
// (CMake compiles kernels_training.cpp and kernels_matmul_q8.cpp with -ffp-contract=off
// -fno-math-errno, which their bitwise guarantees need; a hand build should compile those two so)
// Run:   bench_kernels_cpu [seconds_per_case [--decode]]   (--decode: only Q4_1/Q8_0 at M = 1)
//        bench_kernels_cpu --forward                          (only the kernel-only forward pass)
//        bench_kernels_cpu --attention [seconds_per_case]     (decode attention at 128..4096 keys)
//        bench_kernels_cpu --gemma [seconds_per_case]         (M = 1 on Gemma 3 270M's shapes and
//                                                              types, and 2048x2048 per type)
//        bench_kernels_cpu --rows [seconds_per_case [threads [dtype]]] (M = 1..16 rows, a batched decode
//                                                              step's products: time per call and
//                                                              its ratio to M = 1, per weight type,
//                                                              exact and with 8-bit activations)
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <random>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/half.h"

using namespace tl;

namespace {

View view2(void* p, DType t, int64_t r, int64_t c) {
  View v;
  v.data = p;
  v.dtype = t;
  v.ndim = 2;
  v.shape[0] = r;
  v.shape[1] = c;
  v.strides[0] = c;
  v.strides[1] = 1;
  return v;
}

std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::vector<uint8_t> w(row_bytes(t, cols) * rows);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  // Make every f16 scale a small finite value (offsets of d/m in the block).
  const int64_t bb = block_bytes(t);
  for (size_t off = 0; off + bb <= w.size(); off += bb) {
    uint16_t h = tl::cpu::f32_to_f16(0.01f);
    if (t == DType::F32) {
      float f = 0.01f;
      std::memcpy(&w[off], &f, 4);
    } else if (t == DType::Q6_K) {
      std::memcpy(&w[off + 208], &h, 2);
    } else {
      std::memcpy(&w[off], &h, 2);
      if (bb >= 4 && t != DType::Q8_0 && t != DType::Q4_0 && t != DType::Q5_0) std::memcpy(&w[off + 2], &h, 2);
    }
  }
  return w;
}

// CPU time of the whole process (all threads, spinning included): on a loaded machine the wall
// time says how many cores we got, this says how much work a call is.
double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Timing {
  double wall = 0;      // best-of-5 wall seconds per call
  double cpu = 0;       // best-of-5 process CPU seconds per call
  double fastest = 0;   // the fastest single call: the kernel's own speed, undisturbed
};

// q8: through linear_q8_activations (the opt-in 8-bit activation path) instead of linear.
Timing bench_linear(Kernels& k, DType t, int64_t M, int64_t N, int64_t K, double seconds, std::mt19937& rng,
                    bool q8 = false) {
  std::vector<uint8_t> w = random_weights(t, N, K, rng);
  std::vector<float> x(M * K), out(M * N);
  for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  View vx = view2(x.data(), DType::F32, M, K), vw = view2(w.data(), t, N, K), vo = view2(out.data(), DType::F32, M, N);
  auto call = [&] { q8 ? k.linear_q8_activations(vx, vw, vo) : k.linear(vx, vw, vo); };
  call();  // warm-up
  // Best of 5 rounds: the figure least disturbed by other processes on a shared machine.
  Timing best{1e30, 1e30, 1e30};
  for (int round = 0; round < 5; ++round) {
    int iters = 0;
    auto t0 = std::chrono::steady_clock::now();
    const double c0 = process_cpu_seconds();
    double elapsed = 0;
    do {
      auto c0 = std::chrono::steady_clock::now();
      call();
      ++iters;
      auto c1 = std::chrono::steady_clock::now();
      best.fastest = std::min(best.fastest, std::chrono::duration<double>(c1 - c0).count());
      elapsed = std::chrono::duration<double>(c1 - t0).count();
    } while (elapsed < seconds / 5);
    best.wall = std::min(best.wall, elapsed / iters);
    best.cpu = std::min(best.cpu, (process_cpu_seconds() - c0) / iters);
  }
  return best;
}

// A transformer forward made of kernel calls only, on SmolLM2-135M shapes (30 layers, d 576,
// 9 query / 3 KV heads of 64, FFN 1536, Q4_1 weights, Q8_0 tied 49152-row output, f16 KV cache):
// the time the CPU kernels need per token, with no interpreter or runtime around them.
struct LlamaShapes {
  int64_t layers = 30, d = 576, hq = 9, hkv = 3, hd = 64, ff = 1536, vocab = 49152, ctx = 512;
};

struct KernelOnlyModel {
  LlamaShapes s;
  std::vector<std::vector<uint8_t>> wq, wk, wv, wo, wg, wu, wd;
  std::vector<uint8_t> out_w;
  std::vector<float> norm_w;
  std::vector<uint16_t> kcache, vcache;  // [layers][ctx][hkv][hd]

  explicit KernelOnlyModel(std::mt19937& rng) {
    for (int64_t l = 0; l < s.layers; ++l) {
      wq.push_back(random_weights(DType::Q4_1, s.hq * s.hd, s.d, rng));
      wk.push_back(random_weights(DType::Q4_1, s.hkv * s.hd, s.d, rng));
      wv.push_back(random_weights(DType::Q4_1, s.hkv * s.hd, s.d, rng));
      wo.push_back(random_weights(DType::Q4_1, s.d, s.hq * s.hd, rng));
      wg.push_back(random_weights(DType::Q4_1, s.ff, s.d, rng));
      wu.push_back(random_weights(DType::Q4_1, s.ff, s.d, rng));
      wd.push_back(random_weights(DType::Q4_1, s.d, s.ff, rng));
    }
    out_w = random_weights(DType::Q8_0, s.vocab, s.d, rng);
    norm_w.assign(static_cast<size_t>(s.d), 1.0f);
    kcache.assign(static_cast<size_t>(s.layers * s.ctx * s.hkv * s.hd), 0);
    vcache = kcache;
  }

  static View view(void* p, DType t, std::initializer_list<int64_t> shape) {
    View v;
    v.data = p;
    v.dtype = t;
    v.ndim = static_cast<int>(shape.size());
    int i = 0;
    for (int64_t d : shape) v.shape[i++] = d;
    int64_t st = 1;
    for (int j = v.ndim - 1; j >= 0; --j) {
      v.strides[j] = st;
      st *= v.shape[j];
    }
    return v;
  }

  // Runs M tokens at positions [pos, pos + M); returns after the last row's logits.
  void forward(Kernels& k, int64_t M, int64_t pos, std::vector<float>& logits) {
    const int64_t d = s.d, qd = s.hq * s.hd, kvd = s.hkv * s.hd;
    std::vector<float> x(M * d, 0.1f), h(M * d), q(M * qd), kk(M * kvd), vv(M * kvd), a(M * qd), o(M * d);
    std::vector<float> g(M * s.ff), u(M * s.ff);
    auto W = [&](std::vector<uint8_t>& w, int64_t rows, int64_t cols) { return view(w.data(), DType::Q4_1, {rows, cols}); };
    for (int64_t l = 0; l < s.layers; ++l) {
      k.rms_norm(view(x.data(), DType::F32, {M, d}), view(norm_w.data(), DType::F32, {d}), 1e-5f, view(h.data(), DType::F32, {M, d}));
      k.linear(view(h.data(), DType::F32, {M, d}), W(wq[l], qd, d), view(q.data(), DType::F32, {M, qd}));
      k.linear(view(h.data(), DType::F32, {M, d}), W(wk[l], kvd, d), view(kk.data(), DType::F32, {M, kvd}));
      k.linear(view(h.data(), DType::F32, {M, d}), W(wv[l], kvd, d), view(vv.data(), DType::F32, {M, kvd}));
      k.rope(view(q.data(), DType::F32, {1, M, s.hq, s.hd}), pos, 100000.0f, false, view(q.data(), DType::F32, {1, M, s.hq, s.hd}));
      k.rope(view(kk.data(), DType::F32, {1, M, s.hkv, s.hd}), pos, 100000.0f, false, view(kk.data(), DType::F32, {1, M, s.hkv, s.hd}));
      uint16_t* kc = kcache.data() + l * s.ctx * kvd;
      uint16_t* vc = vcache.data() + l * s.ctx * kvd;
      k.copy(view(kk.data(), DType::F32, {M, kvd}), view(kc + pos * kvd, DType::F16, {M, kvd}));
      k.copy(view(vv.data(), DType::F32, {M, kvd}), view(vc + pos * kvd, DType::F16, {M, kvd}));
      k.attention(view(q.data(), DType::F32, {M, s.hq, s.hd}), view(kc, DType::F16, {pos + M, s.hkv, s.hd}),
                  view(vc, DType::F16, {pos + M, s.hkv, s.hd}), View{}, 0.125f, true, pos,
                  view(a.data(), DType::F32, {M, s.hq, s.hd}));
      k.linear(view(a.data(), DType::F32, {M, qd}), W(wo[l], d, qd), view(o.data(), DType::F32, {M, d}));
      k.binary(BinaryOp::Add, view(x.data(), DType::F32, {M, d}), view(o.data(), DType::F32, {M, d}), view(x.data(), DType::F32, {M, d}));
      k.rms_norm(view(x.data(), DType::F32, {M, d}), view(norm_w.data(), DType::F32, {d}), 1e-5f, view(h.data(), DType::F32, {M, d}));
      k.linear(view(h.data(), DType::F32, {M, d}), W(wg[l], s.ff, d), view(g.data(), DType::F32, {M, s.ff}));
      k.linear(view(h.data(), DType::F32, {M, d}), W(wu[l], s.ff, d), view(u.data(), DType::F32, {M, s.ff}));
      k.unary(UnaryOp::Silu, view(g.data(), DType::F32, {M, s.ff}), view(g.data(), DType::F32, {M, s.ff}));
      k.binary(BinaryOp::Mul, view(g.data(), DType::F32, {M, s.ff}), view(u.data(), DType::F32, {M, s.ff}), view(g.data(), DType::F32, {M, s.ff}));
      k.linear(view(g.data(), DType::F32, {M, s.ff}), W(wd[l], d, s.ff), view(o.data(), DType::F32, {M, d}));
      k.binary(BinaryOp::Add, view(x.data(), DType::F32, {M, d}), view(o.data(), DType::F32, {M, d}), view(x.data(), DType::F32, {M, d}));
    }
    k.rms_norm(view(x.data() + (M - 1) * d, DType::F32, {1, d}), view(norm_w.data(), DType::F32, {d}), 1e-5f, view(h.data(), DType::F32, {1, d}));
    logits.resize(static_cast<size_t>(s.vocab));
    k.linear(view(h.data(), DType::F32, {1, d}), view(out_w.data(), DType::Q8_0, {s.vocab, d}), view(logits.data(), DType::F32, {1, s.vocab}));
  }
};

void bench_forward(std::mt19937& rng) {
  KernelOnlyModel model(rng);
  std::vector<float> logits;
  std::printf("\nkernel-only forward, SmolLM2-135M shapes (Q4_1 + Q8_0 output), best of 3:\n");
  std::printf("%-4s %14s %14s\n", "thr", "prompt tok/s", "decode tok/s");
  for (int threads : {1, 2}) {
    auto k = make_cpu_kernels(threads);
    double best_prefill = 1e30, best_decode = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      model.forward(*k, 128, 0, logits);  // prefill of 128 tokens
      auto t1 = std::chrono::steady_clock::now();
      for (int64_t p = 128; p < 256; ++p) model.forward(*k, 1, p, logits);  // 128 decode steps
      auto t2 = std::chrono::steady_clock::now();
      best_prefill = std::min(best_prefill, std::chrono::duration<double>(t1 - t0).count());
      best_decode = std::min(best_decode, std::chrono::duration<double>(t2 - t1).count());
    }
    std::printf("%-4d %14.1f %14.1f\n", threads, 128 / best_prefill, 128 / best_decode);
    std::fflush(stdout);
  }
}

// Decode attention of one layer (1 query row, 9 query / 3 KV heads of 64) over `ctx` cached keys,
// f32 and f16 caches: the part of a decode step that grows with the context.
void bench_attention(double seconds) {
  std::printf("%-6s %-6s %8s %12s %12s %12s\n", "kv", "thr", "context", "us/call", "cpu us/call", "fastest us");
  std::mt19937 rng(5);
  const int64_t hq = 9, hkv = 3, hd = 64;
  for (int threads : {1, 2}) {
    auto k = make_cpu_kernels(threads);
    for (int64_t ctx : {128, 1024, 4096}) {
      for (DType t : {DType::F32, DType::F16}) {
        std::vector<float> q(hq * hd), out(hq * hd), kf(ctx * hkv * hd), vf(ctx * hkv * hd);
        for (auto* vec : {&q, &kf, &vf})
          for (auto& x : *vec) x = std::uniform_real_distribution<float>(-1, 1)(rng);
        std::vector<uint16_t> kh(kf.size()), vh(vf.size());
        for (size_t i = 0; i < kf.size(); ++i) {
          kh[i] = tl::cpu::f32_to_f16(kf[i]);
          vh[i] = tl::cpu::f32_to_f16(vf[i]);
        }
        void* kp = t == DType::F16 ? static_cast<void*>(kh.data()) : static_cast<void*>(kf.data());
        void* vp = t == DType::F16 ? static_cast<void*>(vh.data()) : static_cast<void*>(vf.data());
        auto call = [&] {
          k->attention(KernelOnlyModel::view(q.data(), DType::F32, {1, hq, hd}), KernelOnlyModel::view(kp, t, {ctx, hkv, hd}),
                       KernelOnlyModel::view(vp, t, {ctx, hkv, hd}), View{}, 0.125f, true, ctx - 1,
                       KernelOnlyModel::view(out.data(), DType::F32, {1, hq, hd}));
        };
        call();
        Timing best{1e30, 1e30, 1e30};
        for (int round = 0; round < 5; ++round) {
          int iters = 0;
          auto t0 = std::chrono::steady_clock::now();
          const double c0 = process_cpu_seconds();
          double elapsed = 0;
          do {
            auto c1 = std::chrono::steady_clock::now();
            call();
            ++iters;
            auto c2 = std::chrono::steady_clock::now();
            best.fastest = std::min(best.fastest, std::chrono::duration<double>(c2 - c1).count());
            elapsed = std::chrono::duration<double>(c2 - t0).count();
          } while (elapsed < seconds / 5);
          best.wall = std::min(best.wall, elapsed / iters);
          best.cpu = std::min(best.cpu, (process_cpu_seconds() - c0) / iters);
        }
        std::printf("%-6s %-6d %8lld %12.1f %12.1f %12.1f\n", dtype_name(t), threads, (long long)ctx, best.wall * 1e6,
                    best.cpu * 1e6, best.fastest * 1e6);
        std::fflush(stdout);
      }
    }
  }
}

// Matrix-vector products (M = 1) of Gemma 3 270M's Q4_K_M file (d 640, q 1024, kv 256, FFN 2048,
// tied Q8_0 262144-row output), each weight with the type the file gives it, plus every type at
// 2048x2048; exact f32 activations and the 8-bit activation path. GMAC/s = N * K / time.
void bench_gemma(double seconds) {
  struct Case { DType t; int64_t N, K; const char* what; };
  const Case cases[] = {
      {DType::Q5_0, 1024, 640, "attn_q"},      {DType::Q5_0, 256, 640, "attn_k/v"},
      {DType::Q4_K, 640, 1024, "attn_output"}, {DType::Q5_0, 2048, 640, "ffn_gate/up"},
      {DType::Q4_K, 640, 2048, "ffn_down"},    {DType::Q6_K, 640, 2048, "ffn_down"},
      {DType::Q8_0, 256, 640, "attn_v"},       {DType::Q8_0, 262144, 640, "output"},
      {DType::Q4_0, 2048, 2048, "square"},     {DType::Q8_0, 2048, 2048, "square"},
      {DType::Q5_0, 2048, 2048, "square"},     {DType::Q4_K, 2048, 2048, "square"},
      {DType::Q5_K, 2048, 2048, "square"},     {DType::Q6_K, 2048, 2048, "square"},
  };
  std::mt19937 rng(7);
  std::printf("%-6s %-12s %-4s %7s %6s %12s %12s %12s %9s %9s\n", "dtype", "tensor", "thr", "N", "K", "us/call",
              "cpu us/call", "fastest us", "GB/s", "GMAC/s");
  for (int threads : {1, 2}) {
    auto k = make_cpu_kernels(threads);
    for (const Case& c : cases) {
      for (bool q8 : {false, true}) {
        Timing tm = bench_linear(*k, c.t, 1, c.N, c.K, seconds, rng, q8);
        const double bytes = static_cast<double>(row_bytes(c.t, c.K)) * c.N;
        const double macs = static_cast<double>(c.N) * c.K;
        std::printf("%-6s %-12s %-4d %7lld %6lld %12.1f %12.1f %12.1f %9.2f %9.2f%s\n", dtype_name(c.t), c.what, threads,
                    (long long)c.N, (long long)c.K, tm.wall * 1e6, tm.cpu * 1e6, tm.fastest * 1e6, bytes / tm.wall / 1e9,
                    macs / tm.wall / 1e9, q8 ? "  (8-bit activations)" : "");
        std::fflush(stdout);
      }
    }
  }
}

// A batched decode step (tl serve --parallel) multiplies M = 2..16 rows by every weight matrix:
// the cost of M rows against one, on SmolLM2-135M's shapes (the whole step's linear work: 30 layers
// of q, k, v, o, gate, up, down and the 49152-row output), per weight type.
void bench_rows(double seconds, int threads, const std::string& only) {
  std::mt19937 rng(5);
  auto k = make_cpu_kernels(threads);
  struct Shape { int64_t N, K, count; };
  const Shape step[] = {{576, 576, 60}, {192, 576, 60}, {1536, 576, 60}, {576, 1536, 30}, {49152, 576, 1}};
  std::printf("threads %d; per-call times are the best of 5 rounds (wall us); 'step' sums the SmolLM2 step's products\n", threads);
  std::printf("%-6s %5s %12s %12s %12s %8s %14s %8s\n", "dtype", "M", "576x576 us", "1536x576 us", "step ms", "xM=1",
              "8-bit act. ms", "xM=1");
  for (DType t : {DType::Q4_1, DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q4_K, DType::Q6_K, DType::F16}) {
    if (!only.empty() && only != dtype_name(t)) continue;
    double one = 0, one_q8 = 0;
    // the opt-in 8-bit activation path (linear_q8_activations, --fast) for the types that have it
    const bool q8 = t != DType::F16;
    for (int64_t M : {1, 2, 4, 8, 16}) {
      double total = 0, total_q8 = 0, sq = 0, ff = 0;
      for (const Shape& s : step) {
        if (s.K % block_elems(t) != 0) continue;
        const double sec = bench_linear(*k, t, M, s.N, s.K, seconds, rng).wall;
        total += sec * static_cast<double>(s.count);
        if (q8) total_q8 += bench_linear(*k, t, M, s.N, s.K, seconds, rng, true).wall * static_cast<double>(s.count);
        if (s.N == 576 && s.K == 576) sq = sec;
        if (s.N == 1536) ff = sec;
      }
      if (M == 1) one = total, one_q8 = total_q8;
      std::printf("%-6s %5lld %12.1f %12.1f %12.2f %8.2f", dtype_name(t), (long long)M, sq * 1e6, ff * 1e6,
                  total * 1e3, total / one);
      if (q8) std::printf(" %14.2f %8.2f", total_q8 * 1e3, total_q8 / one_q8);
      std::printf("\n");
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--rows") == 0) {
    bench_rows(argc > 2 ? std::atof(argv[2]) : 0.3, argc > 3 ? std::atoi(argv[3]) : 1, argc > 4 ? argv[4] : "");
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--gemma") == 0) {
    bench_gemma(argc > 2 ? std::atof(argv[2]) : 0.5);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--attention") == 0) {
    bench_attention(argc > 2 ? std::atof(argv[2]) : 0.5);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--forward") == 0) {
    std::mt19937 rng(3);
    bench_forward(rng);
    return 0;
  }
  double seconds = argc > 1 ? std::atof(argv[1]) : 0.5;
  // --decode: only the matrix-vector (M = 1) cases of the formats SmolLM2's Q4_1 file uses.
  const bool decode_only = argc > 2 && std::strcmp(argv[2], "--decode") == 0;
  std::mt19937 rng(1);
  struct Shape { int64_t N, K; };
  const Shape shapes[] = {{1536, 576}, {576, 1536}, {49152, 576}};
  std::printf("%-6s %-6s %7s %7s %8s %12s %12s %12s %9s %9s\n", "dtype", "thr", "M", "N", "K", "us/call", "cpu us/call", "fastest us", "GB/s",
              "GFLOP/s");
  for (int threads : {1, 2}) {
    auto k = make_cpu_kernels(threads);
    for (DType t : {DType::Q4_1, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::F16, DType::F32}) {
      for (const Shape& s : shapes) {
        for (int64_t M : {1, 128}) {
          if (M == 128 && s.N == 49152) continue;  // prefill computes logits for the last row only
          if (decode_only && (M != 1 || (t != DType::Q4_1 && t != DType::Q8_0))) continue;
          if (s.K % block_elems(t) != 0) continue;   // K-quants need K % 256 == 0
          if (t != DType::Q4_1 && t != DType::Q8_0 && s.N == 49152 && threads == 1) continue;
          for (bool q8 : {false, true}) {
            if (q8 && M != 1) continue;
            Timing tm = bench_linear(*k, t, M, s.N, s.K, seconds, rng, q8);
            double sec = tm.wall;
            double bytes = static_cast<double>(row_bytes(t, s.K)) * s.N;
            double flops = 2.0 * M * s.N * s.K;
            std::printf("%-6s %-6d %7lld %7lld %8lld %12.1f %12.1f %12.1f %9.2f %9.2f%s\n", dtype_name(t), threads,
                        (long long)M, (long long)s.N, (long long)s.K, sec * 1e6, tm.cpu * 1e6, tm.fastest * 1e6,
                        bytes / sec / 1e9, flops / sec / 1e9, q8 ? "  (8-bit activations)" : "");
            std::fflush(stdout);
          }
        }
      }
    }
  }
  if (!decode_only) bench_forward(rng);
  return 0;
}
