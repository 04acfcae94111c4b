"""Backward rules of the loss and activation builtins that are taped as one node (builtins/losses.py),
written like rules.py's and registered in the same RULES table.

Invariant: a rule here runs with recording off and uses only `core` ops, like every rule; the
forward it differentiates (`softplus_forward`) is computed with recording off by the builtin, which
then records one node with the rule, so the gradient does not depend on how the stable forward
formula is pieced together.
"""
from __future__ import annotations

from ..core import core
from .rules import RULES, _float_grad, rule

__all__ = ["RULES", "softplus_forward"]


def _log1p(z):
    """log(1 + z) for z >= 0, accurate for tiny z (log(1 + 1e-10) is 0 in float32): z - z^2/2 there."""
    small = core.lt(z, 1e-4)
    return core.where(small, core.sub(z, core.mul(core.mul(z, z), 0.5)), core.log(core.add(z, 1.0)))


def softplus_forward(x, beta: float, threshold: float):
    """PyTorch's softplus: x where beta x > threshold, else log1p(exp(beta x)) / beta, evaluated as
    max(bx, 0) + log1p(exp(-|bx|)) so that no exp overflows."""
    bx = core.mul(x, float(beta)) if beta != 1.0 else x
    stable = core.add(core.relu(bx), _log1p(core.exp(core.neg(core.abs(bx)))))
    if beta != 1.0:
        stable = core.div(stable, float(beta))
    return core.where(core.gt(bx, float(threshold)), x, stable)


@rule("softplus")
def _softplus(g, out, needs, x, beta, threshold):
    """d/dx = sigmoid(beta x), 1 above the threshold (PyTorch's softplus_backward)."""
    bx = core.mul(x, float(beta)) if beta != 1.0 else x
    d = core.where(core.gt(bx, float(threshold)), core.full([], 1.0, x.dtype), core.sigmoid(bx))
    return [_float_grad(core.mul(g, d), x), None, None]
