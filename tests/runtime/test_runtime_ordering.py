"""Ordering and host access (docs/runtime.md R1-R4): numpy() of a tensor written by a long queue of
ops is always right, also with delay injection and poisoned recycling; values computed before
a loop survive the loop; several Python threads can read results while work is queued."""
import threading

import numpy as np
import pytest

from tensorlogic import _core as c


@pytest.fixture
def hostile_debug():
    saved = c.get_debug()
    c.set_debug(poison=True, delay_us=100)
    c.set_ops_per_command_buffer(3)
    yield
    c.set_debug(poison=saved["poison"], delay_us=saved["delay_us"])
    c.set_ops_per_command_buffer(saved["ops_per_command_buffer"])


def _chain_reference(a, steps):
    x = a.astype(np.float32)
    for i in range(steps):
        x = (x * np.float32(0.5) + np.float32(i)).astype(np.float32)
        x = np.maximum(x, np.float32(-1.0))
    return x


def test_numpy_at_the_end_of_a_long_chain_is_always_right(hostile_debug):
    rng = np.random.default_rng(1)
    for rep in range(25):
        a = rng.standard_normal((17, 9)).astype(np.float32)
        x = c.from_numpy(a)
        for i in range(40):
            x = x * 0.5 + float(i)
            x = c.maximum(x, -1.0)
        np.testing.assert_allclose(x.numpy(), _chain_reference(a, 40), rtol=1e-6, atol=1e-5)


def test_values_computed_before_a_loop_survive_it(hostile_debug):
    for rep in range(10):
        before = c.full([64, 32], 3.0) + 1.0  # still queued when the loop starts
        acc = c.zeros([64, 32])
        for i in range(30):
            tmp = c.full([64, 32], float(i))
            acc = acc + tmp * 2.0
            del tmp
        assert np.all(before.numpy() == 4.0)
        assert np.all(acc.numpy() == float(2 * sum(range(30))))


def test_in_place_write_is_ordered_after_earlier_readers(hostile_debug):
    for rep in range(10):
        cache = c.zeros([8, 4])
        snapshot = cache + 0.0  # reads cache before the write below
        cache[2:4] = c.ones([2, 4]) * 5.0
        np.testing.assert_array_equal(snapshot.numpy(), np.zeros((8, 4), np.float32))
        want = np.zeros((8, 4), np.float32)
        want[2:4] = 5.0
        np.testing.assert_array_equal(cache.numpy(), want)


def test_concurrent_host_reads_from_several_threads(hostile_debug):
    errors = []

    def worker(seed):
        try:
            rng = np.random.default_rng(seed)
            for _ in range(15):
                a = rng.standard_normal((12, 12)).astype(np.float32)
                t = c.from_numpy(a)
                for _ in range(5):
                    t = c.tanh(t) + 0.25
                want = a
                for _ in range(5):
                    want = np.tanh(want) + np.float32(0.25)
                got = t.numpy()
                if not np.allclose(got, want, rtol=1e-5, atol=1e-5):
                    errors.append(f"thread {seed}: wrong values")
        except Exception as e:  # reported below, with the thread's message
            errors.append(f"thread {seed}: {e!r}")

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    # The main thread keeps queueing work meanwhile.
    x = c.ones([32, 32])
    for _ in range(50):
        x = x * 1.0 + 0.0
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a reader thread hung"
    assert errors == []
    assert np.all(x.numpy() == 1.0)
