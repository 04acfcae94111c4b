// Binding of tl::Tensor as tensorlogic._core.Tensor, plus the conversions every binding file
// uses (dtype/shape parsing, NumPy in and out). Host reads wait for the writer inside the
// runtime (R2) with the GIL released.
#include <cmath>
#include <cstring>

#include "bindings.h"
#include "runtime/errors.h"

namespace tl::py_bind {

namespace {

py::module_& numpy() {
  static py::module_* np = new py::module_(py::module_::import("numpy"));
  return *np;
}

uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return 0x7FC0;
  uint32_t bias = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + bias) >> 16);
}

float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

const char* numpy_host_dtype(DType t) {
  switch (t) {
    case DType::F32: case DType::BF16: return "float32";
    case DType::F16: return "float16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::Bool: return "bool";
    default: return "uint8";
  }
}

}  // namespace

DType parse_dtype(py::handle obj, const char* op) {
  std::string s;
  if (py::isinstance<py::str>(obj)) {
    s = obj.cast<std::string>();
  } else {
    try {
      s = py::str(numpy().attr("dtype")(obj).attr("name")).cast<std::string>();
    } catch (const py::error_already_set&) {
      throw DTypeError(std::string(op) + ": not a dtype: " + py::repr(obj).cast<std::string>());
    }
  }
  DType t;
  if (dtype_from_name(s, &t)) return t;
  static const std::pair<const char*, DType> aliases[] = {
      {"float32", DType::F32}, {"float", DType::F32},     {"float16", DType::F16},
      {"half", DType::F16},    {"bfloat16", DType::BF16}, {"int32", DType::I32},
      {"int64", DType::I64},   {"int", DType::I64},       {"bool_", DType::Bool},
      {"float64", DType::F32}};
  for (const auto& a : aliases)
    if (s == a.first) return a.second;
  throw DTypeError(std::string(op) + ": unknown dtype '" + s +
                   "' (expected f32, f16, bf16, i32, i64, bool or a quantized type)");
}

std::optional<DType> parse_optional_dtype(py::handle obj, const char* op) {
  if (obj.is_none()) return std::nullopt;
  return parse_dtype(obj, op);
}

int64_t parse_int(py::handle obj, const char* what) {
  if (py::isinstance<py::bool_>(obj))
    throw py::type_error(std::string(what) + " must be an integer, got a bool");
  if (py::isinstance<py::int_>(obj)) return obj.cast<int64_t>();
  if (py::isinstance<py::float_>(obj)) {
    double d = obj.cast<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
    throw py::type_error(std::string(what) + " must be an integer, got " + py::repr(obj).cast<std::string>());
  }
  if (py::hasattr(obj, "__index__")) return obj.attr("__index__")().cast<int64_t>();
  throw py::type_error(std::string(what) + " must be an integer, got " +
                       py::repr(obj).cast<std::string>());
}

Shape parse_shape(py::handle obj, const char* op) {
  Shape shape;
  if (py::isinstance<py::int_>(obj) || py::isinstance<py::float_>(obj)) {
    shape.push_back(parse_int(obj, op));
    return shape;
  }
  if (py::isinstance<Tensor>(obj)) {
    py::array a = to_numpy(obj.cast<const Tensor&>());
    obj = a;
    return parse_shape(a.attr("tolist")(), op);
  }
  if (!py::isinstance<py::sequence>(obj) || py::isinstance<py::str>(obj))
    throw py::type_error(std::string(op) + ": shape must be a sequence of ints, got " +
                         py::repr(obj).cast<std::string>());
  for (py::handle item : obj.cast<py::sequence>()) shape.push_back(parse_int(item, op));
  return shape;
}

bool is_scalar(py::handle obj) {
  return py::isinstance<py::bool_>(obj) || py::isinstance<py::int_>(obj) ||
         py::isinstance<py::float_>(obj);
}

