"""Continuous batching and the prompt cache (apps/batching.py, stdlib/batch.tl), in process.

- A batched decode step's logits are, row for row, bitwise the logits of each sequence's own
  step (the CPU linear kernel gives each row of a small batch the one-row result).
- Requests run together through the scheduler, joining at different steps, produce token for
  token what LlmSession.generate produces for each alone (greedy), on a tiny generated model and
  on the real SmolLM2; under --fast (8-bit activations) too, steps and output, whatever the
  iteration's prompt budget.
- A prompt that shares a prefix with what a slot (or the one-slot session) holds reuses it: the
  output is the same as without the cache, and `prefilled` counts only the rest."""
from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("tensorlogic._core")

from tensorlogic import _core  # noqa: E402
from tensorlogic.apps.batching import BatchScheduler  # noqa: E402
from tensorlogic.apps.llm_session import STDLIB_DIR, LlmSession  # noqa: E402
from tensorlogic.builtins.kvcache import KVCache, SlotStore  # noqa: E402

GREEDY = dict(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0, seed=None, stop=[])


class FakeJob:
    def __init__(self):
        self.cancelled = threading.Event()


def _alone(session: LlmSession, prompt: list[int], max_tokens: int) -> list[int]:
    session.cached_ids = []  # no reuse: each request from position 0
    return session.generate(prompt, max_tokens, stop_at_eog=True).ids


def _together(sched: BatchScheduler, prompts: list[list[int]], max_tokens: int, join_after: list[int]):
    """Run the prompts through the scheduler; prompt i joins after join_after[i] iterations.
    Returns the results in prompt order."""
    jobs = [FakeJob() for _ in prompts]
    results: dict[int, object] = {}
    waiting = list(range(len(prompts)))
    it = 0
    while len(results) < len(prompts):
        for i in list(waiting):
            if join_after[i] <= it and sched.free_slots():  # asked before each admission
                sched.admit(jobs[i], prompts[i], max_tokens, GREEDY, None)
                waiting.remove(i)
        for job, outcome in sched.iterate():
            assert not isinstance(outcome, Exception), outcome
            results[jobs.index(job)] = outcome
        it += 1
        assert it < 10_000
    return [results[i] for i in range(len(prompts))]


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _decode_rows_vs_steps(session: LlmSession, prompts: list[list[int]], fast: bool = False) -> None:
    """Batched steps against each sequence's own steps, bitwise; `fast`: the batched step raises the
    8-bit path's row limit to its rows (as BatchScheduler does with TL_Q8_ACTIVATIONS alone; under
    --fast the limit is 0, every product, and raising it changes nothing)."""
    q8_rows = _core.get_debug()["q8_rows"]
    interp = session.interp
    interp.load_file(str(STDLIB_DIR / "batch.tl"))
    f = interp.functions
    cfg = session.config
    store = SlotStore(len(prompts) + 1, cfg.n_layers, 64, cfg.n_kv_heads, cfg.head_dim)
    slots = list(range(len(prompts), 0, -1))  # not in order, slot 0 unused: rows find their slots
    alone = [KVCache(cfg.n_layers, 64, cfg.n_kv_heads, cfg.head_dim) for _ in prompts]
    for s, a, p in zip(slots, alone, prompts):
        interp.call_value(f["prefill_piece"], [session.model, store.cache(s), p, 0])
        interp.call_value(f["prefill_piece"], [session.model, a, p, 0])
    tokens = [p[-1] for p in prompts]
    positions = [len(p) for p in prompts]
    for step in range(4):  # the first call records, the later ones replay
        if step == 3:  # the same recording serves the rows' slots swapped
            slots, alone, positions, tokens = slots[::-1], alone[::-1], positions[::-1], tokens[::-1]
        if fast:  # as BatchScheduler where 8-bit activations cover matrix-vector products only
            _core.set_q8_activations(True, len(prompts))
        try:
            batched = interp.call_value(f["model_decode_batch"], [session.model, store, slots, tokens, positions]).numpy()
        finally:
            if fast:
                _core.set_q8_activations(True, q8_rows)
        for b, (a, t, pos) in enumerate(zip(alone, tokens, positions)):
            row = interp.call_value(f["model_decode_step"], [session.model, a, t, pos]).numpy().reshape(-1)
            assert np.array_equal(batched[b], row), f"row {b}: max diff {np.abs(batched[b] - row).max()}"
        positions = [p + 1 for p in positions]
        tokens = [int(np.argmax(r)) for r in batched]
    step_fn = f["llama_decode_batch"].impl
    assert (step_fn.records, step_fn.replays) == (1, 3)  # the swapped slots replayed the one recording


