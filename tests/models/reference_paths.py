"""Where the reference outputs live (tests/reference/ in the repository, or $TL_REFERENCE_DIR). A module
of its own so tests can import it without importing a conftest by name."""
from __future__ import annotations

import os
from pathlib import Path

REFERENCE_DIR = Path(os.environ.get("TL_REFERENCE_DIR", Path(__file__).resolve().parents[1] / "reference"))
