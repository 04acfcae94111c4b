"""`tl serve`'s request log and Prometheus metrics: one ASGI middleware sees every request.

Invariants: every HTTP request that reaches the app (any path, any status, a stream included) gets
exactly one log line when its response ends (or its client leaves), and is counted once in
`Metrics`; token counts come from the endpoints (`request.state.tl_usage`, set once a request's
choices are done). Counters only grow; all updates happen on the event loop thread, so the
counters need no lock. The text of /metrics follows the Prometheus exposition format 0.0.4.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable

# upper bounds (seconds) of the request-duration histogram's buckets
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class Metrics:
    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, int], int] = {}  # (method, route, status) -> count
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.buckets = [0] * len(DURATION_BUCKETS)
        self.duration_sum = 0.0
        self.duration_count = 0

    def record(self, method: str, route: str, status: int, seconds: float, usage: dict | None) -> None:
        key = (method, route, status)
        self.requests[key] = self.requests.get(key, 0) + 1
        for i, bound in enumerate(DURATION_BUCKETS):
            if seconds <= bound:
                self.buckets[i] += 1
        self.duration_sum += seconds
        self.duration_count += 1
        if usage:
            self.prompt_tokens += int(usage.get("prompt_tokens", 0))
            self.completion_tokens += int(usage.get("completion_tokens", 0))

    def text(self, gauges: dict[str, tuple[str, float]]) -> str:
        """The exposition text; `gauges` maps a name to (help, value) (the engine's queue, ...)."""
        out = []

        def head(name: str, kind: str, help_text: str) -> None:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")

        head("tl_requests_total", "counter", "HTTP requests answered, by method, route and status")
        for (method, route, status), count in sorted(self.requests.items()):
            out.append(f'tl_requests_total{{method="{method}",route="{_label(route)}",status="{status}"}} {count}')
        head("tl_prompt_tokens_total", "counter", "prompt tokens of completed generation requests")
        out.append(f"tl_prompt_tokens_total {self.prompt_tokens}")
        head("tl_completion_tokens_total", "counter", "tokens generated for completed generation requests")
        out.append(f"tl_completion_tokens_total {self.completion_tokens}")
        head("tl_request_duration_seconds", "histogram", "time from a request's arrival to its response's end")
        for bound, count in zip(DURATION_BUCKETS, self.buckets):
            out.append(f'tl_request_duration_seconds_bucket{{le="{bound:g}"}} {count}')
        out.append(f'tl_request_duration_seconds_bucket{{le="+Inf"}} {self.duration_count}')
        out.append(f"tl_request_duration_seconds_sum {self.duration_sum:.6f}")
        out.append(f"tl_request_duration_seconds_count {self.duration_count}")
        for name, (help_text, value) in gauges.items():
            head(name, "gauge", help_text)
            out.append(f"{name} {value}" if isinstance(value, int) else f"{name} {value:g}")  # bytes in full
        return "\n".join(out) + "\n"


def memory(interp) -> dict:
    """The server's memory (/health, /metrics): the process's resident set, the runtime's buffer
    pool (live tensors, cached free blocks, all it holds, the cache's bound) and what the compiled
    steps' recordings own (intermediates kept for replays; at most MAX_RECORDINGS_PER_FUNCTION per
    function). Read from the event loop while the worker runs: counters only, no tensor touched."""
    from ..builtins.convert import core

    stats = core.memory_stats()
    owned = 0
    for cf in list(interp.compiled_functions):
        for entry in list(cf.entries.values()):
            rec = getattr(entry, "recording", None)
            if rec is not None:
                owned += int(rec.owned_bytes)
    return {"rss_bytes": _rss_bytes(), "live_bytes": int(stats["live_bytes"]),
            "cached_bytes": int(stats["cached_bytes"]), "pool_bytes": int(stats["device_bytes"]),
            "cache_limit_bytes": int(stats["cache_limit_bytes"]), "recordings_bytes": owned}


MEMORY_GAUGES = {"rss_bytes": "resident set size of the server process",
                 "pool_bytes": "bytes the runtime's buffer pool holds (live tensors and cached free blocks)",
                 "live_bytes": "bytes of live tensors (weights, KV caches, recordings, work in flight)",
                 "cached_bytes": "free blocks the pool keeps for reuse",
                 "recordings_bytes": "bytes the compiled steps' recordings own"}


def memory_gauges(interp) -> dict[str, tuple[str, float]]:
    m = memory(interp)
    return {f"tl_memory_{k}": (text, m[k]) for k, text in MEMORY_GAUGES.items()}


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):  # not Linux: the peak from getrusage instead
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def _label(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class RequestLog:
    """ASGI middleware: times each HTTP request, counts it in `metrics`, and writes one line
    `tl serve: CLIENT METHOD PATH STATUS SECONDS [prompt=P completion=C]` to `out` (stderr)."""

    def __init__(self, app: Callable, metrics: Metrics, route_of: Callable[[str], str], out: Any = None,
                 enabled: bool = True):
        self.app, self.metrics, self.route_of = app, metrics, route_of
        self.out = out if out is not None else sys.stderr
        self.enabled = enabled

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [499]  # no response started: the client left first
        scope.setdefault("state", {})

        async def send_watched(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_watched)
        finally:
            seconds = time.perf_counter() - started
            usage = scope["state"].get("tl_usage")
            path = "".join(c if c.isprintable() and c != " " else "?" for c in scope.get("path", ""))[:200]
            self.metrics.record(scope["method"], self.route_of(path), status[0], seconds, usage)
            if self.enabled:
                client = scope.get("client") or ("-", 0)
                tokens = f" prompt={usage['prompt_tokens']} completion={usage['completion_tokens']}" if usage else ""
                print(f"tl serve: {client[0]} {scope['method']} {path} {status[0]} {seconds:.3f}s{tokens}",
                      file=self.out, flush=True)
