"""generate.tl's greedy loop that picks each id on the device and queues the next step before reading
it (generate_greedy_ahead): the ids equal those of the loop that reads each id first, token for
token, however the generation ends (a stop id, max_tokens, a full cache); the step queued past a
stop id leaves the session's cache usable; the finiteness check still raises; a sampler that
overrides `sample` alone keeps seeing every token."""
from __future__ import annotations

import math

import numpy as np
import pytest

core = pytest.importorskip("tensorlogic._core")

from tensorlogic.apps.llm_session import LlmSession, _TokenStream  # noqa: E402
from tensorlogic.builtins.convert import BuiltinArgError  # noqa: E402
from tensorlogic.builtins.sampling import SamplerValue, chooses_on_device  # noqa: E402

PROMPT = [3, 9, 14, 5, 27, 8, 11]


class HostGreedy(SamplerValue):
    """Greedy, overriding `sample` alone: generate reads each id before queuing the next step."""

    def __init__(self):
        super().__init__(0.0, 0, 1.0, lambda: None)
        self.calls = 0

    def sample(self, logits):
        self.calls += 1
        return super().sample(logits)


@pytest.fixture(scope="module")
def session(tiny_bpe_path):
    with LlmSession(str(tiny_bpe_path), context=64) as s:
        yield s


def _generate(s, prompt, n, sampler=None, **kw):
    s.cached_ids = []
    extra = {} if sampler is None else {"sampler": sampler}
    return s.generate(list(prompt), n, temperature=0.0, stop_at_eog=False, **extra, **kw)


def test_only_plain_greedy_chooses_on_device():
    assert chooses_on_device(SamplerValue.seeded(0.0, 0, 1.0, 0))
    assert not chooses_on_device(SamplerValue.seeded(0.7, 0, 1.0, 0))
    assert not chooses_on_device(SamplerValue.seeded(0.0, 0, 1.0, 0, repeat_penalty=1.1))
    assert not chooses_on_device(HostGreedy())
    assert not chooses_on_device("greedy")


def test_ahead_ids_equal_read_first_ids(session):
    host = HostGreedy()
    a = _generate(session, PROMPT, 20)
    b = _generate(session, PROMPT, 20, host)
    assert host.calls == 20  # the overriding sampler saw every token
    assert len(a.ids) == 20 and a.ids == b.ids


def test_stop_id_max_tokens_and_full_cache_end_both_loops_alike(session, tiny_bpe_path):
    ids = _generate(session, PROMPT, 20).ids
    stop = ids[5]
    first = ids.index(stop)
    for n in (0, 1, 2, first + 1, 20):
        a = _generate(session, PROMPT, n)
        b = _generate(session, PROMPT, n, HostGreedy())
        assert a.ids == b.ids == ids[:n]
    # a stop id ends both loops right after it
    gen = session.interp.functions["generate"]
    out = []
    for sampler in (SamplerValue.seeded(0.0, 0, 1.0, 0), HostGreedy()):
        session.cached_ids = []
        session.cache.reset()
        stream = _TokenStream(session.tokenizer.tok, None, False)
        out.append(session.interp.call_value(gen, [session.model, session.cache, list(PROMPT), 0, 20, sampler,
                                                   [stop], stream]))
    assert out[0] == out[1] == ids[:first + 1]
    # the cache fills: both loops end at the last position it holds
    with LlmSession(str(tiny_bpe_path), context=len(PROMPT) + 6) as small:
        a = _generate(small, PROMPT, 20)
        b = _generate(small, PROMPT, 20, HostGreedy())
        assert a.ids == b.ids and 0 < len(a.ids) <= 7


def test_the_step_queued_past_the_end_leaves_the_cache_usable(session, tiny_bpe_path):
    first = _generate(session, PROMPT, 6)
    # a second turn on the cached prefix (prompt + the generated ids but the last, which the
    # queued step wrote past) continues as a fresh session given the whole text does
    follow = list(PROMPT) + first.ids + [4, 12]
    r = session.generate(follow, 8, temperature=0.0, stop_at_eog=False)
    with LlmSession(str(tiny_bpe_path), context=64) as fresh:
        want = fresh.generate(follow, 8, temperature=0.0, stop_at_eog=False)
    assert r.ids == want.ids


def test_take_checks_the_logits_as_sample_does():
    s = SamplerValue.seeded(0.0, 0, 1.0, 0)
    good = core.from_numpy(np.array([[0.5, 2.0, -1.0]], dtype=np.float32))
    flat = good.reshape([-1])
    assert s.take([good, flat.argmax(0, True), core.sum(flat)]) == 1
    bad = core.from_numpy(np.array([[0.5, math.nan, -1.0]], dtype=np.float32))
    flat = bad.reshape([-1])
    with pytest.raises(BuiltinArgError, match="NaN"):
        s.take([bad, flat.argmax(0, True), core.sum(flat)])
    # some -inf logits are allowed (the sum is -inf; the whole vector is checked)
    part = core.from_numpy(np.array([[-math.inf, 1.0, 3.0]], dtype=np.float32))
    flat = part.reshape([-1])
    assert s.take([part, flat.argmax(0, True), core.sum(flat)]) == 2
    with pytest.raises(BuiltinArgError, match="chooses on the host"):
        SamplerValue.seeded(0.5, 0, 1.0, 0).take([good, good, good])
    with pytest.raises(BuiltinArgError, match="take expects"):
        s.take([good])
