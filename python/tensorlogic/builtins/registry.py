"""The one table of TL builtins: name, signature, docstring, implementation.

Every builtin is registered here with `@builtin(...)`; the interpreter resolves names through
`BUILTINS` once per call site, `tl check` uses the arities, and `tl help builtins` prints the table.
Implementations receive TL values (int, float, bool, str, list, `_core.Tensor`, TLObject, ...)
positionally; with `needs_ctx=True` the interpreter's call context comes first.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .core import op_table


@dataclass(frozen=True)
class Builtin:
    name: str
    fn: Callable[..., Any]
    signature: str  # e.g. "softmax(x, dim=-1)"
    doc: str  # one line
    min_args: int
    max_args: int | None  # None: variadic
    needs_ctx: bool = False
    category: str = "misc"


BUILTINS: dict[str, Builtin] = {}

# Builtins that act outside device tensors (output, input, host state, random draws, loading, the
# memory ledger): a compiled function calling one is not recorded and runs eagerly (compiled.py).
# Those that are runtime functions of the same name (synchronize, memory_stats, ...) come from the
# runtime's op table (`host_effect` rows, cpp/runtime/op_table.h); this list holds the rest.
_TL_HOST_EFFECTS = frozenset({
    "print", "println", "input", "env", "seed", "random", "multinomial", "temperature_sample", "top_k",
    "top_p", "rand", "randn", "buffer_reserve_learnable", "load_model", "load_model_f32", "load_model_f16",
    "load_tokenizer", "text_stream", "token_sampler", "llama_kv_cache", "KVCache::new_f32",
    "KVCache::new_f16", "KVCache::with_capacity", "relation_tensor", "infer", "entities", "push", "pop",
    "item", "to_list", "load_relation", "save_relation",
    "json_sampler", "relation_sampler",
})
HOST_EFFECT_BUILTINS = _TL_HOST_EFFECTS | frozenset(op["name"] for op in op_table() if op["host_effect"])


def _effect_guard(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    from . import symbolic

    def guarded(*args):
        if symbolic.current() is not None:
            symbolic.abandon(f"it calls {name}, which acts outside tensors")
        return fn(*args)

    guarded.__name__ = getattr(fn, "__name__", name)
    guarded.__doc__ = fn.__doc__
    return guarded


def _refusal_guard(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """A builtin that would cut the gradient graph (autograd/optable.py): a learnable input, or one
    computed from a learnable, is an error naming it."""
    from .autograd import optable, tape

    def guarded(*args):
        if tape.tracking(*args):
            raise tape.AutogradError(optable.refusal_message(name))
        return fn(*args)

    guarded.__name__ = getattr(fn, "__name__", name)
    guarded.__doc__ = fn.__doc__
    return guarded


def _refuses_here(name: str) -> bool:
    """Refused by this layer: the table says so and no `_core` op of the same name refuses already."""
    from .autograd.optable import BUILTIN_OPS, CORE_OPS, REFUSES
    return BUILTIN_OPS.get(name, ("",))[0] == REFUSES and CORE_OPS.get(name, ("",))[0] != REFUSES


def builtin(name: str, signature: str, doc: str, *, min_args: int, max_args: int | None,
            needs_ctx: bool = False, category: str = "misc"):
    """Register the decorated function as the TL builtin `name`."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in BUILTINS:
            raise ValueError(f"builtin {name!r} registered twice")
        impl = _effect_guard(name, fn) if name in HOST_EFFECT_BUILTINS else fn
        if _refuses_here(name):
            impl = _refusal_guard(name, impl)
        BUILTINS[name] = Builtin(name, impl, signature, doc, min_args, max_args, needs_ctx, category)
        return fn

    return register


class TLObject:
    """A host object TL code can use with `.field` and `.method(args)` (models, tokenizers,
    KV caches, statistics). The interpreter calls these two hooks; AttributeError becomes a TL
    error naming the type and the field."""

    tl_type_name = "object"

    def tl_get_field(self, name: str) -> Any:
        raise AttributeError(name)

    def tl_call_method(self, name: str, args: list[Any]) -> Any:
        raise AttributeError(name)


@dataclass(frozen=True)
class KeywordArg:
    """A named call argument `name = value` (`adam(lr = 0.01)`); builtins that take names unpack it
    with `bind_keywords`, every other callee reports it as an unexpected named argument."""
    name: str
    value: Any

    tl_type_name = "named argument"


def bind_keywords(params: list[tuple[str, Any]], args: tuple) -> dict[str, Any]:
    """Positional arguments then `name = value` ones onto `params` [(name, default)]; a missing
    argument has default `REQUIRED`. Raises ValueError with one line on a bad call (the interpreter
    adds the builtin's name when it reports it)."""
    names = [p for p, _ in params]
    bound: dict[str, Any] = {}
    seen_keyword = False
    for i, a in enumerate(args):
        if isinstance(a, KeywordArg):
            seen_keyword = True
            if a.name not in names:
                raise ValueError(f"no argument named '{a.name}' (it takes {', '.join(names)})")
            if a.name in bound:
                raise ValueError(f"argument '{a.name}' given twice")
            bound[a.name] = a.value
        else:
            if seen_keyword:
                raise ValueError("a positional argument follows a named one")
            if i >= len(names):
                raise ValueError(f"takes at most {len(names)} arguments")
            bound[names[i]] = a
    for name, default in params:
        if name not in bound:
            if default is REQUIRED:
                raise ValueError(f"needs '{name}'")
            bound[name] = default
    return bound


REQUIRED = object()
