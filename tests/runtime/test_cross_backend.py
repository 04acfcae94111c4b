"""Every op of `tensorlogic._core` on the CUDA backend against the CPU backend (ggml's
test-backend-ops idea), through the public Python API, so the ops layer's encoding is covered too.

Each test builds its inputs once in NumPy (random shapes, broadcasting, transposed/strided views,
f32/f16/bf16/int dtypes, every GGUF quant type as raw blocks), runs the same calls on the CPU
backend and then on the other backend, and compares. Tolerances: exact for integer/bool results
and data movement; f32 math rtol 1e-4 with an absolute floor of 1e-5 * max|ref| (f32 sums in a
different order); f16 outputs rtol 2e-3; bf16 1e-2.

Skipped, with the reason, where the CUDA backend is not built or no GPU is usable. Set
TL_CROSS_BACKEND=cpu to run the harness itself against the CPU backend on any machine.
"""
from __future__ import annotations

import gc
import os

import numpy as np
import pytest

from tensorlogic import _core

OTHER = os.environ.get("TL_CROSS_BACKEND", "cuda")


def _other_backend_reason() -> str | None:
    if OTHER not in _core.available_backends():
        return f"{OTHER}: this build of TensorLogic has no {OTHER} backend"
    previous = _core.backend_name()
    try:
        _core.init(OTHER)
    except _core.BackendUnavailable as e:
        return str(e)
    finally:
        _core.init(previous)
    return None


_REASON = _other_backend_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=f"no {OTHER} backend: {_REASON}")

RNG = np.random.default_rng(7)


def run_on(backend: str, cases):
    """Runs every case (a function returning a Tensor or a list of them) on `backend`;
    returns their NumPy results, or the exception text for a case that raised."""
    _core.init(backend)
    results = []
    for case in cases:
        try:
            out = case()
            outs = out if isinstance(out, (list, tuple)) else [out]
            results.append([o.numpy() for o in outs])
        except _core.TLRuntimeError as e:
            results.append(f"{type(e).__name__}: {e}")
    gc.collect()
    _core.synchronize()
    return results


def compare_all(cases, rtol=1e-4, arel=1e-5):
    """Runs `cases` (list of (name, fn)) on the CPU and the other backend and compares."""
    names = [n for n, _ in cases]
    fns = [f for _, f in cases]
    ref = run_on("cpu", fns)
    got = run_on(OTHER, fns)
    _core.init("cpu")
    failures = []
    for name, r, g in zip(names, ref, got):
        expect_error = "out of range" in name
        if isinstance(r, str) or isinstance(g, str) or expect_error:
            if not (isinstance(r, str) and isinstance(g, str)):
                failures.append(f"{name}: cpu {r if isinstance(r, str) else 'ok'}, "
                                f"{OTHER} {g if isinstance(g, str) else 'ok'}")
            elif not expect_error:
                failures.append(f"{name}: raised on both backends: {r}")
            continue
        for i, (a, b) in enumerate(zip(r, g)):
            try:
                assert a.shape == b.shape and a.dtype == b.dtype, f"{a.shape}/{a.dtype} vs {b.shape}/{b.dtype}"
                if a.dtype == np.bool_ or np.issubdtype(a.dtype, np.integer) or a.dtype == np.uint8:
                    np.testing.assert_array_equal(b, a)
                else:
                    tol = rtol
                    if a.dtype == np.float16:
                        tol = max(tol, 2e-3)
                    a64, b64 = a.astype(np.float64), b.astype(np.float64)
                    finite = np.isfinite(a64)
                    scale = float(np.max(np.abs(a64[finite]))) if finite.any() else 0.0
                    np.testing.assert_allclose(b64, a64, rtol=tol, atol=1e-7 + arel * scale)
            except AssertionError as e:
                failures.append(f"{name} output {i}: {str(e)[:600]}")
    assert not failures, f"{len(failures)} of {len(cases)} cases differ:\n" + "\n".join(failures)


def T(a, dtype=None):
    return _core.from_numpy(np.ascontiguousarray(a), dtype=dtype) if dtype else _core.from_numpy(
        np.ascontiguousarray(a))


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# --------------------------------------------------------------------------- elementwise

