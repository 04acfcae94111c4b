"""The tape of reverse-mode autograd: which tensors take part, how ops were recorded, backward.

Each run owns its tape (a `Tape`, kept in the run's state: run_state.py, made with the run's first
learnable tensor); the module functions below act on the tape of the run executing on this thread.
Invariants (all bookkeeping lives in the Tape):
- A tensor takes part in differentiation iff `id(tensor)` is a key of its run's `Tape.tracked`: a
  `Param` (a learnable, which holds its tensor weakly), a `Node` (the output of a recorded op) or a
  `GradValue` (a gradient `grad(W)` handed to the program: ops on it are taped so that backward
  through it is an error, not a silent zero, since second-order gradients are not supported). Every
  entry carries a weakref whose callback removes it when its tensor dies, so an id never outlives its
  tensor. Only float tensors are recorded (an integer or bool result carries no gradient).
- Ops reach the tape through builtins/core.py's `core` (its differentiable functions record here when
  an input is tracked) and builtins/operators.py (TL's operators on tensors); rules.py's RULES say
  how each op's gradient is computed, traced_core.py's composites how a fused op without a backward
  kernel runs when an input is tracked. Nothing patches `core` or `Tensor`.
- `backward` of a loss that reaches no learnable is an error naming why, never a silent no-op.
- A node holds its inputs strongly and its output weakly: a graph lives exactly as long as the tensors
  downstream of it, and a loop that rebinds its variables frees last iteration's graph (nothing grows).
- Backward rules are compositions of the same `core` ops the forward pass uses, run with recording
  off: gradients are queued on the tensors' device like any other op, never computed on the host.
- Gradients of learnables accumulate in `Param.grad` (a tensor of the parameter's shape) until
  `zero_grad` or an optimizer step clears them. Inside a compiled function's recording, backward is
  recorded like any ops (the walk over the tape is the same for every call of one signature); adding
  to a gradient that existed before the recording abandons it, and a gradient still set when the
  call ends is outside state, so the runtime abandons that recording too (never a stale replay).
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

from .. import run_state, symbolic
from ..convert import BuiltinArgError
from ..core import Tensor, core, runtime
from . import optable
from .rules import RULES
from .traced_core import COMPOSITES

FLOAT_DTYPES = ("f32", "f16", "bf16")


class AutogradError(BuiltinArgError):
    """A gradient request that cannot be served (e.g. backward of something that is not a tensor);
    a program error the interpreter reports with the builtin's name."""


class Param:
    """A learnable tensor and its accumulated gradient."""

    __slots__ = ("ref", "grad", "__weakref__")

    def __init__(self, tracked: dict, tensor):
        self.ref = weakref.ref(tensor, _forget(tracked, id(tensor), self))
        self.grad = None

    @property
    def tensor(self):
        return self.ref()


class Node:
    """One recorded op: `out = op(*args, **kw)`; `rule(g, out, needs, *args, **kw)` returns input gradients."""

    __slots__ = ("rule", "args", "kw", "out_ref", "__weakref__")

    def __init__(self, tracked: dict, rule: Callable, args: tuple, kw: dict, out):
        self.rule = rule
        self.args = args
        self.kw = kw
        self.out_ref = weakref.ref(out, _forget(tracked, id(out), self))


class GradValue:
    """A gradient read by `grad(W)`: tracked only so that a gradient flowing back into it is reported."""

    __slots__ = ("ref", "__weakref__")

    def __init__(self, tracked: dict, tensor):
        self.ref = weakref.ref(tensor, _forget(tracked, id(tensor), self))


def _forget(tracked: dict, key: int, entry):
    entry_ref = weakref.ref(entry)

    def drop(_dead_tensor_ref):
        if tracked.get(key) is entry_ref():
            del tracked[key]
    return drop


