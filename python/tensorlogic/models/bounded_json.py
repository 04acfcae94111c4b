"""JSON from outside the process (HTTP bodies, saved chats, safetensors headers, model configs),
parsed with a bound on size and nesting depth.

Invariant: `loads` never recurses deeper than `max_depth` levels and never reads more than
`max_bytes`; input beyond either is a `JsonLimitError` (a ValueError, so callers that already turn
bad JSON into a one-line error keep doing so). Python's `json` parser recurses on the C stack once per
`[`/`{`, checked only against the process's recursion limit, which `tl` raises for deep TL call
chains: a 200,000-deep `[[[...` would overflow the C stack (a segfault, not an exception). So the
depth is measured first, without recursion, and only shallow input reaches `json.loads`.
"""
from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

MAX_DEPTH = 128  # far beyond any real config, request or header (they nest 2 to 6 levels)

# A JSON string, lexed as `json` does: a quote, then non-quote non-backslash runs or escapes, a quote.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class JsonLimitError(ValueError):
    """The text is larger or nested deeper than the caller allows."""


def nesting_depth(data: bytes) -> int:
    """The deepest `[`/`{` nesting of `data` outside strings, in linear time and constant Python stack.
    For valid JSON it is the exact depth; for invalid JSON it is at least the depth `json.loads`
    reaches before it finds the error (strings are lexed the same way up to that point)."""
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    codes = np.frombuffer(brackets, dtype=np.uint8)
    steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1).astype(np.int64)
    return int(np.cumsum(steps).max(initial=0))


def loads(text: str | bytes | bytearray, *, max_depth: int = MAX_DEPTH, max_bytes: int | None = None,
          **json_kwargs) -> Any:
    """`json.loads(text, **json_kwargs)` for text from outside: JsonLimitError when it is longer than
    `max_bytes` or nests deeper than `max_depth`; the usual ValueError / UnicodeDecodeError when it is
    not JSON."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    if max_bytes is not None and len(data) > max_bytes:
        raise JsonLimitError(f"the JSON text is {len(data)} bytes, more than the {max_bytes} allowed")
    depth = nesting_depth(data)
    if depth > max_depth:
        raise JsonLimitError(f"the JSON text nests {depth} levels deep, more than the {max_depth} allowed")
    return json.loads(text, **json_kwargs)
