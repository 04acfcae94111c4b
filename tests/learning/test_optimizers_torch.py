"""RMSprop, Adagrad, Adam amsgrad, SGD dampening, parameter groups and the schedules MultiStepLR,
LinearLR (warm-up), OneCycleLR and ReduceLROnPlateau, step for step (50 steps) against NumPy
transcriptions of PyTorch's definitions (torch/optim/*.py, written out here: torch is not a test
dependency). The references run in float32 like PyTorch does, so the bound is float32 rounding."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tensorlogic
from tensorlogic.builtins.autograd import tape
from tensorlogic.builtins.autograd.optimizers import (SGD, Adagrad, Adam, AdamW, LRScheduler, OneCycleLR, ParamGroup,
                                                      ReduceLROnPlateau, RMSprop)
from tensorlogic.builtins.autograd.traced_core import core, raw_core

F = np.float32
A = np.array([[1.0, 0.5, 2.0], [0.2, 3.0, 1.0]], F)
C = np.array([[0.3, -1.0, 0.5], [1.0, 0.0, -2.0]], F)
W0 = np.array([[0.5, -0.3, 0.8], [1.2, -0.7, 0.1]], F)
STEPS = 50


def grad_np(w):
    return (2 * A * w + C + F(0.4) * w ** 3).astype(F)


def run_core(opt, steps=STEPS, lrs=None, groups=None):
    """(w after each step) of `opt` on the loss whose gradient grad_np is; lrs: a rate per step."""
    w = raw_core.from_numpy(W0.copy())
    param = tape.mark_learnable(w)
    if groups is not None:
        opt.set_groups([ParamGroup([param], **groups)])
    a, c = raw_core.from_numpy(A), raw_core.from_numpy(C)
    opt.attach([param])
    out = []
    for k in range(steps):
        if lrs is not None:
            opt.lr = lrs[k]
        loss = core.add(core.sum(core.add(core.mul(a, core.mul(w, w)), core.mul(c, w))),
                        core.mul(core.sum(core.mul(core.mul(w, w), core.mul(w, w))), 0.1))
        tape.backward(loss)
        opt.step()
        opt.zero_grad()
        out.append(w.numpy().astype(np.float64))
    return out


def sgd_ref(lr, momentum=0.0, dampening=0.0, wd=0.0):
    w, buf, out = W0.copy(), None, []
    for _ in range(STEPS):
        g = grad_np(w) + F(wd) * w
        if momentum:
            buf = g.copy() if buf is None else F(momentum) * buf + F(1 - dampening) * g
            g = buf
        w = (w - F(lr) * g).astype(F)
        out.append(w.copy())
    return out


def adam_ref(lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, decoupled=False, amsgrad=False):
    w, m, v, vmax, out = W0.copy(), np.zeros_like(W0), np.zeros_like(W0), np.zeros_like(W0), []
    for t in range(1, STEPS + 1):
        g = grad_np(w)
        if decoupled:
            w = w * F(1 - lr * wd)
        else:
            g = g + F(wd) * w
        m = F(b1) * m + F(1 - b1) * g
        v = F(b2) * v + F(1 - b2) * g * g
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        if amsgrad:
            vmax = np.maximum(vmax, v)
            denom = np.sqrt(vmax) / F(math.sqrt(bc2)) + F(eps)
        else:
            denom = np.sqrt(v) / F(math.sqrt(bc2)) + F(eps)
        w = (w - F(lr / bc1) * m / denom).astype(F)
        out.append(w.copy())
    return out


def rmsprop_ref(lr=0.01, alpha=0.99, eps=1e-8, wd=0.0, momentum=0.0, centered=False):
    w, sq, ga, buf, out = W0.copy(), np.zeros_like(W0), np.zeros_like(W0), np.zeros_like(W0), []
    for _ in range(STEPS):
        g = grad_np(w) + F(wd) * w
        sq = F(alpha) * sq + F(1 - alpha) * g * g
        if centered:
            ga = F(alpha) * ga + F(1 - alpha) * g
            avg = np.sqrt(sq - ga * ga) + F(eps)
        else:
            avg = np.sqrt(sq) + F(eps)
        if momentum > 0:
            buf = F(momentum) * buf + g / avg
            w = w - F(lr) * buf
        else:
            w = w - F(lr) * g / avg
        out.append(w.astype(F).copy())
    return out


def adagrad_ref(lr=0.01, lr_decay=0.0, wd=0.0, init=0.0, eps=1e-10):
    w, s, out = W0.copy(), np.full_like(W0, init), []
    for t in range(1, STEPS + 1):
        g = grad_np(w) + F(wd) * w
        clr = lr / (1 + (t - 1) * lr_decay)
        s = s + g * g
        w = (w - F(clr) * g / (np.sqrt(s) + F(eps))).astype(F)
        out.append(w.copy())
    return out


CASES = [
    ("sgd dampening", lambda: SGD(0.02, momentum=0.9, dampening=0.3), lambda: sgd_ref(0.02, 0.9, 0.3)),
    ("sgd dampening wd", lambda: SGD(0.02, momentum=0.5, dampening=0.5, weight_decay=0.1),
     lambda: sgd_ref(0.02, 0.5, 0.5, 0.1)),
    ("adam amsgrad", lambda: Adam(0.05, amsgrad=True), lambda: adam_ref(0.05, amsgrad=True)),
    ("adamw amsgrad", lambda: AdamW(0.05, weight_decay=0.1, amsgrad=True),
     lambda: adam_ref(0.05, wd=0.1, decoupled=True, amsgrad=True)),
    ("adam", lambda: Adam(0.05), lambda: adam_ref(0.05)),
    ("rmsprop", lambda: RMSprop(0.01), lambda: rmsprop_ref(0.01)),
    ("rmsprop centered momentum wd", lambda: RMSprop(0.005, alpha=0.9, weight_decay=0.05, momentum=0.8, centered=True),
     lambda: rmsprop_ref(0.005, 0.9, wd=0.05, momentum=0.8, centered=True)),
    ("adagrad", lambda: Adagrad(0.1), lambda: adagrad_ref(0.1)),
    ("adagrad decay init wd", lambda: Adagrad(0.1, lr_decay=0.01, weight_decay=0.1, initial_accumulator_value=0.5),
     lambda: adagrad_ref(0.1, 0.01, 0.1, 0.5)),
]


@pytest.mark.parametrize("name,make,reference", CASES, ids=[c[0] for c in CASES])
def test_optimizer_matches_pytorch_definition_for_50_steps(name, make, reference):
    got, want = run_core(make()), reference()
    for step, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{name}, step {step + 1}")


def test_a_parameter_group_uses_its_own_rate_and_weight_decay():
    got = run_core(SGD(0.5, momentum=0.9, weight_decay=0.0), groups={"lr": 0.02, "weight_decay": 0.1})
    want = [w for w in sgd_ref(0.02, 0.9, 0.0, 0.1)]
    np.testing.assert_allclose(got[-1], want[-1], rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- schedules

def multistep_ref(base, milestones, gamma, epochs):
    """MultiStepLR's chainable get_lr(): multiply by gamma ** (count of this epoch in milestones)."""
    lrs, lr = [], base
    for e in range(epochs):
        if e:
            lr = lr * gamma ** milestones.count(e)
        lrs.append(lr)
    return lrs


