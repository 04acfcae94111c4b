"""Hyperparameters of the decoder families that `stdlib/decoder.tl` runs: Qwen2/2.5, Qwen3, Phi-3 /
Phi-4-mini, OLMo 2, Granite, SmolLM3, StableLM 2, and the mixture-of-experts Qwen2-MoE (Qwen1.5-MoE)
and Qwen3-MoE, read from a GGUF file's `{arch}.*` metadata. The expert settings (`expert_settings`,
`expert_shapes`) are shared with `llama` files, where Mixtral's experts live.

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

# The families decoder.tl runs (general.architecture values); what each turns on is in `_settings`.
FAMILIES = ("granite", "olmo2", "phi3", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "smollm3", "stablelm")

# The families whose feed-forward may be a mixture of experts, and whether they renormalise the
# top-k routing weights when the file does not say ({arch}.expert_weights_norm): Hugging Face's
# norm_topk_prob of Qwen1.5-MoE (False) and Qwen3-MoE (True), Mixtral's fixed renormalisation (llama).
EXPERT_FAMILIES = {"qwen2moe": False, "qwen3moe": True, "llama": True}

# Not in the GGUF metadata of smollm3 files: every 4th layer has no RoPE (Hugging Face's
# no_rope_layer_interval default, which llama.cpp also assumes).
SMOLLM3_NO_ROPE_STEP = 4


@dataclass(frozen=True)
class DecoderConfig(ModelConfig):
    rope_neox: bool  # RoPE rotates the two halves of each head (True) or adjacent pairs
    qkv_bias: bool  # attn_q/k/v carry a .bias added after the projection
    qk_norm: str  # "none"; "head": RMSNorm of each q and k head (Qwen3); "full": of the whole q / k (OLMo 2)
    norm: str  # "rms" (RMSNorm) or "layer" (LayerNorm with bias, eps rms_eps)
    post_norm: bool  # norms after attention / FFN (post_attention_norm, post_ffw_norm) instead of before
    sliding_window: int  # > 0: every layer sees only the last sliding_window positions
    attn_scale: float  # attention scores are q·k * attn_scale
    embed_scale: float  # the token embedding is multiplied by this
    residual_scale: float  # each block's output is multiplied by this before joining the residual
    logit_scale: float  # the logits are divided by this
    no_rope_step: int  # > 0: layers no_rope_step-1, 2*no_rope_step-1, ... use no RoPE (SmolLM3)
    qkv_in_file: bool  # the file stores Q/K/V as one attn_qkv matrix (Phi-3)
    gate_up_in_file: bool  # ffn_up holds the gate rows, then the up rows (Phi-3)
    rope_factors: bool  # rope_factors_short / _long divide the frequencies (Phi-3 LongRoPE)
    rope_orig_context: int  # with rope_factors: caches longer than this use the long factors
    rope_attn_factor: float  # cos and sin are multiplied by this (LongRoPE's attention factor)
    # mixture of experts (expert_settings): 0 experts is a dense FFN
    n_experts: int = 0  # experts per layer (ffn_gate_inp routes each token to n_experts_used of them)
    n_experts_used: int = 0
    d_ff_expert: int = 0  # each expert's FFN width
    d_ff_shared: int = 0  # > 0: a shared expert of this width behind a sigmoid gate (Qwen2-MoE)
    expert_weights_norm: bool = False  # the top-k routing probabilities are renormalised to sum 1

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        shapes = super().expected_shapes()
        expert_shapes(self, shapes)
        q, kv, d = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim, self.d_model
        for i in range(self.n_layers):
            p = f"blk.{i}."
            if self.qkv_in_file:
                for part in ("attn_q", "attn_k", "attn_v"):
                    del shapes[p + part + ".weight"]
                shapes[p + "attn_qkv.weight"] = (q + 2 * kv, d)
            if self.gate_up_in_file:
                del shapes[p + "ffn_gate.weight"]
                shapes[p + "ffn_up.weight"] = (2 * self.d_ff, d)
            if self.qkv_bias:
                shapes.update({p + "attn_q.bias": (q,), p + "attn_k.bias": (kv,), p + "attn_v.bias": (kv,)})
            if self.qk_norm == "head":
                shapes.update({p + "attn_q_norm.weight": (self.head_dim,), p + "attn_k_norm.weight": (self.head_dim,)})
            if self.qk_norm == "full":
                shapes.update({p + "attn_q_norm.weight": (q,), p + "attn_k_norm.weight": (kv,)})
            if self.post_norm:
                del shapes[p + "attn_norm.weight"], shapes[p + "ffn_norm.weight"]
                shapes.update({p + "post_attention_norm.weight": (d,), p + "post_ffw_norm.weight": (d,)})
            if self.norm == "layer":
                shapes.update({p + "attn_norm.bias": (d,), p + "ffn_norm.bias": (d,)})
        if self.norm == "layer":
            shapes["output_norm.bias"] = (d,)
        if self.rope_factors:
            half = self.rope_dim // 2
            shapes.update({"rope_factors_long.weight": (half,), "rope_factors_short.weight": (half,)})
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
        experts = expert_settings(g, arch, r)
        shared = r.shared(head_dim, partial_rope=arch in ("phi3", "stablelm"))
        settings = _settings(g, r, arch, head_dim)
        window = int(g.optional(f"{arch}.attention.sliding_window", int, 0) or 0)
        if window < 0:
            raise ModelError(f"{r.label}: metadata {arch}.attention.sliding_window must not be negative")
        if f"{arch}.attention.sliding_window_pattern" in g.metadata:
            pattern = g.metadata[f"{arch}.attention.sliding_window_pattern"]
            per_layer = isinstance(pattern, (list, tuple)) or hasattr(pattern, "shape")
            if window and not (per_layer and all(bool(b) for b in list(pattern))):
                raise ModelError(f"{r.label}: a sliding window on some layers only "
                                 f"({arch}.attention.sliding_window_pattern) is not supported on {arch}")
        if "attn_scale" not in settings:
            settings["attn_scale"] = 1.0 / math.sqrt(head_dim)
        if settings["norm"] == "layer":  # LayerNorm files store their eps under another key
            shared["rms_eps"] = r.positive_float("attention.layer_norm_epsilon", 1e-5)
        cfg = DecoderConfig(**shared, sliding_window=window, **settings, **experts)
        cfg.check_tensors(g)
        return cfg


def _settings(g: GGUFFile, r: _Reader, arch: str, head_dim: int) -> dict:
    """The DecoderConfig fields beyond ModelConfig's and the window, for one family."""
    s = dict(rope_neox=True, qkv_bias=False, qk_norm="none", norm="rms", post_norm=False, attn_scale=0.0,
             embed_scale=1.0, residual_scale=1.0, logit_scale=1.0, no_rope_step=0, qkv_in_file=False,
             gate_up_in_file=False, rope_factors=False, rope_orig_context=0, rope_attn_factor=1.0)
    if arch != "phi3":
        _refuse_rope_scaling(g, arch, r.label)
    if arch in ("qwen2", "qwen2moe"):
        s["qkv_bias"] = True
    elif arch in ("qwen3", "qwen3moe"):
        s["qk_norm"] = "head"
    elif arch == "olmo2":
        s.update(qk_norm="full", post_norm=True)
    elif arch in ("granite", "smollm3"):
        s["rope_neox"] = False  # converted like llama: Q/K rows permuted for adjacent pairs
        if arch == "smollm3":
            s["no_rope_step"] = SMOLLM3_NO_ROPE_STEP
        else:
            s.update(embed_scale=r.positive_float("embedding_scale", 1.0),
                     residual_scale=r.positive_float("residual_scale", 1.0),
                     logit_scale=r.positive_float("logit_scale", 1.0))
            if f"{arch}.attention.scale" in g.metadata:
                s["attn_scale"] = r.positive_float("attention.scale", 1.0)
    elif arch == "stablelm":
        s.update(norm="layer", qkv_bias="blk.0.attn_q.bias" in g.tensors)
        if g.optional(f"{arch}.use_parallel_residual", bool, False):
            raise ModelError(f"{r.label}: StableLM's parallel residual (stablelm.use_parallel_residual) "
                             "is not supported")
        if "blk.0.attn_q_norm.weight" in g.tensors:
            raise ModelError(f"{r.label}: StableLM's per-head q/k LayerNorm (attn_q_norm) is not supported")
    elif arch == "phi3":
        s.update(qkv_in_file=True, gate_up_in_file=True)
        if "rope_factors_long.weight" in g.tensors or "rope_factors_short.weight" in g.tensors:
            s.update(rope_factors=True, rope_orig_context=r.positive("rope.scaling.original_context_length"),
                     rope_attn_factor=r.positive_float("rope.scaling.attn_factor", 1.0))
        else:
            _refuse_rope_scaling(g, arch, r.label)
    if s["attn_scale"] == 0.0:
        del s["attn_scale"]
    return s


