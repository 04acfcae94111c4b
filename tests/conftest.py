"""Test-wide settings.

Hypothesis (the parser, interpreter and GGUF fuzzers): a test run draws the same examples every time
(`derandomize`), so CI's verdict depends on the code, not on the draw. `TL_FUZZ_RANDOM=1` draws new
examples on each run -- the way to hunt for new bugs (e.g. in a loop, or nightly); whatever it finds
becomes a regression test of its own.
"""
from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("explore" if os.environ.get("TL_FUZZ_RANDOM") == "1" else "ci")