// Host data into an integer tensor must fit: NumPy's own conversion would wrap (uint64 max
// becomes -1) or turn NaN and out-of-range floats into whatever the hardware gives.
void require_fits_integer(const py::array& arr, char kind, DType target) {
  if ((target != DType::I32 && target != DType::I64) || arr.size() == 0) return;
  if (kind != 'u' && kind != 'i' && kind != 'f') return;
  const bool i32 = target == DType::I32;
  py::object lo = py::int_(i32 ? INT32_MIN : INT64_MIN), hi = py::int_(i32 ? INT32_MAX : INT64_MAX);
  if (kind == 'f') {
    if (!numpy().attr("isfinite")(arr).attr("all")().cast<bool>())
      throw DTypeError(std::string("from_numpy: NaN or infinity cannot become ") + dtype_name(target));
    lo = py::float_(i32 ? -2147483649.0 : -9223372036854775808.0);
    hi = py::float_(i32 ? 2147483648.0 : 9223372036854775808.0);
    py::object mn = arr.attr("min")(), mx = arr.attr("max")();
    if (mn.attr("__le__")(lo).cast<bool>() || mx.attr("__ge__")(hi).cast<bool>())
      throw DTypeError("from_numpy: value " + py::str(mn.attr("__le__")(lo).cast<bool>() ? mn : mx).cast<std::string>() +
                       " is out of the range of " + dtype_name(target));
    return;
  }
  py::object mn = py::int_(arr.attr("min")()), mx = py::int_(arr.attr("max")());
  if (mn.attr("__lt__")(lo).cast<bool>() || mx.attr("__gt__")(hi).cast<bool>())
    throw DTypeError("from_numpy: value " + py::str(mn.attr("__lt__")(lo).cast<bool>() ? mn : mx).cast<std::string>() +
                     " is out of the range of " + dtype_name(target));
}

std::optional<Tensor> exact_int_operand(py::handle s, const Tensor& a, BinaryOp op, const char* name) {
  if (!py::isinstance<py::int_>(s) || py::isinstance<py::bool_>(s)) return std::nullopt;
  if (a.dtype != DType::I32 && a.dtype != DType::I64 && a.dtype != DType::Bool) return std::nullopt;
  if (op == BinaryOp::Div || op == BinaryOp::LogicalAnd || op == BinaryOp::LogicalOr) return std::nullopt;
  // Arithmetic keeps the tensor's element type (i32 stays i32); a comparison only needs the value.
  const bool compare = op >= BinaryOp::Eq;
  const DType target = (a.dtype == DType::I32 && !compare) ? DType::I32 : DType::I64;
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(s.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  const bool fits = overflow == 0 && (target == DType::I64 || (v >= INT32_MIN && v <= INT32_MAX));
  if (!fits)
    throw DTypeError(std::string(name) + ": the integer " + py::str(s).cast<std::string>() +
                     " is out of the range of " + dtype_name(target) + " (the tensor's element type is " +
                     dtype_name(a.dtype) + ")");
  // The scalar kernels read the double in the tensor's element type: exact up to 2^53 for i64,
  // and for i32 within i32's range (a comparison beyond it goes through an i64 tensor).
  constexpr long long kExactInDouble = 1LL << 53;
  const bool exact = a.dtype == DType::I32 ? (v >= INT32_MIN && v <= INT32_MAX)
                                           : (v >= -kExactInDouble && v <= kExactInDouble);
  if (exact) return std::nullopt;
  return from_numpy(numpy().attr("array")(s, "int64"), target);
}

bool is_symbolic(py::handle obj) {
  if (!obj || obj.is_none() || py::isinstance<Tensor>(obj) || is_scalar(obj)) return false;
  return py::hasattr(obj, "_tl_affine");
}

namespace {
// (value, form or null, is_float) of a symbolic scalar; form is null outside a recording.
std::tuple<double, AffinePtr, bool> symbolic_parts(py::handle obj) {
  py::object a = obj.attr("_tl_affine");
  py::object value = obj.attr("value");
  bool is_float = py::isinstance<py::float_>(value);
  double v = value.cast<double>();
  if (a.is_none()) return {v, nullptr, is_float};
  py::tuple t = a.cast<py::tuple>();
  auto form = std::make_shared<Affine>();
  form->constant = t[1].cast<double>();
  for (py::handle term : t[2]) {
    py::tuple pair = term.cast<py::tuple>();
    form->terms.emplace_back(pair[0].cast<int>(), pair[1].cast<double>());
  }
  return {v, form, is_float};
}
}  // namespace

DynInt parse_dyn_int(py::handle obj, const char* what) {
  if (!is_symbolic(obj)) return DynInt(parse_int(obj, what));
  auto [v, form, is_float] = symbolic_parts(obj);
  if (is_float) return DynInt(parse_int(obj, what));  // __index__ of a float symbol abandons
  return DynInt(static_cast<int64_t>(v), form);
}

std::vector<DynInt> parse_dyn_ints(py::handle obj, const char* what, int64_t count) {
  const bool many = py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj);
  if (!many) {
    if (count < 0) throw py::type_error(std::string(what) + " must be a list of ints");
    return std::vector<DynInt>(static_cast<size_t>(count), parse_dyn_int(obj, what));
  }
  py::sequence seq = py::reinterpret_borrow<py::sequence>(obj);
  if (count >= 0 && static_cast<int64_t>(seq.size()) != count)
    throw py::value_error(std::string(what) + ": " + std::to_string(seq.size()) + " values where " +
                          std::to_string(count) + " are needed");
  std::vector<DynInt> out;
  out.reserve(seq.size());
  for (py::handle item : seq) out.push_back(parse_dyn_int(item, what));
  return out;
}

