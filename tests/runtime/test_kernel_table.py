"""`_core.kernel_ops()` lists every op of the kernel table (the bindings fail to compile when an op
enum gains a value they do not bind), and each listed op is a function of `_core` that runs."""
from __future__ import annotations

import numpy as np

from tensorlogic import _core


def test_every_listed_kernel_op_is_a_core_function_that_runs():
    ops = _core.kernel_ops()
    assert sorted(ops) == ["binary", "reduce", "unary"]
    assert len(ops["binary"]) >= 16 and len(ops["unary"]) >= 20 and len(ops["reduce"]) >= 6
    x = _core.from_numpy(np.array([[0.5, 2.0], [1.5, 3.0]], np.float32))
    for name in ops["binary"]:
        assert list(getattr(_core, name)(x, x).shape) == [2, 2], name
    for name in ops["unary"]:
        assert list(getattr(_core, name)(x).shape) == [2, 2], name
    for name in ops["reduce"]:
        assert list(getattr(_core, name)(x, dim=0).shape) == [2], name


def test_plain_dtypes():
    assert _core.dtypes() == ["f32", "f16", "bf16", "i32", "i64", "bool"]
