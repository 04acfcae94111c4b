"""Feedback of long training: the progress line of learn blocks (on a terminal, or TL_PROGRESS=1) and
plot(values, "loss.png") (matplotlib, an optional extra: a one-line error naming it when missing)."""
from __future__ import annotations

import sys

import pytest

import tensorlogic
from tensorlogic.builtins import learn_progress

TRAIN = """
let w = learnable([3.0])
let losses = []
learn {
    optimizer: sgd(lr = 0.1)
    epochs: 5
    for epoch in range(epochs) { let l = sum(w * w); backward(l); losses = append(losses, item(l)) }
}
"""


def test_the_progress_line_shows_epoch_step_loss_and_rate(monkeypatch, capsys):
    monkeypatch.setenv("TL_PROGRESS", "1")
    monkeypatch.setattr(learn_progress, "AFTER_SECONDS", 0.0)
    monkeypatch.setattr(learn_progress, "EVERY_SECONDS", 0.0)
    out = tensorlogic.run(TRAIN, filename="<test>")
    assert out.error is None, out.error_text
    err = capsys.readouterr().err
    assert "\r[learn] epoch 5/5  step 5  loss 1.51" in err and "steps/s" in err
    assert err.endswith("\n")
    assert out.output == ""  # the program's own output is untouched


def test_no_progress_line_off_a_terminal_or_when_turned_off(monkeypatch, capsys):
    monkeypatch.setattr(learn_progress, "AFTER_SECONDS", 0.0)
    monkeypatch.setattr(learn_progress, "EVERY_SECONDS", 0.0)
    monkeypatch.setenv("TL_PROGRESS", "0")
    assert tensorlogic.run(TRAIN, filename="<test>").error is None
    monkeypatch.delenv("TL_PROGRESS")
    assert tensorlogic.run(TRAIN, filename="<test>").error is None  # pytest's stderr is no terminal
    assert "[learn]" not in capsys.readouterr().err


def test_plot_without_matplotlib_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    out = tensorlogic.run(TRAIN + f'plot(losses, "{tmp_path}/loss.png")', filename="<test>")
    assert out.error is not None
    assert "plot needs matplotlib, an optional extra: pip install 'tensorlogic[plot]'" in out.error_text
    assert "Traceback" not in out.error_text


@pytest.mark.parametrize("call, message", [
    ('plot(losses, "loss.jpg")', "must end in .png"),
    ('plot([], "loss.png")', "non-empty"),
    ('plot("abc", "loss.png")', "must be a list of numbers or a 1-D tensor"),
])
def test_plot_argument_errors(call, message):
    out = tensorlogic.run(TRAIN + call, filename="<test>")
    assert out.error is not None and message in out.error_text


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "loss.png"
    out = tensorlogic.run(TRAIN + f'plot(losses, "{path}", title = "loss", log_y = true)', filename="<test>")
    assert out.error is None, out.error_text
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000


def test_the_progress_line_does_not_stop_a_compiled_step_from_compiling(monkeypatch, capsys):
    import io

    from tensorlogic.interp.interpreter import Interpreter
    monkeypatch.setenv("TL_PROGRESS", "1")
    monkeypatch.setattr(learn_progress, "AFTER_SECONDS", 0.0)
    monkeypatch.setattr(learn_progress, "EVERY_SECONDS", 0.0)
    interp = Interpreter(out=io.StringIO())
    interp.run_top_level(interp.load_source("""
    let w = learnable([3.0, 1.0])
    let xs = ones([2]) * 2.0
    @compile
    fn step(x) { let l = sum(w * w * x); backward(l); l }
    learn { optimizer: sgd(lr = 0.1)
            epochs: 6
            for epoch in range(epochs) { let l = step(xs) } }
    """, "t.tl"))
    impl = interp.functions["step"].impl
    assert (impl.records, impl.replays) == (1, 5)  # reading the loss for the line would abandon it
    interp.close()
    assert "step 6  loss -" in capsys.readouterr().err
