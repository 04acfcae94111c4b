"""Data shuffling and batching for training loops: `randperm(n)` (torch.randperm) and
`minibatches(n, batch_size, shuffle, drop_last)` (the index batches a DataLoader with a sampler walks).

Invariant: every random draw comes from the run's generator (`tl run --seed N`, `seed(n)`, and a
checkpoint's saved generator state make the order reproducible, a resumed run included); a compiled
function calling one of these runs eagerly (a draw per call is host state).
"""
from __future__ import annotations

import numpy as np

from . import symbolic
from .convert import BuiltinArgError, core, to_bool, to_int
from .registry import REQUIRED, bind_keywords, builtin

C = "learning"


def _bind(params, args):
    try:
        return bind_keywords(params, args)
    except ValueError as e:
        raise BuiltinArgError(str(e)) from None


def _count(v, what, minimum):
    n = to_int(v, what)
    if n < minimum:
        raise BuiltinArgError(f"{what} must be >= {minimum}, got {n}")
    return n


@builtin("randperm", "randperm(n)", "a random permutation of 0..n-1 (i64), from the run's generator",
         min_args=1, max_args=1, needs_ctx=True, category=C)
def randperm(ctx, n):
    symbolic.abandon("it calls randperm, a random draw")
    return core.from_numpy(ctx.rng.permutation(_count(n, "n", 0)).astype(np.int64))


@builtin("minibatches", "minibatches(n, batch_size, [shuffle], [drop_last])",
         "a list of i64 index tensors covering 0..n-1 in batches (shuffled by default; the last one shorter "
         "unless drop_last): for ids in minibatches(n, 64) { let xb = gather(X, ids, 0) ... }",
         min_args=2, max_args=4, needs_ctx=True, category=C)
def minibatches(ctx, *args):
    a = _bind([("n", REQUIRED), ("batch_size", REQUIRED), ("shuffle", True), ("drop_last", False)], args)
    n, size = _count(a["n"], "n", 0), _count(a["batch_size"], "batch_size", 1)
    if to_bool(a["shuffle"], "shuffle"):
        symbolic.abandon("it calls minibatches with shuffle, a random draw")
        order = ctx.rng.permutation(n).astype(np.int64)
    else:
        order = np.arange(n, dtype=np.int64)
    stop = n - n % size if to_bool(a["drop_last"], "drop_last") else n
    return [core.from_numpy(np.ascontiguousarray(order[lo:min(lo + size, stop)])) for lo in range(0, stop, size)]
