// Fused ops (see ops.h): one kernel where the unfused composition would encode several. Each
// validates exactly what its parts would, and computes what they compute (f32 throughout), so a
// program may use either form; the CPU backend's results equal the composition bit for bit.
#include <cmath>

#include "ops_internal.h"

namespace tl {

using detail::describe;
using detail::encode;
using detail::make_view;
using detail::new_tensor;
using detail::op_device;
using detail::require_plain;

namespace {

// [rows, cols] view of a tensor whose leading dims can be described by one stride (copies
// otherwise); a 1-D tensor is one row.
Tensor as_rows(const Tensor& x) {
  if (x.ndim() == 1) return make_view(x, {1, x.shape[0]}, {0, x.strides[0]}, x.byte_offset);
  if (x.ndim() == 2) return x;
  int64_t cols = x.shape.back();
  int64_t rows = cols ? x.numel() / cols : 0;
  // Leading dims merge when each one's stride is the next one's stride times its size.
  int64_t stride = 0;
  bool have = false, mergeable = true;
  int64_t expect = 0;
  for (int i = x.ndim() - 2; i >= 0; --i) {
    if (x.shape[i] == 1) continue;
    if (!have) {
      stride = x.strides[i];
      expect = stride * x.shape[i];
      have = true;
    } else if (x.strides[i] != expect) {
      mergeable = false;
      break;
    } else {
      expect = x.strides[i] * x.shape[i];
    }
  }
  if (!mergeable) return reshape(x, {rows, cols});
  return make_view(x, {rows, cols}, {stride, x.strides.back()}, x.byte_offset);
}

// A 3-D [S, H, D] view of x, which is [S, H, D] or [S, H * D] (columns split into heads of D).
Tensor as_heads(const Tensor& x, int64_t D, const char* op, const char* what) {
  if (x.ndim() == 3) {
    if (x.shape[2] != D)
      throw ShapeError(std::string(op) + ": " + what + " " + shape_str(x.shape) +
                       " does not have the cache's head_dim " + std::to_string(D));
    return x;
  }
  if (x.ndim() == 2 && D > 0 && x.shape[1] % D == 0)
    return make_view(x, {x.shape[0], x.shape[1] / D, D}, {x.strides[0], x.strides[1] * D, x.strides[1]},
                     x.byte_offset);
  throw ShapeError(std::string(op) + ": " + what + " must be [seq, heads, head_dim] or [seq, heads * " +
                   std::to_string(D) + "], got " + shape_str(x.shape));
}

void require_float_tensor(const Tensor& x, const char* op, const char* what) {
  if (!is_floating(x.dtype))
    throw DTypeError(std::string(op) + ": " + what + " must be a float tensor, got " + describe(x));
}

}  // namespace

Tensor fused_linear(const Tensor& x0, const Tensor& w0, LinearPrologue prologue,
                    const std::optional<Tensor>& norm_w0, double eps,
                    const std::optional<Tensor>& addend0) {
  const char* op = prologue == LinearPrologue::RmsNorm  ? "rms_norm_linear"
                   : prologue == LinearPrologue::SwiGLU ? "swiglu_linear"
                                                        : "linear";
  auto dev = op_device({&x0, &w0, norm_w0 ? &*norm_w0 : nullptr, addend0 ? &*addend0 : nullptr}, op);
  require_plain(x0, op);
  if (w0.ndim() != 2)
    throw ShapeError(std::string(op) + ": the weight must be 2-D [out, in], got " + describe(w0));
  const int64_t K = w0.shape[1], N = w0.shape[0];
  const int64_t in_cols = prologue == LinearPrologue::SwiGLU ? 2 * K : K;
  if (x0.ndim() == 0 || x0.shape.back() != in_cols)
    throw ShapeError(std::string(op) + ": input " + shape_str(x0.shape) + " does not match weight " +
                     shape_str(w0.shape) + " (last dim must be " + std::to_string(in_cols) +
                     (prologue == LinearPrologue::SwiGLU ? ", the gate and up halves)" : ")"));
  if (prologue != LinearPrologue::None && !is_floating(x0.dtype)) require_float_tensor(x0, op, "x");
  if (norm_w0 && (norm_w0->ndim() != 1 || norm_w0->shape[0] != K))
    throw ShapeError(std::string(op) + ": norm weight " + shape_str(norm_w0->shape) +
                     " does not match the last dim of " + shape_str(x0.shape));
  Shape full(x0.shape.begin(), x0.shape.end() - 1);
  full.push_back(N);
  const int64_t M = checked_numel(full, op) / (N ? N : 1);
  auto unfused_input = [&]() {
    if (prologue == LinearPrologue::RmsNorm) return rms_norm(x0, norm_w0, eps);
    if (prologue == LinearPrologue::SwiGLU) return swiglu(x0, std::nullopt);
    return x0;
  };
  if (K == 0 || M == 0 || N == 0) return linear(unfused_input(), w0, addend0);  // nothing to multiply
  const Kernels::Q8Plan plan = is_quantized(w0.dtype) && dev->debug().q8_takes(M)
                                   ? dev->kernels().q8_plan(w0.dtype, M, N, K)
                                   : Kernels::Q8Plan::Exact;
  const bool q8 = plan == Kernels::Q8Plan::Fused;
  if (plan == Kernels::Q8Plan::Unfused) {
    // 8-bit activations (--fast) apply to every product they cover, fused or not: without a fused
    // kernel for them the prologue and the addend run as their own ops around linear's 8-bit path
    Tensor y = linear(unfused_input(), w0, std::nullopt);
    if (addend0) y = binary(BinaryOp::Add, y, *addend0);
    if ((x0.dtype == DType::F16 || x0.dtype == DType::BF16) && y.dtype != x0.dtype) y = astype(y, x0.dtype);
    return y;
  }
  // The addend joins the kernel's epilogue when it is a float tensor that broadcasts to the
  // output without growing it: a full [.., N] residual, or a [N] bias (stride 0 over rows).
  std::optional<Tensor> addend;
  if (addend0) {
    op_device({&*addend0}, op);
    Shape b = broadcast_shapes(addend0->shape, full, op);
    if (b != full || !is_floating(addend0->dtype)) {
      Tensor y = fused_linear(x0, w0, prologue, norm_w0, eps, std::nullopt);
      return binary(BinaryOp::Add, y, *addend0);
    }
    require_plain(*addend0, op);
    if (addend0->ndim() == 1)
      addend = make_view(*addend0, {M, N}, {0, addend0->strides[0]}, addend0->byte_offset);
    else
      addend = as_rows(expand(*addend0, full));
  }
  Tensor x = contiguous(astype(x0, DType::F32));
  x = reshape(x, {M, in_cols});
  Tensor w = contiguous(w0);
  std::optional<Tensor> nw, scratch;
  if (prologue != LinearPrologue::None) scratch = new_tensor(*dev, {M, K}, DType::F32, op);
  if (prologue == LinearPrologue::RmsNorm && norm_w0)
    nw = contiguous(is_floating(norm_w0->dtype) ? *norm_w0 : astype(*norm_w0, DType::F32));
  Tensor out = new_tensor(*dev, {M, N}, DType::F32, op);
  View xv = x.view(), wv = w.view(), ov = out.view();
  View nv = nw ? nw->view() : View{}, av = addend ? addend->view() : View{};
  View sv = scratch ? scratch->view() : View{};
  float e = static_cast<float>(eps);
  encode(*dev,
         [xv, wv, prologue, nv, e, av, sv, ov, q8](Kernels& k) {
           if (q8)
             k.fused_linear_q8_activations(xv, wv, prologue, nv, e, av, sv, ov);
           else
             k.fused_linear(xv, wv, prologue, nv, e, av, sv, ov);
         },
         {&x, &w, nw ? &*nw : nullptr, addend ? &*addend : nullptr},
         {&out, scratch ? &*scratch : nullptr});
  out = reshape(out, full);
  if (x0.dtype == DType::F16 || x0.dtype == DType::BF16) out = astype(out, x0.dtype);
  return out;
}

Tensor rms_norm_linear(const Tensor& x, const std::optional<Tensor>& norm_w, const Tensor& w,
                       double eps, const std::optional<Tensor>& addend) {
  return fused_linear(x, w, LinearPrologue::RmsNorm, norm_w, eps, addend);
}

Tensor swiglu_linear(const Tensor& gate_up, const Tensor& w, const std::optional<Tensor>& addend) {
  return fused_linear(gate_up, w, LinearPrologue::SwiGLU, std::nullopt, 0.0, addend);
}

Tensor swiglu(const Tensor& gate0, const std::optional<Tensor>& up0) {
  auto dev = op_device({&gate0, up0 ? &*up0 : nullptr}, "swiglu");
  require_plain(gate0, "swiglu");
  require_float_tensor(gate0, "swiglu", up0 ? "gate" : "x");
  if (gate0.ndim() == 0) throw ShapeError("swiglu: input must have at least one dim");
  Tensor gate = gate0, up;
  if (up0) {
    require_plain(*up0, "swiglu");
    require_float_tensor(*up0, "swiglu", "up");
    if (up0->shape != gate0.shape)
      throw ShapeError("swiglu: gate " + shape_str(gate0.shape) + " and up " + shape_str(up0->shape) +
                       " must have one shape");
    up = *up0;
  } else {
    int64_t n2 = gate0.shape.back();
    if (n2 % 2 != 0)
      throw ShapeError("swiglu: the last dim of " + shape_str(gate0.shape) +
                       " must be even (gate and up halves)");
    gate = slice(gate0, -1, 0, n2 / 2, 1);
    up = slice(gate0, -1, n2 / 2, n2, 1);
  }
  Shape shape = gate.shape;
  Tensor g = as_rows(gate), u = as_rows(up);
  Tensor out = new_tensor(*dev, {g.shape[0], g.shape[1]}, DType::F32, "swiglu");
  if (out.numel() == 0) return reshape(out, shape);
  View gv = g.view(), uv = u.view(), ov = out.view();
  encode(*dev, [gv, uv, ov](Kernels& k) { k.swiglu(gv, uv, ov); }, {&g, &u}, {&out});
  return reshape(out, shape);
}

namespace {
// rope_kv_write's operands checked, q, k and v as [S, heads, head_dim] views.
struct RopeKvOperands {
  Tensor q, k, v;
  int64_t cap, S;
};
RopeKvOperands rope_kv_operands(const char* op, const Tensor& q0, const Tensor& k0, const Tensor& v0,
                                const Tensor& k_cache, const Tensor& v_cache) {
  for (const Tensor* t : {&q0, &k0, &v0, &k_cache, &v_cache}) {
    require_plain(*t, op);
    require_float_tensor(*t, op, "every operand");
  }
  if (k_cache.ndim() != 3 || k_cache.shape != v_cache.shape)
    throw ShapeError(std::string(op) + ": the K and V caches must be [capacity, kv_heads, head_dim] of one "
                     "shape, got " + shape_str(k_cache.shape) + " and " + shape_str(v_cache.shape));
  const int64_t cap = k_cache.shape[0], Hkv = k_cache.shape[1], D = k_cache.shape[2];
  if (D % 2 != 0) throw ShapeError(std::string(op) + ": head_dim must be even, got " + shape_str(k_cache.shape));
  Tensor q = as_heads(q0, D, op, "q"), k = as_heads(k0, D, op, "k"), v = as_heads(v0, D, op, "v");
  const int64_t S = q.shape[0];
  if (k.shape != Shape{S, Hkv, D} || v.shape != Shape{S, Hkv, D})
    throw ShapeError(std::string(op) + ": k " + shape_str(k.shape) + " and v " + shape_str(v.shape) +
                     " must be [" + std::to_string(S) + ", " + std::to_string(Hkv) + ", " +
                     std::to_string(D) + "] to fit q " + shape_str(q.shape) + " and the cache");
  if (Hkv == 0 || q.shape[1] % Hkv != 0)
    throw ShapeError(std::string(op) + ": query heads (" + std::to_string(q.shape[1]) +
                     ") must be a multiple of kv heads (" + std::to_string(Hkv) + ")");
  return {q, k, v, cap, S};
}
}  // namespace

Tensor rope_kv_write(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& k_cache,
                     const Tensor& v_cache, DynInt dyn_pos, double base, bool neox, DynInt dyn_row) {
  const char* op = "rope_kv_write";
  const int64_t pos = dyn_pos.value, row = dyn_row.value;
  auto dev = op_device({&q0, &k0, &v0, &k_cache, &v_cache}, op);
  const RopeKvOperands checked = rope_kv_operands(op, q0, k0, v0, k_cache, v_cache);
  const Tensor &q = checked.q, &k = checked.k, &v = checked.v;
  const int64_t cap = checked.cap, S = checked.S;
  if (pos < 0 || row < 0 || row + pos + S > cap)
    throw ShapeError(std::string(op) + ": positions " + std::to_string(pos) + ".." + std::to_string(pos + S) +
                     (row ? " from row " + std::to_string(row) : std::string()) + " do not fit a cache of " +
                     std::to_string(cap) + " positions");
  Tensor k_dst = slice(k_cache, 0, row + pos, row + pos + S, 1), v_dst = slice(v_cache, 0, row + pos, row + pos + S, 1);
  Tensor out = new_tensor(*dev, q.shape, DType::F32, op);
  if (out.numel() == 0) return out;
  View qv = q.view(), kv = k.view(), vv = v.view(), ov = out.view();
  View kd = k_dst.view(), vd = v_dst.view();
  float b = static_cast<float>(base);
  Command cmd = [qv, kv, vv, pos, b, neox, ov, kd, vd](Kernels& kn) {
    kn.rope_kv_write(qv, kv, vv, pos, b, neox, ov, kd, vd);
  };
  if (!detail::recording_dynamic(*dev, dyn_pos) && !detail::recording_dynamic(*dev, dyn_row)) {
    encode(*dev, std::move(cmd), {&q, &k, &v}, {&out, &k_dst, &v_dst});
    return out;
  }
  // Inside a compiled function with a position (or a first row: a slot of a slot store) that depends
  // on its scalar inputs (a decode step): each replay moves the cache rows to the replayed row and
  // position, checked against the capacity first.
  const int64_t row_k = k_cache.strides[0] * static_cast<int64_t>(block_bytes(k_cache.dtype));
  const int64_t row_v = v_cache.strides[0] * static_cast<int64_t>(block_bytes(v_cache.dtype));
  detail::encode_dynamic(
      *dev, std::move(cmd),
      [qv, kv, vv, pos, row, dyn_pos, dyn_row, cap, S, row_k, row_v, b, neox, ov, kd, vd](
          const ReplayContext& ctx) -> Command {
        const int64_t p = dyn_pos.at(ctx.scalars, "rope_kv_write");
        const int64_t r = dyn_row.at(ctx.scalars, "rope_kv_write");
        if (p < 0 || r < 0 || r + p + S > cap)
          throw ShapeError("rope_kv_write: replayed positions " + std::to_string(p) + ".." +
                           std::to_string(p + S) + (r ? " from row " + std::to_string(r) : std::string()) +
                           " do not fit a cache of " + std::to_string(cap) + " positions");
        View k2 = kd, v2 = vd;
        k2.data = static_cast<char*>(kd.data) + ((r + p) - (row + pos)) * row_k;
        v2.data = static_cast<char*>(vd.data) + ((r + p) - (row + pos)) * row_v;
        return [qv, kv, vv, p, b, neox, ov, k2, v2](Kernels& kn) {
          kn.rope_kv_write(qv, kv, vv, p, b, neox, ov, k2, v2);
        };
      },
      {&q, &k, &v}, {&out, &k_dst, &v_dst});
  return out;
}

Tensor rope_kv_write_rows(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& k_cache,
                          const Tensor& v_cache, const std::vector<DynInt>& pos, const std::vector<DynInt>& rows,
                          double base, bool neox) {
  const char* op = "rope_kv_write";
  auto dev = op_device({&q0, &k0, &v0, &k_cache, &v_cache}, op);
  const RopeKvOperands checked = rope_kv_operands(op, q0, k0, v0, k_cache, v_cache);
  const Tensor &q = checked.q, &k = checked.k, &v = checked.v;
  const int64_t cap = checked.cap, S = checked.S;
  if (static_cast<int64_t>(pos.size()) != S || static_cast<int64_t>(rows.size()) != S)
    throw ShapeError(std::string(op) + ": " + std::to_string(pos.size()) + " positions and " +
                     std::to_string(rows.size()) + " first rows for " + std::to_string(S) + " rows of q");
  auto check = [op, cap, S](const std::vector<int64_t>& p, const std::vector<int64_t>& r) {
    for (int64_t s = 0; s < S; ++s)
      if (p[s] < 0 || r[s] < 0 || r[s] + p[s] + 1 > cap)
        throw ShapeError(std::string(op) + ": row " + std::to_string(s) + "'s position " + std::to_string(p[s]) +
                         (r[s] ? " from row " + std::to_string(r[s]) : std::string()) + " does not fit a cache of " +
                         std::to_string(cap) + " positions");
  };
  Tensor out = new_tensor(*dev, q.shape, DType::F32, op);
  if (out.numel() == 0) return out;
  View qv = q.view(), kv = k.view(), vv = v.view(), ov = out.view(), kc = k_cache.view(), vc = v_cache.view();
  const float b = static_cast<float>(base);
  // row s: rope_kv_write's kernel on that row alone, at its position into its cache row
  auto command = [qv, kv, vv, ov, kc, vc, b, neox, S](std::vector<int64_t> p, std::vector<int64_t> r) -> Command {
    return [qv, kv, vv, ov, kc, vc, b, neox, S, p = std::move(p), r = std::move(r)](Kernels& kn) {
      auto row_of = [](const View& t, int64_t i) {
        View one = t;
        one.shape[0] = 1;
        one.data = static_cast<char*>(t.data) + i * t.strides[0] * block_bytes(t.dtype);
        return one;
      };
      for (int64_t s = 0; s < S; ++s)
        kn.rope_kv_write(row_of(qv, s), row_of(kv, s), row_of(vv, s), p[s], b, neox, row_of(ov, s),
                         row_of(kc, r[s] + p[s]), row_of(vc, r[s] + p[s]));
    };
  };
  // a batched decode step: each replay writes every row at its own slot and position
  detail::encode_per_row(*dev, pos, rows, op, check, command, {&q, &k, &v}, {&out, &k_cache, &v_cache});
  return out;
}

}  // namespace tl
