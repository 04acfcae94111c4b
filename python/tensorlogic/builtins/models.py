"""TL builtins for models and text: load_model, get_tensor, load_tokenizer, tokenize, detokenize,
apply_chat_template, kv_cache (a KVCache sized to the model), causal_attention, token_sampler.

Invariants: quantized weights are uploaded byte for byte (`_core.from_quantized`), never
dequantized, unless the program asks for `load_model_f32`/`load_model_f16`; a model's device
tensors are referenced only by its `ModelValue` (and whatever TL variables took them), so
`model.close()` releases them.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..models.errors import ModelError
from .convert import BuiltinArgError, Tensor, core, to_bool, to_float, to_int, to_str, type_name
from .kvcache import KVCache
from .memory import track_open
from .dtypes import dtype_of
from .registry import TLObject, builtin
from .symbolic import Symbolic

# Files at least this large show a progress bar while uploading (when stderr is a terminal).
PROGRESS_MIN_BYTES = 256 << 20

def _model_error(e: ModelError) -> BuiltinArgError:
    return BuiltinArgError(str(e))


# ---------------------------------------------------------------------------------- values


class TensorTree(TLObject):
    """Tensors addressed by dotted GGUF names: `model.blk[3].attn_q.weight`, `model.token_embd.weight`.
    A node maps one name part to a tensor, a subtree, or (for `blk`) a list of subtrees."""

    tl_type_name = "model tensors"

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.children: dict[str, Any] = {}

    def tl_get_field(self, name: str) -> Any:
        try:
            return self.children[name]
        except KeyError:
            if not self.children:
                raise BuiltinArgError(f"the model of {self.prefix.rstrip('.')} is closed") from None
            raise AttributeError(name) from None

    def clear(self) -> None:
        for child in self.children.values():
            for node in (child if isinstance(child, list) else [child]):
                if isinstance(node, TensorTree):
                    node.clear()
        self.children.clear()

    def __repr__(self) -> str:
        return f"<model tensors {self.prefix.rstrip('.')}: {', '.join(self.children)}>"


def _build_tree(tensors: dict[str, Any]) -> TensorTree:
    """The nested view of `tensors`; numbered parts (`blk.0`, `blk.1`) become a list."""
    root = TensorTree("")
    for name, tensor in tensors.items():
        node = root
        parts = name.split(".")
        for depth, part in enumerate(parts[:-1]):
            nxt = node.children.get(part)
            if nxt is None:
                nxt = node.children[part] = TensorTree(".".join(parts[:depth + 1]) + ".")
            if not isinstance(nxt, TensorTree):
                break  # a tensor and a subtree share a name: reachable through get_tensor only
            node = nxt
        else:
            node.children.setdefault(parts[-1], tensor)
    _number_lists(root)
    return root


def _number_lists(node: TensorTree) -> None:
    for key, child in list(node.children.items()):
        if not isinstance(child, TensorTree):
            continue
        _number_lists(child)
        parts = list(child.children)
        if parts and all(p.isdigit() for p in parts) and sorted(map(int, parts)) == list(range(len(parts))):
            node.children[key] = [child.children[str(i)] for i in range(len(parts))]


class ConfigValue(TLObject):
    """`model.config`: the hyperparameters read from `{arch}.*` metadata."""

    tl_type_name = "model config"

    def __init__(self, values: dict[str, Any]):
        self._values = values

    def tl_get_field(self, name: str) -> Any:
        if name in self._values:
            return self._values[name]
        raise AttributeError(name)

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)


class ModelValue(TLObject):
    """A loaded GGUF model: its device tensors, `config`, metadata and (lazily) its tokenizer."""

    tl_type_name = "model"

    def __init__(self, path: Path, weight_mode: str = "native", progress: bool | None = None):
        from ..models.gguf_file import GGUFFile
        from ..models.model_config import model_config

        started = time.perf_counter()
        self.path = Path(path)
        self.weight_mode = weight_mode
        with GGUFFile(self.path) as g:
            self.metadata = g.metadata
            self.cfg = model_config(g)
            if weight_mode == "native":
                g.check_supported()
            self.tensors: dict[str, Any] | None
            self.tensors, self.fused_groups = _upload_all(g, weight_mode, progress, self.cfg.n_layers)
            self.file_size = g.file_size
        values = self.cfg.as_dict()
        values.update(path=str(self.path), file_size=self.file_size)
        self.config = ConfigValue(values)
        self._tree = _build_tree(self.tensors)
        self._tokenizer = None
        self.load_seconds = time.perf_counter() - started
        track_open(self)

    def release_device_memory(self) -> None:
        self.close()

    def _live(self) -> dict[str, Any]:
        if self.tensors is None:
            raise BuiltinArgError(f"model {self.path.name} is closed")
        return self.tensors

    def get_tensor(self, name: str) -> Any:
        tensors = self._live()
        if name not in tensors:
            if name == "output.weight" and self.cfg.tied_output:
                return tensors["token_embd.weight"]
            raise BuiltinArgError(f"model {self.path.name} has no tensor {name!r}")
        return tensors[name]

    def tokenizer(self):
        if self._tokenizer is None:
            self._tokenizer = TokenizerValue.from_metadata(self.metadata, str(self.path))
        return self._tokenizer

    def close(self) -> None:
        """Release the model's device tensors (those TL variables still hold stay alive)."""
        self.tensors = None
        self._tree.clear()

    def tl_get_field(self, name: str) -> Any:
        if name == "config":
            return self.config
        if name == "path":
            return str(self.path)
        if name == "name":
            return self.cfg.name
        if name == "closed":
            return self.tensors is None
        if name == "fused_qkv":
            return "attn_qkv" in self.fused_groups
        if name == "fused_gate_up":
            return "ffn_gate_up" in self.fused_groups
        self._live()
        return self._tree.tl_get_field(name)

    def tl_call_method(self, name: str, args: list[Any]) -> Any:
        if name == "close" and not args:
            self.close()
            return None
        if name == "get_tensor" and len(args) == 1:
            return self.get_tensor(to_str(args[0], "tensor name"))
        if name == "has_tensor" and len(args) == 1:
            return to_str(args[0], "tensor name") in self._live()
        if name == "tensor_names" and not args:
            return list(self._live())
        if name == "metadata" and len(args) == 1:
            return _tl_value(self.metadata.get(to_str(args[0], "metadata key")))
        if name == "tokenizer" and not args:
            return self.tokenizer()
        raise AttributeError(name)

    def __repr__(self) -> str:
        state = "closed" if self.tensors is None else f"{len(self.tensors)} tensors"
        return f"<model {self.cfg.name}: {self.cfg.n_layers} layers, d_model {self.cfg.d_model}, {state}>"


