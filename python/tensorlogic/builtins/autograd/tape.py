"""The tape of reverse-mode autograd: which tensors take part, how ops were recorded, backward.

Invariants (all bookkeeping lives here):
- A tensor takes part in differentiation iff `id(tensor)` is a key of `TRACKED`: a `Param` (a learnable,
  which holds its tensor weakly), a `Node` (the output of a recorded op) or a `GradValue` (a gradient
  `grad(W)` handed to the program: ops on it are taped so that backward through it is an error, not a
  silent zero, since second-order gradients are not supported). Every entry carries a weakref whose
  callback removes it when its tensor dies, so an id never outlives its tensor. Only float tensors
  are recorded (an integer or bool result carries no gradient).
- `backward` of a loss that reaches no learnable is an error naming why, never a silent no-op.
- A node holds its inputs strongly and its output weakly: a graph lives exactly as long as the tensors
  downstream of it, and a loop that rebinds its variables frees last iteration's graph (nothing grows).
- Backward rules are compositions of the same traced `_core` ops the forward pass uses, run with
  recording off: gradients are queued on the tensors' device like any other op, never computed on the host.
- Gradients of learnables accumulate in `Param.grad` (a tensor of the parameter's shape) until
  `zero_grad` or an optimizer step clears them. Inside a compiled function's recording, backward is
  recorded like any ops (the walk over the tape is the same for every call of one signature); adding
  to a gradient that existed before the recording abandons it, and a gradient still set when the
  call ends is outside state, so the runtime abandons that recording too (never a stale replay).
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

from .. import symbolic
from ..convert import BuiltinArgError
from ..core import Tensor, core, runtime

FLOAT_DTYPES = ("f32", "f16", "bf16")


class AutogradError(BuiltinArgError):
    """A gradient request that cannot be served (e.g. backward of something that is not a tensor);
    a program error the interpreter reports with the builtin's name."""


class Param:
    """A learnable tensor and its accumulated gradient."""

    __slots__ = ("ref", "grad", "__weakref__")

    def __init__(self, tensor):
        self.ref = weakref.ref(tensor, _forget(id(tensor), self))
        self.grad = None

    @property
    def tensor(self):
        return self.ref()


class Node:
    """One recorded op: `out = op(*args, **kw)`; `rule(g, out, needs, *args, **kw)` returns input gradients."""

    __slots__ = ("rule", "args", "kw", "out_ref", "__weakref__")

    def __init__(self, rule: Callable, args: tuple, kw: dict, out):
        self.rule = rule
        self.args = args
        self.kw = kw
        self.out_ref = weakref.ref(out, _forget(id(out), self))


class GradValue:
    """A gradient read by `grad(W)`: tracked only so that a gradient flowing back into it is reported."""

    __slots__ = ("ref", "__weakref__")

    def __init__(self, tensor):
        self.ref = weakref.ref(tensor, _forget(id(tensor), self))


TRACKED: dict[int, Any] = {}


def _forget(key: int, entry):
    entry_ref = weakref.ref(entry)

    def drop(_dead_tensor_ref):
        if TRACKED.get(key) is entry_ref():
            del TRACKED[key]
    return drop


class _State:
    """Global switches: `recording` (ops on tracked tensors are taped), `training` (dropout is active)."""

    __slots__ = ("recording", "training", "enabled")

    def __init__(self):
        self.recording = True
        self.training = False
        self.enabled = False  # set once the first learnable exists; before that no op is wrapped


STATE = _State()


def is_tracked(t) -> bool:
    return id(t) in TRACKED


def mark_learnable(tensor) -> Param:
    """Register `tensor` (a fresh tensor no one else tracks) as a learnable parameter."""
    from .traced_core import enable  # noqa: PLC0415 - the hooks are installed with the first learnable
    enable()
    param = Param(tensor)
    TRACKED[id(tensor)] = param
    return param


def forget(tensor) -> None:
    """Drop a recorded op's entry for `tensor` (a compiled function's result): it no longer carries a
    gradient and its graph is freed. Learnables keep theirs."""
    entry = TRACKED.get(id(tensor))
    if entry.__class__ is Node:
        del TRACKED[id(tensor)]


def param_of(tensor) -> Param | None:
    entry = TRACKED.get(id(tensor))
    return entry if entry.__class__ is Param else None


def live_params() -> list[Param]:
    """Every learnable still alive, in creation order."""
    return [e for e in TRACKED.values() if e.__class__ is Param and e.ref() is not None]


def tracking(*values) -> bool:
    """Whether an op on `values` (tensors, or lists of them) must be taped: recording is on and one of
    them is tracked. Builtins that compute on the host check it to take a differentiable path."""
    if not STATE.enabled or not STATE.recording:
        return False
    for v in values:
        if v.__class__ is list or v.__class__ is tuple:
            if any(id(t) in TRACKED for t in v):
                return True
        elif id(v) in TRACKED:
            return True
    return False


