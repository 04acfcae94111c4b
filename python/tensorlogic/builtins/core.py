"""The one import of the native runtime `tensorlogic._core` on the Python side, and `core`: the runtime's
functions as every builtin calls them, the differentiable ones taped on the run's autograd tape.

Invariants: no other module of the package imports `_core`; builtins, the logic engine's device ops,
autograd and the applications reach the runtime through `core` here (or the few helpers below), and the
interpreter (`interp/`) reaches it only through builtins, never directly (tests/test_layers.py).
`core` is built once, at import, and never changed; `_core` and `Tensor` are never patched. A
differentiable function of `core` runs the runtime's own function and, when the run executing here
has a tape (run_state.py) that records and an input is tracked, tapes the result (autograd/tape.py);
which function is taped how is autograd/optable.py's CORE_OPS. A run that never made a learnable
pays one lookup per op.
"""
from __future__ import annotations

import re
import types

from tensorlogic import _core as runtime  # type: ignore[attr-defined]

from . import run_state
from .autograd import optable

Tensor = runtime.Tensor
_state = run_state.get


def _fixed_params(raw) -> list[str] | None:
    """The parameter names of a runtime function (from its pybind11 signature line) when it has no
    defaults, overloads or *args; else None."""
    first = (raw.__doc__ or "").split("\n", 1)[0]
    m = re.fullmatch(rf"{re.escape(raw.__name__)}\((.*)\) -> .*", first)
    if m is None:
        return None
    params = [p.strip() for p in m.group(1).split(",")] if m.group(1).strip() else []
    names = [p.split(":", 1)[0].strip() for p in params]
    if not names or any("=" in p or "*" in p for p in params) or not all(n.isidentifier() for n in names):
        return None
    return names


def _taped(name: str, raw, factories: dict):
    """raw, taped with rules.py's rule `name` when an input is tracked."""
    names = _fixed_params(raw)
    if names is not None:
        # The same wrapper with raw's own parameters: no *args/**kwargs packing, which is most of
        # a wrapper's cost (about 150 of 190 ns per call), paid by every run, learning or not.
        return _named(_fixed_factory(tuple(names), factories)(raw, _state, name), raw)

    def op(*args, **kw):
        out = raw(*args, **kw)
        s = _state(None)
        if s is not None and s.tape is not None:
            s.tape.note(name, args, kw, out)
        return out
    return _named(op, raw)


def _fixed_factory(names: tuple, factories: dict):
    """A function making `op(<names>)` for (raw, state, name): one compiled template per parameter list
    (a handful, kept in `factories` while `core` is built), shared by the ops that have it."""
    factory = factories.get(names)
    if factory is None:
        params = ", ".join(names)
        source = (f"def make(raw, state, name):\n"
                  f"    def op({params}):\n"
                  f"        out = raw({params})\n"
                  f"        s = state(None)\n"
                  f"        if s is not None and s.tape is not None:\n"
                  f"            s.tape.note(name, ({params},), {{}}, out)\n"
                  f"        return out\n"
                  f"    return op\n")
        scope: dict = {}
        exec(source, scope)  # noqa: S102 - a fixed template over identifiers checked by _fixed_params
        factory = factories[names] = scope["make"]
    return factory


def _composite(name: str, raw):
    """raw (a fused kernel with no backward), or its differentiable composition when an input is tracked."""
    def op(*args, **kw):
        s = _state(None)
        if s is not None and s.tape is not None:
            composite = s.tape.composite(name, args)
            if composite is not None:
                return composite(*args, **kw)
        return raw(*args, **kw)
    return _named(op, raw)


def _pieces(raw):
    """split/chunk: each returned piece taped as a slice of the input."""
    def op(x, *args, **kw):
        pieces = raw(x, *args, **kw)
        s = _state(None)
        if s is not None and s.tape is not None:
            s.tape.note_pieces(x, kw.get("dim", args[1] if len(args) > 1 else 0), pieces)
        return pieces
    return _named(op, raw)


