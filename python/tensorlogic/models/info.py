"""A summary of a GGUF model file for `tl model info`: what it is, without loading weights."""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from .errors import ModelError
from .gguf_file import GGUFFile
from .model_config import model_config


def model_info(path: str | Path) -> dict[str, Any]:
    with GGUFFile(path) as g:
        info: dict[str, Any] = {
            "path": str(g.path),
            "file_size": g.file_size,
            "gguf_version": g.version,
            "name": _text(g.get("general.name")),
            "architecture": _text(g.get("general.architecture")),
            "tensor_count": len(g.tensors),
            "tensor_types": dict(Counter(t.type_name for t in g.tensors.values()).most_common()),
            "parameters": sum(t.n_elements for t in g.tensors.values()),
            "parameters_by_type": _parameters_by_type(g),
            "tensor_bytes": sum(t.nbytes for t in g.tensors.values()),
            "unsupported_tensor_types": sorted({t.type_name for t in g.unsupported_tensors()}),
            "tokenizer": _text(g.get("tokenizer.ggml.model")),
            "tokenizer_pre": _text(g.get("tokenizer.ggml.pre")),
            "vocab_size": _length(g.get("tokenizer.ggml.tokens")),
            "bos_token_id": g.get("tokenizer.ggml.bos_token_id"),
            "eos_token_id": g.get("tokenizer.ggml.eos_token_id"),
            "chat_template": isinstance(g.get("tokenizer.chat_template"), str),
        }
        try:
            info["config"] = model_config(g).as_dict()
            info["config_error"] = None
        except ModelError as e:
            info["config"] = None
            info["config_error"] = str(e)
        return info


def _parameters_by_type(g: GGUFFile) -> dict[str, int]:
    counts: Counter = Counter()
    for t in g.tensors.values():
        counts[t.type_name] += t.n_elements
    return dict(counts.most_common())


