"""Sampling builtins: temperature, top-k and top-p (nucleus) sampling, `seed`.

Invariant: all randomness comes from the run's generator (`ctx.rng`, seeded by `tl run --seed N` or
`seed(n)`), so a seeded program samples the same tokens every run. Each sampler returns an int id.
"""
from __future__ import annotations

import numpy as np

from .convert import BuiltinArgError, core, to_float, to_int, to_tensor
from .registry import builtin

C = "sampling"


def _logits(x) -> np.ndarray:
    arr = to_tensor(x, "logits").numpy().astype(np.float64).reshape(-1)
    if arr.size == 0:
        raise BuiltinArgError("logits are empty")
    return arr


def _sample(ctx, logits: np.ndarray, temperature: float) -> int:
    if temperature < 0:
        raise BuiltinArgError(f"temperature must be >= 0, got {temperature}")
    finite = np.isfinite(logits)
    if not finite.any():
        raise BuiltinArgError("all logits are -inf or NaN")
    if temperature == 0:
        return int(np.argmax(np.where(finite, logits, -np.inf)))
    z = np.where(finite, logits / temperature, -np.inf)
    z = z - z.max()
    p = np.exp(z)
    p /= p.sum()
    return int(ctx.rng.choice(p.size, p=p))


@builtin("temperature_sample", "temperature_sample(logits, T)",
         "sample an id from softmax(logits / T); T = 0 is argmax", min_args=2, max_args=2, needs_ctx=True,
         category=C)
def temperature_sample(ctx, logits, temperature):
    return _sample(ctx, _logits(logits), to_float(temperature, "T"))


@builtin("top_k", "top_k(logits, k, [T])", "sample an id among the k largest logits (temperature T, default 1)",
         min_args=2, max_args=3, needs_ctx=True, category=C)
def top_k(ctx, logits, k, temperature=1.0):
    arr = _logits(logits)
    kk = to_int(k, "k")
    if kk <= 0:
        raise BuiltinArgError(f"k must be positive, got {kk}")
    if kk < arr.size:
        cut = np.partition(arr, -kk)[-kk]
        arr = np.where(arr >= cut, arr, -np.inf)
    return _sample(ctx, arr, to_float(temperature, "T"))


@builtin("top_p", "top_p(logits, p, [T])",
         "sample an id from the smallest set of top logits whose probability reaches p (temperature T)",
         min_args=2, max_args=3, needs_ctx=True, category=C)
def top_p(ctx, logits, p, temperature=1.0):
    arr = _logits(logits)
    pp = to_float(p, "p")
    if not 0 < pp <= 1:
        raise BuiltinArgError(f"p must be in (0, 1], got {pp}")
    t = to_float(temperature, "T")
    if t == 0:
        return _sample(ctx, arr, 0.0)
    z = arr / t
    z = z - np.max(z[np.isfinite(z)]) if np.isfinite(z).any() else z
    probs = np.exp(z)
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    cum = np.cumsum(probs[order])
    keep = order[: int(np.searchsorted(cum, pp) + 1)]
    masked = np.full_like(arr, -np.inf)
    masked[keep] = arr[keep]
    return _sample(ctx, masked, t)


@builtin("seed", "seed(n)", "reseed the program's random generator (rand, sampling)", min_args=1, max_args=1,
         needs_ctx=True, category=C)
def seed(ctx, n):
    ctx.reseed(to_int(n, "n"))
    return None


@builtin("random", "random()", "a uniform float in [0, 1) from the program's generator", min_args=0, max_args=0,
         needs_ctx=True, category=C)
def random(ctx):
    return float(ctx.rng.random())


@builtin("multinomial", "multinomial(probs)", "sample an id with the given probabilities", min_args=1, max_args=1,
         needs_ctx=True, category=C)
def multinomial(ctx, probs):
    p = to_tensor(probs, "probs").numpy().astype(np.float64).reshape(-1)
    if p.size == 0 or (p < 0).any() or not np.isfinite(p).all() or p.sum() <= 0:
        raise BuiltinArgError("probs must be non-negative, finite and not all zero")
    return int(ctx.rng.choice(p.size, p=p / p.sum()))


_ = core
