"""`einsum(subscripts, *tensors)`: any valid subscripts, computed with the runtime's own ops.

Plan (no special kernels): per operand, take diagonals of repeated letters (multiply by an identity
mask and sum) and sum out letters used nowhere else; then fold operands left to right, each pair as
one batched matmul: permute to [batch, left, contracted] and [batch, contracted, right], reshape to
3-D, `matmul`, reshape back; finally sum leftovers and permute to the output order.
Invariant: every letter has one size across operands (size-1 dims broadcast); errors name the letter.
"""
from __future__ import annotations

import numpy as np

from .convert import BuiltinArgError, core, to_str, to_tensor
from .registry import builtin


def _expand_ellipsis(spec: str, tensors: list) -> str:
    """Replace each `...` by letters of its own (unused in spec) for the dims it stands for; the
    ellipses of all operands align from the right, as in NumPy, and an output without `->` lists
    them first."""
    lhs, arrow, out = spec.partition("->")
    parts = lhs.split(",")
    if len(parts) != len(tensors):
        return spec  # _parse reports the count
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in spec]
    counts = []
    for part, t in zip(parts, tensors):
        if part.count("...") > 1 or part.replace("...", "").count(".") or (
                "..." not in part and "." in part):
            raise BuiltinArgError(f"einsum: bad '...' in {part!r} (at most one '...' per operand)")
        counts.append(t.ndim - len(part.replace("...", "")) if "..." in part else 0)
        if counts[-1] < 0:
            raise BuiltinArgError(f"einsum: operand {part!r} names more dims than the tensor {list(t.shape)} has")
    widest = max(counts)
    if widest > len(free):
        raise BuiltinArgError("einsum: too many dims under '...'")
    letters = "".join(free[:widest])
    parts = [p.replace("...", letters[widest - k:]) for p, k in zip(parts, counts)]
    if arrow:
        if out.count(".") not in (0, 3) or (out.count(".") == 3 and "..." not in out):
            raise BuiltinArgError(f"einsum: bad '...' in the output {out!r}")
        out = out.replace("...", letters)
    else:
        once = [c for c in sorted(set("".join(parts))) if "".join(parts).count(c) == 1 and c not in letters]
        out, arrow = letters + "".join(once), "->"
    return ",".join(parts) + arrow + out


def _parse(subscripts: str, n: int) -> tuple[list[str], str]:
    spec = subscripts.replace(" ", "")
    if "." in spec:
        raise BuiltinArgError("einsum: a '.' outside '...' in the subscripts")
    if "->" in spec:
        lhs, out = spec.split("->", 1)
        explicit = True
    else:
        lhs, out, explicit = spec, "", False
    inputs = lhs.split(",")
    if len(inputs) != n:
        raise BuiltinArgError(f"einsum: subscripts name {len(inputs)} operand(s) but {n} tensor(s) were given")
    for part in inputs + [out]:
        for ch in part:
            if not ch.isalpha():
                raise BuiltinArgError(f"einsum: bad character {ch!r} in subscripts {subscripts!r}")
    if not explicit:
        counts: dict[str, int] = {}
        for part in inputs:
            for ch in part:
                counts[ch] = counts.get(ch, 0) + 1
        out = "".join(sorted(ch for ch, c in counts.items() if c == 1))
    if len(set(out)) != len(out):
        raise BuiltinArgError(f"einsum: output {out!r} repeats a letter")
    every = set("".join(inputs))
    for ch in out:
        if ch not in every:
            raise BuiltinArgError(f"einsum: output letter {ch!r} appears in no input")
    return inputs, out


def _sum_dims(t, letters: str, drop: set[str]):
    keep = letters
    for ch in sorted(drop, key=lambda c: -letters.index(c)):
        idx = keep.index(ch)
        t = core.sum(t, idx, False)
        keep = keep[:idx] + keep[idx + 1:]
    return t, keep


