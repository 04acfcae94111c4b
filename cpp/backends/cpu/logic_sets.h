#pragma once
// Set operations of the logic engine's bitset evaluator (python/tensorlogic/logic/bitset_eval.py),
// bound as tensorlogic._core.bitset_or_pairs / chain_pairs / bitset_set_keys / merge_new_keys
// (cpp/bindings/logic.cpp).
// Host functions on NumPy-owned memory, not device ops: the logic package keeps its relations in host
// arrays (no queue, no backend, no Tensor). Each checks its indices before it changes anything: on
// bad input it throws tl::ShapeError and leaves its arguments as they were.
// A bit matrix is rows x words uint64, row-major, bit z of row x (word z / 64, bit z % 64) standing
// for the tuple (x, z) of a binary relation whose second column has `columns` values; its key is
// x * columns + z.
#include <cstdint>
#include <vector>

namespace tl::cpu {

// For each pair key p (p = x * pair_columns + y), in the given order: target[x] |= source[y], reading
// the rows as they are at that moment (target and source may be the same matrix: a row updated
// earlier in the call is read with its new bits). With `changed` (n_changed keys of source bits), only
// the pairs whose source row y holds one of those bits are applied. Returns, sorted ascending, the
// keys of the bits of target that were clear before the call and are set after it.
// Indices: 0 <= x < target_rows, 0 <= y < source_rows, 0 <= changed key < source_rows * columns.
std::vector<int64_t> bitset_or_pairs(uint64_t* target, int64_t target_rows, const uint64_t* source,
                                     int64_t source_rows, int64_t words, const int64_t* pairs, int64_t k,
                                     int64_t pair_columns, int64_t columns, const int64_t* changed,
                                     int64_t n_changed);

// The pairs of a join of R's keys (r = j * r_width + v) with the rows of a table S grouped by j (rows
// offsets[j] .. offsets[j + 1] - 1; n_offsets = groups + 1): base[s] + v * scale[s] for every key of R
// and S row s of its j, in that order (repeats kept). 0 <= j < groups; offsets nondecreasing from 0,
// the last at most n_rows (the length of base and scale).
std::vector<int64_t> chain_pairs(const int64_t* offsets, int64_t n_offsets, const int64_t* base,
                                 const int64_t* scale, int64_t n_rows, const int64_t* r_keys, int64_t k,
                                 int64_t r_width);

// Sets the bits of `keys` (any order, repeats allowed; 0 <= key < rows * columns) and returns, sorted
// ascending and each once, the keys whose bits were clear before the call.
std::vector<int64_t> bitset_set_keys(uint64_t* matrix, int64_t rows, int64_t words, const int64_t* keys,
                                     int64_t k, int64_t columns);

// `known` strictly increasing; `keys` any order, repeats allowed. Returns the keys not in known (sorted,
// each once) and writes into `merged` the union of both (sorted, each once).
std::vector<int64_t> merge_new_keys(const int64_t* known, int64_t n, const int64_t* keys, int64_t k,
                                    std::vector<int64_t>* merged);

}  // namespace tl::cpu