@pytest.fixture(scope="module")
def tiny_session(tmp_path_factory):
    from tensorlogic.models.testing import write_tiny_llama

    path = write_tiny_llama(tmp_path_factory.mktemp("batch") / "tiny.gguf", tokenizer="gpt2")
    with LlmSession(path, context=128) as s:
        yield s


@pytest.fixture(scope="module")
def smol_session(smollm2_path):
    with LlmSession(smollm2_path, context=512) as s:
        yield s


def test_batched_step_rows_are_bitwise_single_steps_tiny(tiny_session):
    ids = tiny_session.raw_prompt_ids
    _decode_rows_vs_steps(tiny_session, [ids("Hello"), ids("The capital of France is"), ids("a b c d e f g h")])


def test_batched_step_rows_are_bitwise_single_steps_smollm2(smol_session):
    ids = smol_session.raw_prompt_ids
    _decode_rows_vs_steps(smol_session, [ids("Hello"), ids("The capital of France is"), ids("Once upon a time")])


def test_together_equals_alone_tiny(tiny_session):
    s = tiny_session
    prompts = [s.raw_prompt_ids(t) for t in ("Hello", "The capital of France is Paris. The capital of",
                                             "x", "TensorLogic runs tensors and logic rules.", "a b c")]
    alone = [_alone(s, p, 12) for p in prompts]
    sched = BatchScheduler(s, 3, 64)
    try:
        got = _together(sched, prompts, 12, [0, 0, 1, 3, 3])  # more requests than slots: some wait
    finally:
        sched.close()
    assert [r.ids for r in got] == alone
    assert sched.steps > 0 and sched.batched_tokens > sched.steps  # some steps really ran several rows


def test_more_slots_than_a_step_takes_step_in_groups_tiny(tiny_session):
    """10 sequences decode as steps of at most 8 rows (past 8 the CPU kernel is no longer bitwise)."""
    s = tiny_session
    prompts = [s.raw_prompt_ids(f"prompt number {i}: " + "word " * i) for i in range(10)]
    alone = [_alone(s, p, 6) for p in prompts]
    sched = BatchScheduler(s, 10, 64)
    try:
        got = _together(sched, prompts, 6, [0] * 10)
    finally:
        sched.close()
    assert [r.ids for r in got] == alone
    assert sched.max_rows == 8