# The op lists come from the kernel table (`_core.kernel_ops()`, every value of the kernels' op
# enums), so an op added there is compared across backends without editing this file.
KERNEL_OPS = _core.kernel_ops()
BINARY = [n for n in KERNEL_OPS["binary"] if n != "pow"]  # pow: its own operand ranges below
UNARY = [n for n in KERNEL_OPS["unary"] if n != "gelu"]  # gelu: its own cases (approximate=...)
REDUCE = KERNEL_OPS["reduce"]


def test_binary_ops_with_broadcasting_views_and_dtypes():
    cases = []
    shape_pairs = [((3, 4), (3, 4)), ((2, 3, 5), (5,)), ((4, 1, 3), (1, 6, 1)), ((7,), (2, 7)),
                   ((), (3,))]
    for name in BINARY + ["pow"]:  # every binary op of the kernel table
        for sa, sb in shape_pairs:
            for dt in ("f32", "f16", "bf16", "i64", "i32"):
                if dt.startswith("i"):
                    a = RNG.integers(-5, 6, sa)
                    b = RNG.integers(-5, 6, sb)
                    if name == "pow":
                        b = np.abs(b) % 4
                else:
                    a, b = randn(*sa), randn(*sb)
                    if name == "pow":
                        a = np.abs(a) + 0.1
                cases.append((f"{name} {dt} {sa} {sb}",
                              lambda name=name, a=a, b=b, dt=dt: getattr(_core, name)(T(a, dt), T(b, dt))))
        # transposed operand, Python scalar on either side
        a, b = randn(5, 4), randn(4, 5)
        cases.append((f"{name} transposed", lambda name=name, a=a, b=b: getattr(_core, name)(
            _core.transpose(T(a)), T(b))))
        cases.append((f"{name} scalar", lambda name=name, a=a: getattr(_core, name)(T(np.abs(a) + 0.5), 1.5)))
        cases.append((f"{name} rscalar", lambda name=name, a=a: getattr(_core, name)(2.0, T(np.abs(a) + 0.5))))
        ai = RNG.integers(1, 9, (3, 3))
        cases.append((f"{name} int scalar", lambda name=name, ai=ai: getattr(_core, name)(T(ai), 3)))
    compare_all(cases)


def test_integer_division_edges_match_the_cpu():
    """x / 0 and x % 0 are 0, INT_MIN / -1 wraps to INT_MIN and INT_MIN % -1 is 0 on every backend."""
    cases = []
    for dt, lo in (("i64", -2**63), ("i32", -2**31)):
        a = np.array([lo, lo, 7, -7, lo + 1, 0], dtype=np.int64 if dt == "i64" else np.int32)
        b = np.array([-1, 0, -1, 0, -1, -1], dtype=a.dtype)
        for name in ("div", "mod"):
            cases.append((f"{name} {dt} edges", lambda name=name, a=a, b=b: getattr(_core, name)(T(a), T(b))))
            cases.append((f"{name} {dt} scalar -1", lambda name=name, a=a: getattr(_core, name)(T(a), -1)))
    compare_all(cases)


def test_float_to_int_casts_saturate_like_the_cpu():
    f = np.array([1e30, -1e30, np.inf, -np.inf, np.nan, 3.9, -3.9, 2.5e9], np.float32)
    cases = []
    for dt in ("i32", "i64"):
        cases.append((f"astype f32->{dt}", lambda dt=dt: _core.astype(T(f), dt)))
        for v in (1e30, 1e300, -1e300, float("nan")):
            cases.append((f"full {v} {dt}", lambda dt=dt, v=v: _core.full([3], v, dt)))
    compare_all(cases)


def test_unary_ops_on_strided_views():
    cases = []
    for name in UNARY:
        for dt in ("f32", "f16", "i64"):
            x = randn(6, 8) * 3 if dt != "i64" else RNG.integers(-9, 9, (6, 8))
            cases.append((f"{name} {dt}", lambda name=name, x=x, dt=dt: getattr(_core, name)(
                _core.transpose(T(x, dt)))))
            cases.append((f"{name} {dt} sliced", lambda name=name, x=x, dt=dt: getattr(_core, name)(
                T(x, dt)[1:5:2, ::3])))
    for approx in ("tanh", "none"):
        x = randn(33, 7)
        cases.append((f"gelu {approx}", lambda x=x, approx=approx: _core.gelu(T(x), approximate=approx)))
    compare_all(cases)


