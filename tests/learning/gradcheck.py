"""Gradient checking against float64 central finite differences of a NumPy reference (used by the
tests of this folder)."""
from __future__ import annotations

import numpy as np

from tensorlogic.builtins.autograd import tape
from tensorlogic.builtins.autograd.traced_core import core, raw_core

RNG = np.random.default_rng(7)


def rand(*shape, low=-1.5, high=1.5, away_from_zero=False):
    x = RNG.uniform(low, high, size=shape)
    if away_from_zero:
        x = np.where(np.abs(x) < 0.2, np.sign(x + 1e-9) * 0.2 + x, x)
    return x


def numeric_grad(loss_fn, arrays, i, eps=1e-6):
    x = arrays[i]
    g = np.zeros_like(x)
    flat = x.reshape(-1)
    gf = g.reshape(-1)
    for k in range(flat.size):
        old = flat[k]
        flat[k] = old + eps
        up = loss_fn(arrays)
        flat[k] = old - eps
        down = loss_fn(arrays)
        flat[k] = old
        gf[k] = (up - down) / (2 * eps)
    return g


def check(op, ref, arrays, diff=None, rtol=2e-3, atol=2e-3, consts=()):
    """op(*tensors, *consts) on the runtime vs ref(*arrays, *consts) in float64."""
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    diff = list(range(len(arrays))) if diff is None else diff
    tensors = []
    for i, a in enumerate(arrays):
        t = raw_core.from_numpy(a.astype(np.float32))
        if i in diff:
            tape.mark_learnable(t)
        tensors.append(t)
    out = op(*tensors, *consts)
    expect = np.asarray(ref(*arrays, *consts), dtype=np.float64)
    assert tuple(out.shape) == expect.shape
    np.testing.assert_allclose(out.numpy().astype(np.float64), expect, rtol=1e-3, atol=1e-4)
    weights = RNG.standard_normal(expect.shape)
    loss = core.sum(core.mul(out, raw_core.from_numpy(weights.astype(np.float32))))
    tape.backward(loss)
    for i in diff:
        got = tape.grad_of(tensors[i]).numpy().astype(np.float64)
        want = numeric_grad(lambda arrs: float(np.sum(np.asarray(ref(*arrs, *consts)) * weights)), arrays, i)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"gradient of input {i}")