def _refusing(name: str, raw, first: int):
    """An op that would cut the graph: a tracked input from position `first` on is an error."""
    def op(*args, **kw):
        s = _state(None)
        if s is not None and s.tape is not None and s.tape.refuses(args[first:]):
            raise s.tape.refusal(name)
        return raw(*args, **kw)
    return _named(op, raw)


def _named(op, raw):
    op.__name__ = raw.__name__
    op.__qualname__ = raw.__name__
    op.__doc__ = raw.__doc__
    return op


# copy_(dst, src): writing into a learnable is a parameter update; a tracked src would lose its gradient
_REFUSAL_FIRST = {"copy_": 1}


def _build_core() -> types.ModuleType:
    ns = types.ModuleType("tensorlogic.builtins.core.core")
    ns.__dict__.update({k: v for k, v in vars(runtime).items() if not k.startswith("__")})
    factories: dict = {}
    for name, (kind, how) in optable.CORE_OPS.items():
        raw = getattr(runtime, name)
        if kind == optable.DIFFERENTIABLE:
            if how in ("rule", "zero"):
                setattr(ns, name, _taped(name, raw, factories))
            elif how == "composite":
                setattr(ns, name, _composite(name, raw))
            elif how == "pieces":
                setattr(ns, name, _pieces(raw))
        elif kind == optable.REFUSES:
            setattr(ns, name, _refusing(name, raw, _REFUSAL_FIRST.get(name, 0)))
    return ns


# What every builtin calls (see the module docstring).
core = _build_core()


def note(name: str, args: tuple, out):
    """`out` is `name(*args)` computed by a `Tensor` operator (TL's `a + b`, `-x`): tape it as the op
    `name` when an input is tracked. Returns out."""
    s = _state(None)
    if s is not None and s.tape is not None:
        s.tape.note(name, args, {}, out)
    return out


def getitem(t, key):
    """`t[key]`, taped (rules.py's `getitem`) when t is tracked."""
    out = t[key]
    s = _state(None)
    if s is not None and s.tape is not None:
        s.tape.note("getitem", (t, key), {}, out)
    return out


def setitem(t, key, value) -> None:
    """`t[key] = value`; a tracked value would be copied without its gradient: an error instead."""
    s = _state(None)
    if s is not None and s.tape is not None and s.tape.refuses((value,)):
        raise s.tape.refusal("setitem")
    t[key] = value
RuntimeFailure = runtime.TLRuntimeError  # every error the runtime raises derives from it


def op_table() -> list[dict]:
    """The runtime's op table (cpp/runtime/op_table.h): one dict per function of the runtime with its
    name, kind, arity and flags (host_effect, in_place)."""
    return _OP_TABLE


_OP_TABLE = [dict(row) for row in runtime.op_table()]


def init_backend(name: str | None, threads: int = 0) -> None:
    """Start the device on backend `name` (cpu, cuda, metal; None: TL_BACKEND or cpu) with `threads`
    kernel threads (0: TL_THREADS, else one per core); raises the runtime's error if it can't."""
    core.init(name, threads)


def device_threads() -> int:
    """Kernel threads of the current device."""
    return int(core.threads())


def synchronize() -> None:
    """Wait until the device has finished all queued work."""
    core.synchronize()


def set_q8_activations(on: bool, rows: int = 1) -> tuple[bool, int]:
    """Switch 8-bit activations in the quantized linear ops on or off for ops encoded from now on:
    `rows` 1 covers matrix-vector products (decode) only, 0 every product, prompt pieces included
    (`tl generate --fast`, `tl serve --fast`); returns the previous (on, rows), which
    set_q8_activations(*before) restores."""
    before = q8_state()
    core.set_q8_activations(on, rows)
    return before


def q8_state() -> tuple[bool, int]:
    """(8-bit activations on, the most rows of x they cover: 0 for every product)."""
    d = core.get_debug()
    return bool(d["q8_activations"]), int(d["q8_rows"])


def memory_stats(sync: bool = True) -> dict:
    return dict(core.memory_stats(sync))
