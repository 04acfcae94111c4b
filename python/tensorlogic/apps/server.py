"""`tl serve`: an OpenAI-compatible HTTP API over one LlmSession.

    POST /v1/chat/completions   messages through the model's chat template (stream: server-sent events;
                                tools: serve_tools.py)
    POST /v1/completions        a raw prompt, token ids, or a list of prompts
    POST /v1/embeddings         pooled final hidden states (serve_embed.py)
    POST /v1/responses          the Responses API's basic text form
    GET  /v1/models             the one model served (and /v1/models/ID)
    (each of these also without /v1)
    POST /tokenize, /detokenize llama-server's shapes
    GET  /metrics               Prometheus text (serve_metrics.py, which also writes the request log)
    GET  /health                status, queue, counters (no API key needed)

The HTTP side is Starlette on uvicorn (a well-kept ASGI stack with streaming responses and
disconnect detection; no HTTP parsing here). Invariants:
- One worker thread owns the LlmSession: it tokenizes, renders the chat template and generates, one
  request at a time in arrival order; the event loop only parses, validates and relays. So the
  session, its KV cache (whose common prefix later requests reuse) and the interpreter never see
  two threads at once. Generation is LlmSession.generate, the TL loop of stdlib/generate.tl.
- At most `max_queue` requests wait while one runs (N run, with --parallel N); one more gets 503 at once. A request with
  several choices (n > 1, a list of prompts, several embedding inputs) is one job per choice, queued
  all or none (JobGroup); choice j of a prompt samples with seed + j.
- logprobs, logit_bias, the penalties and response_format / tools choose through a GuidedSampler
  (builtins/guided.py) made by the worker per job; without them the plain sampler runs, unchanged.
- /tokenize and /detokenize run on the event loop: they only read the tokenizer (whose one
  switch, parse_special, is always on), so the worker may use it at the same time.
  With --parallel N the same thread runs apps/batching.py's BatchEngine (an Engine) instead: N requests at once,
  each in a slot with its own KV cache, decoded together in one batched step per token; a job that
  needs a guided sampler (logprobs, logit_bias, penalties, response_format, tools) or is an
  embedding runs alone on the one-at-a-time path while the slots wait.
- A job's text reaches its response through the event loop (call_soon_threadsafe), chunk by chunk
  as tokens are chosen. A client that goes away cancels its job: a waiting job is skipped, a
  running one stops before its next token (LlmSession's should_stop: stopped_by "interrupt").
- Every error a client can cause is a 4xx with an OpenAI-style body
  {"error": {"message", "type", "param", "code"}}; a failure inside generation is a 500 with the
  same body (or an error event in a stream); the server stays up either way.
"""
from __future__ import annotations

import asyncio
import base64
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
from . import openai_logprobs, serve_tools

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
    cors_origins: tuple[str, ...] = ()  # origins browsers may call from (--cors-origin; "*": any)
    request_log: bool = True  # one line per request on stderr
    pooling: str = "mean"  # /v1/embeddings: how a text's hidden states become one vector (serve_embed.py)


