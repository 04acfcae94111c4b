"""One dtype table (builtins/dtypes.py) for `as`, `astype`, `zeros(..., dtype)` and tensor
declarations, checked against the runtime's own list of element types."""
from __future__ import annotations

import pytest

import tensorlogic
from tensorlogic import _core
from tensorlogic.builtins import dtypes
from tensorlogic.builtins.registry import BUILTINS


def test_table_matches_the_runtime_dtypes():
    assert list(dtypes.RUNTIME_DTYPES) == list(_core.dtypes())
    assert set(dtypes.DTYPES.values()) == set(dtypes.RUNTIME_DTYPES)
    assert set(dtypes.KIND) == set(dtypes.RUNTIME_DTYPES)


@pytest.mark.parametrize("name", sorted(dtypes.DTYPES))
def test_as_and_astype_agree_on_every_spelling(name):
    result = tensorlogic.run(f"""
        let a = [1.5, -2.0, 0.0] as {name}
        let b = astype([1.5, -2.0, 0.0], "{name}")
        let c = zeros([2], "{name}")
        tensor d: {name}[3] = [1.5, -2.0, 0.0]
        """)
    assert result.error is None, result.error_text
    want = dtypes.DTYPES[name]
    assert [result.env[k].dtype for k in "abcd"] == [want] * 4
    assert result.env["a"].numpy().tolist() == result.env["b"].numpy().tolist()


@pytest.mark.parametrize("name", ["f64", "float64", "i16", "int16", "q4_0"])
def test_a_dtype_the_runtime_lacks_is_the_same_error_everywhere(name):
    as_error = tensorlogic.run(f"let a = [1.0] as {name}").error
    astype_error = tensorlogic.run(f'let a = astype([1.0], "{name}")').error
    zeros_error = tensorlogic.run(f'let a = zeros([1], "{name}")').error
    decl_error = tensorlogic.run(f"tensor d: {name}[1] = [1.0]").error
    assert None not in (as_error, astype_error, zeros_error, decl_error)
    why = dtypes.explain(name)
    for err in (as_error, astype_error, zeros_error, decl_error):
        assert repr(name) in err.message or f"'{name}'" in err.message
        assert why in err.message, err.message


def test_scalar_casts_follow_the_dtype_kind():
    result = tensorlogic.run("let a = 2.7 as half\nlet b = 2.7 as i32\nlet c = 0 as bool\nlet d = \"3\" as int64")
    assert result.error is None, result.error_text
    assert [result.env[k] for k in "abcd"] == [2.7, 2, False, 3]


def test_no_builtin_advertises_a_dtype_the_runtime_lacks():
    for b in BUILTINS.values():
        for bad in ("i16", "int16", "f64", "float64"):
            assert bad not in b.doc and bad not in b.signature, (b.name, bad)
