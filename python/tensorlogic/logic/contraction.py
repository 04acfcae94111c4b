"""Einsum over named indices, reduced to permute + reshape + batched matmul + sum (no einsum op).

Each factor is (tensor, indices) with distinct indices; the result carries `out` in that order.
Invariant: an index is summed out as soon as no other factor and not the output needs it, and
two factors are contracted by one matmul over [shared-kept batch, left-free, contracted] x
[batch, contracted, right-free], so no intermediate is larger than its pairwise product needs.
"""
from __future__ import annotations


def _prod(values) -> int:
    total = 1
    for v in values:
        total *= int(v)
    return total


def contract(ops, factors: list, out: tuple, sizes: dict):
    """sum over indices not in `out` of the product of all factors, axes ordered as `out`."""
    factors = [(t, tuple(ix)) for t, ix in factors]
    out = tuple(out)

    def needed(index, skip: int) -> bool:
        return index in out or any(index in ix for j, (_, ix) in enumerate(factors) if j != skip)

    def drop_private(k: int):
        tensor, indices = factors[k]
        for axis in range(len(indices) - 1, -1, -1):
            if not needed(indices[axis], k):
                tensor = ops.sum(tensor, axis)
                indices = indices[:axis] + indices[axis + 1:]
        factors[k] = (tensor, indices)

    for k in range(len(factors)):
        drop_private(k)
    while len(factors) > 1:
        best = None
        for a in range(len(factors)):
            for b in range(a + 1, len(factors)):
                ia, ib = factors[a][1], factors[b][1]
                shared = len(set(ia) & set(ib))
                cost = _prod(sizes[i] for i in set(ia) | set(ib))
                key = (-shared, cost)
                if best is None or key < best[0]:
                    best = (key, a, b)
        _, a, b = best
        (ta, ia), (tb, ib) = factors[a], factors[b]
        rest = [f for j, f in enumerate(factors) if j not in (a, b)]
        keep = set(out) | {i for _, ix in rest for i in ix}
        merged = _contract_pair(ops, ta, ia, tb, ib, keep, sizes)
        factors = rest + [merged]
        drop_private(len(factors) - 1)
    tensor, indices = factors[0]
    if indices != out:
        tensor = ops.permute(tensor, [indices.index(i) for i in out])
    return tensor


def _contract_pair(ops, ta, ia: tuple, tb, ib: tuple, keep: set, sizes: dict):
    shared = [i for i in ia if i in ib]
    batch = [i for i in shared if i in keep]
    summed = [i for i in shared if i not in keep]
    a_free = [i for i in ia if i not in shared]
    b_free = [i for i in ib if i not in shared]
    a_order = batch + a_free + summed
    b_order = batch + summed + b_free
    if list(ia) != a_order:
        ta = ops.permute(ta, [ia.index(i) for i in a_order])
    if list(ib) != b_order:
        tb = ops.permute(tb, [ib.index(i) for i in b_order])
    nb, na, ns, nf = (_prod(sizes[i] for i in group) for group in (batch, a_free, summed, b_free))
    product = ops.matmul(ops.reshape(ta, [nb, na, ns]), ops.reshape(tb, [nb, ns, nf]))
    indices = tuple(batch + a_free + b_free)
    return ops.reshape(product, [sizes[i] for i in indices]), indices
