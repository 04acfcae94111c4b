"""Device life cycle and configuration: environment variables are honoured at start-up,
teardown leaves zero live bytes (R6), tensors outlive shutdown(), unknown or unbuilt backends
raise BackendUnavailable with one line. Each case runs in a fresh interpreter."""
import os
import subprocess
import sys
import textwrap

from tensorlogic import _core as c


def _run(code, **env):
    full_env = dict(os.environ)
    full_env.update({k: str(v) for k, v in env.items()})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=full_env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_environment_switches_are_read_at_start_up():
    proc = _run("""
        from tensorlogic import _core as c
        d = c.get_debug()
        assert d["poison"] and d["no_cache"] and d["delay_us"] == 77, d
        assert d["ops_per_command_buffer"] == 5, d
        x = c.ones([4]) + 1
        assert x.numpy().tolist() == [2.0] * 4
    """, TL_DEBUG_POISON=1, TL_NO_CACHE=1, TL_DEBUG_DELAY_US=77, TL_OPS_PER_COMMAND_BUFFER=5)
    assert proc.stderr == ""


def test_memory_trace_goes_to_stderr():
    proc = _run("""
        from tensorlogic import _core as c
        x = c.ones([100]) * 2
        x.numpy()
    """, TL_DEBUG_MEMORY=1)
    assert "tl-memory: alloc" in proc.stderr


def test_teardown_frees_everything():
    _run("""
        from tensorlogic import _core as c
        base = c.memory_stats()
        assert base["device_bytes"] == 0, base
        xs = [c.rand([100, 100], seed=i) for i in range(10)]
        ys = [x @ x for x in xs]
        c.buffer_reserve([7, 7], 3)
        del xs, ys
        s = c.memory_stats()
        assert s["live_bytes"] == 0 and s["live_tensors"] == 0, s
        c.shutdown()
        s = c.memory_stats()  # a fresh device
        assert s["device_bytes"] == 0 and s["allocations"] == 0, s
    """)


def test_tensors_outlive_shutdown_but_cannot_join_new_work():
    _run("""
        from tensorlogic import _core as c
        x = c.arange(6).reshape([2, 3])
        y = c.transpose(x)
        c.shutdown()
        assert y.numpy().tolist() == [[0, 3], [1, 4], [2, 5]]
        try:
            x + 1
        except c.TLRuntimeError as e:
            assert "shut down" in str(e), e
        else:
            raise AssertionError("op on a shut-down device's tensor did not raise")
    """)


def test_unknown_backend_is_one_clear_error():
    _run("""
        from tensorlogic import _core as c
        for name in ["tpu"] + [b for b in ["cuda", "metal"] if b not in c.available_backends()]:
            try:
                c.init(name)
            except c.BackendUnavailable as e:
                assert "\\n" not in str(e) and name in str(e), e
            else:
                raise AssertionError(name)
        assert c.backend_name() == "cpu"
    """)


def test_switching_backend_with_live_tensors_is_refused():
    _run("""
        from tensorlogic import _core as c
        x = c.ones([3])
        c.init("cpu")  # same backend: a no-op
        assert x.numpy().tolist() == [1.0, 1.0, 1.0]
    """)


def test_backend_listing():
    assert "cpu" in c.available_backends()
    assert c.backend_name() in c.available_backends()
