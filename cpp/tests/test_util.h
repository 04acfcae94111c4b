#pragma once
// Minimal test harness for the runtime's ctest executables: CHECK records a failure with its
// line and keeps going; main() returns test_result() so ctest sees the failure.
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "runtime/device.h"
#include "runtime/errors.h"
#include "runtime/ops.h"

namespace tl_test {

inline int& failures() {
  static int n = 0;
  return n;
}

#define CHECK(cond)                                                                \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ::tl_test::failures()++;                                                     \
    }                                                                              \
  } while (0)

#define CHECK_EQ(a, b)                                                                   \
  do {                                                                                   \
    auto va_ = (a);                                                                      \
    auto vb_ = (b);                                                                      \
    if (!(va_ == vb_)) {                                                                 \
      std::fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %s (%lld vs %lld)\n", __FILE__, \
                   __LINE__, #a, #b, (long long)va_, (long long)vb_);                    \
      ::tl_test::failures()++;                                                           \
    }                                                                                    \
  } while (0)

inline int test_result(const char* name) {
  if (failures()) {
    std::fprintf(stderr, "%s: %d check(s) failed\n", name, failures());
    return 1;
  }
  std::printf("%s: all checks passed\n", name);
  return 0;
}

// A host-filled f32 tensor on the current device.
inline tl::Tensor host_tensor(const std::vector<int64_t>& shape, float value) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n), value);
  return tl::from_host(v.data(), shape, tl::DType::F32);
}

inline std::vector<float> read(const tl::Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  tl::to_host(t, v.data());
  return v;
}

}  // namespace tl_test
