"""The Metal backend on a Mac: every op against the CPU backend, a 10,000-matmul loop whose memory
stays flat, run-time errors, teardown. Skipped unless this build has the Metal backend and a Metal
device answers. Every check runs in a subprocess started with Metal API validation and the
Objective-C runtime's missing-pool diagnostics switched on (they must be set before the process
starts), and fails if either prints a complaint. tests/runtime/test_metal_static.py runs this file
on macOS. NOT YET RUN ON APPLE HARDWARE by this project (written on Linux, 2026-11).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
METAL_ENV = {
    "MTL_DEBUG_LAYER": "1",               # Metal API validation
    "METAL_DEVICE_WRAPPER_TYPE": "1",     # validation wrapper around the device
    "OBJC_DEBUG_MISSING_POOLS": "YES",    # report objects autoreleased with no pool in place
}
# Metal validation errors read "... failed assertion `...'"; the layer's start-up banner ("Metal
# API Validation Enabled") is not a complaint.
COMPLAINTS = ("MISSING POOLS", "autoreleased with no pool", "failed assertion")


def run_python(code: str, backend: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, **METAL_ENV, TL_BACKEND=backend)
    env["PYTHONPATH"] = str(ROOT / "python") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def metal_available() -> tuple[bool, str]:
    if sys.platform != "darwin":
        return False, "not macOS"
    probe = run_python("""
        from tensorlogic import _core as C
        assert "metal" in C.available_backends(), "this build has no Metal backend"
        C.init("metal")
        print("ok")
        """, "metal", timeout=120)
    if probe.returncode != 0:
        return False, (probe.stderr.strip().splitlines() or ["metal init failed"])[-1]
    return True, ""


AVAILABLE, WHY = metal_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=f"Metal backend unavailable: {WHY}")


def assert_no_complaints(result: subprocess.CompletedProcess) -> None:
    text = result.stdout + result.stderr
    for complaint in COMPLAINTS:
        assert complaint.lower() not in text.lower(), text[-4000:]


# One script computes every case and saves the results; it runs once per backend.
CASES_SCRIPT = """
import sys, numpy as np
from tensorlogic import _core as C
C.init(sys.argv[1] if len(sys.argv) > 1 else None)
rng = np.random.default_rng(0)
T = C.from_numpy
f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
out = {}
a, b = T(f32(3, 4, 5)), T(f32(4, 1))
for name in ["add", "sub", "mul", "div", "maximum", "minimum", "mod", "eq", "lt", "logical_and"]:
    out[name] = getattr(C, name)(a, b).numpy()
out["pow"] = C.pow(C.abs(a), 1.5).numpy()
ai = T(rng.integers(-50, 50, size=(6, 7)).astype(np.int64))
out["int_div"] = C.div(ai, 3).numpy()
out["int_mod"] = C.mod(ai, 4).numpy()
for name in ["neg", "abs", "exp", "sin", "cos", "tanh", "sigmoid", "relu", "silu", "square",
             "floor", "ceil", "round", "logical_not", "step"]:
    out["u_" + name] = getattr(C, name)(a).numpy()
pos = T(np.abs(f32(3, 4, 5)) + 0.1)
for name in ["log", "sqrt", "rsqrt"]:
    out["u_" + name] = getattr(C, name)(pos).numpy()
out["gelu_tanh"] = C.gelu(a).numpy()
out["gelu_erf"] = C.gelu(a, approximate="none").numpy()
out["where"] = C.where(C.lt(a, 0.0), a, b).numpy()
out["astype_f16"] = C.astype(a, "f16").numpy()
out["astype_bf16"] = C.astype(a, "bf16").numpy()
out["transpose_copy"] = C.contiguous(C.transpose(a, 0, 2)).numpy()
for name in ["sum", "mean", "max", "min", "argmax", "argmin"]:
    out["r_" + name] = getattr(C, name)(a, dim=1).numpy()
out["softmax"] = C.softmax(a, dim=-1).numpy()
out["softmax_mid"] = C.softmax(a, dim=1).numpy()
out["arange"] = C.arange(0, 10, 3).numpy()
out["full"] = C.full([3, 2], 2.5).numpy()
out["matmul"] = C.matmul(T(f32(2, 33, 17)), T(f32(17, 40))).numpy()
out["matmul_t"] = C.matmul(T(f32(8, 9)), C.transpose(T(f32(7, 9)))).numpy()
x = T(f32(3, 256))
out["linear_f32"] = C.linear(x, T(f32(10, 256))).numpy()
out["linear_f16"] = C.linear(x, C.astype(T(f32(10, 256)), "f16")).numpy()
sizes = {"q4_0": (32, 18, [0]), "q4_1": (32, 20, [0, 2]), "q5_0": (32, 22, [0]),
         "q5_1": (32, 24, [0, 2]), "q8_0": (32, 34, [0]), "q4_k": (256, 144, [0, 2]),
         "q5_k": (256, 176, [0, 2]), "q6_k": (256, 210, [208])}