def test_copy_astype_where_fill_arange_and_setitem():
    cases = []
    dts = ["f32", "f16", "bf16", "i32", "i64", "bool"]
    x = randn(4, 6) * 4
    for src in dts:
        for dst in dts:
            cases.append((f"astype {src}->{dst}", lambda src=src, dst=dst: _core.astype(
                _core.transpose(_core.astype(T(x), src)), dst)))
    c = RNG.random((3, 1, 5)) < 0.5
    a, b = randn(1, 4, 5), randn(3, 4, 1)
    cases.append(("where", lambda: _core.where(T(c), T(a), T(b))))
    ai = RNG.integers(0, 9, (3, 4, 5))
    cases.append(("where int", lambda: _core.where(T(c), T(ai), 7)))
    for dt in ("f32", "i64", "f16", "bool"):
        cases.append((f"full {dt}", lambda dt=dt: _core.full([3, 5], 2.5, dt)))
    cases.append(("arange f32", lambda: _core.arange(-3.0, 7.0, 0.25)))
    cases.append(("arange i64", lambda: _core.arange(2, 200, 3)))

    rows = randn(3, 3, 4)

    def setitem_slices():
        cache = _core.zeros([8, 3, 4])
        cache[2:5] = T(rows)
        cache[6, 1] = 4.0
        return cache

    cases.append(("setitem", setitem_slices))
    p, q, r = randn(2, 3), randn(4, 3), randn(2, 3)
    cases.append(("concat/stack", lambda: [_core.concat([T(p), T(q)], 0), _core.stack([T(p), T(r)], 1)]))
    cases.append(("rand/randn", lambda: [_core.rand([5, 7], seed=3), _core.randn([4, 4], seed=9)]))
    compare_all(cases, rtol=1e-6)


# --------------------------------------------------------------------------- reductions

def test_reductions_and_softmax():
    cases = []
    for name in REDUCE:
        for shape in ((7,), (4, 300), (3, 17, 5), (2, 3000), (1, 49152)):
            for dim in [None] + list(range(len(shape))):
                for dt in ("f32", "f16", "i64"):
                    x = randn(*shape) if dt != "i64" else RNG.integers(-50, 50, shape)
                    cases.append((f"{name} {dt} {shape} dim={dim}",
                                  lambda name=name, x=x, dim=dim, dt=dt: getattr(_core, name)(
                                      T(x, dt), dim=dim, keepdim=dim == 1)))
    for shape, dim in (((5, 40), -1), ((3, 50, 4), 1), ((2, 3000), -1), ((9,), 0), ((1, 49152), -1)):
        x = randn(*shape) * 5
        cases.append((f"softmax {shape} {dim}", lambda x=x, dim=dim: _core.softmax(T(x), dim)))
        cases.append((f"log_softmax {shape} {dim}", lambda x=x, dim=dim: _core.log_softmax(T(x), dim)))
    compare_all(cases)


# --------------------------------------------------------------------------- linear algebra

def test_matmul_batched_broadcast_transposed():
    cases = []
    for sa, sb in (((5, 7), (7, 3)), ((2, 30, 70), (70, 40)), ((3, 1, 65, 33), (4, 33, 17)),
                   ((129,), (129, 66)), ((8, 64), (64,))):
        for dt in ("f32", "f16"):
            a, b = randn(*sa), randn(*sb)
            cases.append((f"matmul {dt} {sa}@{sb}", lambda a=a, b=b, dt=dt: _core.matmul(T(a, dt), T(b, dt))))
    a, b = randn(40, 50), randn(30, 50)
    cases.append(("matmul transposed b", lambda: _core.matmul(T(a), _core.transpose(T(b)))))
    c = randn(30, 9)
    cases.append(("matmul transposed a", lambda: _core.matmul(_core.transpose(T(b)), T(c))))
    compare_all(cases)


# GGUF block layouts: bytes per block, elements per block, byte offsets of f16 scale fields.
QUANT = {"q4_0": (18, 32, [0]), "q4_1": (20, 32, [0, 2]), "q5_0": (22, 32, [0]),
         "q5_1": (24, 32, [0, 2]), "q8_0": (34, 32, [0]), "q4_k": (144, 256, [0, 2]),
         "q5_k": (176, 256, [0, 2]), "q6_k": (210, 256, [208])}


