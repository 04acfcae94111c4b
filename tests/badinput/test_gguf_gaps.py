"""GGUF bad input not already covered by tests/models/test_gguf_file.py (which covers truncation at
every header byte, bad magic, wrong version, absurd counts and dims, offsets past the end, unknown and
unsupported quant types, missing metadata and tensors): a byte-level BPE tokenizer with no merges,
through the Python API, a TL program and `tl generate`. Each is one error naming the file and the problem."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tensorlogic.models.errors import ModelError


@pytest.fixture(scope="module")
def no_merges_path(tmp_path_factory) -> Path:
    from tensorlogic.models.testing import write_tiny_llama

    path = write_tiny_llama(tmp_path_factory.mktemp("gguf") / "no_merges.gguf", tokenizer="gpt2")
    raw = path.read_bytes()
    assert raw.count(b"tokenizer.ggml.merges") == 1
    path.write_bytes(raw.replace(b"tokenizer.ggml.merges", b"tokenizer.ggml.mergex"))  # the key is gone
    return path


def test_tokenizer_without_merges_python(no_merges_path):
    from tensorlogic.models.tokenizer import Tokenizer

    with pytest.raises(ModelError) as e:
        Tokenizer.from_file(no_merges_path)
    assert str(no_merges_path) in str(e.value) and "without tokenizer.ggml.merges" in str(e.value)


def _tl(*args):
    import tensorlogic

    env = dict(os.environ, PYTHONPATH=str(Path(tensorlogic.__file__).resolve().parent.parent))
    return subprocess.run([sys.executable, "-m", "tensorlogic", *args], capture_output=True, text=True, env=env,
                          timeout=120, stdin=subprocess.DEVNULL)


def test_tokenizer_without_merges_tl_program(no_merges_path, tmp_path):
    pytest.importorskip("tensorlogic._core")
    prog = tmp_path / "tok.tl"
    prog.write_text(f'main {{ let tok = load_tokenizer("{no_merges_path}") }}\n')
    r = _tl("run", str(prog))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "without tokenizer.ggml.merges" in r.stderr and str(no_merges_path) in r.stderr


def test_tokenizer_without_merges_generate(no_merges_path):
    pytest.importorskip("tensorlogic._core")
    r = _tl("generate", "--model", str(no_merges_path), "--prompt", "hi", "--raw")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("tl: error: ")
    assert "without tokenizer.ggml.merges" in lines[0]
