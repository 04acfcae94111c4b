"""Hyperparameters of a Llama-architecture GGUF model, read from `{arch}.*` metadata, and the
check that every tensor the forward pass needs is present with the shape they imply.

`LlamaConfig.from_gguf` either returns a config whose every field is positive and consistent
(heads divide the model width, KV heads divide query heads, tensors have matching shapes) or raises
one `ModelError` naming the file and the key or tensor at fault.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .errors import ModelError
from .gguf_file import GGUFFile

# Architectures whose GGUF tensors and math are the plain Llama graph.
LLAMA_ARCHITECTURES = ("llama",)


@dataclass(frozen=True)
class LlamaConfig:
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
    rope_scaling: str  # "none", "linear" (positions / rope_scale) or "freqs" (rope_freqs.weight)
    rope_scale: float
    rms_eps: float
    tied_output: bool
    name: str

    def as_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_gguf(g: GGUFFile) -> "LlamaConfig":
        label = str(g.path)
        arch = g.require("general.architecture", str)
        if arch not in LLAMA_ARCHITECTURES:
            raise ModelError(f"{label}: architecture {arch!r} is not supported "
                             f"(supported: {', '.join(LLAMA_ARCHITECTURES)})")

        def positive(key: str) -> int:
            v = g.require(f"{arch}.{key}", int)
            if v <= 0 or v > 1 << 31:
                raise ModelError(f"{label}: metadata {arch}.{key} = {v} is out of range")
            return int(v)

        n_layers = positive("block_count")
        d_model = positive("embedding_length")
        n_heads = positive("attention.head_count")
        d_ff = positive("feed_forward_length")
        context_length = positive("context_length")
        n_kv_heads = int(g.optional(f"{arch}.attention.head_count_kv", int, n_heads))
        if n_kv_heads <= 0 or n_heads % n_kv_heads:
            raise ModelError(f"{label}: {n_kv_heads} KV heads do not divide {n_heads} query heads")
        if d_model % n_heads:
            raise ModelError(f"{label}: {n_heads} heads do not divide the model width {d_model}")
        head_dim = d_model // n_heads
        if g.optional(f"{arch}.attention.key_length", int, head_dim) != head_dim:
            raise ModelError(f"{label}: attention.key_length {g.metadata[f'{arch}.attention.key_length']} "
                             f"differs from d_model / heads = {head_dim}; not supported")
        rope_dim = int(g.optional(f"{arch}.rope.dimension_count", int, head_dim))
        if rope_dim != head_dim:
            raise ModelError(f"{label}: partial RoPE ({rope_dim} of {head_dim} dims) is not supported")
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
        rope_base = float(g.optional(f"{arch}.rope.freq_base", float, 10000.0))
        rms_eps = float(g.optional(f"{arch}.attention.layer_norm_rms_epsilon", float, 1e-5))
        if not rope_base > 0 or not rms_eps > 0:
            raise ModelError(f"{label}: rope.freq_base and layer_norm_rms_epsilon must be positive")
        if "token_embd.weight" not in g.tensors:
            raise ModelError(f"{label}: missing tensor token_embd.weight")
        vocab_size = g.tensors["token_embd.weight"].shape[0]
        declared_vocab = g.optional(f"{arch}.vocab_size", int, None)
        if declared_vocab is not None and int(declared_vocab) != vocab_size:
            raise ModelError(f"{label}: {arch}.vocab_size {declared_vocab} differs from token_embd.weight "
                             f"rows {vocab_size}")
        cfg = LlamaConfig(
            architecture=arch, n_layers=n_layers, d_model=d_model, n_heads=n_heads,
            n_kv_heads=n_kv_heads, head_dim=head_dim, d_ff=d_ff, vocab_size=vocab_size,
            context_length=context_length, rope_base=rope_base, rope_dim=rope_dim,
            rope_scaling=rope_scaling, rope_scale=rope_scale, rms_eps=rms_eps,
            tied_output="output.weight" not in g.tensors, name=str(g.optional("general.name", str, g.path.stem)),
        )
        cfg.check_tensors(g)
        return cfg

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        """NumPy-order shapes of every tensor the forward pass reads."""
        kv = self.n_kv_heads * self.head_dim
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
                p + "attn_q.weight": (self.d_model, self.d_model),
                p + "attn_k.weight": (kv, self.d_model),
                p + "attn_v.weight": (kv, self.d_model),
                p + "attn_output.weight": (self.d_model, self.d_model),
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
            if info.shape != shape:
                raise ModelError(f"{g.path}: tensor {name} has shape {list(info.shape)}, "
                                 f"expected {list(shape)} from the metadata")
            if len(shape) == 1 and info.is_quantized:
                raise ModelError(f"{g.path}: tensor {name} has type {info.type_name}; vectors must be "
                                 "F32, F16 or BF16")
