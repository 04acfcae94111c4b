// Shape ops: views that share the buffer whenever the layout allows, copies otherwise.
#include <algorithm>
#include <numeric>

#include "ops_internal.h"

namespace tl {

using detail::encode;
using detail::make_view;
using detail::new_tensor;
using detail::op_device;
using detail::require_plain;

namespace {
std::string i2s(int64_t v) { return std::to_string(v); }
}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape_in) {
  op_device({&x}, "reshape");
  Shape shape = shape_in;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw ShapeError("reshape: only one dimension can be -1, got " + shape_str(shape_in));
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw ShapeError("reshape: negative dimension in " + shape_str(shape_in));
    } else {
      known *= shape[i];
    }
  }
  int64_t n = x.numel();
  if (infer >= 0) {
    if (known == 0 || n % known != 0)
      throw ShapeError("reshape: cannot reshape " + shape_str(x.shape) + " (" + i2s(n) +
                       " elements) into " + shape_str(shape_in));
    shape[infer] = n / known;
  }
  checked_numel(shape, "reshape");
  int64_t m = 1;
  for (int64_t d : shape) m *= d;
  if (m != n)
    throw ShapeError("reshape: cannot reshape " + shape_str(x.shape) + " (" + i2s(n) +
                     " elements) into " + shape_str(shape_in) + " (" + i2s(m) + " elements)");
  if (is_quantized(x.dtype)) {
    if (shape != x.shape)
      throw DTypeError(std::string("reshape: quantized ") + dtype_name(x.dtype) +
                       " tensors keep their [rows, cols] shape");
    return x;
  }
  Tensor c = contiguous(x);
  return make_view(c, shape, contiguous_strides(shape), c.byte_offset);
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  op_device({&x}, "transpose");
  require_plain(x, "transpose");
  if (x.ndim() < 2 && (d0 == -2 && d1 == -1)) return x;  // 0-D / 1-D: transpose is the identity
  int a = normalize_dim(d0, x.ndim(), "transpose"), b = normalize_dim(d1, x.ndim(), "transpose");
  Shape shape = x.shape;
  std::vector<int64_t> strides = x.strides;
  std::swap(shape[a], shape[b]);
  std::swap(strides[a], strides[b]);
  return make_view(x, shape, strides, x.byte_offset);
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  op_device({&x}, "permute");
  require_plain(x, "permute");
  if (static_cast<int>(dims.size()) != x.ndim())
    throw ShapeError("permute: " + i2s(static_cast<int64_t>(dims.size())) +
                     " dims given for a tensor of rank " + i2s(x.ndim()) + " " + shape_str(x.shape));
  std::vector<bool> seen(x.ndim(), false);
  Shape shape(x.ndim());
  std::vector<int64_t> strides(x.ndim());
  for (int i = 0; i < x.ndim(); ++i) {
    int d = normalize_dim(dims[i], x.ndim(), "permute");
    if (seen[d]) throw ShapeError("permute: dims " + shape_str(dims) + " are not a permutation");
    seen[d] = true;
    shape[i] = x.shape[d];
    strides[i] = x.strides[d];
  }
  return make_view(x, shape, strides, x.byte_offset);
}

Tensor expand(const Tensor& x, const Shape& shape_in) {
  op_device({&x}, "expand");
  require_plain(x, "expand");
  if (shape_in.size() < x.shape.size())
    throw ShapeError("expand: cannot expand " + shape_str(x.shape) + " to fewer dims " +
                     shape_str(shape_in));
  size_t off = shape_in.size() - x.shape.size();
  Shape shape = shape_in;
  std::vector<int64_t> strides(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < off) {
      if (shape[i] < 0) throw ShapeError("expand: -1 is not allowed for new leading dims");
      continue;
    }
    int64_t src = x.shape[i - off];
    if (shape[i] == -1) shape[i] = src;
    if (src == shape[i]) {
      strides[i] = x.strides[i - off];
    } else if (src == 1) {
      strides[i] = 0;
    } else {
      throw ShapeError("expand: cannot broadcast " + shape_str(x.shape) + " to " + shape_str(shape_in));
    }
  }
  checked_numel(shape, "expand");
  return make_view(x, shape, strides, x.byte_offset);
}

