"""The one import of the native runtime `tensorlogic._core` on the Python side.

Invariant: no other module of the package imports `_core`; builtins, the logic engine's device ops,
autograd and the applications reach the runtime through `core` here (or the few helpers below), and the
interpreter (`interp/`) reaches it only through builtins, never directly (tests/test_layers.py).
"""
from __future__ import annotations

import types

from tensorlogic import _core as runtime  # type: ignore[attr-defined]

# What every builtin calls: the runtime's own functions until the first learnable tensor exists; then
# autograd/traced_core.py replaces the differentiable ones with wrappers that also tape them.
core = types.ModuleType("tensorlogic.builtins.core.core")
core.__dict__.update({k: v for k, v in vars(runtime).items() if not k.startswith("__")})

Tensor = runtime.Tensor
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


def set_q8_activations(on: bool) -> bool:
    """Switch 8-bit activations in the quantized matrix-vector products (`tl generate --fast`) on or
    off for ops encoded from now on; returns the previous setting."""
    before = bool(core.q8_activations())
    core.set_q8_activations(on)
    return before


def memory_stats() -> dict:
    return dict(core.memory_stats())