def record(rule: Callable, args: tuple, kw: dict, out) -> None:
    if id(out) in TRACKED:  # an op handed back a tracked tensor itself: it already has its entry
        return
    if out.__class__ is Tensor and out.dtype not in FLOAT_DTYPES:  # no gradient through ints or bools
        return
    TRACKED[id(out)] = Node(rule, args, kw, out)


def _is_tensor(v) -> bool:
    return v.__class__ is Tensor


def _inputs(node: Node):
    """(position, sub-index or None, tensor) of every tracked tensor among a node's arguments."""
    for pos, a in enumerate(node.args):
        if a.__class__ is list or a.__class__ is tuple:
            for j, t in enumerate(a):
                if id(t) in TRACKED:
                    yield pos, j, t
        elif id(a) in TRACKED:
            yield pos, None, a


class no_recording:
    """Context manager: ops run untaped (backward rules, optimizer steps, detach)."""

    __slots__ = ("saved",)

    def __enter__(self):
        self.saved = STATE.recording
        STATE.recording = False

    def __exit__(self, *exc):
        STATE.recording = self.saved


def backward(loss, seed=None) -> int:
    """Accumulate d(sum of loss)/d(param) into every reachable learnable's `grad`; returns how many."""
    if not _is_tensor(loss):
        raise AutogradError("backward needs a tensor computed from learnable tensors")
    if id(loss) not in TRACKED:
        raise AutogradError(_NO_LEARNABLE)
    order = _topological(loss)
    if any(entry.__class__ is GradValue for entry, _t in order):  # checked first: no gradient half-added
        raise AutogradError("the loss depends on grad(...): second-order gradients (the gradient of a "
                            "gradient) are not supported; detach(grad(W)) uses its values as a constant")
    grads: dict[int, Any] = {}
    with no_recording():
        if seed is None:
            seed = core.full(list(loss.shape), 1.0, loss.dtype if loss.dtype in ("f32", "f16", "bf16") else "f32")
        grads[id(loss)] = seed
        reached = 0
        for entry, tensor in order:
            g = grads.pop(id(tensor), None)
            if g is None:
                continue
            if entry.__class__ is Param:
                if tuple(g.shape) != tuple(tensor.shape):
                    g = core.reshape(g, list(tensor.shape))
                if g.dtype != tensor.dtype:
                    g = core.astype(g, tensor.dtype)
                if entry.grad is not None and symbolic.CURRENT is not None \
                        and id(entry.grad) in symbolic.CURRENT.outside_grads:
                    symbolic.abandon("backward adds to gradients accumulated before the call (clear them "
                                     "with zero_grad() first, or step inside a learn block)")
                entry.grad = g if entry.grad is None else core.add(entry.grad, g)
                reached += 1
                continue
            needs = [False] * len(entry.args)
            subs: dict[int, list] = {}
            for pos, j, _t in _inputs(entry):
                needs[pos] = True
                if j is not None:
                    subs.setdefault(pos, []).append(j)
            in_grads = entry.rule(g, tensor, needs, *entry.args, **entry.kw)
            for pos, j, t in _inputs(entry):
                gi = in_grads[pos]
                if j is not None:
                    gi = gi[j] if gi is not None else None
                if gi is None:
                    continue
                key = id(t)
                prev = grads.get(key)
                grads[key] = gi if prev is None else core.add(prev, gi)
    if reached == 0:
        raise AutogradError(_NO_LEARNABLE)
    return reached


_NO_LEARNABLE = ("the loss does not depend on any learnable tensor, so there is no gradient to compute (it "
                 "comes from constants, detach(...), integer casts, comparisons, or the result of a @compile "
                 "function called outside a learn block, which carries no gradient)")


def _topological(loss) -> list[tuple[Any, Any]]:
    """(entry, tensor) pairs reachable from loss, each after every entry that consumes its tensor."""
    seen: set[int] = set()
    post: list[tuple[Any, Any]] = []
    stack: list[tuple[Any, bool]] = [(loss, False)]
    while stack:
        tensor, expanded = stack.pop()
        key = id(tensor)
        entry = TRACKED.get(key)
        if expanded:
            post.append((entry, tensor))
            continue
        if key in seen or entry is None:
            continue
        seen.add(key)
        stack.append((tensor, True))
        if entry.__class__ is Node:
            for _pos, _j, t in _inputs(entry):
                if id(t) not in seen:
                    stack.append((t, False))
    post.reverse()
    return post


def zero_grad(params: list[Param] | None = None) -> None:
    for p in (params if params is not None else live_params()):
        p.grad = None


def grad_of(tensor):
    """The accumulated gradient of a learnable (zeros if none yet)."""
    param = param_of(tensor)
    if param is None:
        raise AutogradError("grad needs a learnable tensor (declare it with learnable(...) or "
                            "`tensor w: f32[..] learnable`)")
    g = core.zeros(list(tensor.shape), tensor.dtype) if param.grad is None else param.grad
    if id(g) not in TRACKED:
        TRACKED[id(g)] = GradValue(g)
    return g


def detach(tensor):
    """A view of tensor's data that no gradient flows through."""
    return runtime.reshape(tensor, list(tensor.shape))
