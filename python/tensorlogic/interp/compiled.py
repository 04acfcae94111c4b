"""Compiled TL functions: `@compile fn step(...)` records its first call per signature and replays
later calls natively, as one command buffer with no Python per op (docs/compiled-functions.md).

Signature: the arguments flattened -- a tensor is an input (its shape and dtype are in the key), an
int or float is a scalar input (its kind is in the key, not its value), lists and structs are walked,
bools and strings are part of the key by value, any other value (a model, a KV cache) by identity.
Recording: the body runs eagerly on private copies of the tensor inputs (slots) with its scalars as
`Symbolic` (builtins/symbolic.py) while the runtime appends every op to a `_core.Recording`.
Replay: the globals the body read must be the same objects, and the host values inside those that
are containers (arrays, maps, structs: lengths, elements, keys with their types, fields, walked
deeply; a tensor or host object inside by identity) must equal what they were when it recorded
(`_fingerprint`: a program may change them in place between calls, `append(L, t)`, `m["k"] = 7.0`,
`cfg.scale = 3.0`); the builtins' guards must hold (else the call records anew: a sliding window
that filled since), the builtins' replay hooks run (a KV cache's length bookkeeping and checks),
then the recording runs with the new scalars and tensors. A map argument's fingerprint is part of
the signature. Results alias what the uncompiled function's would: a result that is a tensor
argument is that argument (`("A", i)`), one that is a tensor the body found outside (a global) is
that tensor; a view of either (`x[0]`) abandons the recording and that call returns the same view
of the caller's tensor (`Recording.caller_view`), as later, eager, calls do.
Host inputs: scalars the builtins compute on the host for each call (a compiled training step's
learning rate and bias corrections, trace.host_scalars) follow the call's own scalars; the step's
host bookkeeping (its counters) runs in the same order as eagerly, once the replay is known to run.
Invariants: a replay computes what an eager call would (bitwise on the CPU backend); whatever a
recording cannot express abandons it and that signature runs eagerly from then on (a one-line note
under --debug); a refused replay (a tensor it used was released) records anew.
"""
from __future__ import annotations

import os
import sys
from typing import Any

from ..builtins import recording, symbolic
from ..builtins.symbolic import Symbolic, Trace
from .values import StructValue

MAX_RECORDINGS_PER_FUNCTION = 8  # per function; the least recently used one is dropped for a new one
DEBUG = False  # `tl run --debug`: one stderr line per recording, abandonment and refusal
ENABLED = os.environ.get("TL_COMPILE", "1") != "0"  # TL_COMPILE=0: every call runs eagerly


def set_debug(on: bool) -> None:
    global DEBUG
    DEBUG = on


def _note(text: str) -> None:
    if DEBUG:
        print(f"tl: compile: {text}", file=sys.stderr)