class ApiError(Exception):
    """An error answered as {"error": {...}} with an HTTP status."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 type: str | None = None, extra: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type or ("invalid_request_error" if status < 500 else "server_error")
        self.extra = extra or {}  # fields after OpenAI's four (llama-server's n_prompt_tokens and n_ctx)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code,
                          **self.extra}}


# ---------------------------------------------------------------------- request validation

_MISSING = object()
MAX_CHOICES = 16  # `n`: independent choices of one request (each its own job in the queue)


def _shown(v: Any) -> str:
    """A value as an error message quotes it: JSON, at most 40 characters (a 400-digit number too)."""
    text = str(v) if isinstance(v, int) and not isinstance(v, bool) else json.dumps(v, ensure_ascii=True)
    return text if len(text) <= 40 else text[:37] + "..."


# The fields each endpoint honours. Any other field with a value is refused with a 400 naming it
# (OpenAI refuses arguments it does not know), so that a client never gets a 200 that silently ignored
# what it asked for. Fields whose only honoured value is the default (penalties: 0, tools: none)
# are checked one by one.
_COMMON_FIELDS = {"model", "max_tokens", "n", "stream", "stream_options", "temperature", "top_p", "top_k",
                  "min_p", "repeat_penalty", "seed", "stop", "user", "presence_penalty", "frequency_penalty",
                  "logprobs", "logit_bias", "functions", "response_format"}
CHAT_FIELDS = _COMMON_FIELDS | {"messages", "max_completion_tokens", "top_logprobs", "tools",
                                "tool_choice", "function_call", "parallel_tool_calls"}
COMPLETION_FIELDS = _COMMON_FIELDS | {"prompt", "echo", "suffix", "best_of"}
MESSAGE_FIELDS = {"role", "content", "name"}  # `name` only labels a participant; templates here take none
TOOL_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


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
    n = _integer(body, "n", 1, 1, MAX_CHOICES)
    penalties = {key: _number(body, key, 0.0, -2.0, 2.0) for key in ("presence_penalty", "frequency_penalty")}
    if body.get("functions") not in (None, []):
        raise ApiError(400, "'functions' is not supported (use 'tools')", "functions", "unsupported_parameter")
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
    return dict(sampling=sampling, max_tokens=max_tokens, stream=stream, include_usage=include_usage, n=n,
                logit_bias=_logit_bias(body), response_format=_response_format(body), **penalties)


class ResponseFormat:
    """A compiled `response_format` schema; `constraint(session)` makes one generation's JsonConstraint
    (the automaton, with its cached masks, is shared by the requests with the same schema)."""

    _automata: collections.OrderedDict = collections.OrderedDict()  # schema text -> Automaton (LRU, worker only)

    def __init__(self, key: str, root):
        self.key, self.root = key, root

    def constraint(self, session):
        from ..models.json_grammar import Automaton, JsonConstraint, token_index

        cache = ResponseFormat._automata
        automaton = cache.pop(self.key, None) or Automaton(self.root)
        cache[self.key] = automaton
        while len(cache) > 8:
            cache.popitem(last=False)
        return JsonConstraint(automaton, token_index(session.tokenizer.tok, session.config.vocab_size))


def _response_format(body: dict) -> ResponseFormat | None:
    """`response_format`: {"type": "text"} (None), {"type": "json_object"} (any JSON object), or
    {"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}; llama-server's
    {"type": "json_object", "schema": ...} too. The schema subset is models/json_grammar.py's."""
    from ..models.json_grammar import SchemaError, compile_schema

    fmt = body.get("response_format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise ApiError(400, "'response_format' must be an object", "response_format", "invalid_type")
    kind = fmt.get("type")
    if kind == "text":
        _no_unknown_fields(fmt, {"type"}, "response_format")
        return None
    if kind == "json_object":
        _no_unknown_fields(fmt, {"type", "schema"}, "response_format")
        schema, where = fmt.get("schema") or {"type": "object"}, "response_format.schema"
    elif kind == "json_schema":
        _no_unknown_fields(fmt, {"type", "json_schema"}, "response_format")
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict):
            raise ApiError(400, "'response_format.json_schema' must be an object with 'schema'",
                           "response_format.json_schema", "invalid_type")
        _no_unknown_fields(spec, {"name", "schema", "strict", "description"}, "response_format.json_schema")
        schema, where = spec.get("schema", {}), "response_format.json_schema.schema"
    else:
        raise ApiError(400, f"'response_format.type' must be text, json_object or json_schema, got {_shown(kind)}",
                       "response_format.type", "invalid_value")
    try:
        root = compile_schema(schema)
    except SchemaError as e:
        param = f"{where}.{e.keyword}" if e.keyword else where
        raise ApiError(400, f"'{where}': {e}", param, "unsupported_schema") from None
    return ResponseFormat(json.dumps(schema, sort_keys=True), root)


MAX_TOP_LOGPROBS = 20


def _logit_bias(body: dict) -> dict[int, float]:
    """OpenAI's logit_bias: {"token id": bias in [-100, 100]} (ids are checked against the vocabulary
    by the worker)."""
    v = body.get("logit_bias")
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ApiError(400, "'logit_bias' must be an object mapping token ids to numbers", "logit_bias",
                       "invalid_type")
    if len(v) > 1024:
        raise ApiError(400, f"'logit_bias' takes at most 1024 entries, got {len(v)}", "logit_bias", "invalid_value")
    out = {}
    for key, bias in v.items():
        if not (key.isascii() and key.isdigit() and len(key) < 10):
            raise ApiError(400, f"'logit_bias' keys must be token ids, got {_shown(key)}", "logit_bias",
                           "invalid_value")
        out[int(key)] = _number({"logit_bias": bias}, "logit_bias", 0.0, -100.0, 100.0)
    return out


def _chat_logprobs(body: dict) -> int | None:
    """`logprobs` (true: each token's log probability) and `top_logprobs` (0..20 alternatives; needs
    logprobs): None, or how many alternatives to return."""
    on = _boolean(body, "logprobs", False)
    top = _integer(body, "top_logprobs", None, 0, MAX_TOP_LOGPROBS)
    if top is not None and not on:
        raise ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value")
    return (top or 0) if on else None


def _completion_logprobs(body: dict) -> int | None:
    """/v1/completions' `logprobs`: null, or 0..20 alternatives per token."""
    return _integer(body, "logprobs", None, 0, MAX_TOP_LOGPROBS)


def _chat_messages(body: dict) -> list[dict[str, str]]:
    _no_unknown_fields(body, CHAT_FIELDS)
    _default_only(body, "function_call", ("none",), "no functions; use 'tools'")
    _boolean(body, "parallel_tool_calls", True)  # either way a reply makes at most one call
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
        role, content = m.get("role"), m.get("content")
        extra = {"tool_calls"} if role == "assistant" else {"tool_call_id"} if role == "tool" else set()
        _no_unknown_fields(m, MESSAGE_FIELDS | extra, where)
        if m.get("name") is not None and not isinstance(m["name"], str):
            raise ApiError(400, f"{where}.name must be a string", f"{where}.name", "invalid_type")
        if role == "developer":
            role = "system"
        if role == "assistant" and m.get("tool_calls"):
            out.append({"role": "assistant", "content": _earlier_tool_calls(m, where)})
            continue
        if role == "tool":
            if not isinstance(content, str) or not isinstance(m.get("tool_call_id", ""), str):
                raise ApiError(400, f"{where}: a tool message needs 'content' (a string) and 'tool_call_id'",
                               f"{where}.content", "invalid_type")
            out.append({"role": "user", "content": serve_tools.tool_result_text(content, m.get("tool_call_id"))})
            continue
        if role not in ("system", "user", "assistant"):
            raise ApiError(400, f"{where}.role must be system, user, assistant or tool, got {json.dumps(role)[:40]}",
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


MAX_PROMPTS = 16  # prompts in one /v1/completions request


RESPONSES_FIELDS = {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "top_k", "min_p",
                    "repeat_penalty", "seed", "user", "stream", "store", "text", "metadata"}


def _responses_as_chat(body: dict) -> dict:
    """A /v1/responses body as the /v1/chat/completions body it means (validated here where the
    names differ, so that errors name the Responses API's fields)."""
    _check_text(body)
    _no_unknown_fields(body, RESPONSES_FIELDS)
    _boolean(body, "stream", False)
    _default_only(body, "store", (False,), "responses are not stored")
    if body.get("metadata") is not None and not isinstance(body["metadata"], dict):
        raise ApiError(400, "'metadata' must be an object", "metadata", "invalid_type")
    messages = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise ApiError(400, "'instructions' must be a string", "instructions", "invalid_type")
        messages.append({"role": "system", "content": instructions})
    items = body.get("input", _MISSING)
    if items is _MISSING:
        raise ApiError(400, "'input' is required", "input", "missing_required_parameter")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise ApiError(400, "'input' must be a string or a non-empty list of messages", "input", "invalid_type")
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise ApiError(400, f"{where} must be a message object", where, "invalid_type")
        _no_unknown_fields(item, {"role", "content", "type"}, where)
        if item.get("type", "message") != "message":
            raise ApiError(400, f"{where}.type: only messages are supported, got {_shown(item.get('type'))}",
                           f"{where}.type", "unsupported_value")
        content = item.get("content")
        if isinstance(content, list):
            texts = []
            for j, part in enumerate(content):
                if not (isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text")
                        and isinstance(part.get("text"), str)):
                    raise ApiError(400, f"{where}.content[{j}]: only text parts are supported",
                                   f"{where}.content[{j}]", "invalid_value")
                texts.append(part["text"])
            content = "".join(texts)
        messages.append({"role": item.get("role"), "content": content})
    chat = {"messages": messages, "max_tokens": _integer(body, "max_output_tokens", None, 1, 2**31)}
    for key in ("stream", "temperature", "top_p", "top_k", "min_p", "repeat_penalty", "seed", "user"):
        if key in body:
            chat[key] = body[key]
    text = body.get("text")
    if text is not None:
        if not isinstance(text, dict):
            raise ApiError(400, "'text' must be an object", "text", "invalid_type")
        _no_unknown_fields(text, {"format"}, "text")
        fmt = text.get("format")
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            _no_unknown_fields(fmt, {"type", "name", "schema", "strict", "description"}, "text.format")
            chat["response_format"] = {"type": "json_schema", "json_schema": {
                k: v for k, v in fmt.items() if k != "type"}}
        elif fmt is not None:
            chat["response_format"] = fmt
    try:
        _response_format(chat)
    except ApiError as e:  # name the field as the Responses API spells it
        e.param = (e.param or "").replace("response_format.json_schema", "text.format").replace(
            "response_format", "text.format")
        raise
    return chat


def _embedding_inputs(body: dict) -> list[str | list[int]]:
    """/v1/embeddings' `input`: a string, token ids, or a list of strings or of token-id lists."""
    v = body.get("input", _MISSING)
    if v is _MISSING:
        raise ApiError(400, "'input' is required", "input", "missing_required_parameter")
    if isinstance(v, str) or _token_ids(v):
        v = [v]
    if not (isinstance(v, list) and v and all(isinstance(x, str) or _token_ids(x) for x in v)):
        raise ApiError(400, "'input' must be a string, token ids, or a list of strings or of token-id lists",
                       "input", "invalid_type")
    if any(x == "" for x in v):
        raise ApiError(400, "'input' has an empty string", "input", "invalid_value")
    return [x if isinstance(x, str) else list(x) for x in v]


def _token_ids(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(t, int) and not isinstance(t, bool) for t in v)


def _earlier_tool_calls(m: dict, where: str) -> str:
    calls = m["tool_calls"]
    if not isinstance(calls, list) or not all(
            isinstance(c, dict) and isinstance(c.get("function"), dict) and isinstance(c["function"].get("name"), str)
            and isinstance(c["function"].get("arguments", ""), (str, dict)) for c in calls):
        raise ApiError(400, f"{where}.tool_calls must be a list of {{\"function\": {{\"name\", \"arguments\"}}}}",
                       f"{where}.tool_calls", "invalid_type")
    text = serve_tools.assistant_call_text([{"function": {"name": c["function"]["name"],
                                                          "arguments": c["function"].get("arguments", "{}")}}
                                            for c in calls])
    content = m.get("content")
    return (content + "\n" + text) if isinstance(content, str) and content else text


def _tools(body: dict):
    """`tools` and `tool_choice`: a serve_tools.ToolSpec, or None when no tool may be called."""
    from ..models.json_grammar import SchemaError, compile_schema

    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools in (None, []):
        if choice not in (None, "none", "auto"):
            raise ApiError(400, "'tool_choice' needs 'tools'", "tool_choice", "invalid_value")
        return None
    if not isinstance(tools, list) or len(tools) > 64:
        raise ApiError(400, "'tools' must be a list of at most 64 functions", "tools", "invalid_type")
    specs = []
    for i, t in enumerate(tools):
        where = f"tools[{i}]"
        if not (isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("function"), dict)):
            raise ApiError(400, f"{where} must be {{\"type\": \"function\", \"function\": {{...}}}}", where,
                           "invalid_type")
        _no_unknown_fields(t, {"type", "function"}, where)
        f = t["function"]
        _no_unknown_fields(f, {"name", "description", "parameters", "strict"}, f"{where}.function")
        name = f.get("name")
        if not (isinstance(name, str) and 0 < len(name) <= 64 and set(name) <= TOOL_NAME_CHARS):
            raise ApiError(400, f"{where}.function.name must be 1 to 64 letters, digits, _ or -",
                           f"{where}.function.name", "invalid_value")
        if f.get("description") is not None and not isinstance(f["description"], str):
            raise ApiError(400, f"{where}.function.description must be a string", f"{where}.function.description",
                           "invalid_type")
        specs.append({"name": name, "description": f.get("description") or "", "parameters": f.get("parameters")})
    if choice is None:
        choice = "auto"
    if choice == "none":
        return None
    if isinstance(choice, dict):
        fn = choice.get("function") if choice.get("type") == "function" else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if name not in [s["name"] for s in specs]:
            raise ApiError(400, "'tool_choice' must be none, auto, required, or "
                                "{\"type\": \"function\", \"function\": {\"name\": NAME}} naming one of 'tools'",
                           "tool_choice", "invalid_value")
        choice = name
    elif choice not in ("auto", "required"):
        raise ApiError(400, f"'tool_choice' must be none, auto, required or a function, got {_shown(choice)}",
                       "tool_choice", "invalid_value")
    for i, spec in enumerate(specs):  # every tool's parameters, whichever the reply may call
        try:
            if spec["parameters"] is not None:
                compile_schema(spec["parameters"])
        except SchemaError as e:
            param = f"tools[{i}].function.parameters" + (f".{e.keyword}" if e.keyword else "")
            raise ApiError(400, f"'tools[{i}].function.parameters': {e}", param, "unsupported_schema") from None
    return serve_tools.build(specs, choice)


def _completion_prompts(body: dict) -> list[str | list[int]]:
    """The prompts of a /v1/completions request: a string, token ids, or a list of strings and/or
    lists of token ids (one choice each, in order, as OpenAI)."""
    _no_unknown_fields(body, COMPLETION_FIELDS)
    _default_only(body, "best_of", (1,), "only one completion is made")
    _default_only(body, "echo", (False,), "the prompt is not repeated")
    _default_only(body, "suffix", ("",), "no text is inserted")
    prompt = body.get("prompt", _MISSING)
    if prompt is _MISSING:
        raise ApiError(400, "'prompt' is required", "prompt", "missing_required_parameter")
    if isinstance(prompt, str) or _token_ids(prompt):
        return [prompt if isinstance(prompt, str) else list(prompt)]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) or _token_ids(p) for p in prompt):
        if len(prompt) > MAX_PROMPTS:
            raise ApiError(400, f"'prompt' takes at most {MAX_PROMPTS} prompts, got {len(prompt)}", "prompt",
                           "invalid_value")
        return [p if isinstance(p, str) else list(p) for p in prompt]
    raise ApiError(400, "'prompt' must be a string, token ids, or a list of strings or of token-id lists",
                   "prompt", "invalid_type")