ids = T(np.array([3, 0, 7, 7], np.int64))
for q, (elems, nbytes, scale_at) in sizes.items():
    raw = rng.integers(0, 256, size=(10, 256 // elems, nbytes), dtype=np.uint8)
    for off in scale_at:
        raw[:, :, off:off + 2] = rng.uniform(0.002, 0.05, size=(10, 256 // elems)).astype(
            np.float16).view(np.uint8).reshape(10, 256 // elems, 2)
    w = C.from_quantized(raw.reshape(10, -1), q, [10, 256])
    out["linear_" + q] = C.linear(x, w).numpy()
    out["embedding_" + q] = C.embedding(w, ids).numpy()
h = T(f32(2, 5, 64))
out["rms_norm"] = C.rms_norm(h, T(f32(64))).numpy()
out["layer_norm"] = C.layer_norm(h, T(f32(64)), T(f32(64))).numpy()
r = T(f32(1, 6, 4, 16))
out["rope"] = C.rope(r, pos_offset=3).numpy()
out["rope_neox"] = C.rope(r, pos_offset=3, neox=True).numpy()
out["causal_mask"] = C.causal_mask(4, 9, 5).numpy()
q, k, v = T(f32(4, 8, 32)), T(f32(300, 2, 32)), T(f32(300, 2, 32))
out["attention_causal"] = C.attention(q, k, v, causal=True, pos_offset=296).numpy()
out["attention_mask"] = C.attention(q, k, v, mask=C.causal_mask(4, 300, 296)).numpy()
cache = C.zeros([16, 2, 8])
C.copy_(C.slice(cache, 0, 2, 5), T(f32(3, 2, 8)))
out["kv_cache_write"] = cache.numpy()
np.savez(sys.argv[2], **out)
print("cases", len(out))
"""

TOLERANCE = {"exp": 1e-5, "matmul": 1e-4, "linear": 2e-4, "attention": 1e-4, "rope": 2e-4,
             "softmax": 1e-5, "norm": 1e-4, "gelu": 1e-5, "r_": 1e-4, "embedding": 1e-6}


def tolerance(name: str) -> float:
    return next((t for key, t in TOLERANCE.items() if key in name), 1e-6)


def test_every_op_on_metal_matches_the_cpu_backend(tmp_path):
    results = {}
    for backend in ("cpu", "metal"):
        path = tmp_path / f"{backend}.npz"
        result = run_python(f"import sys; sys.argv = ['x', '{backend}', r'{path}']\n" + CASES_SCRIPT,
                            backend)
        assert result.returncode == 0, result.stderr[-4000:]
        if backend == "metal":
            assert_no_complaints(result)
        results[backend] = np.load(path)
    cpu, metal = results["cpu"], results["metal"]
    assert set(cpu.files) == set(metal.files)
    for name in cpu.files:
        t = tolerance(name)
        np.testing.assert_allclose(metal[name].astype(np.float64), cpu[name].astype(np.float64),
                                   rtol=t, atol=t, equal_nan=True, err_msg=name)


def test_ten_thousand_sequential_matmuls_keep_memory_flat():
    # The earlier implementation crashed after 18 buffers; this loop must neither crash nor grow.
    result = run_python("""
        import json, resource, numpy as np
        from tensorlogic import _core as C
        C.init("metal")
        w = C.from_numpy((np.eye(64) * 0.5 + 0.01).astype(np.float32))
        x = C.from_numpy(np.ones((64, 64), np.float32))
        C.synchronize()
        base = C.memory_stats()
        rss = {}
        for i in range(10_000):
            x = C.matmul(x, w)
            if i % 50 == 49:
                x = C.div(x, C.max(C.abs(x)))  # keep values finite
            if i == 999:
                C.synchronize(); warm = C.memory_stats(); rss["warm"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        C.synchronize()
        final = C.memory_stats()
        rss["final"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        value = float(x.numpy()[0, 0])
        del x, w
        C.shutdown()
        print(json.dumps({"base": base, "warm": warm, "final": final, "rss": rss, "value": value,
                          "after": C.memory_stats(sync=False)}))
        """, "metal")
    assert result.returncode == 0, result.stderr[-4000:]
    assert_no_complaints(result)
    data = json.loads(result.stdout.strip().splitlines()[-1])
    assert np.isfinite(data["value"])
    assert data["final"]["allocations"] - data["warm"]["allocations"] <= 4  # R7: pool reuse
    assert data["final"]["live_bytes"] <= data["base"]["live_bytes"] + 2 * 64 * 64 * 4
    assert data["rss"]["final"] - data["rss"]["warm"] < 64 * 1024 * 1024  # bytes on macOS
    assert data["after"]["live_bytes"] == 0  # R6


def test_out_of_range_embedding_id_raises_the_cpu_message_and_the_queue_recovers():
    result = run_python("""
        import numpy as np
        from tensorlogic import _core as C
        C.init("metal")
        table = C.from_numpy(np.ones((4, 8), np.float32))
        try:
            C.embedding(table, C.from_numpy(np.array([1, 9]))).numpy()
        except Exception as e:
            print("raised:", e)
        print("after:", C.add(table, 1.0).numpy()[0, 0])
        """, "metal")
    assert result.returncode == 0, result.stderr[-4000:]
    assert "raised: embedding: id 9 is out of range for a table of 4 rows" in result.stdout
    assert "after: 2.0" in result.stdout
    assert_no_complaints(result)