def linear_ref(base, start, end, total, epochs):
    """LinearLR's chainable get_lr()."""
    lrs, lr = [], base * start
    for e in range(epochs):
        if e == 0:
            lr = base * start
        elif e <= total:
            lr = lr * (1.0 + (end - start) / (total * start + (e - 1) * (end - start)))
        lrs.append(lr)
    return lrs


def test_multistep_and_linear_warmup_follow_pytorch():
    ms = LRScheduler("multistep_lr", milestones=[3, 7, 7, 12], gamma=0.5)
    # MultiStepLR counts a repeated milestone twice
    np.testing.assert_allclose([ms.lr(0.1, e) for e in range(STEPS)], multistep_ref(0.1, [3, 7, 7, 12], 0.5, STEPS),
                               rtol=1e-12)
    for start, end, total in ((1 / 3, 1.0, 5), (0.1, 1.0, 20), (1.0, 0.25, 10)):
        lin = LRScheduler("linear_lr", start_factor=start, end_factor=end, total_iters=total)
        np.testing.assert_allclose([lin.lr(0.05, e) for e in range(STEPS)],
                                   linear_ref(0.05, start, end, total, STEPS), rtol=1e-12)


def one_cycle_ref(max_lr, total, pct=0.3, strategy="cos", div=25.0, final_div=1e4, three_phase=False,
                  base_m=0.85, max_m=0.95):
    """OneCycleLR.get_lr() and its momentum at last_epoch = 0 .. total-1."""
    init = max_lr / div
    low = init / final_div
    if three_phase:
        phases = [(float(pct * total) - 1, init, max_lr, max_m, base_m),
                  (float(2 * pct * total) - 2, max_lr, init, base_m, max_m),
                  (total - 1, init, low, max_m, max_m)]
    else:
        phases = [(float(pct * total) - 1, init, max_lr, max_m, base_m), (total - 1, max_lr, low, base_m, max_m)]

    def anneal(a, b, p):
        return b + (a - b) / 2.0 * (math.cos(math.pi * p) + 1) if strategy == "cos" else (b - a) * p + a
    lrs, moms = [], []
    for step in range(total):
        start = 0
        for i, (end, l0, l1, m0, m1) in enumerate(phases):
            if step <= end or i == len(phases) - 1:
                p = (step - start) / (end - start)
                lrs.append(anneal(l0, l1, p))
                moms.append(anneal(m0, m1, p))
                break
            start = end
    return lrs, moms