def test_memory_stops_growing_after_warm_up_tiny(tmp_path):
    """Many requests of varying lengths, joining at different steps, so that the set of decoding
    slots keeps changing (the compiled step once recorded each new set and dropped old ones, and a
    server's soak grew its RSS by 560 MiB): once every request of a wave has ended, the live bytes
    are the model, the slots' caches and the recordings the step holds, nothing more, wave after
    wave, and the step has one recording per row count. Python's cyclic collector is off, as it is
    for long stretches in a server (it frees what only a reference cycle holds)."""
    import gc
    import random

    from tensorlogic.builtins.convert import core
    from tensorlogic.models.testing import write_tiny_llama

    path = write_tiny_llama(tmp_path / "tiny.gguf", tokenizer="gpt2")
    with LlmSession(path, context=256) as s:
        sched = BatchScheduler(s, 6, 128)
        rng = random.Random(0)
        words = "the a dragon cook sea tensor poem city robot bread bee ocean".split()

        def held() -> int:
            return sum(e.recording.owned_bytes for cf in s.interp.compiled_functions
                       for e in cf.entries.values() if hasattr(e, "recording"))

        gc.collect()
        core.synchronize()
        base = core.memory_stats()["live_bytes"]
        extra, records = [], []
        gc.disable()
        try:
            for wave in range(6):
                prompts = [s.raw_prompt_ids(" ".join(rng.choice(words) for _ in range(rng.randint(1, 20))))
                           for _ in range(10)]
                _together(sched, prompts, rng.randint(4, 12), [rng.randint(0, 8) for _ in prompts])
                core.synchronize()
                extra.append(core.memory_stats()["live_bytes"] - base - held())
                records.append(sum(cf.records for cf in s.interp.compiled_functions))
        finally:
            gc.enable()
            sched.close()
    assert records[-1] <= 6  # one recording per row count, whatever the slots (a set of caches each before)
    assert extra == [0] * len(extra), extra


def test_together_equals_alone_smollm2(smol_session):
    s = smol_session
    questions = ["What is the capital of France?", "Write a haiku about the sea.",
                 "List three fruits, one per line, and say which one is the sweetest and why.", "Hi"]
    prompts = [s.chat_prompt_ids([{"role": "user", "content": q}]) for q in questions]
    alone = [_alone(s, p, 24) for p in prompts]
    sched = BatchScheduler(s, 4, 128)
    try:
        got = _together(sched, prompts, 24, [0, 0, 2, 5])
    finally:
        sched.close()
    assert [r.ids for r in got] == alone
    assert [r.prefilled for r in got] == [len(p) for p in prompts]  # nothing was cached yet


def test_prompt_cache_slot_reuses_prefix_smollm2(smol_session):
    s = smol_session
    system = {"role": "system", "content": "You are a terse assistant. Answer in one short sentence."}
    turn1 = [system, {"role": "user", "content": "What is the capital of France?"}]
    first_prompt = s.chat_prompt_ids(turn1)
    sched = BatchScheduler(s, 2, 256)
    try:
        (first,) = _together(sched, [first_prompt], 16, [0])
        turn2 = turn1 + [{"role": "assistant", "content": first.text},
                         {"role": "user", "content": "And of Italy?"}]
        second_prompt = s.chat_prompt_ids(turn2)
        other = s.chat_prompt_ids([{"role": "user", "content": "Unrelated question: what is 2 + 2?"}])
        # the unrelated prompt joins first and takes the other (empty) slot; the second turn finds its prefix
        got = _together(sched, [other, second_prompt], 16, [0, 1])
    finally:
        sched.close()
    held = first_prompt + first.ids[:-1]  # what the slot's cache holds after turn 1 (the last id never ran)
    common = _common(held, second_prompt)
    assert common > len(first_prompt)  # the system prompt, turn 1 and part of the reply
    assert got[1].prefilled == len(second_prompt) - common  # cached_tokens = common
    assert got[1].ids == _alone(s, second_prompt, 16)  # identical to a run without the cache
    assert got[0].ids == _alone(s, other, 16)


def test_prompt_cache_one_slot_session_smollm2(smol_session):
    """The one-at-a-time path (tl serve without --parallel) keeps the longest common prefix too."""
    s = smol_session
    turn1 = [{"role": "user", "content": "Name a color."}]
    p1 = s.chat_prompt_ids(turn1)
    s.cached_ids = []
    r1 = s.generate(p1, 8)
    assert r1.prefilled == len(p1)
    p2 = s.chat_prompt_ids(turn1 + [{"role": "assistant", "content": r1.text},
                                    {"role": "user", "content": "Another one?"}])
    r2 = s.generate(p2, 8)
    common = _common(p1 + r1.ids[:-1], p2)
    assert r2.prefilled == len(p2) - common and common > len(p1)
    assert r2.ids == _alone(s, p2, 8)


