"""Optimizers step for step against NumPy implementations of the published update rules (100 steps),
gradient clipping and the learning-rate schedules."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tensorlogic.builtins.autograd import tape
from tensorlogic.builtins.autograd.optimizers import SGD, Adam, AdamW, LRScheduler, clip_grad_norm
from tensorlogic.builtins.autograd.traced_core import core, raw_core

A = np.array([[1.0, 0.5, 2.0], [0.2, 3.0, 1.0]])
C = np.array([[0.3, -1.0, 0.5], [1.0, 0.0, -2.0]])
W0 = np.array([[0.5, -0.3, 0.8], [1.2, -0.7, 0.1]])


def grad_np(w):
    """d/dw of sum(A * w^2 + C * w) + 0.1 * sum(w^4)  (a state-dependent gradient)."""
    return 2 * A * w + C + 0.4 * w ** 3


def run_core(opt, steps=100):
    w = raw_core.from_numpy(W0.astype(np.float32))
    tape.mark_learnable(w)
    a = raw_core.from_numpy(A.astype(np.float32))
    c = raw_core.from_numpy(C.astype(np.float32))
    opt.attach([tape.param_of(w)])
    out = []
    for _ in range(steps):
        loss = core.add(core.sum(core.add(core.mul(a, core.mul(w, w)), core.mul(c, w))),
                        core.mul(core.sum(core.mul(core.mul(w, w), core.mul(w, w))), 0.1))
        tape.backward(loss)
        opt.step()
        opt.zero_grad()
        out.append(w.numpy().astype(np.float64))
    return out


def sgd_np(lr, momentum=0.0, nesterov=False, wd=0.0, steps=100):
    w, buf, out = W0.copy(), None, []
    for _ in range(steps):
        g = grad_np(w) + wd * w
        if momentum:
            buf = g if buf is None else momentum * buf + g
            g = g + momentum * buf if nesterov else buf
        w = w - lr * g
        out.append(w.copy())
    return out


def adam_np(lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, decoupled=False, steps=100):
    w, m, v, out = W0.copy(), np.zeros_like(W0), np.zeros_like(W0), []
    for t in range(1, steps + 1):
        g = grad_np(w)
        if wd and decoupled:
            w = w * (1 - lr * wd)
        elif wd:
            g = g + wd * w
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        w = w - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
        out.append(w.copy())
    return out


CASES = [
    ("sgd", lambda: SGD(0.02), lambda: sgd_np(0.02)),
    ("sgd momentum", lambda: SGD(0.02, momentum=0.9), lambda: sgd_np(0.02, 0.9)),
    ("sgd nesterov", lambda: SGD(0.02, momentum=0.9, nesterov=True), lambda: sgd_np(0.02, 0.9, True)),
    ("sgd weight decay", lambda: SGD(0.02, momentum=0.5, weight_decay=0.1), lambda: sgd_np(0.02, 0.5, wd=0.1)),
    ("adam", lambda: Adam(0.05), lambda: adam_np(0.05)),
    ("adam l2", lambda: Adam(0.05, weight_decay=0.1), lambda: adam_np(0.05, wd=0.1)),
    ("adamw", lambda: AdamW(0.05, weight_decay=0.1), lambda: adam_np(0.05, wd=0.1, decoupled=True)),
    ("adam betas", lambda: Adam(0.01, beta1=0.5, beta2=0.9, eps=1e-6), lambda: adam_np(0.01, 0.5, 0.9, 1e-6)),
]


@pytest.mark.parametrize("name,make,reference", CASES, ids=[c[0] for c in CASES])
def test_optimizer_matches_numpy_for_100_steps(name, make, reference):
    got = run_core(make())
    want = reference()
    for step, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5, err_msg=f"{name}, step {step + 1}")


def test_clip_grad_norm_scales_the_joint_norm():
    a = raw_core.from_numpy(np.array([3.0, 0.0], dtype=np.float32))
    b = raw_core.from_numpy(np.array([[4.0]], dtype=np.float32))
    pa, pb = tape.mark_learnable(a), tape.mark_learnable(b)
    tape.backward(core.add(core.sum(core.mul(core.mul(a, a), 0.5)), core.sum(core.mul(core.mul(b, b), 0.5))))
    norm = clip_grad_norm([pa, pb], 1.0)
    assert math.isclose(float(norm.item()), 5.0, rel_tol=1e-6)
    np.testing.assert_allclose(pa.grad.numpy(), [0.6, 0.0], rtol=1e-5)
    np.testing.assert_allclose(pb.grad.numpy(), [[0.8]], rtol=1e-5)
    clip_grad_norm([pa, pb], 10.0)  # under the limit: unchanged
    np.testing.assert_allclose(pa.grad.numpy(), [0.6, 0.0], rtol=1e-5)


def test_schedules():
    step = LRScheduler("step_lr", step_size=10, gamma=0.5)
    assert [step.lr(1.0, e) for e in (0, 9, 10, 25)] == [1.0, 1.0, 0.5, 0.25]
    expo = LRScheduler("exponential_lr", gamma=0.9)
    assert math.isclose(expo.lr(0.1, 3), 0.1 * 0.9 ** 3)
    cos = LRScheduler("cosine_lr", t_max=100, eta_min=0.01)
    assert cos.lr(0.1, 0) == pytest.approx(0.1)
    assert cos.lr(0.1, 50) == pytest.approx(0.055)
    assert cos.lr(0.1, 100) == pytest.approx(0.01)
    # past t_max the cosine goes on (PyTorch's CosineAnnealingLR), it is not clamped at eta_min
    assert cos.lr(0.1, 150) == pytest.approx(0.055)
    assert cos.lr(0.1, 200) == pytest.approx(0.1)


def _torch_cosine(base, t_max, eta_min, epochs):
    """PyTorch's CosineAnnealingLR.get_lr() recurrence (torch/optim/lr_scheduler.py, written out here
    because torch is not a test dependency): the rate after each `scheduler.step()`."""
    lrs = [base]
    for e in range(1, epochs):
        prev = lrs[-1]
        if (e - 1 - t_max) % (2 * t_max) == 0:
            lrs.append(prev + (base - eta_min) * (1 - math.cos(math.pi / t_max)) / 2)
        else:
            lrs.append((1 + math.cos(math.pi * e / t_max)) / (1 + math.cos(math.pi * (e - 1) / t_max))
                       * (prev - eta_min) + eta_min)
    return lrs


def test_schedules_follow_pytorch_past_t_max():
    """The issue's example: epoch 15 of t_max 10 at lr 0.1 is 0.05 in PyTorch (not eta_min); the whole
    curve over 50 epochs of t_max 20 matches PyTorch's recurrence; StepLR and ExponentialLR too."""
    cos = LRScheduler("cosine_lr", t_max=10, eta_min=0.0)
    assert cos.lr(0.1, 15) == pytest.approx(0.05)
    for t_max, eta_min in ((20, 0.0), (10, 0.001), (7, 0.02)):
        cos = LRScheduler("cosine_lr", t_max=t_max, eta_min=eta_min)
        ours = [cos.lr(0.1, e) for e in range(50)]
        assert ours == pytest.approx(_torch_cosine(0.1, t_max, eta_min, 50), abs=1e-12)
    step = LRScheduler("step_lr", step_size=3, gamma=0.5)  # StepLR: base * gamma ** (epoch // step_size)
    assert [step.lr(0.1, e) for e in range(7)] == pytest.approx([0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025])
    expo = LRScheduler("exponential_lr", gamma=0.8)  # ExponentialLR: base * gamma ** epoch
    assert [expo.lr(0.1, e) for e in range(4)] == pytest.approx([0.1, 0.08, 0.064, 0.0512])
