"""Continuous batching for `tl serve --parallel N`: N slots, each with a KV cache of its own, decoded
together one batched step per token (stdlib/batch.tl), requests joining and leaving between steps.

Invariants:
- The one worker thread (server.Engine's) owns the session, the slots and their caches; the HTTP side
  only queues jobs and reads their events, as with one slot.
- A slot's `cached_ids` are exactly the tokens whose keys and values its cache holds at positions
  0..len-1. A new request goes to the idle slot whose cached ids share the longest prefix with its
  prompt (llama-server's cache_prompt; the least recently used one when none shares half of it)
  and prefills only what follows the prefix its slot holds; usage reports that as cached_tokens.
- Every loop iteration runs at most PREFILL_BUDGET prompt tokens (pieces of the prompts of slots
  still prefilling, oldest first: see _piece_end) and then one batched decode step for every slot
  that is decoding, so running streams keep flowing while a long prompt is prefilled.
- A batched step computes for each sequence what a step of it alone computes (the CPU linear kernel
  gives each row of a small batch bitwise the one-row result, with exact or, under --fast, 8-bit
  activations; under --fast a prompt piece of any length too), so greedy output does not depend on
  what else runs; tests/e2e/test_server_batching.py checks it token for token.
- Each slot's cache is allocated once, at start, for slot_context positions (--context divided among
  the slots, as llama-server's -c and -np), as its rows of one SlotStore (builtins/kvcache.py): the
  KV memory is bounded and /health reports it; the batched step names slots by number, so it keeps
  one recording per row count (never more than MAX_STEP_ROWS), whichever slots decode.
"""
from __future__ import annotations

import collections
import queue
import time
from typing import Any

from ..builtins.convert import BuiltinArgError, core
from ..builtins.core import q8_state
from ..builtins.kvcache import SlotStore
from ..builtins.sampling import SamplerValue
from ..lang.errors import TLError
from ..models.errors import ModelError
from .llm_session import PREFILL_CHUNK, STDLIB_DIR, GenerationResult, _Stopped, _TokenStream
from .serve_embed import EmbeddingResult
from .server import ApiError, Engine, needs_guided_sampler

PREFILL_BUDGET = 64  # prompt tokens run per loop iteration, between two decode steps
# rows of one batched step: the CPU linear kernel keeps a row bitwise equal to the one-row product
# up to 8 rows (kSmallBatchRows in cpp/backends/cpu/kernels_matmul_quant.cpp; under --fast the
# 8-bit kernel does for any number, cpp/backends/cpu/kernels_matmul_q8.cpp); more slots step in groups
MAX_STEP_ROWS = 8
MIN_SLOT_CONTEXT = 16
SIMILARITY = 0.5  # share of a prompt a slot's cache must hold to be chosen for it (llama-server's default)
# the job parameters a slot honours; a job that needs more (a guided sampler: server.needs_guided_sampler,
# an embedding, a parameter added later) runs alone through Engine._run, so nothing asked for is dropped
SLOT_PARAMS = frozenset({"sampling", "max_tokens", "stream", "include_usage", "n", "logprobs", "logit_bias",
                         "response_format", "presence_penalty", "frequency_penalty"})
SLOT_SAMPLING = frozenset({"temperature", "top_p", "top_k", "min_p", "repeat_penalty", "seed", "stop"})
DTYPE_BYTES = {"f32": 4, "f16": 2}


class Slot:
    """One sequence's place: its KV cache, what the cache holds, and the request it serves."""

    def __init__(self, index: int, cache):  # a KVCache: its slot's rows of the BatchScheduler's SlotStore
        self.index = index
        self.cache = cache
        self.cached_ids: list[int] = []
        self.used_at = 0.0  # when its last request ended (least recently used goes first)
        self.served = 0
        self.clear()

    def clear(self) -> None:
        self.job: Any = None
        self.state = "idle"  # "prefill" (prompt pieces left), "decode" (one token per step)
        self.prompt: list[int] = []
        self.start = 0  # prompt tokens that came from the cache
        self.done = 0  # prompt tokens in the cache so far
        self.max_tokens = 0
        self.sampler: SamplerValue | None = None
        self.stream: _TokenStream | None = None
        self.ids: list[int] = []
        self.next_token = -1  # the last chosen id, fed at `pos` by the next step
        self.pos = 0

    def common_prefix(self, ids: list[int]) -> int:
        n, limit = 0, min(len(ids), len(self.cached_ids))
        while n < limit and ids[n] == self.cached_ids[n]:
            n += 1
        return n


