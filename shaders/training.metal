// Training kernels: scatter_add_rows (the gradient of embedding / index_select rows) and
// optimizer_update (one fused Adam, AdamW or SGD step in place). scatter_add_rows gives each
// thread one output column and walks the ids in order, so repeated ids add up in the same order
// on every run (no atomics); an id outside [0, V) is skipped and recorded in the command buffer's
// error record (rule R3). optimizer_update computes the CPU twin's f32 expressions in its order.
#include "tl_common.h"

// CPU twin: Kernels::scatter_add_rows (cpp/backends/cpu/kernels_training.cpp). p.m ids,
// p.n = V output rows, p.k = D columns; src [m, D] and out [V, D] contiguous f32.
kernel void tl_scatter_add_rows(constant TLRowsParams& p [[buffer(0)]],
                                device const uchar* ids [[buffer(1)]],
                                device const float* src [[buffer(2)]],
                                device float* out [[buffer(3)]],
                                device TLErrorRecord* error [[buffer(4)]],
                                uint gid [[thread_position_in_grid]],
                                uint grid [[threads_per_grid]]) {
  for (long c = gid; c < p.k; c += grid) {
    for (long i = 0; i < p.m; ++i) {
      long row_id = tl_load_i(ids, i, p.ids_dtype);
      if (row_id < 0 || row_id >= p.n) {
        if (c == 0) {
          // The weak exchange may fail spuriously; retry while the record is still empty.
          int expected = TL_ERROR_NONE;
          bool won = false;
          while (!won && expected == TL_ERROR_NONE) {
            won = atomic_compare_exchange_weak_explicit((device atomic_int*)&error->code, &expected,
                                                        TL_ERROR_SCATTER_ID_OUT_OF_RANGE,
                                                        memory_order_relaxed, memory_order_relaxed);
          }
          if (won) {
            error->value = row_id;
            error->limit = p.n;
          }
        }
        continue;
      }
      out[row_id * p.k + c] = out[row_id * p.k + c] + src[i * p.k + c];
    }
  }
}

// CPU twin: Kernels::optimizer_update (cpp/backends/cpu/kernels_training.cpp). param, grad, m, v
// contiguous f32 of n elements; m and v are placeholders when absent (SGD).
kernel void tl_optimizer_update(constant TLOptimizerParams& p [[buffer(0)]],
                                device float* param [[buffer(1)]],
                                device const float* grad [[buffer(2)]],
                                device float* m [[buffer(3)]],
                                device float* v [[buffer(4)]],
                                uint gid [[thread_position_in_grid]],
                                uint grid [[threads_per_grid]]) {
  for (long i = gid; i < p.n; i += grid) {
    float w = param[i];
    float g = grad[i];
    if (p.kind == TL_OPT_ADAM) {
      if (p.decoupled) {
        w = w * p.decay;
      } else if (p.weight_decay != 0.0f) {
        g = g + w * p.weight_decay;
      }
      float mi = m[i] * p.beta1 + g * p.one_minus_beta1;
      float vi = v[i] * p.beta2 + (g * g) * p.one_minus_beta2;
      m[i] = mi;
      v[i] = vi;
      float denom = sqrt(vi / p.bias2) + p.eps;
      param[i] = w - (mi / denom) * p.step;
    } else {
      if (p.weight_decay != 0.0f) g = g + w * p.weight_decay;
      if (p.has_m) {
        float b = m[i] * p.momentum + g;
        m[i] = b;
        g = p.nesterov ? g + b * p.momentum : b;
      }
      param[i] = w - g * p.step;
    }
  }
}
