// bitset_or_rows and bitset_set_keys (bitset_rows.h). bitset_or_rows: one pass over the pairs, then
// one pass over the distinct target rows comparing them with a copy taken before (the new bits, in
// key order). bitset_set_keys: one test-and-set per key, then a sort of the new ones. The work is small and per-round (hundreds of rows of tens of words in a points-to
// analysis), so it runs on the calling thread: handing it to the thread pool would cost more.
#include <algorithm>
#include <cstring>
#include <string>

#include "bitset_rows.h"
#include "runtime/errors.h"

namespace tl::cpu {
namespace {

void check_columns(int64_t words, int64_t columns) {
  if (words < 0 || columns < 0 || columns > words * 64)
    throw ShapeError("bitset: " + std::to_string(columns) + " columns do not fit rows of " +
                     std::to_string(words) + " words");
}

void check_rows(const int64_t* ids, int64_t k, int64_t rows, const char* which) {
  for (int64_t i = 0; i < k; ++i)
    if (static_cast<uint64_t>(ids[i]) >= static_cast<uint64_t>(rows))  // (also catches ids < 0)
      throw ShapeError(std::string("bitset_or_rows: ") + which + " row " + std::to_string(ids[i]) +
                       " is out of range for a matrix of " + std::to_string(rows) + " rows");
}

}  // namespace

std::vector<int64_t> bitset_or_rows(uint64_t* target, int64_t target_rows, const uint64_t* source,
                                    int64_t source_rows, int64_t words, const int64_t* xs,
                                    const int64_t* ys, int64_t k, int64_t columns) {
  check_columns(words, columns);
  check_rows(xs, k, target_rows, "target");
  check_rows(ys, k, source_rows, "source");
  std::vector<int64_t> rows(xs, xs + k);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  std::vector<uint64_t> before(rows.size() * static_cast<size_t>(words));
  for (size_t r = 0; r < rows.size(); ++r)
    std::memcpy(&before[r * words], target + rows[r] * words, sizeof(uint64_t) * words);
  for (int64_t i = 0; i < k; ++i) {
    uint64_t* t = target + xs[i] * words;
    const uint64_t* s = source + ys[i] * words;
    for (int64_t w = 0; w < words; ++w) t[w] |= s[w];
  }
  std::vector<int64_t> fresh;
  for (size_t r = 0; r < rows.size(); ++r) {
    const uint64_t* t = target + rows[r] * words;
    const uint64_t* b = &before[r * words];
    for (int64_t w = 0; w < words; ++w) {
      for (uint64_t bits = t[w] & ~b[w]; bits; bits &= bits - 1)
        fresh.push_back(rows[r] * columns + w * 64 + __builtin_ctzll(bits));
    }
  }
  return fresh;
}

std::vector<int64_t> bitset_set_keys(uint64_t* matrix, int64_t rows, int64_t words, const int64_t* keys,
                                     int64_t k, int64_t columns) {
  check_columns(words, columns);
  const uint64_t space = static_cast<uint64_t>(rows) * static_cast<uint64_t>(columns);
  for (int64_t i = 0; i < k; ++i)
    if (static_cast<uint64_t>(keys[i]) >= space)  // (also catches keys < 0)
      throw ShapeError("bitset_set_keys: key " + std::to_string(keys[i]) +
                       " is out of range for a matrix of " + std::to_string(rows) + " x " +
                       std::to_string(columns) + " bits");
  std::vector<int64_t> fresh;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t row = keys[i] / columns, column = keys[i] - row * columns;
    uint64_t& word = matrix[row * words + (column >> 6)];
    const uint64_t bit = uint64_t{1} << (column & 63);
    if (!(word & bit)) {
      word |= bit;
      fresh.push_back(keys[i]);
    }
  }
  if (!std::is_sorted(fresh.begin(), fresh.end())) std::sort(fresh.begin(), fresh.end());
  return fresh;
}

}  // namespace tl::cpu
