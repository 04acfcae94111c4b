// Module-level op functions of tensorlogic._core (docs/core-api.md, "Creation" and "Ops").
// All ops are asynchronous: they validate, encode and return at once.
#include "bindings.h"
#include "runtime/errors.h"

namespace tl::py_bind {

namespace {

Tensor binary_any(BinaryOp op, py::handle a, py::handle b, const char* name) {
  bool at = py::isinstance<Tensor>(a), bt = py::isinstance<Tensor>(b);
  if (!at && is_scalar(a) && (bt || !is_scalar(b))) {
    Tensor tb = as_tensor(b, name);
    if (auto exact = exact_int_operand(a, tb, op, name)) return binary(op, *exact, tb);
    double v = py::isinstance<py::bool_>(a) ? (a.cast<bool>() ? 1.0 : 0.0) : a.cast<double>();
    return binary_scalar(op, tb, v, py::isinstance<py::float_>(a), true);
  }
  if (!at && is_symbolic(a) && bt) {
    bool f = false;
    DynScalar v = parse_dyn_scalar(a, name, &f);
    return binary_scalar(op, b.cast<const Tensor&>(), v, f, true);
  }
  if (at && is_symbolic(b)) {
    bool f = false;
    DynScalar v = parse_dyn_scalar(b, name, &f);
    return binary_scalar(op, a.cast<const Tensor&>(), v, f, false);
  }
  Tensor ta = as_tensor(a, name);
  if (!bt && is_scalar(b)) {
    if (auto exact = exact_int_operand(b, ta, op, name)) return binary(op, ta, *exact);
    double v = py::isinstance<py::bool_>(b) ? (b.cast<bool>() ? 1.0 : 0.0) : b.cast<double>();
    return binary_scalar(op, ta, v, py::isinstance<py::float_>(b), false);
  }
  return binary(op, ta, as_tensor(b, name, &ta));
}

std::optional<Tensor> opt_tensor(py::handle obj, const char* op) {
  if (obj.is_none()) return std::nullopt;
  return as_tensor(obj, op);
}

std::vector<Tensor> tensor_list(py::handle seq, const char* op) {
  if (!py::isinstance<py::sequence>(seq) || py::isinstance<Tensor>(seq))
    throw py::type_error(std::string(op) + ": expected a list of tensors");
  std::vector<Tensor> out;
  for (py::handle h : seq.cast<py::sequence>()) out.push_back(as_tensor(h, op));
  return out;
}

std::optional<int64_t> opt_int(py::handle obj, const char* what) {
  if (obj.is_none()) return std::nullopt;
  return parse_int(obj, what);
}

py::list op_table_list() {
  py::list out;
  auto one = [](const char* e) {
    py::list l;
    l.append(e);
    return l;
  };
  auto add = [&out](const char* name, OpKind kind, int arity, unsigned flags, py::list enums) {
    for (py::handle row : out)  // a variant of a name already listed (gelu): one row, both enums
      if (row["name"].cast<std::string>() == name) {
        row["enums"].cast<py::list>().append(enums[0]);
        return;
      }
    py::dict row;
    row["name"] = name;
    row["kind"] = op_kind_name(kind);
    row["arity"] = arity;
    row["host_effect"] = (flags & kOpHostEffect) != 0;
    row["in_place"] = (flags & kOpInPlace) != 0;
    row["enums"] = enums;
    out.append(row);
  };
#define TL_ROW_BIN(Enum, name, dunder, flags, doc) add(name, OpKind::Binary, 2, flags, one("BinaryOp::" #Enum));
#define TL_ROW_UN(Enum, name, flags, doc) add(name, OpKind::Unary, 1, flags, one("UnaryOp::" #Enum));
#define TL_ROW_RED(Enum, name, flags, doc) add(name, OpKind::Reduce, 1, flags, one("ReduceOp::" #Enum));
#define TL_ROW_OTHER(name, kind, arity, flags) add(name, OpKind::kind, arity, flags, py::list());
  TL_BINARY_OPS(TL_ROW_BIN)
  TL_UNARY_OPS(TL_ROW_UN)
  TL_REDUCE_OPS(TL_ROW_RED)
  TL_OTHER_OPS(TL_ROW_OTHER)
#undef TL_ROW_BIN
#undef TL_ROW_UN
#undef TL_ROW_RED
#undef TL_ROW_OTHER
  return out;
}

}  // namespace

void bind_ops(py::module_& m) {
  // ---- creation -------------------------------------------------------------------------------
  m.def("from_numpy", [](py::handle arr, py::handle dtype) {
          return from_numpy(arr, parse_optional_dtype(dtype, "from_numpy"));
        }, py::arg("arr"), py::arg("dtype") = py::none(),
        "Copy a NumPy array (or nested list) to the device. float64 -> f32, ints -> i64 unless "
        "dtype is given.");
  m.def("from_quantized", [](py::array raw, py::handle dtype, py::handle shape) {
          DType t = parse_dtype(dtype, "from_quantized");
          Shape s = parse_shape(shape, "from_quantized");
          py::array c = py::module_::import("numpy").attr("ascontiguousarray")(raw);
          if (c.dtype().itemsize() != 1)
            throw DTypeError("from_quantized: raw blocks must be a uint8 array");
          const void* data = c.data();
          size_t n = static_cast<size_t>(c.nbytes());
          py::gil_scoped_release nogil;
          return from_quantized(data, n, t, s);
        }, py::arg("raw"), py::arg("dtype"), py::arg("shape"),
        "Upload raw GGUF blocks (uint8) of a [rows, cols] weight byte for byte.");
  m.def("zeros", [](py::handle shape, py::handle dtype) {
          return full(parse_shape(shape, "zeros"), 0.0, parse_dtype(dtype, "zeros"));
        }, py::arg("shape"), py::arg("dtype") = "f32", "A tensor of zeros.");
  m.def("ones", [](py::handle shape, py::handle dtype) {
          return full(parse_shape(shape, "ones"), 1.0, parse_dtype(dtype, "ones"));
        }, py::arg("shape"), py::arg("dtype") = "f32", "A tensor of ones.");
  m.def("full", [](py::handle shape, double value, py::handle dtype) {
          return full(parse_shape(shape, "full"), value, parse_dtype(dtype, "full"));
        }, py::arg("shape"), py::arg("value"), py::arg("dtype") = "f32",
        "A tensor filled with `value`.");
  m.def("empty", [](py::handle shape, py::handle dtype) {
          return empty(parse_shape(shape, "empty"), parse_dtype(dtype, "empty"));
        }, py::arg("shape"), py::arg("dtype") = "f32",
        "An uninitialised tensor (its values are whatever the memory holds).");
  m.def("arange", [](py::handle start, py::handle stop, py::handle step, py::handle dtype) {
          bool all_int = true;
          for (py::handle h : {start, stop, step})
            if (!h.is_none() && !(py::isinstance<py::int_>(h))) all_int = false;
          double a = start.cast<double>(), b = 0, s = step.cast<double>();
          if (stop.is_none()) {
            b = a;
            a = 0;
          } else {
            b = stop.cast<double>();
          }
          auto dt = parse_optional_dtype(dtype, "arange");
          return arange(a, b, s, dt ? *dt : (all_int ? DType::I64 : DType::F32));
        }, py::arg("start"), py::arg("stop") = py::none(), py::arg("step") = 1,
        py::arg("dtype") = py::none(),
        "Evenly spaced values in [start, stop); i64 when all arguments are ints, else f32.");
  m.def("rand", [](py::handle shape, uint64_t seed) { return rand_uniform(parse_shape(shape, "rand"), seed); },
        py::arg("shape"), py::arg("seed") = 0, "Uniform [0, 1) f32 values, deterministic per seed.");
  m.def("randn", [](py::handle shape, uint64_t seed) { return rand_normal(parse_shape(shape, "randn"), seed); },
        py::arg("shape"), py::arg("seed") = 0, "Standard normal f32 values, deterministic per seed.");

  // ---- elementwise ------------------------------------------------------------------------------
  // The enum ops bind in a loop over the op table (runtime/op_table.h): one function per name.
  struct BinDef { const char* name; BinaryOp op; const char* doc; };
#define TL_BIN_DEF(Enum, name, dunder, flags, doc) {name, BinaryOp::Enum, doc},
  static const BinDef bins[] = {TL_BINARY_OPS(TL_BIN_DEF)};
#undef TL_BIN_DEF
  for (const BinDef& d : bins) {
    BinaryOp op = d.op;
    const char* name = d.name;
    m.def(d.name, [op, name](py::handle a, py::handle b) { return binary_any(op, a, b, name); },
          py::arg("a"), py::arg("b"), d.doc);
  }
  struct UnDef { const char* name; UnaryOp op; unsigned flags; const char* doc; };
#define TL_UN_DEF(Enum, name, flags, doc) {name, UnaryOp::Enum, flags, doc},
  static const UnDef uns[] = {TL_UNARY_OPS(TL_UN_DEF)};
#undef TL_UN_DEF
  for (const UnDef& d : uns) {
    if (d.flags & kOpVariant) continue;  // bound below, with the argument that picks the variant
    UnaryOp op = d.op;
    const char* name = d.name;
    m.def(d.name, [op, name](py::handle x) { return unary(op, as_tensor(x, name)); }, py::arg("x"), d.doc);
  }
  m.def("gelu", [](py::handle x, const std::string& approximate) {
          if (approximate != "tanh" && approximate != "none")
            throw py::value_error("gelu: approximate must be 'tanh' or 'none'");
          return unary(approximate == "tanh" ? UnaryOp::GeluTanh : UnaryOp::GeluErf, as_tensor(x, "gelu"));
        }, py::arg("x"), py::arg("approximate") = "tanh",
        "GELU: tanh approximation (default) or the exact erf form (approximate='none').");
  m.def("where", [](py::handle c, py::handle a, py::handle b) {
          Tensor tc = as_tensor(c, "where");
          Tensor* like = nullptr;
          std::optional<Tensor> ta, tb;
          if (py::isinstance<Tensor>(a)) ta = a.cast<Tensor>();
          if (py::isinstance<Tensor>(b)) tb = b.cast<Tensor>();
          like = ta ? &*ta : (tb ? &*tb : nullptr);
          if (!ta) ta = as_tensor(a, "where", like);
          if (!tb) tb = as_tensor(b, "where", like);
          return where(tc, *ta, *tb);
        }, py::arg("cond"), py::arg("a"), py::arg("b"),
        "cond ? a : b elementwise with broadcasting; a and b may be numbers.");
  m.def("astype", [](py::handle x, py::handle dtype) {
          return astype(as_tensor(x, "astype"), parse_dtype(dtype, "astype"));
        }, py::arg("x"), py::arg("dtype"),
        "Convert to `dtype` (quantized weights are dequantized to f32/f16).");
  m.def("contiguous", [](py::handle x) { return contiguous(as_tensor(x, "contiguous")); }, py::arg("x"),
        "x itself if contiguous, else a contiguous copy.");

  // ---- reductions -------------------------------------------------------------------------------
  struct RedDef { const char* name; ReduceOp op; const char* doc; };
#define TL_RED_DEF(Enum, name, flags, doc) {name, ReduceOp::Enum, doc},
  static const RedDef reds[] = {TL_REDUCE_OPS(TL_RED_DEF)};
#undef TL_RED_DEF
  for (const RedDef& d : reds) {
    ReduceOp op = d.op;
    const char* name = d.name;
    m.def(d.name, [op, name](py::handle x, py::handle dim, bool keepdim) {
            return reduce(op, as_tensor(x, name), opt_int(dim, "dim"), keepdim);
          }, py::arg("x"), py::arg("dim") = py::none(), py::arg("keepdim") = false, d.doc);
  }
  m.def("kernel_ops", [] {
          // Each family's Python names in enum order, variants of one name (gelu) once.
          auto names = [](py::list& out, const char* name) {
            if (!out.contains(name)) out.append(name);
          };
          py::list binary, unary, reduction;
          for (const BinDef& d : bins) names(binary, d.name);
          for (const UnDef& d : uns) names(unary, d.name);
          for (const RedDef& d : reds) names(reduction, d.name);
          py::dict out;
          out["binary"] = binary;
          out["unary"] = unary;
          out["reduce"] = reduction;
          return out;
        },
        "The elementwise and reduction ops of the kernel table by family: {'binary': [...], "
        "'unary': [...], 'reduce': [...]} (every value of the kernels' op enums, by its Python name).");
  m.def("op_table", [] { return op_table_list(); },
        "Every function of this module, one dict each: name, kind (creation, binary, unary, reduce, "
        "elementwise, linalg, nn, fused, shape, training, info, runtime), arity (tensor inputs; -1 "
        "a list), host_effect, in_place, and for the kernels' enum ops the enum values "
        "(runtime/op_table.h).");
  m.def("dtypes", [] {
          py::list out;
          for (int i = 0; !is_quantized(static_cast<DType>(i)); ++i) out.append(dtype_name(static_cast<DType>(i)));
          return out;
        },
        "The plain (not block-quantized) element types, by name: f32, f16, bf16, i32, i64, bool.");
  m.def("softmax", [](py::handle x, int64_t dim) { return softmax(as_tensor(x, "softmax"), dim); },
        py::arg("x"), py::arg("dim") = -1, "Numerically stable softmax over `dim`.");
  m.def("log_softmax", [](py::handle x, int64_t dim) { return log_softmax(as_tensor(x, "log_softmax"), dim); },
        py::arg("x"), py::arg("dim") = -1, "log(softmax(x)) computed stably.");

  // ---- linear algebra and nn ---------------------------------------------------------------------
  m.def("matmul", [](py::handle a, py::handle b) { return matmul(as_tensor(a, "matmul"), as_tensor(b, "matmul")); },
        py::arg("a"), py::arg("b"), "Matrix product with NumPy matmul rules (1-D operands, batch broadcasting).");
  m.def("linear", [](py::handle x, const Tensor& w, py::handle bias) {
          return linear(as_tensor(x, "linear"), w, opt_tensor(bias, "linear"));
        }, py::arg("x"), py::arg("w"), py::arg("bias") = py::none(),
        "x @ w.T (+ bias); w is [out, in] of any dtype including quantized.");
  m.def("expert_linear", [](py::handle x, const Tensor& w, py::handle ids, int64_t experts) {
          return expert_linear(as_tensor(x, "expert_linear"), w, as_tensor(ids, "expert_linear"), experts);
        }, py::arg("x"), py::arg("w"), py::arg("ids"), py::arg("experts") = 0,
        "Mixture-of-experts products: x [T, in] or [T, 1 or k, in], w [experts * out, in] (any weight "
        "dtype) or [experts, out, in], ids [T, k] -> [T, k, out], row (t, j) = x[t] @ W_ids[t, j].T.");
  m.def("embedding", [](const Tensor& table, py::handle ids) { return embedding(table, as_tensor(ids, "embedding")); },
        py::arg("table"), py::arg("ids"), "Rows of `table` (may be quantized) for integer `ids`: ids.shape + [D].");
  m.def("index_select", [](py::handle x, int64_t dim, py::handle ids) {
          return index_select(as_tensor(x, "index_select"), dim, as_tensor(ids, "index_select"));
        }, py::arg("x"), py::arg("dim"), py::arg("ids"), "Entries of x at `ids` along `dim` (a copy).");
  m.def("rms_norm", [](py::handle x, py::handle w, double eps) {
          return rms_norm(as_tensor(x, "rms_norm"), opt_tensor(w, "rms_norm"), eps);
        }, py::arg("x"), py::arg("w") = py::none(), py::arg("eps") = 1e-5,
        "x / sqrt(mean(x^2, last dim) + eps) * w.");
  m.def("layer_norm", [](py::handle x, py::handle w, py::handle b, double eps) {
          return layer_norm(as_tensor(x, "layer_norm"), opt_tensor(w, "layer_norm"), opt_tensor(b, "layer_norm"), eps);
        }, py::arg("x"), py::arg("w") = py::none(), py::arg("b") = py::none(), py::arg("eps") = 1e-5,
        "Layer normalisation over the last dim, then * w + b.");
  m.def("rope", [](py::handle x, py::handle pos, double base, bool neox) {
          return rope(as_tensor(x, "rope"), parse_dyn_int(pos, "rope pos_offset"), base, neox);
        }, py::arg("x"), py::arg("pos_offset") = 0, py::arg("base") = 10000.0, py::arg("neox") = false,
        "Rotary position embedding of x [..., S, H, D]: adjacent pairs (default) or NeoX halves.");
  m.def("causal_mask", [](py::handle n, py::handle mm, py::handle offset) {
          int64_t rows = parse_int(n, "causal_mask n");
          int64_t cols = mm.is_none() ? rows : parse_int(mm, "causal_mask m");
          return causal_mask(rows, cols, parse_int(offset, "causal_mask offset"));
        }, py::arg("n"), py::arg("m") = py::none(), py::arg("offset") = 0,
        "[n, m] f32: 0 where j <= i + offset, -inf elsewhere.");
  m.def("attention", [](const Tensor& q, const Tensor& k, const Tensor& v, py::handle mask,
                        std::optional<double> scale, bool causal, py::handle pos, double softcap) {
          return attention(q, k, v, opt_tensor(mask, "attention"), scale, causal,
                           parse_dyn_int(pos, "attention pos_offset"), softcap);
        }, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("mask") = py::none(),
        py::arg("scale") = py::none(), py::arg("causal") = false, py::arg("pos_offset") = 0,
        py::arg("softcap") = 0.0,
        "Scaled dot-product attention; q [Sq, Hq, D], k/v [Sk, Hkv, D] (grouped-query heads); "
        "softcap > 0 caps each scaled score at softcap * tanh(score / softcap) (Gemma 2).");

  m.def("attention_rows", [](const Tensor& q, const Tensor& k, const Tensor& v, py::handle starts, py::handle lens,
                             std::optional<double> scale, double softcap) {
          return attention_rows(q, k, v, parse_dyn_ints(starts, "attention_rows starts"),
                                parse_dyn_ints(lens, "attention_rows lens"), scale, softcap);
        }, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("starts"), py::arg("lens"),
        py::arg("scale") = py::none(), py::arg("softcap") = 0.0,
        "Decode attention of B sequences in one op: q [B, Hq, D], k/v [R, Hkv, D] (a KV slot store's "
        "rows); row b attends over k/v rows starts[b] .. starts[b] + lens[b] - 1, its query the last "
        "position (each row as attention alone, causal at pos lens[b] - 1).");

  // ---- fused ops ----------------------------------------------------------------------------------
  m.def("rms_norm_linear", [](py::handle x, py::handle norm_w, const Tensor& w, double eps, py::handle addend) {
          return rms_norm_linear(as_tensor(x, "rms_norm_linear"), opt_tensor(norm_w, "rms_norm_linear"), w, eps,
                                 opt_tensor(addend, "rms_norm_linear"));
        }, py::arg("x"), py::arg("norm_w"), py::arg("w"), py::arg("eps") = 1e-5, py::arg("addend") = py::none(),
        "linear(rms_norm(x, norm_w, eps), w) (+ addend) as one kernel: the RMSNorm is folded into the "
        "matrix product.");
  m.def("swiglu_linear", [](py::handle gate_up, const Tensor& w, py::handle addend) {
          return swiglu_linear(as_tensor(gate_up, "swiglu_linear"), w, opt_tensor(addend, "swiglu_linear"));
        }, py::arg("gate_up"), py::arg("w"), py::arg("addend") = py::none(),
        "linear(swiglu(gate_up), w) (+ addend) as one kernel: gate_up's last dim holds [gate | up], "
        "twice w's input size.");
  m.def("swiglu", [](py::handle gate, py::handle up) {
          return swiglu(as_tensor(gate, "swiglu"), opt_tensor(up, "swiglu"));
        }, py::arg("gate"), py::arg("up") = py::none(),
        "silu(gate) * up in f32 as one kernel; with one argument its last dim holds [gate | up].");
  m.def("rope_kv_write", [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                            const Tensor& v_cache, py::handle pos, double base, bool neox, py::handle row) {
          if (py::isinstance<py::list>(pos) || py::isinstance<py::tuple>(pos)) {
            // one position and first row per row of q (a batched decode step)
            const std::vector<DynInt> ps = parse_dyn_ints(pos, "rope_kv_write pos");
            const std::vector<DynInt> rs = parse_dyn_ints(row, "rope_kv_write row", ps.size());
            return rope_kv_write_rows(q, k, v, k_cache, v_cache, ps, rs, base, neox);
          }
          return rope_kv_write(q, k, v, k_cache, v_cache, parse_dyn_int(pos, "rope_kv_write pos"), base, neox,
                               parse_dyn_int(row, "rope_kv_write row"));
        }, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("k_cache"), py::arg("v_cache"), py::arg("pos"),
        py::arg("base") = 10000.0, py::arg("neox") = false, py::arg("row") = 0,
        "rope(q) returned; rope(k) and v written to rows row + pos.. of the K and V caches (RoPE at "
        "positions pos..), as one kernel. q, k, v: [S, H, D] or [S, H * D]. pos (and row) may be lists, "
        "one per row of q: row s at position pos[s], written to cache row row[s] + pos[s].");

  // ---- shape ------------------------------------------------------------------------------------
  m.def("reshape", [](py::handle x, py::handle shape) { return reshape(as_tensor(x, "reshape"), parse_shape(shape, "reshape")); },
        py::arg("x"), py::arg("shape"), "Reshape (-1 infers one dim); a view when contiguous.");
  m.def("transpose", [](py::handle x, int64_t d0, int64_t d1) { return transpose(as_tensor(x, "transpose"), d0, d1); },
        py::arg("x"), py::arg("d0") = -2, py::arg("d1") = -1, "Swap two dims (a view).");
  m.def("permute", [](py::handle x, py::handle dims) { return permute(as_tensor(x, "permute"), parse_shape(dims, "permute")); },
        py::arg("x"), py::arg("dims"), "Reorder dims (a view).");
  m.def("expand", [](py::handle x, py::handle shape) { return expand(as_tensor(x, "expand"), parse_shape(shape, "expand")); },
        py::arg("x"), py::arg("shape"), "Broadcast to `shape` (a view; -1 keeps a dim).");
  m.def("squeeze", [](py::handle x, py::handle dim) { return squeeze(as_tensor(x, "squeeze"), opt_int(dim, "dim")); },
        py::arg("x"), py::arg("dim") = py::none(), "Remove size-1 dims (all, or just `dim`).");
  m.def("unsqueeze", [](py::handle x, py::handle dim) { return unsqueeze(as_tensor(x, "unsqueeze"), parse_int(dim, "dim")); },
        py::arg("x"), py::arg("dim"), "Insert a size-1 dim.");
  m.def("flatten", [](py::handle x, int64_t start, int64_t end) { return flatten(as_tensor(x, "flatten"), start, end); },
        py::arg("x"), py::arg("start") = 0, py::arg("end") = -1, "Merge dims start..end.");
  m.def("slice", [](py::handle x, py::handle dim, py::handle start, py::handle stop, py::handle step) {
          if ((is_symbolic(start) || is_symbolic(stop)) && !start.is_none() && !stop.is_none() &&
              parse_int(step, "step") == 1)
            return slice_dynamic(as_tensor(x, "slice"), parse_int(dim, "dim"), parse_dyn_int(start, "start"),
                                 parse_dyn_int(stop, "stop"));
          return slice(as_tensor(x, "slice"), parse_int(dim, "dim"), opt_int(start, "start"),
                       opt_int(stop, "stop"), parse_int(step, "step"));
        }, py::arg("x"), py::arg("dim"), py::arg("start") = py::none(), py::arg("stop") = py::none(),
        py::arg("step") = 1, "x[start:stop:step] along `dim` with Python slice rules (a view).");
  m.def("select", [](py::handle x, py::handle dim, py::handle index) {
          return select(as_tensor(x, "select"), parse_int(dim, "dim"), parse_int(index, "index"));
        }, py::arg("x"), py::arg("dim"), py::arg("index"), "x[..., index, ...] along `dim` (a view; negative ok).");
  m.def("concat", [](py::handle xs, py::handle dim) { return concat(tensor_list(xs, "concat"), parse_int(dim, "dim")); },
        py::arg("tensors"), py::arg("dim") = 0, "Concatenate along `dim`.");
  m.def("stack", [](py::handle xs, py::handle dim) { return stack(tensor_list(xs, "stack"), parse_int(dim, "dim")); },
        py::arg("tensors"), py::arg("dim") = 0, "Stack equal-shaped tensors along a new dim.");
  m.def("split", [](py::handle x, py::handle sizes, py::handle dim) {
          Tensor t = as_tensor(x, "split");
          if (is_scalar(sizes)) return split_n(t, parse_int(sizes, "n"), parse_int(dim, "dim"));
          return split_sizes(t, parse_shape(sizes, "split"), parse_int(dim, "dim"));
        }, py::arg("x"), py::arg("sizes_or_n"), py::arg("dim") = 0,
        "Split into n equal parts, or into parts of the given sizes (views).");
  m.def("chunk", [](py::handle x, py::handle n, py::handle dim) {
          return chunk(as_tensor(x, "chunk"), parse_int(n, "n"), parse_int(dim, "dim"));
        }, py::arg("x"), py::arg("n"), py::arg("dim") = 0,
        "Up to n chunks of size ceil(len / n) (views).");
  m.def("copy_", [](const Tensor& dst, py::handle src) {
          copy_into(dst, as_tensor(src, "copy_", &dst));
          return dst;
        }, py::arg("dst"), py::arg("src"),
        "Write src (broadcast to dst's shape) into the view dst, in place; returns dst.");
  m.def("fill_", [](const Tensor& dst, py::handle value) {
          bool is_float = false;
          fill_into(dst, parse_dyn_scalar(value, "fill_ value", &is_float));
          return dst;
        }, py::arg("dst"), py::arg("value"),
        "Set every element of the view dst to value, in place (value may be a compiled function's "
        "symbolic scalar); returns dst.");
  m.def("scatter_add_rows", [](py::handle ids, py::handle src, py::handle rows) {
          return scatter_add_rows(as_tensor(ids, "scatter_add_rows"), as_tensor(src, "scatter_add_rows"),
                                  parse_int(rows, "rows"));
        }, py::arg("ids"), py::arg("src"), py::arg("rows"),
        "A [rows, D] f32 tensor of zeros with src[i, :] added into row ids[i] for every i, in order "
        "(np.add.at; repeated ids add up, deterministically). src is [n, D] for n ids.");
  m.def("adam_update_", [](const Tensor& param, py::handle grad, const Tensor& m_, const Tensor& v_,
                           py::handle lr, py::handle bias1, py::handle bias2, double beta1, double beta2,
                           double eps, double weight_decay, bool decoupled) {
          OptimizerConfig c;
          c.kind = OptimizerKind::Adam;
          c.decoupled = decoupled;
          c.beta1 = beta1;
          c.beta2 = beta2;
          c.eps = eps;
          c.weight_decay = weight_decay;
          bool f = false;
          optimizer_update(c, param, as_tensor(grad, "adam_update_"), m_, v_,
                           parse_dyn_scalar(lr, "adam_update_ lr", &f),
                           parse_dyn_scalar(bias1, "adam_update_ bias1", &f),
                           parse_dyn_scalar(bias2, "adam_update_ bias2", &f));
          return param;
        }, py::arg("param"), py::arg("grad"), py::arg("m"), py::arg("v"), py::arg("lr"), py::arg("bias1"),
        py::arg("bias2"), py::arg("beta1") = 0.9, py::arg("beta2") = 0.999, py::arg("eps") = 1e-8,
        py::arg("weight_decay") = 0.0, py::arg("decoupled") = false,
        "One Adam (AdamW when decoupled) step in place, one kernel: param, m and v (contiguous f32 of one "
        "shape) are updated from grad; bias1 = 1 - beta1**t and bias2 = 1 - beta2**t for step t. lr, bias1 "
        "and bias2 may be a compiled function's symbolic scalars. Returns param.");
  m.def("sgd_update_", [](const Tensor& param, py::handle grad, py::handle buf, py::handle lr, double momentum,
                          bool nesterov, double weight_decay) {
          OptimizerConfig c;
          c.kind = OptimizerKind::Sgd;
          c.nesterov = nesterov;
          c.momentum = momentum;
          c.weight_decay = weight_decay;
          bool f = false;
          optimizer_update(c, param, as_tensor(grad, "sgd_update_"), opt_tensor(buf, "sgd_update_"), std::nullopt,
                           parse_dyn_scalar(lr, "sgd_update_ lr", &f), DynScalar(1.0), DynScalar(1.0));
          return param;
        }, py::arg("param"), py::arg("grad"), py::arg("buf"), py::arg("lr"), py::arg("momentum") = 0.0,
        py::arg("nesterov") = false, py::arg("weight_decay") = 0.0,
        "One SGD step in place, one kernel: with a momentum buffer buf (contiguous f32 of param's shape, "
        "None for plain SGD) b = momentum*b + g, then p -= lr * (g + momentum*b if nesterov else b). "
        "Returns param.");
}

}  // namespace tl::py_bind
