"""`tl serve`: an OpenAI-compatible HTTP API over one LlmSession.

    POST /v1/chat/completions   messages through the model's chat template (stream: server-sent events)
    POST /v1/completions        a raw prompt
    GET  /v1/models             the one model served (and /v1/models/ID)
    GET  /health                status, queue, counters (no API key needed)

The HTTP side is Starlette on uvicorn (a well-kept ASGI stack with streaming responses and
disconnect detection; no HTTP parsing here). Invariants:
- One worker thread owns the LlmSession: it tokenizes, renders the chat template and generates, one
  request at a time in arrival order; the event loop only parses, validates and relays. So the
  session, its KV cache (whose common prefix later requests reuse) and the interpreter never see
  two threads at once. Generation is LlmSession.generate, the TL loop of stdlib/generate.tl.
  With --parallel N the same thread runs apps/batching.py's BatchEngine instead: N requests at once,
  each in a slot with its own KV cache, decoded together in one batched step per token.
- At most `max_queue` requests wait while one runs (N run, with --parallel N); one more gets 503 at once.
- A job's text reaches its response through the event loop (call_soon_threadsafe), chunk by chunk
  as tokens are chosen. A client that goes away cancels its job: a waiting job is skipped, a
  running one stops before its next token (LlmSession's should_stop: stopped_by "interrupt").
- Every error a client can cause is a 4xx with an OpenAI-style body
  {"error": {"message", "type", "param", "code"}}; a failure inside generation is a 500 with the
  same body (or an error event in a stream); the server stays up either way.
"""
from __future__ import annotations

import asyncio
import collections
import hmac
import json
import math
import os
import queue
import signal
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator

from ..interp.deep_stack import deep_thread, run_deep
from ..models import bounded_json
from ..models.errors import ModelError

MAX_BODY_BYTES = 8 << 20  # a request body larger than this is refused (413)
MAX_JSON_DEPTH = 32  # a body nested deeper is refused (400): real requests nest 4 levels (messages[].content[])
DISCONNECT_POLL_S = 0.25  # how often a waiting non-streaming request checks that its client is still there
# Connections (README, Serving): a client has HEADER_TIMEOUT_S from connecting (or from its previous
# response) to send a request's headers, then BODY_TIMEOUT_S for the body; else the connection closes.
# At most MAX_CONNECTIONS are open (fewer when the file limit is low); a new one beyond that closes the
# oldest connection still sending its request (never one whose request is complete), or is closed itself.
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 120.0
KEEP_ALIVE_S = 5  # uvicorn's timeout_keep_alive: an idle connection between requests
MAX_CONNECTIONS = 512
MAX_HEADER_BYTES = 16 << 10  # h11_max_incomplete_event_size: larger request headers get 400
# uvicorn's backlog: the kernel's queue of connections not yet accepted, and how many asyncio accepts in
# one go before any of them is seen (and counted against MAX_CONNECTIONS) by the protocol below.
LISTEN_BACKLOG = 64


@dataclass
class ServeOptions:
    model_path: Path
    name: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = None
    max_queue: int = 16
    max_tokens: int | None = None  # cap per request; None: what is left of the context
    context: int | None = None
    backend: str | None = None
    kv_dtype: str = "f32"
    fast: bool = False
    parallel: int = 1  # slots decoded together (apps/batching.py); 1: one request at a time
    defaults: dict = field(default_factory=dict)  # sampling defaults from the command line


