"""Ctrl-C (issue 14.6): in `tl repl` it cancels the statement (or the pending input) and keeps the
session and its variables; `tl generate` stopped after the model loaded exits 130 like before the
load, and its `--json` object says it was interrupted; every command exits 130 on Ctrl-C."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

import tensorlogic
from tensorlogic.repl import run_repl


class _Keys(io.StringIO):
    """stdin whose readline raises KeyboardInterrupt where a line is the string "^C"."""

    def __init__(self, lines):
        super().__init__()
        self.lines = list(lines)

    def readline(self, *a):
        if not self.lines:
            return ""
        line = self.lines.pop(0)
        if line == "^C":
            raise KeyboardInterrupt
        return line + "\n"

    def isatty(self):
        return False


def test_ctrl_c_in_the_repl_cancels_the_statement_and_keeps_the_session():
    out = io.StringIO()
    keys = _Keys(["let a = 5", "let b = input()", "^C", "print(a + 1)", "let c = [1,", "^C",
                  "print(a * 2)"])
    status = run_repl(stdin=keys, out=out)
    text = out.getvalue()
    assert status == 0
    assert "interrupted" in text, text
    assert "6" in text.split() and "10" in text.split(), text


def _fake_session(stopped_by):
    result = SimpleNamespace(prompt_ids=[1, 2], ids=[3, 4], text="Hi", stopped_by=stopped_by,
                             prompt_logits=None)
    return SimpleNamespace(has_chat_template=True, chat_prompt_ids=lambda m: [1, 2], raw_prompt_ids=lambda p: [1, 2],
                           generate=lambda *a, **k: result)


@pytest.mark.parametrize("stopped_by,status", [("interrupt", 130), ("eog", 0), ("max_tokens", 0)])
def test_generate_json_marks_an_interrupted_result_and_exits_130(capsys, stopped_by, status):
    from tensorlogic.apps.generate_command import run_generate

    args = SimpleNamespace(raw=False, prompt="hi", json=True, max_tokens=5, ignore_eos=False,
                           dump_logits=None, stats=False)
    assert run_generate(_fake_session(stopped_by), args, {}) == status
    obj = json.loads(capsys.readouterr().out)
    assert obj["interrupted"] is (stopped_by == "interrupt") and obj["stopped_by"] == stopped_by


def test_ctrl_c_while_importing_is_not_a_traceback():
    # `python -m tensorlogic`, with a "ready" line once CPython's own startup is over: a SIGINT
    # timed from the process start could land in that startup (under load it did: "Could not import
    # runpy module", status 1), which is CPython's, not TL's. Timed from "ready", every signal lands
    # in TL's imports or its run.
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(tensorlogic.__file__))))
    launcher = ("import runpy, sys; sys.argv = ['tl', 'run', '/nonexistent.tl']; "
                "sys.stdout.write('ready\\n'); sys.stdout.flush(); "
                "runpy.run_module('tensorlogic', run_name='__main__', alter_sys=True)")
    tested = 0
    for delay in (0.0, 0.01, 0.03, 0.1, 0.2):
        p = subprocess.Popen([sys.executable, "-c", launcher], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=env)
        assert p.stdout.readline() == b"ready\n"
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        if p.returncode == 2:  # done before it
            continue
        if err.rstrip().endswith(b"KeyboardInterrupt") and b"tensorlogic" not in err and b"<frozen" not in err:
            continue  # it landed in the launcher's last statement, before runpy ran anything
        assert p.returncode in (130, -signal.SIGINT), (delay, p.returncode, err)
        assert b"Traceback" not in err or b"<frozen" in err, err
        tested += 1
    assert tested, "every Ctrl-C landed before or after TL's imports"


def test_ctrl_c_in_model_fetch_exits_130(monkeypatch, capsys):
    from tensorlogic import cli
    from tensorlogic.models import fetch

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(fetch, "fetch_model", interrupted)
    assert cli.main(["model", "fetch"]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "tl: interrupted"
