#pragma once
// The CUDA implementation of the Kernels interface. Every method only validates what the ops
// layer cannot (dtype combinations), then launches on the backend's single stream and returns
// without waiting: kernels of one command buffer run in launch order on that stream (rule R4).
// Errors only visible on the device (an id out of range) are written to the command buffer's
// DeviceErrorSlot, which the backend reads back when the command buffer completes.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <vector>

#include "runtime/kernels.h"

namespace tl {
class Backend;
namespace cuda {

// Replays run as CUDA graphs by this backend so far (0 for another backend): for tests.
uint64_t graph_launches(const Backend& backend);

class Blas;

// Launch choices read from the environment once, when the backend starts (debug_config.h): the
// defaults are the measured best; the other values exist for A/B measurements.
struct CudaTuning {
  bool linear_f16 = true;     // quantized and f16 weights on the tensor cores (TL_CUDA_LINEAR_F16)
  int matvec_prefetch = -1;   // early weight loads: -1 up to 2 MiB of weights, 0 never, 1 always
  bool matvec_pairs = true;   // Q4_K weight groups in pairs
  bool matvec_four = true;    // four columns per lane group on tall weights (one row of x)
  bool rope_device_pow = false;  // RoPE frequencies from the device's pow, not the host's
  bool q8_matvec = false;     // --fast: the 8-bit matrix-vector kernel (TL_CUDA_Q8_MATVEC=1)
  bool attn_rows8 = false;    // decode attention: 8 value rows per round, not 16
  int64_t attn_min_chunk = 128;  // decode attention: keys per split block in a replay graph
  bool attn_gqa = true;       // decode attention: one block per kv head and split, keys shared
  int64_t attn_gqa_chunk = 32;  // ... its keys per split block (at least; a multiple of 32)
  int64_t attn_gqa_splits = 32;  // ... and its splits (at most; up to 64)
  int attn_tile_rows = 0;     // prefill attention's query rows per block: 0 chosen per prompt, or 16, 32, 64
  bool pdl = true;            // programmatic dependent launches (cuda_common.cuh; sm_90+ only)
  bool l2_prefetch = true;    // with pdl: weights (and keys, values) prefetched into L2 before the wait
  int own_gemm = 3;           // prompt-sized f16 products: 0 cuBLAS, 1-3 TL's kernel (TL_CUDA_OWN_GEMM; matmul.cu)
  bool gemm_bk64 = true;      // ... TL's kernel's 64 x 64 blocks in k-steps of 64, not 32 (TL_CUDA_GEMM_BK64)
};


// Written by a kernel that finds bad data; the first writer (code 0 -> nonzero) wins.
struct DeviceErrorSlot {
  int32_t code;    // 0: no error; kErrorIdOutOfRange, kErrorScatterIdOutOfRange or kErrorExpertIdOutOfRange
  int32_t unused;
  int64_t value;   // the offending id
  int64_t limit;   // the exclusive bound it broke
  int64_t position, count, width;  // scatter_add_rows: its index among the ids, their count, D
};

constexpr int32_t kErrorIdOutOfRange = 1;         // gather_rows (embedding)
constexpr int32_t kErrorScatterIdOutOfRange = 2;  // scatter_add_rows
constexpr int32_t kErrorExpertIdOutOfRange = 3;   // expert_linear

// Thrown while a command buffer is being captured into a CUDA graph by a command the graph cannot
// hold (cuBLAS, whose handle is bound to the backend's stream; growing a device scratch, which
// frees and allocates). The backend then runs that command buffer launch by launch.
struct CaptureUnsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Per-replay values of the Dynamic commands of one compiled function's replay graph
// (ReplayPlan, cuda_backend.cu): the kernels that support it (attention, rope, rope_kv_write) read
// their position, key count and view offsets from `device` rather than from their arguments, so
// one captured graph serves every replay. Filled in command order: at capture with the values and
// the pointers baked into the graph, at each later replay with the values only (the commands
// launch nothing then; a pointer becomes its byte offset from the captured one).
struct DynTable {
  static constexpr size_t kMaxValues = 4096;
  std::vector<int64_t> values;                  // this replay's, uploaded before the graph runs
  std::vector<std::vector<const void*>> bases;  // per Dynamic command: its captured pointers
  std::vector<int64_t> keys;                    // per Dynamic command: its captured launch choice
  int64_t* device = nullptr;                    // kMaxValues values, read by the graph's kernels
  size_t command = 0;                           // the Dynamic command being run
};

// A replay whose Dynamic commands no longer match the captured graph (another kernel or other
// pointers than at capture): the backend drops the graph and runs the replay launch by launch.
struct GraphStale : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class CudaKernels final : public Kernels {
 public:
  // `error_slot` returns the device slot of the command buffer being encoded (allocating and
  // zeroing it on first use); only kernels that can report data errors call it.
  CudaKernels(cudaStream_t stream, std::function<DeviceErrorSlot*()> error_slot)
      : stream_(stream), error_slot_(std::move(error_slot)) {}

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
  void softmax(const View& in, int64_t outer, int64_t n, int64_t inner,
               const View& out) override;

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
  Q8Plan q8_plan(DType w, int64_t M, int64_t N, int64_t K) const override;
  void fused_linear_q8_activations(const View& x, const View& w, LinearPrologue prologue, const View& norm_w,
                                   float eps, const View& addend, const View& scratch,
                                   const View& out) override;
  void linear_q8_activations(const View& x, const View& w, const View& out) override;
  void swiglu(const View& gate, const View& up, const View& out) override;
  void rope_kv_write(const View& q, const View& k, const View& v, int64_t pos_offset, float base,
                     bool neox, const View& q_out, const View& k_dst, const View& v_dst) override;

