// Host functions for the logic engine (python/tensorlogic/logic/): they work on NumPy arrays in
// place, with no device, queue or Tensor involved. bitset_or_rows, bitset_set_keys:
// cpp/backends/cpu/bitset_rows.h.
#include <cstring>
#include <string>

#include "backends/cpu/bitset_rows.h"
#include "bindings.h"
#include "runtime/errors.h"

namespace tl::py_bind {
namespace {

// A C-contiguous 2-D uint64 matrix (rows x words), as the bitset evaluator allocates it. Checked, not
// converted: a converted copy would take the target's updates and lose them.
void check_matrix(const py::array& a, const char* op, const char* which, bool writable) {
  std::string name = std::string(op) + ": " + which;
  if (a.ndim() != 2) throw ShapeError(name + " must be a 2-D array, got " + std::to_string(a.ndim()) + "-D");
  if (!a.dtype().is(py::dtype::of<uint64_t>())) throw DTypeError(name + " must be a uint64 array");
  if (!(a.flags() & py::array::c_style)) throw ShapeError(name + " must be C-contiguous");
  if (writable && !a.writeable()) throw ShapeError(name + " must be writable");
}

py::array_t<int64_t> int_ids(py::handle obj, const char* op, const char* which) {
  auto ids = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(obj);
  if (!ids || ids.ndim() != 1)
    throw ShapeError(std::string(op) + ": " + which + " must be a 1-D integer array");
  return ids;
}

py::array_t<int64_t> to_array(const std::vector<int64_t>& keys) {
  py::array_t<int64_t> out(static_cast<py::ssize_t>(keys.size()));
  if (!keys.empty()) std::memcpy(out.mutable_data(), keys.data(), keys.size() * sizeof(int64_t));
  return out;
}

}  // namespace

void bind_logic(py::module_& m) {
  m.def("bitset_or_rows", [](py::array target, py::array source, py::handle xs_obj, py::handle ys_obj,
                             int64_t columns) {
          check_matrix(target, "bitset_or_rows", "target", true);
          check_matrix(source, "bitset_or_rows", "source", false);
          if (source.shape(1) != target.shape(1))
            throw ShapeError("bitset_or_rows: target rows have " + std::to_string(target.shape(1)) +
                             " words, source rows " + std::to_string(source.shape(1)));
          auto xs = int_ids(xs_obj, "bitset_or_rows", "xs");
          auto ys = int_ids(ys_obj, "bitset_or_rows", "ys");
          if (xs.shape(0) != ys.shape(0))
            throw ShapeError("bitset_or_rows: xs has " + std::to_string(xs.shape(0)) + " rows, ys " +
                             std::to_string(ys.shape(0)));
          // (the GIL stays held: microseconds of work, and no other thread may touch target meanwhile)
          std::vector<int64_t> fresh = cpu::bitset_or_rows(
              static_cast<uint64_t*>(target.mutable_data()), target.shape(0),
              static_cast<const uint64_t*>(source.data()), source.shape(0), target.shape(1), xs.data(),
              ys.data(), xs.shape(0), columns);
          return to_array(fresh);
        },
        py::arg("target"), py::arg("source"), py::arg("xs"), py::arg("ys"), py::arg("columns"),
        "Logic engine row updates on uint64 bit matrices (rows x words, bit z of row x = tuple (x, z)): "
        "target[xs[i]] |= source[ys[i]] in order, in place (target may be source). Returns the sorted "
        "keys x * columns + z of the bits that were clear before.");
  m.def("bitset_set_keys", [](py::array matrix, py::handle keys_obj, int64_t columns) {
          check_matrix(matrix, "bitset_set_keys", "matrix", true);
          auto keys = int_ids(keys_obj, "bitset_set_keys", "keys");
          return to_array(cpu::bitset_set_keys(static_cast<uint64_t*>(matrix.mutable_data()),
                                               matrix.shape(0), matrix.shape(1), keys.data(),
                                               keys.shape(0), columns));
        },
        py::arg("matrix"), py::arg("keys"), py::arg("columns"),
        "Logic engine bit matrix (uint64, rows x words): sets the bits of keys x * columns + z in place "
        "and returns, sorted and each once, the keys whose bits were clear before.");
}

}  // namespace tl::py_bind
