"""A Python exception that escapes a command (a bug, or a broken install: `tqdm` missing made
`tl model fetch` print a raw traceback with status 1) is one line, `tl: internal error: ...`, and
status 4."""
from __future__ import annotations

from tensorlogic import cli
from tensorlogic.models import fetch


def _boom(*args, **kwargs):
    raise ModuleNotFoundError("No module named 'tqdm'")


def test_an_escaping_exception_is_one_line_and_status_4(monkeypatch, capsys):
    monkeypatch.setattr(fetch, "fetch_model", _boom)
    status = cli.main(["model", "fetch"])
    err = capsys.readouterr().err
    assert status == 4
    assert "Traceback" not in err
    assert err.splitlines()[0] == ("tl: internal error: ModuleNotFoundError: No module named 'tqdm' "
                                   "(a bug in TensorLogic, or a broken installation)")

