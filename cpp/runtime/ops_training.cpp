// Training ops (see ops.h): scatter_add_rows, the gradient of row gathers, and optimizer_update,
// one fused optimizer step per parameter written in place. Invariant: the per-step scalars of an
// optimizer step (the learning rate and the bias corrections) are DynScalars, so a compiled
// training step recomputes the kernel's constants from each replay's scalars with the same
// function (step_constants) an eager step uses: eager and replayed steps run identical kernels.
#include <cmath>

#include "ops_internal.h"

namespace tl {

using detail::describe;
using detail::encode;
using detail::new_tensor;
using detail::op_device;

Tensor scatter_add_rows(const Tensor& ids0, const Tensor& src0, int64_t rows) {
  const char* op = "scatter_add_rows";
  auto dev = op_device({&ids0, &src0}, op);
  if (!is_integer(ids0.dtype) || ids0.dtype == DType::Bool)
    throw DTypeError(std::string(op) + ": ids must be i32 or i64, got " + describe(ids0));
  if (!is_floating(src0.dtype))
    throw DTypeError(std::string(op) + ": src must be a float tensor, got " + describe(src0));
  if (src0.ndim() != 2 || src0.shape[0] != ids0.numel())
    throw ShapeError(std::string(op) + ": src must be [n, D] with n = the number of ids, got src " +
                     shape_str(src0.shape) + " and ids " + shape_str(ids0.shape));
  if (rows < 0) throw ShapeError(std::string(op) + ": rows must be >= 0, got " + std::to_string(rows));
  Tensor ids = reshape(contiguous(ids0), {ids0.numel()});
  Tensor src = contiguous(src0.dtype == DType::F32 ? src0 : astype(src0, DType::F32));
  Tensor out = full({rows, src.shape[1]}, 0.0, DType::F32);
  if (src.numel() == 0) {
    if (ids.numel() > 0 && rows == 0)
      throw ShapeError(std::string(op) + ": ids " + shape_str(ids0.shape) + " index an empty [0, " +
                       std::to_string(src.shape[1]) + "] output");
    return out;
  }
  View iv = ids.view(), sv = src.view(), ov = out.view();
  encode(*dev, [iv, sv, ov](Kernels& k) { k.scatter_add_rows(iv, sv, ov); }, {&ids, &src}, {&out});
  return out;
}

namespace {

OptimizerStep step_constants(const OptimizerConfig& c, double lr, double bias1, double bias2) {
  OptimizerStep s;
  s.kind = c.kind;
  s.decoupled = c.decoupled;
  s.nesterov = c.nesterov;
  s.weight_decay = c.decoupled ? 0.0f : static_cast<float>(c.weight_decay);
  s.decay = static_cast<float>(1.0 - lr * c.weight_decay);
  if (c.kind == OptimizerKind::Adam) {
    s.step = static_cast<float>(lr / bias1);
    s.beta1 = static_cast<float>(c.beta1);
    s.one_minus_beta1 = static_cast<float>(1.0 - c.beta1);
    s.beta2 = static_cast<float>(c.beta2);
    s.one_minus_beta2 = static_cast<float>(1.0 - c.beta2);
    s.bias2 = static_cast<float>(bias2);
    s.eps = static_cast<float>(c.eps);
  } else {
    s.step = static_cast<float>(lr);
    s.momentum = static_cast<float>(c.momentum);
  }
  return s;
}

void require_state(const Tensor& t, const Tensor& param, const char* op, const char* what) {
  if (t.dtype != DType::F32 || t.shape != param.shape || !t.is_contiguous())
    throw ShapeError(std::string(op) + ": " + what + " must be a contiguous f32 tensor of the parameter's shape " +
                     shape_str(param.shape) + ", got " + describe(t));
}

}  // namespace

void optimizer_update(const OptimizerConfig& c, const Tensor& param, const Tensor& grad0,
                      const std::optional<Tensor>& m, const std::optional<Tensor>& v, DynScalar lr,
                      DynScalar bias1, DynScalar bias2) {
  const char* op = c.kind == OptimizerKind::Adam ? (c.decoupled ? "adamw_update_" : "adam_update_") : "sgd_update_";
  auto dev = op_device({&param, &grad0, m ? &*m : nullptr, v ? &*v : nullptr}, op);
  require_state(param, param, op, "the parameter");
  if (grad0.shape != param.shape)
    throw ShapeError(std::string(op) + ": the gradient " + describe(grad0) + " does not match the parameter " +
                     describe(param));
  if (!is_floating(grad0.dtype))
    throw DTypeError(std::string(op) + ": the gradient must be a float tensor, got " + describe(grad0));
  if (c.kind == OptimizerKind::Adam && (!m || !v))
    throw ShapeError(std::string(op) + ": needs the first and second moment tensors m and v");
  if (m) require_state(*m, param, op, c.kind == OptimizerKind::Adam ? "m" : "the momentum buffer");
  if (v) require_state(*v, param, op, "v");
  if (c.kind == OptimizerKind::Adam && !(bias1.value > 0 && bias2.value > 0))
    throw ShapeError(std::string(op) + ": the bias corrections must be > 0 (step >= 1), got " +
                     std::to_string(bias1.value) + " and " + std::to_string(bias2.value));
  if (param.numel() == 0) return;
  Tensor grad = contiguous(grad0.dtype == DType::F32 ? grad0 : astype(grad0, DType::F32));
  View pv = param.view(), gv = grad.view();
  View mv = m ? m->view() : View{}, vv = v ? v->view() : View{};
  const OptimizerStep s = step_constants(c, lr.value, bias1.value, bias2.value);
  Command cmd = [s, pv, gv, mv, vv](Kernels& k) { k.optimizer_update(s, pv, gv, mv, vv); };
  const Tensor* mp = m ? &*m : nullptr;
  const Tensor* vp = v ? &*v : nullptr;
  if (!(detail::recording_dynamic(*dev, lr) || detail::recording_dynamic(*dev, bias1) ||
        detail::recording_dynamic(*dev, bias2))) {
    encode(*dev, std::move(cmd), {&grad}, {&param, mp, vp});
    return;
  }
  // A compiled training step: each replay's learning rate and step number give the constants.
  const OptimizerConfig cfg = c;
  detail::encode_dynamic(
      *dev, std::move(cmd),
      [cfg, lr, bias1, bias2, pv, gv, mv, vv, op](const ReplayContext& ctx) -> Command {
        const double b1 = bias1.at(ctx.scalars), b2 = bias2.at(ctx.scalars);
        if (cfg.kind == OptimizerKind::Adam && !(b1 > 0 && b2 > 0))
          throw ShapeError(std::string(op) + ": replayed bias corrections must be > 0");
        const OptimizerStep s2 = step_constants(cfg, lr.at(ctx.scalars), b1, b2);
        return [s2, pv, gv, mv, vv](Kernels& k) { k.optimizer_update(s2, pv, gv, mv, vv); };
      },
      {&grad}, {&param, mp, vp});
}

}  // namespace tl
