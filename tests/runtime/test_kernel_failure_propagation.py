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
