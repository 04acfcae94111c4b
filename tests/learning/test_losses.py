"""The loss and activation builtins (builtins/losses.py) against NumPy transcriptions of PyTorch's
definitions (torch.nn.functional, aten's LossNLL.cpp for label smoothing): values and gradients (float64
central finite differences), every reduction, class weights, ignore_index, label smoothing, soft targets."""
from __future__ import annotations

import numpy as np
import pytest

import tensorlogic
from gradcheck import check, rand
from tensorlogic.builtins.registry import BUILTINS, KeywordArg


def b(name):
    return BUILTINS[name].fn


def kw(**named):
    return [KeywordArg(k, v) for k, v in named.items()]


def log_softmax_np(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def nll_np(logp, target, weight=None, ignore_index=-100, reduction="mean"):
    """torch.nn.functional.nll_loss for [N, C] input and [N] targets."""
    w = np.ones(logp.shape[-1]) if weight is None else weight
    valid = target != ignore_index
    safe = np.where(valid, target, 0)
    w_rows = w[safe] * valid
    loss = -logp[np.arange(len(target)), safe] * w_rows
    if reduction == "mean":
        return loss.sum() / w_rows.sum()
    return loss.sum() if reduction == "sum" else loss


def cross_entropy_np(x, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """torch.nn.functional.cross_entropy with integer targets (aten's cross_entropy_loss_label_smoothing)."""
    logp = log_softmax_np(x)
    nll = nll_np(logp, target, weight, ignore_index, reduction)
    if not label_smoothing:
        return nll
    valid = target != ignore_index
    smooth = -(logp * (1.0 if weight is None else weight)).sum(-1) * valid
    if reduction == "mean":
        w = np.ones(x.shape[-1]) if weight is None else weight
        smooth = smooth.sum() / w[np.where(valid, target, 0)][valid].sum()
    elif reduction == "sum":
        smooth = smooth.sum()
    return (1 - label_smoothing) * nll + smooth * label_smoothing / x.shape[-1]


TARGETS = np.array([2, 0, 3, 1, 2])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [-100, 2])
def test_cross_entropy_matches_pytorch_definition(reduction, smoothing, weighted, ignore):
    weight = np.array([0.5, 2.0, 1.0, 1.5])
    x = rand(5, 4) * 2
    consts = kw(weight=weight.tolist() if weighted else None, ignore_index=ignore, reduction=reduction,
                label_smoothing=smoothing)
    check(lambda t, *c: b("cross_entropy")(t, TARGETS.tolist(), *c),
          lambda a, *c: cross_entropy_np(a, TARGETS, weight if weighted else None, ignore, reduction, smoothing),
          [x], consts=consts)


def test_cross_entropy_with_class_probabilities_and_one_sample():
    probs = np.abs(rand(3, 4)) + 0.1
    probs /= probs.sum(-1, keepdims=True)
    check(lambda x, y: b("cross_entropy")(x, y), lambda x, y: -(log_softmax_np(x) * y).sum(-1).mean(),
          [rand(3, 4), probs])
    check(lambda x: b("cross_entropy")(x, 1), lambda x: -log_softmax_np(x)[1], [rand(4)])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss(reduction):
    weight = np.array([1.0, 0.25, 3.0, 1.0])
    check(lambda t, *c: b("nll_loss")(t, TARGETS.tolist(), *c),
          lambda a, *c: nll_np(a, TARGETS, weight, 3, reduction), [rand(5, 4)],
          consts=kw(weight=weight.tolist(), ignore_index=3, reduction=reduction))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_l1(reduction):
    red = {"mean": np.mean, "sum": np.sum, "none": lambda v: v}[reduction]
    check(lambda x, y, *c: b("mse_loss")(x, y, *c), lambda x, y, *c: red((x - y) ** 2), [rand(2, 3), rand(2, 3)],
          consts=(reduction,))
    check(lambda x, y, *c: b("l1_loss")(x, y, *c), lambda x, y, *c: red(np.abs(x - y)), [rand(2, 3), rand(2, 3) + 4],
          consts=(reduction,))


def bce_np(x, y, pos_weight=1.0):
    # torch: (1 - y) x + (1 + (pw - 1) y) (log1p(exp(-|x|)) + max(-x, 0))
    return (1 - y) * x + (1 + (pos_weight - 1) * y) * (np.log1p(np.exp(-np.abs(x))) + np.maximum(-x, 0))


def test_binary_cross_entropy_with_logits_and_pos_weight():
    y = rand(3, 4, low=0.0, high=1.0)
    pw = rand(4, low=0.5, high=3.0)
    check(lambda x, t, *c: b("binary_cross_entropy_with_logits")(x, t, *c), lambda x, t, *c: bce_np(x, t).sum(),
          [rand(3, 4) * 4, y], consts=("sum",))
    check(lambda x, t, p: b("binary_cross_entropy_with_logits")(x, t, "none", p), bce_np, [rand(3, 4), y, pw])


def test_extreme_logits_stay_finite_and_exact():
    out = tensorlogic.run("""
    println(binary_cross_entropy_with_logits([100.0, -100.0, 0.0], [1.0, 0.0, 1.0], reduction = "none"))
    println(softplus([-30.0, 0.0, 30.0, 100.0]))
    println(logsumexp([1000.0, 1000.0]))
    println(cross_entropy([[1000.0, 0.0]], [1]))
    let x = learnable([0.0, 0.0])
    backward(binary_cross_entropy_with_logits(x, [1.0, 0.0], reduction = "sum") + sum(leaky_relu(x, 0.2)))
    println(grad(x))
    """, filename="<test>")
    assert out.error is None, out.error_text
    rows = [np.array(eval(line), dtype=np.float64) for line in out.output.strip().split("\n")]  # noqa: S307
    np.testing.assert_allclose(rows[0], [0.0, 0.0, np.log(2)], atol=1e-6)
    np.testing.assert_allclose(rows[1], [np.exp(-30.0), np.log(2), 30.0, 100.0], rtol=1e-5)
    np.testing.assert_allclose(rows[2], 1000 + np.log(2), rtol=1e-6)
    np.testing.assert_allclose(rows[3], 1000.0, rtol=1e-6)
    # d/dx at 0: sigmoid(0) - y (exact, not a kink's one-sided value) plus leaky_relu's slope (x = 0 takes it)
    np.testing.assert_allclose(rows[4], [0.5 - 1.0 + 0.2, 0.5 + 0.2], atol=1e-6)


def test_softplus_beta_threshold_leaky_relu_logsumexp_gradients():
    x = rand(3, 4) * 3
    check(lambda t: b("softplus")(t, 2.0, 3.0),
          lambda a: np.where(2 * a > 3, a, np.log1p(np.exp(2 * a)) / 2), [np.where(np.abs(2 * x - 3) < 0.2, x + 0.3, x)])
    check(lambda t: b("leaky_relu")(t, 0.3), lambda a: np.where(a > 0, a, 0.3 * a), [rand(3, 4, away_from_zero=True)])
    check(lambda t: b("logsumexp")(t), lambda a: np.log(np.exp(a).sum()), [rand(3, 4)])
    check(lambda t: b("logsumexp")(t, 0, True), lambda a: np.log(np.exp(a).sum(0, keepdims=True)), [rand(3, 4)])


def test_clip_grad_value_clamps_each_gradient():
    out = tensorlogic.run("""
    let w = learnable([1.0, -2.0, 3.0])
    backward(sum(w * [5.0, -0.5, -7.0]))
    clip_grad_value(1.0)
    print(grad(w))
    """, filename="<test>")
    assert out.error is None, out.error_text
    np.testing.assert_allclose(np.array(eval(out.output)), [1.0, -0.5, -1.0])  # noqa: S307


@pytest.mark.parametrize("source, message", [
    ('cross_entropy([[1.0, 2.0]], [0, 1])', "target [2] must have the input's batch shape [1]"),
    ('cross_entropy([[1.0, 2.0]], [0], reduction = "avg")', 'reduction must be "mean", "sum" or "none"'),
    ('cross_entropy(zeros([2, 3, 4]), [0, 1])', "input must be [N, C]"),
    ('mse_loss([1.0, 2.0], [1.0])', "must have the same shape"),
    ('nll_loss([[1.0, 2.0]], [0.5])', "integer class targets"),
    ('clip_grad_value(0.0)', "clip_value must be positive"),
])
def test_bad_arguments_are_one_line_errors(source, message):
    out = tensorlogic.run(source, filename="<test>")
    assert out.error is not None
    assert message in out.error_text and "Traceback" not in out.error_text
