"""A GGUF model run through the TL standard library (`stdlib/generate.tl`): `LlmSession` loads it,
turns text into prompt ids and generates (`tl generate` is generate_command.py, `tl chat`
chat_command.py, `tl serve` server.py, all through this session).

Python here only prepares text (tokenizer, chat template) and owns the model, KV cache and sampler
values (the commands do the printing); the forward pass and the generation loop are TL functions run by the
interpreter. Invariant: `cached_ids` are exactly the tokens whose keys and values the cache holds at
positions 0..len-1, so a new turn only prefills what differs from them (the common prefix stays).
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..builtins.convert import BuiltinArgError
from ..builtins.core import RuntimeFailure, init_backend, memory_stats, set_q8_activations
from ..builtins.kvcache import KVCache
from ..builtins.models import load_model_value
from ..builtins.sampling import SamplerValue
from ..builtins.registry import TLObject
from ..interp.deep_stack import interrupt_hook
from ..interp.interpreter import Interpreter
from ..lang.errors import TLError
from ..models.errors import ModelError

STDLIB_DIR = Path(__file__).resolve().parent.parent / "stdlib"
CHAT_CONTEXT = 2048  # default KV cache length of `tl chat`; `tl generate` sizes it to the request
PREFILL_CHUNK = 512  # prompt ids per prefill piece (llama.cpp's default micro-batch): bounds the prefill's
# intermediates (4,096-token prompt on SmolLM2: peak RSS 500 -> 383 MiB at the same speed) and paces the
# progress line of tl generate/chat on a terminal
KV_DTYPES = ("f32", "f16")  # f32: exact; f16: half the cache's memory and bandwidth (long contexts)


@dataclass
class GenerationResult:
    prompt_ids: list[int]
    ids: list[int]
    text: str
    prompt_logits: np.ndarray | None = None
    prefilled: int = 0  # prompt tokens actually run (the rest came from the cache)
    prompt_seconds: float = 0.0
    decode_seconds: float = 0.0
    stopped_by: str = "max_tokens"  # "eog", "max_tokens", "context", "stop" (a stop string), "interrupt"
    # core.memory_stats(sync=False) when the first / last id was chosen: the allocation and pool
    # counters are the host's and exact; a sync per token would stall the steps queued ahead
    memory_at_first: dict | None = None
    memory_at_last: dict | None = None

    @property
    def prompt_tok_s(self) -> float:
        return self.prefilled / self.prompt_seconds if self.prompt_seconds > 0 else 0.0

    @property
    def decode_tok_s(self) -> float:
        n = len(self.ids) - 1
        return n / self.decode_seconds if n > 0 and self.decode_seconds > 0 else 0.0


@contextlib.contextmanager
def _interrupts(stream: "_TokenStream"):
    """Ctrl-C during a generation (main thread only): raise KeyboardInterrupt as usual and also mark
    the stream, so that an interrupt swallowed on the way (a signal handled inside an attribute
    lookup that C++ makes) still stops the generation at the next token instead of being lost.
    The TL loop runs on a deep thread (interp/deep_stack.py), whose Ctrl-C handler sets the mark."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with interrupt_hook(lambda: setattr(stream, "interrupted", True)), _main_thread_interrupts(stream):
        yield


