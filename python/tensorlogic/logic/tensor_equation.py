"""Tensor equations in index notation: `Y[i] = W[i, j] X[j]`, `H[i] = relu(W[i, j] X[j] + b[i])`.

Semantics (Domingos' tensor logic): a product of indexed tensors is an einsum; an index that does
not appear on the left-hand side is summed out before any function is applied to the product and
at the end; `+ - * /` between indexed terms align equal indices and broadcast the others; a
literal is a scalar. Invariant: an index letter has one size throughout an equation, and every
left-hand index occurs on the right (else an IndexEquationError names it).

Entry point for the interpreter:
    evaluate_tensor_equation(equation, lookup, call=None) -> tensor
where `equation` is lang.ast.TensorEquation, `lookup(name)` returns a TL value (a `_core.Tensor`,
NumPy array, nested list or number) and `call(name, args)` applies a TL function/builtin to
materialized tensors (used for `relu(...)` etc.; if None a small built-in table is used).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .contraction import contract
from .dense_ops import NumpyOps, default_ops, sigmoid_t_host
from .errors import LogicError


class IndexEquationError(LogicError):
    """A malformed tensor equation (unknown index, rank or size mismatch)."""


@dataclass
class Indexed:
    tensor: Any  # in the ops' representation
    indices: tuple  # one index name per axis


_HOST_FUNCTIONS = {
    "relu": lambda x: np.maximum(x, 0.0),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "abs": np.abs,
    "step": lambda x: (x > 0).astype(np.float32),
}


class _Evaluator:
    def __init__(self, out: tuple, lookup: Callable, call: Callable | None, ops):
        self.out = out
        self.lookup = lookup
        self.call = call
        self.ops = ops
        self.sizes: dict[str, int] = {}
        self.pos = None

    def fail(self, message: str, node=None):
        where = (getattr(node, "line", None), getattr(node, "column", None)) if node is not None else None
        raise IndexEquationError(message, where if where and where[0] is not None else self.pos)

    # -- values -------------------------------------------------------------------------------
    def to_host(self, value, what: str, node) -> np.ndarray:
        if hasattr(value, "numpy") and callable(value.numpy):
            value = value.numpy()
        try:
            array = np.asarray(value, dtype=np.float32)
        except (TypeError, ValueError):
            self.fail(f"{what} is not a tensor or number", node)
        return array

    def operand(self, value, what: str, node):
        """A runtime tensor stays on the device (so learnable tensors keep their gradients);
        anything else becomes a float32 host array."""
        if self.ops.name == "core" and isinstance(value, self.ops.core.Tensor):
            return value if value.dtype == "f32" else self.ops.core.astype(value, "f32")
        return self.to_host(value, what, node)

    def take(self, data, position: int, axis: int):
        if isinstance(data, np.ndarray):
            return np.take(data, position, axis=axis)
        return self.ops.core.select(data, axis, position % data.shape[axis])

    def lift(self, data):
        return self.ops.from_numpy(data) if isinstance(data, np.ndarray) else data

    def indexed_tensor(self, name: str, index_nodes, node) -> Indexed:
        from tensorlogic.lang import ast  # noqa: PLC0415

        array = self.operand(self.lookup(name), name, node)
        if array.ndim != len(index_nodes):
            dims = f"{array.ndim} dimension{'s' if array.ndim != 1 else ''}"
            self.fail(f"{name} has {dims} but is indexed with {len(index_nodes)}", node)
        names = []
        for axis, index in enumerate(index_nodes):
            if isinstance(index, str):
                names.append(index)
            elif isinstance(index, ast.Name):
                names.append(index.id)
            elif isinstance(index, ast.IntLit):
                names.append(int(index.value))
            else:
                self.fail(f"index {axis + 1} of {name} must be an index name or an integer", node)
        for axis in range(len(names) - 1, -1, -1):  # fixed integer positions select a slice
            if isinstance(names[axis], int):
                position = names[axis]
                if not -array.shape[axis] <= position < array.shape[axis]:
                    self.fail(f"index {position} is out of range for axis {axis} of {name} "
                              f"(size {array.shape[axis]})", node)
                array = self.take(array, position, axis)
                names.pop(axis)
        for axis, index in enumerate(names):
            size = array.shape[axis]
            if self.sizes.setdefault(index, size) != size:
                self.fail(f"index {index} has size {self.sizes[index]} elsewhere but {size} in {name}", node)
        distinct = tuple(dict.fromkeys(names))
        if len(distinct) == len(names):
            return Indexed(self.lift(array), tuple(names))
        # a repeated index inside one tensor takes its diagonal: tie each axis to its index by identity
        axis_names = tuple(f"{n}#{k}" for k, n in enumerate(names))
        sizes = dict(self.sizes)
        sizes.update({a: self.sizes[n] for a, n in zip(axis_names, names)})
        factors = [(self.lift(array), axis_names)]
        factors += [(self.ops.from_numpy(np.eye(self.sizes[n], dtype=np.float32)), (a, n))
                    for a, n in zip(axis_names, names)]
        return Indexed(contract(self.ops, factors, distinct, sizes), distinct)

    def sum_out_to(self, value: Indexed, keep: tuple) -> Indexed:
        target = tuple(i for i in value.indices if i in keep)
        if target == value.indices:
            return value
        return Indexed(contract(self.ops, [(value.tensor, value.indices)], target, self.sizes), target)

    def product(self, parts: list[Indexed]) -> Indexed:
        indices = tuple(dict.fromkeys(i for p in parts for i in p.indices))
        keep = tuple(i for i in indices if i in self.out)
        return Indexed(contract(self.ops, [(p.tensor, p.indices) for p in parts], keep, self.sizes), keep)

    def align(self, value: Indexed, indices: tuple):
        """View of value's tensor with axes ordered as `indices` (size-1 where absent)."""
        present = [i for i in indices if i in value.indices]
        tensor = value.tensor
        if tuple(present) != value.indices:
            tensor = self.ops.permute(tensor, [value.indices.index(i) for i in present])
        shape = [self.sizes[i] if i in value.indices else 1 for i in indices]
        return self.ops.reshape(tensor, shape) if shape else tensor

    # -- expressions ----------------------------------------------------------------------------
    def eval(self, node) -> Indexed:
        from tensorlogic.lang import ast  # noqa: PLC0415

        if isinstance(node, ast.IndexedTensor):
            return self.indexed_tensor(node.name, node.indices, node)
        if isinstance(node, ast.Index) and isinstance(node.obj, ast.Name):
            return self.indexed_tensor(node.obj.id, node.indices, node)
        if isinstance(node, ast.JuxtProduct):
            return self.product([self.eval(f) for f in node.factors])
        if isinstance(node, (ast.IntLit, ast.FloatLit)):
            return Indexed(self.ops.from_numpy(np.float32(node.value)), ())
        if isinstance(node, ast.Name):
            array = self.operand(self.lookup(node.id), node.id, node)
            if array.ndim != 0:
                self.fail(f"{node.id} is a tensor; index it (e.g. {node.id}[i]) in a tensor equation", node)
            return Indexed(self.lift(array), ())
        if isinstance(node, ast.UnaryOp) and node.op == "-":
            value = self.eval(node.operand)
            return Indexed(self.ops.mul(value.tensor, self.ops.from_numpy(np.float32(-1.0))), value.indices)
        if isinstance(node, ast.BinOp) and node.op in ("+", "-", "*", "/", "⊙"):
            left, right = self.eval(node.left), self.eval(node.right)
            if node.op in ("+", "-"):  # a sum's terms are summed out separately
                left = self.sum_out_to(left, self.out)
                right = self.sum_out_to(right, self.out)
            indices = tuple(dict.fromkeys(left.indices + right.indices))
            a, b = self.align(left, indices), self.align(right, indices)
            combined = {"+": self.ops.add, "-": self.ops.sub, "*": self.ops.mul, "⊙": self.ops.mul,
                        "/": self.ops.div}[node.op](a, b)
            return Indexed(combined, indices) if indices else Indexed(combined, ())
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return self.apply(node.func.id, node.args, node)
        self.fail("a tensor equation's right-hand side may use indexed tensors, numbers, "
                  "+ - * /, and function calls", node)

    def apply(self, name: str, arg_nodes, node) -> Indexed:
        if not arg_nodes:
            self.fail(f"{name}() needs an argument in a tensor equation", node)
        value = self.sum_out_to(self.eval(arg_nodes[0]), self.out)
        extra = []
        for extra_node in arg_nodes[1:]:
            scalar = self.eval(extra_node)
            if scalar.indices:
                self.fail(f"only the first argument of {name} may carry indices", node)
            extra.append(float(np.asarray(self.ops.to_numpy(scalar.tensor))))
        if self.call is not None and self.ops.name == "core":  # on the device, gradients flow through
            result = self.call(name, [value.tensor] + extra)
            if not isinstance(result, self.ops.core.Tensor):
                result = self.ops.from_numpy(self.to_host(result, f"{name}(...)", node))
            if tuple(result.shape) != tuple(value.tensor.shape):
                self.fail(f"{name} changed the shape {list(value.tensor.shape)} to {list(result.shape)} "
                          f"inside a tensor equation", node)
            return Indexed(result if result.dtype == "f32" else self.ops.core.astype(result, "f32"), value.indices)
        host = self.ops.to_numpy(value.tensor)
        if self.call is not None:  # TL functions on host arrays (NumPy evaluation)
            result = self.call(name, [host] + extra)
            result = self.to_host(result, f"{name}(...)", node)
        elif name == "sigmoid_t" and len(extra) == 1:
            result = sigmoid_t_host(host, extra[0])
        elif name in _HOST_FUNCTIONS and not extra:
            result = _HOST_FUNCTIONS[name](host).astype(np.float32)
        else:
            self.fail(f"unknown function {name} in a tensor equation", node)
        if result.shape != host.shape:
            self.fail(f"{name} changed the shape {list(host.shape)} to {list(result.shape)} "
                      f"inside a tensor equation", node)
        return Indexed(self.ops.from_numpy(result), value.indices)


