"""`@compile fn` (interp/compiled.py, cpp/runtime/recording.h): the first call per signature records,
later calls replay natively and equal eager calls bitwise; scalar arguments are inputs of the
recording (not baked); a new signature records anew; whatever a recording cannot express runs
eagerly with the right result; a replay whose buffers were released is refused and recorded anew."""
from __future__ import annotations

import gc
import io

import numpy as np
import pytest

core = pytest.importorskip("tensorlogic._core")

from tensorlogic.interp.interpreter import Interpreter  # noqa: E402
from tensorlogic.lang.errors import TLError  # noqa: E402

STEP = """
@compile
fn step(x, v, k: float, dt: float) {
    let a = x * (0.0 - k)
    let v2 = v + a * dt
    [x + v2 * dt, v2]
}
fn step_eager(x, v, k: float, dt: float) {
    let a = x * (0.0 - k)
    let v2 = v + a * dt
    [x + v2 * dt, v2]
}
"""


def _load(source: str) -> Interpreter:
    interp = Interpreter(out=io.StringIO())
    interp.run_top_level(interp.load_source(source, "t.tl"))
    return interp


def _call(interp: Interpreter, name: str, *args):
    return interp.call_value(interp.functions[name], list(args))


def _stats(interp: Interpreter, name: str):
    return interp.functions[name].impl


def _same(a, b) -> bool:
    return np.array_equal(a.numpy().view(np.uint8), b.numpy().view(np.uint8))


