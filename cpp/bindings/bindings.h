#pragma once
// Shared helpers of the pybind11 bindings (module tensorlogic._core, docs/core-api.md), split by
// topic like the API: tensor.cpp (the Tensor class), ops.cpp (module functions), memory.cpp
// (device, debug and memory ledger), module.cpp (exceptions and the module itself), logic.cpp (host
// functions of the logic engine on NumPy arrays).
// Rule: every call that can wait on the device releases the GIL first.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "runtime/ops.h"

namespace tl::py_bind {

namespace py = pybind11;

DType parse_dtype(py::handle obj, const char* op);
std::optional<DType> parse_optional_dtype(py::handle obj, const char* op);
Shape parse_shape(py::handle obj, const char* op);
int64_t parse_int(py::handle obj, const char* what);  // int, or a float with an integral value
bool is_scalar(py::handle obj);  // bool, int or float (not a Tensor)
// A compiled function's symbolic scalar (python/tensorlogic/builtins/symbolic.py): an object whose
// `_tl_affine` is None outside a recording, else (value, constant, [(slot, coef), ...], is_float).
bool is_symbolic(py::handle obj);
DynInt parse_dyn_int(py::handle obj, const char* what);  // ints as parse_int
// A list or tuple of them; `count` (when not -1): the length it must have, and a single value
// (not a list) stands for that many copies of itself.
std::vector<DynInt> parse_dyn_ints(py::handle obj, const char* what, int64_t count = -1);
DynScalar parse_dyn_scalar(py::handle obj, const char* what, bool* is_float);
// Tensor from a Tensor, NumPy array, nested list or Python scalar (`like` picks a scalar's dtype).
Tensor as_tensor(py::handle obj, const char* op, const Tensor* like = nullptr);
Tensor from_numpy(py::handle arr, std::optional<DType> dtype);
// A Python int beside an integer tensor in a binary op: nullopt where the scalar path (a double) is
// exact; else the int as a 0-d tensor of the tensor's element type (i64 for a comparison). An int
// that does not fit that type is a DTypeError naming it (NumPy 2 refuses it too), never a wrap.
std::optional<Tensor> exact_int_operand(py::handle s, const Tensor& a, BinaryOp op, const char* name);
py::array to_numpy(const Tensor& t);
py::object item(const Tensor& t);

void bind_tensor(py::module_& m);
void bind_ops(py::module_& m);
void bind_memory(py::module_& m);
void bind_recording(py::module_& m);
void bind_logic(py::module_& m);  // logic.cpp: host functions of the logic engine

}  // namespace tl::py_bind
