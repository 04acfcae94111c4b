// MetalKernels: encodes each tl::Kernels call as compute dispatches of the kernels in shaders/.
// Invariants: validation and operand lookup happen first and may throw KernelError; they create
// no Objective-C object and hold no strong reference (BufferSlice/PipelineRef are unretained and
// stay valid because the runtime keeps every operand alive until its command buffer completes,
// R1). Only encode(), begin/end_command_buffer() and error_record() talk to Objective-C, each
// inside @autoreleasepool and without throwing inside it (R5). Param structs come from
// shaders/tl_params.h, shared with the shaders, so both sides agree on their layout.
#import <Metal/Metal.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "metal_kernels.h"
#include "tl_params.h"  // shaders/

namespace tl {
namespace metal {

namespace {

static_assert(sizeof(TLViewDesc) % 8 == 0, "TLViewDesc must be 8-byte sized");
static_assert(sizeof(TLElementwiseParams) % 8 == 0, "params must be 8-byte sized");
static_assert(sizeof(TLCopyParams) % 8 == 0, "params must be 8-byte sized");
static_assert(sizeof(TLReduceParams) % 8 == 0, "params must be 8-byte sized");
static_assert(sizeof(TLMatmulParams) % 8 == 0, "params must be 8-byte sized");
static_assert(sizeof(TLRowsParams) % 8 == 0, "params must be 8-byte sized");
static_assert(sizeof(TLNormParams) % 8 == 0, "params must be 8-byte sized");
static_assert(sizeof(TLAttentionParams) % 8 == 0, "params must be 8-byte sized");
static_assert(sizeof(TLAttentionParams) <= 4096, "setBytes takes at most 4 KiB");
static_assert(sizeof(TLRopeParams) <= 4096, "setBytes takes at most 4 KiB");
static_assert(sizeof(TLRopeParams) % 8 == 0, "params must be 8-byte sized");
static_assert(sizeof(TLFusedLinearParams) % 8 == 0, "params must be 8-byte sized");
static_assert(sizeof(TLRopeKVParams) % 8 == 0, "params must be 8-byte sized");
static_assert(sizeof(TLRopeKVParams) <= 4096, "setBytes takes at most 4 KiB");
static_assert(sizeof(TLOptimizerParams) % 8 == 0, "params must be 8-byte sized");
static_assert(TL_MAX_DIMS == kMaxDims, "shader and runtime dimension limits differ");
static_assert(static_cast<int>(DType::Q6_K) == TL_Q6_K && static_cast<int>(DType::Bool) == TL_BOOL,
              "shader dtype codes must equal tl::DType values");

// Grid-stride kernels never need more threadgroups than this per dimension.
constexpr size_t kMaxGroups = 65535;
// Dependent multiply-adds per microsecond for the delay kernel (about 1 GHz, 4-cycle latency).
constexpr uint64_t kDelayIterationsPerMicrosecond = 250;

int dtype_code(DType t) { return static_cast<int>(t); }

bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq; }

// f32 compute unless every value involved is an integer or bool (the CPU twin's rule).
bool binary_in_float(BinaryOp op, DType a, DType b, DType out) {
  if (is_floating(a) || is_floating(b)) return true;
  return !is_comparison(op) && is_floating(out);
}

TLViewDesc describe_view(const View& v) {
  TLViewDesc desc;
  std::memset(&desc, 0, sizeof desc);
  desc.ndim = v.ndim;
  desc.dtype = dtype_code(v.dtype);
  for (int i = 0; i < v.ndim && i < kMaxDims; ++i) {
    desc.shape[i] = v.shape[i];
    desc.strides[i] = v.strides[i];
  }
  return desc;
}

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw KernelError(std::string(op) + ": " + what);
}

void require_plain(const View& v, const char* op, const char* role) {
  if (is_quantized(v.dtype)) {
    fail(op, std::string(role) + " has quantized dtype " + dtype_name(v.dtype) +
                 "; the Metal kernel needs a plain dtype");
  }
}

void require_contiguous(const View& v, const char* op, const char* role) {
  if (!v.is_contiguous()) fail(op, std::string(role) + " must be contiguous");
}

void require_dtype(const View& v, DType want, const char* op, const char* role) {
  if (v.dtype != want) {
    fail(op, std::string(role) + " must be " + dtype_name(want) + ", got " + dtype_name(v.dtype));
  }
}

void require_ndim(const View& v, int ndim, const char* op, const char* role) {
  if (v.ndim != ndim) {
    fail(op, std::string(role) + " must be " + std::to_string(ndim) + "-D, got " +
                 std::to_string(v.ndim) + "-D");
  }
}

size_t groups_for(int64_t items, size_t per_group) {
  int64_t groups = (items + static_cast<int64_t>(per_group) - 1) / static_cast<int64_t>(per_group);
  return static_cast<size_t>(std::max<int64_t>(1, std::min<int64_t>(groups, kMaxGroups)));
}

size_t clamp_groups(int64_t groups) {
  return static_cast<size_t>(std::max<int64_t>(1, std::min<int64_t>(groups, kMaxGroups)));
}

}  // namespace

MetalKernels::~MetalKernels() {
  @autoreleasepool {
    encoder_ = nil;
    error_record_ = nil;
  }
}

void MetalKernels::begin_command_buffer(id<MTLComputeCommandEncoder> encoder) {
  @autoreleasepool {
    encoder_ = encoder;
    error_record_ = nil;
  }
  encoding_ = true;
}

void MetalKernels::end_command_buffer(__strong id<MTLBuffer>* error_record) {
  @autoreleasepool {
    *error_record = error_record_;
    error_record_ = nil;
    encoder_ = nil;
  }
  encoding_ = false;
}