DynScalar parse_dyn_scalar(py::handle obj, const char* what, bool* is_float) {
  if (!is_symbolic(obj)) {
    *is_float = py::isinstance<py::float_>(obj);
    if (py::isinstance<py::bool_>(obj)) return DynScalar(obj.cast<bool>() ? 1.0 : 0.0);
    if (!is_scalar(obj)) throw py::type_error(std::string(what) + " must be a number");
    return DynScalar(obj.cast<double>());
  }
  auto [v, form, f] = symbolic_parts(obj);
  *is_float = f;
  return DynScalar(v, form);
}

Tensor from_numpy(py::handle obj, std::optional<DType> dtype) {
  py::array arr = numpy().attr("asarray")(obj);
  char kind = arr.dtype().kind();
  DType target;
  if (dtype) {
    target = *dtype;
  } else if (kind == 'f') {
    target = arr.dtype().itemsize() == 2 ? DType::F16 : DType::F32;
  } else if (kind == 'i' || kind == 'u') {
    target = DType::I64;
  } else if (kind == 'b') {
    target = DType::Bool;
  } else {
    throw DTypeError("from_numpy: unsupported array dtype " +
                     py::str(arr.dtype()).cast<std::string>());
  }
  if (is_quantized(target))
    throw DTypeError("from_numpy: use from_quantized for quantized weights");
  require_fits_integer(arr, kind, target);
  Shape shape(arr.shape(), arr.shape() + arr.ndim());
  py::array c = numpy().attr("ascontiguousarray")(arr, numpy_host_dtype(target));
  if (target == DType::BF16) {
    std::vector<uint16_t> tmp(static_cast<size_t>(c.size()));
    const float* src = static_cast<const float*>(c.data());
    for (size_t i = 0; i < tmp.size(); ++i) tmp[i] = f32_to_bf16(src[i]);
    py::gil_scoped_release nogil;
    return from_host(tmp.data(), shape, target);
  }
  const void* data = c.data();
  py::gil_scoped_release nogil;
  return from_host(data, shape, target);
}

