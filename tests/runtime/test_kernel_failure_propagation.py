"""R2 for writers that never ran: after a kernel fails, every tensor whose producing op was skipped
(or read the failed op's output, directly or through other ops) raises KernelFailure naming the
failed op on every read, and ops that consume it fail the same way. Tensors computed before the
failure, or independent of it in later command buffers, stay readable. Runs on every backend this
build has (the CPU one everywhere), and under poison / delay / no-cache."""
import numpy as np
import pytest

from tensorlogic import _core as c

@pytest.fixture(params=["plain", "poison", "delay", "no_cache"])
def debug_mode(request):
    saved = c.get_debug()
    if request.param == "poison":
        c.set_debug(poison=True)
    elif request.param == "delay":
        c.set_debug(delay_us=200)
    elif request.param == "no_cache":
        c.set_debug(no_cache=True)
    yield request.param
    c.set_debug(poison=saved["poison"], delay_us=saved["delay_us"], no_cache=saved["no_cache"])


def _fail_then(make):
    """Encodes a failing embedding, then `make()` in the same command buffer; returns its tensors."""
    c.synchronize()
    table = c.ones([2, 3])
    bad = c.embedding(table, c.from_numpy(np.array([100], dtype=np.int64)))
    return table, bad, make(table, bad)


def test_skipped_op_raises_on_every_read_not_garbage(debug_mode):
    for rep in range(3):
        table, bad, good = _fail_then(lambda t, b: t * 2.0)
        with pytest.raises(c.KernelFailure, match="embedding"):
            good.numpy()
        for _ in range(2):  # every later read, not only the first
            with pytest.raises(c.KernelFailure, match="embedding: id 100"):
                good.numpy()
            with pytest.raises(c.KernelFailure, match="embedding"):
                bad.numpy()


def test_ops_consuming_a_failed_tensor_fail_the_same_way(debug_mode):
    table, bad, good = _fail_then(lambda t, b: b + 1.0)
    with pytest.raises(c.KernelFailure, match="embedding"):
        c.synchronize()
    with pytest.raises(c.KernelFailure, match="embedding"):
        good.numpy()
    with pytest.raises(c.KernelFailure, match="embedding"):
        c.exp(good)  # encode refuses it: the input was never computed


def test_consumers_encoded_before_the_failure_is_known_also_fail(debug_mode):
    saved = c.get_debug()
    c.set_ops_per_command_buffer(2)  # the consumers land in later command buffers
    c.set_debug(delay_us=20000)  # the failing command buffer is still queued while they encode
    try:
        for rep in range(2):
            c.synchronize()
            table = c.ones([2, 3])
            bad = c.embedding(table, c.from_numpy(np.array([7], dtype=np.int64)))
            chain = bad
            for _ in range(3):
                chain = chain * 2.0 + 1.0
            independent = c.full([4], 3.0) * 2.0
            with pytest.raises(c.KernelFailure, match="embedding"):
                c.synchronize()
            with pytest.raises(c.KernelFailure, match="embedding: id 7"):
                chain.numpy()
            np.testing.assert_array_equal(independent.numpy(), np.full(4, 6.0, np.float32))
    finally:
        c.set_ops_per_command_buffer(saved["ops_per_command_buffer"])
        c.set_debug(delay_us=saved["delay_us"])


def test_values_written_before_the_failing_op_stay_readable():
    c.synchronize()
    before = c.full([3], 5.0)
    bad = c.embedding(c.ones([2, 3]), c.from_numpy(np.array([9], dtype=np.int64)))
    with pytest.raises(c.KernelFailure):
        c.synchronize()
    if c.backend_name() == "cpu":  # a device-reported error taints its whole command buffer
        np.testing.assert_array_equal(before.numpy(), np.full(3, 5.0, np.float32))
    after = c.full([3], 1.0) + 1.0
    np.testing.assert_array_equal(after.numpy(), np.full(3, 2.0, np.float32))


def test_fuzz_random_op_graphs_with_a_failing_kernel_never_read_garbage(debug_mode):
    """Random graphs of elementwise ops with one failing kernel somewhere, random command buffer
    sizes: every value that depends on the failure raises naming it on every read; every other
    value reads exactly its NumPy oracle (or, when the CPU skipped it in the failed command
    buffer, raises the same failure) -- never uninitialised memory."""
    rng = np.random.default_rng(14)
    saved = c.get_debug()["ops_per_command_buffer"]
    try:
        for case in range(12):
            c.set_ops_per_command_buffer(int(rng.integers(1, 9)))
            c.synchronize()
            base = rng.standard_normal((4, 3)).astype(np.float32)
            values = [(c.from_numpy(base), base, False)]
            fail_at = int(rng.integers(0, 12))
            for step in range(16):
                if step == fail_at:
                    bad = c.embedding(c.ones([2, 3]), c.from_numpy(np.array([5], dtype=np.int64)))
                    t, ref, _ = values[int(rng.integers(len(values)))]
                    try:
                        values.append((t + bad, ref + 1.0, True))
                    except c.KernelFailure as e:  # the failure was already known
                        assert "embedding" in str(e)
                    continue
                i, j = rng.integers(len(values), size=2)
                (a, ra, ta), (b, rb, tb) = values[i], values[j]
                kind = int(rng.integers(3))
                try:
                    if kind == 0:
                        out, ref = a + b, ra + rb
                    elif kind == 1:
                        out, ref = a * 0.5 - 1.0, ra * np.float32(0.5) - np.float32(1.0)
                    else:
                        out, ref = c.maximum(a, b), np.maximum(ra, rb)
                except c.KernelFailure as e:  # an input is known to be failed (or was skipped)
                    assert "embedding: id 5" in str(e), str(e)
                    continue
                values.append((out, ref.astype(np.float32), ta or (tb and kind != 1)))
            try:
                c.synchronize()
            except c.KernelFailure:
                pass
            for t, ref, tainted in values:
                for _ in range(2):
                    try:
                        got = t.numpy()
                    except c.KernelFailure as e:
                        assert "embedding: id 5" in str(e), str(e)
                        continue
                    assert not tainted, "a value computed from the failed op was readable"
                    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    finally:
        c.set_ops_per_command_buffer(saved)