  void delay(uint32_t us) override;

  // Device resources owned by the backend: the attention split scratch (reused in stream order
  // by every attention call) and the multiprocessor count the split size is chosen for.
  // The scratch's first kAttentionCounters words count the finished key splits of each (row,
  // head) task: the last split block of a task merges the others' records, and sets the count
  // back to zero, so it is zero between calls (zeroed here, in stream order, before any kernel).
  void set_device_resources(float* attention_scratch, size_t scratch_floats, int sm_count) {
    attention_scratch_ = attention_scratch;
    attention_scratch_floats_ = scratch_floats;
    attention_counters_ = nullptr;
    if (attention_scratch != nullptr && scratch_floats > 2 * kAttentionCounters &&
        cudaMemsetAsync(attention_scratch, 0, kAttentionCounters * sizeof(unsigned), stream_) ==
            cudaSuccess) {
      attention_counters_ = reinterpret_cast<unsigned*>(attention_scratch);
      attention_scratch_ = attention_scratch + kAttentionCounters;
      attention_scratch_floats_ = scratch_floats - kAttentionCounters;
    }
    sm_count_ = sm_count > 0 ? sm_count : 1;
    attention_gqa_ready_ = prepare_attention_gqa();
  }

  static constexpr size_t kAttentionCounters = 4096;

  // cuBLAS for matrix products with more than a few rows (nullptr or unavailable: TL's own
  // kernels). Owned by the backend, which outlives these kernels' last launch.
  // cuBLAS is started on first use (the backend's factory; nullptr: none), not with the backend: a
  // model's decode and prompt never need it (about 200 MiB of host memory), an f32 product does.
  void set_blas_factory(std::function<Blas*()> factory) {
    blas_factory_ = std::move(factory);
    blas_tried_ = false;
    blas_ = nullptr;
  }
  // Whether gemm_f16_kernel's instructions exist on the device (sm_80+).
  void set_own_gemm_ok(bool ok) { own_gemm_ok_ = ok && prepare_gemm(); }
  void set_tuning(const CudaTuning& tuning) { tuning_ = tuning; }
  ~CudaKernels();

