"""Hyperparameters of the supported architectures, read from a GGUF file's `{arch}.*` metadata, and
the check that every tensor the forward pass needs is present with the shape they imply.

`model_config(g)` picks the config class from `general.architecture` (`SUPPORTED_ARCHITECTURES`) and
either returns a config whose every field is positive and consistent (heads divide as they must,
tensors have matching shapes) or raises one `ModelError` naming the file and the key or tensor at
fault. What every architecture shares is read once (`ModelConfig`); what differs sits side by side
below it: `LlamaConfig` (SwiGLU, RoPE on adjacent pairs, scaled RoPE, Mistral's window) and
`Gemma3Config` (QK-norm, norms before and after each block, GELU, NeoX RoPE, sliding-window layers
with their own RoPE base). The forward passes that use them are `stdlib/llama.tl` and
`stdlib/gemma3.tl`. Gemma 2 (`gemma2_config.py`) and the families of `stdlib/decoder.tl`
(`decoder_config.py`) register at the bottom of this file.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .errors import ModelError
from .gguf_file import GGUFFile


@dataclass(frozen=True)
class ModelConfig:
    """The fields every supported architecture has."""

    architecture: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    vocab_size: int
    context_length: int
    rope_base: float
    rope_dim: int
    rms_eps: float
    tied_output: bool
    name: str

    def as_dict(self) -> dict:
        return asdict(self)

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        """NumPy-order shapes of the tensors every architecture's forward pass reads."""
        q, kv = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        shapes: dict[str, tuple[int, ...]] = {
            "token_embd.weight": (self.vocab_size, self.d_model),
            "output_norm.weight": (self.d_model,),
        }
        if not self.tied_output:
            shapes["output.weight"] = (self.vocab_size, self.d_model)
        for i in range(self.n_layers):
            p = f"blk.{i}."
            shapes.update({
                p + "attn_norm.weight": (self.d_model,),
                p + "attn_q.weight": (q, self.d_model),
                p + "attn_k.weight": (kv, self.d_model),
                p + "attn_v.weight": (kv, self.d_model),
                p + "attn_output.weight": (self.d_model, q),
                p + "ffn_norm.weight": (self.d_model,),
                p + "ffn_gate.weight": (self.d_ff, self.d_model),
                p + "ffn_up.weight": (self.d_ff, self.d_model),
                p + "ffn_down.weight": (self.d_model, self.d_ff),
            })
        return shapes

    def check_tensors(self, g: GGUFFile) -> None:
        for name, shape in self.expected_shapes().items():
            info = g.tensors.get(name)
            if info is None:
                raise ModelError(f"{g.path}: missing tensor {name}")
            # a [1, d] matrix may be stored as a vector [d] (Qwen2-MoE's shared-expert gate)
            if info.shape != shape and not (len(shape) == 2 and shape[0] == 1 and info.shape == shape[1:]):
                raise ModelError(f"{g.path}: tensor {name} has shape {list(info.shape)}, "
                                 f"expected {list(shape)} from the metadata")
            if len(shape) == 1 and info.is_quantized:
                raise ModelError(f"{g.path}: tensor {name} has type {info.type_name}; vectors must be "
                                 "F32, F16 or BF16")


class _Reader:
    """Typed, range-checked access to one file's `{arch}.*` metadata."""

    def __init__(self, g: GGUFFile, arch: str):
        self.g, self.arch, self.label = g, arch, str(g.path)

    def positive(self, key: str, default: int | None = None) -> int:
        full = f"{self.arch}.{key}"
        v = self.g.require(full, int) if default is None or full in self.g.metadata else default
        if v <= 0 or v > 1 << 31:
            raise ModelError(f"{self.label}: metadata {full} = {v} is out of range")
        return int(v)

    def positive_float(self, key: str, default: float) -> float:
        full = f"{self.arch}.{key}"
        v = float(self.g.optional(full, float, default))
        if not v > 0 or math.isinf(v):
            raise ModelError(f"{self.label}: metadata {full} must be positive, got {v}")
        return v

    def shared(self, head_dim: int, partial_rope: bool = False) -> dict:
        """The ModelConfig fields, with the architecture's head width (a RoPE over fewer dims than
        that only where the architecture's forward pass implements it)."""
        g, arch, label = self.g, self.arch, self.label
        n_heads = self.positive("attention.head_count")
        n_kv_heads = self.positive("attention.head_count_kv", n_heads)
        if n_heads % n_kv_heads:
            raise ModelError(f"{label}: {n_kv_heads} KV heads do not divide {n_heads} query heads")
        rope_dim = int(g.optional(f"{arch}.rope.dimension_count", int, head_dim))
        if rope_dim != head_dim and not (partial_rope and 0 < rope_dim < head_dim and rope_dim % 2 == 0):
            raise ModelError(f"{label}: partial RoPE ({rope_dim} of {head_dim} dims) is not supported")
        if "token_embd.weight" not in g.tensors:
            raise ModelError(f"{label}: missing tensor token_embd.weight")
        vocab_size = g.tensors["token_embd.weight"].shape[0]
        declared_vocab = g.optional(f"{arch}.vocab_size", int, None)
        if declared_vocab is not None and int(declared_vocab) != vocab_size:
            raise ModelError(f"{label}: {arch}.vocab_size {declared_vocab} differs from token_embd.weight "
                             f"rows {vocab_size}")
        return dict(
            architecture=arch, n_layers=self.positive("block_count"), d_model=self.positive("embedding_length"),
            n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim, d_ff=self.positive("feed_forward_length"),
            vocab_size=vocab_size, context_length=self.positive("context_length"),
            rope_base=self.positive_float("rope.freq_base", 10000.0), rope_dim=rope_dim,
            rms_eps=self.positive_float("attention.layer_norm_rms_epsilon", 1e-5),
            tied_output="output.weight" not in g.tensors, name=str(g.optional("general.name", str, g.path.stem)),
        )


