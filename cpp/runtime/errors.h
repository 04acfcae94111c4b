#pragma once
// Error types of the runtime. Each maps to one Python exception class (cpp/bindings/module.cpp):
// TLError -> TLRuntimeError, ShapeError, DTypeError, OutOfMemoryError, KernelFailure,
// BackendUnavailable. Messages name the op and the shapes so a user can act on them.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtype.h"

namespace tl {

struct TLError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct ShapeError : TLError {
  using TLError::TLError;
};
struct DTypeError : TLError {
  using TLError::TLError;
};
struct OutOfMemoryError : TLError {
  using TLError::TLError;
};
struct KernelFailure : TLError {
  using TLError::TLError;
};
struct BackendUnavailable : TLError {
  using TLError::TLError;
};

// "[2, 3]"
inline std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace tl