def random_quantized(qtype: str, rows: int, cols: int) -> np.ndarray:
    """Random raw blocks with sane f16 scales (random bytes elsewhere exercise every bit)."""
    bb, be, scale_offsets = QUANT[qtype]
    blocks = RNG.integers(0, 256, (rows * cols // be, bb), dtype=np.uint8)
    for off in scale_offsets:
        scales = RNG.uniform(0.002, 0.05, blocks.shape[0]).astype(np.float16)
        blocks[:, off:off + 2] = scales.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, cols // be * bb)


def test_linear_all_weight_types_decode_and_prompt_shapes():
    cases = []
    for wt in ["f32", "f16", "bf16"] + list(QUANT):
        be = QUANT[wt][1] if wt in QUANT else 1
        K = be * (3 if be == 256 else 18) if wt in QUANT else 70
        for M in (1, 2, 8, 9, 77):
            N = int(RNG.integers(1, 150))
            x = randn(M, K)
            if wt in QUANT:
                raw = random_quantized(wt, N, K)
                mk = lambda raw=raw, wt=wt, N=N, K=K: _core.from_quantized(raw, wt, [N, K])
            else:
                w = randn(N, K)
                mk = lambda w=w, wt=wt: T(w, wt)
            cases.append((f"linear {wt} M={M} K={K} N={N}", lambda x=x, mk=mk: _core.linear(T(x), mk())))
        bias, x3 = randn(N), randn(2, 3, K)
        cases.append((f"linear {wt} 3-D x with bias", lambda mk=mk, x3=x3, bias=bias: _core.linear(
            T(x3), mk(), T(bias))))
    compare_all(cases)


def test_embedding_from_every_table_type_and_bad_ids():
    cases = []
    for wt in ["f32", "f16", "bf16"] + list(QUANT):
        be = QUANT[wt][1] if wt in QUANT else 1
        D = be * 2 if wt in QUANT else 48
        V = 37
        if wt in QUANT:
            raw = random_quantized(wt, V, D)
            mk = lambda raw=raw, wt=wt, D=D: _core.from_quantized(raw, wt, [V, D])
        else:
            tab = randn(V, D)
            mk = lambda tab=tab, wt=wt: T(tab, wt)
        ids = RNG.integers(0, V, (3, 5))
        cases.append((f"embedding {wt}", lambda mk=mk, ids=ids: _core.embedding(mk(), T(ids))))
        cases.append((f"embedding {wt} i32 ids", lambda mk=mk, ids=ids: _core.embedding(mk(), T(ids, "i32"))))
        bad = ids.copy()
        bad[1, 2] = V + 3
        cases.append((f"embedding {wt} id out of range", lambda mk=mk, bad=bad: _core.embedding(mk(), T(bad))))
    ref = run_on("cpu", [c[1] for c in cases[-1:]])
    assert isinstance(ref[0], str) and "out of range" in ref[0]
    compare_all(cases)


# --------------------------------------------------------------------------- nn

def test_norms_rope_and_causal_mask():
    cases = []
    for D in (1, 64, 576, 2000):
        x, w, b = randn(5, D), randn(D), randn(D)
        cases.append((f"rms_norm D={D}", lambda x=x, w=w: _core.rms_norm(T(x), T(w), 1e-5)))
        cases.append((f"rms_norm no w D={D}", lambda x=x: _core.rms_norm(T(x, "f16"))))
        cases.append((f"layer_norm D={D}", lambda x=x, w=w, b=b: _core.layer_norm(T(x), T(w), T(b))))
        cases.append((f"layer_norm no w D={D}", lambda x=x: _core.layer_norm(T(x))))
    for neox in (False, True):
        for pos in (0, 17, 4000):
            x = randn(2, 7, 3, 64)
            cases.append((f"rope neox={neox} pos={pos}", lambda x=x, pos=pos, neox=neox: _core.rope(
                T(x), pos_offset=pos, base=100000.0, neox=neox)))
        x3 = randn(5, 4, 32)
        cases.append((f"rope 3-D neox={neox}", lambda x3=x3, neox=neox: _core.rope(T(x3), 3, 10000.0, neox)))
    for n, m, off in ((5, None, 0), (4, 9, 5), (6, 3, -1)):
        cases.append((f"causal_mask {n} {m} {off}", lambda n=n, m=m, off=off: _core.causal_mask(n, m, off)))
    compare_all(cases)


def test_attention_gqa_causal_mask_and_kv_cache_views():
    cases = []
    for Sq, Sk, Hq, Hkv, D, causal, with_mask in ((1, 1, 9, 3, 64, True, False),
                                                  (1, 200, 9, 3, 64, True, False),
                                                  (7, 7, 4, 4, 32, True, False),
                                                  (5, 12, 6, 2, 128, False, True),
                                                  (16, 40, 8, 1, 80, True, True),
                                                  (3, 300, 2, 2, 256, False, False)):
        q = randn(Sq, Hq, D)
        cache_k, cache_v = randn(Sk + 9, Hkv, D), randn(Sk + 9, Hkv, D)
        mask = randn(Sq, Sk) if with_mask else None
        pos = Sk - Sq

        def case(q=q, ck=cache_k, cv=cache_v, mask=mask, Sk=Sk, causal=causal, pos=pos):
            k = T(ck)[0:Sk]  # first Sk rows of a preallocated cache (a view)
            v = T(cv)[0:Sk]
            m = T(mask) if mask is not None else None
            return _core.attention(T(q), k, v, mask=m, causal=causal, pos_offset=pos)

        cases.append((f"attention Sq={Sq} Sk={Sk} H={Hq}/{Hkv} D={D} causal={causal} mask={with_mask}", case))

        def capped(q=q, ck=cache_k, cv=cache_v, mask=mask, Sk=Sk, causal=causal, pos=pos):
            m = T(mask) if mask is not None else None
            return _core.attention(T(q) * 4.0, T(ck)[0:Sk], T(cv)[0:Sk], mask=m, causal=causal, pos_offset=pos,
                                   softcap=0.8)

        cases.append((f"attention softcap Sq={Sq} Sk={Sk} H={Hq}/{Hkv} D={D}", capped))
    compare_all(cases)


# --------------------------------------------------------------------------- recordings (compiled functions)

class _Sym:
    """What a compiled function's symbolic scalar shows the bindings (builtins/symbolic.py):
    its value and its affine form over the recording's scalar inputs."""

    def __init__(self, value, constant, terms):
        self.value, self.constant, self.terms = value, constant, terms

    @property
    def _tl_affine(self):
        return (self.value, self.constant, self.terms, isinstance(self.value, float))


def _recorded_decode_steps():
    """Records one decode-like step (scale by a scalar input, rope at pos, write the KV cache at
    pos, attend over 0..pos, project) and replays it for positions 1..7; every replay must be
    exactly one command buffer (on Metal: one MTLCommandBuffer)."""
    rng = np.random.default_rng(3)
    w = T(rng.standard_normal((16, 8)).astype(np.float32))
    xs = [T(rng.standard_normal((1, 2, 4)).astype(np.float32)) for _ in range(8)]
    cache = _core.zeros([8, 2, 4], "f32")

    def step(x, pos, scale):
        q = _core.rope(x * scale, pos, 10000.0)
        end = _Sym(pos.value + 1, pos.constant + 1.0, pos.terms)
        _core.copy_(_core.slice(cache, 0, pos, end, 1), q)
        k = _core.slice(cache, 0, 0, end, 1)
        a = _core.attention(q, k, k, causal=True, pos_offset=pos)
        return _core.linear(a.reshape([1, 8]), w)

    rec = _core.Recording(2)
    rec.begin()
    slot = rec.bind_input(xs[0])
    out = step(slot, _Sym(0, 0.0, [(0, 1.0)]), _Sym(0.5, 0.0, [(1, 1.0)]))
    del slot
    results = rec.finish([out])
    del out
    assert rec.ready, rec.reason
    _core.synchronize()
    committed = _core.memory_stats()["command_buffers_committed"]
    for p in range(1, 8):
        results += rec.replay([float(p), 0.5 + 0.25 * p], [xs[p]])
    _core.synchronize()
    assert _core.memory_stats()["command_buffers_committed"] - committed == 7
    return results + [cache]


def test_recorded_step_replays_like_the_cpu_backend():
    compare_all([("recorded decode step, 7 replays", _recorded_decode_steps)])


# --------------------------------------------------------------------------- fused kernels

def test_fused_kernels_norm_linear_residual_swiglu_rope_kv_write():
    # One case per Kernels fused method and path: matrix-vector (M <= 8) and tiled rows, every
    # weight type, with and without the norm weight and the residual, strided operands.
    cases = []
    for wt in ["f32", "f16"] + list(QUANT):
        be = QUANT[wt][1] if wt in QUANT else 1
        K = be * (3 if be == 256 else 18) if wt in QUANT else 70
        for M in (1, 3, 9, 40):
            N = int(RNG.integers(1, 150))
            x, nw, res = randn(M, K) * 3, randn(K), randn(M, N)
            if wt in QUANT:
                raw = random_quantized(wt, N, K)
                mk = lambda raw=raw, wt=wt, N=N, K=K: _core.from_quantized(raw, wt, [N, K])
            else:
                w = randn(N, K)
                mk = lambda w=w, wt=wt: T(w, wt)
            cases.append((f"rms_norm_linear {wt} M={M}", lambda x=x, nw=nw, mk=mk: _core.rms_norm_linear(
                T(x), T(nw), mk(), 1e-5)))
            cases.append((f"rms_norm_linear {wt} M={M} no norm weight, residual",
                          lambda x=x, mk=mk, res=res: _core.rms_norm_linear(T(x), None, mk(), 1e-6, T(res))))
            cases.append((f"linear {wt} M={M} + residual", lambda x=x, mk=mk, res=res: _core.linear(
                T(x), mk(), T(res))))
            gu = randn(M, 2 * K) * 3
            cases.append((f"swiglu_linear {wt} M={M} + residual", lambda gu=gu, mk=mk, res=res: _core.swiglu_linear(
                T(gu), mk(), T(res))))
    for M in (1, 8):  # the down projection's shape (K = 1536): staged rows beyond a block's 48 KiB
        x, res = randn(M, 1536), randn(M, 576)
        raw = random_quantized("q4_1", 576, 1536)
        cases.append((f"linear q4_1 M={M} K=1536 + residual", lambda x=x, raw=raw, res=res: _core.linear(
            T(x), _core.from_quantized(raw, "q4_1", [576, 1536]), T(res))))
        w, gu = randn(40, 1536), randn(M, 2 * 1536)
        cases.append((f"swiglu_linear q4_1 M={M} K=1536 + residual", lambda gu=gu, raw=raw, res=res: _core.swiglu_linear(
            T(gu), _core.from_quantized(raw, "q4_1", [576, 1536]), T(res))))
        cases.append((f"rms_norm_linear f32 M={M} K=1536", lambda x=x, w=w: _core.rms_norm_linear(
            T(x), T(np.ones(1536, np.float32)), T(w), 1e-5)))
    for rows, n in ((1, 1536), (5, 100), (64, 33)):
        gu = randn(rows, 2 * n) * 4
        cases.append((f"swiglu halves {rows}x{n}", lambda gu=gu: _core.swiglu(T(gu))))
        cases.append((f"swiglu f16 gate, transposed up {rows}x{n}", lambda gu=gu, n=n: _core.swiglu(
            T(gu[:, :n], "f16"), _core.transpose(T(np.ascontiguousarray(gu[:, n:].T)), 0, 1))))
    for S, Hq, Hkv, D, pos, neox, cache_dtype in ((1, 9, 3, 64, 0, False, "f32"), (1, 9, 3, 64, 3000, False, "f32"),
                                                 (7, 4, 2, 32, 5, True, "f32"), (3, 8, 8, 128, 1, False, "f16")):
        qkv = randn(S, (Hq + 2 * Hkv) * D)
        ck, cv = randn(S + pos + 4, Hkv, D), randn(S + pos + 4, Hkv, D)

        def case(qkv=qkv, ck=ck, cv=cv, Hq=Hq, Hkv=Hkv, D=D, pos=pos, neox=neox, dt=cache_dtype):
            t = T(qkv)
            q, k, v = t[:, 0:Hq * D], t[:, Hq * D:(Hq + Hkv) * D], t[:, (Hq + Hkv) * D:]
            kc, vc = T(ck, dt), T(cv, dt)
            q_out = _core.rope_kv_write(q, k, v, kc, vc, pos, 100000.0, neox)
            return [q_out, kc, vc]

        cases.append((f"rope_kv_write S={S} H={Hq}/{Hkv} D={D} pos={pos} neox={neox} {cache_dtype}", case))
    compare_all(cases)


# --------------------------------------------------------------------------- runtime on the device

def test_memory_returns_to_baseline_on_the_other_backend():
    _core.init(OTHER)
    try:
        _core.synchronize()
        base = _core.memory_stats()["live_bytes"]
        for _ in range(50):
            x = _core.randn([64, 64], seed=1)
            y = _core.matmul(x, x)
            z = _core.softmax(y + 1.0, -1)
            assert abs(float(_core.sum(z).item()) - 64.0) < 1e-2
        del x, y, z
        gc.collect()
        _core.synchronize()
        assert _core.memory_stats()["live_bytes"] == base
    finally:
        _core.init("cpu")
