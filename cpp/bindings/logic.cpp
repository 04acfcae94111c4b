// Host functions for the logic engine (python/tensorlogic/logic/): they work on NumPy arrays in
// place, with no device, queue or Tensor involved (cpp/backends/cpu/logic_sets.h says what each
// computes).
#include <cstring>
#include <string>

#include "backends/cpu/logic_sets.h"
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
  m.def("bitset_or_pairs", [](py::array target, py::array source, py::handle pairs_obj,
                              int64_t pair_columns, int64_t columns, py::handle changed_obj) {
          check_matrix(target, "bitset_or_pairs", "target", true);
          check_matrix(source, "bitset_or_pairs", "source", false);
          if (source.shape(1) != target.shape(1))
            throw ShapeError("bitset_or_pairs: target rows have " + std::to_string(target.shape(1)) +
                             " words, source rows " + std::to_string(source.shape(1)));
          auto pairs = int_ids(pairs_obj, "bitset_or_pairs", "pairs");
          py::array_t<int64_t> changed;
          if (!changed_obj.is_none()) changed = int_ids(changed_obj, "bitset_or_pairs", "changed");
          // (the GIL stays held: microseconds of work, and no other thread may touch target meanwhile)
          return to_array(cpu::bitset_or_pairs(
              static_cast<uint64_t*>(target.mutable_data()), target.shape(0),
              static_cast<const uint64_t*>(source.data()), source.shape(0), target.shape(1), pairs.data(),
              pairs.shape(0), pair_columns, columns, changed_obj.is_none() ? nullptr : changed.data(),
              changed_obj.is_none() ? 0 : changed.shape(0)));
        },
        py::arg("target"), py::arg("source"), py::arg("pairs"), py::arg("pair_columns"), py::arg("columns"),
        py::arg("changed") = py::none(),
        "Logic engine row updates on uint64 bit matrices (rows x words, bit z of row x = tuple (x, z), key "
        "x * columns + z): target[x] |= source[y] for each pair key x * pair_columns + y, in order, in "
        "place (target may be source); with `changed` (source keys) only pairs whose row y holds one. "
        "Returns the sorted keys of the bits that were clear before.");
  m.def("chain_pairs", [](py::handle offsets_obj, py::handle base_obj, py::handle scale_obj,
                          py::handle keys_obj, int64_t r_width) {
          auto offsets = int_ids(offsets_obj, "chain_pairs", "offsets");
          auto base = int_ids(base_obj, "chain_pairs", "base");
          auto scale = int_ids(scale_obj, "chain_pairs", "scale");
          auto keys = int_ids(keys_obj, "chain_pairs", "r_keys");
          if (base.shape(0) != scale.shape(0))
            throw ShapeError("chain_pairs: base and scale differ in length");
          return to_array(cpu::chain_pairs(offsets.data(), offsets.shape(0), base.data(), scale.data(),
                                           base.shape(0), keys.data(), keys.shape(0), r_width));
        },
        py::arg("offsets"), py::arg("base"), py::arg("scale"), py::arg("r_keys"), py::arg("r_width"),
        "Logic engine join of R's keys j * r_width + v with S's rows grouped by j (offsets[j] .. "
        "offsets[j + 1] - 1): base[s] + v * scale[s] for each pair, in order, repeats kept.");
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
  m.def("merge_new_keys", [](py::handle known_obj, py::handle keys_obj) {
          auto known = int_ids(known_obj, "merge_new_keys", "known");
          auto keys = int_ids(keys_obj, "merge_new_keys", "keys");
          std::vector<int64_t> merged;
          std::vector<int64_t> fresh = cpu::merge_new_keys(known.data(), known.shape(0), keys.data(),
                                                           keys.shape(0), &merged);
          return py::make_tuple(to_array(fresh), to_array(merged));
        },
        py::arg("known"), py::arg("keys"),
        "Logic engine key sets: (the keys not in `known`, sorted and each once; the sorted union of both). "
        "`known` must be strictly increasing.");
}

}  // namespace tl::py_bind