MetalKernels::Binding MetalKernels::bind(const View& view, int index, const char* op,
                                         bool optional) const {
  Binding binding;
  binding.index = index;
  if (view.data == nullptr) {
    if (!optional) fail(op, "an operand has no data");
    binding.slice.buffer = device_.handles().placeholder;
    binding.slice.offset = 0;
    return binding;
  }
  if (!device_.find_buffer(view.data, &binding.slice)) {
    fail(op, "an operand is not in Metal device memory");
  }
  return binding;
}

PipelineRef MetalKernels::pipeline(const char* name, size_t threads_needed) const {
  if (!encoding_) {
    throw KernelError(std::string("metal: kernel ") + name + " called outside a command buffer");
  }
  PipelineRef ref;
  std::string error;
  if (!device_.pipeline(name, &ref, &error)) throw KernelError(error);
  if (ref.max_threads < threads_needed) {
    throw KernelError(std::string("metal: kernel ") + name + " allows only " +
                      std::to_string(ref.max_threads) + " threads per threadgroup, needs " +
                      std::to_string(threads_needed));
  }
  return ref;
}

MetalKernels::Grid MetalKernels::grid_1d(int64_t n, size_t max_threads) {
  size_t threads = std::min<size_t>(256, max_threads);
  Grid grid;
  grid.threads = MTLSizeMake(threads, 1, 1);
  grid.groups = MTLSizeMake(groups_for(n, threads), 1, 1);
  return grid;
}

void MetalKernels::encode(const PipelineRef& pipeline, const void* params, size_t params_bytes,
                          const Binding* bindings, int binding_count, const Grid& grid) {
  @autoreleasepool {
    [encoder_ setComputePipelineState:pipeline.state];
    [encoder_ setBytes:params length:params_bytes atIndex:0];
    for (int i = 0; i < binding_count; ++i) {
      [encoder_ setBuffer:bindings[i].slice.buffer
                   offset:bindings[i].slice.offset
                  atIndex:static_cast<NSUInteger>(bindings[i].index)];
    }
    [encoder_ dispatchThreadgroups:grid.groups threadsPerThreadgroup:grid.threads];
  }
}

BufferSlice MetalKernels::error_record() {
  bool ok = true;
  BufferSlice slice;
  @autoreleasepool {
    if (error_record_ == nil) {
      ok = device_.new_scratch_buffer(sizeof(TLErrorRecord), &error_record_);
    }
    slice.buffer = error_record_;
    slice.offset = 0;
  }
  if (!ok) throw KernelError("metal: out of device memory for an error record");
  return slice;
}

// ---- elementwise -----------------------------------------------------------------------------

void MetalKernels::binary(BinaryOp op, const View& a, const View& b, const View& out) {
  require_plain(a, "binary", "a");
  require_plain(b, "binary", "b");
  require_plain(out, "binary", "out");
  require_contiguous(out, "binary", "out");
  TLElementwiseParams p;
  std::memset(&p, 0, sizeof p);
  p.a = describe_view(a);
  p.b = describe_view(b);
  p.n = out.numel();
  p.op = static_cast<int>(op);
  p.out_dtype = dtype_code(out.dtype);
  p.float_compute = binary_in_float(op, a.dtype, b.dtype, out.dtype) ? 1 : 0;
  if (p.n == 0) return;
  Binding bindings[] = {bind(a, 1, "binary"), bind(b, 2, "binary"), bind(out, 3, "binary")};
  PipelineRef pso = pipeline("tl_binary", 1);
  encode(pso, &p, sizeof p, bindings, 3, grid_1d(p.n, pso.max_threads));
}

void MetalKernels::binary_scalar(BinaryOp op, const View& a, double s, bool scalar_first,
                                 const View& out) {
  require_plain(a, "binary_scalar", "a");
  require_plain(out, "binary_scalar", "out");
  require_contiguous(out, "binary_scalar", "out");
  TLElementwiseParams p;
  std::memset(&p, 0, sizeof p);
  p.a = describe_view(a);
  p.n = out.numel();
  p.op = static_cast<int>(op);
  p.out_dtype = dtype_code(out.dtype);
  p.scalar_f = static_cast<float>(s);
  p.scalar_i = std::isfinite(s) ? static_cast<int64_t>(s) : 0;
  p.scalar_first = scalar_first ? 1 : 0;
  // As on the CPU: an integral scalar (|s| < 9e18) counts as i64, any other as f32.
  DType scalar_dtype =
      (std::floor(s) == s && std::fabs(s) < 9e18) ? DType::I64 : DType::F32;
  p.float_compute = binary_in_float(op, a.dtype, scalar_dtype, out.dtype) ? 1 : 0;
  if (p.n == 0) return;
  Binding bindings[] = {bind(a, 1, "binary_scalar"), bind(out, 3, "binary_scalar")};
  PipelineRef pso = pipeline("tl_binary_scalar", 1);
  encode(pso, &p, sizeof p, bindings, 2, grid_1d(p.n, pso.max_threads));
}

void MetalKernels::unary(UnaryOp op, const View& a, const View& out) {
  require_plain(a, "unary", "a");
  require_plain(out, "unary", "out");
  require_contiguous(out, "unary", "out");
  TLElementwiseParams p;
  std::memset(&p, 0, sizeof p);
  p.a = describe_view(a);
  p.n = out.numel();
  p.op = static_cast<int>(op);
  p.out_dtype = dtype_code(out.dtype);
  bool integer_op = op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu ||
                    op == UnaryOp::Square || op == UnaryOp::Floor || op == UnaryOp::Ceil ||
                    op == UnaryOp::Round || op == UnaryOp::LogicalNot || op == UnaryOp::Step;
  p.float_compute = (!is_floating(a.dtype) && !is_floating(out.dtype) && integer_op) ? 0 : 1;
  if (p.n == 0) return;
  Binding bindings[] = {bind(a, 1, "unary"), bind(out, 3, "unary")};
  PipelineRef pso = pipeline("tl_unary", 1);
  encode(pso, &p, sizeof p, bindings, 2, grid_1d(p.n, pso.max_threads));
}

