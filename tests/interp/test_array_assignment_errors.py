"""Assigning to an array element out of range is the program's error, one line like reading it
(`index 3 is out of range for array of length 3`): before, `a[3] = 1` was an internal error
(status 4, "this is a bug in TensorLogic")."""
from __future__ import annotations

import pytest

import tensorlogic


@pytest.mark.parametrize("stmt, message", [
    ("a[3] = 1", "index 3 is out of range for array of length 3"),
    ("a[-4] = 1", "index -4 is out of range for array of length 3"),
    ("b[1][5] = 1", "index 5 is out of range for array of length 2"),
    ('a["x"] = 1', None),
])
def test_out_of_range_array_assignment_is_a_tl_error(stmt, message):
    r = tensorlogic.run(f'let a = [1, 2, 3]\nlet b = [[1, 2], ["x", "y"]]\n{stmt}\n', filename="p.tl")
    assert r.error is not None
    assert "internal error" not in r.error_text and "bug in TensorLogic" not in r.error_text
    assert r.error_text.startswith("p.tl:3:1: error: ")
    if message:
        assert r.error.message.endswith(message)


def test_in_range_assignment_still_works():
    r = tensorlogic.run('let a = [1, 2, 3]\na[-1] = 7\na[0] = 5\nlet b = [[1, 2], ["x", 4]]\nb[1][0] = 9\n')
    assert r.error is None, r.error_text
    assert r.env["a"] == [5, 2, 7] and r.env["b"][1] == [9, 4]
