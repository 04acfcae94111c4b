"""The few tensor operations dense logic evaluation needs, on NumPy or on `tensorlogic._core`.

Invariant: both classes compute the same float32 results for the same inputs (the tests check the
core one against the NumPy one); everything above this file is backend-agnostic and only calls these
methods. `CoreOps` is handed the runtime module; this package never imports it.
"""
from __future__ import annotations

import numpy as np


def sigmoid_t_host(x: np.ndarray, temperature: float) -> np.ndarray:
    """sigmoid(x / T) for T > 0; the hard step (x > 0) for T = 0 (NumPy, float32)."""
    x = np.asarray(x, dtype=np.float32)
    if temperature == 0:
        return (x > 0).astype(np.float32)
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64) / temperature))).astype(np.float32)


class NumpyOps:
    name = "numpy"

    def from_numpy(self, array: np.ndarray):
        return np.asarray(array, dtype=np.float32, order="C")

    def to_numpy(self, tensor) -> np.ndarray:
        return np.asarray(tensor, dtype=np.float32)

    def permute(self, tensor, dims):
        return np.transpose(tensor, dims)

    def reshape(self, tensor, shape):
        return np.reshape(tensor, tuple(shape))

    def matmul(self, a, b):
        return np.matmul(a, b)

    def sum(self, tensor, dim: int):
        return np.sum(tensor, axis=dim)

    def max(self, tensor, dim: int):
        return np.max(tensor, axis=dim)

    def select(self, tensor, dim: int, index: int):
        return np.take(tensor, index, axis=dim)

    def mul(self, a, b):
        return a * b

    def add(self, a, b):
        return a + b

    def sub(self, a, b):
        return a - b

    def div(self, a, b):
        return a / b

    def one_minus(self, tensor):
        return 1.0 - tensor

    def maximum(self, a, b):
        return np.maximum(a, b)

    def hard_step(self, tensor):
        return (tensor > 0).astype(np.float32)

    def at_least_one(self, tensor):
        return (tensor >= 1.0).astype(np.float32)

    def soft_step(self, tensor, temperature: float):
        return np.tanh(tensor / (2.0 * temperature)).astype(np.float32)

    def eye(self, n: int):
        return np.eye(n, dtype=np.float32)

    def one_hot(self, n: int, index: int):
        out = np.zeros(n, np.float32)
        out[index] = 1.0
        return out

    def any_positive(self, tensor) -> bool:
        return bool(np.any(tensor > 0))

    def max_abs_diff(self, a, b) -> float:
        return float(np.max(np.abs(a - b))) if np.size(a) else 0.0


class CoreOps:
    """The same operations on the native runtime (any backend `_core.init` selected)."""

    name = "core"

    def __init__(self, core_module):
        self.core = core_module

    def from_numpy(self, array: np.ndarray):
        return self.core.from_numpy(np.asarray(array, dtype=np.float32, order="C"), dtype="f32")

    def to_numpy(self, tensor) -> np.ndarray:
        return tensor.numpy()

    def permute(self, tensor, dims):
        return self.core.contiguous(self.core.permute(tensor, list(dims)))

    def reshape(self, tensor, shape):
        return self.core.reshape(self.core.contiguous(tensor), [int(s) for s in shape])

    def matmul(self, a, b):
        return self.core.matmul(a, b)

    def sum(self, tensor, dim: int):
        return self.core.sum(tensor, dim=dim)

    def max(self, tensor, dim: int):
        return self.core.max(tensor, dim=dim)

    def select(self, tensor, dim: int, index: int):
        return self.core.contiguous(self.core.select(tensor, dim, int(index)))

    def mul(self, a, b):
        return self.core.mul(a, b)

    def add(self, a, b):
        return self.core.add(a, b)

    def sub(self, a, b):
        return self.core.sub(a, b)

    def div(self, a, b):
        return self.core.div(a, b)

    def one_minus(self, tensor):
        return self.core.sub(1.0, tensor)

    def maximum(self, a, b):
        return self.core.maximum(a, b)

    def hard_step(self, tensor):
        return self.core.astype(self.core.gt(tensor, 0.0), "f32")

    def at_least_one(self, tensor):
        return self.core.astype(self.core.ge(tensor, 1.0), "f32")

    def soft_step(self, tensor, temperature: float):
        return self.core.tanh(self.core.div(tensor, 2.0 * temperature))

    def eye(self, n: int):
        return self.from_numpy(np.eye(n, dtype=np.float32))

    def one_hot(self, n: int, index: int):
        out = np.zeros(n, np.float32)
        out[index] = 1.0
        return self.from_numpy(out)

    def any_positive(self, tensor) -> bool:
        return bool(self.core.max(tensor).item() > 0) if tensor.numel else False

    def max_abs_diff(self, a, b) -> float:
        return float(self.core.max(self.core.abs(self.core.sub(a, b))).item()) if a.numel else 0.0


def default_ops():
    """NumpyOps: the logic package never imports the runtime itself. A caller with a device passes
    `CoreOps(core)` (the interpreter does, through `tensorlogic.builtins.logic.device_ops`)."""
    return NumpyOps()
