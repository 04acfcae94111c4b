// The logic engine's set operations and joins (logic_sets.h). The work is small and per round
// (hundreds of rows of tens of words in a points-to analysis), so everything runs on the calling
// thread: handing it to the thread pool would cost more. No function takes a copy of a whole matrix
// (fresh memory to fault in costs more than the work at these sizes): new bits are recorded as they
// are set.
#include <algorithm>
#include <iterator>
#include <string>

#include "logic_sets.h"
#include "runtime/errors.h"

namespace tl::cpu {
namespace {

void check_columns(const char* op, int64_t words, int64_t columns) {
  if (words < 0 || columns < 0 || columns > words * 64)
    throw ShapeError(std::string(op) + ": " + std::to_string(columns) + " columns do not fit rows of " +
                     std::to_string(words) + " words");
}

ShapeError range_error(const char* op, const char* what, int64_t value, int64_t limit) {
  return ShapeError(std::string(op) + ": " + what + " " + std::to_string(value) + " is out of range (0 .. " +
                    std::to_string(limit - 1) + ")");
}

struct NewBits {
  int64_t word;  // row * words + word within the row: sorts by row, then word
  uint64_t bits;
};

}  // namespace

std::vector<int64_t> bitset_or_pairs(uint64_t* target, int64_t target_rows, const uint64_t* source,
                                     int64_t source_rows, int64_t words, const int64_t* pairs, int64_t k,
                                     int64_t pair_columns, int64_t columns, const int64_t* changed,
                                     int64_t n_changed) {
  check_columns("bitset_or_pairs", words, columns);
  if (pair_columns <= 0 || pair_columns < source_rows)
    throw ShapeError("bitset_or_pairs: pair_columns " + std::to_string(pair_columns) +
                     " must cover the source's " + std::to_string(source_rows) + " rows");
  const uint64_t pair_space = static_cast<uint64_t>(target_rows) * static_cast<uint64_t>(pair_columns);
  for (int64_t i = 0; i < k; ++i) {
    if (static_cast<uint64_t>(pairs[i]) >= pair_space)  // (also catches keys < 0)
      throw range_error("bitset_or_pairs", "pair", pairs[i], static_cast<int64_t>(pair_space));
    if (pairs[i] % pair_columns >= source_rows)
      throw range_error("bitset_or_pairs", "source row", pairs[i] % pair_columns, source_rows);
  }
  std::vector<uint8_t> wanted;  // source rows holding a changed bit (empty: every row)
  if (changed) {
    const uint64_t space = static_cast<uint64_t>(source_rows) * static_cast<uint64_t>(columns);
    wanted.assign(static_cast<size_t>(source_rows), 0);
    for (int64_t i = 0; i < n_changed; ++i) {
      if (static_cast<uint64_t>(changed[i]) >= space)
        throw range_error("bitset_or_pairs", "changed key", changed[i], static_cast<int64_t>(space));
      wanted[changed[i] / columns] = 1;
    }
  }
  std::vector<NewBits> found;  // (a bit is found once: it is set as it is found)
  for (int64_t i = 0; i < k; ++i) {
    const int64_t x = pairs[i] / pair_columns, y = pairs[i] - x * pair_columns;
    if (changed && !wanted[y]) continue;
    uint64_t* t = target + x * words;
    const uint64_t* s = source + y * words;
    for (int64_t w = 0; w < words; ++w) {
      const uint64_t bits = s[w] & ~t[w];
      if (bits) {
        t[w] |= bits;
        found.push_back({x * words + w, bits});
      }
    }
  }
  std::sort(found.begin(), found.end(), [](const NewBits& a, const NewBits& b) { return a.word < b.word; });
  std::vector<int64_t> fresh;
  for (size_t i = 0; i < found.size();) {
    uint64_t bits = 0;
    const int64_t word = found[i].word;
    for (; i < found.size() && found[i].word == word; ++i) bits |= found[i].bits;  // (disjoint)
    const int64_t row = word / words, base = row * columns + (word - row * words) * 64;
    for (; bits; bits &= bits - 1) fresh.push_back(base + __builtin_ctzll(bits));
  }
  return fresh;
}

std::vector<int64_t> chain_pairs(const int64_t* offsets, int64_t n_offsets, const int64_t* base,
                                 const int64_t* scale, int64_t n_rows, const int64_t* r_keys, int64_t k,
                                 int64_t r_width) {
  if (n_offsets < 1 || offsets[0] != 0 || r_width <= 0)
    throw ShapeError("chain_pairs: offsets must start at 0 and r_width be positive");
  for (int64_t g = 1; g < n_offsets; ++g)
    if (offsets[g] < offsets[g - 1] || offsets[g] > n_rows)
      throw ShapeError("chain_pairs: offsets must be nondecreasing and at most " + std::to_string(n_rows));
  const int64_t groups = n_offsets - 1;
  int64_t total = 0;
  for (int64_t i = 0; i < k; ++i) {
    if (r_keys[i] < 0 || r_keys[i] / r_width >= groups)
      throw range_error("chain_pairs", "key", r_keys[i], groups * r_width);
    const int64_t j = r_keys[i] / r_width;
    total += offsets[j + 1] - offsets[j];
  }
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(total));
  for (int64_t i = 0; i < k; ++i) {
    const int64_t j = r_keys[i] / r_width, v = r_keys[i] - j * r_width;
    for (int64_t s = offsets[j]; s < offsets[j + 1]; ++s) out.push_back(base[s] + v * scale[s]);
  }
  return out;
}

std::vector<int64_t> bitset_set_keys(uint64_t* matrix, int64_t rows, int64_t words, const int64_t* keys,
                                     int64_t k, int64_t columns) {
  check_columns("bitset_set_keys", words, columns);
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

std::vector<int64_t> merge_new_keys(const int64_t* known, int64_t n, const int64_t* keys, int64_t k,
                                    std::vector<int64_t>* merged) {
  for (int64_t i = 1; i < n; ++i)
    if (known[i] <= known[i - 1])
      throw ShapeError("merge_new_keys: known keys must be strictly increasing (position " +
                       std::to_string(i) + ")");
  std::vector<int64_t> sorted(keys, keys + k);
  if (!std::is_sorted(sorted.begin(), sorted.end())) std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::vector<int64_t> fresh;
  std::set_difference(sorted.begin(), sorted.end(), known, known + n, std::back_inserter(fresh));
  merged->clear();
  merged->reserve(static_cast<size_t>(n) + fresh.size());
  std::merge(known, known + n, fresh.begin(), fresh.end(), std::back_inserter(*merged));
  return fresh;
}

}  // namespace tl::cpu