class _Eager:
    """A signature that runs eagerly (its recording was abandoned)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason


_TENSOR = recording.Tensor


def _fingerprint(v: Any, out: list, pins: list | None, seen: set | None = None) -> None:
    """Append to `out` what a recording took from the host value `v`: scalars with their type (true
    is not 1; a float by its bits, so -0.0 is not 0.0), lengths, map keys in order with their types,
    struct fields, and anything else (tensors, host objects, struct types) as its id, a bare int.
    The recorded fingerprint keeps those objects alive in `pins`, so an equal id at a replay is the
    same object (an id is only reused after its object is freed). A container met again in the walk
    (an array holding itself, a struct in two places) is its id the second time: no endless walk."""
    cls = v.__class__
    if cls is float:
        out.append(v.hex())
        return
    if cls is int or cls is bool or cls is str or v is None:
        out.append((cls, v))
        return
    if cls is not list and cls is not dict and cls is not StructValue:
        out.append(id(v))
        if pins is not None:
            pins.append(v)
        return
    if seen is None:
        seen = set()
    elif id(v) in seen:
        out.append(("again", id(v)))
        if pins is not None:
            pins.append(v)
        return
    seen.add(id(v))
    if cls is list:
        out.append(("L", len(v)))
        kinds = set(map(type, v))
        if len(kinds) == 1 and kinds.pop() is _TENSOR:  # the common case (a list of weights): at C speed
            out.append(tuple(map(id, v)))
            if pins is not None:
                pins.extend(v)
            return
        for x in v:
            _fingerprint(x, out, pins, seen)
    elif cls is dict:
        out.append(("M", len(v)))
        for k, x in v.items():
            out.append((k.__class__, k))
            _fingerprint(x, out, pins, seen)
    else:
        out.append(("S", id(v.type)))
        if pins is not None:
            pins.append(v.type)
        for name, x in v.fields.items():
            out.append(name)
            _fingerprint(x, out, pins, seen)


def _is_container(v: Any) -> bool:
    cls = v.__class__
    return cls is list or cls is dict or cls is StructValue


def _host_tensors(v: Any, found: dict, seen: set) -> None:
    """The tensors inside the host value `v` (walked like _fingerprint), by id."""
    if recording.is_tensor(v):
        found[id(v)] = v
    elif _is_container(v) and id(v) not in seen:
        seen.add(id(v))
        items = v.fields.values() if v.__class__ is StructValue else (v.values() if v.__class__ is dict else v)
        for x in items:
            _host_tensors(x, found, seen)


class _Replayable:
    __slots__ = ("recording", "result", "hooks", "guards", "host_inputs", "global_reads", "pinned",
                 "containers")

    def __init__(self, recording, result, hooks, guards, host_inputs, global_reads, pinned, containers):
        self.recording = recording
        self.result = result  # the result's shape: see _result_spec
        self.hooks = hooks
        self.guards = guards
        self.host_inputs = host_inputs
        self.global_reads = global_reads
        self.pinned = pinned  # the identity-keyed arguments, kept alive so their ids stay theirs
        self.containers = containers  # (global name, fingerprint, pins) of each container global it read


_EXACT_INT = 2 ** 53  # scalar inputs travel as doubles: larger ints are constants of the signature


def _flatten(v: Any, key: list, tensors: list, scalars: list, pinned: list) -> None:
    cls = v.__class__
    if cls is int and abs(v) > _EXACT_INT:
        key.append(("c", v))
    elif cls is int:
        key.append("i")
        scalars.append(v)
    elif cls is float:
        key.append("f")
        scalars.append(v)
    elif cls is bool or cls is str or v is None:
        key.append(("c", v))
    elif recording.is_tensor(v):
        key.append(("T",) + recording.tensor_key(v))
        tensors.append(v)
    elif cls is list:
        key.append(("L", len(v)))
        for x in v:
            _flatten(x, key, tensors, scalars, pinned)
    elif cls is StructValue:
        key.append(("S", id(v.type), tuple(v.fields)))
        pinned.append(v.type)
        for x in v.fields.values():
            _flatten(x, key, tensors, scalars, pinned)
    elif cls is dict:  # the body reads the map itself: its whole content is part of the signature
        fp: list = []
        _fingerprint(v, fp, pinned)
        key.append(("M", id(v), tuple(fp)))
        pinned.append(v)
    else:
        key.append(("O", id(v)))
        pinned.append(v)


def _substitute(v: Any, slots: list, syms: list, originals: dict) -> Any:
    """`v` with its tensors replaced by the recording's slots and its numbers by Symbolics, walked
    in _flatten's order; `originals` maps each copy made (by id) to (copy, v) (Trace.originals)."""
    cls = v.__class__
    if cls is int and abs(v) > _EXACT_INT:
        return v
    if cls is int or cls is float:
        return syms.pop()
    if cls is bool or cls is str or v is None:
        return v
    if recording.is_tensor(v):
        out = slots.pop()
    elif cls is list:
        out = [_substitute(x, slots, syms, originals) for x in v]
    elif cls is StructValue:
        out = StructValue(v.type, {k: _substitute(x, slots, syms, originals) for k, x in v.fields.items()})
    else:
        return v
    originals[id(out)] = (out, v)
    return out