class Tape:
    """One run's tape: `tracked` (id of tensor -> Param, Node or GradValue) and two switches,
    `recording` (ops on tracked tensors are taped) and `training` (dropout is active)."""

    __slots__ = ("tracked", "recording", "training")

    def __init__(self):
        self.tracked: dict[int, Any] = {}
        self.recording = True
        self.training = False

    # ---- what the ops call (builtins/core.py, builtins/operators.py)

    def any_tracked(self, args) -> bool:
        """Whether one of `args` (tensors, lists of tensors, anything else) is tracked."""
        tracked = self.tracked
        for a in args:
            c = a.__class__
            if c is Tensor:
                if id(a) in tracked:
                    return True
            elif (c is list or c is tuple) and a:
                for t in a:
                    if id(t) in tracked:
                        return True
        return False

    def note(self, name: str, args: tuple, kw: dict, out) -> None:
        """`out = name(*args, **kw)` ran: tape it with RULES[name] if recording and an input is tracked."""
        if self.recording and self.any_tracked(args):
            self.record(RULES[name], args, kw, out)

    def note_pieces(self, x, dim: int, pieces) -> None:
        """split/chunk of x along dim ran: each piece is taped as a slice of x."""
        if self.recording and id(x) in self.tracked:
            dim = int(dim) % x.ndim
            start = 0
            rule = RULES["slice"]
            for p in pieces:
                n = p.shape[dim]
                self.record(rule, (x, dim, start, start + n, 1), {}, p)
                start += n

    def composite(self, name: str, args: tuple):
        """The differentiable composition that stands for fused op `name` on `args`, or None when
        no input is tracked (the fused kernel runs)."""
        if self.recording and self.any_tracked(args):
            return COMPOSITES[name]
        return None

    def refuses(self, args) -> bool:
        """Whether an op that would cut the graph must refuse `args` (one of them is tracked)."""
        return self.recording and self.any_tracked(args)

    @staticmethod
    def refusal(name: str) -> AutogradError:
        """The error of refusing op `name` (optable.py's REFUSES, or `setitem`: `t[i] = x`)."""
        if name == "setitem":
            return AutogradError("assigning into a tensor (t[i] = x) records no gradient, and x is learnable or "
                                 "computed from one: build the tensor with concat/stack/where instead, or "
                                 "detach(x) to store its values")
        return AutogradError(optable.refusal_message(name))

    def record(self, rule: Callable, args: tuple, kw: dict, out) -> None:
        tracked = self.tracked
        if id(out) in tracked:  # an op handed back a tracked tensor itself: it already has its entry
            return
        if out.__class__ is Tensor and out.dtype not in FLOAT_DTYPES:  # no gradient through ints or bools
            return
        tracked[id(out)] = Node(tracked, rule, args, kw, out)

    # ---- learnables and gradients

    def mark_learnable(self, tensor) -> Param:
        param = Param(self.tracked, tensor)
        self.tracked[id(tensor)] = param
        return param

    def param_of(self, tensor) -> Param | None:
        entry = self.tracked.get(id(tensor))
        return entry if entry.__class__ is Param else None

    def live_params(self) -> list[Param]:
        return [e for e in self.tracked.values() if e.__class__ is Param and e.ref() is not None]

    def _inputs(self, node: Node):
        """(position, sub-index or None, tensor) of every tracked tensor among a node's arguments."""
        tracked = self.tracked
        for pos, a in enumerate(node.args):
            if a.__class__ is list or a.__class__ is tuple:
                for j, t in enumerate(a):
                    if id(t) in tracked:
                        yield pos, j, t
            elif id(a) in tracked:
                yield pos, None, a

    def backward(self, loss, seed=None) -> int:
        if not _is_tensor(loss):
            raise AutogradError("backward needs a tensor computed from learnable tensors")
        if id(loss) not in self.tracked:
            raise AutogradError(_NO_LEARNABLE)
        order = self._topological(loss)
        if any(entry.__class__ is GradValue for entry, _t in order):  # checked first: no gradient half-added
            raise AutogradError("the loss depends on grad(...): second-order gradients (the gradient of a "
                                "gradient) are not supported; detach(grad(W)) uses its values as a constant")
        trace = symbolic.current()
        grads: dict[int, Any] = {}
        with _Paused(self):
            if seed is None:
                seed = core.full(list(loss.shape), 1.0, loss.dtype if loss.dtype in FLOAT_DTYPES else "f32")
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
                    if entry.grad is not None and trace is not None and id(entry.grad) in trace.outside_grads:
                        symbolic.abandon("backward adds to gradients accumulated before the call (clear them "
                                         "with zero_grad() first, or step inside a learn block)")
                    entry.grad = g if entry.grad is None else core.add(entry.grad, g)
                    reached += 1
                    continue
                needs = [False] * len(entry.args)
                for pos, _j, _t in self._inputs(entry):
                    needs[pos] = True
                in_grads = entry.rule(g, tensor, needs, *entry.args, **entry.kw)
                for pos, j, t in self._inputs(entry):
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

    def _topological(self, loss) -> list[tuple[Any, Any]]:
        """(entry, tensor) pairs reachable from loss, each after every entry that consumes its tensor."""
        tracked = self.tracked
        seen: set[int] = set()
        post: list[tuple[Any, Any]] = []
        stack: list[tuple[Any, bool]] = [(loss, False)]
        while stack:
            tensor, expanded = stack.pop()
            key = id(tensor)
            entry = tracked.get(key)
            if expanded:
                post.append((entry, tensor))
                continue
            if key in seen or entry is None:
                continue
            seen.add(key)
            stack.append((tensor, True))
            if entry.__class__ is Node:
                for _pos, _j, t in self._inputs(entry):
                    if id(t) not in seen:
                        stack.append((t, False))
        post.reverse()
        return post