def _tl_value(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v


# Weights one linear can compute together: uploaded as one matrix (rows stacked), the parts
# stay reachable under their own names as row views of it (no second copy).
FUSED_GROUPS = {"attn_qkv": ("attn_q", "attn_k", "attn_v"), "ffn_gate_up": ("ffn_gate", "ffn_up")}


def _fusable_groups(g, n_layers: int, weight_mode: str) -> list[str]:
    """The FUSED_GROUPS every layer can fuse: all parts 2-D, of one storage type and row length.
    TL_FUSED_WEIGHTS=0 turns fusing off (to compare, or to debug)."""
    if os.environ.get("TL_FUSED_WEIGHTS", "1") == "0":
        return []
    out = []
    for fused, parts in FUSED_GROUPS.items():
        ok = True
        for i in range(n_layers):
            infos = [g.tensors.get(f"blk.{i}.{p}.weight") for p in parts]
            if any(t is None or len(t.ggml_shape) != 2 for t in infos) \
                    or f"blk.{i}.{fused}.weight" in g.tensors \
                    or len({t.ggml_shape[0] for t in infos}) != 1 \
                    or (weight_mode == "native" and len({t.ggml_type for t in infos}) != 1):
                ok = False
                break
        if ok:
            out.append(fused)
    return out


def _upload_all(g, weight_mode: str, progress: bool | None, n_layers: int) -> tuple[dict[str, Any], list[str]]:
    infos = list(g.tensors.values())
    total = sum(t.nbytes for t in infos)
    show = progress if progress is not None else (total >= PROGRESS_MIN_BYTES and sys.stderr.isatty())
    bar = None
    if show:
        from tqdm import tqdm

        bar = tqdm(total=total, desc=f"loading {g.path.name}", unit="B", unit_scale=True,
                   unit_divisor=1024, file=sys.stderr, leave=False)
    fused_groups = _fusable_groups(g, n_layers, weight_mode)
    part_of = {f"blk.{i}.{p}.weight": (i, fused) for fused in fused_groups
               for i in range(n_layers) for p in FUSED_GROUPS[fused]}
    tensors: dict[str, Any] = {}
    try:
        for info in infos:
            if info.name in part_of:
                i, fused = part_of[info.name]
                if f"blk.{i}.{fused}.weight" not in tensors:
                    _upload_fused(g, tensors, i, fused, weight_mode)
            else:
                tensors[info.name] = _upload(g, info, weight_mode)
                g.release_pages(info.name)
            if bar is not None:
                bar.update(info.nbytes)
    finally:
        if bar is not None:
            bar.close()
    return tensors, fused_groups


def _upload_fused(g, tensors: dict[str, Any], layer: int, fused: str, weight_mode: str) -> None:
    names = [f"blk.{layer}.{p}.weight" for p in FUSED_GROUPS[fused]]
    infos = [g.tensors[n] for n in names]
    first = infos[0]
    if weight_mode == "native" and first.is_quantized:
        stacked = np.concatenate([g.tensor_bytes(n) for n in names], axis=0)
        rows = sum(t.matrix_shape[0] for t in infos)
        whole = core.from_quantized(stacked, first.dtype, [rows, first.matrix_shape[1]])
    else:
        parts = [_host_floats(g, t, weight_mode) for t in infos]
        dtype = "bf16" if weight_mode == "native" and first.type_name == "BF16" else None
        stacked = np.concatenate([p[0] for p in parts], axis=0)
        whole = core.from_numpy(stacked, dtype) if dtype else core.from_numpy(stacked)
    tensors[f"blk.{layer}.{fused}.weight"] = whole
    start = 0
    for name, info in zip(names, infos):
        rows = info.shape[0]
        tensors[name] = whole[start:start + rows]
        start += rows
        g.release_pages(name)


def _host_floats(g, info, weight_mode: str) -> tuple[np.ndarray, str | None]:
    """A float tensor's host values as they are uploaded (BF16 widened to f32 bits, exactly)."""
    from gguf import GGMLQuantizationType as Q

    if weight_mode == "f32":
        return np.ascontiguousarray(g.dequantize(info.name), dtype=np.float32), None
    if weight_mode == "f16":
        return np.ascontiguousarray(g.dequantize(info.name), dtype=np.float16), None
    if info.ggml_type == Q.BF16:
        bits = g.tensor_bytes(info.name).reshape(-1).view("<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(info.shape), "bf16"
    return g.tensor_array(info.name), None


def _upload(g, info, weight_mode: str) -> Any:
    if weight_mode == "native" and info.is_quantized:
        rows, cols = info.matrix_shape
        return core.from_quantized(g.tensor_bytes(info.name), info.dtype, [rows, cols])
    values, dtype = _host_floats(g, info, weight_mode)
    return core.from_numpy(values, dtype) if dtype else core.from_numpy(values)


def resolve_model_path(path: Any) -> Path:
    """A model argument as a file: an existing path, or a known model name fetched into the cache."""
    from ..models.fetch import resolve_model

    return resolve_model(to_str(path, "model path"), progress=sys.stderr.isatty())


def load_model_value(path: Any, weight_mode: str = "native", progress: bool | None = None) -> ModelValue:
    try:
        return ModelValue(resolve_model_path(path), weight_mode, progress)
    except ModelError as e:
        raise _model_error(e) from None


@builtin("load_model", "load_model(path)", "load a GGUF model (weights stay quantized on the device)",
         min_args=1, max_args=1, category="models")
def _load_model(path):
    return load_model_value(path)


@builtin("load_model_f32", "load_model_f32(path)", "load a GGUF model with every weight dequantized to f32",
         min_args=1, max_args=1, category="models")
def _load_model_f32(path):
    return load_model_value(path, "f32")


@builtin("load_model_f16", "load_model_f16(path)", "load a GGUF model with every weight converted to f16",
         min_args=1, max_args=1, category="models")
def _load_model_f16(path):
    return load_model_value(path, "f16")


def _as_model(v: Any, what: str = "model") -> ModelValue:
    if not isinstance(v, ModelValue):
        raise BuiltinArgError(f"{what} must be a model (from load_model), got {type_name(v)}")
    return v


@builtin("get_tensor", "get_tensor(model, name)", "a model's tensor by its GGUF name",
         min_args=2, max_args=2, category="models")
def _get_tensor(model, name):
    return _as_model(model).get_tensor(to_str(name, "tensor name"))


# ---------------------------------------------------------------------------------- tokenizer


class TokenizerValue(TLObject):
    """A tokenizer plus the model's chat template."""

    tl_type_name = "tokenizer"

    def __init__(self, tok, template, label: str):
        self.tok = tok
        self.template = template
        self.label = label

    @staticmethod
    def from_metadata(metadata: dict, label: str) -> "TokenizerValue":
        from ..models.chat_template import template_for
        from ..models.tokenizer import Tokenizer

        try:
            tok = Tokenizer.from_metadata(metadata, label)
            template = template_for(tok, metadata.get("tokenizer.chat_template"), label)
        except ModelError as e:
            raise _model_error(e) from None
        return TokenizerValue(tok, template, label)

    def tokenize(self, text: Any, add_special: Any = True, parse_special: Any = True) -> list[int]:
        try:
            return self.tok.encode(to_str(text, "text"), add_special=to_bool(add_special, "add_special"),
                                   parse_special=to_bool(parse_special, "parse_special"))
        except ModelError as e:
            raise _model_error(e) from None

    def detokenize(self, ids: Any, skip_special: Any = False) -> str:
        try:
            return self.tok.decode(token_ids(ids), skip_special=to_bool(skip_special, "skip_special"))
        except ModelError as e:
            raise _model_error(e) from None

    def apply_chat_template(self, messages: Any, add_generation_prompt: Any = True) -> str:
        try:
            return self.template.render(_messages(messages), to_bool(add_generation_prompt, "add_generation_prompt"))
        except ModelError as e:
            raise _model_error(e) from None

    def tl_get_field(self, name: str) -> Any:
        tok = self.tok
        fields = {"bos_id": tok.bos_id, "eos_id": tok.eos_id, "vocab_size": tok.vocab_size,
                  "eog_ids": sorted(tok.eog_ids), "kind": tok.kind, "add_bos": tok.add_bos,
                  "has_chat_template": self.template.from_model}
        if name in fields:
            return fields[name]
        raise AttributeError(name)

    def tl_call_method(self, name: str, args: list[Any]) -> Any:
        if name == "tokenize" and 1 <= len(args) <= 3:
            return self.tokenize(*args)
        if name == "detokenize" and 1 <= len(args) <= 2:
            return self.detokenize(*args)
        if name == "detokenize_single" and 1 <= len(args) <= 2:
            return self.detokenize([to_int(args[0], "token id")], *args[1:])
        if name == "apply_chat_template" and 1 <= len(args) <= 2:
            return self.apply_chat_template(*args)
        if name == "is_eog" and len(args) == 1:
            return to_int(args[0], "token id") in self.tok.eog_ids
        if name == "token_id" and len(args) == 1:
            tid = self.tok.token_id(to_str(args[0], "token text"))
            return -1 if tid is None else tid
        raise AttributeError(name)

    def __repr__(self) -> str:
        return f"<tokenizer {self.tok.kind}, {self.tok.vocab_size} tokens>"


def token_ids(ids: Any) -> list[int]:
    """Token ids from an int, an int array or an integer tensor."""
    if isinstance(ids, bool):
        raise BuiltinArgError("token ids must be integers, got bool")
    if isinstance(ids, (int, float)):
        return [to_int(ids, "token id")]
    if isinstance(ids, list):
        return [to_int(i, "token id") for i in ids]
    if isinstance(ids, Tensor):
        arr = ids.numpy()
        if arr.dtype.kind == "f" and not np.all(arr == np.round(arr)):
            raise BuiltinArgError(f"token ids must be integers, got {type_name(ids)}")
        return [int(x) for x in arr.reshape(-1)]
    raise BuiltinArgError(f"token ids must be an int array or tensor, got {type_name(ids)}")


def _messages(messages: Any) -> list:
    if not isinstance(messages, list):
        raise BuiltinArgError(f"messages must be an array of [role, content] pairs, got {type_name(messages)}")
    out = []
    for m in messages:
        fields = getattr(m, "fields", None)  # a TL struct value with role/content fields
        if isinstance(fields, dict) and "role" in fields and "content" in fields:
            out.append((fields["role"], fields["content"]))
        else:
            out.append(m)
    return out


def _as_tokenizer(v: Any) -> TokenizerValue:
    if isinstance(v, TokenizerValue):
        return v
    if isinstance(v, ModelValue):
        return v.tokenizer()
    raise BuiltinArgError(f"expected a tokenizer (from load_tokenizer), got {type_name(v)}")


def load_tokenizer_value(source: Any) -> TokenizerValue:
    if isinstance(source, ModelValue):
        return source.tokenizer()
    if isinstance(source, TokenizerValue):
        return source
    try:
        path = resolve_model_path(source)
        if path.suffix == ".json":
            from ..models.json_tokenizer import json_tokenizer

            return TokenizerValue(*json_tokenizer(path), str(path))
        from ..models.gguf_file import GGUFFile

        with GGUFFile(path) as g:
            return TokenizerValue.from_metadata(g.metadata, str(path))
    except ModelError as e:
        raise _model_error(e) from None


@builtin("load_tokenizer", "load_tokenizer(model_or_path)",
         "the tokenizer of a model, a .gguf file or a tokenizer.json", min_args=1, max_args=1, category="models")
def _load_tokenizer(source):
    return load_tokenizer_value(source)


@builtin("tokenize", "tokenize(tok, text, add_special=true, parse_special=true)",
         "token ids of text; add_special adds BOS/EOS where the model wants them, parse_special "
         "recognises special tokens written in the text", min_args=2, max_args=4, category="models")
def _tokenize(tok, text, add_special=True, parse_special=True):
    return _as_tokenizer(tok).tokenize(text, add_special, parse_special)


@builtin("detokenize", "detokenize(tok, ids, skip_special=false)", "text of token ids",
         min_args=2, max_args=3, category="models")
def _detokenize(tok, ids, skip_special=False):
    return _as_tokenizer(tok).detokenize(ids, skip_special)


@builtin("detokenize_single", "detokenize_single(tok, id, skip_special=false)", "text of one token id",
         min_args=2, max_args=3, category="models")
def _detokenize_single(tok, tid, skip_special=False):
    return _as_tokenizer(tok).detokenize([to_int(tid, "token id")], skip_special)


@builtin("apply_chat_template", "apply_chat_template(tok, messages, add_generation_prompt=true)",
         "render [[role, content], ...] with the model's chat template", min_args=2, max_args=3, category="models")
def _apply_chat_template(tok, messages, add_generation_prompt=True):
    return _as_tokenizer(tok).apply_chat_template(messages, add_generation_prompt)


class TextStreamValue(TLObject):
    """Prints generated tokens as text while they are generated (`generate`'s `stream`):
    a piece is written once its UTF-8 characters are complete; special tokens print nothing."""

    tl_type_name = "text stream"

    def __init__(self, ctx, tok: TokenizerValue):
        self.ctx = ctx
        self.decoder = tok.tok.stream_decoder(skip_special=True)
        self.ids: list[int] = []

    def _write(self, text: str) -> None:
        if text:
            self.ctx.write(text)
            flush = getattr(self.ctx.out, "flush", None)
            if flush is not None:
                flush()

    def tl_get_field(self, name: str) -> Any:
        if name == "ids":
            return list(self.ids)
        raise AttributeError(name)

    def tl_call_method(self, name: str, args: list[Any]) -> Any:
        if name == "push" and len(args) == 1:
            tid = to_int(args[0], "token id")
            self.ids.append(tid)
            try:
                self._write(self.decoder.push(tid))
            except ModelError as e:
                raise _model_error(e) from None
            return None
        if name == "prompt_done" and len(args) == 1:
            return None
        if name == "finish" and not args:
            self._write(self.decoder.flush())
            return None
        raise AttributeError(name)


@builtin("text_stream", "text_stream(tok)",
         "a stream for generate (stdlib/generate.tl) that prints each token's text as soon as it is complete",
         min_args=1, max_args=1, needs_ctx=True, category="models")
def _text_stream(ctx, tok):
    return TextStreamValue(ctx, _as_tokenizer(tok))


# ---------------------------------------------------------------------------------- KV cache


@builtin("kv_cache", "kv_cache(model, capacity, dtype=\"f32\")",
         "a KV cache for the model, preallocated to `capacity` positions and written in place",
         min_args=2, max_args=3, category="models")
def _kv_cache(model, capacity, dtype="f32"):
    return _llama_kv_cache(model, capacity, dtype)


@builtin("llama_kv_cache", "llama_kv_cache(model, capacity, dtype=\"f32\")",
         "kv_cache under its earlier name (any architecture)", min_args=2, max_args=3, category="models")
def _llama_kv_cache(model, capacity, dtype="f32"):
    cfg = _as_model(model).cfg
    cap = to_int(capacity, "capacity")
    if not 0 < cap <= cfg.context_length:
        raise BuiltinArgError(f"kv_cache: capacity {cap} must be in 1..{cfg.context_length} "
                              "(the model's context length)")
    return KVCache(cfg.n_layers, cap, cfg.n_kv_heads, cfg.head_dim, dtype_of(dtype))


@builtin("rope_kv_write", "rope_kv_write(cache, layer, pos, q, k, v, [base], [neox])",
         "RoPE of q and k at positions pos.. plus the write of rope(k) and v into the KV cache, as one kernel; "
         "returns rope(q) [seq, heads, head_dim] (q, k, v: [seq, heads, head_dim] or [seq, heads * head_dim])",
         min_args=6, max_args=8, category="models")
def _rope_kv_write(cache, layer, pos, q, k, v, base=10000.0, neox=False):
    if not isinstance(cache, KVCache):
        raise BuiltinArgError(f"cache must be a KV cache (llama_kv_cache), got {type_name(cache)}")
    return cache.write_rope(layer, pos, q, k, v, base, neox)


@builtin("cache_attention", "cache_attention(q, cache, layer, pos, scale=1/sqrt(head_dim), window=0, softcap=0)",
         "causal_attention of q [n, heads, d] at positions pos.. over what a KV cache layer holds at "
         "positions 0..pos+n-1 (the last `window` of them when window > 0). In a compiled decode step "
         "the position follows each replay, sliding window included",
         min_args=4, max_args=7, category="models")
def _cache_attention(q, cache, layer, pos, scale=None, window=0, softcap=0.0):
    if not isinstance(cache, KVCache):
        raise BuiltinArgError(f"cache must be a KV cache (kv_cache), got {type_name(cache)}")
    w = to_int(window, "window")
    if not isinstance(q, Tensor) or q.ndim != 3:
        raise BuiltinArgError(f"q must be a tensor [seq, heads, head_dim], got {type_name(q)}")
    n = q.shape[0]
    if not (pos.__class__ is Symbolic and pos.live and n == 1 and w > 0):
        end = pos + n
        return _causal_attention(q, cache.keys(layer, end), cache.values(layer, end), pos, scale, window, softcap)
    # one query in a compiled step with a sliding window: the views follow the position
    k, v, offset = cache.decode_window(layer, pos, w)
    s = None if scale is None else to_float(scale, "scale")
    return core.attention(q, k, v, scale=s, causal=True, pos_offset=offset, softcap=_softcap(softcap))


def _softcap(v) -> float:
    c = to_float(v, "softcap")
    if not c >= 0.0 or c == float("inf"):
        raise BuiltinArgError(f"softcap must be finite and >= 0 (0: none), got {c}")
    return c


@builtin("causal_attention", "causal_attention(q, k, v, pos_offset=0, scale=1/sqrt(head_dim), window=0, softcap=0)",
         "softmax(q·kᵀ·scale + causal mask)·v with q [n, heads, d] at positions pos_offset.., "
         "k/v [t, kv_heads, d] (grouped-query when kv_heads divides heads); window > 0 is sliding-window "
         "attention: the query at position p sees only the keys at p-window+1..p; softcap > 0 caps each "
         "scaled score at softcap·tanh(score / softcap) before the mask (Gemma 2)",
         min_args=3, max_args=7, category="models")
def _causal_attention(q, k, v, pos_offset=0, scale=None, window=0, softcap=0.0):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.ndim != 3:
            raise BuiltinArgError(f"{name} must be a tensor [seq, heads, head_dim], got {type_name(t)}")
    s = None if scale is None else to_float(scale, "scale")
    w = to_int(window, "window")
    cap = _softcap(softcap)
    if w < 0:
        raise BuiltinArgError(f"window must be >= 0 (0: no window), got {w}")
    if w == 0 and pos_offset.__class__ is Symbolic:  # a compiled step: the offset follows the replay
        return core.attention(q, k, v, scale=s, causal=True, pos_offset=pos_offset, softcap=cap)
    pos = to_int(pos_offset, "pos_offset")  # a window's slice depends on the value: no replay
    if w == 0 or pos < 0 or k.shape[0] != v.shape[0]:
        return core.attention(q, k, v, scale=s, causal=True, pos_offset=pos, softcap=cap)
    # Keys before `first` are outside every query's window: leave them out (a view, no copy). The
    # first query (position pos) then sees all it may; later ones of a long block also need the
    # far edge of their window masked.
    first = min(max(0, pos - w + 1), k.shape[0])
    if first:
        k, v, pos = k[first:], v[first:], pos - first
    n, t = q.shape[0], k.shape[0]
    mask = None
    if pos + n - 1 >= w:
        too_old = core.causal_mask(n, t, pos - w)  # 0 exactly where key <= query - window
        mask = core.where(core.eq(too_old, 0.0), float("-inf"), 0.0)
    return core.attention(q, k, v, mask, s, causal=True, pos_offset=pos, softcap=cap)