# ---------------------------------------------------------------------- the worker


class Job:
    """One request's generation. The worker pushes events; the request's coroutine reads them:
    ("start", prompt_tokens), ("text", str)..., then ("done", GenerationResult) or ("error", ApiError)."""

    def __init__(self, kind: str, payload: Any, params: dict, loop: asyncio.AbstractEventLoop,
                 wakeup: asyncio.Event | None = None, index: int = 0):
        self.kind, self.payload, self.params, self.loop = kind, payload, params, loop
        self.index = index  # the choice this job makes in its request's response (n > 1, a list of prompts)
        self.cancelled = threading.Event()
        self.engine: Engine | None = None  # set by Engine.submit
        self.state = "new"  # "waiting" (queued), "taken" (the worker has it), "withdrawn" (gone while waiting)
        self.events: collections.deque = collections.deque()
        self.wakeup = wakeup or asyncio.Event()  # shared by the jobs of one request (JobGroup)
        self.sampler = None  # a GuidedSampler when the request asks for logprobs, a bias or a format
        self.sent_steps = 0  # the sampler's records already sent in a stream
        self.sent_text = 0  # characters of text already sent in a stream

    def steps(self) -> int:
        """Ids chosen so far (with a recording sampler; else 0): a text event carries it, so that a
        stream sends each token's log probabilities with its text."""
        return len(self.sampler.records) if self.sampler is not None else 0

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