Tensor squeeze(const Tensor& x, std::optional<int64_t> dim) {
  op_device({&x}, "squeeze");
  require_plain(x, "squeeze");
  Shape shape;
  std::vector<int64_t> strides;
  int only = dim ? normalize_dim(*dim, std::max(1, x.ndim()), "squeeze") : -1;
  if (x.ndim() == 0) return x;
  for (int i = 0; i < x.ndim(); ++i) {
    bool drop = x.shape[i] == 1 && (only < 0 || only == i);
    if (!drop) {
      shape.push_back(x.shape[i]);
      strides.push_back(x.strides[i]);
    }
  }
  return make_view(x, shape, strides, x.byte_offset);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  op_device({&x}, "unsqueeze");
  require_plain(x, "unsqueeze");
  int d = normalize_dim(dim, x.ndim() + 1, "unsqueeze");
  Shape shape = x.shape;
  std::vector<int64_t> strides = x.strides;
  int64_t s = d < x.ndim() ? x.strides[d] * x.shape[d] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, s);
  if (shape.size() > static_cast<size_t>(kMaxDims))
    throw ShapeError("unsqueeze: rank would exceed the maximum rank " + i2s(kMaxDims));
  return make_view(x, shape, strides, x.byte_offset);
}

Tensor flatten(const Tensor& x, int64_t start, int64_t end) {
  op_device({&x}, "flatten");
  if (x.ndim() == 0) return reshape(x, {1});
  int s = normalize_dim(start, x.ndim(), "flatten"), e = normalize_dim(end, x.ndim(), "flatten");
  if (s > e) throw ShapeError("flatten: start dim " + i2s(start) + " is after end dim " + i2s(end));
  Shape shape(x.shape.begin(), x.shape.begin() + s);
  int64_t n = 1;
  for (int i = s; i <= e; ++i) n *= x.shape[i];
  shape.push_back(n);
  shape.insert(shape.end(), x.shape.begin() + e + 1, x.shape.end());
  return reshape(x, shape);
}

Tensor slice(const Tensor& x, int64_t dim, std::optional<int64_t> start_in,
             std::optional<int64_t> stop_in, int64_t step) {
  op_device({&x}, "slice");
  if (x.ndim() == 0) throw ShapeError("slice: cannot slice a 0-d tensor");
  int d = normalize_dim(dim, x.ndim(), "slice");
  if (step == 0) throw ShapeError("slice: step must not be zero");
  int64_t len = x.shape[d];
  int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? len : len - 1;
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t i = *v;
    if (i < 0) i += len;
    return std::min(std::max(i, lower), upper);
  };
  int64_t start = clamp(start_in, step > 0 ? lower : upper);
  int64_t stop = clamp(stop_in, step > 0 ? upper : lower);
  int64_t count = 0;
  if (step > 0 && stop > start) count = (stop - start + step - 1) / step;
  if (step < 0 && start > stop) count = (start - stop + (-step) - 1) / (-step);
  if (is_quantized(x.dtype)) {
    if (d != 0 || step != 1)
      throw DTypeError(std::string("slice: quantized ") + dtype_name(x.dtype) +
                       " tensors can only be sliced by whole rows (dim 0, step 1)");
    Shape shape = {count, x.shape[1]};
    int64_t off = x.byte_offset + (count ? start : 0) * static_cast<int64_t>(row_bytes(x.dtype, x.shape[1]));
    return make_view(x, shape, x.strides, off);
  }
  Shape shape = x.shape;
  std::vector<int64_t> strides = x.strides;
  shape[d] = count;
  strides[d] = x.strides[d] * step;
  int64_t off = x.byte_offset + (count ? start * x.strides[d] * block_bytes(x.dtype) : 0);
  return make_view(x, shape, strides, off);
}