void MetalKernels::copy(const View& src, const View& dst) {
  require_plain(src, "copy", "src");
  require_plain(dst, "copy", "dst");
  TLCopyParams p;
  std::memset(&p, 0, sizeof p);
  p.src = describe_view(src);
  p.dst = describe_view(dst);
  p.n = dst.numel();
  p.integer_compute = (!is_floating(src.dtype) && !is_floating(dst.dtype)) ? 1 : 0;
  if (p.n == 0) return;
  Binding bindings[] = {bind(src, 1, "copy"), bind(dst, 2, "copy")};
  PipelineRef pso = pipeline("tl_copy", 1);
  encode(pso, &p, sizeof p, bindings, 2, grid_1d(p.n, pso.max_threads));
}

void MetalKernels::fill(const View& out, double value) {
  require_plain(out, "fill", "out");
  TLCopyParams p;
  std::memset(&p, 0, sizeof p);
  p.dst = describe_view(out);
  p.n = out.numel();
  p.value_f = static_cast<float>(value);
  p.value_i = saturate_to_int(value, out.dtype);
  p.integer_compute = is_floating(out.dtype) ? 0 : 1;
  if (p.n == 0) return;
  Binding bindings[] = {bind(out, 2, "fill")};
  PipelineRef pso = pipeline("tl_fill", 1);
  encode(pso, &p, sizeof p, bindings, 1, grid_1d(p.n, pso.max_threads));
}

void MetalKernels::arange(const View& out, double start, double step) {
  require_plain(out, "arange", "out");
  require_contiguous(out, "arange", "out");
  TLCopyParams p;
  std::memset(&p, 0, sizeof p);
  p.dst = describe_view(out);
  p.n = out.numel();
  p.value_f = static_cast<float>(start);
  p.step_f = static_cast<float>(step);
  bool integral = std::isfinite(start) && std::isfinite(step) && std::floor(start) == start &&
                  std::floor(step) == step;
  p.integer_compute = is_floating(out.dtype) ? 0 : 1;
  p.exact_integers = integral ? 1 : 0;
  p.value_i = integral ? static_cast<int64_t>(start) : 0;
  p.step_i = integral ? static_cast<int64_t>(step) : 0;
  if (p.n == 0) return;
  Binding bindings[] = {bind(out, 2, "arange")};
  PipelineRef pso = pipeline("tl_arange", 1);
  encode(pso, &p, sizeof p, bindings, 1, grid_1d(p.n, pso.max_threads));
}

void MetalKernels::where(const View& cond, const View& a, const View& b, const View& out) {
  require_plain(cond, "where", "cond");
  require_plain(a, "where", "a");
  require_plain(b, "where", "b");
  require_plain(out, "where", "out");
  require_contiguous(out, "where", "out");
  TLElementwiseParams p;
  std::memset(&p, 0, sizeof p);
  p.a = describe_view(a);
  p.b = describe_view(b);
  p.c = describe_view(cond);
  p.n = out.numel();
  p.out_dtype = dtype_code(out.dtype);
  p.float_compute =
      (is_floating(out.dtype) || is_floating(a.dtype) || is_floating(b.dtype)) ? 1 : 0;
  if (p.n == 0) return;
  Binding bindings[] = {bind(a, 1, "where"), bind(b, 2, "where"), bind(out, 3, "where"),
                        bind(cond, 4, "where")};
  PipelineRef pso = pipeline("tl_where", 1);
  encode(pso, &p, sizeof p, bindings, 4, grid_1d(p.n, pso.max_threads));
}

// ---- reductions ------------------------------------------------------------------------------

void MetalKernels::reduce(ReduceOp op, const View& in, int64_t outer, int64_t n, int64_t inner,
                          const View& out) {
  require_plain(in, "reduce", "in");
  require_plain(out, "reduce", "out");
  require_contiguous(in, "reduce", "in");
  require_contiguous(out, "reduce", "out");
  bool is_arg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  if ((is_arg || op == ReduceOp::Max || op == ReduceOp::Min) && n == 0) {
    fail("reduce", "cannot take max/min/argmax/argmin of an empty axis");
  }
  if (outer * inner == 0) return;
  TLReduceParams p;
  std::memset(&p, 0, sizeof p);
  p.outer = outer;
  p.n = n;
  p.inner = inner;
  p.op = static_cast<int>(op);
  p.in_dtype = dtype_code(in.dtype);
  p.out_dtype = dtype_code(out.dtype);
  p.integer_compute = (!is_floating(in.dtype) && (is_arg || !is_floating(out.dtype))) ? 1 : 0;
  Binding bindings[] = {bind(in, 1, "reduce"), bind(out, 2, "reduce")};
  if (inner > 1) {  // one thread per output column (coalesced along inner)
    PipelineRef pso = pipeline("tl_reduce_columns", 1);
    encode(pso, &p, sizeof p, bindings, 2, grid_1d(outer * inner, pso.max_threads));
    return;
  }
  PipelineRef pso = pipeline("tl_reduce", TL_REDUCE_THREADS);
  Grid grid;
  grid.threads = MTLSizeMake(TL_REDUCE_THREADS, 1, 1);
  grid.groups = MTLSizeMake(clamp_groups(outer * inner), 1, 1);
  encode(pso, &p, sizeof p, bindings, 2, grid);
}