def _result_spec(v: Any, outs: list, trace: Trace, args_by_id: set, aliases: dict) -> Any:
    """A description of the result: ("T", i) the i-th output tensor, ("A", i) the i-th tensor
    argument itself, ("Y", symbolic), ("C", value), ("L", [...]), ("S", type, {...}). Abandons for
    values a replay could not reproduce. `aliases`: id of a slot -> ("A", i), id of a tensor the body
    found outside (a global, inside a map argument) -> ("C", it)."""
    cls = v.__class__
    if recording.is_tensor(v):
        alias = aliases.get(id(v))
        if alias is not None:  # the argument (or the outside tensor) itself, as uncompiled
            return alias
        view = trace.recording.caller_view(v)
        if view is not None:  # shares memory with the caller: this call returns what uncompiled would
            trace.abandon("the result is a view of an argument or of a tensor made outside the function")
            return ("C", view)
        outs.append(v)
        return ("T", len(outs) - 1)
    if cls is Symbolic:
        return ("Y", v) if v.live else ("C", v.value)
    if cls in (int, float, bool, str) or v is None:
        return ("C", v)
    if cls is list:
        return ("L", [_result_spec(x, outs, trace, args_by_id, aliases) for x in v])
    if cls is StructValue:
        return ("S", v.type, {k: _result_spec(x, outs, trace, args_by_id, aliases)
                              for k, x in v.fields.items()})
    if id(v) not in args_by_id:
        trace.abandon("the result holds a value other than tensors, numbers, lists and structs")
    return ("C", v)


def _build(spec: Any, outs: list, scalars: list, args: list) -> Any:
    kind = spec[0]
    if kind == "T":
        return outs[spec[1]]
    if kind == "A":
        return args[spec[1]]
    if kind == "C":
        return spec[1]
    if kind == "Y":
        return symbolic.evaluate(spec[1], scalars)
    if kind == "L":
        return [_build(s, outs, scalars, args) for s in spec[1]]
    return StructValue(spec[1], {k: _build(s, outs, scalars, args) for k, s in spec[2].items()})