class BatchScheduler:
    """The slots and the step loop; server.BatchEngine runs it on its worker thread."""

    def __init__(self, session, parallel: int, context: int):
        cfg = session.config
        self.session = session
        self.parallel = parallel
        self.slot_context = context
        # one storage for every slot's cache (the batched step takes slots as numbers: one recording
        # per row count, not one per set of slots)
        self.store = SlotStore(parallel, cfg.n_layers, context, cfg.n_kv_heads, cfg.head_dim, session.kv_dtype)
        self.slots = [Slot(i, self.store.cache(i)) for i in range(parallel)]
        self.kv_bytes_per_slot = (2 * cfg.n_layers * context * cfg.n_kv_heads * cfg.head_dim
                                  * DTYPE_BYTES.get(session.kv_dtype, 4))
        interp = session.interp
        try:
            interp.load_file(str(STDLIB_DIR / "batch.tl"))
        except TLError as e:
            raise ModelError(f"cannot load the TL standard library: {e.format().splitlines()[0]}") from None
        # under --fast too: every product takes the 8-bit path (LlmSession sets the row limit to 0:
        # all rows), each row bitwise its one-row product (kernels_matmul_q8.cpp), so a step's rows
        # equal steps alone and a prompt piece's rows what the prompt alone gets
        self.batched = True
        self._step_fn = interp.functions["model_decode_batch"]
        self.fast, self.q8_rows = q8_state()
        # the fewest prompt tokens a request prefills when its prompt is longer (the last one, for the
        # logits); 2 where 8-bit activations cover matrix-vector products only (TL_Q8_ACTIVATIONS
        # without --fast): one token would take the 8-bit path where the prompt alone is prefilled exactly
        self.min_piece = 2 if self.fast and self.q8_rows != 0 else 1
        self._piece_fn = interp.functions["prefill_piece"]
        self._forward_fn = interp.functions["model_forward"]
        self.order = collections.deque()  # slots in the order their requests came (prefill goes first-come)
        self.steps = 0
        self.batched_tokens = 0  # tokens decoded by batched steps (over steps: the mean batch)
        self.max_rows = 0  # the most rows one step ran
        self.decode_seconds = 0.0  # in decode steps (sampling included)
        self.prefill_seconds = 0.0
        self.prefilled_tokens = 0
        self.prefill_pieces = 0  # prefill calls (a prompt over the budget is cut into several)

    # ------------------------------------------------------------------ admission
    def free_slots(self) -> int:
        return sum(1 for s in self.slots if s.state == "idle")

    def busy(self) -> bool:
        return any(s.state != "idle" for s in self.slots)

    def pick_slot(self, ids: list[int]) -> Slot:
        """The idle slot whose cache holds the longest prefix of `ids` if that is at least
        SIMILARITY of the prompt (a later turn, a long shared system prompt); else the least
        recently used idle slot, so that a chat template's few common opening tokens do not make
        every request overwrite the cache a conversation will come back to."""
        idle = [s for s in self.slots if s.state == "idle"]
        best = max(idle, key=lambda s: (s.common_prefix(ids), -s.used_at))
        if best.common_prefix(ids) >= SIMILARITY * len(ids):
            return best
        return min(idle, key=lambda s: s.used_at)

    def admit(self, job, ids: list[int], max_tokens: int, sampling: dict, on_text) -> Slot:
        """Put the request in an idle slot (the caller checked there is one)."""
        slot = self.pick_slot(ids)
        s = self.session
        try:
            sampler = SamplerValue.seeded(sampling["temperature"], sampling["top_k"], sampling["top_p"],
                                          sampling["seed"], sampling["repeat_penalty"], sampling["min_p"])
        except BuiltinArgError as e:
            raise ModelError(str(e)) from None
        common = slot.common_prefix(ids)
        slot.job, slot.state, slot.prompt = job, "prefill", list(ids)
        # at least one token runs, for the logits (under --fast two of a longer prompt: min_piece)
        keep = self.min_piece if len(ids) >= self.min_piece else 1
        slot.start = slot.done = min(common, len(ids) - keep)
        slot.cached_ids = slot.cached_ids[:slot.start]
        slot.max_tokens, slot.sampler = max_tokens, sampler
        slot.stream = _TokenStream(s.tokenizer.tok, on_text, False, None, tuple(sampling["stop"]),
                                   job.cancelled.is_set)
        slot.ids = []
        self.order.append(slot)
        return slot

    # ------------------------------------------------------------------ one iteration
    def iterate(self) -> list[tuple[Any, Any]]:
        """Prefill up to PREFILL_BUDGET prompt tokens, then one decode step for every decoding slot.
        Returns the requests that ended: (job, GenerationResult or an exception)."""
        ended: list[tuple[Any, Any]] = []
        for slot in self.slots:  # a client that went away frees its slot before any work
            if slot.state != "idle" and slot.job.cancelled.is_set():
                ended.append(self._finish(slot, "interrupt"))
        budget = PREFILL_BUDGET
        for slot in list(self.order):
            if budget <= 0:
                break
            if slot.state != "prefill":
                continue
            started = time.perf_counter()
            ran = self._prefill(slot, budget, ended)
            self.prefill_seconds += time.perf_counter() - started
            self.prefilled_tokens += ran
            self.prefill_pieces += 1
            budget -= ran
        decoding = [s for s in self.slots if s.state == "decode"]
        if decoding:
            started = time.perf_counter()
            self._decode(decoding, ended)
            self.decode_seconds += time.perf_counter() - started
        return ended

    def _prefill(self, slot: Slot, budget: int, ended: list) -> int:
        m, s = self.session.model, self.session
        end = self._piece_end(slot, budget)
        piece = slot.prompt[slot.done:end]
        try:
            if end < len(slot.prompt):
                s.interp.call_value(self._forward_fn, [m, slot.cache, piece, slot.done])
            else:
                logits = s.interp.call_value(self._piece_fn, [m, slot.cache, piece, slot.done])
        except TLError as e:
            ended.append(self._fail(slot, ModelError(" ".join(str(e).split("\n")[:1]))))
            return len(piece)
        slot.done = end
        slot.cached_ids = slot.prompt[:end]
        if end == len(slot.prompt):
            slot.pos = len(slot.prompt)
            try:
                slot.stream.prompt_done(logits)
            except _Stopped as e:
                ended.append(self._finish(slot, e.reason))
                return len(piece)
            slot.state = "decode"
            self._choose(slot, self._read(logits, 1)[0], ended)
        return len(piece)

    def _piece_end(self, slot: Slot, budget: int) -> int:
        """Where the slot's next prompt piece ends: `budget` tokens on. Exact and --fast prompts
        come out the same however they are cut (under --fast bitwise: every product takes the
        8-bit path, which gives each row its one-row result, and the rest of the forward pass is
        row by row, so a prompt prefilled in pieces of 1, 9 or 512 leaves the same cache and
        logits). Where 8-bit activations cover matrix-vector products only (TL_Q8_ACTIVATIONS
        without --fast) the pieces are LlmSession.generate's, PREFILL_CHUNK tokens: the exact
        products of differently cut pieces round differently in their last bits, which 8-bit
        decoding turns into a different token now and then."""
        chunk = PREFILL_CHUNK if self.fast and self.q8_rows != 0 else budget
        return min(len(slot.prompt), slot.done + chunk)

    def _decode(self, decoding: list[Slot], ended: list) -> None:
        for first in range(0, len(decoding), MAX_STEP_ROWS):
            self._decode_rows(decoding[first:first + MAX_STEP_ROWS], ended)

    def _decode_rows(self, decoding: list[Slot], ended: list) -> None:
        s = self.session
        tokens = [sl.next_token for sl in decoding]
        positions = [sl.pos for sl in decoding]
        try:
            # where 8-bit activations cover matrix-vector products only (TL_Q8_ACTIVATIONS alone; --fast
            # covers every product), the step's products of len(decoding) rows take the 8-bit path too
            raise_rows = self.fast and self.q8_rows != 0
            if raise_rows:
                core.set_q8_activations(True, max(self.q8_rows, len(decoding)))
            try:
                logits = s.interp.call_value(self._step_fn, [s.model, self.store, [sl.index for sl in decoding],
                                                             tokens, positions])
            finally:
                if raise_rows:
                    core.set_q8_activations(True, self.q8_rows)  # back: longer products stay exact
        except TLError as e:
            err = ModelError(" ".join(str(e).split("\n")[:1]))
            for sl in decoding:
                ended.append(self._fail(sl, err))
            return
        self.steps += 1
        self.batched_tokens += len(decoding)
        self.max_rows = max(self.max_rows, len(decoding))
        rows = self._read(logits, len(decoding))
        for b, sl in enumerate(decoding):
            sl.cached_ids.append(sl.next_token)
            sl.pos += 1
            self._choose(sl, rows[b], ended)

    @staticmethod
    def _read(logits, rows: int):
        """The step's logits [rows, vocab] on the host, read once for all its rows (a read per row
        was a device op and a wait each; a failure here is the iteration's, as any in a step)."""
        return logits.numpy().reshape(rows, -1)

    def _choose(self, slot: Slot, logits, ended: list) -> None:
        """Sample the slot's next id from its logits row (on the host) and stop it where
        generate_in_pieces (stdlib/generate.tl) stops."""
        try:
            tid = slot.sampler.sample_host(logits)
        except BuiltinArgError as e:
            ended.append(self._fail(slot, ModelError(str(e))))
            return
        slot.ids.append(tid)
        try:
            slot.stream.push(tid)
        except _Stopped as e:
            ended.append(self._finish(slot, e.reason))
            return
        if tid in self.session.tokenizer.tok.eog_ids:
            ended.append(self._finish(slot, "eog"))
        elif len(slot.ids) == slot.max_tokens:
            ended.append(self._finish(slot, "max_tokens"))
        elif slot.pos >= self.slot_context:
            ended.append(self._finish(slot, "context"))
        else:
            slot.next_token = tid

    # ------------------------------------------------------------------ ending
    def _finish(self, slot: Slot, stopped_by: str) -> tuple:
        stream = slot.stream
        stream.finish()
        first = stream.first_token_at or stream.prompt_done_at or time.perf_counter()
        text = stream.text[:stream.stop_at] if stream.stop_at is not None else \
            self.session.tokenizer.tok.decode(slot.ids, skip_special=True)
        result = GenerationResult(
            prompt_ids=list(slot.prompt), ids=list(slot.ids), text=text, prefilled=len(slot.prompt) - slot.start,
            prompt_seconds=first - stream.started,
            decode_seconds=(stream.last_token_at - first) if stream.last_token_at else 0.0, stopped_by=stopped_by)
        job = slot.job
        self._release(slot)
        return job, result

    def _fail(self, slot: Slot, error: Exception) -> tuple:
        job = slot.job
        slot.cached_ids = []  # what the cache holds is unknown after a failed step
        self._release(slot)
        return job, error

    def _release(self, slot: Slot) -> None:
        slot.used_at = time.monotonic()
        slot.served += 1
        try:
            self.order.remove(slot)
        except ValueError:
            pass
        slot.clear()

    def cancel_all(self) -> list[tuple]:
        return [self._finish(s, "interrupt") for s in self.slots if s.state != "idle"]

    # ------------------------------------------------------------------ reporting
    def report(self) -> dict:
        return {
            "parallel": self.parallel, "slot_context": self.slot_context,
            "kv_bytes_per_slot": self.kv_bytes_per_slot, "kv_bytes": self.kv_bytes_per_slot * self.parallel,
            "batched": self.batched, "decode_steps": self.steps,
            "mean_batch": round(self.batched_tokens / self.steps, 2) if self.steps else 0.0,
            "max_batch": self.max_rows,
            "decode_ms_per_step": round(1000 * self.decode_seconds / self.steps, 1) if self.steps else 0.0,
            "step_recordings": self._compiled_counts(),
            "prefill_tokens": self.prefilled_tokens,
            "prefill_pieces": self.prefill_pieces,
            "prefill_ms_per_token": (round(1000 * self.prefill_seconds / self.prefilled_tokens, 2)
                                     if self.prefilled_tokens else 0.0),
            "slots": [{"id": s.index, "state": s.state, "cached_tokens": len(s.cached_ids),
                       "prompt_tokens": len(s.prompt), "generated": len(s.ids), "served": s.served}
                      for s in self.slots],
        }

    def _compiled_counts(self) -> dict:
        """Recordings and replays of the compiled step (/health): a recording is an eager step,
        1.3-1.9x a replay, and holds its intermediates; one per row count is the steady state."""
        out = {}
        for cf in self.session.interp.compiled_functions:
            if cf.records or cf.replays:
                out[cf.name] = {"records": cf.records, "replays": cf.replays, "held": len(cf.entries)}
        return out

    def close(self) -> None:
        self.store.release()
        for s in self.slots:
            s.cached_ids = []