void MetalKernels::softmax(const View& in, int64_t outer, int64_t n, int64_t inner,
                           const View& out) {
  require_plain(in, "softmax", "in");
  require_plain(out, "softmax", "out");
  require_contiguous(in, "softmax", "in");
  require_contiguous(out, "softmax", "out");
  if (outer * inner * n == 0) return;
  TLReduceParams p;
  std::memset(&p, 0, sizeof p);
  p.outer = outer;
  p.n = n;
  p.inner = inner;
  p.in_dtype = dtype_code(in.dtype);
  p.out_dtype = dtype_code(out.dtype);
  Binding bindings[] = {bind(in, 1, "softmax"), bind(out, 2, "softmax")};
  if (inner > 1) {  // one thread per column
    PipelineRef pso = pipeline("tl_softmax_columns", 1);
    encode(pso, &p, sizeof p, bindings, 2, grid_1d(outer * inner, pso.max_threads));
    return;
  }
  PipelineRef pso = pipeline("tl_softmax", TL_REDUCE_THREADS);
  Grid grid;
  grid.threads = MTLSizeMake(TL_REDUCE_THREADS, 1, 1);
  grid.groups = MTLSizeMake(clamp_groups(outer * inner), 1, 1);
  encode(pso, &p, sizeof p, bindings, 2, grid);
}

// ---- matrix products -------------------------------------------------------------------------

void MetalKernels::matmul(const View& a, const View& b, const View& out) {
  require_ndim(a, 3, "matmul", "a");
  require_ndim(b, 3, "matmul", "b");
  require_ndim(out, 3, "matmul", "out");
  require_plain(a, "matmul", "a");
  require_plain(b, "matmul", "b");
  require_contiguous(out, "matmul", "out");
  if (out.dtype != DType::F32 && out.dtype != DType::F16) {
    fail("matmul", std::string("out must be f32 or f16, got ") + dtype_name(out.dtype));
  }
  TLMatmulParams p;
  std::memset(&p, 0, sizeof p);
  p.a = describe_view(a);
  p.b = describe_view(b);
  p.batch = out.shape[0];
  p.m = out.shape[1];
  p.n = out.shape[2];
  p.k = a.shape[2];
  p.out_dtype = dtype_code(out.dtype);
  if (p.batch * p.m * p.n == 0) return;
  if (p.batch > static_cast<int64_t>(kMaxGroups) || (p.m + TL_TILE - 1) / TL_TILE > static_cast<int64_t>(UINT32_MAX) ||
      (p.n + TL_TILE - 1) / TL_TILE > static_cast<int64_t>(UINT32_MAX)) {
    fail("matmul", "shape too large for one Metal dispatch");
  }
  Binding bindings[] = {bind(a, 1, "matmul"), bind(b, 2, "matmul"), bind(out, 3, "matmul")};
  PipelineRef pso = pipeline("tl_matmul", TL_TILE * TL_TILE);
  Grid grid;
  grid.threads = MTLSizeMake(TL_TILE, TL_TILE, 1);
  grid.groups = MTLSizeMake(static_cast<NSUInteger>((p.n + TL_TILE - 1) / TL_TILE),
                            static_cast<NSUInteger>((p.m + TL_TILE - 1) / TL_TILE),
                            static_cast<NSUInteger>(p.batch));
  encode(pso, &p, sizeof p, bindings, 3, grid);
}

void MetalKernels::linear(const View& x, const View& w, const View& out) {
  require_ndim(x, 2, "linear", "x");
  require_ndim(w, 2, "linear", "w");
  require_dtype(x, DType::F32, "linear", "x");
  require_dtype(out, DType::F32, "linear", "out");
  require_contiguous(x, "linear", "x");
  require_contiguous(out, "linear", "out");
  if (!is_quantized(w.dtype)) require_contiguous(w, "linear", "w");
  TLRowsParams p;
  std::memset(&p, 0, sizeof p);
  p.m = x.shape[0];
  p.k = x.shape[1];
  p.n = w.shape[0];
  if (w.shape[1] != p.k) fail("linear", "x and w disagree on K");
  if (p.k % block_elems(w.dtype) != 0) {
    fail("linear", "K = " + std::to_string(p.k) + " is not a multiple of the " +
                       dtype_name(w.dtype) + " block size");
  }
  p.row_bytes = static_cast<int64_t>(row_bytes(w.dtype, p.k));
  p.w_dtype = dtype_code(w.dtype);
  p.out_dtype = dtype_code(out.dtype);
  if (p.m * p.n == 0) return;
  Binding bindings[] = {bind(x, 1, "linear"), bind(w, 2, "linear"), bind(out, 3, "linear")};
  PipelineRef pso = pipeline("tl_linear", TL_LINEAR_THREADS);
  Grid grid;
  grid.threads = MTLSizeMake(TL_LINEAR_THREADS, 1, 1);
  grid.groups = MTLSizeMake(clamp_groups(p.n), clamp_groups(p.m), 1);
  encode(pso, &p, sizeof p, bindings, 3, grid);
}

