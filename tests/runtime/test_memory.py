"""The memory ledger seen from Python: live bytes return exactly to their baseline once tensors
are dropped, clear_cache() empties the cache, reservations count hits and misses, no-cache mode
frees at once, and out-of-memory is an exception the process survives (docs/runtime.md R1, R6, R7)."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tensorlogic import _core as c


@pytest.fixture(autouse=True)
def restore_debug():
    saved = c.get_debug()
    yield
    c.set_debug(poison=saved["poison"], delay_us=saved["delay_us"], no_cache=saved["no_cache"],
                trace=saved["trace"])
    c.set_ops_per_command_buffer(saved["ops_per_command_buffer"])


def _work():
    x = c.from_numpy(np.random.default_rng(0).standard_normal((33, 17)).astype(np.float32))
    y = c.exp(x) * 2.0 + x
    z = c.matmul(y, c.transpose(x))
    s = c.softmax(z, dim=-1)
    return float(c.sum(s).item())


def test_live_bytes_return_exactly_to_baseline_after_tensors_are_dropped():
    base = c.memory_stats()
    keep = []
    for _ in range(5):
        a = c.rand([64, 64], seed=1)
        b = a @ a + 1.0
        keep.append(b[1:, ::2])
        assert abs(_work() - 33.0) < 1e-3
    mid = c.memory_stats()
    assert mid["live_bytes"] > base["live_bytes"]
    assert mid["live_tensors"] > base["live_tensors"]
    del keep, a, b
    after = c.memory_stats()
    assert after["live_bytes"] == base["live_bytes"]
    assert after["live_tensors"] == base["live_tensors"]
    assert after["command_buffers_in_flight"] == 0


def test_clear_cache_empties_the_cache_and_returns_device_memory():
    _work()
    stats = c.memory_stats()
    assert stats["cached_bytes"] > 0
    c.clear_cache()
    stats = c.memory_stats()
    assert stats["cached_bytes"] == 0
    assert stats["device_bytes"] == stats["live_bytes"] + stats["reserved_bytes"]


def test_pool_reuses_buffers_instead_of_allocating():
    _work()
    before = c.memory_stats()
    for _ in range(20):
        _work()
    after = c.memory_stats()
    assert after["allocations"] == before["allocations"]
    assert after["pool_hits"] > before["pool_hits"]


def test_peak_tracks_the_largest_live_size_and_resets():
    c.reset_peak_memory()
    base = c.memory_stats()["live_bytes"]
    big = c.zeros([1024, 256])
    del big
    stats = c.memory_stats()
    assert stats["peak_bytes"] >= base + 1024 * 256 * 4
    c.reset_peak_memory()
    assert c.memory_stats()["peak_bytes"] == c.memory_stats()["live_bytes"]


def test_reservations_hit_then_fall_back_to_the_pool_as_misses():
    # In a fresh interpreter: reservations live as long as their device, and other tests in
    # this process must not see them.
    code = textwrap.dedent("""
        import numpy as np
        from tensorlogic import _core as c
        shape = [3, 5, 7]
        c.buffer_reserve(shape, 2, "f32")
        c.buffer_reserve([11, 13], 1, "f32", learnable=True)

        def entry(s):
            return next(e for e in c.buffer_stats() if list(e["shape"]) == s)

        e0 = entry(shape)
        assert e0["reserved"] == 2 and e0["taken"] == 0 and not e0["learnable"], e0
        assert entry([11, 13])["learnable"]
        t = [c.zeros(shape) for _ in range(3)]
        e1 = entry(shape)
        assert e1["taken"] == 2, e1
        assert e1["hits"] == 2 and e1["misses"] == 1, e1
        assert 0.0 < e1["hit_rate"] < 1.0
        assert all(np.all(x.numpy() == 0) for x in t)
        del t
        c.synchronize()
        assert entry(shape)["taken"] == 0
        stats = c.memory_stats()
        assert stats["reserved_bytes"] == 2 * 3 * 5 * 7 * 4 + 11 * 13 * 4, stats
        # Reserved buffers serve the next tensors of that shape: after one warm-up round (for
        # the sum's output), no new allocations.
        float(c.sum(c.ones(shape)).item())
        allocs = c.memory_stats()["allocations"]
        for _ in range(10):
            u = c.ones(shape)
            assert float(c.sum(u).item()) == 105.0
        assert c.memory_stats()["allocations"] == allocs
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_no_cache_mode_frees_at_once():
    c.set_debug(no_cache=True)
    before = c.memory_stats()
    _work()
    after = c.memory_stats()
    assert after["cached_bytes"] == 0
    assert after["frees"] > before["frees"]
    assert after["live_bytes"] == before["live_bytes"]


def test_out_of_memory_is_an_exception_and_the_runtime_keeps_working():
    with pytest.raises(c.OutOfMemoryError):
        c.zeros([1 << 44])
    with pytest.raises(c.OutOfMemoryError):
        c.zeros([1 << 40, 1 << 30])  # element count overflows int64
    with pytest.raises(c.ShapeError):
        c.zeros([-1, 3])
    assert float(c.sum(c.ones([10])).item()) == 10.0


def test_kernel_failure_is_raised_at_the_next_wait_and_only_once():
    table = c.ones([4, 3])
    out = c.embedding(table, c.from_numpy(np.array([0, 7])))
    c.memory_stats()  # finishes the work but leaves the error for the next wait
    with pytest.raises(c.KernelFailure):
        out.numpy()
    assert c.ones([2]).numpy().tolist() == [1.0, 1.0]


def test_exception_classes_form_one_hierarchy():
    for cls in (c.ShapeError, c.DTypeError, c.OutOfMemoryError, c.KernelFailure,
                c.BackendUnavailable):
        assert issubclass(cls, c.TLRuntimeError)
    assert issubclass(c.TLRuntimeError, RuntimeError)
