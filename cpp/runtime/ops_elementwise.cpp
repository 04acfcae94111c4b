// Elementwise ops, casts, copies and reductions: see ops.h for the rules every op follows.
#include <cmath>

#include "ops_internal.h"

namespace tl {

using detail::describe;
using detail::encode;
using detail::new_tensor;
using detail::op_device;
using detail::op_device_dyn;
using detail::require_plain;

namespace {

// Op names and flags come from the op table (op_table.h, through kernels.h).
const char* binary_name(BinaryOp op) { return op_name(op); }

bool returns_bool(BinaryOp op) { return op >= BinaryOp::Eq; }

// Broadcast view of x to `shape` (x's shape is broadcast-compatible with it).
Tensor expand_to(const Tensor& x, const Shape& shape) {
  if (x.shape == shape) return x;
  size_t n = shape.size(), off = n - x.shape.size();
  std::vector<int64_t> strides(n, 0);
  for (size_t i = 0; i < x.shape.size(); ++i)
    strides[off + i] = (x.shape[i] == 1 && shape[off + i] != 1) ? 0 : x.strides[i];
  return detail::make_view(x, shape, strides, x.byte_offset);
}

}  // namespace

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  auto dev = op_device({&a, &b}, name);
  require_plain(a, name);
  require_plain(b, name);
  Shape shape = broadcast_shapes(a.shape, b.shape, name);
  DType out_t;
  if (returns_bool(op)) {
    out_t = DType::Bool;
  } else {
    out_t = promote_types(a.dtype, b.dtype);
    if (op == BinaryOp::Div && !is_floating(out_t)) out_t = DType::F32;
    if (out_t == DType::Bool && op != BinaryOp::Maximum && op != BinaryOp::Minimum &&
        op != BinaryOp::Mul)
      out_t = DType::I64;
  }
  Tensor out = new_tensor(*dev, shape, out_t, name);
  if (out.numel() == 0) return out;
  View av = expand_to(a, shape).view(), bv = expand_to(b, shape).view(), ov = out.view();
  encode(*dev, [op, av, bv, ov](Kernels& k) { k.binary(op, av, bv, ov); }, {&a, &b}, {&out});
  return out;
}

Tensor binary_scalar(BinaryOp op, const Tensor& a, DynScalar dyn_s, bool s_is_float, bool scalar_first) {
  double s = dyn_s.value;
  const char* name = binary_name(op);
  auto dev = op_device({&a}, name);
  require_plain(a, name);
  DType out_t;
  if (returns_bool(op)) {
    out_t = DType::Bool;
  } else if (is_floating(a.dtype)) {
    out_t = a.dtype;
  } else if (s_is_float || op == BinaryOp::Div) {
    out_t = DType::F32;
  } else if (a.dtype == DType::Bool) {
    out_t = DType::I64;
  } else {
    out_t = a.dtype;
  }
  Tensor out = new_tensor(*dev, a.shape, out_t, name);
  if (out.numel() == 0) return out;
  View av = a.view(), ov = out.view();
  Command cmd = [op, av, s, scalar_first, ov](Kernels& k) { k.binary_scalar(op, av, s, scalar_first, ov); };
  if (detail::recording_dynamic(*dev, dyn_s)) {
    detail::encode_dynamic(*dev, std::move(cmd),
                           [op, av, dyn_s, scalar_first, ov](const ReplayContext& ctx) -> Command {
                             double v = dyn_s.at(ctx.scalars);
                             return [op, av, v, scalar_first, ov](Kernels& k) {
                               k.binary_scalar(op, av, v, scalar_first, ov);
                             };
                           },
                           {&a}, {&out});
  } else {
    encode(*dev, std::move(cmd), {&a}, {&out});
  }
  return out;
}

namespace {
const char* unary_name(UnaryOp op) { return op_name(op); }

bool keeps_integer_dtype(UnaryOp op) { return (op_flags(op) & kOpKeepsInt) != 0; }
}  // namespace

Tensor unary(UnaryOp op, const Tensor& x) {
  const char* name = unary_name(op);
  auto dev = op_device({&x}, name);
  require_plain(x, name);
  DType out_t = x.dtype;
  if (op == UnaryOp::LogicalNot) {
    out_t = DType::Bool;
  } else if (!is_floating(x.dtype)) {
    if (!keeps_integer_dtype(op)) out_t = DType::F32;
    else if (x.dtype == DType::Bool && op != UnaryOp::Step && op != UnaryOp::Relu &&
             op != UnaryOp::Abs)
      out_t = DType::I64;
  }
  Tensor out = new_tensor(*dev, x.shape, out_t, name);
  if (out.numel() == 0) return out;
  View xv = x.view(), ov = out.view();
  encode(*dev, [op, xv, ov](Kernels& k) { k.unary(op, xv, ov); }, {&x}, {&out});
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  auto dev = op_device({&cond, &a, &b}, "where");
  require_plain(cond, "where");
  require_plain(a, "where");
  require_plain(b, "where");
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape, a.shape, "where"), b.shape, "where");
  Tensor out = new_tensor(*dev, shape, promote_types(a.dtype, b.dtype), "where");
  if (out.numel() == 0) return out;
  View cv = expand_to(cond, shape).view(), av = expand_to(a, shape).view(),
       bv = expand_to(b, shape).view(), ov = out.view();
  encode(*dev, [cv, av, bv, ov](Kernels& k) { k.where(cv, av, bv, ov); }, {&cond, &a, &b}, {&out});
  return out;
}