py::array to_numpy(const Tensor& t) {
  if (is_quantized(t.dtype)) {
    py::array_t<uint8_t> out({t.shape[0], static_cast<int64_t>(row_bytes(t.dtype, t.shape[1]))});
    void* dst = out.mutable_data();
    {
      py::gil_scoped_release nogil;
      to_host(t, dst);
    }
    return out;
  }
  std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
  if (t.dtype == DType::BF16) {
    std::vector<uint16_t> tmp(static_cast<size_t>(t.numel()));
    {
      py::gil_scoped_release nogil;
      to_host(t, tmp.data());
    }
    py::array_t<float> out(shape);
    float* dst = out.mutable_data();
    for (size_t i = 0; i < tmp.size(); ++i) dst[i] = bf16_to_f32(tmp[i]);
    return out;
  }
  py::array out(py::dtype(numpy_host_dtype(t.dtype)), shape);
  void* dst = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    to_host(t, dst);
  }
  return out;
}

py::object item(const Tensor& t) {
  if (t.numel() != 1)
    throw ShapeError("item: only one-element tensors can be converted to a Python scalar, got " +
                     shape_str(t.shape));
  if (is_quantized(t.dtype)) throw DTypeError("item: not supported for quantized tensors");
  py::array a = to_numpy(t);
  return a.attr("reshape")(py::tuple()).attr("item")();
}

Tensor as_tensor(py::handle obj, const char* op, const Tensor* like) {
  if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>();
  if (is_scalar(obj)) {
    DType t;
    if (py::isinstance<py::bool_>(obj)) t = DType::Bool;
    else if (py::isinstance<py::int_>(obj)) t = DType::I64;
    else t = DType::F32;
    if (like && is_floating(like->dtype) && t != DType::Bool) t = like->dtype;
    if (t == DType::I64) return from_numpy(numpy().attr("array")(obj, "int64"), DType::I64);  // exact
    double v = py::isinstance<py::bool_>(obj) ? (obj.cast<bool>() ? 1.0 : 0.0) : obj.cast<double>();
    return full({}, v, t);
  }
  if (py::isinstance<py::array>(obj) || py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj))
    return from_numpy(obj, std::nullopt);
  throw py::type_error(std::string(op) + ": expected a Tensor or a number, got " +
                       py::str(py::type::handle_of(obj).attr("__name__")).cast<std::string>());
}