void MetalKernels::expert_linear(const View& x, const View& w, const View& ids, int64_t experts,
                                 const View& out) {
  require_ndim(x, 3, "expert_linear", "x");
  require_ndim(w, 2, "expert_linear", "w");
  require_ndim(ids, 2, "expert_linear", "ids");
  require_ndim(out, 3, "expert_linear", "out");
  require_dtype(x, DType::F32, "expert_linear", "x");
  require_dtype(out, DType::F32, "expert_linear", "out");
  require_contiguous(x, "expert_linear", "x");
  require_contiguous(ids, "expert_linear", "ids");
  require_contiguous(out, "expert_linear", "out");
  if (!is_quantized(w.dtype)) require_contiguous(w, "expert_linear", "w");
  if (ids.dtype != DType::I32 && ids.dtype != DType::I64) {
    fail("expert_linear", std::string("ids must be i32 or i64, got ") + dtype_name(ids.dtype));
  }
  if (experts <= 0 || w.shape[0] % experts != 0) fail("expert_linear", "w's rows are not experts * N");
  TLExpertParams p;
  std::memset(&p, 0, sizeof p);
  p.topk = ids.shape[1];
  p.pairs = ids.shape[0] * p.topk;
  p.k = x.shape[2];
  p.x_rows = x.shape[1];
  p.experts = experts;
  p.n = w.shape[0] / experts;
  if (w.shape[1] != p.k) fail("expert_linear", "x and w disagree on K");
  if (p.k % block_elems(w.dtype) != 0) {
    fail("expert_linear", "K = " + std::to_string(p.k) + " is not a multiple of the " +
                              dtype_name(w.dtype) + " block size");
  }
  p.row_bytes = static_cast<int64_t>(row_bytes(w.dtype, p.k));
  p.w_dtype = dtype_code(w.dtype);
  p.ids_dtype = dtype_code(ids.dtype);
  if (p.pairs * p.n == 0) return;
  Binding bindings[] = {bind(x, 1, "expert_linear"), bind(w, 2, "expert_linear"),
                        bind(ids, 3, "expert_linear"), bind(out, 4, "expert_linear"), Binding{}};
  bindings[4].slice = error_record();
  bindings[4].index = 5;
  PipelineRef pso = pipeline("tl_expert_linear", TL_LINEAR_THREADS);
  Grid grid;
  grid.threads = MTLSizeMake(TL_LINEAR_THREADS, 1, 1);
  grid.groups = MTLSizeMake(clamp_groups(p.n), clamp_groups(p.pairs), 1);
  encode(pso, &p, sizeof p, bindings, 5, grid);
}

void MetalKernels::gather_rows(const View& table, const View& ids, const View& out) {
  require_ndim(table, 2, "gather_rows", "table");
  require_ndim(out, 2, "gather_rows", "out");
  require_contiguous(out, "gather_rows", "out");
  require_contiguous(ids, "gather_rows", "ids");
  if (!is_quantized(table.dtype)) require_contiguous(table, "gather_rows", "table");
  if (ids.dtype != DType::I32 && ids.dtype != DType::I64) {
    fail("gather_rows", std::string("ids must be i32 or i64, got ") + dtype_name(ids.dtype));
  }
  require_plain(out, "gather_rows", "out");
  TLRowsParams p;
  std::memset(&p, 0, sizeof p);
  p.m = ids.numel();
  p.n = table.shape[0];
  p.k = table.shape[1];
  p.row_bytes = static_cast<int64_t>(row_bytes(table.dtype, p.k));
  p.w_dtype = dtype_code(table.dtype);
  p.ids_dtype = dtype_code(ids.dtype);
  p.out_dtype = dtype_code(out.dtype);
  if (p.m * p.k == 0) return;
  Binding bindings[] = {bind(table, 1, "gather_rows"), bind(ids, 2, "gather_rows"),
                        bind(out, 3, "gather_rows"), Binding{}};
  bindings[3].slice = error_record();
  bindings[3].index = 4;
  PipelineRef pso = pipeline("tl_gather_rows", 64);
  Grid grid;
  grid.threads = MTLSizeMake(64, 1, 1);
  grid.groups = MTLSizeMake(groups_for(p.k, 64), clamp_groups(p.m), 1);
  encode(pso, &p, sizeof p, bindings, 4, grid);
}

// ---- training: scatter_add_rows, optimizer_update ----------------------------------------------

void MetalKernels::scatter_add_rows(const View& ids, const View& src, const View& out) {
  require_ndim(src, 2, "scatter_add_rows", "src");
  require_ndim(out, 2, "scatter_add_rows", "out");
  require_contiguous(ids, "scatter_add_rows", "ids");
  require_contiguous(src, "scatter_add_rows", "src");
  require_contiguous(out, "scatter_add_rows", "out");
  require_dtype(src, DType::F32, "scatter_add_rows", "src");
  require_dtype(out, DType::F32, "scatter_add_rows", "out");
  if (ids.dtype != DType::I32 && ids.dtype != DType::I64) {
    fail("scatter_add_rows", std::string("ids must be i32 or i64, got ") + dtype_name(ids.dtype));
  }
  if (src.shape[1] != out.shape[1] || src.shape[0] != ids.numel()) {
    fail("scatter_add_rows", "expected out [V, D], src [n, D] and ids [n]");
  }
  TLRowsParams p;
  std::memset(&p, 0, sizeof p);
  p.m = ids.numel();
  p.n = out.shape[0];
  p.k = out.shape[1];
  p.ids_dtype = dtype_code(ids.dtype);
  p.w_dtype = dtype_code(src.dtype);
  p.out_dtype = dtype_code(out.dtype);
  if (p.m * p.k == 0) return;
  Binding bindings[] = {bind(ids, 1, "scatter_add_rows"), bind(src, 2, "scatter_add_rows"),
                        bind(out, 3, "scatter_add_rows"), Binding{}};
  bindings[3].slice = error_record();
  bindings[3].index = 4;
  // One thread per output column, each walking the ids in order: deterministic, no atomics.
  PipelineRef pso = pipeline("tl_scatter_add_rows", 1);
  encode(pso, &p, sizeof p, bindings, 4, grid_1d(p.k, pso.max_threads));
}