Tensor astype(const Tensor& x, DType dtype) {
  if (x.dtype == dtype) return x;
  if (is_quantized(dtype))
    throw DTypeError(std::string("astype: cannot convert ") + describe(x) + " to quantized " +
                     dtype_name(dtype) + " (upload quantized weights with from_quantized)");
  if (is_quantized(x.dtype)) {
    // Dequantize: gather every row of the weight.
    if (dtype != DType::F32 && dtype != DType::F16)
      return astype(astype(x, DType::F32), dtype);
    auto dev = op_device({&x}, "astype");
    Tensor ids = arange(0, static_cast<double>(x.shape[0]), 1, DType::I64);
    Tensor out = new_tensor(*dev, x.shape, dtype, "astype");
    if (out.numel() == 0) return out;
    View tv = x.view(), iv = ids.view(), ov = out.view();
    encode(*dev, [tv, iv, ov](Kernels& k) { k.gather_rows(tv, iv, ov); }, {&x, &ids}, {&out});
    return out;
  }
  auto dev = op_device({&x}, "astype");
  Tensor out = new_tensor(*dev, x.shape, dtype, "astype");
  if (out.numel() == 0) return out;
  View xv = x.view(), ov = out.view();
  encode(*dev, [xv, ov](Kernels& k) { k.copy(xv, ov); }, {&x}, {&out});
  return out;
}

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  auto dev = op_device({&x}, "contiguous");
  Tensor out = new_tensor(*dev, x.shape, x.dtype, "contiguous");
  if (out.numel() == 0) return out;
  View xv = x.view(), ov = out.view();
  encode(*dev, [xv, ov](Kernels& k) { k.copy(xv, ov); }, {&x}, {&out});
  return out;
}

void copy_into(const Tensor& dst, const Tensor& src) {
  auto dev = op_device_dyn({&dst, &src}, "copy_");
  require_plain(dst, "copy_");
  require_plain(src, "copy_");
  Shape b = broadcast_shapes(src.shape, dst.shape, "copy_");
  if (b != dst.shape)
    throw ShapeError("copy_: cannot write a " + shape_str(src.shape) + " tensor into a " +
                     shape_str(dst.shape) + " destination");
  if (dst.numel() == 0) return;
  for (size_t i = 0; i < dst.shape.size(); ++i)
    if (dst.strides[i] == 0 && dst.shape[i] > 1)
      throw ShapeError("copy_: the destination " + shape_str(dst.shape) +
                       " is a broadcast view (several elements share memory)");
  bool dynamic = dev->recording() && (dst.dyn || src.dyn);
  if (dynamic && src.shape != dst.shape) {
    dev->abandon_recording("copy_ broadcasts into a view whose length depends on a scalar argument");
    dynamic = false;
  }
  if (!dynamic) {
    View sv = expand_to(src, dst.shape).view(), dv = dst.view();
    // dst is both written and (for ordering against earlier readers) retained.
    encode(*dev, [sv, dv](Kernels& k) { k.copy(sv, dv); }, {&src}, {&dst});
    return;
  }
  // A KV-cache write at a dynamic position: both views are rebuilt at replay; lengths must agree.
  View sv = src.view(), dv = dst.view();
  std::shared_ptr<const DynSlice> sd = src.dyn, dd = dst.dyn;
  detail::encode_dynamic(*dev, [sv, dv](Kernels& k) { k.copy(sv, dv); },
                         [sv, dv, sd, dd](const ReplayContext& ctx) -> Command {
                           View s2 = sd ? sd->rebuild(sv, ctx.scalars, "copy_") : sv;
                           View d2 = dd ? dd->rebuild(dv, ctx.scalars, "copy_") : dv;
                           for (int i = 0; i < s2.ndim; ++i)
                             if (s2.shape[i] != d2.shape[i])
                               throw ShapeError("copy_: replayed source and destination lengths differ");
                           return [s2, d2](Kernels& k) { k.copy(s2, d2); };
                         },
                         {&src}, {&dst});
}

