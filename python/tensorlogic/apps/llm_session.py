"""Running a GGUF model through the TL standard library (`stdlib/generate.tl`): `tl generate`, `tl chat`.

Python here only prepares text (tokenizer, chat template), owns the model, KV cache and sampler
values, and prints; the forward pass and the generation loop are TL functions run by the
interpreter. Invariant: `cached_ids` are exactly the tokens whose keys and values the cache holds at
positions 0..len-1, so a new turn only prefills what differs from them (the common prefix stays).
"""
from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..builtins.convert import BuiltinArgError
from ..builtins.core import RuntimeFailure, init_backend, memory_stats, set_q8_activations
from ..builtins.kvcache import KVCache
from ..builtins.models import load_model_value
from ..builtins.sampling import SamplerValue
from ..builtins.registry import TLObject
from ..interp.interpreter import Interpreter
from ..lang.errors import TLError
from ..models.errors import ModelError

STDLIB_DIR = Path(__file__).resolve().parent.parent / "stdlib"
CHAT_CONTEXT = 2048  # default KV cache length of `tl chat`; `tl generate` sizes it to the request
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
    stopped_by: str = "max_tokens"  # "eog", "max_tokens", "context", "interrupt"
    memory_at_first: dict | None = None  # core.memory_stats() when the first / last id was chosen
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
    lookup that C++ makes) still stops the generation at the next token instead of being lost."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

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


class _TokenStream(TLObject):
    """The `stream` argument of generate (stdlib/generate.tl): records ids and timings, prints text
    as it completes."""

    tl_type_name = "token stream"

    def __init__(self, tok, on_text: Callable[[str], None] | None, keep_logits: bool,
                 memory_stats: Callable[[], dict] | None = None):
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

    def tl_call_method(self, name: str, args: list[Any]) -> Any:
        if name == "push" and len(args) == 1:
            return self.push(int(args[0]))
        if name == "prompt_done" and len(args) == 1:
            return self.prompt_done(args[0])
        raise AttributeError(name)

    def prompt_done(self, logits) -> None:
        # reading the logits (or waiting for them) here costs nothing extra: choosing the first
        # token waits for them anyway; it makes the prompt time true when no token follows
        if self.keep_logits:
            self.logits = np.asarray(logits.numpy(), dtype=np.float32).reshape(-1)
        else:
            logits.reshape([-1])[0:1].numpy()
        self.prompt_done_at = time.perf_counter()

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
        if self.on_text is not None:
            text = self.decoder.push(tid)
            if text:
                self.on_text(text)

    def finish(self) -> None:
        if self.on_text is not None:
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
        # --fast: linear ops quantize their activations to 8 bits (a device-wide switch, restored at close)
        self._q8_before: bool | None = set_q8_activations(True) if fast else None
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
        self._generate_fn = self.interp.functions["generate"]

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        if self._q8_before is not None:
            set_q8_activations(self._q8_before)
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
                 track_memory: bool = False, sampler=None) -> GenerationResult:
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
            sampler = SamplerValue.seeded(temperature, top_k, top_p, seed)
        stop_ids = sorted(self.tokenizer.tok.eog_ids) if stop_at_eog else []
        stream = _TokenStream(self.tokenizer.tok, on_text, keep_logits,
                              memory_stats if track_memory else None)
        self.cached_ids = list(prompt_ids[:start])
        stopped_by = "max_tokens"
        try:
            with _interrupts(stream):
                ids = self.interp.call_value(self._generate_fn, [
                    self.model, self.cache, list(prompt_ids[start:]), start, max_tokens, sampler, stop_ids,
                    stream])
        except KeyboardInterrupt:
            ids = list(stream.ids)
            stopped_by = "interrupt"
            if stream.prompt_done_at is not None:
                self.cached_ids = list(prompt_ids)
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
        result = GenerationResult(
            prompt_ids=list(prompt_ids), ids=list(ids),
            text=self.tokenizer.tok.decode(ids, skip_special=True),
            prompt_logits=stream.logits, prefilled=len(prompt_ids) - start,
            prompt_seconds=first - stream.started,
            decode_seconds=(stream.last_token_at - first) if stream.last_token_at else 0.0,
            stopped_by=stopped_by, memory_at_first=stream.memory_at_first, memory_at_last=stream.memory_at_last)
        return result


# ---------------------------------------------------------------------- commands


class OutputClosed(BaseException):
    """stdout's reader went away (`tl generate ... | head`). A BaseException so that it passes through
    the interpreter's error conversion and ends the command quietly."""