Tensor slice_dynamic(const Tensor& x, int64_t dim, DynInt start, DynInt stop) {
  auto dev = op_device({&x}, "slice");
  bool dynamic = dev->recording() && (start.form || stop.form);
  if (!dynamic) return slice(x, dim, start.value, stop.value, 1);
  if (x.ndim() == 0) throw ShapeError("slice: cannot slice a 0-d tensor");
  int d = normalize_dim(dim, x.ndim(), "slice");
  int64_t len = x.shape[d];
  if (is_quantized(x.dtype) || start.value < 0 || stop.value < start.value || stop.value > len) {
    dev->abandon_recording("a slice with a bound that depends on a scalar argument is empty, "
                           "negative or clamped");
    return slice(x, dim, start.value, stop.value, 1);
  }
  Tensor out = slice(x, dim, start.value, stop.value, 1);
  auto dyn = std::make_shared<DynSlice>();
  dyn->dim = d;
  dyn->base_len = len;
  dyn->stride_bytes = x.strides[d] * static_cast<int64_t>(block_bytes(x.dtype));
  dyn->start = start;
  dyn->stop = stop;
  if (out.numel() == 0) {
    dev->abandon_recording("a slice with a bound that depends on a scalar argument is empty");
    return out;
  }
  out.dyn = std::move(dyn);
  return out;
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  op_device({&x}, "select");
  require_plain(x, "select");
  if (x.ndim() == 0) throw ShapeError("select: cannot index a 0-d tensor");
  int d = normalize_dim(dim, x.ndim(), "select");
  int64_t len = x.shape[d];
  int64_t i = index < 0 ? index + len : index;
  if (i < 0 || i >= len)
    throw std::out_of_range("index " + i2s(index) + " is out of range for dim " + i2s(d) +
                            " of size " + i2s(len) + " (shape " + shape_str(x.shape) + ")");
  Shape shape = x.shape;
  std::vector<int64_t> strides = x.strides;
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return make_view(x, shape, strides, x.byte_offset + i * x.strides[d] * block_bytes(x.dtype));
}

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  if (xs.empty()) throw ShapeError("concat: needs at least one tensor");
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : xs) ptrs.push_back(&t);
  auto dev = current_device();
  for (const Tensor& t : xs) {
    op_device({&t}, "concat");
    require_plain(t, "concat");
  }
  const Tensor& first = xs[0];
  if (first.ndim() == 0) throw ShapeError("concat: cannot concatenate 0-d tensors");
  int d = normalize_dim(dim, first.ndim(), "concat");
  Shape shape = first.shape;
  DType dtype = first.dtype;
  int64_t total = 0;
  for (const Tensor& t : xs) {
    bool ok = t.ndim() == first.ndim();
    for (int i = 0; ok && i < t.ndim(); ++i)
      if (i != d && t.shape[i] != first.shape[i]) ok = false;
    if (!ok)
      throw ShapeError("concat: shapes " + shape_str(first.shape) + " and " + shape_str(t.shape) +
                       " differ outside dim " + i2s(d));
    total += t.shape[d];
    dtype = promote_types(dtype, t.dtype);
  }
  shape[d] = total;
  Tensor out = new_tensor(*dev, shape, dtype, "concat");
  int64_t pos = 0;
  for (const Tensor& t : xs) {
    if (t.shape[d] > 0) {
      Tensor dst = slice(out, d, pos, pos + t.shape[d], 1);
      if (dst.numel() > 0) {
        View sv = t.view(), dv = dst.view();
        encode(*dev, [sv, dv](Kernels& k) { k.copy(sv, dv); }, {&t}, {&out});
      }
    }
    pos += t.shape[d];
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  if (xs.empty()) throw ShapeError("stack: needs at least one tensor");
  int d = normalize_dim(dim, xs[0].ndim() + 1, "stack");
  std::vector<Tensor> parts;
  for (const Tensor& t : xs) {
    if (t.shape != xs[0].shape)
      throw ShapeError("stack: shapes " + shape_str(xs[0].shape) + " and " + shape_str(t.shape) +
                       " differ");
    parts.push_back(unsqueeze(t, d));
  }
  return concat(parts, d);
}

std::vector<Tensor> split_sizes(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  op_device({&x}, "split");
  int d = normalize_dim(dim, x.ndim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) throw ShapeError("split: negative size in " + shape_str(sizes));
    total += s;
  }
  if (total != x.shape[d])
    throw ShapeError("split: sizes " + shape_str(sizes) + " do not add up to " +
                     i2s(x.shape[d]) + " (dim " + i2s(d) + " of " + shape_str(x.shape) + ")");
  std::vector<Tensor> out;
  int64_t pos = 0;
  for (int64_t s : sizes) {
    out.push_back(slice(x, d, pos, pos + s, 1));
    pos += s;
  }
  return out;
}

std::vector<Tensor> split_n(const Tensor& x, int64_t n, int64_t dim) {
  op_device({&x}, "split");
  int d = normalize_dim(dim, x.ndim(), "split");
  if (n <= 0 || x.shape[d] % n != 0)
    throw ShapeError("split: dim " + i2s(d) + " of " + shape_str(x.shape) +
                     " cannot be split into " + i2s(n) + " equal parts");
  return split_sizes(x, std::vector<int64_t>(n, x.shape[d] / n), d);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t n, int64_t dim) {
  op_device({&x}, "chunk");
  int d = normalize_dim(dim, x.ndim(), "chunk");
  if (n <= 0) throw ShapeError("chunk: the number of chunks must be positive, got " + i2s(n));
  int64_t len = x.shape[d];
  int64_t size = std::max<int64_t>(1, (len + n - 1) / n);
  std::vector<Tensor> out;
  for (int64_t pos = 0; pos < len; pos += size) out.push_back(slice(x, d, pos, std::min(len, pos + size), 1));
  if (out.empty()) out.push_back(x);
  return out;
}

}  // namespace tl
