"""Symbolic scalars and the active trace of a compiled function (`@compile fn`, see
docs/compiled-functions.md and interp/compiled.py).

While a compiled function records, its int and float arguments are `Symbolic`: the value of this
call plus an affine form over the call's scalar inputs (slot i = the i-th scalar argument). Adding,
subtracting and multiplying by numbers keeps the form, and the dynamic-aware runtime ops (rope and
attention positions, slices with a dynamic bound, `fill_`, tensor-scalar arithmetic) record it, so a
replay recomputes them from the new arguments.
The trace in progress belongs to the run (run_state.py), never to this module.
Invariant: any other use of a Symbolic as a number (int(), a comparison, `if`, printing, a shape, a
list index) abandons the trace and yields the plain value: the call goes on eagerly and correctly,
and that signature is never replayed. Outside an active trace a Symbolic is just its value.
"""
from __future__ import annotations

from typing import Any, Callable

from . import run_state


class Trace:
    """One recording in progress: the native Recording, replay hooks and guards."""

    def __init__(self, recording: Any, name: str):
        self.recording = recording
        self.name = name
        self.reason: str | None = None
        # run in order before each replay with the scalar inputs: host-side effects and checks of
        # the builtins the function called (a KV cache's lengths), raising on what eager would reject
        self.hooks: list[Callable[[list[float]], None]] = []
        # checked before each replay, before any hook: a recording that holds only for some values of
        # the scalars (a sliding window before or after it fills) says so here; a failed guard makes
        # the call record anew instead of replaying
        self.guards: list[Callable[[list[float]], bool]] = []
        self.global_reads: dict[str, Any] = {}  # globals the body read, checked by identity at replay
        # run in order at each replay after the hooks: each does the host side of something the
        # body did (an optimizer step's counter) and returns the values of the scalar inputs it added
        # (host_scalars), which follow the call's own scalars
        self.host_inputs: list[Callable[[], list[float]]] = []
        # owner key -> the checks one object registered with add_batched_hook (run by one hook)
        self.hook_batches: dict[Any, list] = {}
        self.outside_grads: set[int] = set()  # ids of learnables' gradients made before the recording
        self.slots: list = []  # the private copies of the tensor arguments, in argument order
        self.arg_values: list = []  # what the body was called with, while it runs
        # id of each array/struct the body got in place of an argument's (and of each tensor slot) ->
        # (the copy, the caller's value): a change the body makes to the copy is made to the
        # caller's too (`mirror`), as an uncompiled call would; cleared when the body returns
        self.originals: dict[int, tuple[Any, Any]] = {}

    def plain(self, v: Any) -> Any:
        """`v` as the uncompiled call would hold it: symbolic scalars as numbers, the body's copies
        of the arguments (tensor slots, arrays, structs) as the caller's values."""
        if v.__class__ is Symbolic:
            return v.value
        pair = self.originals.get(id(v))
        if pair is not None and pair[0] is v:
            return pair[1]
        if v.__class__ is list:
            return [self.plain(x) for x in v]
        return v

    def is_host_container(self, obj: Any) -> bool:
        """Whether the array/map/struct `obj` existed before the call (reached from a global the body
        read or from its arguments): changing it in place is host state a replay would not redo."""
        seen: set = set()
        stack = list(self.global_reads.values()) + list(self.arg_values)
        while stack:
            v = stack.pop()
            if v is obj:
                return True
            if id(v) in seen:
                continue
            seen.add(id(v))
            if v.__class__ is list:
                stack.extend(v)
            elif v.__class__ is dict:
                stack.extend(v.values())
            elif hasattr(v, "fields") and v.fields.__class__ is dict:
                stack.extend(v.fields.values())
        return False

    def host_scalars(self, replayed: Callable[[], list[float]], values: list[float]) -> list[Any]:
        """Scalar inputs computed on the host at each replay (`replayed()` returns them, in order, and
        does the host bookkeeping that goes with them); returns Symbolics for this call's `values`."""
        if self.reason is not None:
            return values
        out = []
        for v in values:
            slot = self.recording.add_scalar_input()
            out.append(Symbolic(float(v), 0.0, ((slot, 1.0),), self))
        self.host_inputs.append(replayed)
        return out

    def outside(self) -> "_Paused":
        """`with trace.outside():` ops run eagerly, unrecorded; what they make is not the recording's."""
        return _Paused(self.recording)

    def abandon(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
            if self.recording is not None:
                self.recording.abandon(reason)

    def close(self) -> None:
        """The recording has ended: let go of the native Recording. The hooks and guards it leaves
        behind are closures over this trace's Symbolics, which point back here, so the trace lives in
        a reference cycle until Python's cyclic collector runs (rarely: its oldest generation); holding
        the Recording (whose buffers, a compiled step's intermediates, can be megabytes) from here would
        keep those buffers from the pool that long after the recording was dropped. The compiled
        function's entry holds the Recording itself."""
        self.recording = None

    @property
    def live(self) -> bool:
        return self.reason is None


class _Paused:
    __slots__ = ("recording",)

    def __init__(self, recording: Any):
        self.recording = recording

    def __enter__(self):
        self.recording.pause()

    def __exit__(self, *exc):
        self.recording.resume()


# The trace recording now is the run's (run_state.py: `trace`); compiled functions do not nest.

def current() -> Trace | None:
    """The trace of the run executing here, abandoned or not, or None."""
    s = run_state.get(None)
    return s.trace if s is not None else None


def begin(trace: Trace) -> None:
    """`trace` records from now on, for the run executing here."""
    run_state.current().trace = trace


def end() -> None:
    """The run's recording is over (finished, abandoned or failed)."""
    run_state.current().trace = None


def active() -> Trace | None:
    """The trace that is recording and not abandoned, or None."""
    t = current()
    return t if t is not None and t.reason is None else None


def abandon(reason: str) -> None:
    """Called by builtins and the interpreter for what a recording cannot express."""
    t = current()
    if t is not None:
        t.abandon(reason)


def note_mutation(container: Any, what: str) -> Any:
    """The body changes `container` in place: a recording abandons if it existed before the call.
    Returns `(caller's container, plain)` when `container` is the body's copy of an argument: the
    caller makes the same change there (with `plain(value)`), or None."""
    t = current()
    if t is None:
        return None
    if t.reason is None and t.is_host_container(container):
        t.abandon(f"it changes {what} made outside the function (host state a replay would not update)")
    pair = t.originals.get(id(container))
    if pair is not None and pair[0] is container:
        return pair[1], t.plain
    return None


def add_hook(hook: Callable[[list[float]], None]) -> None:
    t = active()
    if t is not None:
        t.hooks.append(hook)


class HookBatch(list):
    """The items of one batched hook (add_batched_hook), in registration order. `plan`: whatever the
    hook derives from them once (e.g. the distinct symbolic values its checks need), kept as long as
    the items are; None until the hook sets it."""

    __slots__ = ("plan",)

    def __init__(self) -> None:
        super().__init__()
        self.plan = None


def add_batched_hook(key: Any, run: Callable[[list, list[float]], None], item: Any) -> None:
    """Like add_hook for an object that registers many replay checks of one kind (a KV cache's
    per-layer writes and views): the first call for `key` in a recording adds one hook that calls
    `run(items, scalars)` with every item registered under `key`, in registration order. A decode
    step then runs one hook per cache, not three per layer (~90 Python calls per token fewer for a
    30-layer model; each replay's hooks are host time between tokens). `key` must identify an
    object that lives as long as the recording (`run` holding it does)."""
    t = active()
    if t is None:
        return
    items = t.hook_batches.get(key)
    if items is None:
        items = t.hook_batches[key] = HookBatch()
        t.hooks.append(lambda scalars: run(items, scalars))
    items.append(item)


def add_guard(guard: Callable[[list[float]], bool]) -> None:
    """`guard(scalars)` must hold for a replay with those scalars to be valid (see Trace.guards)."""
    t = active()
    if t is not None:
        t.guards.append(guard)


def evaluate(v: Any, scalars: list[float]) -> Any:
    """The value of `v` (a Symbolic or a plain value) for a replay's scalar inputs."""
    if v.__class__ is not Symbolic:
        return v
    total = 0  # the terms summed left to right from 0, then added to the constant (as sum() would)
    for s, c in v.terms:
        total = total + c * scalars[s]
    x = v.constant + total
    return int(round(x)) if isinstance(v.value, int) else float(x)


def _number(o: Any) -> bool:
    return (o.__class__ is int or o.__class__ is float) and o.__class__ is not bool


class Symbolic:
    """A scalar argument of a compiled function while it records (see the module docstring)."""

    __slots__ = ("value", "constant", "terms", "trace")

    def __init__(self, value: int | float, constant: float, terms: tuple, trace: Trace):
        self.value = value
        self.constant = constant
        self.terms = terms  # ((slot, coef), ...)
        self.trace = trace

    @property
    def live(self) -> bool:
        t = self.trace
        return t.reason is None and t is current()

    @property
    def _tl_affine(self):
        """What the runtime bindings read: None unless recording (cpp/bindings/bindings.h)."""
        if not self.live:
            return None
        return (self.value, self.constant, list(self.terms), isinstance(self.value, float))

    def concrete(self, why: str) -> int | float:
        if self.live:
            self.trace.abandon(f"its scalar argument is used as a plain number ({why})")
        return self.value

    # ---- affine arithmetic
    def _combine(self, other: Any, sign: float):
        if other.__class__ is Symbolic:
            if not (self.live and other.live):
                return None
            terms = dict(self.terms)
            for s, c in other.terms:
                terms[s] = terms.get(s, 0.0) + sign * c
            return Symbolic(self.value + other.value if sign > 0 else self.value - other.value,
                            self.constant + sign * other.constant,
                            tuple((s, c) for s, c in sorted(terms.items()) if c != 0.0), self.trace)
        if _number(other):
            if not self.live:
                return None
            return Symbolic(self.value + other if sign > 0 else self.value - other,
                            self.constant + sign * other, self.terms, self.trace)
        return NotImplemented

    def __add__(self, other):
        r = self._combine(other, 1.0)
        if r is None:
            return self.concrete("+") + (other.concrete("+") if other.__class__ is Symbolic else other)
        return r

    __radd__ = __add__

    def __sub__(self, other):
        r = self._combine(other, -1.0)
        if r is None:
            return self.concrete("-") - (other.concrete("-") if other.__class__ is Symbolic else other)
        return r

    def __rsub__(self, other):
        neg = self.__mul__(-1)
        if neg is NotImplemented:
            return NotImplemented
        return neg + other

    def __mul__(self, other):
        if _number(other):
            if not self.live:
                return self.value * other
            return Symbolic(self.value * other, self.constant * other,
                            tuple((s, c * other) for s, c in self.terms if c * other != 0.0), self.trace)
        if other.__class__ is Symbolic:
            return self.concrete("*") * other.concrete("*")
        return NotImplemented

    __rmul__ = __mul__

    def __neg__(self):
        return self.__mul__(-1)

    def __pos__(self):
        return self

    # ---- everything else is a concrete use
    def __truediv__(self, o):
        return self.concrete("/") / (o.concrete("/") if o.__class__ is Symbolic else o)

    def __rtruediv__(self, o):
        return o / self.concrete("/")

    def __floordiv__(self, o):
        return self.concrete("//") // (o.concrete("//") if o.__class__ is Symbolic else o)

    def __mod__(self, o):
        return self.concrete("%") % (o.concrete("%") if o.__class__ is Symbolic else o)

    def __rmod__(self, o):
        return o % self.concrete("%")

    def __pow__(self, o):
        return self.concrete("**") ** (o.concrete("**") if o.__class__ is Symbolic else o)

    def __rpow__(self, o):
        return o ** self.concrete("**")

    def __abs__(self):
        return abs(self.concrete("abs"))

    def _cmp(self, o, op):
        a = self.concrete("a comparison")
        b = o.concrete("a comparison") if o.__class__ is Symbolic else o
        return op(a, b)

    def __eq__(self, o):
        return self._cmp(o, lambda a, b: a == b)

    def __ne__(self, o):
        return self._cmp(o, lambda a, b: a != b)

    def __lt__(self, o):
        return self._cmp(o, lambda a, b: a < b)

    def __le__(self, o):
        return self._cmp(o, lambda a, b: a <= b)

    def __gt__(self, o):
        return self._cmp(o, lambda a, b: a > b)

    def __ge__(self, o):
        return self._cmp(o, lambda a, b: a >= b)

    def __hash__(self):
        return hash(self.concrete("a hash"))

    def __bool__(self):
        return bool(self.concrete("a condition"))

    def __int__(self):
        return int(self.concrete("an int"))

    def __index__(self):
        return int(self.concrete("an index or size"))

    def __float__(self):
        return float(self.concrete("a float"))

    def __round__(self, n=None):
        return round(self.concrete("round"), n)

    def __str__(self):
        return str(self.concrete("text"))

    def __repr__(self):
        return repr(self.concrete("text"))

    def __format__(self, spec):
        return format(self.concrete("text"), spec)