def format_count(n: int) -> str:
    """134515008 -> '134.5M'."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def _percent(part: int, total: int) -> str:
    p = 100 * part / total
    return "<0.1%" if 0 < p < 0.05 else f"{p:.1f}%"


def _text(value: Any) -> str | None:
    """A string metadata value, or None when it is absent or of another type."""
    return value if isinstance(value, str) else None


def _length(value: Any) -> int:
    return len(value) if isinstance(value, (list, tuple)) or hasattr(value, "shape") else 0


def format_info(info: dict[str, Any]) -> str:
    mib = info["file_size"] / (1 << 20)
    lines = [
        f"file:          {info['path']} ({mib:.1f} MiB, GGUF v{info['gguf_version']})",
        f"name:          {info['name'] or '?'}",
        f"architecture:  {info['architecture'] or '?'}",
    ]
    cfg = info["config"]
    if cfg:
        lines += [
            f"layers:        {cfg['n_layers']}",
            f"d_model:       {cfg['d_model']}",
            f"heads:         {cfg['n_heads']} query, {cfg['n_kv_heads']} key/value (head dim {cfg['head_dim']})",
            f"ffn:           {cfg['d_ff']}",
            f"vocab:         {cfg['vocab_size']}",
            f"context:       {cfg['context_length']}",
            f"rope base:     {cfg['rope_base']:g}" + _rope_note(cfg),
            f"rms eps:       {cfg['rms_eps']:g}",
            f"output:        {'tied to token_embd.weight' if cfg['tied_output'] else 'output.weight'}",
        ]
        settings = _decoder_settings(cfg)
        if settings:
            lines.insert(-3, f"settings:      {settings}")
        if "sliding_window_pattern" in cfg:
            base = f" (rope base {cfg['rope_local_base']:g})" if "rope_local_base" in cfg else ""
            lines.insert(-3, f"attention:     every {_ordinal(cfg['sliding_window_pattern'])} layer global, the others "
                             f"over the last {cfg['sliding_window']} positions{base}")
    else:
        lines.append(f"not loadable:  {info['config_error']}")
    types = ", ".join(f"{k} {v}" for k, v in info["tensor_types"].items())
    lines.append(f"tensors:       {info['tensor_count']} ({types})")
    total = info["parameters"]
    if total:
        mix = ", ".join(f"{k} {_percent(v, total)}" for k, v in info["parameters_by_type"].items())
        bits = 8 * info["tensor_bytes"] / total
        lines.append(f"parameters:    {format_count(total)} ({total:,})")
        lines.append(f"quantization:  {mix} of the parameters; {bits:.2f} bits per parameter")
    if info["unsupported_tensor_types"]:
        lines.append(f"unsupported:   {', '.join(info['unsupported_tensor_types'])}")
    tok = info["tokenizer"] or "none"
    if info["tokenizer_pre"]:
        tok += f" (pre: {info['tokenizer_pre']})"
    lines.append(f"tokenizer:     {tok}, {info['vocab_size']} tokens, bos {info['bos_token_id']}, "
                 f"eos {info['eos_token_id']}")
    template = "yes" if info["chat_template"] else "no (tl chat and tl generate complete raw text)"
    lines.append(f"chat template: {template}")
    return "\n".join(lines)


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _decoder_settings(cfg: dict) -> str:
    """What sets a llama or decoder.tl family apart (decoder_config.DecoderConfig), in words."""
    out = []
    if cfg.get("attn_softcap"):
        out.append(f"attention soft-capping {cfg['attn_softcap']:g}")
    if cfg.get("final_logit_softcap") and "attn_softcap" in cfg:
        out.append(f"final logit soft-capping {cfg['final_logit_softcap']:g}")
    if cfg.get("sliding_window") and "sliding_window_pattern" not in cfg:
        out.append(f"sliding window {cfg['sliding_window']} on every layer")
    if cfg.get("n_experts"):
        detail = [f"expert FFN {cfg['d_ff_expert']}"]
        if cfg["d_ff_shared"]:
            detail.append(f"shared expert {cfg['d_ff_shared']}")
        if cfg["expert_weights_norm"]:
            detail.append("weights renormalised")
        out.append(f"mixture of {cfg['n_experts']} experts, {cfg['n_experts_used']} used per token "
                   f"({', '.join(detail)})")
    if "rope_neox" not in cfg:
        return ", ".join(out)
    out.append("RoPE on halves (neox)" if cfg["rope_neox"] else "RoPE on adjacent pairs")
    if cfg["rope_dim"] != cfg["head_dim"]:
        out.append(f"partial RoPE ({cfg['rope_dim']} of {cfg['head_dim']} dims)")
    if cfg["rope_factors"]:
        out.append(f"LongRoPE factors (original context {cfg['rope_orig_context']}, "
                   f"attention factor {cfg['rope_attn_factor']:.4g})")
    if cfg["no_rope_step"]:
        out.append(f"no RoPE on every {_ordinal(cfg['no_rope_step'])} layer")
    if cfg["qkv_bias"]:
        out.append("Q/K/V bias")
    if cfg["qk_norm"] != "none":
        out.append("q/k RMSNorm per head" if cfg["qk_norm"] == "head" else "q/k RMSNorm over all heads")
    if cfg["norm"] == "layer":
        out.append("LayerNorm with bias")
    if cfg["post_norm"]:
        out.append("norms after attention and FFN")
    if cfg["qkv_in_file"] or cfg["gate_up_in_file"]:
        out.append("fused QKV and gate-up in the file")
    for key, label in (("embed_scale", "embedding x"), ("residual_scale", "residual x"), ("logit_scale", "logits /")):
        if cfg[key] != 1.0:
            out.append(f"{label}{cfg[key]:g}")
    if abs(cfg["attn_scale"] * cfg["head_dim"] ** 0.5 - 1.0) > 1e-6:
        out.append(f"attention scale {cfg['attn_scale']:g}")
    return ", ".join(out)


def _rope_note(cfg: dict) -> str:
    scaling = cfg.get("rope_scaling", "none")
    if scaling == "linear":
        return f" (linear scaling x{cfg['rope_scale']:g})"
    if scaling == "freqs":
        return " (per-frequency factors)"
    return ""
