"""one_hot checks its ids like gather and embedding do: an id outside 0..n-1 (or not a whole
number) is an error naming it, never a silent all-zero row (before: `one_hot([5], 3)` gave
[[0, 0, 0]])."""
from __future__ import annotations

import numpy as np
import pytest

import tensorlogic


def test_one_hot_matches_numpy():
    r = tensorlogic.run("let a = one_hot(i64::from_array([2, 0, 1]), 3)\nlet b = one_hot([[1], [0]], 2)")
    assert r.error is None, r.error_text
    assert r.env["a"].numpy().tolist() == np.eye(3, dtype=np.float32)[[2, 0, 1]].tolist()
    assert r.env["b"].numpy().tolist() == np.eye(2, dtype=np.float32)[[[1], [0]]].tolist()


@pytest.mark.parametrize("ids, bad", [("i64::from_array([5])", "5"), ("[0, -1]", "-1"), ("[3, 1]", "3"),
                                      ("[0.5]", "0.5")])
def test_one_hot_refuses_ids_outside_the_classes(ids, bad):
    r = tensorlogic.run(f"let a = one_hot({ids}, 3)")
    assert r.error is not None
    assert r.error_text.splitlines()[0].endswith(f"one_hot: id {bad} is not one of 0..2 (n = 3)")
