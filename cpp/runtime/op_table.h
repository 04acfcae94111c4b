#pragma once
// The op table: every function of the module tensorlogic._core is one row here, and each fact
// about an op that more than one place needs lives in its row, nowhere else. From these lists come
// the kernels' op enums (kernels.h), the ops layer's op names (ops_elementwise.cpp), the
// bindings' module functions and Tensor operators for the enum ops (bindings/ops.cpp, tensor.cpp),
// `_core.kernel_ops()`, and `_core.op_table()`, which the Python side reads for the host-effect
// builtins (builtins/registry.py).
// tests/runtime/test_runtime_op_table.py checks that every function the module exposes has a row, that
// each row is classified, and that the Python side and docs/core-api.md agree with it.
//
// Invariants: the enum lists keep their order (the Metal shaders and the CUDA kernels switch on the
// numeric values); a name appears once, except the variants of one op bound under one name (gelu).
// Adding an op: docs/op-table.md.
#include <cstdint>

namespace tl {

// Flags of a row (combine with |). What an op does with a gradient is the autograd's table
// (python/tensorlogic/builtins/autograd), not a runtime fact; the tests check both tables name the
// same ops.
constexpr unsigned kOpHostEffect = 1u << 0;  // acts outside device tensors: waits, reads or changes
                                             // the runtime's host-side state (a compiled function
                                             // calling it is not recorded)
constexpr unsigned kOpInPlace = 1u << 1;     // writes into an operand (returns it, or nothing)
constexpr unsigned kOpReflect = 1u << 2;     // binary: Tensor also has the reflected operator (__radd__)
constexpr unsigned kOpKeepsInt = 1u << 3;    // unary: an integer input keeps its dtype (else f32)
constexpr unsigned kOpVariant = 1u << 4;     // one of several enum values bound under one name
constexpr unsigned kOpNone = 0;

// ---- the kernels' op enums ----------------------------------------------------------------------
// X(Enum, "python name", "Tensor operator" or nullptr, flags, "doc")
// Comparisons have no reflected operator: Python swaps the operands itself (a > b -> b < a).
#define TL_BINARY_OPS(X)                                                                          \
  X(Add, "add", "__add__", kOpReflect, "a + b with NumPy broadcasting; a or b may be a number.") \
  X(Sub, "sub", "__sub__", kOpReflect, "a - b with NumPy broadcasting; a or b may be a number.") \
  X(Mul, "mul", "__mul__", kOpReflect, "a * b with NumPy broadcasting; a or b may be a number.") \
  X(Div, "div", "__truediv__", kOpReflect, "a / b (true division: int / int gives f32).")      \
  X(Pow, "pow", "__pow__", kOpReflect, "a ** b elementwise.")                                  \
  X(Maximum, "maximum", nullptr, kOpNone, "Elementwise maximum.")                                        \
  X(Minimum, "minimum", nullptr, kOpNone, "Elementwise minimum.")                                        \
  X(Mod, "mod", "__mod__", kOpReflect, "Elementwise a % b.")                                   \
  X(Eq, "eq", "__eq__", kOpNone, "a == b elementwise (bool).")                                           \
  X(Ne, "ne", "__ne__", kOpNone, "a != b elementwise (bool).")                                           \
  X(Lt, "lt", "__lt__", kOpNone, "a < b elementwise (bool).")                                            \
  X(Le, "le", "__le__", kOpNone, "a <= b elementwise (bool).")                                           \
  X(Gt, "gt", "__gt__", kOpNone, "a > b elementwise (bool).")                                            \
  X(Ge, "ge", "__ge__", kOpNone, "a >= b elementwise (bool).")                                           \
  X(LogicalAnd, "logical_and", "__and__", kOpReflect, "Elementwise logical and (bool).")                 \
  X(LogicalOr, "logical_or", "__or__", kOpReflect, "Elementwise logical or (bool).")

// X(Enum, "python name", flags, "doc")
#define TL_UNARY_OPS(X)                                                                           \
  X(Neg, "neg", kOpKeepsInt, "-x.")                                                     \
  X(Abs, "abs", kOpKeepsInt, "|x|.")                                                    \
  X(Exp, "exp", kOpNone, "e^x.")                                                                  \
  X(Log, "log", kOpNone, "Natural logarithm.")                                                    \
  X(Sqrt, "sqrt", kOpNone, "Square root.")                                                        \
  X(Rsqrt, "rsqrt", kOpNone, "1 / sqrt(x).")                                                      \
  X(Sin, "sin", kOpNone, "Sine.")                                                                 \
  X(Cos, "cos", kOpNone, "Cosine.")                                                               \
  X(Tan, "tan", kOpNone, "Tangent.")                                                              \
  X(Tanh, "tanh", kOpNone, "Hyperbolic tangent.")                                                 \
  X(Sigmoid, "sigmoid", kOpNone, "1 / (1 + e^-x).")                                               \
  X(Relu, "relu", kOpKeepsInt, "max(x, 0).")                                            \
  X(GeluTanh, "gelu", kOpVariant, "GELU, tanh approximation (approximate='tanh').")      \
  X(GeluErf, "gelu", kOpVariant, "GELU, exact erf form (approximate='none').")          \
  X(Silu, "silu", kOpNone, "x * sigmoid(x).")                                                     \
  X(Square, "square", kOpKeepsInt, "x * x.")                                            \
  X(Floor, "floor", kOpKeepsInt, "Round down.")                                                   \
  X(Ceil, "ceil", kOpKeepsInt, "Round up.")                                                       \
  X(Round, "round", kOpKeepsInt, "Round to nearest.")                                             \
  X(LogicalNot, "logical_not", kOpNone, "Elementwise not (bool).")                                \
  X(Step, "step", kOpKeepsInt, "1 where x > 0 else 0, in x's dtype (Tensor Logic's step).")

// X(Enum, "python name", flags, "doc")
#define TL_REDUCE_OPS(X)                                                                          \
  X(Sum, "sum", kOpNone, "Sum over all elements (dim=None) or one dim.")                          \
  X(Mean, "mean", kOpNone, "Mean over all elements (dim=None) or one dim.")                       \
  X(Max, "max", kOpNone, "Maximum over all elements (dim=None) or one dim.")                      \
  X(Min, "min", kOpNone, "Minimum over all elements (dim=None) or one dim.")                      \
  X(ArgMax, "argmax", kOpNone, "Index of the maximum (i64, first on ties).")                      \
  X(ArgMin, "argmin", kOpNone, "Index of the minimum (i64, first on ties).")

// ---- every other function of the module ------------------------------------------------------
// X("python name", kind, tensor inputs (-1: a list of tensors), flags). Docs stay with the
// bindings (the argument lists are there).
#define TL_OTHER_OPS(X)                                                                           \
  X("from_numpy", Creation, 0, kOpNone)                                                           \
  X("from_quantized", Creation, 0, kOpNone)                                                       \
  X("zeros", Creation, 0, kOpNone)                                                                \
  X("ones", Creation, 0, kOpNone)                                                                 \
  X("full", Creation, 0, kOpNone)                                                                 \
  X("empty", Creation, 0, kOpNone)                                                                \
  X("arange", Creation, 0, kOpNone)                                                               \
  X("rand", Creation, 0, kOpNone)                                                                 \
  X("randn", Creation, 0, kOpNone)                                                                \
  X("causal_mask", Creation, 0, kOpNone)                                                          \
  X("where", Elementwise, 3, kOpNone)                                                             \
  X("astype", Elementwise, 1, kOpNone)                                                            \
  X("contiguous", Elementwise, 1, kOpNone)                                                        \
  X("softmax", Reduce, 1, kOpNone)                                                                \
  X("log_softmax", Reduce, 1, kOpNone)                                                            \
  X("matmul", Linalg, 2, kOpNone)                                                                 \
  X("linear", Linalg, 3, kOpNone)                                                                 \
  X("expert_linear", Linalg, 3, kOpNone)                                                          \
  X("embedding", Nn, 2, kOpNone)                                                                  \
  X("index_select", Nn, 2, kOpNone)                                                               \
  X("rms_norm", Nn, 2, kOpNone)                                                              \
  X("layer_norm", Nn, 3, kOpNone)                                                            \
  X("rope", Nn, 1, kOpNone)                                                                  \
  X("attention", Nn, 4, kOpNone)                                                             \
  X("attention_rows", Nn, 3, kOpNone)                                                        \
  X("rms_norm_linear", Fused, 4, kOpNone)                                                         \
  X("swiglu_linear", Fused, 3, kOpNone)                                                           \
  X("swiglu", Fused, 2, kOpNone)                                                                  \
  X("rope_kv_write", Fused, 5, kOpInPlace)                                                        \
  X("reshape", Shape, 1, kOpNone)                                                                 \
  X("transpose", Shape, 1, kOpNone)                                                               \
  X("permute", Shape, 1, kOpNone)                                                                 \
  X("expand", Shape, 1, kOpNone)                                                                  \
  X("squeeze", Shape, 1, kOpNone)                                                                 \
  X("unsqueeze", Shape, 1, kOpNone)                                                               \
  X("flatten", Shape, 1, kOpNone)                                                                 \
  X("slice", Shape, 1, kOpNone)                                                                   \
  X("select", Shape, 1, kOpNone)                                                                  \
  X("concat", Shape, -1, kOpNone)                                                                 \
  X("stack", Shape, -1, kOpNone)                                                                  \
  X("split", Shape, 1, kOpNone)                                                                 \
  X("chunk", Shape, 1, kOpNone)                                                                 \
  X("copy_", Shape, 2, kOpInPlace)                                                                \
  X("fill_", Shape, 1, kOpInPlace)                                                                \
  X("scatter_add_rows", Training, 2, kOpNone)                                                     \
  X("adam_update_", Training, 4, kOpInPlace)                                                      \
  X("sgd_update_", Training, 3, kOpInPlace)                                                       \
  X("kernel_ops", Info, 0, kOpNone)                                                               \
  X("op_table", Info, 0, kOpNone)                                                                 \
  X("dtypes", Info, 0, kOpNone)                                                                   \
  X("bitset_or_pairs", Host, 0, kOpInPlace)                                                       \
  X("bitset_set_keys", Host, 0, kOpInPlace)                                                       \
  X("chain_pairs", Host, 0, kOpNone)                                                              \
  X("merge_new_keys", Host, 0, kOpNone)                                                           \
  X("init", Runtime, 0, kOpHostEffect)                                                            \
  X("backend_name", Runtime, 0, kOpHostEffect)                                                    \
  X("threads", Runtime, 0, kOpHostEffect)                                                         \
  X("available_backends", Runtime, 0, kOpHostEffect)                                              \
  X("set_debug", Runtime, 0, kOpHostEffect)                                                       \
  X("get_debug", Runtime, 0, kOpHostEffect)                                                       \
  X("set_ops_per_command_buffer", Runtime, 0, kOpHostEffect)                                      \
  X("set_q8_activations", Runtime, 0, kOpHostEffect)                                              \
  X("q8_activations", Runtime, 0, kOpHostEffect)                                                  \
  X("synchronize", Runtime, 0, kOpHostEffect)                                                     \
  X("shutdown", Runtime, 0, kOpHostEffect)                                                        \
  X("memory_stats", Runtime, 0, kOpHostEffect)                                                    \
  X("reset_peak_memory", Runtime, 0, kOpHostEffect)                                               \
  X("clear_cache", Runtime, 0, kOpHostEffect)                                                     \
  X("set_cache_limit", Runtime, 0, kOpHostEffect)                                                 \
  X("buffer_reserve", Runtime, 0, kOpHostEffect)                                                  \
  X("buffer_stats", Runtime, 0, kOpHostEffect)                                                    \
  X("recording_active", Runtime, 0, kOpHostEffect)                                                \
  X("abandon_recording", Runtime, 0, kOpHostEffect)

// What an op is, for the table's readers (`kind` in `_core.op_table()`). Host: a function on NumPy
// arrays outside the runtime (no device, no queue, no Tensor; the logic engine's set operations,
// cpp/backends/cpu/logic_sets.h): no tensor inputs, and no effect on the runtime's state.
enum class OpKind : uint8_t {
  Creation, Binary, Unary, Reduce, Elementwise, Linalg, Nn, Fused, Shape, Training, Info, Runtime, Host,
};

inline const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::Creation: return "creation";
    case OpKind::Binary: return "binary";
    case OpKind::Unary: return "unary";
    case OpKind::Reduce: return "reduce";
    case OpKind::Elementwise: return "elementwise";
    case OpKind::Linalg: return "linalg";
    case OpKind::Nn: return "nn";
    case OpKind::Fused: return "fused";
    case OpKind::Shape: return "shape";
    case OpKind::Training: return "training";
    case OpKind::Info: return "info";
    case OpKind::Runtime: return "runtime";
    case OpKind::Host: return "host";
  }
  return "op";
}