namespace {

// x[idx] with ints, slices, None, Ellipsis; a 1-D integer Tensor or list as the only index
// selects rows (index_select, a copy).
Tensor get_index(const Tensor& x, py::handle idx) {
  if (py::isinstance<Tensor>(idx) || py::isinstance<py::list>(idx) || py::isinstance<py::array>(idx)) {
    Tensor ids = as_tensor(idx, "index");
    if (ids.dtype == DType::Bool)
      throw DTypeError("index: boolean mask indexing is not supported; use where()");
    return index_select(x, 0, ids);
  }
  std::vector<py::handle> items;
  py::tuple tup;
  if (py::isinstance<py::tuple>(idx)) {
    tup = idx.cast<py::tuple>();
    for (py::handle h : tup) items.push_back(h);
  } else {
    items.push_back(idx);
  }
  int consumed = 0, ellipses = 0;
  for (py::handle h : items) {
    if (h.is_none()) continue;
    if (h.ptr() == Py_Ellipsis) {
      ellipses++;
      continue;
    }
    consumed++;
  }
  if (ellipses > 1) throw std::out_of_range("an index can only have a single ellipsis ('...')");
  if (consumed > x.ndim())
    throw std::out_of_range("too many indices for a tensor of shape " + shape_str(x.shape));
  Tensor r = x;
  int64_t d = 0;
  for (py::handle h : items) {
    if (h.is_none()) {
      r = unsqueeze(r, d);
      d++;
    } else if (h.ptr() == Py_Ellipsis) {
      d += x.ndim() - consumed;
    } else if (py::isinstance<py::slice>(h)) {
      PySliceObject* s = reinterpret_cast<PySliceObject*>(h.ptr());
      auto opt = [](PyObject* o, const char* what) -> std::optional<int64_t> {
        if (o == Py_None) return std::nullopt;
        return parse_int(py::handle(o), what);
      };
      std::optional<int64_t> start = opt(s->start, "slice start"), stop = opt(s->stop, "slice stop");
      std::optional<int64_t> step = opt(s->step, "slice step");
      r = slice(r, d, start, stop, step ? *step : 1);
      d++;
    } else if (py::isinstance<py::int_>(h) && !py::isinstance<py::bool_>(h)) {
      r = select(r, d, h.cast<int64_t>());
    } else {
      throw py::type_error("index: unsupported index " + py::repr(h).cast<std::string>() +
                           " (use ints, slices, None, ... or a 1-D int tensor)");
    }
  }
  return r;
}

// The op's name in an operator's errors: comparisons and logical ops say "compare".
const char* operator_name(BinaryOp op) { return op >= BinaryOp::Eq ? "compare" : op_name(op); }

Tensor binop(BinaryOp op, const Tensor& a, py::handle b, bool reflected) {
  if (py::isinstance<Tensor>(b)) {
    const Tensor& t = b.cast<const Tensor&>();
    return reflected ? binary(op, t, a) : binary(op, a, t);
  }
  if (is_scalar(b)) {
    if (auto exact = exact_int_operand(b, a, op, operator_name(op)))
      return reflected ? binary(op, *exact, a) : binary(op, a, *exact);
    double v = py::isinstance<py::bool_>(b) ? (b.cast<bool>() ? 1.0 : 0.0) : b.cast<double>();
    return binary_scalar(op, a, v, py::isinstance<py::float_>(b), reflected);
  }
  if (is_symbolic(b)) {
    bool f = false;
    DynScalar v = parse_dyn_scalar(b, "operator", &f);
    return binary_scalar(op, a, v, f, reflected);
  }
  Tensor t = as_tensor(b, "operator");
  return reflected ? binary(op, t, a) : binary(op, a, t);
}

py::object op_or_notimpl(BinaryOp op, const Tensor& a, py::handle b, bool reflected) {
  if (!py::isinstance<Tensor>(b) && !is_scalar(b) && !py::isinstance<py::array>(b) &&
      !py::isinstance<py::list>(b) && !is_symbolic(b))
    return py::reinterpret_borrow<py::object>(Py_NotImplemented);
  return py::cast(binop(op, a, b, reflected));
}

}  // namespace