def _write(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise OutputClosed() from None


def _print_stats(session: LlmSession, r: GenerationResult) -> None:
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"[load {session.load_seconds:.2f} s | prompt {r.prefilled} tok, {r.prompt_tok_s:.1f} tok/s | "
          f"decode {len(r.ids)} tok, {r.decode_tok_s:.1f} tok/s | peak RSS {rss:.0f} MiB | "
          f"stopped by {r.stopped_by}]", file=sys.stderr)


def _no_template_note(session: LlmSession, what: str) -> None:
    print(f"tl: {session.config.name} has no chat template (a base model): {what}", file=sys.stderr)


def run_generate(session: LlmSession, args, sampling: dict) -> int:
    raw = args.raw or not session.has_chat_template
    if not args.raw and raw:
        _no_template_note(session, "completing the prompt as raw text (--raw)")
    if raw:
        prompt_ids = session.raw_prompt_ids(args.prompt)
    else:
        prompt_ids = session.chat_prompt_ids([("user", args.prompt)])
    stream = None if args.json else _write
    result = session.generate(prompt_ids, args.max_tokens, stop_at_eog=not args.ignore_eos, on_text=stream,
                              keep_logits=bool(args.dump_logits), **sampling)
    if args.dump_logits:
        try:
            np.save(args.dump_logits, result.prompt_logits)
        except OSError as e:
            raise ModelError(f"cannot write {args.dump_logits}: {e.strerror or e}") from None
    interrupted = result.stopped_by == "interrupt"
    if args.json:
        print(json.dumps({"prompt_ids": result.prompt_ids, "ids": result.ids, "text": result.text,
                          "stopped_by": result.stopped_by, "interrupted": interrupted},
                         ensure_ascii=False))
    elif result.ids:
        _write("\n")
    if args.stats:
        _print_stats(session, result)
    if interrupted:
        print("tl: interrupted", file=sys.stderr)
        return 130  # as a Ctrl-C before the model loaded
    return 0


def run_chat(session: LlmSession, args, sampling: dict) -> int:
    if session.requested_context is None:
        session.requested_context = CHAT_CONTEXT
    history: list[tuple[str, str]] = []
    if not session.has_chat_template:
        ignored = "; --system is ignored" if args.system else ""
        _no_template_note(session, f"each message is completed as raw text, without history{ignored}")
    elif args.system:
        history.append(("system", args.system))
    if args.prompt is not None:
        reply = _chat_turn(session, history, args.prompt, args, sampling)
        return 0 if reply is not None else 130
    interactive = sys.stdin.isatty()
    if interactive:
        try:
            import readline  # noqa: F401  (line editing and history for input())
        except ImportError:
            pass
        print(f"Chatting with {session.config.name} ({session.model.path.name}). "
              "Ctrl-C stops a reply, Ctrl-D exits.", file=sys.stderr)
    while True:
        try:
            line = input("> " if interactive else "")
        except EOFError:
            if interactive:
                print(file=sys.stderr)
            return 0
        except KeyboardInterrupt:
            print(file=sys.stderr)
            continue
        if not line.strip():
            continue
        try:
            _chat_turn(session, history, line, args, sampling)
        except ModelError as e:  # this turn failed (e.g. too long for the context); the chat goes on
            print(f"tl: error: {e}", file=sys.stderr)
            if history and history[-1][0] == "user":
                history.pop()


def _chat_turn(session: LlmSession, history: list, user_text: str, args, sampling: dict) -> str | None:
    if session.has_chat_template:
        history.append(("user", user_text))
        prompt_ids = session.chat_prompt_ids(history)
        while len(prompt_ids) + 1 > session.capacity and _drop_oldest_turn(history):
            prompt_ids = session.chat_prompt_ids(history)
    else:  # a base model: complete this message alone, as raw text
        prompt_ids = session.raw_prompt_ids(user_text)
    result = session.generate(prompt_ids, args.max_tokens, on_text=_write, **sampling)
    if result.stopped_by == "interrupt":
        _write(" [stopped]")
    _write("\n")
    if session.has_chat_template:
        history.append(("assistant", result.text))
    if args.stats:
        _print_stats(session, result)
    return result.text if result.stopped_by != "interrupt" else None


def _drop_oldest_turn(history: list) -> bool:
    """Forget the oldest user/assistant exchange (keeping a system message); False if none is left."""
    first = 1 if history and history[0][0] == "system" else 0
    if len(history) - first <= 1:
        return False
    del history[first:first + 2]
    return True
