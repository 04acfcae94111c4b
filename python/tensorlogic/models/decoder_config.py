"""Hyperparameters of the decoder families that `stdlib/decoder.tl` runs: Qwen2/2.5, Qwen3, Phi-3 /
Phi-4-mini, OLMo 2, Granite, SmolLM3, StableLM 2, read from a GGUF file's `{arch}.*` metadata.

Invariant: a `DecoderConfig` describes one network completely through its fields (decoder.tl reads
nothing else): every field that an architecture does not use holds its neutral value (scale 1,
window 0, "none"), and `check_tensors` has verified every tensor decoder.tl will read for these
fields, with its shape. A file whose settings the fields cannot express is refused with one
`ModelError` naming what is missing. The per-family readers below differ only in which settings
they turn on; the network is written once (decoder.tl), as the llama.cpp converter's tensor names
are shared by all of them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import ModelError
from .gguf_file import GGUFFile
from .model_config import ModelConfig, _Reader, _architecture

# general.architecture -> what the family turns on (see DecoderConfig)
FAMILIES = ("qwen2", "qwen3")


@dataclass(frozen=True)
class DecoderConfig(ModelConfig):
    rope_neox: bool  # RoPE rotates the two halves of each head (True) or adjacent pairs
    qkv_bias: bool  # attn_q/k/v carry a .bias added after the projection
    qk_norm: str  # "none"; "head": RMSNorm of each q and k head (Qwen3); "full": of the whole q / k (OLMo 2)
    sliding_window: int  # > 0: every layer sees only the last sliding_window positions
    attn_scale: float  # attention scores are q·k * attn_scale

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        shapes = super().expected_shapes()
        q, kv = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        for i in range(self.n_layers):
            p = f"blk.{i}."
            if self.qkv_bias:
                shapes.update({p + "attn_q.bias": (q,), p + "attn_k.bias": (kv,), p + "attn_v.bias": (kv,)})
            if self.qk_norm == "head":
                shapes.update({p + "attn_q_norm.weight": (self.head_dim,), p + "attn_k_norm.weight": (self.head_dim,)})
        return shapes

    @staticmethod
    def from_gguf(g: GGUFFile) -> "DecoderConfig":
        arch = _architecture(g)
        if arch not in FAMILIES:
            raise ModelError(f"{g.path}: architecture {arch!r} is not one of {', '.join(FAMILIES)}")
        r = _Reader(g, arch)
        d_model, n_heads = r.positive("embedding_length"), r.positive("attention.head_count")
        head_dim = r.positive("attention.key_length", d_model // n_heads if d_model % n_heads == 0 else None)
        if r.positive("attention.value_length", head_dim) != head_dim:
            raise ModelError(f"{r.label}: attention.value_length differs from attention.key_length; not supported")
        shared = r.shared(head_dim)
        _refuse_rope_scaling(g, arch, r.label)
        _refuse_experts(g, arch, r.label)
        window = int(g.optional(f"{arch}.attention.sliding_window", int, 0) or 0)
        if window < 0:
            raise ModelError(f"{r.label}: metadata {arch}.attention.sliding_window must not be negative")
        cfg = DecoderConfig(
            **shared,
            rope_neox=True,
            qkv_bias=arch == "qwen2",
            qk_norm="head" if arch == "qwen3" else "none",
            sliding_window=window,
            attn_scale=1.0 / math.sqrt(head_dim),
        )
        cfg.check_tensors(g)
        return cfg


def _refuse_rope_scaling(g: GGUFFile, arch: str, label: str) -> None:
    scaling = g.optional(f"{arch}.rope.scaling.type", str, "none") or "none"
    if scaling != "none" and float(g.optional(f"{arch}.rope.scaling.factor", float, 1.0)) != 1.0:
        raise ModelError(f"{label}: RoPE scaling {scaling!r} on {arch} is not supported")


def _refuse_experts(g: GGUFFile, arch: str, label: str) -> None:
    """Mixture-of-experts files (Mixtral is declared `llama`, Qwen-MoE has its own name) keep their
    feed-forward in per-expert tensors: say so, rather than report a missing dense tensor."""
    experts = int(g.optional(f"{arch}.expert_count", int, 0) or 0)
    if experts > 0 or any(n.startswith("blk.0.ffn_gate_inp") or "_exps." in n for n in g.tensors):
        what = f"{experts} experts per layer" if experts else "expert tensors"
        raise ModelError(f"{label}: mixture-of-experts ({what}) is not supported")
