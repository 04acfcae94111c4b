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
from ..builtins.core import RuntimeFailure, device_threads, init_backend, memory_stats, set_q8_activations
from ..builtins.kvcache import KVCache
from ..builtins.models import load_model_value
from ..builtins.sampling import SamplerValue
from ..builtins.registry import TLObject
from ..interp.deep_stack import interrupt_hook
from ..interp.interpreter import Interpreter
from ..lang.errors import TLError
from ..models import bounded_json
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
        self._generate_fn = self.interp.functions["generate_in_pieces"]

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
                              memory_stats if track_memory else None, tuple(stop), should_stop)
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


def _prefill_progress() -> Callable[[int, int], None] | None:
    """A progress line on stderr while a long prompt is processed, when stderr is a terminal (it is
    erased once the prompt is done, so the reply starts on a clean line)."""
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        line = f"[prompt {done}/{total} tokens]"
        sys.stderr.write("\r" + (line if done < total else " " * len(line) + "\r"))
        sys.stderr.flush()
    return show


def _print_stats(session: LlmSession, r: GenerationResult) -> None:
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    threads = device_threads()
    print(f"[{f'{threads} thread' + ('s' if threads > 1 else '') if threads > 0 else 'threads: one per core'} | "
          f"load {session.load_seconds:.2f} s | prompt {r.prefilled} tok, {r.prompt_tok_s:.1f} tok/s | "
          f"decode {len(r.ids)} tok, {r.decode_tok_s:.1f} tok/s | peak RSS {rss:.0f} MiB | "
          f"stopped by {r.stopped_by}]", file=sys.stderr)


def _no_template_note(session: LlmSession, what: str) -> None:
    print(f"tl: {session.config.name} has no chat template (a base model): {what}", file=sys.stderr)


def run_generate(session: LlmSession, args, sampling: dict) -> int:
    raw = args.raw or not session.has_chat_template
    system = getattr(args, "system", None)
    if not args.raw and raw:
        ignored = "; --system is ignored" if system else ""
        _no_template_note(session, f"completing the prompt as raw text (--raw){ignored}")
    if raw:
        prompt_ids = session.raw_prompt_ids(args.prompt)
    else:
        messages = ([("system", system)] if system else []) + [("user", args.prompt)]
        prompt_ids = session.chat_prompt_ids(messages)
    stream = None if args.json else _write
    result = session.generate(prompt_ids, args.max_tokens, stop_at_eog=not args.ignore_eos, on_text=stream,
                              keep_logits=bool(args.dump_logits), on_prefill=_prefill_progress(), **sampling)
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


CHAT_HELP = """\
/help          this list
/clear         forget the conversation (the system message stays)
/system TEXT   set the system message (/system alone removes it)
/save FILE     write the conversation as JSON
/load FILE     read a conversation written by /save (replaces this one)
/stats         the last reply's speed and how full the context is
/exit, /quit   leave the chat (as Ctrl-D)
//TEXT         send a message that begins with /TEXT
Ctrl-C stops a reply, Ctrl-D exits."""


class ChatState:
    """The conversation of `tl chat`: an optional system message, then user/assistant turns, and
    what the last reply cost. When a prompt no longer fits the context the oldest exchanges are
    dropped, and `tl chat` says so."""

    def __init__(self, system: str | None = None):
        self.system = system
        self.turns: list[tuple[str, str]] = []
        self.last: GenerationResult | None = None

    def messages(self) -> list[tuple[str, str]]:
        return ([("system", self.system)] if self.system else []) + list(self.turns)

    def to_json(self, model: str) -> dict:
        return {"model": model, "messages": [{"role": r, "content": c} for r, c in self.messages()]}

    def load_json(self, data: Any) -> None:
        messages = data.get("messages") if isinstance(data, dict) else data
        if not isinstance(messages, list):
            raise ValueError('expected {"messages": [...]} or a list of messages')
        system, turns = None, []
        for i, m in enumerate(messages):
            if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
                raise ValueError(f"message {i} is not {{\"role\": \"...\", \"content\": \"...\"}}")
            role = m["role"]
            if role == "system" and i == 0:
                system = m["content"]
            elif role in ("user", "assistant"):
                turns.append((role, m["content"]))
            else:
                raise ValueError(f"message {i} has role {role!r} (expected user or assistant"
                                 f"{', or system first' if i else ' or system'})")
        self.system, self.turns = system, turns