class _Paused:
    __slots__ = ("tape", "saved")

    def __init__(self, tape: Tape | None):
        self.tape = tape

    def __enter__(self):
        if self.tape is not None:
            self.saved = self.tape.recording
            self.tape.recording = False

    def __exit__(self, *exc):
        if self.tape is not None:
            self.tape.recording = self.saved


def _is_tensor(v) -> bool:
    return v.__class__ is Tensor


_NO_LEARNABLE = ("the loss does not depend on any learnable tensor, so there is no gradient to compute (it "
                 "comes from constants, detach(...), integer casts, comparisons, or the result of a @compile "
                 "function called outside a learn block, which carries no gradient)")


# ---------------------------------------------------------------- the tape of the run executing here

def current() -> Tape | None:
    """The tape of the run executing on this thread, or None while it has made no learnable."""
    return run_state.current().tape


def ensure() -> Tape:
    """The run's tape, made now if it has none."""
    state = run_state.current()
    if state.tape is None:
        state.tape = Tape()
    return state.tape


def is_tracked(t) -> bool:
    tape = current()
    return tape is not None and id(t) in tape.tracked


def mark_learnable(tensor) -> Param:
    """Register `tensor` (a fresh tensor no one else tracks) as a learnable parameter of the run."""
    return ensure().mark_learnable(tensor)


def forget(tensor) -> None:
    """Drop a recorded op's entry for `tensor` (a compiled function's result): it no longer carries a
    gradient and its graph is freed. Learnables keep theirs."""
    tape = current()
    if tape is not None and tape.tracked.get(id(tensor)).__class__ is Node:
        del tape.tracked[id(tensor)]


def param_of(tensor) -> Param | None:
    tape = current()
    return tape.param_of(tensor) if tape is not None else None


def live_params() -> list[Param]:
    """Every learnable of the run still alive, in creation order."""
    tape = current()
    return tape.live_params() if tape is not None else []


def training() -> bool:
    """Whether a learn block is training (dropout is active)."""
    tape = current()
    return tape is not None and tape.training


def tracking(*values) -> bool:
    """Whether an op on `values` (tensors, or lists of them) must be taped: recording is on and one of
    them is tracked. Builtins that compute on the host check it to take a differentiable path."""
    tape = current()
    return tape is not None and tape.recording and tape.any_tracked(values)


def record(rule: Callable, args: tuple, kw: dict, out) -> None:
    """Tape `out` as computed from `args` with backward rule `rule` (after `tracking` said so)."""
    ensure().record(rule, args, kw, out)


def no_recording() -> _Paused:
    """`with no_recording():` ops run untaped (backward rules, optimizer steps, detach)."""
    return _Paused(current())


def backward(loss, seed=None) -> int:
    """Accumulate d(sum of loss)/d(param) into every reachable learnable's `grad`; returns how many."""
    tape = current()
    if tape is None:
        if not _is_tensor(loss):
            raise AutogradError("backward needs a tensor computed from learnable tensors")
        raise AutogradError(_NO_LEARNABLE)
    return tape.backward(loss, seed)


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
    tracked = current().tracked
    if id(g) not in tracked:
        tracked[id(g)] = GradValue(tracked, g)
    return g


def detach(tensor):
    """A view of tensor's data that no gradient flows through."""
    return runtime.reshape(tensor, list(tensor.shape))
