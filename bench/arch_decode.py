"""CPU decode speed of a Qwen2-shaped model against the same model declared Llama (issue: the new
architectures stay within 10 % of Llama's decode). Both files hold the same random weights (written
by tensorlogic.models.testing); the Qwen2 copy adds the Q/K/V biases and runs through decoder.tl,
the original through llama.tl. With --experts E a third file is the Llama model with Mixtral's
feed-forward: E experts of the dense FFN's shape (random Q8_0), --used of them per token, so each
token computes --used dense FFNs plus the router. Rounds alternate the files, the first is a
warm-up; decode tok/s is (time of prompt + N tokens - time of prompt + 1 token) / (N - 1).

    PYTHONPATH=python python bench/arch_decode.py [--layers 12] [--d-model 576] [--tokens 129] [--rounds 4]
        [--experts 8 --used 2]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np


def _as_qwen2(src: Path, dst: Path, seed: int = 0) -> None:
    """The llama file declared qwen2, with random Q/K/V biases after each projection."""
    from tensorlogic.models.testing import copy_gguf

    rng = np.random.default_rng(seed)

    def with_bias(t, data):
        out = [(t.name, data, t.tensor_type)]
        if any(t.name.endswith(part + ".weight") for part in ("attn_q", "attn_k", "attn_v")):
            rows = int(t.shape[1])  # ggml order: [cols, rows]
            out.append((t.name.replace(".weight", ".bias"), (0.1 * rng.standard_normal(rows)).astype(np.float32), None))
        return out

    copy_gguf(src, dst, "qwen2", tensors=with_bias)


def _as_mixtral(src: Path, dst: Path, experts: int, used: int, seed: int = 1) -> None:
    """The llama file with each layer's FFN replaced by `experts` random Q8_0 experts of its shape."""
    import gguf
    from gguf.quants import quantize

    from tensorlogic.models.testing import copy_gguf

    rng = np.random.default_rng(seed)
    q8 = gguf.GGMLQuantizationType.Q8_0

    def as_experts(t, data):
        part = next((p for p in ("ffn_gate", "ffn_up", "ffn_down") if t.name.endswith(p + ".weight")), None)
        if part is None:
            return [(t.name, data, t.tensor_type)]
        cols, rows = (int(v) for v in t.shape)  # ggml order
        vals = (rng.standard_normal((experts, rows, cols)) / np.sqrt(cols)).astype(np.float32)
        raw = quantize(vals, q8)
        out = [(t.name.replace(".weight", "_exps.weight"), raw, q8)]
        if part == "ffn_gate":
            out.append((t.name.replace("ffn_gate", "ffn_gate_inp"),
                        (rng.standard_normal((experts, cols)) / np.sqrt(cols)).astype(np.float32), None))
        return out

    copy_gguf(src, dst, extra={"llama.expert_count": (experts, gguf.GGUFValueType.UINT32),
                               "llama.expert_used_count": (used, gguf.GGUFValueType.UINT32)},
              tensors=as_experts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=576)
    ap.add_argument("--tokens", type=int, default=129)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--experts", type=int, default=0, help="also a Mixtral-shaped file with this many experts")
    ap.add_argument("--used", type=int, default=2, help="experts used per token (with --experts)")
    a = ap.parse_args()
    from tensorlogic.apps.llm_session import LlmSession
    from tensorlogic.models.testing import write_tiny_llama

    with tempfile.TemporaryDirectory() as tmp:
        llama = write_tiny_llama(Path(tmp) / "llama.gguf", n_layers=a.layers, d_model=a.d_model, n_heads=9,
                                 n_kv_heads=3, d_ff=a.d_model * 8 // 3, weight_type="Q8_0", context_length=512)
        qwen = Path(tmp) / "qwen2.gguf"
        _as_qwen2(llama, qwen)
        sessions = {"llama": LlmSession(llama, context=256), "qwen2": LlmSession(qwen, context=256)}
        if a.experts:
            moe = Path(tmp) / "mixtral.gguf"
            _as_mixtral(llama, moe, a.experts, a.used)
            sessions[f"mixtral {a.used} of {a.experts}"] = LlmSession(moe, context=256)
        rates: dict[str, list[float]] = {k: [] for k in sessions}
        prompt = list(range(5, 21))
        for rnd in range(a.rounds):
            for name, s in sessions.items():
                s.cached_ids = []
                t0 = time.perf_counter()
                s.generate(prompt, 1, stop_at_eog=False)
                t1 = time.perf_counter()
                s.cached_ids = []
                s.generate(prompt, a.tokens, stop_at_eog=False)
                t2 = time.perf_counter()
                if rnd:
                    rates[name].append((a.tokens - 1) / ((t2 - t1) - (t1 - t0)))
        for s in sessions.values():
            s.close()
    for name, v in rates.items():
        print(f"{name}: decode {np.median(v):.1f} tok/s (rounds {', '.join(f'{x:.1f}' for x in v)})")
    for name in rates:
        if name != "llama":
            print(f"{name} / llama: {np.median(rates[name]) / np.median(rates['llama']):.3f}")


if __name__ == "__main__":
    main()