@contextlib.contextmanager
def _main_thread_interrupts(stream: "_TokenStream"):
    """Ctrl-C on the main thread outside the deep call (before or after it): mark and raise."""

    def on_sigint(signum, frame):
        stream.interrupted = True
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main interpreter
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class _Stopped(BaseException):
    """Raised from the token stream to end generation between two tokens: a stop string appeared
    ("stop"), or `should_stop()` said so ("interrupt", as Ctrl-C: e.g. a server's client went away).
    A BaseException, as KeyboardInterrupt, so that it passes through the interpreter untouched."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _unsynced_memory_stats() -> dict:
    return memory_stats(sync=False)


class _TokenStream(TLObject):
    """The `stream` argument of generate (stdlib/generate.tl): records ids and timings, prints text
    as it completes. With stop strings, text that could be the start of one is held back until the
    next token decides; the stop string itself is never passed on."""

    tl_type_name = "token stream"

    def __init__(self, tok, on_text: Callable[[str], None] | None, keep_logits: bool,
                 memory_stats: Callable[[], dict] | None = None, stop: tuple[str, ...] = (),
                 should_stop: Callable[[], bool] | None = None):
        self.stop = tuple(s for s in stop if s)
        self.should_stop = should_stop
        self.text = ""  # decoded so far (only kept with stop strings)
        self.sent = 0  # characters of self.text passed to on_text
        self.stop_at: int | None = None  # where the first stop string begins in self.text
        self.memory_stats = memory_stats
        self.memory_at_first: dict | None = None
        self.memory_at_last: dict | None = None
        self.decoder = tok.stream_decoder(skip_special=True)
        self.on_text = on_text
        self.keep_logits = keep_logits
        self.logits: np.ndarray | None = None
        self.ids: list[int] = []
        self.started = time.perf_counter()
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self.prompt_done_at: float | None = None
        self.interrupted = False  # set by Ctrl-C (see _interrupts); push raises while it is set
        self.on_prefill: Callable[[int, int], None] | None = None  # (done, total) after each prompt piece

    def tl_call_method(self, name: str, args: list[Any]) -> Any:
        if name == "push" and len(args) == 1:
            return self.push(int(args[0]))
        if name == "prompt_done" and len(args) == 1:
            return self.prompt_done(args[0])
        if name == "prefill_progress" and len(args) == 2:
            if self.on_prefill is not None:
                self.on_prefill(int(args[0]), int(args[1]))
            if self.should_stop is not None and self.should_stop():
                raise _Stopped("interrupt")
            return None
        raise AttributeError(name)

    def prompt_done(self, logits) -> None:
        # reading the logits (or waiting for them) here costs nothing extra: choosing the first
        # token waits for them anyway; it makes the prompt time true when no token follows
        if self.keep_logits:
            self.logits = np.asarray(logits.numpy(), dtype=np.float32).reshape(-1)
        else:
            logits.reshape([-1])[0:1].numpy()
        self.prompt_done_at = time.perf_counter()
        if self.should_stop is not None and self.should_stop():
            raise _Stopped("interrupt")

    def push(self, tid: int) -> None:
        if self.interrupted:  # a KeyboardInterrupt that something below swallowed still stops here
            raise KeyboardInterrupt
        now = time.perf_counter()
        if self.first_token_at is None:
            self.first_token_at = now
            if self.memory_stats is not None:
                self.memory_at_first = self.memory_stats()
        elif self.memory_stats is not None:
            self.memory_at_last = self.memory_stats()
        self.last_token_at = now
        self.ids.append(tid)
        if self.stop:
            self._push_text(self.decoder.push(tid))
        elif self.on_text is not None:
            text = self.decoder.push(tid)
            if text:
                self.on_text(text)
        if self.should_stop is not None and self.should_stop():
            raise _Stopped("interrupt")

    def _push_text(self, piece: str) -> None:
        if not piece:
            return
        longest = max(len(s) for s in self.stop)
        search_from = max(0, len(self.text) - longest + 1)
        self.text += piece
        found = [i for i in (self.text.find(s, search_from) for s in self.stop) if i >= 0]
        if found:
            self.stop_at = min(found)
            self._send(self.stop_at)
            raise _Stopped("stop")
        held = 0  # the longest tail of the text that begins some stop string
        for s in self.stop:
            for k in range(min(len(s) - 1, len(self.text)), held, -1):
                if self.text.endswith(s[:k]):
                    held = k
                    break
        self._send(len(self.text) - held)

    def _send(self, upto: int) -> None:
        if upto > self.sent and self.on_text is not None:
            self.on_text(self.text[self.sent:upto])
        self.sent = max(self.sent, upto)

    def finish(self) -> None:
        if self.stop:
            if self.stop_at is None:
                self.text += self.decoder.flush()
                self._send(len(self.text))
        elif self.on_text is not None:
            tail = self.decoder.flush()
            if tail:
                self.on_text(tail)


class LlmSession:
    """One model, its tokenizer, a KV cache sized to `context`, and the TL program that runs them."""

    def __init__(self, path: str | Path, backend: str | None = None, context: int | None = None,
                 progress: bool = False, weight_mode: str = "native", kv_dtype: str = "f32",
                 fast: bool = False):
        if kv_dtype not in KV_DTYPES:
            raise ModelError(f"the KV cache dtype must be one of {', '.join(KV_DTYPES)}, got {kv_dtype!r}")
        self.kv_dtype = kv_dtype
        if backend:
            try:
                init_backend(backend)
            except RuntimeFailure as e:
                raise ModelError(f"backend {backend}: {e}") from None
        # --fast: linear ops quantize their activations to 8 bits, every product (decode steps and
        # prompt pieces, as llama.cpp's CPU products); a device-wide switch, restored at close
        self._q8_before: tuple[bool, int] | None = set_q8_activations(True, 0) if fast else None
        started = time.perf_counter()
        try:
            self.model = load_model_value(str(path), weight_mode, progress)
            self.tokenizer = self.model.tokenizer()
        except BuiltinArgError as e:
            raise ModelError(str(e)) from None
        self.load_seconds = time.perf_counter() - started
        cfg = self.model.cfg
        if context is not None and context <= 0:
            raise ModelError(f"--context must be positive, got {context}")
        self.requested_context = context
        self.cache: KVCache | None = None
        self.cached_ids: list[int] = []
        self.interp = Interpreter(out=sys.stdout)
        try:
            self.interp.load_file(str(STDLIB_DIR / "generate.tl"))
        except TLError as e:
            raise ModelError(f"cannot load the TL standard library: {e.format().splitlines()[0]}") from None
        self._generate_fn = self.interp.functions["generate_in_pieces"]

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        if self._q8_before is not None:
            set_q8_activations(*self._q8_before)
            self._q8_before = None
        if self.cache is not None:
            self.cache.release()
        self.model.close()
        self.interp.close()
        self.cached_ids = []

    def __enter__(self) -> "LlmSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ text
    @property
    def config(self):
        return self.model.cfg

    @property
    def has_chat_template(self) -> bool:
        """Whether the model file brings its own chat template (base models do not)."""
        return self.tokenizer.template.from_model

    def chat_prompt_ids(self, messages: list, add_generation_prompt: bool = True) -> list[int]:
        text = self.tokenizer.template.render(messages, add_generation_prompt)
        return self.tokenizer.tok.encode(text, add_special=False)

    def raw_prompt_ids(self, text: str) -> list[int]:
        return self.tokenizer.tok.encode(text, add_special=True)

    # ------------------------------------------------------------------ generation
    @property
    def capacity(self) -> int:
        """Positions the KV cache holds (before the first generation: what it will hold)."""
        if self.cache is not None:
            return self.cache.capacity
        return min(self.requested_context or self.config.context_length, self.config.context_length)

    def _ensure_cache(self, needed: int) -> None:
        if self.cache is None:
            cfg = self.config
            cap = min(self.requested_context or needed, cfg.context_length)
            self.cache = KVCache(cfg.n_layers, cap, cfg.n_kv_heads, cfg.head_dim, self.kv_dtype)

    def generate(self, prompt_ids: list[int], max_tokens: int, *, temperature: float = 0.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int | None = None, stop_at_eog: bool = True,
                 on_text: Callable[[str], None] | None = None, keep_logits: bool = False,
                 track_memory: bool = False, sampler=None, repeat_penalty: float = 1.0, min_p: float = 0.0,
                 stop: list[str] | tuple[str, ...] = (),
                 should_stop: Callable[[], bool] | None = None,
                 on_prefill: Callable[[int, int], None] | None = None,
                 prefill_chunk: int = PREFILL_CHUNK) -> GenerationResult:
        """Generate up to max_tokens ids after prompt_ids. `on_text` receives the text as it
        completes; generation ends at an end-of-generation id (stop_at_eog), at max_tokens, when the
        context is full, right after the text contains one of `stop` (which is cut from the text and
        never passed to on_text; stopped_by "stop"), or when `should_stop()`, asked after the prompt
        and after every token, returns True (stopped_by "interrupt", as Ctrl-C). A prompt longer than
        `prefill_chunk` ids (0: never) is processed in pieces of that many, which bounds the memory of
        its intermediates (the logits agree with one batched prefill to float rounding);
        `on_prefill(done, total)` follows the pieces."""
        if not prompt_ids:
            raise ModelError("the prompt is empty (no tokens)")
        self._ensure_cache(len(prompt_ids) + max_tokens)
        if len(prompt_ids) > self.capacity:
            raise ModelError(f"the prompt has {len(prompt_ids)} tokens, more than the context of "
                             f"{self.capacity} (use --context)")
        vocab = self.config.vocab_size
        if any(not 0 <= t < vocab for t in prompt_ids):
            raise ModelError(f"prompt token ids must be in 0..{vocab - 1}")
        common = 0
        limit = min(len(prompt_ids), len(self.cached_ids))
        while common < limit and prompt_ids[common] == self.cached_ids[common]:
            common += 1
        start = min(common, len(prompt_ids) - 1)  # at least one token runs, for the logits
        if sampler is None:
            try:
                sampler = SamplerValue.seeded(temperature, top_k, top_p, seed, repeat_penalty, min_p)
            except BuiltinArgError as e:
                raise ModelError(str(e)) from None
        stop_ids = sorted(self.tokenizer.tok.eog_ids) if stop_at_eog else []
        stream = _TokenStream(self.tokenizer.tok, on_text, keep_logits,
                              _unsynced_memory_stats if track_memory else None, tuple(stop), should_stop)
        stream.on_prefill = on_prefill
        chunk = prefill_chunk if len(prompt_ids) - start > prefill_chunk > 0 else 0  # 0: one batch
        self.cached_ids = list(prompt_ids[:start])
        stopped_by = "max_tokens"
        try:
            with _interrupts(stream):
                ids = self.interp.call_value(self._generate_fn, [
                    self.model, self.cache, list(prompt_ids[start:]), start, max_tokens, sampler, stop_ids,
                    stream, chunk])
        except KeyboardInterrupt:
            ids = list(stream.ids)
            stopped_by = "interrupt"
            if stream.prompt_done_at is not None:
                self.cached_ids = list(prompt_ids)
        except _Stopped as e:  # raised between tokens: the cache holds every id fed so far
            ids = list(stream.ids)
            stopped_by = e.reason
            fed = len(prompt_ids) + max(len(ids) - 1, 0)
            self.cached_ids = (list(prompt_ids) + ids)[:fed]
        except TLError as e:
            raise ModelError(" ".join(str(e).split("\n")[:1])) from None
        else:
            fed = len(prompt_ids) + max(len(ids) - 1, 0)
            self.cached_ids = (list(prompt_ids) + ids)[:fed]
            if ids and ids[-1] in stop_ids:
                stopped_by = "eog"
            elif len(ids) < max_tokens:
                stopped_by = "context"
        stream.finish()
        first = stream.first_token_at or stream.prompt_done_at or time.perf_counter()
        text = stream.text[:stream.stop_at] if stream.stop_at is not None else \
            self.tokenizer.tok.decode(ids, skip_special=True)
        result = GenerationResult(
            prompt_ids=list(prompt_ids), ids=list(ids), text=text,
            prompt_logits=stream.logits, prefilled=len(prompt_ids) - start,
            prompt_seconds=first - stream.started,
            decode_seconds=(stream.last_token_at - first) if stream.last_token_at else 0.0,
            stopped_by=stopped_by, memory_at_first=stream.memory_at_first, memory_at_last=stream.memory_at_last)
        return result