// ---- the Kernels interface's methods, by kernel family -------------------------------------------
// X(method, "family"): the family is the file stem that holds the method's kernels on each backend
// (the CUDA backend's layout: cpp/backends/cuda/<family>.cu; docs/op-table.md says where the CPU and
// Metal files stand). tests/runtime/test_backend_ops.py checks this list against kernels.h and that
// every cross-backend harness calls every method.
#define TL_KERNEL_METHODS(X)                                                                      \
  X(binary, "elementwise")                                                                        \
  X(binary_scalar, "elementwise")                                                                 \
  X(unary, "elementwise")                                                                         \
  X(copy, "elementwise")                                                                          \
  X(fill, "elementwise")                                                                          \
  X(arange, "elementwise")                                                                        \
  X(where, "elementwise")                                                                         \
  X(reduce, "reduce")                                                                             \
  X(softmax, "reduce")                                                                            \
  X(matmul, "matmul")                                                                             \
  X(linear, "matmul")                                                                             \
  X(linear_q8_activations, "matmul")                                                              \
  X(expert_linear, "matmul")                                                                      \
  X(gather_rows, "gather_rows")                                                                        \
  X(scatter_add_rows, "training")                                                                 \
  X(optimizer_update, "training")                                                                 \
  X(rms_norm, "norm_rope")                                                                        \
  X(layer_norm, "norm_rope")                                                                      \
  X(rope, "norm_rope")                                                                            \
  X(causal_mask, "attention")                                                                     \
  X(attention, "attention")                                                                       \
  X(attention_rows, "attention")                                                                  \
  X(fused_linear, "fused")                                                                        \
  X(fused_linear_q8_activations, "fused")                                                         \
  X(swiglu, "fused")                                                                              \
  X(rope_kv_write, "fused")                                                                       \
  X(delay, "delay")

}  // namespace tl
