"""The terminal the `tl` commands write to.

Invariant: once stdout's reader has gone away (`tl ... | head`), nothing more is written to it and
the process exits quietly (status 0), without Python's "Exception ignored" noise at exit.
"""
from __future__ import annotations

import os
import sys

# Exit statuses of every `tl` command (docs/exit-codes.md).
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_LEAK, EXIT_INTERNAL = 0, 1, 2, 3, 4
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), whichever command it stops


def seed_arg(text: str) -> int:
    """argparse type of --seed: a whole number 0 .. 2**63 - 1."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seed must be a whole number, got {text!r}") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"--seed must be from 0 to 2**63 - 1, got {value}")
    return value


def silence_stdout() -> None:
    """After stdout's reader went away: point stdout at /dev/null, so that the flush Python does at
    exit stays quiet."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError:
        pass


class OutputClosed(BaseException):
    """stdout's reader went away (`tl generate ... | head`). A BaseException so that it passes through
    the interpreter's error conversion and ends the command quietly."""


def write_stdout(text: str) -> None:
    """Write and flush at once (a reply streams token by token); raise OutputClosed when the reader
    has gone away."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise OutputClosed() from None