class JobGroup:
    """The jobs of one request (one per choice): their events, read in arrival order. The jobs share
    one wakeup event, set on the event loop when any of them has a new event."""

    def __init__(self, jobs: list[Job]):
        self.jobs = jobs
        self.wakeup = jobs[0].wakeup

    def cancel(self) -> None:
        for job in self.jobs:
            job.cancel()

    async def next_event(self, request=None) -> tuple[int, tuple]:
        """(job index, event) of the next event of any job; with `request`, as Job.next_event, a
        departed client cancels every job and gives (-1, ("gone",))."""
        while True:
            for job in self.jobs:
                if job.events:
                    return job.index, job.events.popleft()
            self.wakeup.clear()
            try:
                await asyncio.wait_for(self.wakeup.wait(), DISCONNECT_POLL_S)
            except asyncio.TimeoutError:
                if request is not None and await request.is_disconnected():
                    self.cancel()
                    return -1, ("gone",)


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
        if job.kind == "embedding":
            from .serve_embed import embed

            return embed(s, ids, self.options.pooling)
        job.sampler = _guided_sampler(s, job.params)  # None: the plain sampler (the default path)
        on_text = (lambda text: job.emit("text", text, job.steps())) if job.params["stream"] else None
        return s.generate(ids, max_tokens, on_text=on_text, should_stop=job.cancelled.is_set,
                          sampler=job.sampler, **job.params["sampling"])

    def _prepare(self, job: Job, capacity: int) -> tuple[list[int], int]:
        """The job's prompt ids and its token limit in a context of `capacity` positions (4xx if none;
        the limit is 0 for an embedding, which generates nothing)."""
        s = self.session
        param = {"chat": "messages", "embedding": "input"}.get(job.kind, "prompt")
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
            # (n_prompt_tokens and n_ctx as llama-server's error has them, so a client can cut its prompt)
            raise ApiError(400, f"the prompt is too large: it has {len(ids)} tokens; this server's context holds "
                                f"{capacity} (tl serve --context)", param, "context_length_exceeded",
                           extra={"n_prompt_tokens": len(ids), "n_ctx": capacity})
        if job.kind == "embedding":
            return ids, 0
        room = capacity - len(ids) + 1  # the last prompt position's logits choose one more
        limits = [room] + [m for m in (job.params["max_tokens"], self.options.max_tokens) if m]
        return ids, min(limits)


# ---------------------------------------------------------------------- the HTTP app

FINISH_REASONS = {"eog": "stop", "stop": "stop", "max_tokens": "length", "context": "length", "interrupt": "stop"}


def _usage(results: list, n: int) -> dict:
    """Usage of a request's choices (in order; `n` per prompt): each prompt counted once, as OpenAI;
    cached: prompt tokens whose keys and values a previous request left in the cache (not run again)."""
    p = sum(len(r.prompt_ids) for r in results[::n])
    c = sum(len(r.ids) for r in results)
    cached = sum(len(r.prompt_ids) - r.prefilled for r in results[::n])
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
            "prompt_tokens_details": {"cached_tokens": cached}}