def _refuse_rope_scaling(g: GGUFFile, arch: str, label: str) -> None:
    scaling = g.optional(f"{arch}.rope.scaling.type", str, "none") or "none"
    if scaling != "none" and float(g.optional(f"{arch}.rope.scaling.factor", float, 1.0)) != 1.0:
        raise ModelError(f"{label}: RoPE scaling {scaling!r} on {arch} is not supported")


def expert_settings(g: GGUFFile, arch: str, r: _Reader) -> dict:
    """The mixture-of-experts fields of a config ({} for a dense file). Files of families without a
    mixture-of-experts forward pass, and routing this one does not compute (sigmoid gating, scaled
    weights), are refused in one line: they keep their FFN in expert tensors, which would otherwise
    be reported as a missing dense tensor."""
    label = r.label
    experts = int(g.optional(f"{arch}.expert_count", int, 0) or 0)
    if not experts and not any(n.startswith("blk.0.ffn_gate_inp") or "_exps." in n for n in g.tensors):
        return {}
    what = f"{experts} experts per layer" if experts else "expert tensors"
    if arch not in EXPERT_FAMILIES:
        raise ModelError(f"{label}: mixture-of-experts ({what}) is not supported on {arch} (supported: "
                         "Mixtral as llama, qwen2moe, qwen3moe)")
    if experts <= 0:
        raise ModelError(f"{label}: expert tensors without metadata {arch}.expert_count")
    if "blk.0.ffn_gate.0.weight" in g.tensors:
        raise ModelError(f"{label}: one tensor per expert (blk.0.ffn_gate.0.weight, an early Mixtral "
                         "conversion) is not supported; the experts must be stacked (ffn_gate_exps)")
    used = r.positive("expert_used_count")
    if used > experts:
        raise ModelError(f"{label}: metadata {arch}.expert_used_count = {used} exceeds expert_count = {experts}")
    gating = int(g.optional(f"{arch}.expert_gating_func", int, 0) or 0)
    if gating not in (0, 1):  # llama.cpp's values: 0 unset (softmax), 1 softmax, 2 sigmoid
        raise ModelError(f"{label}: expert gating function {gating} ({arch}.expert_gating_func) is not "
                         "supported (supported: softmax)")
    if float(g.optional(f"{arch}.expert_weights_scale", float, 1.0) or 1.0) != 1.0:
        raise ModelError(f"{label}: scaled expert weights ({arch}.expert_weights_scale) are not supported")
    gate = g.tensors.get("blk.0.ffn_gate_exps.weight")
    d_ff_expert = (r.positive("expert_feed_forward_length") if f"{arch}.expert_feed_forward_length" in g.metadata
                   else gate.shape[1] if gate is not None and len(gate.shape) == 3
                   else r.positive("feed_forward_length"))
    shexp = g.tensors.get("blk.0.ffn_gate_shexp.weight")
    d_ff_shared = (r.positive("expert_shared_feed_forward_length")
                   if f"{arch}.expert_shared_feed_forward_length" in g.metadata
                   else shexp.shape[0] if shexp is not None else 0)
    norm = bool(g.optional(f"{arch}.expert_weights_norm", bool, EXPERT_FAMILIES[arch]))
    return dict(n_experts=experts, n_experts_used=used, d_ff_expert=d_ff_expert, d_ff_shared=d_ff_shared,
                expert_weights_norm=norm)


def expert_shapes(cfg, shapes: dict[str, tuple[int, ...]]) -> None:
    """Replace the dense FFN tensors of `shapes` by the expert ones when cfg has experts."""
    if not cfg.n_experts:
        return
    e, f, d, sh = cfg.n_experts, cfg.d_ff_expert, cfg.d_model, cfg.d_ff_shared
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        for part in ("ffn_gate", "ffn_up", "ffn_down"):
            shapes.pop(p + part + ".weight", None)
        shapes.update({p + "ffn_gate_inp.weight": (e, d), p + "ffn_gate_exps.weight": (e, f, d),
                       p + "ffn_up_exps.weight": (e, f, d), p + "ffn_down_exps.weight": (e, d, f)})
        if sh:
            shapes.update({p + "ffn_gate_inp_shexp.weight": (1, d), p + "ffn_gate_shexp.weight": (sh, d),
                           p + "ffn_up_shexp.weight": (sh, d), p + "ffn_down_shexp.weight": (d, sh)})