class ApiError(Exception):
    """An error answered as {"error": {...}} with an HTTP status."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 type: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type or ("invalid_request_error" if status < 500 else "server_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


# ---------------------------------------------------------------------- request validation

_MISSING = object()


def _shown(v: Any) -> str:
    """A value as an error message quotes it: JSON, at most 40 characters (a 400-digit number too)."""
    text = str(v) if isinstance(v, int) and not isinstance(v, bool) else json.dumps(v, ensure_ascii=True)
    return text if len(text) <= 40 else text[:37] + "..."


# The fields each endpoint honours. Any other field with a value is refused with a 400 naming it
# (OpenAI refuses arguments it does not know), so that a client never gets a 200 that silently ignored
# what it asked for (`response_format`, `logit_bias`, ...). Fields whose only honoured value is the
# default (`n`: 1, `logprobs`: false, penalties: 0, `response_format`: text) are checked one by one.
_COMMON_FIELDS = {"model", "max_tokens", "n", "stream", "stream_options", "temperature", "top_p", "top_k",
                  "min_p", "repeat_penalty", "seed", "stop", "user", "presence_penalty", "frequency_penalty",
                  "logprobs", "logit_bias", "tools", "functions"}
CHAT_FIELDS = _COMMON_FIELDS | {"messages", "max_completion_tokens", "response_format", "top_logprobs",
                                "tool_choice", "function_call", "parallel_tool_calls"}
COMPLETION_FIELDS = _COMMON_FIELDS | {"prompt", "echo", "suffix", "best_of"}
MESSAGE_FIELDS = {"role", "content", "name"}  # `name` only labels a participant; templates here take none


def _no_unknown_fields(body: dict, known: set[str], where: str = "") -> None:
    for key, value in body.items():
        if key not in known and value is not None:
            param = f"{where}.{key}" if where else key
            raise ApiError(400, f"'{param}' is not supported by this server", param, "unsupported_parameter")


def _default_only(body: dict, key: str, defaults: tuple, what: str) -> None:
    """Refuse `key` unless absent or one of `defaults` (values that ask for what happens anyway)."""
    v = body.get(key)
    if v is not None and not any(type(v) is type(d) and v == d for d in defaults):
        raise ApiError(400, f"'{key}' is not supported ({what})", key, "unsupported_parameter")


def _lone_surrogate(v: Any, where: str) -> str | None:
    """The path of the first string (value or key) in `v` with a lone UTF-16 surrogate, or None. JSON's
    "\\ud800" escapes decode to one; no tokenizer can encode it, nor can a JSON reply quote it. `v` is
    a parsed body, so this recursion is bounded by MAX_JSON_DEPTH."""
    if isinstance(v, str):
        return where if not _is_text(v) else None
    if isinstance(v, dict):
        children = []
        for k, x in v.items():
            key = k if _is_text(k) else k.encode("utf-8", "backslashreplace").decode("utf-8")
            path = f"{where}.{key}" if where else key
            if not _is_text(k):
                return path
            children.append((path, x))
    elif isinstance(v, list):
        children = [(f"{where}[{i}]", x) for i, x in enumerate(v)]
    else:
        return None
    for path, x in children:
        bad = _lone_surrogate(x, path)
        if bad is not None:
            return bad
    return None


def _is_text(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_text(body: dict) -> None:
    bad = _lone_surrogate(body, "")
    if bad is not None:
        raise ApiError(400, f"'{bad}' contains a lone UTF-16 surrogate (not valid Unicode text)", bad,
                       "invalid_value")


def _number(body: dict, key: str, default: Any, lo: float, hi: float, lo_open: bool = False) -> Any:
    v = body.get(key, _MISSING)
    if v is _MISSING or v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ApiError(400, f"'{key}' must be a number, got {_shown(v)}", key, "invalid_type")
    try:  # a 400-digit integer has no float (OverflowError): out of range like any too-large number
        finite = math.isfinite(float(v))
    except OverflowError:
        finite = False
    if not finite:
        raise ApiError(400, f"'{key}' must be a finite number in range, got {_shown(v)}", key, "invalid_value")
    if v < lo or v > hi or (lo_open and v == lo):
        interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        raise ApiError(400, f"'{key}' must be in {interval}, got {_shown(v)}", key, "invalid_value")
    return float(v)


def _integer(body: dict, key: str, default: Any, lo: int, hi: int) -> Any:
    v = body.get(key, _MISSING)
    if v is _MISSING or v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise ApiError(400, f"'{key}' must be an integer, got {json.dumps(v)[:40]}", key, "invalid_type")
    if not lo <= v <= hi:
        raise ApiError(400, f"'{key}' must be from {lo} to {hi}, got {_shown(v)}", key, "invalid_value")
    return v


def _boolean(body: dict, key: str, default: bool) -> bool:
    v = body.get(key, _MISSING)
    if v is _MISSING or v is None:
        return default
    if not isinstance(v, bool):
        raise ApiError(400, f"'{key}' must be true or false, got {json.dumps(v)[:40]}", key, "invalid_type")
    return v


def _stop_list(body: dict) -> list[str]:
    v = body.get("stop")
    if v is None:
        return []
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise ApiError(400, "'stop' must be a string or a list of strings", "stop", "invalid_type")
    if len(v) > 16:
        raise ApiError(400, f"'stop' takes at most 16 strings, got {len(v)}", "stop", "invalid_value")
    return [s for s in v if s]


def _common(body: dict, defaults: dict) -> dict:
    """The fields both endpoints share, validated; a dict of LlmSession.generate arguments plus
    'max_tokens', 'stream' and 'include_usage'."""
    _check_text(body)  # first: every later message may quote the body's strings
    if "model" in body and body["model"] is not None and not isinstance(body["model"], str):
        raise ApiError(400, "'model' must be a string", "model", "invalid_type")
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise ApiError(400, "'user' must be a string", "user", "invalid_type")
    if body.get("logit_bias") not in (None, {}):
        raise ApiError(400, "'logit_bias' is not supported", "logit_bias", "unsupported_parameter")
    n = _integer(body, "n", 1, -2**63, 2**63)
    if n != 1:
        raise ApiError(400, f"only n = 1 is supported, got {n}", "n", "unsupported_value")
    for key in ("presence_penalty", "frequency_penalty"):
        if _number(body, key, 0.0, -2.0, 2.0) != 0.0:
            raise ApiError(400, f"'{key}' is not supported (use 'repeat_penalty', as llama.cpp)", key,
                           "unsupported_parameter")
    if body.get("logprobs") not in (None, False, 0):
        raise ApiError(400, "'logprobs' is not supported", "logprobs", "unsupported_parameter")
    for key in ("tools", "functions"):
        if body.get(key) not in (None, []):
            raise ApiError(400, "tools and functions are not supported", key, "unsupported_parameter")
    max_tokens = _integer(body, "max_completion_tokens", None, 1, 2**31)
    max_tokens = _integer(body, "max_tokens", max_tokens, 1, 2**31)
    stream = _boolean(body, "stream", False)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(400, "'stream_options' must be an object", "stream_options", "invalid_type")
    _no_unknown_fields(options or {}, {"include_usage"}, "stream_options")
    include_usage = _boolean(options or {}, "include_usage", False)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ApiError(400, f"'seed' must be an integer, got {json.dumps(seed)[:40]}", "seed", "invalid_type")
    sampling = dict(
        temperature=_number(body, "temperature", defaults.get("temperature", 0.0), 0.0, 2.0),
        top_p=_number(body, "top_p", defaults.get("top_p", 1.0), 0.0, 1.0, lo_open=True),
        top_k=_integer(body, "top_k", defaults.get("top_k", 0), 0, 1 << 30),
        min_p=_number(body, "min_p", defaults.get("min_p", 0.0), 0.0, 1.0),
        repeat_penalty=_number(body, "repeat_penalty", defaults.get("repeat_penalty", 1.0), 0.0, 100.0,
                               lo_open=True),
        seed=(seed % 2**63) if seed is not None else defaults.get("seed"),  # (any integer, as OpenAI)
        stop=_stop_list(body),
    )
    return dict(sampling=sampling, max_tokens=max_tokens, stream=stream, include_usage=include_usage)


def _chat_messages(body: dict) -> list[dict[str, str]]:
    _no_unknown_fields(body, CHAT_FIELDS)
    _default_only(body, "top_logprobs", (0,), "no log probabilities are returned")
    _default_only(body, "tool_choice", ("none",), "no tools")
    _default_only(body, "function_call", ("none",), "no functions")
    _default_only(body, "parallel_tool_calls", (False, True), "no tools")
    fmt = body.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        raise ApiError(400, "'response_format' is not supported (only {\"type\": \"text\"}, the default)",
                       "response_format", "unsupported_parameter")
    messages = body.get("messages", _MISSING)
    if messages is _MISSING:
        raise ApiError(400, "'messages' is required", "messages", "missing_required_parameter")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list", "messages", "invalid_type")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise ApiError(400, f"{where} must be an object with 'role' and 'content'", where, "invalid_type")
        _no_unknown_fields(m, MESSAGE_FIELDS, where)
        if m.get("name") is not None and not isinstance(m["name"], str):
            raise ApiError(400, f"{where}.name must be a string", f"{where}.name", "invalid_type")
        role, content = m.get("role"), m.get("content")
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant"):
            raise ApiError(400, f"{where}.role must be system, user or assistant, got {json.dumps(role)[:40]}",
                           f"{where}.role", "invalid_value")
        if content is None:  # absent or null: OpenAI refuses it too (it means a tool call, not supported)
            raise ApiError(400, f"{where}.content is required (a string or a list of text parts)",
                           f"{where}.content", "missing_required_parameter")
        if isinstance(content, list):  # content parts: only text ones
            texts = []
            for part in content:
                if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                    raise ApiError(400, f"{where}.content: only text parts are supported", f"{where}.content",
                                   "invalid_value")
                texts.append(part["text"])
            content = "".join(texts)
        if not isinstance(content, str):
            raise ApiError(400, f"{where}.content must be a string or a list of text parts", f"{where}.content",
                           "invalid_type")
        out.append({"role": role, "content": content})
    return out


def _completion_prompt(body: dict) -> str | list[int]:
    _no_unknown_fields(body, COMPLETION_FIELDS)
    _default_only(body, "best_of", (1,), "only one completion is made")
    _default_only(body, "echo", (False,), "the prompt is not repeated")
    _default_only(body, "suffix", ("",), "no text is inserted")
    prompt = body.get("prompt", _MISSING)
    if prompt is _MISSING:
        raise ApiError(400, "'prompt' is required", "prompt", "missing_required_parameter")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return list(prompt)  # token ids
    if not isinstance(prompt, str):
        raise ApiError(400, "'prompt' must be a string, a list of one string, or a list of token ids",
                       "prompt", "invalid_type")
    return prompt


# ---------------------------------------------------------------------- the worker


class Job:
    """One request's generation. The worker pushes events; the request's coroutine reads them:
    ("start", prompt_tokens), ("text", str)..., then ("done", GenerationResult) or ("error", ApiError)."""

    def __init__(self, kind: str, payload: Any, params: dict, loop: asyncio.AbstractEventLoop):
        self.kind, self.payload, self.params, self.loop = kind, payload, params, loop
        self.cancelled = threading.Event()
        self.engine: Engine | None = None  # set by Engine.submit
        self.state = "new"  # "waiting" (queued), "taken" (the worker has it), "withdrawn" (gone while waiting)
        self.events: collections.deque = collections.deque()
        self.wakeup = asyncio.Event()

    def emit(self, *event: Any) -> None:  # from the worker thread
        try:
            self.loop.call_soon_threadsafe(self._push, event)
        except RuntimeError:  # the event loop has closed (shutting down)
            self.cancelled.set()

    def _push(self, event: tuple) -> None:
        self.events.append(event)
        self.wakeup.set()

    def cancel(self) -> None:
        """The client went away (or the job must stop): a waiting job gives its queue slot back now,
        not when the worker reaches it; a running one stops before its next token."""
        self.cancelled.set()
        if self.engine is not None:
            self.engine.withdraw(self)

    async def next_event(self, request=None) -> tuple:
        """The next event; with `request`, checks every DISCONNECT_POLL_S that its client is still
        there and cancels the job (returning ("gone",)) when not."""
        while not self.events:
            self.wakeup.clear()
            try:
                await asyncio.wait_for(self.wakeup.wait(), DISCONNECT_POLL_S)
            except asyncio.TimeoutError:
                if request is not None and await request.is_disconnected():
                    self.cancel()
                    return ("gone",)
        return self.events.popleft()


class Engine:
    """The worker thread that owns the LlmSession and runs jobs one at a time."""

    def __init__(self, session, options: ServeOptions):
        self.session = session
        self.options = options
        self.jobs: queue.Queue = queue.Queue()
        self.lock = threading.Lock()
        self.waiting = 0
        self.running = 0
        # served, cancelled (client gone), rejected (queue full), invalid (4xx found by the worker), errors (500)
        self.counts = collections.Counter()
        self.generated_tokens = 0
        self.started_at = time.time()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        # a deep thread (interp/deep_stack.py): TL code runs here, calls go straight to the interpreter
        self.thread = deep_thread(self._loop, "tl-serve-worker")

    def submit(self, job: Job) -> bool:
        """Queue the job; False (and nothing queued) when max_queue requests already wait."""
        with self.lock:
            if self.waiting >= self.options.max_queue and (self.running or self.waiting):
                self.counts["rejected"] += 1
                return False
            self.waiting += 1
            job.engine, job.state = self, "waiting"
        self.jobs.put(job)
        return True

    def withdraw(self, job: Job) -> None:
        """A waiting job's client left: free its slot at once (the worker skips it later)."""
        with self.lock:
            if job.state == "waiting":
                job.state = "withdrawn"
                self.waiting -= 1
                self.counts["cancelled"] += 1

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel every job, let the running one end at its next token, and end the thread."""
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancel()
                job.emit("error", ApiError(503, "the server is shutting down", code="shutting_down"))
        self._current_cancel()
        self.jobs.put(None)
        if self.thread is not None:
            self.thread.join(timeout)

    def _current_cancel(self) -> None:
        job = getattr(self, "_current", None)
        if job is not None:
            job.cancel()

    banner = "one request at a time"
    worker_text = "one worker thread owns the model: requests run one at a time, in arrival order"

    def slots_report(self) -> dict:
        """The KV cache's use (/health): one slot, the session's cache (whose prefix a request reuses)."""
        s = self.session
        cache = s.cache
        kv = sum(t.nbytes for t in cache.k + cache.v if t is not None) if cache is not None else 0
        return {"parallel": 1, "slot_context": s.capacity, "kv_bytes": kv,
                "slots": [{"id": 0, "state": "busy" if self.running else "idle",
                           "cached_tokens": len(s.cached_ids)}]}

    def status(self) -> dict:
        with self.lock:
            return {"running": self.running, "waiting": self.waiting, "max_queue": self.options.max_queue}

    def _loop(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            with self.lock:
                if job.state == "withdrawn":  # counted and its slot freed by withdraw()
                    continue
                job.state = "taken"
                self.waiting -= 1
                self.running = 1
            self._current = job
            event: tuple | None = None
            outcome = "cancelled"
            try:
                if not job.cancelled.is_set():
                    result = self._run(job)
                    event = ("done", result)
                    outcome = "cancelled" if result.stopped_by == "interrupt" else "served"
            except ApiError as e:
                event, outcome = ("error", e), "invalid"
            except ModelError as e:
                event, outcome = ("error", ApiError(400, str(e), code="invalid_prompt")), "invalid"
            except Exception as e:  # noqa: BLE001 - a bug: answered as a 500, the server goes on
                event = ("error", ApiError(500, f"internal error: {type(e).__name__}: {' '.join(str(e).split())}"))
                outcome = "errors"
            finally:
                self._current = None
                with self.lock:
                    self.running = 0
                    self.counts[outcome] += 1
                    if event is not None and event[0] == "done":
                        self.generated_tokens += len(event[1].ids)
            if event is not None:  # after the counters, so that /health agrees with what the client saw
                job.emit(*event)

    def _run(self, job: Job):
        s = self.session
        ids, max_tokens = self._prepare(job, s.capacity)
        job.emit("start", len(ids))
        on_text = (lambda text: job.emit("text", text)) if job.params["stream"] else None
        return s.generate(ids, max_tokens, on_text=on_text, should_stop=job.cancelled.is_set,
                          **job.params["sampling"])

    def _prepare(self, job: Job, capacity: int) -> tuple[list[int], int]:
        """The job's prompt ids and its token limit in a context of `capacity` positions (4xx if none)."""
        s = self.session
        param = "messages" if job.kind == "chat" else "prompt"
        if job.kind == "chat":
            if not s.has_chat_template:
                raise ApiError(400, f"{s.config.name} has no chat template (a base model): use /v1/completions",
                               "messages", "no_chat_template")
            ids = s.chat_prompt_ids(job.payload)
        elif isinstance(job.payload, list):
            vocab = s.config.vocab_size
            if any(not 0 <= t < vocab for t in job.payload):
                raise ApiError(400, f"prompt token ids must be in 0..{vocab - 1}", "prompt", "invalid_value")
            ids = list(job.payload)
        else:
            ids = s.raw_prompt_ids(job.payload)
        if not ids:
            raise ApiError(400, "the prompt is empty (no tokens)", param, "invalid_value")
        if len(ids) >= capacity:
            raise ApiError(400, f"the prompt has {len(ids)} tokens; this server's context holds {capacity} "
                                f"(tl serve --context)", param, "context_length_exceeded")
        room = capacity - len(ids) + 1  # the last prompt position's logits choose one more
        limits = [room] + [m for m in (job.params["max_tokens"], self.options.max_tokens) if m]
        return ids, min(limits)