def test_replays_equal_eager_calls_bitwise_with_changing_scalars():
    interp = _load(STEP)
    x = core.from_numpy(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    v = core.zeros([3, 4], "f32")
    xe, ve = x, v
    for t in range(20):
        dt = 0.01 if t < 10 else 0.003 * (t + 1)
        x, v = _call(interp, "step", x, v, 2.5 + t, dt)
        xe, ve = _call(interp, "step_eager", xe, ve, 2.5 + t, dt)
        assert _same(x, xe) and _same(v, ve)
    cf = _stats(interp, "step")
    assert cf.records == 1 and cf.replays == 19  # every scalar value served by one recording
    interp.close()


def test_a_new_signature_records_anew_and_old_ones_still_replay():
    interp = _load(STEP)
    a = core.ones([2, 3], "f32")
    b = core.ones([5], "f32")
    r1 = _call(interp, "step", a, a, 1.0, 0.1)
    r2 = _call(interp, "step", b, b, 1.0, 0.1)  # new shape: a second recording
    r3 = _call(interp, "step", a, a, 2.0, 0.2)  # the first one replays
    cf = _stats(interp, "step")
    assert cf.records == 2 and cf.replays == 1
    assert r1[0].shape == (2, 3) and r2[0].shape == (5,)
    expect = _call(interp, "step_eager", a, a, 2.0, 0.2)
    assert _same(r3[0], expect[0]) and _same(r3[1], expect[1])
    # an int where a float was: the kind of a scalar is part of the signature
    _call(interp, "step", a, a, 2, 0.2)
    assert cf.records == 3
    interp.close()


def test_results_of_earlier_calls_are_not_overwritten_by_replays():
    interp = _load(STEP)
    x = core.ones([4], "f32")
    first = _call(interp, "step", x, x, 1.0, 0.5)
    kept = first[0].numpy().copy()
    for _ in range(3):
        _call(interp, "step", x, x, 7.0, 0.25)
    assert np.array_equal(first[0].numpy(), kept)
    interp.close()


@pytest.mark.parametrize("body, reason", [
    ("print(\"n =\", n)\n    x * 2.0", "print"),
    ("if n > 2 { x * 2.0 } else { x * 3.0 }", "comparison"),
    ("x * (sum(x).item() * n)", "host"),
    ("x * rand([3])", "random"),
    ("zeros([n]) + 2.0", "size"),
])
def test_what_a_recording_cannot_express_runs_eagerly(body, reason, capsys):
    from tensorlogic.interp import compiled

    src = f"@compile\nfn f(x, n: int) {{\n    {body}\n}}\nfn g(x, n: int) {{\n    {body}\n}}\n"
    interp = _load(src)
    compiled.set_debug(True)
    try:
        x = core.from_numpy(np.array([1.0, 2.0, 3.0], dtype=np.float32))
        for n in (3, 3, 1, 3):
            got = _call(interp, "f", x, n)
            if reason != "random":
                assert np.array_equal(got.numpy(), _call(interp, "g", x, n).numpy())
    finally:
        compiled.set_debug(False)
    cf = _stats(interp, "f")
    assert cf.replays == 0  # never replayed: every call ran eagerly
    assert "runs eagerly for this signature" in capsys.readouterr().err
    interp.close()


def test_scalar_arithmetic_stays_symbolic():
    src = """
@compile
fn f(x, p: int) {
    let q = 2 * p + 3
    x * (q - p) + p
}
"""
    interp = _load(src)
    x = core.ones([3], "f32")
    for p in range(5):
        assert np.array_equal(_call(interp, "f", x, p).numpy(), np.full(3, (p + 3) + p, np.float32))
    assert _stats(interp, "f").replays == 4
    interp.close()


def test_returned_scalars_follow_the_arguments():
    interp = _load("@compile\nfn f(x, p: int) {\n    [x * 2.0, p + 1]\n}\n")
    x = core.ones([2], "f32")
    assert [_call(interp, "f", x, p)[1] for p in (1, 5, 9)] == [2, 6, 10]
    interp.close()


def test_in_place_writes_into_an_argument_reach_the_caller():
    interp = _load("@compile\nfn f(x, s: float) {\n    x[0] = s\n    x * 2.0\n}\n")
    for s in (1.5, 2.5, 3.5):
        x = core.zeros([3], "f32")
        out = _call(interp, "f", x, s)
        assert x.numpy().tolist() == [s, 0.0, 0.0]
        assert out.numpy().tolist() == [2 * s, 0.0, 0.0]
    assert _stats(interp, "f").replays == 2
    interp.close()


def test_a_tensor_stored_outside_the_function_stops_the_recording():
    src = """
struct Box { t: float32[?] }
@compile
fn f(b: Box, x) {
    b.t = x * 2.0
    x + 1.0
}
"""
    interp = _load(src)
    box = interp.structs["Box"]
    from tensorlogic.interp.values import StructValue

    b = StructValue(box, {"t": core.zeros([2], "f32")})
    for s in (1.0, 2.0, 3.0):
        x = core.full([2], s, "f32")
        _call(interp, "f", b, x)
    assert _stats(interp, "f").replays == 0
    interp.close()


def test_a_rebound_global_records_anew():
    src = """
let w = ones([3])
@compile
fn f(x) { x * w }
"""
    interp = _load(src)
    x = core.full([3], 2.0, "f32")
    assert _call(interp, "f", x).numpy().tolist() == [2.0] * 3
    interp.globals["w"] = core.full([3], 5.0, "f32")
    assert _call(interp, "f", x).numpy().tolist() == [10.0] * 3
    assert _stats(interp, "f").records == 2
    interp.close()


def test_a_replay_after_its_buffers_were_released_is_refused_and_recorded_anew():
    from tensorlogic.builtins.kvcache import KVCache

    src = """
@compile
fn f(cache, x, pos: int) {
    cache.write(0, pos, x, x)
    let k = cache.keys(0, pos + 1)
    causal_attention(x, k, k, pos)
}
"""
    interp = _load(src)
    cache = KVCache(1, 8, 1, 4)
    xs = [core.from_numpy(np.full((1, 1, 4), i + 1, np.float32)) for i in range(4)]
    for p in range(2):
        _call(interp, "f", cache, xs[p], p)
    cf = _stats(interp, "f")
    assert cf.records == 1 and cf.replays == 1
    rec = next(iter(cf.entries.values())).recording
    # the cache reallocates its buffers (same object): the native replay refuses...
    cache.k[0] = core.zeros([8, 1, 4], "f32")
    cache.v[0] = core.zeros([8, 1, 4], "f32")
    gc.collect()
    with pytest.raises(core.ReplayRefused, match="released"):
        rec.replay([2.0], [xs[2]])
    # ...and the function records anew on the new buffers (positions 0..1 are zeros there now)
    got = _call(interp, "f", cache, xs[2], 2)
    assert cf.records == 2
    assert cache.k[0].numpy()[2, 0].tolist() == [3.0] * 4
    assert got.shape == (1, 1, 4)
    assert cache.lengths[0] == 3
    interp.close()


def test_kv_cache_bookkeeping_and_bounds_hold_in_replays():
    from tensorlogic.builtins.convert import BuiltinArgError
    from tensorlogic.builtins.kvcache import KVCache

    src = """
@compile
fn f(cache, x, pos: int) {
    cache.write(0, pos, x, x)
    causal_attention(x, cache.keys(0, pos + 1), cache.values(0, pos + 1), pos)
}
fn g(cache, x, pos: int) {
    cache.write(0, pos, x, x)
    causal_attention(x, cache.keys(0, pos + 1), cache.values(0, pos + 1), pos)
}
"""
    interp = _load(src)
    c1, c2 = KVCache(1, 4, 2, 4), KVCache(1, 4, 2, 4)
    rng = np.random.default_rng(0)
    for p in range(4):
        x = core.from_numpy(rng.standard_normal((1, 2, 4)).astype(np.float32))
        assert _same(_call(interp, "f", c1, x, p), _call(interp, "g", c2, x, p))
        assert c1.lengths[0] == c2.lengths[0] == p + 1
    assert _same(c1.k[0], c2.k[0])
    with pytest.raises((TLError, BuiltinArgError), match="full|out of range"):
        _call(interp, "f", c1, x, 4)  # past the capacity: an error, never a stray write
    with pytest.raises((TLError, BuiltinArgError), match="gap"):
        c1.lengths[0] = 1
        _call(interp, "f", c1, x, 3)
    interp.close()


def test_slot_store_bookkeeping_and_bounds_hold_in_replays():
    """A KV slot store's slots are scalar inputs: one recording writes and reads whichever slot a
    call names, keeps each slot cache's length, and refuses a position past a slot's capacity (it
    would be the next slot's first row) or a gap, before anything runs."""
    from tensorlogic.builtins.convert import BuiltinArgError
    from tensorlogic.builtins.kvcache import SlotStore

    interp = _load("""
@compile
fn f(store, s: int, x, pos: int) {
    store.write(0, s, pos, x, x)
    causal_attention(x, store.keys(0, s, pos + 1), store.values(0, s, pos + 1), pos)
}
fn g(cache, x, pos: int) {
    cache.write(0, pos, x, x)
    causal_attention(x, cache.keys(0, pos + 1), cache.values(0, pos + 1), pos)
}
""")
    from tensorlogic.builtins.kvcache import KVCache

    store = SlotStore(3, 1, 4, 2, 4)
    alone = [KVCache(1, 4, 2, 4) for _ in range(3)]
    rng = np.random.default_rng(0)
    for p in range(4):
        for s in (2, 0, 1):
            x = core.from_numpy(rng.standard_normal((1, 2, 4)).astype(np.float32))
            assert _same(_call(interp, "f", store, s, x, p), _call(interp, "g", alone[s], x, p))
            assert store.cache(s).lengths[0] == p + 1
    assert interp.functions["f"].impl.records == 1
    for s in range(3):
        assert _same(store.cache(s).k[0], alone[s].k[0])
    before = store.k[0].numpy().copy()
    with pytest.raises((TLError, BuiltinArgError), match="full|out of range"):
        _call(interp, "f", store, 0, x, 4)  # slot 1's first row: refused, nothing written
    with pytest.raises((TLError, BuiltinArgError), match="gap"):
        store.cache(2).lengths[0] = 1
        _call(interp, "f", store, 2, x, 3)
    with pytest.raises((TLError, BuiltinArgError), match="slot 3 is out of range"):
        _call(interp, "f", store, 3, x, 0)
    assert np.array_equal(store.k[0].numpy(), before)
    interp.close()


def test_a_slot_stores_row_batched_write_and_attention_replay_each_rows_slot_and_position():
    """write_rope_rows and attention_rows (a batched step's one call a layer for all rows): in a
    compiled function whose slots and positions are scalar inputs, every replay gives each row
    bitwise what write_rope and causal_attention give it alone over its own cache, keeps the slots'
    lengths, and refuses a position past a slot's capacity before anything runs."""
    from tensorlogic.builtins.convert import BuiltinArgError
    from tensorlogic.builtins.kvcache import KVCache, SlotStore

    interp = _load("""
@compile
fn rows(store, slots, positions, q, k, v) {
    store.attention_rows(0, slots, positions, store.write_rope_rows(0, slots, positions, q, k, v, 10000.0))
}
fn one(cache, q, k, v, pos: int) {
    causal_attention(cache.write_rope(0, pos, q, k, v, 10000.0), cache.keys(0, pos + 1), cache.values(0, pos + 1), pos)
}
""")
    store = SlotStore(3, 1, 70, 2, 8)
    alone = [KVCache(1, 70, 2, 8) for _ in range(3)]
    rng = np.random.default_rng(1)
    randn = lambda *shape: core.from_numpy(rng.standard_normal(shape).astype(np.float32))
    lengths = [0, 0, 0]
    for step in range(70):
        slots = [s for s in (2, 0, 1) if lengths[s] < 70][: 1 + step % 3]
        if not slots:
            break
        q, k, v = randn(len(slots), 4, 8), randn(len(slots), 2, 8), randn(len(slots), 2, 8)
        got = _call(interp, "rows", store, slots, [lengths[s] for s in slots], q, k, v).numpy()
        for b, s in enumerate(slots):
            want = _call(interp, "one", alone[s], q[b:b + 1], k[b:b + 1], v[b:b + 1], lengths[s]).numpy()
            assert np.array_equal(got[b], want[0]), (step, s)
            lengths[s] += 1
            assert store.cache(s).lengths[0] == lengths[s]
    assert interp.functions["rows"].impl.records == 3  # one recording per row count
    for s in range(3):
        assert np.array_equal(store.cache(s).k[0].numpy()[:lengths[s]], alone[s].k[0].numpy()[:lengths[s]])
    before = store.k[0].numpy().copy()
    q, k, v = randn(2, 4, 8), randn(2, 2, 8), randn(2, 2, 8)
    store.cache(0).lengths[0], store.cache(1).lengths[0] = 69, 70
    with pytest.raises((TLError, BuiltinArgError), match="full"):
        _call(interp, "rows", store, [0, 1], [69, 70], q, k, v)  # slot 2's first row: refused
    assert np.array_equal(store.k[0].numpy(), before)
    assert [store.cache(s).lengths[0] for s in (0, 1)] == [69, 70]  # neither row was written
    with pytest.raises((TLError, BuiltinArgError), match="one slot and one position per row"):
        _call(interp, "rows", store, [0], [1, 2], q, k, v)
    interp.close()


def test_recordings_are_freed_when_the_program_closes():
    interp = _load(STEP)
    x = core.ones([64, 64], "f32")
    gc.collect()
    core.synchronize()
    before = core.memory_stats()["live_bytes"]
    for _ in range(3):
        r = _call(interp, "step", x, x, 1.0, 0.1)
    del r
    core.synchronize()
    assert core.memory_stats()["live_bytes"] > before  # the recording owns its intermediates
    interp.close()
    core.synchronize()
    assert core.memory_stats()["live_bytes"] == before


def test_a_dropped_recording_frees_its_buffers_without_the_cycle_collector():
    """More signatures than a function keeps (MAX_RECORDINGS_PER_FUNCTION): each recording dropped
    gives its intermediates back at once. Its KV-cache hooks are closures over Symbolics that point
    at their trace, a reference cycle only Python's cyclic collector frees; the trace must not hold
    the Recording, else every dropped one stays (a server whose batches change grew by one a step)."""
    from tensorlogic.builtins.kvcache import KVCache
    from tensorlogic.interp.compiled import MAX_RECORDINGS_PER_FUNCTION

    interp = _load("""
@compile
fn f(cache, x, pos: int) {
    cache.write(0, pos, x, x)
    causal_attention(x * 2.0, cache.keys(0, pos + 1), cache.values(0, pos + 1), pos) + x
}
""")
    caches = [KVCache(1, 8, 64, 64) for _ in range(4 * MAX_RECORDINGS_PER_FUNCTION)]
    x = core.ones([1, 64, 64], "f32")
    gc.collect()
    gc.disable()  # what a server sees between two rare full collections
    try:
        live = []
        for c in caches:  # a cache is part of the signature by identity: one recording each
            _call(interp, "f", c, x, 0)
            core.synchronize()
            live.append(core.memory_stats()["live_bytes"])
        kept = MAX_RECORDINGS_PER_FUNCTION
        assert len(interp.functions["f"].impl.entries) == kept
        # once the function holds all it keeps, each new recording replaces one: no growth
        assert live[-1] == live[kept], [b - live[0] for b in live]
    finally:
        gc.enable()
    interp.close()


def test_a_signature_in_steady_use_keeps_its_recording_while_others_come_and_go():
    """Signatures are dropped least recently used first: one called between every new signature
    (a server's full set of slots between passing subsets) records once, not once every
    MAX_RECORDINGS_PER_FUNCTION new signatures."""
    from tensorlogic.builtins.kvcache import KVCache
    from tensorlogic.interp.compiled import MAX_RECORDINGS_PER_FUNCTION

    interp = _load("""
@compile
fn f(cache, x, pos: int) {
    cache.write(0, pos, x, x)
    causal_attention(x, cache.keys(0, pos + 1), cache.values(0, pos + 1), pos)
}
""")
    hot = KVCache(1, 64, 2, 4)
    passing = [KVCache(1, 4, 2, 4) for _ in range(3 * MAX_RECORDINGS_PER_FUNCTION)]
    x = core.ones([1, 2, 4], "f32")
    for i, c in enumerate(passing):
        _call(interp, "f", hot, x, i)
        _call(interp, "f", c, x, 0)
    impl = interp.functions["f"].impl
    assert impl.records == 1 + len(passing) and impl.replays == len(passing) - 1
    interp.close()


def test_compile_annotation_is_checked_by_the_parser():
    from tensorlogic.lang.parser import parse

    with pytest.raises(TLError, match="unknown function annotation @fast"):
        parse("@fast\nfn f() { 1 }\n", "t.tl")