# ---------------------------------------------------------------------- the worker


class BatchEngine(Engine):
    """server.Engine's queue, counters and shutdown, with a loop that serves up to `parallel`
    requests at once through a BatchScheduler instead of one after the other."""

    def __init__(self, session, options):
        super().__init__(session, options)
        total = session.capacity
        context = total // options.parallel
        if context < MIN_SLOT_CONTEXT:
            raise ModelError(f"--context {total} leaves {context} positions to each of {options.parallel} slots "
                             f"(at least {MIN_SLOT_CONTEXT}): raise --context or lower --parallel")
        # a job that runs alone (Engine._run, on the session's own cache) gets a slot's context too
        session.requested_context = context
        self.scheduler = BatchScheduler(session, options.parallel, context)
        self.banner = f"{options.parallel} requests at once, decoded in batched steps"
        self.worker_text = (f"one worker thread owns the model: up to {options.parallel} requests decode "
                            "together, one batched step per token; more wait in arrival order")

    def slots_report(self) -> dict:
        return self.scheduler.report()

    def _current_cancel(self) -> None:
        for slot in self.scheduler.slots:
            job = slot.job
            if job is not None:
                job.cancel()
        super()._current_cancel()

    def _loop(self) -> None:
        sched = self.scheduler
        try:
            while True:
                while sched.free_slots():
                    try:
                        job = self.jobs.get(block=not sched.busy())
                    except queue.Empty:
                        break
                    if job is None:
                        for ended in sched.cancel_all():
                            self._conclude(*ended)
                        return
                    self._take(job)
                if sched.busy():
                    try:
                        ended = sched.iterate()
                    except Exception as e:  # noqa: BLE001 - a bug: the slots' requests get a 500, the server goes on
                        ended = [sched._fail(s, e) for s in sched.slots if s.state != "idle"]
                    for job, outcome in ended:
                        self._conclude(job, outcome)
        finally:
            sched.close()

    def _take(self, job) -> None:
        with self.lock:
            if job.state == "withdrawn":  # counted and its place freed by withdraw()
                return
            job.state = "taken"
            self.waiting -= 1
            self.running += 1
        if job.cancelled.is_set():
            self._conclude(job, None)
            return
        if job.kind == "embedding" or needs_guided_sampler(job.params) or not (
                set(job.params) <= SLOT_PARAMS and set(job.params["sampling"]) <= SLOT_SAMPLING):
            self._alone(job)
            return
        try:
            ids, max_tokens = self._prepare(job, self.scheduler.slot_context)
            job.emit("start", len(ids))
            on_text = (lambda text: job.emit("text", text)) if job.params["stream"] else None
            self.scheduler.admit(job, ids, max_tokens, job.params["sampling"], on_text)
        except Exception as e:  # noqa: BLE001 - answered below as Engine answers it
            self._conclude(job, e)

    def _alone(self, job) -> None:
        """A job with parameters the slots do not handle: Engine's path, while the slots wait."""
        self._current = job
        try:
            outcome: Any = self._run(job)
        except Exception as e:  # noqa: BLE001
            outcome = e
        finally:
            self._current = None
        self._conclude(job, outcome)

    def _conclude(self, job, outcome: Any) -> None:
        """Count the job's end and send its last event, as Engine._loop does."""
        event: tuple | None = None
        if outcome is None:
            kind = "cancelled"
        elif isinstance(outcome, (GenerationResult, EmbeddingResult)):  # (an embedding runs alone, via _alone)
            event = ("done", outcome)
            kind = "cancelled" if outcome.stopped_by == "interrupt" else "served"
        elif isinstance(outcome, ApiError):
            event, kind = ("error", outcome), "invalid"
        elif isinstance(outcome, ModelError):
            event, kind = ("error", ApiError(400, str(outcome), code="invalid_prompt")), "invalid"
        else:
            event = ("error", ApiError(500, f"internal error: {type(outcome).__name__}: "
                                            f"{' '.join(str(outcome).split())}"))
            kind = "errors"
        with self.lock:
            self.running -= 1
            self.counts[kind] += 1
            if event is not None and event[0] == "done":
                self.generated_tokens += len(event[1].ids)
        if event is not None:  # after the counters, so that /health agrees with what the client saw
            job.emit(*event)