def _choice_params(params: dict, j: int) -> dict:
    """The parameters of a request's j-th choice of a prompt: its own seed (seed + j), so that n > 1
    gives independent samples that a fixed seed still reproduces."""
    if j == 0:
        return params
    sampling = dict(params["sampling"])
    if sampling.get("seed") is not None:
        sampling["seed"] = (sampling["seed"] + j) % 2**63
    return {**params, "sampling": sampling}


def _choice(kind: str, index: int, job: Job, result) -> dict:
    finish = FINISH_REASONS[result.stopped_by]
    logprobs = None
    if job.sampler is not None and job.params.get("logprobs") is not None:
        tok = job.engine.session.tokenizer.tok
        records = openai_logprobs.within_text(tok, job.sampler.records, result.text)
        logprobs = openai_logprobs.chat(tok, records) if kind == "chat" else openai_logprobs.completion(tok, records)
    if kind == "chat":
        message = {"role": "assistant", "content": result.text}
        if job.params.get("tools") is not None:
            message["content"], calls = serve_tools.parse_reply(result.text)
            if calls:
                message["tool_calls"], finish = calls, "tool_calls"
        return {"index": index, "message": message, "logprobs": logprobs, "finish_reason": finish}
    return {"index": index, "text": result.text, "logprobs": logprobs, "finish_reason": finish}


def _stream_logprobs(kind: str, job: Job, event: tuple) -> Any:
    """The log probabilities of the ids chosen since the last text chunk, sent with this one."""
    if job.sampler is None or job.params.get("logprobs") is None or len(event) < 3:
        return None
    tok = job.engine.session.tokenizer.tok
    records = [r for r in job.sampler.records[job.sent_steps:event[2]] if not tok.is_special(r.id)]
    offset = job.sent_text
    job.sent_steps = max(job.sent_steps, event[2])
    job.sent_text += len(event[1])
    if kind == "chat":
        return openai_logprobs.chat(tok, records)
    return openai_logprobs.completion(tok, records, offset)


def needs_guided_sampler(params: dict) -> bool:
    """Whether a job asks for logprobs, logit_bias, response_format (tools too) or a presence or
    frequency penalty: what the plain sampler (and a batch slot) does not do."""
    return params.get("logprobs") is not None or bool(params.get("logit_bias")) \
        or params.get("response_format") is not None or bool(params.get("presence_penalty")) \
        or bool(params.get("frequency_penalty"))


def _guided_sampler(session, params: dict):
    """The sampler a request needs for logprobs, logit_bias, response_format or the presence and
    frequency penalties; None (the plain sampler, bit for bit the default path) when it asks for
    none of them."""
    from ..builtins.guided import GuidedSampler
    from ..builtins.sampling import SamplerValue

    if not needs_guided_sampler(params):
        return None
    vocab = session.config.vocab_size
    bad = next((t for t in params.get("logit_bias", {}) if t >= vocab), None)
    if bad is not None:
        raise ApiError(400, f"'logit_bias' names token {bad}, outside the vocabulary (0..{vocab - 1})", "logit_bias",
                       "invalid_value")
    sp = params["sampling"]
    inner = SamplerValue.seeded(sp["temperature"], sp["top_k"], sp["top_p"], sp["seed"], sp["repeat_penalty"],
                                sp["min_p"])
    constraint = params["response_format"].constraint(session) if params.get("response_format") else None
    return GuidedSampler(inner, vocab, params.get("logit_bias"), constraint, params.get("logprobs"),
                         params.get("presence_penalty", 0.0), params.get("frequency_penalty", 0.0))