def test_fast_mode_batched_step_rows_are_bitwise_single_steps_smollm2(smollm2_path):
    """--fast (8-bit activations) batches too: each row of a batched step is bitwise the step of
    that sequence alone (the q8 kernel gives every row of a product its one-row result)."""
    with LlmSession(smollm2_path, context=256, fast=True) as s:
        ids = s.raw_prompt_ids
        _decode_rows_vs_steps(s, [ids("Hello"), ids("The capital of France is"), ids("Once upon a time"),
                                  ids("1, 2, 3,"), ids("def main():")], fast=True)


def test_fast_mode_together_equals_alone_smollm2(smollm2_path, monkeypatch):
    """--fast batched greedy output is token for token the request run alone (with --fast), and
    the steps really ran several rows at once; prompts are cut at the iteration's prompt budget (9
    here; LlmSession's pieces are 512), which under --fast changes no bit (the next test)."""
    import tensorlogic.apps.batching as batching

    monkeypatch.setattr(batching, "PREFILL_BUDGET", 9)
    with LlmSession(smollm2_path, context=512, fast=True) as s:
        questions = ["What is the capital of France?", "Write a haiku about the sea.",
                     "List three fruits, one per line.", "Hi"]
        prompts = [s.chat_prompt_ids([{"role": "user", "content": q}]) for q in questions]
        prompts.append(s.raw_prompt_ids("Once upon a time, there was"))
        alone = [_alone(s, p, 24) for p in prompts]
        sched = BatchScheduler(s, 4, 128)
        try:
            got = _together(sched, prompts, 24, [0, 0, 1, 4, 6])
        finally:
            sched.close()
        assert sched.batched and sched.steps > 0 and sched.batched_tokens > 2 * sched.steps
        assert [r.ids for r in got] == alone


def test_fast_mode_prefills_through_the_8bit_path_whatever_the_cut_smollm2(smollm2_path):
    """--fast prefills through the 8-bit path too (every product: the row limit is 0), and since
    that path gives each row its one-row product and the rest of the forward pass goes row by row,
    a prompt prefilled in pieces of 1, 2, 9 tokens or whole gives bitwise the same last logits and
    next step, what tl serve --parallel --fast relies on when it cuts prompts at its budget. With
    the prompt's products exact (row limit 1) the logits differ."""
    from tensorlogic.builtins.core import q8_state, set_q8_activations

    with LlmSession(smollm2_path, context=128, fast=True) as s:
        assert q8_state() == (True, 0)
        interp = s.interp
        interp.load_file(str(STDLIB_DIR / "batch.tl"))
        f, cfg = interp.functions, s.config
        ids = s.chat_prompt_ids([{"role": "user", "content": "Write a haiku about the sea, with many words."}])

        def run(cut: int) -> tuple[np.ndarray, np.ndarray]:
            cache = KVCache(cfg.n_layers, 128, cfg.n_kv_heads, cfg.head_dim)
            try:
                for done in range(0, len(ids), cut):
                    piece = ids[done:done + cut]
                    logits = interp.call_value(f["prefill_piece"], [s.model, cache, piece, done]).numpy()
                nxt = int(np.argmax(logits))
                step = interp.call_value(f["model_decode_step"], [s.model, cache, nxt, len(ids)]).numpy()
                return logits, step
            finally:
                cache.release()

        whole = run(len(ids))
        for cut in (1, 2, 9):
            got = run(cut)
            assert np.array_equal(got[0], whole[0]) and np.array_equal(got[1], whole[1]), f"pieces of {cut}"
        set_q8_activations(True, 1)  # the prompt's products exact, decode 8-bit (TL_Q8_ACTIVATIONS alone)
        try:
            exact_prompt = run(len(ids))
        finally:
            set_q8_activations(True, 0)
        assert not np.array_equal(exact_prompt[0], whole[0])