void MetalKernels::optimizer_update(const OptimizerStep& s, const View& param, const View& grad,
                                    const View& m, const View& v) {
  const View* operands[] = {&param, &grad, &m, &v};
  for (const View* t : operands) {
    if (t->data == nullptr) continue;
    require_dtype(*t, DType::F32, "optimizer_update", "every operand");
    require_contiguous(*t, "optimizer_update", "every operand");
    if (t->numel() != param.numel()) fail("optimizer_update", "operands differ in size");
  }
  const bool adam = s.kind == OptimizerKind::Adam;
  if (adam && (m.data == nullptr || v.data == nullptr)) fail("optimizer_update", "Adam needs m and v");
  TLOptimizerParams p;
  std::memset(&p, 0, sizeof p);
  p.n = param.numel();
  p.step = s.step;
  p.decay = s.decay;
  p.weight_decay = s.weight_decay;
  p.beta1 = s.beta1;
  p.one_minus_beta1 = s.one_minus_beta1;
  p.beta2 = s.beta2;
  p.one_minus_beta2 = s.one_minus_beta2;
  p.bias2 = s.bias2;
  p.eps = s.eps;
  p.momentum = s.momentum;
  p.kind = adam ? TL_OPT_ADAM : TL_OPT_SGD;
  p.decoupled = s.decoupled ? 1 : 0;
  p.nesterov = s.nesterov ? 1 : 0;
  p.has_m = m.data != nullptr ? 1 : 0;
  if (p.n == 0) return;
  Binding bindings[] = {bind(param, 1, "optimizer_update"), bind(grad, 2, "optimizer_update"),
                        bind(m, 3, "optimizer_update", true), bind(v, 4, "optimizer_update", true)};
  PipelineRef pso = pipeline("tl_optimizer_update", 1);
  encode(pso, &p, sizeof p, bindings, 4, grid_1d(p.n, pso.max_threads));
}

// ---- normalisation, rope, attention ----------------------------------------------------------

void MetalKernels::rms_norm(const View& x, const View& w, float eps, const View& out) {
  require_plain(x, "rms_norm", "x");
  require_plain(out, "rms_norm", "out");
  require_contiguous(x, "rms_norm", "x");
  require_contiguous(out, "rms_norm", "out");
  if (x.ndim < 1) fail("rms_norm", "x must have at least one dimension");
  TLNormParams p;
  std::memset(&p, 0, sizeof p);
  p.d = x.shape[x.ndim - 1];
  p.rows = p.d > 0 ? x.numel() / p.d : 0;
  p.eps = eps;
  p.x_dtype = dtype_code(x.dtype);
  p.out_dtype = dtype_code(out.dtype);
  p.w_dtype = -1;
  p.b_dtype = -1;
  if (w.data != nullptr) {
    require_plain(w, "rms_norm", "w");
    require_contiguous(w, "rms_norm", "w");
    p.w_dtype = dtype_code(w.dtype);
  }
  if (p.rows * p.d == 0) return;
  Binding bindings[] = {bind(x, 1, "rms_norm"), bind(w, 2, "rms_norm", true),
                        bind(out, 3, "rms_norm")};
  PipelineRef pso = pipeline("tl_rms_norm", TL_NORM_THREADS);
  Grid grid;
  grid.threads = MTLSizeMake(TL_NORM_THREADS, 1, 1);
  grid.groups = MTLSizeMake(clamp_groups(p.rows), 1, 1);
  encode(pso, &p, sizeof p, bindings, 3, grid);
}

void MetalKernels::layer_norm(const View& x, const View& w, const View& b, float eps,
                              const View& out) {
  require_plain(x, "layer_norm", "x");
  require_plain(out, "layer_norm", "out");
  require_contiguous(x, "layer_norm", "x");
  require_contiguous(out, "layer_norm", "out");
  if (x.ndim < 1) fail("layer_norm", "x must have at least one dimension");
  TLNormParams p;
  std::memset(&p, 0, sizeof p);
  p.d = x.shape[x.ndim - 1];
  p.rows = p.d > 0 ? x.numel() / p.d : 0;
  p.eps = eps;
  p.x_dtype = dtype_code(x.dtype);
  p.out_dtype = dtype_code(out.dtype);
  p.w_dtype = -1;
  p.b_dtype = -1;
  if (w.data != nullptr) {
    require_plain(w, "layer_norm", "w");
    require_contiguous(w, "layer_norm", "w");
    p.w_dtype = dtype_code(w.dtype);
  }
  if (b.data != nullptr) {
    require_plain(b, "layer_norm", "b");
    require_contiguous(b, "layer_norm", "b");
    p.b_dtype = dtype_code(b.dtype);
  }
  if (p.rows * p.d == 0) return;
  Binding bindings[] = {bind(x, 1, "layer_norm"), bind(w, 2, "layer_norm", true),
                        bind(out, 3, "layer_norm"), bind(b, 4, "layer_norm", true)};
  PipelineRef pso = pipeline("tl_layer_norm", TL_NORM_THREADS);
  Grid grid;
  grid.threads = MTLSizeMake(TL_NORM_THREADS, 1, 1);
  grid.groups = MTLSizeMake(clamp_groups(p.rows), 1, 1);
  encode(pso, &p, sizeof p, bindings, 4, grid);
}

void MetalKernels::rope(const View& x, int64_t pos_offset, float base, bool neox,
                        const View& out) {
  require_ndim(x, 4, "rope", "x");
  require_plain(x, "rope", "x");
  require_plain(out, "rope", "out");
  require_contiguous(x, "rope", "x");
  require_contiguous(out, "rope", "out");
  TLRopeParams p;
  std::memset(&p, 0, sizeof p);
  p.outer = x.shape[0];
  p.seq = x.shape[1];
  p.heads = x.shape[2];
  p.d = x.shape[3];
  if (p.d % 2 != 0) fail("rope", "head size " + std::to_string(p.d) + " is odd");
  if (p.d / 2 > TL_ROPE_MAX_HALF) {
    fail("rope", "head size " + std::to_string(p.d) + " exceeds the Metal limit of " +
                     std::to_string(2 * TL_ROPE_MAX_HALF));
  }
  p.pos_offset = pos_offset;
  p.neox = neox ? 1 : 0;
  for (int64_t i = 0; i < p.d / 2; ++i) {  // in double, as the CPU twin
    double freq = std::pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / static_cast<double>(p.d));
    p.freq_hi[i] = static_cast<float>(freq);
    p.freq_lo[i] = static_cast<float>(freq - static_cast<double>(p.freq_hi[i]));
  }
  p.x_dtype = dtype_code(x.dtype);
  p.out_dtype = dtype_code(out.dtype);
  int64_t pairs = x.numel() / 2;
  if (pairs == 0) return;
  Binding bindings[] = {bind(x, 1, "rope"), bind(out, 3, "rope")};
  PipelineRef pso = pipeline("tl_rope", 1);
  encode(pso, &p, sizeof p, bindings, 2, grid_1d(pairs, pso.max_threads));
}