def _sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def build_app(engine: Engine, model_id: str, options: ServeOptions):
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import ClientDisconnect, Request
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
    from starlette.routing import Route

    from . import serve_metrics
    from .serve_metrics import Metrics, RequestLog

    metrics = Metrics()

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

    def submit_all(jobs: list[Job], what: str, param: str) -> JobGroup:
        """Queue a request's jobs (one per choice or input), all or none."""
        if len(jobs) > options.max_queue + 1:
            raise ApiError(400, f"this request asks for {len(jobs)} {what}; this server takes at most "
                                f"{options.max_queue + 1} at once (tl serve --max-queue)", param, "invalid_value")
        group = JobGroup(jobs)
        for job in jobs:
            if not engine.submit(job):
                group.cancel()
                raise ApiError(503, f"the server is busy: {options.max_queue} requests are already waiting "
                                    "(tl serve --max-queue); try again later", code="queue_full")
        return group

    async def collect(request: Request, group: JobGroup) -> list | None:
        """Every job's result, in order; None when the client left (the jobs are cancelled); the first
        error is raised (and the other jobs cancelled)."""
        results: dict[int, Any] = {}
        while len(results) < len(group.jobs):
            index, event = await group.next_event(request)
            if event[0] == "gone":
                return None
            if event[0] == "error":
                group.cancel()
                raise event[1]
            if event[0] == "done":
                results[index] = event[1]
        return [results[i] for i in range(len(group.jobs))]

    async def run(request: Request, kind: str, payloads: list, params: dict):
        n = params["n"]
        loop = asyncio.get_running_loop()
        wakeup = asyncio.Event()
        jobs = [Job(kind, payload, _choice_params(params, j), loop, wakeup, index=i * n + j)
                for i, payload in enumerate(payloads) for j in range(n)]
        what = f"{len(payloads)} prompts x n = {n}" if len(payloads) > 1 else f"n = {n}"
        group = submit_all(jobs, f"choices ({what})", "n" if len(payloads) == 1 else "prompt")
        rid = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
        if params["stream"]:
            # the first choice's start (or its error, answered as a 4xx) before the stream begins
            early: list = []
            while True:
                index, event = await group.next_event(request)
                if event[0] == "gone":
                    return JSONResponse({}, status_code=499)
                if event[0] == "error":
                    group.cancel()
                    raise event[1]
                early.append((index, event))
                if index == 0:
                    break
            return StreamingResponse(_stream(request, group, kind, rid, params["include_usage"], early),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        ordered = await collect(request, group)
        if ordered is None:
            return JSONResponse({}, status_code=499)
        usage = _usage(ordered, n)
        request.state.tl_usage = usage
        choices = [_choice(kind, i, jobs[i], r) for i, r in enumerate(ordered)]
        if kind == "chat":
            body = {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": model_id,
                    "choices": choices, "usage": usage, "system_fingerprint": None}
        else:
            body = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model_id,
                    "choices": choices, "usage": usage}
        return JSONResponse(body)

    @endpoint
    async def responses(request: Request):
        """The Responses API's basic text form: `input` (a string or messages) and `instructions` in,
        one assistant message out (streamed as the API's typed events with `stream: true`);
        `text.format` json_schema / json_object constrain it as response_format does."""
        body = await read_json(request)
        chat_body = _responses_as_chat(body)
        params = _common(chat_body, options.defaults)
        messages = _chat_messages(chat_body)
        params["logprobs"] = None
        job = Job("chat", messages, params, asyncio.get_running_loop())
        group = submit_all([job], "responses", "input")
        rid, mid = "resp_" + uuid.uuid4().hex[:24], "msg_" + uuid.uuid4().hex[:24]
        created = int(time.time())

        def response(status: str, text: str, usage: dict | None) -> dict:
            cut = status == "incomplete"
            return {
                "id": rid, "object": "response", "created_at": created, "status": status,
                "incomplete_details": {"reason": "max_output_tokens"} if cut else None, "error": None,
                "model": model_id, "instructions": body.get("instructions"),
                "max_output_tokens": body.get("max_output_tokens"),
                "temperature": params["sampling"]["temperature"], "top_p": params["sampling"]["top_p"],
                "tools": [], "tool_choice": "none", "parallel_tool_calls": False,
                "text": {"format": (body.get("text") or {}).get("format") or {"type": "text"}}, "store": False,
                "output": [] if usage is None else [message(status, text)], "output_text": text,
                "usage": None if usage is None else {
                    "input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
                    "total_tokens": usage["total_tokens"], "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens_details": {"reasoning_tokens": 0}}}

        def message(status: str, text: str | None) -> dict:
            content = [] if text is None else [{"type": "output_text", "text": text, "annotations": []}]
            return {"type": "message", "id": mid, "status": status, "role": "assistant", "content": content}

        if not params["stream"]:
            results = await collect(request, group)
            if results is None:
                return JSONResponse({}, status_code=499)
            usage = _usage(results, 1)
            request.state.tl_usage = usage
            status = "incomplete" if FINISH_REASONS[results[0].stopped_by] == "length" else "completed"
            return JSONResponse(response(status, results[0].text, usage))
        index, event = await group.next_event(request)  # the start, or an error answered as a 4xx
        if event[0] == "gone":
            return JSONResponse({}, status_code=499)
        if event[0] == "error":
            group.cancel()
            raise event[1]

        async def events() -> AsyncIterator[str]:
            seq = 0

            def sse(kind: str, **fields) -> str:
                nonlocal seq
                seq += 1
                data = json.dumps({"type": kind, "sequence_number": seq - 1, **fields}, ensure_ascii=False)
                return f"event: {kind}\ndata: {data}\n\n"

            part = {"item_id": mid, "output_index": 0, "content_index": 0}
            try:
                yield sse("response.created", response=response("in_progress", "", None))
                yield sse("response.in_progress", response=response("in_progress", "", None))
                yield sse("response.output_item.added", output_index=0, item=message("in_progress", None))
                yield sse("response.content_part.added", **part,
                          part={"type": "output_text", "text": "", "annotations": []})
                text = ""
                while True:
                    _, ev = await group.next_event()
                    if ev[0] == "text":
                        text += ev[1]
                        yield sse("response.output_text.delta", **part, delta=ev[1])
                    elif ev[0] == "error":
                        yield sse("error", code=ev[1].code, message=ev[1].message, param=ev[1].param)
                        return
                    elif ev[0] == "done":
                        r = ev[1]
                        break
                usage = _usage([r], 1)
                request.state.tl_usage = usage
                status = "incomplete" if FINISH_REASONS[r.stopped_by] == "length" else "completed"
                yield sse("response.output_text.done", **part, text=r.text)
                yield sse("response.content_part.done", **part,
                          part={"type": "output_text", "text": r.text, "annotations": []})
                yield sse("response.output_item.done", output_index=0, item=message(status, r.text))
                yield sse("response.completed" if status == "completed" else "response.incomplete",
                          response=response(status, r.text, usage))
            finally:
                group.cancel()

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @endpoint
    async def embeddings(request: Request):
        body = await read_json(request)
        _check_text(body)
        _no_unknown_fields(body, {"input", "model", "encoding_format", "user"})
        inputs = _embedding_inputs(body)
        fmt = body.get("encoding_format") or "float"
        if fmt not in ("float", "base64"):
            raise ApiError(400, f"'encoding_format' must be float or base64, got {_shown(fmt)}", "encoding_format",
                           "invalid_value")
        loop, wakeup = asyncio.get_running_loop(), asyncio.Event()
        jobs = [Job("embedding", x, {"stream": False, "n": 1}, loop, wakeup, index=i) for i, x in enumerate(inputs)]
        results = await collect(request, submit_all(jobs, "embeddings", "input"))
        if results is None:
            return JSONResponse({}, status_code=499)
        data = []
        for i, r in enumerate(results):
            vec = base64.b64encode(r.vector.astype("<f4").tobytes()).decode() if fmt == "base64" else \
                [float(x) for x in r.vector]
            data.append({"object": "embedding", "index": i, "embedding": vec})
        tokens = sum(len(r.prompt_ids) for r in results)
        request.state.tl_usage = {"prompt_tokens": tokens, "completion_tokens": 0, "total_tokens": tokens}
        return JSONResponse({"object": "list", "data": data, "model": model_id,
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    async def _stream(request: Request, group: JobGroup, kind: str, rid: str, include_usage: bool,
                      early: list) -> AsyncIterator[str]:
        made = int(time.time())
        obj = "chat.completion.chunk" if kind == "chat" else "text_completion"

        def chunk(index: int, text: str | None, finish: str | None, role: bool = False,
                  logprobs: Any = None) -> dict:
            if kind == "chat":
                delta: dict = {}
                if role:
                    delta["role"] = "assistant"
                if text is not None or role:  # the role's chunk has no text yet: content null (as llama-server)
                    delta["content"] = text
                choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
            else:
                choice = {"index": index, "text": text or "", "logprobs": logprobs, "finish_reason": finish}
            out = {"id": rid, "object": obj, "created": made, "model": model_id, "choices": [choice]}
            if include_usage:
                out["usage"] = None
            return out

        results: dict[int, Any] = {}
        pending = collections.deque(early)
        try:
            if kind == "chat":
                for job in group.jobs:
                    yield _sse(chunk(job.index, None, None, role=True))
            while len(results) < len(group.jobs):
                index, event = pending.popleft() if pending else await group.next_event()
                tools = group.jobs[index].params.get("tools") is not None
                if event[0] == "text" and not tools:  # (a tool reply is sent whole, once parsed)
                    yield _sse(chunk(index, event[1], None, logprobs=_stream_logprobs(kind, group.jobs[index],
                                                                                       event)))
                elif event[0] == "error":
                    yield _sse(event[1].body())
                    break
                elif event[0] == "done":
                    result = results[index] = event[1]
                    finish = FINISH_REASONS[result.stopped_by]
                    if tools:
                        content, calls = serve_tools.parse_reply(result.text)
                        if calls:
                            finish = "tool_calls"
                            out = chunk(index, None, None)
                            out["choices"][0]["delta"]["tool_calls"] = [{"index": k, **c} for k, c in enumerate(calls)]
                            yield _sse(out)
                        elif content:
                            yield _sse(chunk(index, content, None))
                    yield _sse(chunk(index, None if kind == "chat" else "", finish))
            if len(results) == len(group.jobs):
                ordered = [results[i] for i in range(len(group.jobs))]
                usage = _usage(ordered, group.jobs[0].params["n"])
                request.state.tl_usage = usage
                if include_usage:
                    yield _sse({"id": rid, "object": obj, "created": made, "model": model_id, "choices": [],
                                "usage": usage})
            yield "data: [DONE]\n\n"
        finally:
            group.cancel()  # a no-op once done; stops the generations when the client went away

    @endpoint
    async def chat_completions(request: Request):
        body = await read_json(request)
        params = _common(body, options.defaults)
        messages = _chat_messages(body)
        params["logprobs"] = _chat_logprobs(body)
        spec = _tools(body)
        if spec is not None:  # the tools in a system message; the reply constrained to a call or an answer
            if params["response_format"] is not None:
                raise ApiError(400, "'response_format' cannot be combined with tools (the reply's form is the "
                                    "tool call's)", "response_format", "invalid_value")
            messages = serve_tools.with_tools(messages, spec)
            params["response_format"] = ResponseFormat(spec.key(), spec.root)
            params["tools"] = spec
        return await run(request, "chat", [messages], params)

    @endpoint
    async def completions(request: Request):
        body = await read_json(request)
        params = _common(body, options.defaults)
        prompts = _completion_prompts(body)
        params["logprobs"] = _completion_logprobs(body)
        return await run(request, "completion", prompts, params)

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
            "memory": serve_metrics.memory(s.interp),
        })

    async def http_error(request: Request, exc: HTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        message = {404: f"no such endpoint: {request.method} {request.url.path}",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(exc.status_code, str(exc.detail))
        return error_response(ApiError(exc.status_code, message, code=code))

    async def server_error(request: Request, exc: Exception):
        return error_response(ApiError(500, f"internal error: {type(exc).__name__}"))

    tok = engine.session.tokenizer.tok

    @endpoint
    async def tokenize(request: Request):
        body = await read_json(request)
        _check_text(body)
        _no_unknown_fields(body, {"content", "add_special", "parse_special", "with_pieces"})
        content = body.get("content", _MISSING)
        if not isinstance(content, str):
            raise ApiError(400, "'content' must be a string", "content",
                           "missing_required_parameter" if content is _MISSING else "invalid_type")
        add_special = _boolean(body, "add_special", False)
        # Special tokens written in the text are always recognised: the tokenizer's switch for that
        # is shared with the worker, which tokenizes with it on.
        _default_only(body, "parse_special", (True,), "special tokens in the text are always recognised")
        with_pieces = _boolean(body, "with_pieces", False)
        ids = tok.encode(content, add_special=add_special)
        if not with_pieces:
            return JSONResponse({"tokens": ids})
        return JSONResponse({"tokens": [{"id": t, "piece": _piece(tok, t)} for t in ids]})

    @endpoint
    async def detokenize(request: Request):
        body = await read_json(request)
        _no_unknown_fields(body, {"tokens"})
        ids = body.get("tokens", _MISSING)
        if not (isinstance(ids, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in ids)):
            raise ApiError(400, "'tokens' must be a list of token ids", "tokens",
                           "missing_required_parameter" if ids is _MISSING else "invalid_type")
        bad = next((t for t in ids if not 0 <= t < tok.vocab_size), None)
        if bad is not None:
            raise ApiError(400, f"token id {_shown(bad)} is outside the vocabulary (0..{tok.vocab_size - 1})",
                           "tokens", "invalid_value")
        return JSONResponse({"content": tok.decode(ids)})

    @endpoint
    async def metrics_text(request: Request):
        q = engine.status()
        with engine.lock:
            generated = engine.generated_tokens
        gauges = {"tl_requests_running": ("generations running now", q["running"]),
                  "tl_requests_waiting": ("generations waiting in the queue", q["waiting"]),
                  "tl_generated_tokens": ("tokens generated since the start (finished generations)", generated),
                  "tl_uptime_seconds": ("seconds since the server started", time.time() - engine.started_at)}
        gauges.update(serve_metrics.memory_gauges(engine.session.interp))
        return PlainTextResponse(metrics.text(gauges), media_type="text/plain; version=0.0.4")

    # Every OpenAI route also answers without its /v1 prefix (a client whose base URL lacks it).
    openai_routes = [("/chat/completions", chat_completions, "POST"), ("/completions", completions, "POST"),
                     ("/embeddings", embeddings, "POST"), ("/responses", responses, "POST"),
                     ("/models", models, "GET"), ("/models/{name:path}", model, "GET")]
    routes = [Route(prefix + path, fn, methods=[method])
              for path, fn, method in openai_routes for prefix in ("/v1", "")]
    routes += [
        Route("/health", health, methods=["GET"]),
        Route("/v1/health", health, methods=["GET"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
        Route("/metrics", metrics_text, methods=["GET"]),
    ]
    middleware = []
    if options.cors_origins:
        middleware.append(Middleware(CORSMiddleware, allow_origins=list(options.cors_origins),
                                     allow_methods=["GET", "POST", "OPTIONS"],
                                     allow_headers=["Authorization", "Content-Type"], max_age=600))
    app = Starlette(routes=routes, middleware=middleware,
                    exception_handlers={HTTPException: http_error, Exception: server_error})
    known = {r.path for r in routes}

    def route_of(path: str) -> str:
        """The route a path matched (a bounded set of metric labels), or "other"."""
        if path in known:
            return path
        for prefix in ("/v1/models/", "/models/"):
            if path.startswith(prefix):
                return prefix + "{name}"
        return "other"

    return RequestLog(app, metrics, route_of, enabled=options.request_log)


def _piece(tok, tid: int) -> Any:
    """A token's text as llama-server's /tokenize gives it: a string, or its bytes when they are not
    UTF-8 on their own (a piece of a character)."""
    data = tok.token_bytes(tid)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return list(data)


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


def _listen(hosts: str, port: int) -> list[socket.socket] | None:
    """Listening sockets on each address of `hosts` (comma-separated, as llama-server's --host: e.g.
    "127.0.0.1,::1" for both loopbacks), all on one port (port 0: the one the first address got);
    None, after a one-line error, when one cannot be bound. Listening starts now, not when uvicorn
    starts, so that a client that reads the banner can connect."""
    socks: list[socket.socket] = []
    names = [h.strip() for h in hosts.split(",")]
    for host in names:
        try:
            if not host:
                raise OSError("an empty address in --host")
            sk = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sk)
            sk.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if ":" in host and len(names) > 1:  # "::" beside "0.0.0.0": each family on its own socket
                sk.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sk.bind((host, port))
            sk.listen(LISTEN_BACKLOG)
            port = sk.getsockname()[1]
        except (OSError, OverflowError) as e:
            print(f"tl: error: cannot listen on {host}:{port}: {getattr(e, 'strerror', None) or e}", file=sys.stderr)
            for sk in socks:
                sk.close()
            return None
    return socks


def run_server(options: ServeOptions, engine_class: type | None = None) -> int:
    """`tl serve`: load the model, bind, serve until Ctrl-C (130) or SIGTERM."""
    try:
        import uvicorn
        import starlette  # noqa: F401
    except ImportError as e:
        print(f"tl: error: tl serve needs {e.name}: pip install starlette uvicorn", file=sys.stderr)
        return 1
    from .llm_session import CHAT_CONTEXT, LlmSession

    socks = _listen(options.host, options.port)
    if socks is None:
        return 1
    try:
        session = LlmSession(options.model_path, backend=options.backend, context=options.context,
                             progress=sys.stderr.isatty(), kv_dtype=options.kv_dtype, fast=options.fast)
    except ModelError as e:
        for sk in socks:
            sk.close()
        print(f"tl: error: {e}", file=sys.stderr)
        return 1
    if session.requested_context is None:
        session.requested_context = CHAT_CONTEXT
    model_id = options.name or options.model_path.stem
    try:
        # Engine, or (--parallel N) batching.BatchEngine, an Engine that its caller passes: this
        # module does not import batching, which builds on it
        engine = (engine_class or Engine)(session, options)
    except ModelError as e:
        for sk in socks:
            sk.close()
        session.close()
        print(f"tl: error: {e}", file=sys.stderr)
        return 1
    engine.start()
    app = build_app(engine, model_id, options)
    urls = []
    for sk in socks:
        host, port = sk.getsockname()[:2]
        urls.append(f"http://{f'[{host}]' if ':' in host else host}:{port}/v1")
    also = f" (also {', '.join(urls[1:])})" if len(urls) > 1 else ""
    auth = "; API key required" if options.api_key else ""
    print(f"tl serve: {session.config.name} ({options.model_path.name}) on {urls[0]}{also} "
          f"(context {session.capacity}; {engine.banner}, {options.max_queue} may wait{auth})",
          file=sys.stderr, flush=True)
    for sk in socks:
        host = sk.getsockname()[0]
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
        run_deep(server.run, sockets=socks,
                 signals={signal.SIGINT: lambda s: server.handle_exit(s, None),
                          signal.SIGTERM: lambda s: server.handle_exit(s, None)})
    finally:
        engine.stop()
        if not engine.thread.is_alive():
            session.close()
        for sk in socks:
            sk.close()
    if server.stopped_by == signal.SIGINT:
        print("tl: interrupted", file=sys.stderr)
        return 130  # Ctrl-C, as every tl command; SIGTERM is a normal stop (0)
    return 0