void bind_tensor(py::module_& m) {
  py::class_<Tensor> cls(m, "Tensor", R"doc(
A handle to device memory: (buffer, offset, shape, strides, dtype). Ops on tensors are
asynchronous; reading values (numpy(), item(), str()) waits for the writer. Views share memory.)doc");

  cls.def_property_readonly("shape", [](const Tensor& t) {
        if (t.dyn && t.buffer)
          t.device().abandon_recording("it reads the shape of a view whose length depends on a scalar argument");
        return py::tuple(py::cast(t.shape));
      },
                            "The shape as a tuple of ints.")
      .def_property_readonly("dtype", [](const Tensor& t) { return std::string(dtype_name(t.dtype)); },
                             "The element type: f32, f16, bf16, i32, i64, bool or a quantized type.")
      .def_property_readonly("ndim", &Tensor::ndim, "Number of dimensions.")
      .def_property_readonly("numel", &Tensor::numel, "Number of elements.")
      .def_property_readonly("strides", [](const Tensor& t) { return py::tuple(py::cast(t.strides)); },
                             "Strides in elements (0 on broadcast dims).")
      .def_property_readonly("offset", &Tensor::elem_offset, "Offset of the first element in its buffer, in elements.")
      .def_property_readonly("nbytes", &Tensor::nbytes, "Bytes of the elements (as if contiguous).")
      .def("is_contiguous", &Tensor::is_contiguous, "True if the tensor is row-major without gaps.")
      .def("numpy", &to_numpy,
           "Copy to a new NumPy array (waits for the writer; f16 -> float16, bf16 -> float32; "
           "quantized -> raw uint8 blocks [rows, row_bytes]).")
      .def("__array__", [](const Tensor& t, py::args, py::kwargs) { return to_numpy(t); },
           "NumPy array protocol (a copy).")
      .def("item", &item, "The value of a one-element tensor as a Python float, int or bool.")
      .def("tolist", [](const Tensor& t) { return to_numpy(t).attr("tolist")(); },
           "The values as (nested) Python lists.")
      .def("astype", [](const Tensor& t, py::handle d) { return astype(t, parse_dtype(d, "astype")); },
           py::arg("dtype"), "A copy converted to `dtype` (the tensor itself if it already has it).")
      .def("contiguous", &contiguous, "The tensor itself if contiguous, else a contiguous copy.")
      .def("reshape", [](const Tensor& t, py::args args) {
             if (args.size() == 1 && !is_scalar(args[0])) return reshape(t, parse_shape(args[0], "reshape"));
             return reshape(t, parse_shape(args, "reshape"));
           }, "reshape(shape) or reshape(d0, d1, ...): a view when contiguous (-1 infers one dim).")
      .def("transpose", [](const Tensor& t, int64_t a, int64_t b) { return transpose(t, a, b); },
           py::arg("d0") = -2, py::arg("d1") = -1, "Swap two dims (a view).")
      .def("permute", [](const Tensor& t, py::args dims) {
             if (dims.size() == 1 && !is_scalar(dims[0])) return permute(t, parse_shape(dims[0], "permute"));
             return permute(t, parse_shape(dims, "permute"));
           }, "Reorder dims (a view).")
      .def("expand", [](const Tensor& t, py::handle s) { return expand(t, parse_shape(s, "expand")); },
           py::arg("shape"), "Broadcast to `shape` (a view with stride 0 on new dims).")
      .def("squeeze", [](const Tensor& t, std::optional<int64_t> d) { return squeeze(t, d); },
           py::arg("dim") = py::none(), "Remove size-1 dims (all, or just `dim`).")
      .def("unsqueeze", &unsqueeze, py::arg("dim"), "Insert a size-1 dim at `dim`.")
      .def("flatten", &flatten, py::arg("start") = 0, py::arg("end") = -1, "Merge dims start..end.")
      .def("sum", [](const Tensor& t, std::optional<int64_t> d, bool k) { return reduce(ReduceOp::Sum, t, d, k); },
           py::arg("dim") = py::none(), py::arg("keepdim") = false, "Sum over all elements or one dim.")
      .def("mean", [](const Tensor& t, std::optional<int64_t> d, bool k) { return reduce(ReduceOp::Mean, t, d, k); },
           py::arg("dim") = py::none(), py::arg("keepdim") = false, "Mean over all elements or one dim.")
      .def("max", [](const Tensor& t, std::optional<int64_t> d, bool k) { return reduce(ReduceOp::Max, t, d, k); },
           py::arg("dim") = py::none(), py::arg("keepdim") = false, "Maximum over all elements or one dim.")
      .def("min", [](const Tensor& t, std::optional<int64_t> d, bool k) { return reduce(ReduceOp::Min, t, d, k); },
           py::arg("dim") = py::none(), py::arg("keepdim") = false, "Minimum over all elements or one dim.")
      .def("argmax", [](const Tensor& t, std::optional<int64_t> d, bool k) { return reduce(ReduceOp::ArgMax, t, d, k); },
           py::arg("dim") = py::none(), py::arg("keepdim") = false, "Index of the maximum (i64).")
      .def("argmin", [](const Tensor& t, std::optional<int64_t> d, bool k) { return reduce(ReduceOp::ArgMin, t, d, k); },
           py::arg("dim") = py::none(), py::arg("keepdim") = false, "Index of the minimum (i64).")
      .def("softmax", &softmax, py::arg("dim") = -1, "Softmax over `dim`.")
      .def("__len__", [](const Tensor& t) {
             if (t.ndim() == 0) throw py::type_error("len() of a 0-d tensor");
             return t.shape[0];
           }, "Size of the first dim.")
      .def("__bool__", [](const Tensor& t) {
             if (t.numel() != 1)
               throw py::value_error("the truth value of a tensor with " + std::to_string(t.numel()) +
                                     " elements is ambiguous");
             return py::bool_(item(t));
           }, "Truth value of a one-element tensor.")
      .def("__float__", [](const Tensor& t) { return py::float_(item(t)); }, "float() of a one-element tensor.")
      .def("__int__", [](const Tensor& t) { return py::int_(item(t)); }, "int() of a one-element tensor.")
      .def("__index__", [](const Tensor& t) {
             if (!is_integer(t.dtype)) throw py::type_error("only integer tensors can be used as an index");
             return py::int_(item(t));
           }, "operator.index() of a one-element integer tensor.")
      .def("__repr__", [](const Tensor& t) {
             return "Tensor(shape=" + shape_str(t.shape) + ", dtype=" + dtype_name(t.dtype) + ")";
           }, "Shape and dtype (does not wait for the device).")
      .def("__str__", [](const Tensor& t) {
             if (is_quantized(t.dtype))
               return "Tensor(shape=" + shape_str(t.shape) + ", dtype=" + dtype_name(t.dtype) + ")";
             return py::str(to_numpy(t)).cast<std::string>();
           }, "The values (waits for the writer).")
      .def("__getitem__", &get_index, py::arg("index"),
           "Index with ints, slices (steps, negative indices), None and ...: a view. A 1-D int "
           "tensor or list selects rows (a copy).")
      .def("__setitem__", [](const Tensor& t, py::handle idx, py::handle value) {
             if (py::isinstance<Tensor>(idx) || py::isinstance<py::list>(idx))
               throw py::type_error("index assignment with a tensor or list index is not supported");
             Tensor dst = get_index(t, idx);
             copy_into(dst, as_tensor(value, "__setitem__", &dst));
           }, py::arg("index"), py::arg("value"),
           "Write a tensor or scalar into the indexed view, in place (ordered after earlier readers).")
      .def("__neg__", [](const Tensor& t) { return unary(UnaryOp::Neg, t); }, "-x")
      .def("__abs__", [](const Tensor& t) { return unary(UnaryOp::Abs, t); }, "abs(x)")
      .def("__invert__", [](const Tensor& t) { return unary(UnaryOp::LogicalNot, t); }, "~x (logical not)")
      .def("__matmul__", [](const Tensor& a, py::handle b) { return matmul(a, as_tensor(b, "matmul")); }, "a @ b")
      .def("__rmatmul__", [](const Tensor& a, py::handle b) { return matmul(as_tensor(b, "matmul"), a); }, "b @ a");

  // Operators of the op table's binary ops (runtime/op_table.h); a reflected form (__radd__) where
  // the row says so. Comparisons have none: Python swaps the operands itself (a > b -> b < a).
  struct OpDef { const char* name; BinaryOp op; unsigned flags; const char* doc; };
#define TL_OPERATOR_DEF(Enum, name, dunder, flags, doc) {dunder, BinaryOp::Enum, flags, doc},
  static const OpDef defs[] = {TL_BINARY_OPS(TL_OPERATOR_DEF)};
#undef TL_OPERATOR_DEF
  for (const OpDef& d : defs) {
    if (!d.name) continue;  // maximum, minimum: functions only
    BinaryOp op = d.op;
    cls.def(d.name, [op](const Tensor& a, py::handle b) { return op_or_notimpl(op, a, b, false); },
            py::arg("other"), d.doc, py::is_operator());
    if (d.flags & kOpReflect) {
      std::string rname = "__r" + std::string(d.name + 2);  // __add__ -> __radd__
      cls.def(rname.c_str(), [op](const Tensor& a, py::handle b) { return op_or_notimpl(op, a, b, true); },
              py::arg("other"), d.doc, py::is_operator());
    }
  }
  cls.def("__floordiv__", [](const Tensor& a, py::handle b) {
            return unary(UnaryOp::Floor, binop(BinaryOp::Div, a, b, false));
          }, py::arg("other"), "Elementwise floor(a / b).", py::is_operator());
  cls.attr("__hash__") = py::none();
  cls.attr("__array_priority__") = 1000;
}

}  // namespace tl::py_bind
