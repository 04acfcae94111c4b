// Linear algebra and neural-network ops: see ops.h. Kernels get contiguous operands where
// kernels.h asks for them; the ops here make the copies.
#include <cmath>

#include "ops_internal.h"

namespace tl {

using detail::describe;
using detail::encode;
using detail::make_view;
using detail::new_tensor;
using detail::op_device;
using detail::op_device_dyn;
using detail::require_plain;

namespace {

Tensor to_float(const Tensor& x) { return is_floating(x.dtype) ? x : astype(x, DType::F32); }

// A 3-D kernel view [B, R, C] of x whose leading dims are `batch` (x is already expanded to
// batch + [R, C]); copies x when its batch dims cannot be described by one stride.
View batched_view(Tensor& x, const Shape& batch) {
  int nb = static_cast<int>(batch.size());
  int64_t B = 1;
  for (int64_t d : batch) B *= d;
  auto mergeable = [&](const Tensor& t, int64_t* stride) {
    int64_t s = 0;
    bool have = false;
    int64_t expect = 0;
    for (int i = nb - 1; i >= 0; --i) {
      if (t.shape[i] == 1) continue;
      if (!have) {
        s = t.strides[i];
        expect = s * t.shape[i];
        have = true;
      } else {
        if (s == 0 ? t.strides[i] != 0 : t.strides[i] != expect) return false;
        expect = t.strides[i] * t.shape[i];
      }
    }
    *stride = s;
    return true;
  };
  int64_t bs = 0;
  if (!mergeable(x, &bs)) {
    x = contiguous(x);
    bs = x.shape[nb] * x.shape[nb + 1];
  }
  View v;
  v.data = static_cast<char*>(x.buffer->data()) + x.byte_offset;
  v.dtype = x.dtype;
  v.ndim = 3;
  v.shape[0] = B;
  v.shape[1] = x.shape[nb];
  v.shape[2] = x.shape[nb + 1];
  v.strides[0] = bs;
  v.strides[1] = x.strides[nb];
  v.strides[2] = x.strides[nb + 1];
  return v;
}

}  // namespace

Tensor matmul(const Tensor& a0, const Tensor& b0) {
  auto dev = op_device({&a0, &b0}, "matmul");
  require_plain(a0, "matmul");
  require_plain(b0, "matmul");
  if (a0.ndim() == 0 || b0.ndim() == 0)
    throw ShapeError("matmul: operands must have at least one dim, got " + shape_str(a0.shape) +
                     " and " + shape_str(b0.shape));
  DType out_t = (a0.dtype == DType::F16 && b0.dtype == DType::F16) ? DType::F16 : DType::F32;
  Tensor a = a0.dtype == DType::F16 || a0.dtype == DType::F32 ? a0 : astype(a0, DType::F32);
  Tensor b = b0.dtype == DType::F16 || b0.dtype == DType::F32 ? b0 : astype(b0, DType::F32);
  bool a_vec = a.ndim() == 1, b_vec = b.ndim() == 1;
  if (a_vec) a = unsqueeze(a, 0);
  if (b_vec) b = unsqueeze(b, 1);
  int64_t M = a.shape[a.ndim() - 2], K = a.shape[a.ndim() - 1];
  int64_t K2 = b.shape[b.ndim() - 2], N = b.shape[b.ndim() - 1];
  if (K != K2)
    throw ShapeError("matmul: shapes " + shape_str(a0.shape) + " and " + shape_str(b0.shape) +
                     " are not aligned (" + std::to_string(K) + " != " + std::to_string(K2) + ")");
  Shape ab(a.shape.begin(), a.shape.end() - 2), bb(b.shape.begin(), b.shape.end() - 2);
  Shape batch = broadcast_shapes(ab, bb, "matmul");
  Shape ae = batch, be = batch;
  ae.push_back(M);
  ae.push_back(K);
  be.push_back(K);
  be.push_back(N);
  Tensor ax = expand(a, ae), bx = expand(b, be);
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = new_tensor(*dev, out_shape, out_t, "matmul");
  if (out.numel() > 0) {
    View av = batched_view(ax, batch), bv = batched_view(bx, batch);
    View ov;
    ov.data = out.buffer->data();
    ov.dtype = out_t;
    ov.ndim = 3;
    ov.shape[0] = av.shape[0];
    ov.shape[1] = M;
    ov.shape[2] = N;
    ov.strides[0] = M * N;
    ov.strides[1] = N;
    ov.strides[2] = 1;
    if (K == 0) {
      View fv = out.view();
      encode(*dev, [fv](Kernels& k) { k.fill(fv, 0.0); }, {}, {&out});
    } else {
      encode(*dev, [av, bv, ov](Kernels& k) { k.matmul(av, bv, ov); }, {&ax, &bx}, {&out});
    }
  }
  if (a_vec) out = squeeze(out, static_cast<int64_t>(out.ndim()) - 2);
  if (b_vec) out = squeeze(out, -1);
  return out;
}

Tensor linear(const Tensor& x0, const Tensor& w0, const std::optional<Tensor>& bias) {
  auto dev = op_device({&x0, &w0, bias ? &*bias : nullptr}, "linear");
  require_plain(x0, "linear");
  if (w0.ndim() != 2)
    throw ShapeError("linear: the weight must be 2-D [out, in], got " + describe(w0));
  if (x0.ndim() == 0 || x0.shape.back() != w0.shape[1])
    throw ShapeError("linear: input " + shape_str(x0.shape) + " does not match weight " +
                     shape_str(w0.shape) + " (last dim must be " + std::to_string(w0.shape[1]) + ")");
  int64_t K = w0.shape[1], N = w0.shape[0];
  int64_t M = x0.numel() / (K ? K : 1);
  if (K == 0) M = x0.numel() == 0 ? 0 : 1;
  // A bias (or a residual of the output's shape) is added in the kernel's epilogue.
  if (bias && K > 0 && M > 0 && N > 0) return fused_linear(x0, w0, LinearPrologue::None, std::nullopt, 0.0, bias);
  Tensor x = contiguous(astype(x0, DType::F32));
  x = reshape(x, {M, K});
  Tensor w = contiguous(w0);
  Tensor out = new_tensor(*dev, {M, N}, DType::F32, "linear");
  if (out.numel() > 0) {
    View xv = x.view(), wv = w.view(), ov = out.view();
    if (K == 0)
      encode(*dev, [ov](Kernels& k) { k.fill(ov, 0.0); }, {}, {&out});
    else if (is_quantized(w.dtype) && dev->debug().q8_takes(M) &&
             dev->kernels().q8_plan(w.dtype, M, N, K) != Kernels::Q8Plan::Exact)
      // --fast: every product (q8_rows 0), prompt pieces included, as llama.cpp's CPU products;
      // q8_rows 1 (TL_Q8_ACTIVATIONS alone) keeps longer products exact
      encode(*dev, [xv, wv, ov](Kernels& k) { k.linear_q8_activations(xv, wv, ov); }, {&x, &w}, {&out});
    else
      encode(*dev, [xv, wv, ov](Kernels& k) { k.linear(xv, wv, ov); }, {&x, &w}, {&out});
  }
  Shape shape(x0.shape.begin(), x0.shape.end() - 1);
  shape.push_back(N);
  out = reshape(out, shape);
  if (bias) out = binary(BinaryOp::Add, out, *bias);
  if (x0.dtype == DType::F16 || x0.dtype == DType::BF16) out = astype(out, x0.dtype);
  return out;
}

Tensor expert_linear(const Tensor& x0, const Tensor& w0, const Tensor& ids0, int64_t experts) {
  auto dev = op_device({&x0, &w0, &ids0}, "expert_linear");
  require_plain(x0, "expert_linear");
  if (!is_integer(ids0.dtype) || ids0.ndim() != 2)
    throw DTypeError("expert_linear: ids must be a 2-D i32/i64 tensor [tokens, k], got " + describe(ids0));
  Tensor w = w0;
  if (w0.ndim() == 3) {
    if (experts != 0 && experts != w0.shape[0])
      throw ShapeError("expert_linear: experts=" + std::to_string(experts) + " but the weight " +
                       shape_str(w0.shape) + " holds " + std::to_string(w0.shape[0]));
    experts = w0.shape[0];
    w = reshape(contiguous(w0), {w0.shape[0] * w0.shape[1], w0.shape[2]});
  } else if (w0.ndim() == 2) {
    if (experts <= 0 || w0.shape[0] % experts != 0)
      throw ShapeError("expert_linear: a 2-D weight [experts * out, in] needs experts > 0 dividing its " +
                       std::to_string(w0.shape[0]) + " rows, got experts=" + std::to_string(experts));
  } else {
    throw ShapeError("expert_linear: the weight must be [experts * out, in] or [experts, out, in], got " +
                     describe(w0));
  }
  const int64_t T = ids0.shape[0], k = ids0.shape[1], K = w.shape[1], N = w.shape[0] / experts;
  int64_t X = 1;
  if (x0.ndim() == 3 && (x0.shape[1] == 1 || x0.shape[1] == k)) X = x0.shape[1];
  else if (x0.ndim() != 2) X = -1;
  if (X < 0 || x0.shape[0] != T || x0.shape.back() != K)
    throw ShapeError("expert_linear: input " + shape_str(x0.shape) + " does not match ids " +
                     shape_str(ids0.shape) + " and weight rows of " + std::to_string(K) +
                     " (expected [tokens, in] or [tokens, 1 or k, in])");
  if (is_quantized(w.dtype) && K % block_elems(w.dtype) != 0)
    throw ShapeError(std::string("expert_linear: ") + dtype_name(w.dtype) + " rows of " +
                     std::to_string(K) + " are not whole blocks");
  Tensor x = reshape(contiguous(astype(x0, DType::F32)), {T, X, K});
  Tensor ids = contiguous(ids0);
  w = contiguous(w);
  Tensor out = new_tensor(*dev, {T, k, N}, DType::F32, "expert_linear");
  if (out.numel() > 0) {
    View xv = x.view(), wv = w.view(), iv = ids.view(), ov = out.view();
    if (K == 0)
      encode(*dev, [ov](Kernels& kn) { kn.fill(ov, 0.0); }, {}, {&out});
    else
      encode(*dev, [xv, wv, iv, experts, ov](Kernels& kn) { kn.expert_linear(xv, wv, iv, experts, ov); },
             {&x, &w, &ids}, {&out});
  }
  return out;
}

Tensor embedding(const Tensor& table, const Tensor& ids0) {
  auto dev = op_device({&table, &ids0}, "embedding");
  if (table.ndim() != 2)
    throw ShapeError("embedding: the table must be 2-D [vocab, dim], got " + describe(table));
  if (!is_integer(ids0.dtype))
    throw DTypeError("embedding: ids must be i32 or i64, got " + describe(ids0));
  Tensor ids = contiguous(ids0);
  Tensor flat = reshape(ids, {ids.numel()});
  DType out_t = table.dtype == DType::F16 ? DType::F16 : DType::F32;
  Tensor out = new_tensor(*dev, {flat.numel(), table.shape[1]}, out_t, "embedding");
  if (out.numel() > 0) {
    Tensor t = contiguous(table);
    View tv = t.view(), iv = flat.view(), ov = out.view();
    encode(*dev, [tv, iv, ov](Kernels& k) { k.gather_rows(tv, iv, ov); }, {&t, &flat}, {&out});
  }
  Shape shape = ids0.shape;
  shape.push_back(table.shape[1]);
  return reshape(out, shape);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& ids) {
  auto dev = op_device({&x, &ids}, "index_select");
  require_plain(x, "index_select");
  if (!is_integer(ids.dtype) || ids.ndim() > 1)
    throw DTypeError("index_select: ids must be a 0-d or 1-d i32/i64 tensor, got " + describe(ids));
  if (x.ndim() == 0) throw ShapeError("index_select: cannot index a 0-d tensor");
  int d = normalize_dim(dim, x.ndim(), "index_select");
  if (!is_floating(x.dtype) && x.dtype != DType::Bool)
    throw DTypeError("index_select: " + describe(x) + " is not supported (float or bool tensors)");
  // Move `dim` to the front, gather whole rows, move it back.
  std::vector<int64_t> perm;
  perm.push_back(d);
  for (int i = 0; i < x.ndim(); ++i)
    if (i != d) perm.push_back(i);
  Tensor src = x.dtype == DType::Bool ? astype(x, DType::F32) : x;
  Tensor moved = contiguous(permute(src, perm));
  int64_t rows = moved.shape[0];
  int64_t rest = rows ? moved.numel() / rows : 0;
  Tensor table = reshape(moved, {rows, rest});
  if (table.dtype == DType::BF16) table = astype(table, DType::F32);
  Tensor gathered = embedding(table, reshape(ids, {ids.numel()}));
  Shape shape = moved.shape;
  shape[0] = ids.numel();
  Tensor back = reshape(gathered, shape);
  std::vector<int64_t> inv(x.ndim());
  for (int i = 0; i < x.ndim(); ++i) inv[perm[i]] = i;
  Tensor out = permute(back, inv);
  if (ids.ndim() == 0) out = squeeze(out, d);
  if (out.dtype != x.dtype) out = astype(out, x.dtype);
  return out;
}

namespace {
Tensor norm_input(const Tensor& x, const char* op, int64_t* rows, int64_t* D) {
  require_plain(x, op);
  if (x.ndim() == 0) throw ShapeError(std::string(op) + ": input must have at least one dim");
  Tensor c = contiguous(to_float(x));
  *D = c.shape.back();
  *rows = *D ? c.numel() / *D : 0;
  return c;
}
void check_vec(const std::optional<Tensor>& v, int64_t D, const char* op, const char* what,
               const Tensor& x) {
  if (v && (v->ndim() != 1 || v->shape[0] != D))
    throw ShapeError(std::string(op) + ": " + what + " " + shape_str(v->shape) +
                     " does not match the last dim of " + shape_str(x.shape));
}
}  // namespace

Tensor rms_norm(const Tensor& x0, const std::optional<Tensor>& w0, double eps) {
  auto dev = op_device({&x0, w0 ? &*w0 : nullptr}, "rms_norm");
  int64_t rows, D;
  Tensor x = norm_input(x0, "rms_norm", &rows, &D);
  check_vec(w0, D, "rms_norm", "weight", x0);
  std::optional<Tensor> w;
  if (w0) w = contiguous(to_float(*w0));
  Tensor out = new_tensor(*dev, x.shape, x.dtype, "rms_norm");
  if (out.numel() == 0) return out;
  View xv = reshape(x, {rows, D}).view(), ov = reshape(out, {rows, D}).view();
  View wv = w ? w->view() : View{};
  float e = static_cast<float>(eps);
  encode(*dev, [xv, wv, e, ov](Kernels& k) { k.rms_norm(xv, wv, e, ov); },
         {&x, w ? &*w : nullptr}, {&out});
  return out;
}

Tensor layer_norm(const Tensor& x0, const std::optional<Tensor>& w0,
                  const std::optional<Tensor>& b0, double eps) {
  auto dev = op_device({&x0, w0 ? &*w0 : nullptr, b0 ? &*b0 : nullptr}, "layer_norm");
  int64_t rows, D;
  Tensor x = norm_input(x0, "layer_norm", &rows, &D);
  check_vec(w0, D, "layer_norm", "weight", x0);
  check_vec(b0, D, "layer_norm", "bias", x0);
  std::optional<Tensor> w, b;
  if (w0) w = contiguous(to_float(*w0));
  if (b0) b = contiguous(to_float(*b0));
  Tensor out = new_tensor(*dev, x.shape, x.dtype, "layer_norm");
  if (out.numel() == 0) return out;
  View xv = reshape(x, {rows, D}).view(), ov = reshape(out, {rows, D}).view();
  View wv = w ? w->view() : View{}, bv = b ? b->view() : View{};
  float e = static_cast<float>(eps);
  encode(*dev, [xv, wv, bv, e, ov](Kernels& k) { k.layer_norm(xv, wv, bv, e, ov); },
         {&x, w ? &*w : nullptr, b ? &*b : nullptr}, {&out});
  return out;
}

Tensor rope(const Tensor& x0, DynInt dyn_pos, double base, bool neox) {
  int64_t pos_offset = dyn_pos.value;
  auto dev = op_device({&x0}, "rope");
  require_plain(x0, "rope");
  if (x0.ndim() < 3)
    throw ShapeError("rope: input must be [..., seq, heads, head_dim], got " + shape_str(x0.shape));
  int64_t D = x0.shape.back(), H = x0.shape[x0.ndim() - 2], S = x0.shape[x0.ndim() - 3];
  if (D % 2 != 0) throw ShapeError("rope: head_dim must be even, got " + shape_str(x0.shape));
  if (pos_offset < 0) throw ShapeError("rope: position offset must be >= 0");
  Tensor x = contiguous(to_float(x0));
  const int64_t row_elems = S * H * D;
  int64_t outer = row_elems != 0 ? x.numel() / row_elems : 0;
  Tensor out = new_tensor(*dev, x.shape, x.dtype, "rope");
  if (out.numel() == 0) return out;
  View xv = reshape(x, {outer, S, H, D}).view(), ov = reshape(out, {outer, S, H, D}).view();
  float b = static_cast<float>(base);
  Command cmd = [xv, pos_offset, b, neox, ov](Kernels& k) { k.rope(xv, pos_offset, b, neox, ov); };
  if (detail::recording_dynamic(*dev, dyn_pos)) {
    detail::encode_dynamic(*dev, std::move(cmd),
                           [xv, dyn_pos, b, neox, ov](const ReplayContext& ctx) -> Command {
                             int64_t p = dyn_pos.at(ctx.scalars, "rope");
                             if (p < 0) throw ShapeError("rope: replayed position offset is negative");
                             return [xv, p, b, neox, ov](Kernels& k) { k.rope(xv, p, b, neox, ov); };
                           },
                           {&x}, {&out});
  } else {
    encode(*dev, std::move(cmd), {&x}, {&out});
  }
  return out;
}

Tensor causal_mask(int64_t n, int64_t m, int64_t offset) {
  auto dev = current_device();
  Tensor out = new_tensor(*dev, {n, m}, DType::F32, "causal_mask");
  if (out.numel() == 0) return out;
  View ov = out.view();
  encode(*dev, [offset, ov](Kernels& k) { k.causal_mask(offset, ov); }, {}, {&out});
  return out;
}

Tensor attention(const Tensor& q0, const Tensor& k0, const Tensor& v0,
                 const std::optional<Tensor>& mask0, std::optional<double> scale, bool causal,
                 DynInt dyn_pos, double softcap) {
  int64_t pos_offset = dyn_pos.value;
  auto dev = op_device_dyn({&q0, &k0, &v0, mask0 ? &*mask0 : nullptr}, "attention");
  if (dev->recording() && (q0.dyn || (mask0 && mask0->dyn)))
    dev->abandon_recording("attention's query or mask is a view whose length depends on a scalar argument");
  require_plain(q0, "attention");
  require_plain(k0, "attention");
  require_plain(v0, "attention");
  if (q0.ndim() != 3 || k0.ndim() != 3 || v0.ndim() != 3)
    throw ShapeError("attention: q, k, v must be 3-D [seq, heads, head_dim], got " +
                     shape_str(q0.shape) + ", " + shape_str(k0.shape) + ", " + shape_str(v0.shape));
  int64_t Sq = q0.shape[0], Hq = q0.shape[1], D = q0.shape[2];
  int64_t Sk = k0.shape[0], Hkv = k0.shape[1];
  if (k0.shape != v0.shape || k0.shape[2] != D || Hkv == 0 || Hq % Hkv != 0)
    throw ShapeError("attention: q " + shape_str(q0.shape) + " and k/v " + shape_str(k0.shape) +
                     "/" + shape_str(v0.shape) + " do not fit (same head_dim, q heads a multiple "
                     "of kv heads, k and v equal)");
  if (pos_offset < 0) throw ShapeError("attention: pos_offset must be >= 0");
  if (!(softcap >= 0.0) || std::isinf(softcap)) throw ShapeError("attention: softcap must be finite and >= 0");
  const float cap = static_cast<float>(softcap);
  Tensor q = to_float(q0), k = to_float(k0), v = to_float(v0);
  std::optional<Tensor> mask;
  if (mask0) {
    Shape bshape = broadcast_shapes(mask0->shape, {Sq, Sk}, "attention");
    if (bshape != Shape{Sq, Sk})
      throw ShapeError("attention: mask " + shape_str(mask0->shape) + " does not fit [" +
                       std::to_string(Sq) + ", " + std::to_string(Sk) + "]");
    mask = contiguous(astype(expand(*mask0, {Sq, Sk}), DType::F32));
  }
  float s = static_cast<float>(scale ? *scale : 1.0 / std::sqrt(static_cast<double>(D ? D : 1)));
  Tensor out = new_tensor(*dev, {Sq, Hq, D}, DType::F32, "attention");
  if (out.numel() == 0) return out;
  View qv = q.view(), kv = k.view(), vv = v.view(), ov = out.view();
  View mv = mask ? mask->view() : View{};
  Command cmd = [qv, kv, vv, mv, s, causal, pos_offset, ov, cap](Kernels& kn) {
    kn.attention(qv, kv, vv, mv, s, causal, pos_offset, ov, cap);
  };
  std::shared_ptr<const DynSlice> kd = k.dyn, vd = v.dyn;
  bool dynamic = dev->recording() && (dyn_pos.form || kd || vd);
  if (dynamic && mask && (kd || vd)) {
    dev->abandon_recording("attention with a mask over keys whose length depends on a scalar argument");
    dynamic = false;
  }
  if (!dynamic) {
    encode(*dev, std::move(cmd), {&q, &k, &v, mask ? &*mask : nullptr}, {&out});
    return out;
  }
  // Decode attention over a KV-cache prefix: the key/value length and the query position are
  // taken at replay.
  detail::encode_dynamic(
      *dev, std::move(cmd),
      [qv, kv, vv, mv, s, causal, dyn_pos, kd, vd, ov, cap](const ReplayContext& ctx) -> Command {
        View k2 = kd ? kd->rebuild(kv, ctx.scalars, "attention") : kv;
        View v2 = vd ? vd->rebuild(vv, ctx.scalars, "attention") : vv;
        if (k2.shape[0] != v2.shape[0])
          throw ShapeError("attention: replayed keys and values have different lengths");
        int64_t p = dyn_pos.at(ctx.scalars, "attention");
        if (p < 0) throw ShapeError("attention: replayed pos_offset is negative");
        return [qv, k2, v2, mv, s, causal, p, ov, cap](Kernels& kn) {
          kn.attention(qv, k2, v2, mv, s, causal, p, ov, cap);
        };
      },
      {&q, &k, &v, mask ? &*mask : nullptr}, {&out});
  return out;
}

}  // namespace tl