# ---------------------------------------------------------------------- the HTTP app

FINISH_REASONS = {"eog": "stop", "stop": "stop", "max_tokens": "length", "context": "length", "interrupt": "stop"}


def _usage(result) -> dict:
    p, c = len(result.prompt_ids), len(result.ids)
    # cached: prompt tokens whose keys and values a previous request left in the cache (not run again)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
            "prompt_tokens_details": {"cached_tokens": p - result.prefilled}}


def _sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def build_app(engine: Engine, model_id: str, options: ServeOptions):
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    created = int(time.time())

    def error_response(e: ApiError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else None
        return JSONResponse(e.body(), status_code=e.status, headers=headers)

    def check_key(request: Request) -> None:
        if not options.api_key:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), options.api_key.encode()):
            raise ApiError(401, "missing or wrong API key (send `Authorization: Bearer KEY`)", code="invalid_api_key")

    async def read_json(request: Request) -> dict:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
            raise ApiError(413, f"the request body is larger than {MAX_BODY_BYTES} bytes", code="body_too_large")
        raw = bytearray()
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > MAX_BODY_BYTES:
                raise ApiError(413, f"the request body is larger than {MAX_BODY_BYTES} bytes", code="body_too_large")
        try:
            body = bounded_json.loads(raw, max_depth=MAX_JSON_DEPTH)
        except bounded_json.JsonLimitError as e:
            raise ApiError(400, f"the request body is not acceptable: {e}", code="invalid_json") from None
        except (ValueError, UnicodeDecodeError) as e:
            raise ApiError(400, f"the request body is not valid JSON: {' '.join(str(e).split())}",
                           code="invalid_json") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
        return body

    def endpoint(fn):
        async def wrapped(request: Request):
            try:
                check_key(request)
                return await fn(request)
            except ApiError as e:
                return error_response(e)
            except ClientDisconnect:
                return JSONResponse({}, status_code=499)
        return wrapped

    async def run(request: Request, kind: str, payload: Any, params: dict):
        job = Job(kind, payload, params, asyncio.get_running_loop())
        if not engine.submit(job):
            raise ApiError(503, f"the server is busy: {options.max_queue} requests are already waiting "
                                "(tl serve --max-queue); try again later", code="queue_full")
        event = await job.next_event(request)
        if event[0] == "gone":
            return JSONResponse({}, status_code=499)
        if event[0] == "error":
            raise event[1]
        prompt_tokens = event[1]
        rid = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
        if params["stream"]:
            return StreamingResponse(_stream(job, kind, rid, params["include_usage"], prompt_tokens),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        while True:
            event = await job.next_event(request)
            if event[0] == "gone":
                return JSONResponse({}, status_code=499)
            if event[0] == "error":
                raise event[1]
            if event[0] == "done":
                break
        result = event[1]
        finish = FINISH_REASONS[result.stopped_by]
        if kind == "chat":
            body = {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": model_id,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": result.text},
                                 "logprobs": None, "finish_reason": finish}],
                    "usage": _usage(result), "system_fingerprint": None}
        else:
            body = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model_id,
                    "choices": [{"index": 0, "text": result.text, "logprobs": None, "finish_reason": finish}],
                    "usage": _usage(result)}
        return JSONResponse(body)

    async def _stream(job: Job, kind: str, rid: str, include_usage: bool, prompt_tokens: int) -> AsyncIterator[str]:
        made = int(time.time())
        obj = "chat.completion.chunk" if kind == "chat" else "text_completion"

        def chunk(text: str | None, finish: str | None, role: bool = False) -> dict:
            if kind == "chat":
                delta: dict = {}
                if role:
                    delta["role"] = "assistant"
                if text is not None:
                    delta["content"] = text
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            out = {"id": rid, "object": obj, "created": made, "model": model_id, "choices": [choice]}
            if include_usage:
                out["usage"] = None
            return out

        try:
            if kind == "chat":
                yield _sse(chunk("", None, role=True))
            while True:
                event = await job.next_event()
                if event[0] == "text":
                    yield _sse(chunk(event[1], None))
                elif event[0] == "error":
                    yield _sse(event[1].body())
                    break
                elif event[0] == "done":
                    result = event[1]
                    yield _sse(chunk(None if kind == "chat" else "", FINISH_REASONS[result.stopped_by]))
                    if include_usage:
                        yield _sse({"id": rid, "object": obj, "created": made, "model": model_id, "choices": [],
                                    "usage": _usage(result)})
                    break
            yield "data: [DONE]\n\n"
        finally:
            job.cancel()  # a no-op once done; stops the generation when the client went away

    @endpoint
    async def chat_completions(request: Request):
        body = await read_json(request)
        params = _common(body, options.defaults)
        return await run(request, "chat", _chat_messages(body), params)

    @endpoint
    async def completions(request: Request):
        body = await read_json(request)
        params = _common(body, options.defaults)
        return await run(request, "completion", _completion_prompt(body), params)

    model_card = {"id": model_id, "object": "model", "created": created, "owned_by": "tensorlogic"}

    @endpoint
    async def models(request: Request):
        return JSONResponse({"object": "list", "data": [model_card]})

    @endpoint
    async def model(request: Request):
        name = request.path_params["name"]
        if name != model_id:
            raise ApiError(404, f"no model named {name!r} here; this server serves {model_id!r}", "model",
                           "model_not_found")
        return JSONResponse(model_card)

    async def health(request: Request):
        s = engine.session
        with engine.lock:
            counts = dict(engine.counts)
            generated = engine.generated_tokens
        return JSONResponse({
            "status": "ok", "model": model_id, "context": s.capacity,
            "chat_template": s.has_chat_template,
            "worker": engine.worker_text,
            "queue": engine.status(), "slots": engine.slots_report(),
            "requests": {k: counts.get(k, 0) for k in ("served", "cancelled", "rejected", "invalid", "errors")},
            "generated_tokens": generated, "uptime_s": round(time.time() - engine.started_at, 1),
        })

    async def http_error(request: Request, exc: HTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        message = {404: f"no such endpoint: {request.method} {request.url.path}",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(exc.status_code, str(exc.detail))
        return error_response(ApiError(exc.status_code, message, code=code))

    async def server_error(request: Request, exc: Exception):
        return error_response(ApiError(500, f"internal error: {type(exc).__name__}"))

    routes = [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{name:path}", model, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: server_error})


# ---------------------------------------------------------------------- connections


def _max_connections() -> int:
    """MAX_CONNECTIONS, or fewer when the open-file limit would run out first (each takes a descriptor;
    the model, the listening socket and Python's own files need some): accept() must never fail."""
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return MAX_CONNECTIONS
    if soft == getattr(resource, "RLIM_INFINITY", -1) or soft <= 0:
        return MAX_CONNECTIONS
    return max(8, min(MAX_CONNECTIONS, soft - 64))


def _guarded_protocol(max_connections: int):
    """uvicorn's h11 protocol with the deadlines and the connection bound above. uvicorn itself times
    out only idle keep-alive connections: one that sends a byte now and then, or never finishes its
    headers, stays forever (slowloris), and its limit_concurrency answers 503 to every request,
    /health included, once idle sockets fill it. Here a connection that has not sent a whole request
    in time is closed, and at the bound the oldest such connection makes room for the new one."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._deadline = None
            self._phase: str | None = None
            self._since = time.monotonic()
            _quiet_accept_errors(self.loop)
            if len(self.connections) > max_connections:
                receiving = [c for c in self.connections if c is not self and c._receiving()]
                if not receiving:
                    transport.close()
                    return
                min(receiving, key=lambda c: c._since).transport.close()
            self._watch()

        def _receiving(self) -> bool:
            """Whether the connection is still sending a request (headers or body), or sits idle."""
            return not self.transport.is_closing() and self.conn.their_state in (h11.IDLE, h11.SEND_BODY)

        def _watch(self) -> None:
            """Arm the deadline of the phase the client is in; a phase change starts its own clock."""
            state = self.conn.their_state
            phase = "headers" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
            if phase == self._phase:
                return
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            self._phase = phase
            if phase is not None and not self.transport.is_closing():
                self._since = time.monotonic()
                wait = HEADER_TIMEOUT_S if phase == "headers" else BODY_TIMEOUT_S
                self._deadline = self.loop.call_later(wait, self._expired)

        def _expired(self) -> None:
            self._deadline = None
            if self._receiving():  # the app sees a disconnect; a request still being read ends (499)
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._watch()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._watch()

        def connection_lost(self, exc) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            super().connection_lost(exc)

    return GuardedH11Protocol


def _quiet_accept_errors(loop) -> None:
    """Out of file descriptors, asyncio stops accepting for a second and logs a traceback; a burst of
    connections can get there before the bound above closes any. Say it in one line instead."""
    if getattr(loop, "_tl_quiet_accept", False):
        return
    loop._tl_quiet_accept = True
    previous = loop.get_exception_handler()

    def handler(loop, context: dict) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and "accept" in str(context.get("message", "")):
            print(f"tl serve: cannot accept connections for a moment ({exc.strerror or exc}); retrying",
                  file=sys.stderr, flush=True)
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


# ---------------------------------------------------------------------- the command


def run_server(options: ServeOptions) -> int:
    """`tl serve`: load the model, bind, serve until Ctrl-C (130) or SIGTERM."""
    try:
        import uvicorn
        import starlette  # noqa: F401
    except ImportError as e:
        print(f"tl: error: tl serve needs {e.name}: pip install starlette uvicorn", file=sys.stderr)
        return 1
    from .llm_session import CHAT_CONTEXT, LlmSession

    try:
        sock = socket.socket(socket.AF_INET6 if ":" in options.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((options.host, options.port))
        sock.listen(LISTEN_BACKLOG)  # now, not when uvicorn starts: a client that reads the banner can connect
    except (OSError, OverflowError) as e:
        print(f"tl: error: cannot listen on {options.host}:{options.port}: {getattr(e, 'strerror', None) or e}",
              file=sys.stderr)
        return 1
    try:
        session = LlmSession(options.model_path, backend=options.backend, context=options.context,
                             progress=sys.stderr.isatty(), kv_dtype=options.kv_dtype, fast=options.fast)
    except ModelError as e:
        sock.close()
        print(f"tl: error: {e}", file=sys.stderr)
        return 1
    if session.requested_context is None:
        session.requested_context = CHAT_CONTEXT
    model_id = options.name or options.model_path.stem
    try:
        if options.parallel > 1:
            from .batching import BatchEngine
            engine = BatchEngine(session, options)
        else:
            engine = Engine(session, options)
    except ModelError as e:
        sock.close()
        session.close()
        print(f"tl: error: {e}", file=sys.stderr)
        return 1
    engine.start()
    app = build_app(engine, model_id, options)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    auth = "; API key required" if options.api_key else ""
    print(f"tl serve: {session.config.name} ({options.model_path.name}) on http://{shown}:{port}/v1 "
          f"(context {session.capacity}; {engine.banner}, {options.max_queue} may wait{auth})",
          file=sys.stderr, flush=True)
    if not options.api_key and host not in ("127.0.0.1", "::1", "localhost"):
        print(f"tl serve: note: listening on {host} without --api-key: anyone who reaches this port can use it",
              file=sys.stderr, flush=True)

    class _Server(uvicorn.Server):
        stopped_by: int | None = None

        def handle_exit(self, sig: int, frame) -> None:  # SIGINT / SIGTERM: a graceful shutdown
            self.stopped_by = sig
            super().handle_exit(sig, frame)

    config = uvicorn.Config(app, log_level=os.environ.get("TL_SERVE_LOG", "warning"), access_log=False,
                            timeout_graceful_shutdown=5, lifespan="off", http=_guarded_protocol(_max_connections()),
                            timeout_keep_alive=KEEP_ALIVE_S, h11_max_incomplete_event_size=MAX_HEADER_BYTES,
                            backlog=LISTEN_BACKLOG)
    server = _Server(config)
    try:
        # The event loop runs on a deep thread too: while the worker's deep thread runs, Python's
        # recursion limit is high for every thread, and only deep threads have the C stack for it.
        # Signals reach the main thread, which waits here and passes them on as a graceful shutdown.
        run_deep(server.run, sockets=[sock],
                 signals={signal.SIGINT: lambda s: server.handle_exit(s, None),
                          signal.SIGTERM: lambda s: server.handle_exit(s, None)})
    finally:
        engine.stop()
        if not engine.thread.is_alive():
            session.close()
        sock.close()
    if server.stopped_by == signal.SIGINT:
        print("tl: interrupted", file=sys.stderr)
        return 130  # Ctrl-C, as every tl command; SIGTERM is a normal stop (0)
    return 0