void MetalKernels::causal_mask(int64_t offset, const View& out) {
  require_ndim(out, 2, "causal_mask", "out");
  require_dtype(out, DType::F32, "causal_mask", "out");
  require_contiguous(out, "causal_mask", "out");
  TLAttentionParams p;
  std::memset(&p, 0, sizeof p);
  p.sq = out.shape[0];
  p.mask_cols = out.shape[1];
  p.q_pos_offset = offset;
  if (p.sq * p.mask_cols == 0) return;
  Binding bindings[] = {bind(out, 1, "causal_mask")};
  PipelineRef pso = pipeline("tl_causal_mask", 1);
  encode(pso, &p, sizeof p, bindings, 1, grid_1d(p.sq * p.mask_cols, pso.max_threads));
}

void MetalKernels::attention(const View& q, const View& k, const View& v, const View& mask,
                             float scale, bool causal, int64_t q_pos_offset, const View& out,
                             float softcap) {
  require_ndim(q, 3, "attention", "q");
  require_ndim(k, 3, "attention", "k");
  require_ndim(v, 3, "attention", "v");
  require_plain(q, "attention", "q");
  require_plain(k, "attention", "k");
  require_plain(v, "attention", "v");
  require_dtype(out, DType::F32, "attention", "out");
  require_contiguous(out, "attention", "out");
  TLAttentionParams p;
  std::memset(&p, 0, sizeof p);
  p.q = describe_view(q);
  p.k = describe_view(k);
  p.v = describe_view(v);
  p.sq = q.shape[0];
  p.hq = q.shape[1];
  p.d = q.shape[2];
  p.sk = k.shape[0];
  p.hkv = k.shape[1];
  p.scale = scale;
  p.softcap = softcap;
  p.causal = causal ? 1 : 0;
  p.q_pos_offset = q_pos_offset;
  if (p.hkv <= 0 || p.hq % p.hkv != 0) {
    fail("attention", "query heads (" + std::to_string(p.hq) +
                          ") must be a multiple of key/value heads (" + std::to_string(p.hkv) + ")");
  }
  if (p.d > TL_ATTN_MAX_D) {
    fail("attention", "head size " + std::to_string(p.d) + " exceeds the Metal limit of " +
                          std::to_string(TL_ATTN_MAX_D));
  }
  if (mask.data != nullptr) {
    require_ndim(mask, 2, "attention", "mask");
    require_dtype(mask, DType::F32, "attention", "mask");
    p.mask = describe_view(mask);
    p.has_mask = 1;
  }
  if (p.sq * p.hq * p.d == 0) return;
  if (p.sq > static_cast<int64_t>(UINT32_MAX) || p.hq > static_cast<int64_t>(UINT32_MAX)) {
    fail("attention", "shape too large for one Metal dispatch");
  }
  Binding bindings[] = {bind(q, 1, "attention"), bind(k, 2, "attention"),
                        bind(v, 3, "attention"), bind(mask, 4, "attention", true),
                        bind(out, 5, "attention")};
  PipelineRef pso = pipeline("tl_attention", TL_ATTN_THREADS);
  Grid grid;
  grid.threads = MTLSizeMake(TL_ATTN_THREADS, 1, 1);
  grid.groups = MTLSizeMake(static_cast<NSUInteger>(p.hq), static_cast<NSUInteger>(p.sq), 1);
  encode(pso, &p, sizeof p, bindings, 5, grid);
}

// ---- fused kernels ----------------------------------------------------------------------------

