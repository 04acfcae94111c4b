"""The NumPy oracle (tests/models/numpy_llama.py) reproduces the Hugging Face reference on the
real model: this validates the GGUF reader, config and dequantization independently of TL."""
from __future__ import annotations

import numpy as np
import pytest

from numpy_llama import NumpyLlama
from tensorlogic.models.gguf_file import GGUFFile

from reference_paths import REFERENCE_DIR


@pytest.fixture(scope="module")
def oracle(smollm2_path):
    return NumpyLlama(GGUFFile(smollm2_path), dtype=np.float32)


@pytest.mark.parametrize("name", ["raw_capital", "chat_capital"])
def test_oracle_matches_hf_logits_and_greedy_ids(oracle, reference, name):
    p = next(p for p in reference["prompts"] if p["name"] == name)
    n = min(p["first_gap_below_0.01"] or p["n_new"], 8)  # the TL tests check all 48
    ids, first = oracle.greedy(p["prompt_ids"], n)
    hf = np.load(REFERENCE_DIR / p["last_logits_npy"])
    assert first.shape == hf.shape == (49152,)
    assert np.abs(first - hf).max() < 2e-4
    assert ids == p["greedy_ids"][:n]