namespace tl {

Tensor attention_rows(const Tensor& q0, const Tensor& k0, const Tensor& v0, const std::vector<DynInt>& starts,
                      const std::vector<DynInt>& lens, std::optional<double> scale, double softcap) {
  const char* op = "attention_rows";
  auto dev = op_device({&q0, &k0, &v0}, op);
  for (const Tensor* t : {&q0, &k0, &v0}) require_plain(*t, op);
  if (q0.ndim() != 3 || k0.ndim() != 3 || k0.shape != v0.shape)
    throw ShapeError(std::string(op) + ": q must be [B, heads, head_dim] and k, v one [rows, kv_heads, head_dim] "
                     "shape, got " + shape_str(q0.shape) + ", " + shape_str(k0.shape) + ", " + shape_str(v0.shape));
  const int64_t B = q0.shape[0], Hq = q0.shape[1], D = q0.shape[2], R = k0.shape[0], Hkv = k0.shape[1];
  if (k0.shape[2] != D || Hkv == 0 || Hq % Hkv != 0)
    throw ShapeError(std::string(op) + ": q " + shape_str(q0.shape) + " and k/v " + shape_str(k0.shape) +
                     " do not fit (same head_dim, q heads a multiple of kv heads)");
  if (static_cast<int64_t>(starts.size()) != B || static_cast<int64_t>(lens.size()) != B)
    throw ShapeError(std::string(op) + ": " + std::to_string(starts.size()) + " starts and " +
                     std::to_string(lens.size()) + " lengths for " + std::to_string(B) + " query rows");
  if (!(softcap >= 0.0) || std::isinf(softcap)) throw ShapeError(std::string(op) + ": softcap must be finite and >= 0");
  // row b's keys: rows starts[b] .. starts[b] + lens[b] - 1 of k and v, checked (eager and at replay)
  auto rows_of = [op, B, R](const std::vector<int64_t>& s, const std::vector<int64_t>& n) {
    for (int64_t b = 0; b < B; ++b)
      if (s[b] < 0 || n[b] < 1 || s[b] + n[b] > R)
        throw ShapeError(std::string(op) + ": row " + std::to_string(b) + "'s keys " + std::to_string(s[b]) + ".." +
                         std::to_string(s[b] + n[b]) + " do not fit " + std::to_string(R) + " cache rows");
  };
  if (dev->recording() && (q0.dyn || k0.dyn || v0.dyn))
    dev->abandon_recording("attention_rows' operand is a view whose length depends on a scalar argument");
  Tensor q = to_float(q0), k = to_float(k0), v = to_float(v0);
  const float s = static_cast<float>(scale ? *scale : 1.0 / std::sqrt(static_cast<double>(D ? D : 1)));
  const float cap = static_cast<float>(softcap);
  Tensor out = new_tensor(*dev, {B, Hq, D}, DType::F32, op);
  if (out.numel() == 0) return out;
  View qv = q.view(), kv = k.view(), vv = v.view(), ov = out.view();
  auto command = [qv, kv, vv, s, ov, cap](std::vector<int64_t> st, std::vector<int64_t> ln) -> Command {
    return [qv, kv, vv, st = std::move(st), ln = std::move(ln), s, ov, cap](Kernels& kn) {
      kn.attention_rows(qv, kv, vv, st.data(), ln.data(), s, ov, cap);
    };
  };
  // a batched decode step: each replay takes every row's slot and key count from its scalars
  detail::encode_per_row(*dev, starts, lens, op, rows_of, command, {&q, &k, &v}, {&out});
  return out;
}

}  // namespace tl
