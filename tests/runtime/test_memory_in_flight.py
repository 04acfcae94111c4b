"""Work in flight is bounded by memory, not only by command-buffer count: a host that encodes far
ahead of the kernels (a prefill: hundreds of ops with large outputs) must not keep every
intermediate alive at once. On the CPU the bound is 8 MiB of new outputs in flight
(TL_MAX_MB_IN_FLIGHT) plus an open command buffer of at most a quarter of that."""
import numpy as np
import pytest

from tensorlogic import _core as c

pytestmark = pytest.mark.skipif(c.backend_name() != "cpu", reason="GPUs keep a 1 GiB in-flight bound")

MIB = 1 << 20


def test_a_long_chain_of_large_ops_keeps_peak_memory_bounded():
    c.synchronize()
    base = c.memory_stats()["live_bytes"]
    c.reset_peak_memory()
    x = c.zeros([MIB // 4])  # 1 MiB of f32
    for _ in range(300):  # 600 ops with 1 MiB outputs; without the bound ~500 could be in flight
        x = x * 0.5 + 1.0
    value = float(x[0].item())
    peak = c.memory_stats()["peak_bytes"] - base
    assert value == pytest.approx(2.0)
    assert peak <= 32 * MIB, f"{peak / MIB:.0f} MiB live at the peak"


def test_small_ops_still_batch_into_large_command_buffers():
    c.synchronize()
    before = c.memory_stats()["command_buffers_committed"]
    x = c.from_numpy(np.ones(64, np.float32))
    for _ in range(640):
        x = x + 1.0
    assert float(x[3].item()) == 641.0
    committed = c.memory_stats()["command_buffers_committed"] - before
    assert committed <= 640 // c.get_debug()["ops_per_command_buffer"] + 2
