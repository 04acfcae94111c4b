// Runs the real Metal backend (objc/*.mm, compiled by clang for the macOS Objective-C ABI) on
// Linux against the fake Objective-C runtime and fake Metal in this folder, with the real shader
// kernels executing through the shim. Checks: every Kernels method gives the CPU twin's result;
// run-time, encode-time and GPU errors reach the completion callback with the right message and
// the backend keeps working; a 10,000-command-buffer loop keeps the object count flat; teardown
// releases every Objective-C object; nothing is ever autoreleased without a pool (R5).
// What it cannot show: that real Metal behaves like the fake. Prints "N passed, M failed".
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend.h"
#include "cpu_kernels.h"
#include "fake_objc_runtime.h"

extern "C" long fake_metal_live_buffers();
extern "C" long fake_metal_committed();
extern "C" long fake_metal_dispatches();

namespace {

int g_passed = 0;
int g_failed = 0;

void check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    std::printf("FAILED: %s\n", what.c_str());
  }
}

using tl::DType;
using tl::Kernels;
using tl::View;
using tl::LinearPrologue;

View make_view(void* data, DType dtype, std::vector<int64_t> shape,
               std::vector<int64_t> strides = {}) {
  View v;
  v.data = data;
  v.dtype = dtype;
  v.ndim = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.shape[i] = shape[i];
    v.strides[i] = strides.empty() ? stride : strides[i];
    stride *= shape[i];
  }
  return v;
}

uint16_t to_half(float f) {  // round to nearest even, finite normal range is enough here
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int exponent = static_cast<int>((x >> 23) & 0xFF) - 127 + 15;
  uint32_t mantissa = x & 0x7FFFFFu;
  if (exponent <= 0) return static_cast<uint16_t>(sign);
  uint32_t h = sign | (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h += 1;
  return static_cast<uint16_t>(h);
}

float from_half(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  int exponent = (h >> 10) & 0x1F;
  uint32_t mantissa = h & 0x3FFu;
  float value = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -24)
                              : std::ldexp(static_cast<float>(mantissa | 0x400u), exponent - 25);
  return sign ? -value : value;
}

// One operand of a case: its bytes (inputs) or size (outputs), and how to compare outputs.
struct Operand {
  std::vector<unsigned char> bytes;
  DType dtype = DType::F32;
  bool output = false;
};

// An operand the kernel reads and writes in place (compared after the call like an output).
template <typename T>
Operand inout(const std::vector<T>& values, DType dtype);

struct Case {
  std::string name;
  std::vector<Operand> operands;
  // Calls exactly one Kernels method with the operands' device pointers.
  std::function<void(Kernels&, const std::vector<void*>&)> call;
  double tolerance = 1e-5;
};

template <typename T>
Operand input(const std::vector<T>& values, DType dtype) {
  Operand op;
  op.dtype = dtype;
  op.bytes.resize(values.size() * sizeof(T));
  std::memcpy(op.bytes.data(), values.data(), op.bytes.size());
  return op;
}

template <typename T>
Operand inout(const std::vector<T>& values, DType dtype) {
  Operand op = input(values, dtype);
  op.output = true;
  return op;
}

Operand output(size_t bytes, DType dtype) {
  Operand op;
  op.dtype = dtype;
  op.output = true;
  op.bytes.assign(bytes, 0);
  return op;
}

std::mt19937 g_rng(1234);
std::vector<float> random_floats(size_t n, float lo = -2.0f, float hi = 2.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(g_rng);
  return v;
}

std::vector<uint16_t> random_halves(size_t n) {
  std::vector<uint16_t> v;
  for (float f : random_floats(n)) v.push_back(to_half(f));
  return v;
}

