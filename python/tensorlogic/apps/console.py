"""The terminal the `tl` commands write to.

Invariant: once stdout's reader has gone away (`tl ... | head`), nothing more is written to it and
the process exits quietly (status 0), without Python's "Exception ignored" noise at exit.
"""
from __future__ import annotations

import os
import sys

# Exit statuses of every `tl` command (docs/exit-codes.md).
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_LEAK, EXIT_INTERNAL = 0, 1, 2, 3, 4


def silence_stdout() -> None:
    """After stdout's reader went away: point stdout at /dev/null, so that the flush Python does at
    exit stays quiet."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError:
        pass
