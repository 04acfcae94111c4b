// gather_rows (embedding lookup): out[i, :] = table[ids[i], :] for plain or quantized tables.
// An id outside [0, V) can only be seen on the device: the kernel writes zeros for that row and
// records the first such id in the command buffer's DeviceErrorSlot, which the backend turns into
// the command buffer's error when it completes (raised as KernelFailure at the next wait).
#include "cuda_common.cuh"
#include "cuda_kernels.h"
#include "quant_blocks.cuh"

namespace tl {
namespace cuda {
namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ void report_bad_id(DeviceErrorSlot* slot, int64_t id, int64_t limit) {
  if (slot != nullptr && atomicCAS(&slot->code, 0, kErrorIdOutOfRange) == 0) {
    slot->value = id;
    slot->limit = limit;
  }
}

template <DType TT>
__global__ void gather_rows_kernel(const uint8_t* table, size_t table_row_bytes, int64_t V,
                                   int64_t D, const void* ids, DType ids_dtype, int64_t n,
                                   void* out, DType out_dtype, DeviceErrorSlot* slot) {
  pdl_wait();  // launched as a programmatic dependent launch (cuda_common.cuh)
  pdl_launch_dependents();
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t id = load_int(ids, ids_dtype, i);
    const int64_t out_base = i * D;
    if (id < 0 || id >= V) {
      if (threadIdx.x == 0) report_bad_id(slot, id, V);
      for (int64_t d = threadIdx.x; d < D; d += blockDim.x) store_float(out, out_dtype, out_base + d, 0.0f);
      continue;
    }
    const uint8_t* row = table + id * table_row_bytes;
    if constexpr (quantized_dtype(TT)) {
      for (int64_t c = threadIdx.x; c < D / 8; c += blockDim.x) {
        float vals[8];
        dequant_chunk8<TT>(row, c, vals);
#pragma unroll
        for (int k = 0; k < 8; ++k) store_float(out, out_dtype, out_base + c * 8 + k, vals[k]);
      }
    } else {
      for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        store_float(out, out_dtype, out_base + d, load_float(row, TT, d));
      }
    }
  }
}

// Launches gather_rows_kernel<T> for the table dtype chosen at run time.
struct GatherLauncher {
  const View& table;
  const View& ids;
  const View& out;
  int64_t V, D, n;
  DeviceErrorSlot* slot;
  cudaStream_t stream;
  bool pdl;
  template <DType T>
  void operator()() {
    const unsigned grid = static_cast<unsigned>(n < 65535 ? n : 65535);
    launch_kernel(pdl, gather_rows_kernel<T>, dim3(grid), dim3(kThreads), 0, stream,
        static_cast<const uint8_t*>(table.data), row_bytes(T, D), V, D, ids.data, ids.dtype, n,
        out.data, out.dtype, slot);
  }
};

}  // namespace

void CudaKernels::gather_rows(const View& table, const View& ids, const View& out) {
  if (ids.dtype != DType::I32 && ids.dtype != DType::I64) {
    throw KernelError(std::string("gather_rows: ids must be i32 or i64, got ") +
                      dtype_name(ids.dtype));
  }
  if (!is_floating(out.dtype)) {
    throw KernelError(std::string("gather_rows: output must be floating, got ") +
                      dtype_name(out.dtype));
  }
  if (!is_floating(table.dtype) && !is_quantized(table.dtype)) {
    throw KernelError(std::string("gather_rows: unsupported table dtype ") +
                      dtype_name(table.dtype));
  }
  const int64_t V = table.shape[0], D = table.shape[1], n = ids.numel();
  if (n == 0) return;
  if (is_quantized(table.dtype) && D % block_elems(table.dtype) != 0) {
    throw KernelError(std::string("gather_rows: ") + dtype_name(table.dtype) + " table has " +
                      std::to_string(D) + " columns, not a multiple of its block size");
  }
  DeviceErrorSlot* slot = error_slot_ ? error_slot_() : nullptr;
  GatherLauncher launch{table, ids, out, V, D, n, slot, stream_, tuning_.pdl};
  switch (table.dtype) {
    case DType::F32: launch.operator()<DType::F32>(); break;
    case DType::F16: launch.operator()<DType::F16>(); break;
    case DType::BF16: launch.operator()<DType::BF16>(); break;
    default: dispatch_quantized(table.dtype, launch); break;
  }
  check_launch("gather_rows");
}

}  // namespace cuda
}  // namespace tl