// Random GGUF blocks with sane f16 scales (as in tests/runtime/test_metal_static.py).
std::vector<uint8_t> random_blocks(DType t, int64_t rows, int64_t cols) {
  std::vector<uint8_t> bytes(tl::row_bytes(t, cols) * rows);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : bytes) b = static_cast<uint8_t>(byte(g_rng));
  std::vector<int> scale_offsets;
  switch (t) {
    case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: scale_offsets = {0, 2}; break;
    case DType::Q6_K: scale_offsets = {208}; break;
    default: scale_offsets = {0}; break;
  }
  std::uniform_real_distribution<float> scale(0.002f, 0.05f);
  for (size_t block = 0; block < bytes.size(); block += tl::block_bytes(t)) {
    for (int off : scale_offsets) {
      uint16_t h = to_half(scale(g_rng));
      std::memcpy(&bytes[block + off], &h, 2);
    }
  }
  return bytes;
}

double element(const Operand& op, size_t i) {
  switch (op.dtype) {
    case DType::F32: { float v; std::memcpy(&v, &op.bytes[i * 4], 4); return v; }
    case DType::F16: { uint16_t v; std::memcpy(&v, &op.bytes[i * 2], 2); return from_half(v); }
    case DType::I32: { int32_t v; std::memcpy(&v, &op.bytes[i * 4], 4); return v; }
    case DType::I64: { int64_t v; std::memcpy(&v, &op.bytes[i * 8], 8); return static_cast<double>(v); }
    case DType::Bool: return op.bytes[i];
    default: return 0;
  }
}

size_t element_count(const Operand& op) {
  return op.bytes.size() / static_cast<size_t>(tl::block_bytes(op.dtype));
}

// Runs `commands` as one command buffer and returns the completion's error string.
std::string submit_and_wait(tl::Backend& backend, std::vector<tl::Command> commands) {
  auto done = std::make_shared<std::promise<std::string>>();
  auto result = done->get_future();
  backend.submit(std::move(commands), [done](const std::string& error) { done->set_value(error); });
  backend.synchronize();
  return result.get();
}

void run_case(tl::Backend& backend, Kernels& cpu, const Case& c) {
  std::vector<void*> device;
  std::vector<std::vector<unsigned char>> host;
  for (const Operand& op : c.operands) {
    void* ptr = backend.allocate(op.bytes.size());
    backend.copy_to_device(ptr, op.bytes.data(), op.bytes.size());
    device.push_back(ptr);
    host.push_back(op.bytes);
  }
  std::vector<void*> host_ptrs;
  for (auto& h : host) host_ptrs.push_back(h.data());
  std::string cpu_error;
  try {
    c.call(cpu, host_ptrs);
  } catch (const std::exception& e) {
    cpu_error = e.what();
  }
  auto call = c.call;
  std::string metal_error = submit_and_wait(backend, {[call, device](Kernels& k) { call(k, device); }});
  check(metal_error == cpu_error, c.name + ": error '" + metal_error + "' vs CPU '" + cpu_error + "'");
  for (size_t i = 0; i < c.operands.size(); ++i) {
    if (!c.operands[i].output) continue;
    Operand metal = c.operands[i];
    backend.copy_to_host(metal.bytes.data(), device[i], metal.bytes.size());
    Operand reference = c.operands[i];
    reference.bytes = host[i];
    double worst = 0;
    for (size_t e = 0; e < element_count(metal); ++e) {
      double a = element(metal, e), b = element(reference, e);
      if (std::isnan(a) && std::isnan(b)) continue;
      if (std::isinf(a) && a == b) continue;
      double diff = std::fabs(a - b) / (1.0 + std::fabs(b));
      if (!(diff <= worst)) worst = std::isnan(diff) ? INFINITY : diff;
    }
    char line[256];
    std::snprintf(line, sizeof line, "%s: output %zu differs from the CPU twin by %.3g (tolerance %.1g)",
                  c.name.c_str(), i, worst, c.tolerance);
    check(worst <= c.tolerance, line);
  }
  for (size_t i = 0; i < device.size(); ++i) backend.deallocate(device[i], c.operands[i].bytes.size());
}