@pytest.mark.parametrize("kw", [{}, {"strategy": "linear"}, {"three_phase": True, "pct": 0.25}])
def test_one_cycle_follows_pytorch(kw):
    sched = OneCycleLR(0.1, STEPS, pct_start=kw.get("pct", 0.3), anneal_strategy=kw.get("strategy", "cos"),
                       three_phase=kw.get("three_phase", False))
    lrs, moms = one_cycle_ref(0.1, STEPS, **kw)
    got = [sched.at(s) for s in range(STEPS)]
    np.testing.assert_allclose([g[0] for g in got], lrs, rtol=1e-12)
    np.testing.assert_allclose([g[1] for g in got], moms, rtol=1e-12)
    with pytest.raises(Exception, match="past total_steps"):
        sched.at(STEPS)


def test_one_cycle_drives_adam_step_for_step():
    """The schedule inside a learn block: each optimizer step's rate and beta1 are OneCycleLR's."""
    lrs, moms = one_cycle_ref(0.05, STEPS)
    w, m, v, want = W0.copy(), np.zeros_like(W0), np.zeros_like(W0), None
    for t in range(1, STEPS + 1):
        b1, lr = moms[t - 1], lrs[t - 1]
        g = grad_np(w)
        m = F(b1) * m + F(1 - b1) * g
        v = F(0.999) * v + F(0.001) * g * g
        w = (w - F(lr / (1 - b1 ** t)) * m / (np.sqrt(v) / F(math.sqrt(1 - 0.999 ** t)) + F(1e-8))).astype(F)
    want = w
    out = tensorlogic.run(f"""
    let w = learnable({W0.tolist()})
    let a = {A.tolist()}
    let c = {C.tolist()}
    learn {{
        optimizer: adam(lr = 0.05)
        scheduler: one_cycle_lr(max_lr = 0.05, total_steps = {STEPS})
        epochs: {STEPS}
        for epoch in range(epochs) {{ backward(sum(a * w * w + c * w) + 0.1 * sum(w * w * w * w)) }}
    }}
    print(w)
    """, filename="<test>")
    assert out.error is None, out.error_text
    got = np.array(eval(out.output.replace("\n", "")))  # noqa: S307
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def plateau_ref(metrics, lr, mode="min", factor=0.1, patience=10, threshold=1e-4, threshold_mode="rel",
                cooldown=0, min_lr=0.0, eps=1e-8):
    best = math.inf if mode == "min" else -math.inf
    bad = cool = 0
    lrs = []
    for a in metrics:
        if mode == "min":
            better = a < (best * (1 - threshold) if threshold_mode == "rel" else best - threshold)
        else:
            better = a > (best * (threshold + 1) if threshold_mode == "rel" else best + threshold)
        if better:
            best, bad = a, 0
        else:
            bad += 1
        if cool > 0:
            cool -= 1
            bad = 0
        if bad > patience:
            new = max(lr * factor, min_lr)
            if lr - new > eps:
                lr = new
            cool, bad = cooldown, 0
        lrs.append(lr)
    return lrs


@pytest.mark.parametrize("kw", [{}, {"patience": 2, "cooldown": 3, "min_lr": 0.002, "factor": 0.5},
                                {"mode": "max", "threshold_mode": "abs", "threshold": 0.05, "patience": 1}])
def test_reduce_lr_on_plateau_follows_pytorch(kw):
    rng = np.random.default_rng(5)
    metrics = list(np.round(1.0 / (1 + np.arange(STEPS) * 0.05) + rng.uniform(0, 0.2, STEPS), 3))
    sched = ReduceLROnPlateau(**{"mode": "min", **kw})

    class Opt:  # just the rate the schedule rewrites
        lr = 0.1

        def map_lr(self, fn):
            self.lr = fn(self.lr)
    opt = Opt()
    sched.attach(opt)
    got = []
    for mv in metrics:
        sched.step(mv)
        got.append(opt.lr)
    np.testing.assert_allclose(got, plateau_ref(metrics, 0.1, **kw), rtol=1e-12)


def test_plateau_in_a_program_and_groups_and_new_optimizers_by_name():
    out = tensorlogic.run("""
    let w = learnable([1.0, -1.0])
    let b = learnable([0.5])
    let plateau = reduce_lr_on_plateau(patience = 0, factor = 0.5)
    learn {
        optimizer: rmsprop(lr = 0.01, groups = [param_group([b], lr = 0.001)])
        scheduler: plateau
        epochs: 4
        for epoch in range(epochs) {
            backward(sum(w * w) + sum(b * b))
            plateau.step(1.0)
            println(get_lr(optimizer))
        }
    }
    println(adagrad(lr = 0.1))
    println(sgd(0.1, momentum = 0.9, dampening = 0.1))
    println(adam(amsgrad = true))
    """, filename="<test>")
    assert out.error is None, out.error_text
    lines = out.output.strip().split("\n")
    np.testing.assert_allclose([float(x) for x in lines[:4]], [0.01, 0.005, 0.0025, 0.00125])
    assert lines[4:] == ["adagrad(lr = 0.1)", "sgd(lr = 0.1, momentum = 0.9, dampening = 0.1)",
                         "adam(lr = 0.001, beta1 = 0.9, beta2 = 0.999, amsgrad = true)"]