  // Graph capture (launch thread only): between these, launches go to `capture_stream` (a stream
  // being captured, so nothing runs) and capture_guard() throws CaptureUnsupported.
  void begin_capture(cudaStream_t capture_stream) {
    saved_stream_ = stream_;
    stream_ = capture_stream;
    capturing_ = true;
  }
  void end_capture() {
    if (!capturing_) return;
    stream_ = saved_stream_;
    capturing_ = false;
  }

  // Replay graphs (launch thread only). Between begin_dyn and end_dyn, each Dynamic command runs
  // between begin_dynamic_command and end_dynamic_command, which says whether its kernel took
  // its values from the table (false: that kernel does not support it; no graph then).
  // values_only: the kernels store their values and launch nothing.
  void begin_dyn(DynTable* table, bool values_only) {
    dyn_table_ = table;
    dyn_values_only_ = values_only;
    table->values.clear();
    table->command = 0;
    if (!values_only) {
      table->bases.clear();
      table->keys.clear();
    }
  }
  void end_dyn() {
    dyn_table_ = nullptr;
    dyn_active_ = false;
  }
  void begin_dynamic_command() {
    dyn_active_ = true;
    dyn_served_ = false;
  }
  bool end_dynamic_command() {
    dyn_active_ = false;
    return dyn_served_;
  }
  // Copies `values` to `device` in stream order (before the graph that reads them).
  void upload_dyn(const DynTable& table);

 private:
  // A device scratch of at least `bytes` bytes, reused in stream order by every linear that
  // converts its weight rows (and x, for the tensor cores) for cuBLAS; grown (never shrunk) on
  // the launch thread.
  void* weight_scratch(size_t bytes);
  bool linear_large(const View& x, const View& w, const View& out);
  // The started cuBLAS, or nullptr (unavailable, or TL_CUDA_BLAS=0); starts it on the first call
  // (not while a graph is captured: CaptureUnsupported).
  Blas* blas();
  void capture_guard(const char* what) const {
    if (capturing_) throw CaptureUnsupported(what);
  }
  // A kernel's per-replay values. Outside a Dynamic command of a replay graph: {nullptr, true}
  // (launch with the arguments given). Inside one: stores `values`, then the byte offsets of
  // `ptrs` from the captured pointers (0 at capture), and returns where the kernel reads them
  // ({device address, true} at capture; {nullptr, false} for a values-only replay: return
  // without launching).
  struct DynArgs {
    const int64_t* device;
    bool launch;
  };
  // `key` names a launch choice made from the values (a kernel variant): a replay whose key differs
  // from the captured one is stale (GraphStale).
  DynArgs dyn_args(std::initializer_list<int64_t> values, std::initializer_list<const void*> ptrs,
                   int64_t key = 0);

  // attention's decode kernel for grouped-query heads (attention.cu): false, launching nothing,
  // where it does not apply (then attention_kernel runs).
  bool attention_decode_gqa(const View& q, const View& k, const View& v, const View& mask, float scale,
                            bool causal, int64_t q_pos_offset, const View& out, float softcap,
                            const int64_t* dyn);
  // Allows that kernel's shared memory once; false where the device cannot give it.
  static bool prepare_attention_gqa();
  // Allows gemm_f16_kernel's shared memory once; false where the device cannot give it.
  static bool prepare_gemm();

  Blas* blas_ = nullptr;
  std::function<Blas*()> blas_factory_;
  bool blas_tried_ = false;
  bool own_gemm_ok_ = false;
  void* weight_scratch_ = nullptr;
  size_t weight_scratch_bytes_ = 0;
  CudaTuning tuning_;
  cudaStream_t stream_;
  cudaStream_t saved_stream_ = nullptr;
  bool capturing_ = false;
  DynTable* dyn_table_ = nullptr;
  bool dyn_values_only_ = false, dyn_active_ = false, dyn_served_ = false;
  std::function<DeviceErrorSlot*()> error_slot_;
  float* attention_scratch_ = nullptr;
  size_t attention_scratch_floats_ = 0;
  unsigned* attention_counters_ = nullptr;
  bool attention_gqa_ready_ = false;
  int64_t sm_count_ = 1;
};

}  // namespace cuda
}  // namespace tl