std::vector<Case> every_kernel_case() {
  std::vector<Case> cases;
  using P = const std::vector<void*>&;
  {
    Case c{"binary add broadcast", {input(random_floats(12), DType::F32),
                                    input(random_halves(4), DType::F16), output(48, DType::F32)}, {}};
    c.call = [](Kernels& k, P p) {
      k.binary(tl::BinaryOp::Add, make_view(p[0], DType::F32, {3, 4}),
               make_view(p[1], DType::F16, {3, 4}, {0, 1}), make_view(p[2], DType::F32, {3, 4}));
    };
    cases.push_back(c);
  }
  {
    Case c{"binary lt to bool", {input(random_floats(12), DType::F32), input(random_floats(12), DType::F32),
                                 output(12, DType::Bool)}, {}};
    c.call = [](Kernels& k, P p) {
      k.binary(tl::BinaryOp::Lt, make_view(p[0], DType::F32, {12}), make_view(p[1], DType::F32, {12}),
               make_view(p[2], DType::Bool, {12}));
    };
    cases.push_back(c);
  }
  {
    std::vector<int64_t> a = {7, -7, 9, -9, 1LL << 40};
    Case c{"binary_scalar int64 mod, scalar first", {input(a, DType::I64), output(40, DType::I64)}, {}};
    c.call = [](Kernels& k, P p) {
      k.binary_scalar(tl::BinaryOp::Mod, make_view(p[0], DType::I64, {5}), 5.0, true,
                      make_view(p[1], DType::I64, {5}));
    };
    cases.push_back(c);
  }
  for (auto op : {tl::UnaryOp::GeluErf, tl::UnaryOp::Silu, tl::UnaryOp::Round, tl::UnaryOp::Rsqrt}) {
    Case c{"unary " + std::to_string(static_cast<int>(op)),
           {input(random_floats(10, 0.1f, 3.0f), DType::F32), output(40, DType::F32)}, {}};
    c.call = [op](Kernels& k, P p) {
      k.unary(op, make_view(p[0], DType::F32, {2, 5}, {1, 2}), make_view(p[1], DType::F32, {2, 5}));
    };
    c.tolerance = 2e-6;
    cases.push_back(c);
  }
  {
    Case c{"copy transposed f32 to strided f16", {input(random_floats(12), DType::F32), output(48, DType::F16)}, {}};
    c.call = [](Kernels& k, P p) {
      k.copy(make_view(p[0], DType::F32, {4, 3}, {1, 4}), make_view(p[1], DType::F16, {4, 3}, {6, 2}));
    };
    c.tolerance = 1e-3;
    cases.push_back(c);
  }
  {
    Case c{"fill strided i32", {output(48, DType::I32)}, {}};
    c.call = [](Kernels& k, P p) { k.fill(make_view(p[0], DType::I32, {3, 2}, {4, 2}), -7.0); };
    cases.push_back(c);
  }
  {
    Case c{"arange f32", {output(40, DType::F32)}, {}};
    c.call = [](Kernels& k, P p) { k.arange(make_view(p[0], DType::F32, {10}), 0.5, 0.25); };
    cases.push_back(c);
  }
  {
    std::vector<uint8_t> cond = {1, 0, 1};
    Case c{"where", {input(cond, DType::Bool), input(random_floats(6), DType::F32),
                     input(random_floats(6), DType::F32), output(24, DType::F32)}, {}};
    c.call = [](Kernels& k, P p) {
      k.where(make_view(p[0], DType::Bool, {2, 3}, {0, 1}), make_view(p[1], DType::F32, {2, 3}),
              make_view(p[2], DType::F32, {2, 3}), make_view(p[3], DType::F32, {2, 3}));
    };
    cases.push_back(c);
  }
  for (auto op : {tl::ReduceOp::Sum, tl::ReduceOp::Mean, tl::ReduceOp::Max, tl::ReduceOp::ArgMax, tl::ReduceOp::ArgMin}) {
    bool arg = op == tl::ReduceOp::ArgMax || op == tl::ReduceOp::ArgMin;
    Case c{"reduce " + std::to_string(static_cast<int>(op)),
           {input(random_floats(2 * 300 * 3), DType::F32), output(arg ? 48 : 24, arg ? DType::I64 : DType::F32)}, {}};
    c.call = [op, arg](Kernels& k, P p) {
      k.reduce(op, make_view(p[0], DType::F32, {2, 300, 3}), 2, 300, 3,
               make_view(p[1], arg ? DType::I64 : DType::F32, {2, 3}));
    };
    c.tolerance = 1e-5;
    cases.push_back(c);
  }
  {
    Case c{"softmax", {input(random_floats(2 * 7 * 3, -20, 20), DType::F32), output(2 * 7 * 3 * 4, DType::F32)}, {}};
    c.call = [](Kernels& k, P p) {
      k.softmax(make_view(p[0], DType::F32, {2, 7, 3}), 2, 7, 3, make_view(p[1], DType::F32, {2, 7, 3}));
    };
    cases.push_back(c);
  }
  {
    Case c{"matmul batched, transposed b, f16 out",
           {input(random_floats(19 * 21), DType::F32), input(random_halves(2 * 17 * 21), DType::F16),
            output(2 * 19 * 17 * 2, DType::F16)}, {}};
    c.call = [](Kernels& k, P p) {
      k.matmul(make_view(p[0], DType::F32, {2, 19, 21}, {0, 21, 1}),
               make_view(p[1], DType::F16, {2, 21, 17}, {17 * 21, 1, 21}),
               make_view(p[2], DType::F16, {2, 19, 17}));
    };
    c.tolerance = 2e-3;
    cases.push_back(c);
  }
  for (DType t : {DType::F16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                  DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const int64_t m = 2, n = 5, kk = 512;
    Operand w = t == DType::F16 ? input(random_halves(n * kk), t) : input(random_blocks(t, n, kk), t);
    Case c{std::string("linear ") + tl::dtype_name(t),
           {input(random_floats(m * kk), DType::F32), w, output(m * n * 4, DType::F32)}, {}};
    c.call = [t](Kernels& k, P p) {
      View wv = make_view(p[1], t, {5, 512});
      k.linear(make_view(p[0], DType::F32, {2, 512}), wv, make_view(p[2], DType::F32, {2, 5}));
    };
    c.tolerance = 1e-4;
    cases.push_back(c);
  }
  for (DType t : {DType::F16, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
    // expert_linear: 3 tokens, 2 of 4 experts each (expert 2 twice), x shared by a token's experts
    const int64_t experts = 4, n = 5, kk = 256;
    std::vector<int64_t> ids = {2, 0, 3, 2, 1, 2};
    Operand w = t == DType::F16 ? input(random_halves(experts * n * kk), t) : input(random_blocks(t, experts * n, kk), t);
    Case c{std::string("expert_linear ") + tl::dtype_name(t),
           {input(random_floats(3 * kk), DType::F32), w, input(ids, DType::I64), output(3 * 2 * n * 4, DType::F32)}, {}};
    c.call = [t](Kernels& k, P p) {
      k.expert_linear(make_view(p[0], DType::F32, {3, 1, 256}), make_view(p[1], t, {4 * 5, 256}),
                      make_view(p[2], DType::I64, {3, 2}), 4, make_view(p[3], DType::F32, {3, 2, 5}));
    };
    c.tolerance = 1e-4;
    cases.push_back(c);
  }
  for (DType t : {DType::F16, DType::Q4_K, DType::Q8_0}) {
    std::vector<int64_t> ids = {3, 0, 5, 5};
    Operand table = t == DType::F16 ? input(random_halves(6 * 256), t) : input(random_blocks(t, 6, 256), t);
    Case c{std::string("gather_rows ") + tl::dtype_name(t),
           {table, input(ids, DType::I64), output(4 * 256 * 2, DType::F16)}, {}};
    c.call = [t](Kernels& k, P p) {
      k.gather_rows(make_view(p[0], t, {6, 256}), make_view(p[1], DType::I64, {4}),
                    make_view(p[2], DType::F16, {4, 256}));
    };
    c.tolerance = 1e-3;
    cases.push_back(c);
  }
  for (bool with_w : {true, false}) {
    Case c{std::string("rms_norm") + (with_w ? " with w" : ""),
           {input(random_floats(3 * 300), DType::F32), input(random_floats(300), DType::F32),
            output(3 * 300 * 4, DType::F32)}, {}};
    c.call = [with_w](Kernels& k, P p) {
      View w = with_w ? make_view(p[1], DType::F32, {300}) : View{};
      k.rms_norm(make_view(p[0], DType::F32, {3, 300}), w, 1e-5f, make_view(p[2], DType::F32, {3, 300}));
    };
    cases.push_back(c);
  }
  {
    Case c{"layer_norm", {input(random_floats(2 * 64, 90, 110), DType::F32), input(random_floats(64), DType::F32),
                          input(random_floats(64), DType::F32), output(2 * 64 * 4, DType::F32)}, {}};
    c.call = [](Kernels& k, P p) {
      k.layer_norm(make_view(p[0], DType::F32, {2, 64}), make_view(p[1], DType::F32, {64}),
                   make_view(p[2], DType::F32, {64}), 1e-5f, make_view(p[3], DType::F32, {2, 64}));
    };
    c.tolerance = 1e-4;
    cases.push_back(c);
  }
  for (bool neox : {false, true}) {
    Case c{std::string("rope") + (neox ? " neox" : ""),
           {input(random_floats(1 * 3 * 2 * 16), DType::F32), output(3 * 2 * 16 * 4, DType::F32)}, {}};
    c.call = [neox](Kernels& k, P p) {
      k.rope(make_view(p[0], DType::F32, {1, 3, 2, 16}), 4000, 10000.0f, neox,
             make_view(p[1], DType::F32, {1, 3, 2, 16}));
    };
    c.tolerance = 1e-4;
    cases.push_back(c);
  }
  {
    Case c{"causal_mask", {output(4 * 9 * 4, DType::F32)}, {}};
    c.call = [](Kernels& k, P p) { k.causal_mask(5, make_view(p[0], DType::F32, {4, 9})); };
    cases.push_back(c);
  }
  for (bool causal : {true, false}) {
    const int64_t sq = 3, hq = 4, hkv = 2, d = 16, sk = 140, cache = 160;
    Case c{std::string("attention") + (causal ? " causal" : " masked"),
           {input(random_floats(sq * hq * d), DType::F32), input(random_halves(cache * hkv * d), DType::F16),
            input(random_floats(cache * hkv * d), DType::F32), input(random_floats(sq * sk, -1, 0), DType::F32),
            output(sq * hq * d * 4, DType::F32)}, {}};
    c.call = [causal](Kernels& k, P p) {
      View mask = causal ? View{} : make_view(p[3], DType::F32, {3, 140});
      k.attention(make_view(p[0], DType::F32, {3, 4, 16}), make_view(p[1], DType::F16, {140, 2, 16}),
                  make_view(p[2], DType::F32, {140, 2, 16}), mask, 0.25f, causal, 137,
                  make_view(p[4], DType::F32, {3, 4, 16}));
    };
    c.tolerance = 1e-4;
    cases.push_back(c);
  }
  for (LinearPrologue prologue : {LinearPrologue::RmsNorm, LinearPrologue::None, LinearPrologue::SwiGLU}) {
    // x [3, 64] ([3, 128] gate | up for SwiGLU), w [40, 64], norm weight [64], addend [3, 40] read
    // transposed, scratch [3, 64]
    const bool halves = prologue == LinearPrologue::SwiGLU;
    const char* what = prologue == LinearPrologue::RmsNorm ? " rms_norm" : halves ? " swiglu" : "";
    Case c{std::string("fused_linear") + what + " with addend",
           {input(random_floats(3 * 128), DType::F32), input(random_floats(40 * 64), DType::F32),
            input(random_floats(64), DType::F32), input(random_floats(40 * 3), DType::F32),
            output(3 * 64 * 4, DType::F32), output(3 * 40 * 4, DType::F32)}, {}};
    c.call = [prologue, halves](Kernels& k, P p) {
      View nw = prologue == LinearPrologue::RmsNorm ? make_view(p[2], DType::F32, {64}) : View{};
      View scratch = prologue != LinearPrologue::None ? make_view(p[4], DType::F32, {3, 64}) : View{};
      k.fused_linear(make_view(p[0], DType::F32, {3, halves ? 128 : 64}), make_view(p[1], DType::F32, {40, 64}),
                     prologue, nw, 1e-5f, make_view(p[3], DType::F32, {3, 40}, {1, 3}), scratch,
                     make_view(p[5], DType::F32, {3, 40}));
    };
    c.tolerance = 1e-4;
    cases.push_back(c);
  }
  {
    Case c{"swiglu of column halves", {input(random_floats(4 * 2 * 24), DType::F32), output(4 * 24 * 4, DType::F32)}, {}};
    c.call = [](Kernels& k, P p) {
      float* base = static_cast<float*>(p[0]);
      k.swiglu(make_view(base, DType::F32, {4, 24}, {48, 1}), make_view(base + 24, DType::F32, {4, 24}, {48, 1}),
               make_view(p[1], DType::F32, {4, 24}));
    };
    c.tolerance = 1e-5;
    cases.push_back(c);
  }
  for (bool neox : {false, true}) {
    // qkv [2, (4 + 2 * 2) * 16] sliced into q, k, v; caches [8, 2, 16] (k f16), rows 3..4 written
    Case c{std::string("rope_kv_write") + (neox ? " neox" : ""),
           {input(random_floats(2 * 8 * 16), DType::F32), output(2 * 4 * 16 * 4, DType::F32),
            output(8 * 2 * 16 * 2, DType::F16), output(8 * 2 * 16 * 4, DType::F32)}, {}};
    c.call = [neox](Kernels& k, P p) {
      float* qkv = static_cast<float*>(p[0]);
      auto* kc = static_cast<unsigned char*>(p[2]) + 3 * 2 * 16 * 2;
      auto* vc = static_cast<float*>(p[3]) + 3 * 2 * 16;
      k.rope_kv_write(make_view(qkv, DType::F32, {2, 4, 16}, {128, 16, 1}),
                      make_view(qkv + 64, DType::F32, {2, 2, 16}, {128, 16, 1}),
                      make_view(qkv + 96, DType::F32, {2, 2, 16}, {128, 16, 1}), 3000, 10000.0f, neox,
                      make_view(p[1], DType::F32, {2, 4, 16}), make_view(kc, DType::F16, {2, 2, 16}),
                      make_view(vc, DType::F32, {2, 2, 16}));
    };
    c.tolerance = 1e-3;
    cases.push_back(c);
  }
  {
    std::vector<int64_t> ids = {2, 0, 2, 2, 1};
    Case c{"scatter_add_rows repeated ids", {input(ids, DType::I64), input(random_floats(5 * 7), DType::F32),
                                             output(3 * 7 * 4, DType::F32)}, {}};
    c.call = [](Kernels& k, P p) {
      k.scatter_add_rows(make_view(p[0], DType::I64, {5}), make_view(p[1], DType::F32, {5, 7}),
                         make_view(p[2], DType::F32, {3, 7}));
    };
    cases.push_back(c);
  }
  for (int kind = 0; kind < 3; ++kind) {
    const char* names[] = {"adam", "adamw", "sgd nesterov"};
    std::vector<float> v = random_floats(300);
    for (float& x : v) x = std::fabs(x);
    Case c{std::string("optimizer_update ") + names[kind],
           {inout(random_floats(300), DType::F32), input(random_floats(300), DType::F32),
            inout(random_floats(300), DType::F32), inout(v, DType::F32)}, {}};
    c.call = [kind](Kernels& k, P p) {
      tl::OptimizerStep s;
      s.kind = kind < 2 ? tl::OptimizerKind::Adam : tl::OptimizerKind::Sgd;
      s.decoupled = kind == 1;
      s.nesterov = kind == 2;
      s.step = 0.1f;
      s.decay = 0.999f;
      s.weight_decay = kind == 1 ? 0.0f : 0.05f;
      s.beta1 = 0.9f;
      s.one_minus_beta1 = 0.1f;
      s.beta2 = 0.999f;
      s.one_minus_beta2 = 0.001f;
      s.bias2 = 0.001f;
      s.eps = 1e-8f;
      s.momentum = 0.9f;
      View v_view = kind < 2 ? make_view(p[3], DType::F32, {300}) : View{};
      k.optimizer_update(s, make_view(p[0], DType::F32, {300}), make_view(p[1], DType::F32, {300}),
                         make_view(p[2], DType::F32, {300}), v_view);
    };
    c.tolerance = 1e-5;
    cases.push_back(c);
  }
  {
    Case c{"delay", {output(4, DType::F32)}, {}};
    c.call = [](Kernels& k, P) { k.delay(5); };
    cases.push_back(c);
  }
  return cases;
}

void test_errors(tl::Backend& backend, Kernels& cpu) {
  // A run-time data error: the CPU twin's exact words, and the queue keeps working.
  std::vector<float> table(12, 1.0f);
  std::vector<int64_t> ids = {1, 9};
  void* t = backend.allocate(48);
  void* i = backend.allocate(16);
  void* o = backend.allocate(32);
  backend.copy_to_device(t, table.data(), 48);
  backend.copy_to_device(i, ids.data(), 16);
  std::string metal_error = submit_and_wait(backend, {[=](Kernels& k) {
    k.gather_rows(make_view(t, DType::F32, {3, 4}), make_view(i, DType::I64, {2}), make_view(o, DType::F32, {2, 4}));
  }});
  std::string cpu_error;
  std::vector<float> host_out(8);
  try {
    cpu.gather_rows(make_view(table.data(), DType::F32, {3, 4}), make_view(ids.data(), DType::I64, {2}),
                    make_view(host_out.data(), DType::F32, {2, 4}));
  } catch (const std::exception& e) {
    cpu_error = e.what();
  }
  check(!metal_error.empty() && metal_error == cpu_error,
        "gather_rows out of range: '" + metal_error + "' vs CPU '" + cpu_error + "'");

  // An encode-time error stops the command buffer; earlier commands still ran.
  std::vector<float> ones(4, 1.0f);
  backend.copy_to_device(o, ones.data(), 16);
  std::string encode_error = submit_and_wait(backend, {
      [=](Kernels& k) { k.fill(make_view(o, DType::F32, {4}), 3.0); },
      [=](Kernels& k) { k.matmul(make_view(t, DType::F32, {1, 3, 4}), make_view(t, DType::F32, {1, 4, 3}),
                                 make_view(o, DType::I32, {1, 3, 3})); },
      [=](Kernels& k) { k.fill(make_view(o, DType::F32, {4}), 5.0); }});
  std::vector<float> after(4);
  backend.copy_to_host(after.data(), o, 16);
  check(encode_error.rfind("matmul: out must be f32 or f16", 0) == 0, "encode error: '" + encode_error + "'");
  check(after[0] == 3.0f, "the command before the failing one ran, the one after did not");

  // A pointer that is not device memory.
  std::vector<float> host_only(4);
  std::string foreign = submit_and_wait(backend, {[&host_only](Kernels& k) {
    k.fill(make_view(host_only.data(), DType::F32, {4}), 1.0);
  }});
  check(foreign == "fill: an operand is not in Metal device memory", "foreign pointer: '" + foreign + "'");

  // Still healthy afterwards.
  std::string ok = submit_and_wait(backend, {[=](Kernels& k) { k.fill(make_view(o, DType::F32, {4}), 7.0); }});
  backend.copy_to_host(after.data(), o, 16);
  check(ok.empty() && after[3] == 7.0f, "the backend works after errors");
  backend.deallocate(t, 48);
  backend.deallocate(i, 16);
  backend.deallocate(o, 32);
}

void test_gpu_fault() {
  setenv("FAKE_METAL_FAIL_COMMAND_BUFFER", "2", 1);
  {
    auto backend = tl::make_metal_backend();
    void* o = backend->allocate(16);
    auto fill = [o](Kernels& k) { k.fill(make_view(o, DType::F32, {4}), 2.0); };
    std::string first = submit_and_wait(*backend, {fill});
    std::string second = submit_and_wait(*backend, {fill});
    std::string third = submit_and_wait(*backend, {fill});
    check(first.empty() && third.empty(), "command buffers around a GPU fault succeed");
    check(second.rfind("metal: command buffer failed: injected GPU fault", 0) == 0,
          "GPU fault reported: '" + second + "'");
    backend->deallocate(o, 16);
  }
  unsetenv("FAKE_METAL_FAIL_COMMAND_BUFFER");
}

void test_no_device() {
  setenv("FAKE_METAL_NO_DEVICE", "1", 1);
  std::string message;
  try {
    tl::make_metal_backend();
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  unsetenv("FAKE_METAL_NO_DEVICE");
  check(message == "metal: no Metal device", "no device: '" + message + "'");
}

void test_long_loop_stays_flat(tl::Backend& backend) {
  void* a = backend.allocate(64 * 4);
  std::vector<float> ones(64, 1.0f);
  backend.copy_to_device(a, ones.data(), 256);
  long objects_before = 0, buffers_before = 0;
  for (int iteration = 0; iteration < 10000; ++iteration) {
    if (iteration == 100) {
      objects_before = fake_objc::live_objects();
      buffers_before = fake_metal_live_buffers();
    }
    void* out = backend.allocate(64 * 4);
    std::string error = submit_and_wait(backend, {[=](Kernels& k) {
      k.binary_scalar(tl::BinaryOp::Mul, make_view(a, DType::F32, {64}), 2.0, false, make_view(out, DType::F32, {64}));
    }});
    if (!error.empty()) {
      check(false, "loop iteration " + std::to_string(iteration) + ": " + error);
      break;
    }
    backend.deallocate(out, 64 * 4);
  }
  // The queue's thread drops its reference to the last command buffer just after reporting
  // completion, so one command buffer may still be alive at either sample: allow 1, not 10,000.
  long objects_after = fake_objc::live_objects();
  check(objects_after <= objects_before + 1,
        "10,000 command buffers: live Objective-C objects " + std::to_string(objects_before) + " -> " +
            std::to_string(objects_after));
  check(fake_metal_live_buffers() == buffers_before, "10,000 command buffers: MTLBuffers flat");
  backend.deallocate(a, 256);
}

}  // namespace

int main() {
  std::unique_ptr<Kernels> cpu = tl::make_cpu_kernels(1);
  long dispatches_before = fake_metal_dispatches();
  {
    auto backend = tl::make_metal_backend();
    check(std::string(backend->name()) == "metal", "backend name");
    for (const Case& c : every_kernel_case()) run_case(*backend, *cpu, c);
    test_errors(*backend, *cpu);
    test_long_loop_stays_flat(*backend);
    void* left_allocated = backend->allocate(100);  // teardown must release it too
    (void)left_allocated;
  }
  check(fake_metal_dispatches() - dispatches_before > 10000, "kernels really ran through the fake queue");
  test_gpu_fault();
  test_no_device();
  check(fake_objc::live_objects() == 0,
        "teardown released every Objective-C object (left: " + std::to_string(fake_objc::live_objects()) + ")");
  check(fake_metal_live_buffers() == 0, "teardown released every MTLBuffer");
  check(fake_objc::autoreleased_objects() > 0, "autorelease pools were used");
  check(fake_objc::missing_pool_autoreleases() == 0, "nothing autoreleased without a pool (R5)");
  // The detector itself: an autorelease with no pool in place is counted.
  long before = fake_objc::missing_pool_autoreleases();
  objc_release(objc_retain(nullptr));
  id probe = fake_objc::autorelease(fake_objc::new_object(new fake_objc::FakeClass{"Probe", {}}, sizeof(fake_objc::FakeObject), nullptr));
  (void)probe;
  check(fake_objc::missing_pool_autoreleases() == before + 1, "the missing-pool detector works");
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