# ------------------------------------------------------------------------------ llama


@dataclass(frozen=True)
class LlamaConfig(ModelConfig):
    rope_scaling: str  # "none", "linear" (positions / rope_scale) or "freqs" (rope_freqs.weight)
    rope_scale: float
    sliding_window: int = 0  # > 0 (Mistral files that carry one): each query sees the last `window` positions
    # mixture of experts (Mixtral; decoder_config.expert_settings): 0 experts is a dense FFN
    n_experts: int = 0
    n_experts_used: int = 0
    d_ff_expert: int = 0
    d_ff_shared: int = 0
    expert_weights_norm: bool = False

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        from .decoder_config import expert_shapes

        shapes = super().expected_shapes()
        expert_shapes(self, shapes)
        return shapes

    @staticmethod
    def from_gguf(g: GGUFFile) -> "LlamaConfig":
        arch = _architecture(g)
        if arch != "llama":
            return _unsupported(g, arch, "llama")
        r = _Reader(g, arch)
        label = r.label
        from .decoder_config import expert_settings

        experts = expert_settings(g, arch, r)  # Mixtral files are declared llama
        d_model, n_heads = r.positive("embedding_length"), r.positive("attention.head_count")
        if d_model % n_heads:
            raise ModelError(f"{label}: {n_heads} heads do not divide the model width {d_model}")
        head_dim = d_model // n_heads
        if g.optional(f"{arch}.attention.key_length", int, head_dim) != head_dim:
            raise ModelError(f"{label}: attention.key_length {g.metadata[f'{arch}.attention.key_length']} "
                             f"differs from d_model / heads = {head_dim}; not supported")
        shared = r.shared(head_dim)
        scaling = g.optional(f"{arch}.rope.scaling.type", str, "none") or "none"
        factor = float(g.optional(f"{arch}.rope.scaling.factor", float, 1.0))
        rope_scaling, rope_scale = "none", 1.0
        if "rope_freqs.weight" in g.tensors:  # Llama 3.1 style: one divisor per frequency
            rope_scaling = "freqs"
            if g.tensors["rope_freqs.weight"].shape != (head_dim // 2,):
                raise ModelError(f"{label}: tensor rope_freqs.weight has shape "
                                 f"{list(g.tensors['rope_freqs.weight'].shape)}, expected [{head_dim // 2}]")
        elif scaling == "linear" and factor != 1.0:
            if not factor > 0:
                raise ModelError(f"{label}: {arch}.rope.scaling.factor must be positive, got {factor}")
            rope_scaling, rope_scale = "linear", factor
        elif scaling not in ("none", "linear") and factor != 1.0:
            raise ModelError(f"{label}: RoPE scaling {scaling!r} is not supported (supported: linear, "
                             "per-frequency factors)")
        window = int(g.optional(f"{arch}.attention.sliding_window", int, 0) or 0)
        if window < 0:
            raise ModelError(f"{label}: metadata {arch}.attention.sliding_window must not be negative")
        cfg = LlamaConfig(**shared, rope_scaling=rope_scaling, rope_scale=rope_scale, sliding_window=window,
                          **experts)
        cfg.check_tensors(g)
        return cfg


# ------------------------------------------------------------------------------ gemma3


@dataclass(frozen=True)
class Gemma3Config(ModelConfig):
    sliding_window: int  # a local layer's query at position i sees keys i-window+1 .. i
    sliding_window_pattern: int  # layers pattern-1, 2*pattern-1, ... attend globally; the rest locally
    rope_local_base: float  # RoPE base of the local layers (global ones use rope_base)
    attn_scale: float  # scores are q·k * attn_scale (1/sqrt(query_pre_attn_scalar), see _attn_scale)
    embed_scale: float  # the token embedding is multiplied by sqrt(d_model)
    final_logit_softcap: float  # logits = cap * tanh(logits / cap); 0 when the model has none

    # Not in the GGUF metadata of gemma3 files: the architecture's published values.
    DEFAULT_SLIDING_WINDOW_PATTERN = 6
    DEFAULT_ROPE_LOCAL_BASE = 10000.0

    @staticmethod
    def from_gguf(g: GGUFFile) -> "Gemma3Config":
        arch = _architecture(g)
        if arch != "gemma3":
            return _unsupported(g, arch, "gemma3")
        r = _Reader(g, arch)
        head_dim = r.positive("attention.key_length")
        if r.positive("attention.value_length", head_dim) != head_dim:
            raise ModelError(f"{r.label}: attention.value_length differs from attention.key_length; not supported")
        shared = r.shared(head_dim)
        scaling = g.optional(f"{arch}.rope.scaling.type", str, "none") or "none"
        if scaling != "none" and float(g.optional(f"{arch}.rope.scaling.factor", float, 1.0)) != 1.0:
            raise ModelError(f"{r.label}: RoPE scaling {scaling!r} on gemma3 is not supported")
        if float(g.optional(f"{arch}.attn_logit_softcapping", float, 0.0) or 0.0) != 0.0:
            raise ModelError(f"{r.label}: attention logit soft-capping ({arch}.attn_logit_softcapping) "
                             "is not supported")
        cfg = Gemma3Config(
            **shared,
            sliding_window=r.positive("attention.sliding_window"),
            sliding_window_pattern=r.positive("attention.sliding_window_pattern",
                                              Gemma3Config.DEFAULT_SLIDING_WINDOW_PATTERN),
            rope_local_base=r.positive_float("rope.freq_base_swa", Gemma3Config.DEFAULT_ROPE_LOCAL_BASE),
            attn_scale=Gemma3Config._attn_scale(r, shared, head_dim),
            embed_scale=math.sqrt(shared["d_model"]),
            final_logit_softcap=float(g.optional(f"{arch}.final_logit_softcapping", float, 0.0) or 0.0),
        )
        if cfg.final_logit_softcap < 0:
            raise ModelError(f"{r.label}: metadata {arch}.final_logit_softcapping must not be negative")
        cfg.check_tensors(g)
        return cfg

    @staticmethod
    def _attn_scale(r: _Reader, shared: dict, head_dim: int) -> float:
        """1/sqrt(query_pre_attn_scalar). GGUF files do not store that scalar: it is head_dim for
        every Gemma 3 size but the 27B (62 layers), where it is d_model / n_heads (as llama.cpp
        does it); `{arch}.attention.scale`, when a file has it, wins."""
        if f"{r.arch}.attention.scale" in r.g.metadata:
            return r.positive_float("attention.scale", 1.0)
        scalar = shared["d_model"] // shared["n_heads"] if shared["n_layers"] == 62 else head_dim
        return 1.0 / math.sqrt(scalar)

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        shapes = super().expected_shapes()
        for i in range(self.n_layers):
            p = f"blk.{i}."
            shapes.update({
                p + "attn_q_norm.weight": (self.head_dim,),
                p + "attn_k_norm.weight": (self.head_dim,),
                p + "post_attention_norm.weight": (self.d_model,),
                p + "post_ffw_norm.weight": (self.d_model,),
            })
        return shapes


# ------------------------------------------------------------------------------ dispatch

CONFIG_CLASSES: dict[str, type] = {"gemma3": Gemma3Config, "llama": LlamaConfig}
SUPPORTED_ARCHITECTURES = tuple(sorted(CONFIG_CLASSES))


def _architecture(g: GGUFFile) -> str:
    return g.require("general.architecture", str)


def _unsupported(g: GGUFFile, arch: str, expected: str | None = None):
    if expected is not None and arch in CONFIG_CLASSES:
        raise ModelError(f"{g.path}: architecture {arch!r} is not {expected!r}")
    raise ModelError(f"{g.path}: architecture {arch!r} is not supported "
                     f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})")


def model_config(g: GGUFFile) -> ModelConfig:
    """The config of the file's architecture (`general.architecture`)."""
    arch = _architecture(g)
    cls = CONFIG_CLASSES.get(arch)
    if cls is None:
        expert_settings(g, arch, _Reader(g, arch))  # deepseek2, ...: an expert file says so
        _unsupported(g, arch)
    return cls.from_gguf(g)


# The decoder families (decoder_config.py) build on the names above, so they register last.
from .decoder_config import FAMILIES as _DECODER_FAMILIES, DecoderConfig, expert_settings  # noqa: E402

from .gemma2_config import Gemma2Config  # noqa: E402

CONFIG_CLASSES.update({arch: DecoderConfig for arch in _DECODER_FAMILIES})
CONFIG_CLASSES["gemma2"] = Gemma2Config
SUPPORTED_ARCHITECTURES = tuple(sorted(CONFIG_CLASSES))
