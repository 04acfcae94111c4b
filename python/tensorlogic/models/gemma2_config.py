"""Hyperparameters of Gemma 2 (`stdlib/gemma2.tl`), read from a GGUF file's `gemma2.*` metadata.

Invariant: a `Gemma2Config` holds every setting gemma2.tl reads, each checked (positive, caps >= 0),
and `check_tensors` has verified every tensor it reads with its shape; anything the forward pass
does not implement (RoPE scaling) is refused with one `ModelError` naming it. What sets Gemma 2
apart from Gemma 3: no QK-norm, one RoPE base on every layer, attention logit soft-capping (scores
become cap·tanh(score / cap) before the softmax), and layers alternate local (sliding window) and
global, starting with a local one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import ModelError
from .gguf_file import GGUFFile
from .model_config import ModelConfig, _Reader, _architecture


@dataclass(frozen=True)
class Gemma2Config(ModelConfig):
    sliding_window: int  # a local layer's query at position i sees keys i-window+1 .. i
    sliding_window_pattern: int  # 2: layers 1, 3, 5, ... attend globally, 0, 2, 4, ... locally
    attn_scale: float  # scores are q·k * attn_scale (1/sqrt(query_pre_attn_scalar))
    embed_scale: float  # the token embedding is multiplied by sqrt(d_model)
    attn_softcap: float  # scores = cap * tanh(scores / cap); 0 when the file has none
    final_logit_softcap: float  # logits = cap * tanh(logits / cap); 0 when the file has none

    @staticmethod
    def from_gguf(g: GGUFFile) -> "Gemma2Config":
        arch = _architecture(g)
        if arch != "gemma2":
            raise ModelError(f"{g.path}: architecture {arch!r} is not 'gemma2'")
        r = _Reader(g, arch)
        head_dim = r.positive("attention.key_length")
        if r.positive("attention.value_length", head_dim) != head_dim:
            raise ModelError(f"{r.label}: attention.value_length differs from attention.key_length; not supported")
        shared = r.shared(head_dim)
        scaling = g.optional(f"{arch}.rope.scaling.type", str, "none") or "none"
        if scaling != "none" and float(g.optional(f"{arch}.rope.scaling.factor", float, 1.0)) != 1.0:
            raise ModelError(f"{r.label}: RoPE scaling {scaling!r} on gemma2 is not supported")
        caps = {}
        for key in ("attn_logit_softcapping", "final_logit_softcapping"):
            caps[key] = float(g.optional(f"{arch}.{key}", float, 0.0) or 0.0)
            if not caps[key] >= 0 or math.isinf(caps[key]):
                raise ModelError(f"{r.label}: metadata {arch}.{key} must be finite and >= 0")
        # GGUF files do not store query_pre_attn_scalar: it is head_dim for Gemma 2 2B and 9B and
        # d_model / n_heads for the 27B (46 layers), as llama.cpp assumes; attention.scale wins.
        if f"{arch}.attention.scale" in g.metadata:
            attn_scale = r.positive_float("attention.scale", 1.0)
        else:
            scalar = shared["d_model"] // shared["n_heads"] if shared["n_layers"] == 46 else head_dim
            attn_scale = 1.0 / math.sqrt(scalar)
        cfg = Gemma2Config(**shared, sliding_window=r.positive("attention.sliding_window"), sliding_window_pattern=2,
                           attn_scale=attn_scale, embed_scale=math.sqrt(shared["d_model"]),
                           attn_softcap=caps["attn_logit_softcapping"],
                           final_logit_softcap=caps["final_logit_softcapping"])
        cfg.check_tensors(g)
        return cfg

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        shapes = super().expected_shapes()
        for i in range(self.n_layers):
            p = f"blk.{i}."
            shapes.update({p + "post_attention_norm.weight": (self.d_model,),
                           p + "post_ffw_norm.weight": (self.d_model,)})
        return shapes