def run_chat(session: LlmSession, args, sampling: dict) -> int:
    if session.requested_context is None:
        session.requested_context = CHAT_CONTEXT
    state = ChatState()
    if not session.has_chat_template:
        ignored = "; --system is ignored" if args.system else ""
        _no_template_note(session, f"each message is completed as raw text, without history{ignored}")
    elif args.system:
        state.system = args.system
    if args.prompt is not None:
        reply = _chat_turn(session, state, args.prompt, args, sampling)
        return 0 if reply is not None else 130
    interactive = sys.stdin.isatty()
    if interactive:
        try:
            import readline  # noqa: F401  (line editing and history for input())
        except ImportError:
            pass
        print(f"Chatting with {session.config.name} ({session.model.path.name}). "
              "/help lists commands; Ctrl-C stops a reply, Ctrl-D exits.", file=sys.stderr)
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
        if line.startswith("/") and not line.startswith("//"):
            if not _chat_command(session, state, line.strip()):
                return 0
            continue
        if line.startswith("//"):
            line = line[1:]
        try:
            _chat_turn(session, state, line, args, sampling)
        except ModelError as e:  # this turn failed (e.g. too long for the context); the chat goes on
            print(f"tl: error: {e}", file=sys.stderr)
            if state.turns and state.turns[-1][0] == "user":
                state.turns.pop()


def _chat_command(session: LlmSession, state: ChatState, line: str) -> bool:
    """One /command of `tl chat`; its answer goes to stderr (stdout holds only replies). False when
    the command ends the chat."""
    name, _, rest = line.partition(" ")
    rest = rest.strip()

    def say(text: str) -> None:
        print(text, file=sys.stderr)

    if name in ("/exit", "/quit", "/bye"):
        return False
    if name == "/help":
        say(CHAT_HELP)
    elif name == "/clear":
        state.turns = []
        say("[conversation cleared" + (", system message kept]" if state.system else "]"))
    elif name == "/system":
        if not session.has_chat_template:
            say("tl: error: this model has no chat template, so it takes no system message")
            return True
        state.system = rest or None
        say(f"[system message set: {rest}]" if rest else "[system message removed]")
    elif name in ("/save", "/load"):
        if not rest:
            say(f"tl: error: {name} needs a file name ({name} FILE)")
            return True
        path = Path(rest).expanduser()
        if name == "/save":
            try:
                path.write_text(json.dumps(state.to_json(session.config.name), ensure_ascii=False, indent=1) + "\n",
                                encoding="utf-8")
            except OSError as e:
                say(f"tl: error: cannot write {rest}: {e.strerror or e}")
                return True
            say(f"[saved {len(state.messages())} messages to {rest}]")
        else:
            try:
                data = bounded_json.loads(path.read_text(encoding="utf-8"))
                state.load_json(data)
            except OSError as e:
                say(f"tl: error: cannot read {rest}: {e.strerror or e}")
                return True
            except (ValueError, UnicodeDecodeError) as e:  # json.JSONDecodeError is a ValueError
                say(f"tl: error: {rest} is not a saved conversation: {' '.join(str(e).split())}")
                return True
            if not session.has_chat_template and (state.system or state.turns):
                say("[note: this model has no chat template; its replies do not see the history]")
            say(f"[loaded {len(state.messages())} messages from {rest}]")
    elif name == "/stats":
        used = len(session.chat_prompt_ids(state.messages(), add_generation_prompt=False)) \
            if session.has_chat_template and state.messages() else 0
        say(f"[conversation: {len(state.turns)} turns, {used} of {session.capacity} context tokens]")
        if state.last is not None:
            _print_stats(session, state.last)
    else:
        say(f"tl: error: unknown command {name} (/help lists them; //TEXT sends a message starting with /)")
    return True


def _chat_turn(session: LlmSession, state: ChatState, user_text: str, args, sampling: dict) -> str | None:
    if session.has_chat_template:
        state.turns.append(("user", user_text))
        prompt_ids = session.chat_prompt_ids(state.messages())
        # room for the reply: its max tokens, but at most a quarter of the context
        room = max(1, min(args.max_tokens, session.capacity // 4))
        dropped = 0
        while len(prompt_ids) + room > session.capacity and _drop_oldest_turn(state.turns):
            dropped += 1
            prompt_ids = session.chat_prompt_ids(state.messages())
        if dropped:
            kept = len(state.turns) // 2
            print(f"[context full ({session.capacity} tokens): dropped the oldest "
                  f"{'exchange' if dropped == 1 else f'{dropped} exchanges'}; {kept} earlier "
                  f"exchange{'' if kept == 1 else 's'} kept]", file=sys.stderr)
    else:  # a base model: complete this message alone, as raw text
        prompt_ids = session.raw_prompt_ids(user_text)
    result = session.generate(prompt_ids, args.max_tokens, on_text=_write, on_prefill=_prefill_progress(),
                              **sampling)
    state.last = result
    if result.stopped_by == "interrupt":
        _write(" [stopped]")
    _write("\n")
    if session.has_chat_template:
        state.turns.append(("assistant", result.text))
    if args.stats:
        _print_stats(session, result)
    return result.text if result.stopped_by != "interrupt" else None


def _drop_oldest_turn(turns: list) -> bool:
    """Forget the oldest user/assistant exchange; False if only the newest message is left."""
    if len(turns) <= 1:
        return False
    del turns[0:2]
    return True