void fill_into(const Tensor& dst, DynScalar value) {
  auto dev = op_device({&dst}, "fill_");
  require_plain(dst, "fill_");
  if (dst.numel() == 0) return;
  for (size_t i = 0; i < dst.shape.size(); ++i)
    if (dst.strides[i] == 0 && dst.shape[i] > 1)
      throw ShapeError("fill_: the destination " + shape_str(dst.shape) + " is a broadcast view");
  View dv = dst.view();
  double v = value.value;
  Command cmd = [dv, v](Kernels& k) { k.fill(dv, v); };
  if (detail::recording_dynamic(*dev, value)) {
    detail::encode_dynamic(*dev, std::move(cmd),
                           [dv, value](const ReplayContext& ctx) -> Command {
                             double x = value.at(ctx.scalars);
                             return [dv, x](Kernels& k) { k.fill(dv, x); };
                           },
                           {}, {&dst});
  } else {
    encode(*dev, std::move(cmd), {}, {&dst});
  }
}

namespace {
const char* reduce_name(ReduceOp op) { return op_name(op); }
}  // namespace

Tensor reduce(ReduceOp op, const Tensor& x0, std::optional<int64_t> dim, bool keepdim) {
  const char* name = reduce_name(op);
  auto dev = op_device({&x0}, name);
  require_plain(x0, name);
  Tensor x = contiguous(x0);
  int64_t outer = 1, n = 1, inner = 1;
  Shape out_shape;
  if (!dim) {
    n = x.numel();
    if (keepdim) out_shape.assign(x.shape.size(), 1);
  } else {
    int d = normalize_dim(*dim, std::max(1, x.ndim()), name);
    if (x.ndim() == 0) {
      n = 1;
    } else {
      for (int i = 0; i < d; ++i) outer *= x.shape[i];
      n = x.shape[d];
      for (int i = d + 1; i < x.ndim(); ++i) inner *= x.shape[i];
      for (int i = 0; i < x.ndim(); ++i) {
        if (i == d) {
          if (keepdim) out_shape.push_back(1);
        } else {
          out_shape.push_back(x.shape[i]);
        }
      }
    }
  }
  DType out_t;
  if (op == ReduceOp::ArgMax || op == ReduceOp::ArgMin) out_t = DType::I64;
  else if (is_floating(x.dtype)) out_t = x.dtype;
  else if (op == ReduceOp::Mean) out_t = DType::F32;
  else out_t = DType::I64;
  if (n == 0 && op != ReduceOp::Sum)
    throw ShapeError(std::string(name) + ": cannot reduce over an empty dimension of " +
                     shape_str(x.shape));
  Tensor out = new_tensor(*dev, out_shape, out_t, name);
  if (out.numel() == 0) return out;
  if (n == 0) {
    View ov = out.view();
    encode(*dev, [ov](Kernels& k) { k.fill(ov, 0.0); }, {}, {&out});
    return out;
  }
  View xv = x.view(), ov = out.view();
  encode(*dev, [op, xv, outer, n, inner, ov](Kernels& k) { k.reduce(op, xv, outer, n, inner, ov); },
         {&x}, {&out});
  return out;
}

Tensor softmax(const Tensor& x0, int64_t dim) {
  auto dev = op_device({&x0}, "softmax");
  require_plain(x0, "softmax");
  Tensor x = contiguous(is_floating(x0.dtype) ? x0 : astype(x0, DType::F32));
  if (x.ndim() == 0) x = reshape(x, {1});
  int d = normalize_dim(dim, x.ndim(), "softmax");
  int64_t outer = 1, inner = 1, n = x.shape[d];
  for (int i = 0; i < d; ++i) outer *= x.shape[i];
  for (int i = d + 1; i < x.ndim(); ++i) inner *= x.shape[i];
  Tensor out = new_tensor(*dev, x.shape, x.dtype, "softmax");
  if (x0.ndim() == 0) out = reshape(out, {});
  if (out.numel() == 0) return out;
  View xv = x.view(), ov = out.view();
  encode(*dev, [xv, outer, n, inner, ov](Kernels& k) { k.softmax(xv, outer, n, inner, ov); },
         {&x}, {&out});
  return out;
}

Tensor log_softmax(const Tensor& x0, int64_t dim) {
  op_device({&x0}, "log_softmax");
  require_plain(x0, "log_softmax");
  Tensor x = is_floating(x0.dtype) ? x0 : astype(x0, DType::F32);
  if (x.ndim() == 0) x = reshape(x, {1});
  int d = normalize_dim(dim, x.ndim(), "log_softmax");
  Tensor shifted = binary(BinaryOp::Sub, x, reduce(ReduceOp::Max, x, d, true));
  Tensor lse = unary(UnaryOp::Log, reduce(ReduceOp::Sum, unary(UnaryOp::Exp, shifted), d, true));
  Tensor out = binary(BinaryOp::Sub, shifted, lse);
  return x0.ndim() == 0 ? reshape(out, {}) : out;
}

}  // namespace tl
