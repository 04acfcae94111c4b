// gather_rows (embedding): rows of a plain or GGUF block-quantized table, copied when the table has
// the output's dtype, else dequantized (dequantize_row, kernels_matmul_quant.cpp) or converted row by
// row into f32 and stored in the output's dtype.
#include <cstring>
#include <string>
#include <vector>

#include "cpu_kernels_impl.h"

namespace tl::cpu {
namespace {

// out[i] = table[ids[i]] for one-element rows, read straight from the ids (no converted copy of them:
// for an im2col's ids that copy was most of the kernel's memory traffic), each range-checked as it is read.
template <class T, class I>
void gather_elements(const uint8_t* table, int64_t V, const I* ids, int64_t n, const View& out) {
  const T* t = reinterpret_cast<const T*>(table);
  T* o = static_cast<T*>(out.data);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    if (static_cast<uint64_t>(id) >= static_cast<uint64_t>(V))  // also catches id < 0
      kernel_fail("embedding: id " + std::to_string(id) + " is out of range for a table of " +
                  std::to_string(V) + " rows");
    o[i] = t[id];
  }
}

template <class T>
bool gather_elements(const uint8_t* table, int64_t V, const View& ids, const View& out) {
  if (ids.dtype == DType::I64)
    gather_elements<T>(table, V, static_cast<const int64_t*>(ids.data), ids.numel(), out);
  else
    gather_elements<T>(table, V, static_cast<const int32_t*>(ids.data), ids.numel(), out);
  return true;
}

}  // namespace

void CpuKernels::gather_rows(const View& table, const View& ids, const View& out) {
  if (table.ndim != 2) kernel_fail("gather_rows: table must be 2-D");
  if (ids.dtype != DType::I32 && ids.dtype != DType::I64) kernel_fail("gather_rows: ids must be i32 or i64");
  require_float("gather_rows", out);
  const int64_t V = table.shape[0], D = table.shape[1];
  const int64_t n = ids.numel();
  if (D % block_elems(table.dtype) != 0) kernel_fail("gather_rows: row length not a multiple of the block size");
  const size_t trow = row_bytes(table.dtype, D);
  if (table.dtype == out.dtype && !is_quantized(table.dtype) && D == 1) {
    // Rows of one element (an element gather, e.g. conv2d's im2col of NCHW data): a typed move per
    // id instead of a memcpy call per 2-8 bytes.
    const uint8_t* t = static_cast<const uint8_t*>(table.data);
    switch (trow) {
      case 2: gather_elements<uint16_t>(t, V, ids, out); return;
      case 4: gather_elements<uint32_t>(t, V, ids, out); return;
      case 8: gather_elements<uint64_t>(t, V, ids, out); return;
      default: break;
    }
  }
  std::vector<int64_t> idx(static_cast<size_t>(n));
  load_i64(ids.dtype, ids.data, 1, n, idx.data());
  for (int64_t i = 0; i < n; ++i) {
    if (idx[static_cast<size_t>(i)] < 0 || idx[static_cast<size_t>(i)] >= V)
      kernel_fail("embedding: id " + std::to_string(idx[static_cast<size_t>(i)]) +
                  " is out of range for a table of " + std::to_string(V) + " rows");
  }
  const uint8_t* tdata = static_cast<const uint8_t*>(table.data);
  const size_t orow = row_bytes(out.dtype, D);
  if (table.dtype == out.dtype) {
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(static_cast<char*>(out.data) + i * orow, tdata + idx[static_cast<size_t>(i)] * trow, trow);
    return;
  }
  std::vector<float> row(static_cast<size_t>(D));
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* src = tdata + idx[static_cast<size_t>(i)] * trow;
    if (is_quantized(table.dtype))
      dequantize_row(table.dtype, src, D, row.data());
    else
      load_f32(table.dtype, src, 1, D, row.data());
    store_f32(out.dtype, static_cast<char*>(out.data) + i * orow, 1, D, row.data());
  }
}

}  // namespace tl::cpu