def evaluate_tensor_equation(equation, lookup: Callable, call: Callable | None = None, ops=None):
    """The tensor defined by `equation` (lang.ast.TensorEquation), axes in left-hand index order."""
    ops = ops or default_ops()
    out = tuple(equation.indices)
    if len(set(out)) != len(out):
        raise IndexEquationError(f"{equation.name}[{', '.join(out)}] repeats an index on the left",
                                 (equation.line, equation.column))
    evaluator = _Evaluator(out, lookup, call, ops)
    evaluator.pos = (equation.line, equation.column)
    value = evaluator.sum_out_to(evaluator.eval(equation.value), out)
    missing = [i for i in out if i not in value.indices]
    if missing:
        raise IndexEquationError(f"index {missing[0]} of {equation.name} does not occur on the "
                                 f"right-hand side", (equation.line, equation.column))
    if value.indices != out:
        value = Indexed(ops.permute(value.tensor, [value.indices.index(i) for i in out]), out)
    return value.tensor


def einsum_indexed(out: tuple, factors: list, ops=None):
    """Einsum of (array, indices) factors onto `out` (Python API; arrays are NumPy or tensors)."""
    ops = ops or NumpyOps()
    sizes: dict = {}
    converted = []
    for array, indices in factors:
        host = np.asarray(array.numpy() if hasattr(array, "numpy") else array, dtype=np.float32)
        for index, size in zip(indices, host.shape):
            if sizes.setdefault(index, size) != size:
                raise IndexEquationError(f"index {index} has sizes {sizes[index]} and {size}")
        converted.append((ops.from_numpy(host), tuple(indices)))
    return contract(ops, converted, tuple(out), sizes)
