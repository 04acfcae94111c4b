#pragma once
// Row updates of bit matrices for the logic engine's bitset evaluator
// (python/tensorlogic/logic/bitset_eval.py): a host function on NumPy-owned memory, not a device
// op (the logic package keeps its relations in host arrays; no queue, no backend).
// A bit matrix is rows x words uint64, row-major, bit z of row x (word z / 64, bit z % 64) standing
// for the tuple (x, z) of a binary relation whose second column has `columns` values.
#include <cstdint>
#include <vector>

namespace tl::cpu {

// target[xs[i]] |= source[ys[i]] for i = 0 .. k-1, in that order, reading the rows as they are at
// that moment (target and source may be the same matrix: a row updated earlier in the call is read
// with its new bits). Returns, sorted ascending, the keys x * columns + z of the bits of target that
// were clear before the call and are set after it. Every index is checked (0 <= xs[i] < target_rows,
// 0 <= ys[i] < source_rows) before any row changes: on a bad index it throws tl::ShapeError and
// target is untouched.
std::vector<int64_t> bitset_or_rows(uint64_t* target, int64_t target_rows, const uint64_t* source,
                                    int64_t source_rows, int64_t words, const int64_t* xs,
                                    const int64_t* ys, int64_t k, int64_t columns);

// Sets the bits of `keys` (key = x * columns + z: bit z of row x; any order, repeats allowed) and
// returns, sorted ascending and each once, the keys whose bits were clear before the call. Every key
// is checked (0 <= key < rows * columns) before any bit changes: on a bad key it throws
// tl::ShapeError and matrix is untouched.
std::vector<int64_t> bitset_set_keys(uint64_t* matrix, int64_t rows, int64_t words, const int64_t* keys,
                                     int64_t k, int64_t columns);

}  // namespace tl::cpu
