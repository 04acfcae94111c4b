"""TL builtins of the logic engine: `sigmoid_t`, `relation_tensor`, `infer`, `entities`, and the
engine's device ops.

Builtins that need the program's relations take the interpreter's call context, which carries the
run's LogicEngine as `ctx.logic_engine`. The logic package itself computes with NumPy or with the
ops object it is given; `device_ops()` here is the one that runs on `_core`, and `host_set_ops()`
the native set operations its bitset evaluator calls on NumPy arrays.
"""
from __future__ import annotations

import math

import numpy as np

from ..logic.dense_ops import CoreOps, sigmoid_t_host
from ..logic.errors import LogicError
from .convert import is_numeric_list, type_name
from .core import Tensor, core
from .registry import builtin


def device_ops() -> CoreOps:
    """The logic engine's dense ops on the current device (what TL programs use)."""
    return CoreOps(core)


def host_set_ops():
    """The logic engine's native set operations (`_core.bitset_or_pairs`, ...; no device involved)."""
    return core


def _temperature(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LogicError(f"sigmoid_t: the temperature must be a number, got {type(value).__name__}")
    if value < 0 or math.isnan(value):
        raise LogicError(f"sigmoid_t: the temperature must be >= 0, got {value}")
    return float(value)


@builtin("sigmoid_t", "sigmoid_t(x, T)",
         "sigmoid with temperature: 1 / (1 + exp(-x / T)); T = 0 is the hard step x > 0",
         min_args=2, max_args=2, category="logic")
def sigmoid_t(x, temperature):
    temperature = _temperature(temperature)
    if isinstance(x, bool):
        x = float(x)
    if isinstance(x, (int, float)):
        if temperature == 0:
            return 1.0 if x > 0 else 0.0
        z = -x / temperature
        return 0.0 if z > 700 else 1.0 / (1.0 + math.exp(z))
    if isinstance(x, Tensor):
        x32 = x if x.dtype == "f32" else core.astype(x, "f32")
        if temperature == 0:
            return core.astype(core.gt(x32, 0.0), "f32")
        return core.sigmoid(core.div(x32, temperature))
    if not (isinstance(x, np.ndarray) or is_numeric_list(x)):
        raise LogicError(f"sigmoid_t: x must be a number or a tensor, got {type_name(x)}")
    host = sigmoid_t_host(np.asarray(x, dtype=np.float32), temperature)
    return core.from_numpy(host)


def _engine(ctx):
    engine = getattr(ctx, "logic_engine", None)
    if engine is None:
        raise LogicError("this program has no relations")
    return engine


def _relation_name(value) -> str:
    if isinstance(value, str):
        return value
    name = getattr(value, "name", None)
    if isinstance(name, str):
        return name
    raise LogicError(f"expected a relation name, got {type(value).__name__}")


@builtin("relation_tensor", "relation_tensor(R)",
         "the relation R as a tensor over entity indices (bool, or f32 when weighted), after inference",
         min_args=1, max_args=1, needs_ctx=True, category="logic")
def relation_tensor(ctx, relation):
    array = _engine(ctx).relation_tensor(_relation_name(relation))
    return core.from_numpy(array, dtype="bool" if array.dtype == np.bool_ else "f32")


@builtin("infer", "infer()", "run the logic rules to their fixpoint now (queries also do this)",
         min_args=0, max_args=0, needs_ctx=True, category="logic")
def infer(ctx):
    _engine(ctx).infer()
    return None


@builtin("entities", "entities(type)",
         "the constants of an entity type in index order (the axes of relation_tensor)",
         min_args=1, max_args=1, needs_ctx=True, category="logic")
def entities(ctx, type_name):
    engine = _engine(ctx)
    name = _relation_name(type_name)
    if name not in engine.domains:
        raise LogicError(f"unknown entity type {name}")
    return list(engine.domains[name].values)


@builtin("load_relation", "load_relation(R, source)",
         "add the rows of source as facts of relation R: a .csv/.tsv/.npy path or an [n, arity] integer "
         "tensor (columns take R's declared entity types); returns the number of rows",
         min_args=2, max_args=2, needs_ctx=True, category="logic")
def load_relation(ctx, relation, source):
    from .files import _host, _path
    engine = _engine(ctx)
    if isinstance(source, str):
        return engine.load_relation(_relation_name(relation), _path(source))
    if isinstance(source, Tensor) or isinstance(source, np.ndarray) or is_numeric_list(source):
        return engine.load_relation(_relation_name(relation), _host(source)[0])
    raise LogicError(f"load_relation: the source must be a file path or a tensor, got {type_name(source)}")


@builtin("save_relation", "save_relation(R, path)",
         "write relation R's tuples (after inference) to a .csv/.tsv/.npy file; returns how many",
         min_args=2, max_args=2, needs_ctx=True, category="logic")
def save_relation(ctx, relation, path):
    from .files import _path
    return _engine(ctx).save_relation(_relation_name(relation), _path(path))