void MetalKernels::fused_linear(const View& x, const View& w, LinearPrologue prologue,
                                const View& norm_w, float eps, const View& addend,
                                const View& scratch, const View& out) {
  require_ndim(x, 2, "fused_linear", "x");
  require_ndim(w, 2, "fused_linear", "w");
  require_dtype(x, DType::F32, "fused_linear", "x");
  require_dtype(out, DType::F32, "fused_linear", "out");
  require_contiguous(x, "fused_linear", "x");
  require_contiguous(out, "fused_linear", "out");
  if (!is_quantized(w.dtype)) require_contiguous(w, "fused_linear", "w");
  TLFusedLinearParams p;
  std::memset(&p, 0, sizeof p);
  p.m = x.shape[0];
  p.k = w.shape[1];
  p.n = w.shape[0];
  const bool swiglu_rows = prologue == LinearPrologue::SwiGLU;
  if (x.shape[1] != (swiglu_rows ? 2 * p.k : p.k)) fail("fused_linear", "x and w disagree on K");
  if (p.k % block_elems(w.dtype) != 0) {
    fail("fused_linear", "K = " + std::to_string(p.k) + " is not a multiple of the " +
                             dtype_name(w.dtype) + " block size");
  }
  p.row_bytes = static_cast<int64_t>(row_bytes(w.dtype, p.k));
  p.w_dtype = dtype_code(w.dtype);
  p.eps = eps;
  p.prologue = static_cast<int>(prologue);
  p.nw_dtype = -1;
  if (prologue != LinearPrologue::None) {
    require_dtype(scratch, DType::F32, "fused_linear", "scratch");
    require_contiguous(scratch, "fused_linear", "scratch");
  }
  if (prologue == LinearPrologue::RmsNorm && norm_w.data != nullptr) {
    require_plain(norm_w, "fused_linear", "norm_w");
    require_contiguous(norm_w, "fused_linear", "norm_w");
    p.nw_dtype = dtype_code(norm_w.dtype);
  }
  if (addend.data != nullptr) {
    require_ndim(addend, 2, "fused_linear", "addend");
    require_plain(addend, "fused_linear", "addend");
    p.addend = describe_view(addend);
    p.has_addend = 1;
  }
  if (p.m * p.n == 0) return;
  Binding bindings[] = {bind(x, 1, "fused_linear"), bind(w, 2, "fused_linear"),
                        bind(out, 3, "fused_linear"), bind(norm_w, 4, "fused_linear", true),
                        bind(addend, 5, "fused_linear", true),
                        bind(scratch, 6, "fused_linear", true)};
  PipelineRef pso = pipeline("tl_fused_linear", TL_LINEAR_THREADS);
  Grid grid;
  grid.threads = MTLSizeMake(TL_LINEAR_THREADS, 1, 1);
  if (prologue != LinearPrologue::None) {  // the serial encoder runs the products after (R4)
    p.phase = 0;
    grid.groups = MTLSizeMake(clamp_groups(p.m), 1, 1);
    encode(pso, &p, sizeof p, bindings, 6, grid);
  }
  p.phase = 1;
  grid.groups = MTLSizeMake(clamp_groups(p.n), clamp_groups(p.m), 1);
  encode(pso, &p, sizeof p, bindings, 6, grid);
}

void MetalKernels::swiglu(const View& gate, const View& up, const View& out) {
  require_plain(gate, "swiglu", "gate");
  require_plain(up, "swiglu", "up");
  require_dtype(out, DType::F32, "swiglu", "out");
  require_contiguous(out, "swiglu", "out");
  TLElementwiseParams p;
  std::memset(&p, 0, sizeof p);
  p.a = describe_view(gate);
  p.b = describe_view(up);
  p.n = out.numel();
  p.out_dtype = dtype_code(out.dtype);
  p.float_compute = 1;
  if (p.n == 0) return;
  Binding bindings[] = {bind(gate, 1, "swiglu"), bind(up, 2, "swiglu"), bind(out, 3, "swiglu")};
  PipelineRef pso = pipeline("tl_swiglu", 1);
  encode(pso, &p, sizeof p, bindings, 3, grid_1d(p.n, pso.max_threads));
}

void MetalKernels::rope_kv_write(const View& q, const View& k, const View& v, int64_t pos_offset,
                                 float base, bool neox, const View& q_out, const View& k_dst,
                                 const View& v_dst) {
  const View* operands[] = {&q, &k, &v, &k_dst, &v_dst};
  for (const View* t : operands) {
    require_ndim(*t, 3, "rope_kv_write", "an operand");
    require_plain(*t, "rope_kv_write", "an operand");
  }
  require_dtype(q_out, DType::F32, "rope_kv_write", "q_out");
  require_contiguous(q_out, "rope_kv_write", "q_out");
  TLRopeKVParams p;
  std::memset(&p, 0, sizeof p);
  p.q = describe_view(q);
  p.k = describe_view(k);
  p.v = describe_view(v);
  p.k_dst = describe_view(k_dst);
  p.v_dst = describe_view(v_dst);
  p.seq = q.shape[0];
  p.hq = q.shape[1];
  p.d = q.shape[2];
  p.hkv = k.shape[1];
  if (p.d % 2 != 0) fail("rope_kv_write", "head size " + std::to_string(p.d) + " is odd");
  if (p.d / 2 > TL_ROPE_MAX_HALF) {
    fail("rope_kv_write", "head size " + std::to_string(p.d) + " exceeds the Metal limit of " +
                              std::to_string(2 * TL_ROPE_MAX_HALF));
  }
  p.pos_offset = pos_offset;
  p.neox = neox ? 1 : 0;
  for (int64_t i = 0; i < p.d / 2; ++i) {  // in double, as the CPU twin
    double freq = std::pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / static_cast<double>(p.d));
    p.freq_hi[i] = static_cast<float>(freq);
    p.freq_lo[i] = static_cast<float>(freq - static_cast<double>(p.freq_hi[i]));
  }
  int64_t items = p.seq * (p.hq + p.hkv) * (p.d / 2) + p.seq * p.hkv * p.d;
  if (items == 0) return;
  Binding bindings[] = {bind(q, 1, "rope_kv_write"), bind(k, 2, "rope_kv_write"),
                        bind(v, 3, "rope_kv_write"), bind(q_out, 4, "rope_kv_write"),
                        bind(k_dst, 5, "rope_kv_write"), bind(v_dst, 6, "rope_kv_write")};
  PipelineRef pso = pipeline("tl_rope_kv_write", 1);
  encode(pso, &p, sizeof p, bindings, 6, grid_1d(items, pso.max_threads));
}

void MetalKernels::delay(uint32_t us) {
  if (us == 0) return;
  TLDelayParams p;
  p.iterations = static_cast<int64_t>(us) * static_cast<int64_t>(kDelayIterationsPerMicrosecond);
  View none;
  Binding bindings[] = {bind(none, 1, "delay", true)};
  PipelineRef pso = pipeline("tl_delay", 1);
  Grid grid;
  grid.threads = MTLSizeMake(1, 1, 1);
  grid.groups = MTLSizeMake(1, 1, 1);
  encode(pso, &p, sizeof p, bindings, 1, grid);
}

}  // namespace metal
}  // namespace tl