class CompiledFunction:
    """The `impl` of a `@compile` function value: `impl(argv)` like any compiled TL function."""

    def __init__(self, name: str, impl, interp):
        self.name = name
        self.impl = impl
        self.interp = interp
        self.entries: dict[tuple, Any] = {}
        self.records = 0
        self.replays = 0
        interp.compiled_functions.append(self)

    def clear(self) -> None:
        """Drop every recording (their buffers return to the pool once no replay uses them)."""
        self.entries.clear()

    def __call__(self, argv: list) -> Any:
        if symbolic.current() is not None or not ENABLED:  # inside another recording: inlined
            return self.impl(argv)
        key: list = []
        tensors: list = []
        scalars: list = []
        pinned: list = []
        for a in argv:
            _flatten(a, key, tensors, scalars, pinned)
        k = tuple(key)
        entry = self.entries.get(k)
        if entry is None:
            return self._record(k, argv, tensors, scalars, pinned)
        # least recently used goes first when a new signature needs room: a signature in steady use
        # (a server's full batch of slots) is not dropped for passing ones and recorded again
        self.entries[k] = self.entries.pop(k)
        if entry.__class__ is _Eager:
            return self.impl(argv)
        g = self.interp.globals
        for name, value in entry.global_reads.items():
            if g.get(name) is not value:
                return self._record_again(f"global '{name}' changed since it was recorded", k, argv,
                                          tensors, scalars, pinned)
        for name, fp, _pins in entry.containers:
            now: list = []
            _fingerprint(g.get(name), now, None)
            if now != fp:
                return self._record_again(f"the contents of global '{name}' changed since it was recorded",
                                          k, argv, tensors, scalars, pinned)
        fscalars = [float(s) for s in scalars]
        if not all(guard(fscalars) for guard in entry.guards):
            return self._record_again("the recording does not hold for these arguments", k, argv, tensors,
                                      scalars, pinned)
        why = entry.recording.cannot_replay()
        if why:
            return self._record_again(why, k, argv, tensors, scalars, pinned)
        for hook in entry.hooks:
            hook(fscalars)
        for host in entry.host_inputs:
            fscalars.extend(host())
        try:
            outs = entry.recording.replay(fscalars, tensors)
        except recording.ReplayRefused as e:
            return self._record_again(str(e), k, argv, tensors, scalars, pinned)
        self.replays += 1
        return _build(entry.result, outs, fscalars, tensors)

    @staticmethod
    def _aliases(trace: Trace, argv: list) -> dict:
        """What a result tensor that the body did not compute stands for (see _result_spec): the
        tensor arguments' slots, the tensors inside the globals it read and inside its arguments."""
        found: dict = {}
        seen: set = set()
        for v in trace.global_reads.values():
            _host_tensors(v, found, seen)
        for v in argv:
            if v.__class__ is dict:  # a map argument is not substituted: the body sees its tensors
                _host_tensors(v, found, seen)
        aliases = {i: ("C", t) for i, t in found.items()}
        for i, slot in enumerate(trace.slots):
            aliases[id(slot)] = ("A", i)
        return aliases

    def _record_again(self, why: str, key: tuple, argv: list, tensors: list, scalars: list,
                      pinned: list) -> Any:
        _note(f"{self.name}: {why}; recording again")
        del self.entries[key]
        return self._record(key, argv, tensors, scalars, pinned)

    def _record(self, key: tuple, argv: list, tensors: list, scalars: list, pinned: list) -> Any:
        if len(self.entries) >= MAX_RECORDINGS_PER_FUNCTION:
            del self.entries[next(iter(self.entries))]
        problem = recording.argument_problem(tensors)
        if problem:  # the body must see the arguments themselves, not the recording's copies
            self.entries[key] = _Eager(problem)
            _note(f"{self.name}: runs eagerly for this signature: {problem}")
            return self.impl(argv)
        rec = recording.new_recording(len(scalars))
        trace = Trace(rec, self.name)
        symbolic.begin(trace)
        try:
            rec.begin()
        except BaseException:
            symbolic.end()
            trace.close()
            raise
        recording.note_gradients(trace)
        try:
            slots = [rec.bind_input(t) for t in tensors]
            trace.slots = list(slots)
            syms = [Symbolic(v, 0.0, ((i, 1.0),), trace) for i, v in enumerate(scalars)]
            slots.reverse()
            syms.reverse()
            body_args = [_substitute(a, slots, syms, trace.originals) for a in argv]
            trace.arg_values = body_args
            result = self.impl(body_args)
            trace.arg_values = []
            trace.originals = {}  # it holds the slots: the escape check in finish() counts handles
            del body_args
            outs: list = []
            spec = _result_spec(result, outs, trace, {id(p) for p in pinned}, self._aliases(trace, argv))
            del result, slots
            trace.slots = []  # the escape check in finish() counts the handles left on the slots
        except BaseException:
            rec.cancel()
            symbolic.end()
            trace.close()
            raise
        symbolic.end()
        recording.detach_results(outs)
        try:
            fresh = rec.finish(outs)
        finally:
            trace.close()  # the entry below holds `rec`; the trace's cycles must not (Trace.close)
        del outs
        fscalars = [float(s) for s in scalars]
        value = _build(spec, fresh, fscalars, tensors)
        self.records += 1
        if rec.ready:
            containers = []
            for name, v in trace.global_reads.items():
                if _is_container(v):
                    fp: list = []
                    pins: list = []
                    _fingerprint(v, fp, pins)
                    containers.append((name, fp, pins))
            self.entries[key] = _Replayable(rec, spec, trace.hooks, trace.guards, trace.host_inputs,
                                            trace.global_reads, pinned, containers)
            _note(f"{self.name}: recorded {rec.n_commands} ops ({rec.n_dynamic} with dynamic parameters, "
                  f"{rec.owned_bytes} bytes owned)")
        else:
            self.entries[key] = _Eager(rec.reason)
            _note(f"{self.name}: runs eagerly for this signature: {rec.reason}")
        return value
