"""Test-wide settings.

Hypothesis (the parser, interpreter and GGUF fuzzers): a test run draws the same examples every time
(`derandomize`), so CI's verdict depends on the code, not on the draw. `TL_FUZZ_RANDOM=1` draws new
examples on each run -- the way to hunt for new bugs (e.g. in a loop, or nightly); whatever it finds
becomes a regression test of its own.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("explore" if os.environ.get("TL_FUZZ_RANDOM") == "1" else "ci")


@pytest.fixture(scope="session")
def package_pythonpath() -> str:
    """PYTHONPATH for a subprocess that imports the package under test: its parent folder (never the
    source tree's python/, see test_subprocess_env.py), then the caller's PYTHONPATH, where a machine
    without the dependencies installed keeps them (the GPU machine's carried wheels)."""
    import tensorlogic

    parent = os.path.dirname(os.path.dirname(os.path.abspath(tensorlogic.__file__)))
    rest = os.environ.get("PYTHONPATH", "")
    return parent + (os.pathsep + rest if rest else "")