def _diagonal(t, letters: str):
    """Collapse repeated letters in one operand (e.g. 'ii' -> 'i')."""
    while len(set(letters)) != len(letters):
        for i, ch in enumerate(letters):
            j = letters.find(ch, i + 1)
            if j >= 0:
                break
        n = t.shape[i]
        if t.shape[j] != n:
            raise BuiltinArgError(f"einsum: letter {ch!r} has sizes {n} and {t.shape[j]} in one operand")
        mask_shape = [1] * t.ndim
        mask_shape[i] = n
        mask_shape[j] = n
        eye = core.from_numpy(np.eye(n, dtype=np.float32).reshape(mask_shape))
        if t.dtype != "f32":
            t = core.astype(t, "f32")
        t = core.sum(core.mul(t, eye), j, False)
        letters = letters[:j] + letters[j + 1:]
    return t, letters


def _pair(a, la: str, b, lb: str, needed_after: set[str]):
    """Contract a (letters la) with b (letters lb); keep letters in needed_after."""
    sizes: dict[str, int] = {}
    for t, ls in ((a, la), (b, lb)):
        for ch, s in zip(ls, t.shape):
            if ch in sizes and sizes[ch] != s and 1 not in (s, sizes[ch]):
                raise BuiltinArgError(f"einsum: letter {ch!r} has sizes {sizes[ch]} and {s}")
            sizes[ch] = max(sizes.get(ch, s), s)
    shared = [c for c in la if c in lb]
    batch = [c for c in shared if c in needed_after]
    contracted = [c for c in shared if c not in needed_after]
    left = [c for c in la if c not in lb]
    right = [c for c in lb if c not in la]
    # broadcast size-1 dims of shared letters
    a = _expand_to(a, la, sizes)
    b = _expand_to(b, lb, sizes)
    pa = [la.index(c) for c in batch + left + contracted]
    pb = [lb.index(c) for c in batch + contracted + right]
    a = core.permute(a, pa) if pa != list(range(len(pa))) else a
    b = core.permute(b, pb) if pb != list(range(len(pb))) else b

    def prod(cs):
        p = 1
        for c in cs:
            p *= sizes[c]
        return p
    nb, nl, nc, nr = prod(batch), prod(left), prod(contracted), prod(right)
    a3 = core.reshape(core.contiguous(a), [nb, nl, nc])
    b3 = core.reshape(core.contiguous(b), [nb, nc, nr])
    out = core.matmul(a3, b3)
    out_letters = batch + left + right
    out = core.reshape(out, [sizes[c] for c in out_letters])
    return out, "".join(out_letters)


def _expand_to(t, letters: str, sizes: dict[str, int]):
    target = [sizes[c] for c in letters]
    if list(t.shape) != target:
        t = core.expand(t, target)
    return t


@builtin("einsum", "einsum(subscripts, t1, [t2, ...])",
         "Einstein summation, e.g. einsum(\"ij,jk->ik\", A, B); any letters, and '...' for the leading dims "
         "(\"...ij,...jk->...ik\")", min_args=2, max_args=None,
         category="math")
def einsum(subscripts, *operands):
    spec = to_str(subscripts, "subscripts")
    tensors = [to_tensor(t, f"operand {i + 1}") for i, t in enumerate(operands)]
    if "." in spec:
        spec = _expand_ellipsis(spec.replace(" ", ""), tensors)
    inputs, out = _parse(spec, len(tensors))
    for t, letters in zip(tensors, inputs):
        if t.ndim != len(letters):
            raise BuiltinArgError(f"einsum: operand {letters!r} has rank {len(letters)} but the tensor is "
                                  f"{list(t.shape)}")
    work = []
    for i, (t, letters) in enumerate(zip(tensors, inputs)):
        t, letters = _diagonal(t, letters)
        elsewhere = set(out).union(*[set(x) for j, x in enumerate(inputs) if j != i])
        t, letters = _sum_dims(t, letters, {c for c in letters if c not in elsewhere})
        work.append((t, letters))
    acc, acc_letters = work[0]
    for k in range(1, len(work)):
        t, letters = work[k]
        needed = set(out).union(*[set(x) for _, x in work[k + 1:]])
        acc, acc_letters = _pair(acc, acc_letters, t, letters, needed)
    acc, acc_letters = _sum_dims(acc, acc_letters, {c for c in acc_letters if c not in out})
    if acc_letters != out:
        acc = core.permute(acc, [acc_letters.index(c) for c in out])
    return acc
