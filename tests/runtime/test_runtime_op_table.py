"""The op table (cpp/runtime/op_table.h, `_core.op_table()`) is the one list of the runtime's ops:
every function `_core` exposes has exactly one row, each row is classified, and the places that keep
facts about the same ops (kernel_ops, the autograd's tables, the host-effect builtins,
docs/core-api.md, the Tensor operators) name the same ops."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from tensorlogic import _core

ROOT = Path(__file__).resolve().parents[2]
KINDS = {"creation", "binary", "unary", "reduce", "elementwise", "linalg", "nn", "fused", "shape", "training",
         "info", "runtime", "host"}
TABLE = _core.op_table()
BY_NAME = {row["name"]: row for row in TABLE}


def _module_functions() -> set[str]:
    return {k for k, v in vars(_core).items()
            if not k.startswith("_") and callable(v) and not isinstance(v, type)}


def test_every_module_function_has_one_classified_row():
    names = [row["name"] for row in TABLE]
    assert len(names) == len(set(names)), "a name has two rows"
    assert set(names) == _module_functions(), (
        f"functions without a row: {sorted(_module_functions() - set(names))}; "
        f"rows without a function: {sorted(set(names) - _module_functions())}")
    for row in TABLE:
        assert set(row) == {"name", "kind", "arity", "host_effect", "in_place", "enums"}, row
        assert row["kind"] in KINDS, row
        assert isinstance(row["host_effect"], bool) and isinstance(row["in_place"], bool), row
        assert row["arity"] >= -1, row
        # A function that changes runtime state is not a tensor op: no tensor inputs.
        if row["host_effect"]:
            assert row["kind"] == "runtime" and row["arity"] == 0, row
        if row["kind"] == "runtime":
            assert row["host_effect"], row
        assert bool(row["enums"]) == (row["kind"] in ("binary", "unary", "reduce") and row["name"] not in (
            "softmax", "log_softmax")), row


def test_kernel_ops_are_the_enum_rows():
    ops = _core.kernel_ops()
    for family in ("binary", "unary", "reduce"):
        rows = [row["name"] for row in TABLE if row["kind"] == family and row["enums"]]
        assert ops[family] == rows, family
    assert BY_NAME["gelu"]["enums"] == ["UnaryOp::GeluTanh", "UnaryOp::GeluErf"]


def test_the_autograd_names_only_ops_of_the_table():
    """What an op does with a gradient is the autograd's table; the ops it tapes, composes or splits
    must be rows here, and a tensor op's row must not be host-effect."""
    from tensorlogic.builtins.autograd import optable, traced_core
    from tensorlogic.builtins.autograd.rules import RULES

    with_rule = set(optable.core_ops("rule")) | set(optable.core_ops("zero"))
    taped = with_rule | set(traced_core.COMPOSITES) | set(optable.core_ops("pieces"))
    assert taped <= set(BY_NAME), sorted(taped - set(BY_NAME))
    assert with_rule <= set(RULES)
    for name in taped:
        assert not BY_NAME[name]["host_effect"] and BY_NAME[name]["kind"] not in ("runtime", "info"), name


def test_the_autograd_op_table_classifies_exactly_the_module_functions():
    # The autograd's own table of every `_core` op (issue #21) must list exactly this table's names.
    import importlib.util

    if importlib.util.find_spec("tensorlogic.builtins.autograd.optable") is None:
        import pytest
        pytest.skip("this tree has no autograd op table (builtins/autograd/optable.py)")
    from tensorlogic.builtins.autograd import optable

    assert set(optable.CORE_OPS) == set(BY_NAME), (sorted(set(BY_NAME) - set(optable.CORE_OPS)),
                                                   sorted(set(optable.CORE_OPS) - set(BY_NAME)))


def test_host_effect_builtins_include_the_runtime_functions_of_the_same_name():
    from tensorlogic.builtins.registry import BUILTINS, HOST_EFFECT_BUILTINS

    import tensorlogic.builtins  # noqa: F401  (registers every builtin)

    host = {r["name"] for r in TABLE if r["host_effect"]}
    shared = host & set(BUILTINS)
    assert {"synchronize", "memory_stats", "clear_cache"} <= shared
    assert shared <= HOST_EFFECT_BUILTINS
    # A builtin calling a tensor op of the same name is not host-effect (it is recorded).
    assert not ({"add", "matmul", "softmax", "reshape"} & HOST_EFFECT_BUILTINS)


def test_docs_core_api_names_every_op():
    code = " ".join(re.findall(r"`[^`]+`", (ROOT / "docs" / "core-api.md").read_text()))
    missing = [r["name"] for r in TABLE if not re.search(r"\b" + re.escape(r["name"]) + r"\b", code)]
    assert not missing, f"docs/core-api.md does not show these functions of _core: {missing}"


def test_operators_follow_the_binary_rows():
    x = _core.from_numpy(np.array([1.0, 2.0, 4.0], np.float32))
    # Reflected arithmetic (2 - x) and Python's swapped comparisons (1 < x means x > 1).
    np.testing.assert_array_equal((2 - x).numpy(), [1.0, 0.0, -2.0])
    np.testing.assert_array_equal((8 / x).numpy(), [8.0, 4.0, 2.0])
    np.testing.assert_array_equal((2 ** x).numpy(), [2.0, 4.0, 16.0])
    np.testing.assert_array_equal((3 % x).numpy(), [0.0, 1.0, 3.0])
    np.testing.assert_array_equal((1 < x).numpy(), [False, True, True])
    np.testing.assert_array_equal((x >= 2).numpy(), [False, True, True])
    b = _core.from_numpy(np.array([True, False, True]))
    np.testing.assert_array_equal((True & b).numpy(), [True, False, True])
    np.testing.assert_array_equal((False | b).numpy(), [True, False, True])
    assert not hasattr(_core.Tensor, "__rmaximum__") and not hasattr(_core.Tensor, "__rlt__")


def test_integer_unary_ops_keep_their_dtype_as_flagged():
    xi = _core.from_numpy(np.array([-2, 3], np.int64))
    for name in _core.kernel_ops()["unary"]:
        if name in ("logical_not", "gelu"):
            continue
        out = getattr(_core, name)(xi)
        keeps = name in ("neg", "abs", "relu", "square", "floor", "ceil", "round", "step")
        assert out.dtype == ("i64" if keeps else "f32"), name
