// gather_rows: out[i, :] = table[ids[i], :] for a table of any dtype including the GGUF block
// types (decoded element by element). An id outside [0, V) cannot throw on the GPU: its output
// row is written as zeros and the first such id is recorded in the command buffer's error record,
// which the completion handler reports as the command buffer's error (rule R3).
#include "tl_common.h"

// CPU twin: Kernels::gather_rows (cpp/backends/cpu/kernels_gather_rows.cpp).
kernel void tl_gather_rows(constant TLRowsParams& p [[buffer(0)]],
                           device const uchar* table [[buffer(1)]],
                           device const uchar* ids [[buffer(2)]],
                           device uchar* out [[buffer(3)]],
                           device TLErrorRecord* error [[buffer(4)]],
                           uint2 gid [[thread_position_in_grid]],
                           uint2 grid [[threads_per_grid]]) {
  for (long i = gid.y; i < p.m; i += grid.y) {
    long row_id = tl_load_i(ids, i, p.ids_dtype);
    bool valid = row_id >= 0 && row_id < p.n;
    if (!valid && gid.x == 0) {
      // The weak exchange may fail spuriously; retry while the record is still empty.
      int expected = TL_ERROR_NONE;
      bool won = false;
      while (!won && expected == TL_ERROR_NONE) {
        won = atomic_compare_exchange_weak_explicit((device atomic_int*)&error->code, &expected,
                                                    TL_ERROR_GATHER_ID_OUT_OF_RANGE,
                                                    memory_order_relaxed, memory_order_relaxed);
      }
      if (won) {
        error->value = row_id;
        error->limit = p.n;
      }
    }
    device const uchar* row = table + (valid ? row_id : 0) * p.row_bytes;
    for (long d = gid.x; d < p.k; d += grid.x) {
      float v = valid ? tl_row_elem(row, p.w_dtype, d) : 0.0f;
      tl_store_f(out, i * p.k + d, p.out_dtype, v);
    }
  }
}
