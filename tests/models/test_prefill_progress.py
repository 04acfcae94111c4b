"""A long prompt is processed in pieces (stdlib/generate.tl's `prefill`), which bounds the prefill's
memory and lets `tl generate`/`tl chat` show a progress line: the pieces cover the prompt in order,
with or without a progress callback, the logits agree with one batched prefill to float rounding and
the generated ids are equal, on both architectures (Gemma's sliding window included); a prompt of at
most one piece stays one batch."""
from __future__ import annotations

import pty
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tensorlogic._core")

import tensorlogic  # noqa: E402
from tensorlogic.apps.llm_session import LlmSession  # noqa: E402
from tensorlogic.models.testing import write_tiny_gemma3, write_tiny_llama  # noqa: E402

WRITERS = {"llama": lambda p: write_tiny_llama(p), "gemma3": lambda p: write_tiny_gemma3(p, sliding_window=5)}


@pytest.mark.parametrize("arch", sorted(WRITERS))
def test_prefill_in_pieces_reports_progress_and_equals_one_batch(tmp_path, arch):
    path = WRITERS[arch](tmp_path / "m.gguf")
    ids = [1] + [3 + (7 * i) % 50 for i in range(30)]
    with LlmSession(path, context=64) as s:
        whole = s.generate(ids, 6, stop_at_eog=False, keep_logits=True)
        s.cached_ids = []
        seen: list[tuple[int, int]] = []
        pieces = s.generate(ids, 6, stop_at_eog=False, keep_logits=True,
                            on_prefill=lambda done, total: seen.append((done, total)), prefill_chunk=8)
        assert seen == [(8, 31), (16, 31), (24, 31), (31, 31)]
        np.testing.assert_allclose(pieces.prompt_logits, whole.prompt_logits, atol=1e-4, rtol=1e-4)
        assert pieces.ids == whole.ids
        s.cached_ids = []
        quiet = s.generate(ids, 6, stop_at_eog=False, keep_logits=True, prefill_chunk=8)
        np.testing.assert_array_equal(quiet.prompt_logits, pieces.prompt_logits)  # the same pieces
        assert quiet.ids == whole.ids
        s.cached_ids = []
        seen.clear()
        s.generate(ids[:8], 2, stop_at_eog=False, on_prefill=lambda d, t: seen.append((d, t)), prefill_chunk=8)
        assert seen == []  # no longer than one piece: one batch, nothing to report


def test_generate_on_a_terminal_shows_and_erases_the_progress_line(tmp_path):
    path = write_tiny_llama(tmp_path / "m.gguf", context_length=2048)
    parent = os.path.dirname(os.path.dirname(os.path.abspath(tensorlogic.__file__)))
    env = dict(os.environ, PYTHONPATH=parent + os.pathsep + os.environ.get("PYTHONPATH", ""))
    primary, secondary = pty.openpty()  # stderr is a terminal, stdout a pipe
    try:
        r = subprocess.run([sys.executable, "-m", "tensorlogic", "generate", "--model", str(path), "--raw",
                            "--max-tokens", "2", "--prompt", "word " * 300], stdout=subprocess.PIPE,
                           stderr=secondary, env=env, timeout=300)
        os.close(secondary)
        secondary = -1
        err = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:
                break
            if not chunk:
                break
            err += chunk
    finally:
        if secondary >= 0:
            os.close(secondary)
        os.close(primary)
    assert r.returncode == 0, err
    text = err.decode(errors="replace")
    assert "[prompt 512/" in text and "\r" in text, text
