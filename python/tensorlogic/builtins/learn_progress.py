"""The progress line of a long `learn` block: on a terminal, once a block has run for more than
AFTER_SECONDS, one line on stderr rewritten in place (epoch, steps, last loss, steps/s), at most every
EVERY_SECONDS, ended with a newline when the block ends.

Invariants: nothing is shown unless stderr is a terminal (or TL_PROGRESS=1 forces it; TL_PROGRESS=0
turns it off), so program output and tests see nothing; the loss is read to the host only when a
line is drawn (one device sync per EVERY_SECONDS, never one per step), and never while a compiled
function records (the read would stop it from compiling; replays show "-" for the loss).
"""
from __future__ import annotations

import os
import sys
import time

from . import symbolic

AFTER_SECONDS = 3.0
EVERY_SECONDS = 0.5


def enabled() -> bool:
    flag = os.environ.get("TL_PROGRESS")
    if flag is not None:
        return flag not in ("", "0")
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    def __init__(self, epochs: int | None, stream=None):
        self.epochs = epochs
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.monotonic()
        self.last = self.start
        self.shown = False

    def step(self, steps: int, epoch: int, loss) -> None:
        now = time.monotonic()
        if now - self.start < AFTER_SECONDS or now - self.last < EVERY_SECONDS:
            return
        self.last = now
        if symbolic.active() is not None:  # a host read would abandon a compiled step's recording
            loss = None
        try:
            value = f"{float(loss.item()):.4g}" if loss is not None and loss.numel == 1 else "-"
        except Exception:  # noqa: BLE001 - a progress line never stops training
            value = "-"
        of = f"/{self.epochs}" if self.epochs is not None else ""
        rate = steps / max(now - self.start, 1e-9)
        self.stream.write(f"\r[learn] epoch {epoch + 1}{of}  step {steps}  loss {value}  {rate:.1f} steps/s  "
                          f"{now - self.start:.0f}s ")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
