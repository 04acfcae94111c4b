#pragma once
// The Metal implementation of tl::Kernels: each method encodes one or two compute dispatches
// into the command buffer that MetalBackend::submit is building (begin_command_buffer ..
// end_command_buffer). The encoder is serial (MTLDispatchTypeSerial), so dispatches run in encode
// order and each sees the previous one's writes (rule R4). Methods validate first and throw
// KernelError outside any autorelease pool; the Objective-C encoding itself runs inside
// @autoreleasepool and cannot throw (docs/runtime.md R5). Include only from Objective-C++ files.
#import <Metal/Metal.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels.h"  // cpp/runtime/
#include "metal_device.h"

namespace tl {
namespace metal {

class MetalKernels : public Kernels {
 public:
  explicit MetalKernels(MetalDevice& device) : device_(device) {}
  ~MetalKernels() override;  // releases the encoder and error record if a submit was cut short

  // Start encoding into `encoder` (owned by the caller for the duration); returns nothing.
  void begin_command_buffer(id<MTLComputeCommandEncoder> encoder);
  // Stop encoding. Stores into *error_record the command buffer's error record buffer if a kernel
  // that can report run-time errors was encoded (else nil); the caller keeps it alive until the
  // command buffer completes.
  void end_command_buffer(__strong id<MTLBuffer>* error_record);

  void binary(BinaryOp op, const View& a, const View& b, const View& out) override;
  void binary_scalar(BinaryOp op, const View& a, double s, bool scalar_first,
                     const View& out) override;
  void unary(UnaryOp op, const View& a, const View& out) override;
  void copy(const View& src, const View& dst) override;
  void fill(const View& out, double value) override;
  void arange(const View& out, double start, double step) override;
  void where(const View& cond, const View& a, const View& b, const View& out) override;
  void reduce(ReduceOp op, const View& in, int64_t outer, int64_t n, int64_t inner,
              const View& out) override;
  void softmax(const View& in, int64_t outer, int64_t n, int64_t inner, const View& out) override;
  void matmul(const View& a, const View& b, const View& out) override;
  void linear(const View& x, const View& w, const View& out) override;
  void expert_linear(const View& x, const View& w, const View& ids, int64_t experts,
                     const View& out) override;
  void gather_rows(const View& table, const View& ids, const View& out) override;
  void scatter_add_rows(const View& ids, const View& src, const View& out) override;
  void optimizer_update(const OptimizerStep& s, const View& param, const View& grad, const View& m,
                        const View& v) override;
  void rms_norm(const View& x, const View& w, float eps, const View& out) override;
  void layer_norm(const View& x, const View& w, const View& b, float eps,
                  const View& out) override;
  void rope(const View& x, int64_t pos_offset, float base, bool neox, const View& out) override;
  void causal_mask(int64_t offset, const View& out) override;
  void attention(const View& q, const View& k, const View& v, const View& mask, float scale,
                 bool causal, int64_t q_pos_offset, const View& out, float softcap = 0.0f) override;
  void fused_linear(const View& x, const View& w, LinearPrologue prologue, const View& norm_w,
                    float eps, const View& addend, const View& scratch, const View& out) override;
  void swiglu(const View& gate, const View& up, const View& out) override;
  void rope_kv_write(const View& q, const View& k, const View& v, int64_t pos_offset, float base,
                     bool neox, const View& q_out, const View& k_dst, const View& v_dst) override;
  void delay(uint32_t us) override;

 private:
  // One buffer argument of a dispatch: a resolved operand, or the placeholder when absent.
  struct Binding {
    BufferSlice slice;
    int index = 0;
  };
  // Threadgroup geometry of one dispatch.
  struct Grid {
    MTLSize groups;
    MTLSize threads;
  };

  // Resolves a view's data pointer (placeholder when nullptr and `optional`); throws KernelError
  // for a pointer that is in no Metal buffer.
  Binding bind(const View& view, int index, const char* op, bool optional = false) const;
  // The cached pipeline for `name`; throws KernelError if it cannot be built or cannot run
  // `threads_needed` threads per threadgroup.
  PipelineRef pipeline(const char* name, size_t threads_needed) const;
  // A grid-stride 1-D grid for `n` work items.
  static Grid grid_1d(int64_t n, size_t max_threads);
  // Encodes one dispatch; never throws.
  void encode(const PipelineRef& pipeline, const void* params, size_t params_bytes,
              const Binding* bindings, int binding_count, const Grid& grid);
  // The current command buffer's error record (created on first use); throws KernelError when
  // out of memory.
  BufferSlice error_record();

  MetalDevice& device_;
  bool encoding_ = false;  // between begin_command_buffer and end_command_buffer
  id<MTLComputeCommandEncoder> encoder_ = nil;
  id<MTLBuffer> error_record_ = nil;
};

}  // namespace metal
}  // namespace tl
