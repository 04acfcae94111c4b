"""A Python exception inside a builtin (KeyError, TypeError, AttributeError... from buggy builtin
code) is a bug in TensorLogic, not in the program: it surfaces as an internal error, exit status 4
(docs/exit-codes.md), distinct from a TL error's 1, with the Python traceback under --debug."""
from __future__ import annotations

import pytest

import tensorlogic
from tensorlogic import cli
from tensorlogic.builtins import registry
from tensorlogic.lang.errors import TLInternalError


@pytest.fixture
def buggy_builtin(monkeypatch):
    def buggy(x):
        return {}["no such key"]  # the planted bug
    monkeypatch.setitem(registry.BUILTINS, "buggy", registry.Builtin("buggy", buggy, "buggy(x)", "a bug", 1, 1))


def test_a_builtin_bug_is_an_internal_error(buggy_builtin):
    result = tensorlogic.run("main { print(buggy(1)) }", filename="bug.tl")
    assert result.internal_error and isinstance(result.error, TLInternalError)
    text = result.error_text
    assert text.startswith("bug.tl:1:14: internal error: buggy: KeyError: 'no such key'"), text
    assert "this is a bug in TensorLogic" in text
    assert "File " not in text  # no Python traceback without --debug


def test_a_program_error_in_a_builtin_is_not_internal():
    for source in ('print(relu("a"))', "print(reshape(ones([2, 3]), [7]))", "print(1 / 0)"):
        result = tensorlogic.run(source)
        assert result.error is not None and not result.internal_error, (source, result.error_text)


def _program(tmp_path, text):
    path = tmp_path / "bug.tl"
    path.write_text(text)
    return str(path)


def test_cli_exit_status_4_and_the_traceback_under_debug(buggy_builtin, tmp_path, capsys):
    path = _program(tmp_path, "main { print(buggy(1)) }\n")
    assert cli.main(["run", path]) == 4
    err = capsys.readouterr().err
    assert "internal error: buggy: KeyError" in err and "Traceback" not in err
    assert cli.main(["run", "--debug", path]) == 4
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and 'return {}["no such key"]' in err
    assert cli.main(["run", _program(tmp_path, 'main { print(relu("a")) }\n')]) == 1


def test_a_test_block_hitting_a_builtin_bug_exits_4(buggy_builtin, tmp_path, capsys):
    path = _program(tmp_path, "test ok { assert(true) }\ntest bug { buggy(1) }\n")
    assert cli.main(["test", path]) == 4
    assert "test bug ... FAILED" in capsys.readouterr().out
