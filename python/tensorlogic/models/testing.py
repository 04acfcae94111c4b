"""Tiny GGUF files for tests: random Llama and Gemma 3 models with a byte-level BPE (`gpt2`) or a
SentencePiece (`llama`) tokenizer, weights in any supported storage type.

Everything is deterministic for a given seed, small enough to write in milliseconds, and written
with `gguf.GGUFWriter`, the same library real converters use, so the files exercise the real
loading path. K-quant weights (no quantizer in the `gguf` package) are random blocks whose scale
fields are set to small finite values.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize

SAMPLE_TEXT = (
    "The capital of France is Paris. The capital of Italy is Rome. Hello, world! "
    "TensorLogic runs tensors and logic rules. the quick brown fox jumps over the lazy dog. "
    "Numbers like 12345 and 3.14159 appear too; so do symbols: (a + b) * c = d, x[i] -> y.\n"
    "Tabs\tand\nnew lines, café naïve façade, 你好世界, emoji 😀."
)

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclass
class TinyLlamaSpec:
    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 4
    n_kv_heads: int = 2
    d_ff: int = 128
    context_length: int = 256
    rope_base: float = 10000.0
    rms_eps: float = 1e-5
    tokenizer: str = "gpt2"  # or "llama"
    weight_type: str = "F32"  # storage type of the 2-D weights, a GGMLQuantizationType name
    embedding_type: str | None = None  # defaults to weight_type
    tied_output: bool = True
    chat_template: str | None = CHATML
    bpe_merges: int = 200
    spm_pieces: int = 200
    seed: int = 0
    weight_scale: float = 0.5
    rope_freqs: bool = False  # add rope_freqs.weight (Llama 3.1 per-frequency divisors)
    rope_linear_scale: float | None = None  # rope.scaling.type = linear with this factor
    add_space_prefix: bool = True  # SentencePiece only
    extra_metadata: dict = field(default_factory=dict)


@dataclass
class TinyGemma3Spec(TinyLlamaSpec):
    """A Gemma 3 model: 6 layers by default, so that layer 5 is global and 0..4 are local."""

    n_layers: int = 6
    head_dim: int = 32  # not d_model / n_heads: Gemma's heads are wider than that
    rope_base: float = 1000000.0
    rms_eps: float = 1e-6
    tokenizer: str = "llama"
    add_space_prefix: bool = False
    chat_template: str | None = None
    sliding_window: int = 6
    sliding_window_pattern: int | None = None  # written only when set (gemma3 files leave it out)
    rope_local_base: float | None = None  # written (rope.freq_base_swa) only when set
    final_logit_softcap: float | None = None
    weight_types: dict = field(default_factory=dict)  # storage type per tensor kind, e.g. {"attn_v": "Q8_0"}


# Byte offsets of the f16 scale fields in one block of each quantized format TL reads.
QUANT_SCALE_OFFSETS = {"q4_0": (0,), "q4_1": (0, 2), "q5_0": (0,), "q5_1": (0, 2), "q8_0": (0,),
                       "q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,)}


def quant_block_elems(qtype: str) -> int:
    """Elements per block of a quantized format named as in QUANT_SCALE_OFFSETS."""
    return GGML_QUANT_SIZES[GGMLQuantizationType[qtype.upper()]][0]


def random_quant_blocks(qtype: str, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Raw blocks [rows, bytes] of a `qtype` weight [rows, cols] for kernel tests: random bytes (every
    bit pattern of the quants) with random but sane f16 scales in [0.002, 0.05]."""
    block_elems, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType[qtype.upper()]]
    blocks = rng.integers(0, 256, (rows * cols // block_elems, block_bytes), dtype=np.uint8)
    for off in QUANT_SCALE_OFFSETS[qtype]:
        scales = rng.uniform(0.002, 0.05, blocks.shape[0]).astype(np.float16)
        blocks[:, off:off + 2] = scales.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, cols // block_elems * block_bytes)


def random_quantized(values: np.ndarray, qtype: GGMLQuantizationType, rng: np.random.Generator) -> np.ndarray:
    """Stored bytes of `values` [rows, cols] in `qtype`: quantized where the `gguf` package can,
    random blocks with sane scales for the K-quants. F32/F16 are returned as typed arrays."""
    if qtype == GGMLQuantizationType.F32:
        return values.astype(np.float32)
    if qtype == GGMLQuantizationType.F16:
        return values.astype(np.float16)
    if qtype in (GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q5_K, GGMLQuantizationType.Q6_K):
        rows, cols = values.shape
        block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
        n_blocks = rows * cols // block_elems
        blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
        # scale fields chosen so that typical |weight| ~ std of `values`
        typical = {GGMLQuantizationType.Q4_K: 210.0, GGMLQuantizationType.Q5_K: 450.0,
                   GGMLQuantizationType.Q6_K: 64.0}[qtype]
        scale = float(np.std(values)) / typical

        def f16_field(v: float) -> np.ndarray:
            return np.full(n_blocks, v, dtype=np.float16).view(np.uint8).reshape(n_blocks, 2)

        if qtype == GGMLQuantizationType.Q6_K:
            blocks[:, 208:210] = f16_field(scale)
            blocks[:, 192:208] = rng.integers(-8, 8, size=(n_blocks, 16), dtype=np.int8).view(np.uint8)
        else:
            blocks[:, 0:2] = f16_field(scale)
            blocks[:, 2:4] = f16_field(scale * 7)
        return blocks.reshape(rows, -1)
    return quantize(values.astype(np.float32), qtype)


def _train_bpe(text: str, n_merges: int) -> tuple[list[str], list[str]]:
    """A byte-level BPE vocabulary (all 256 byte symbols, then merged symbols) and its merges."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=256 + n_merges, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text] * 4, trainer)
    data = __import__("json").loads(tok.to_str())
    vocab = data["model"]["vocab"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    return tokens, merges


def _train_spm(text: str, n_pieces: int) -> tuple[list[str], list[float]]:
    """SentencePiece-style pieces with scores: every character of `text` (spaces as ▁), then
    pieces made by merging the most frequent adjacent pair, best first."""
    words = [list("\u2581" + w) for w in text.replace("\n", " ").split(" ") if w]
    chars = sorted({c for w in words for c in w})
    pieces: list[str] = []
    for _ in range(n_pieces):
        counts: dict[tuple[str, str], int] = {}
        for w in words:
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        (a, b), _ = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
        merged = a + b
        pieces.append(merged)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if w[i] == a and w[i + 1] == b:
                    w[i:i + 2] = [merged]
                i += 1
    tokens = pieces + chars
    scores = [-float(i) for i in range(len(tokens))]
    return tokens, scores


def _add_tokenizer(w: GGUFWriter, spec: TinyLlamaSpec) -> list[str]:
    """Write the tokenizer (and chat template, extra metadata) of `spec`; return the vocabulary."""
    if spec.tokenizer == "gpt2":
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        bpe_tokens, merges = _train_bpe(SAMPLE_TEXT, spec.bpe_merges)
        tokens = specials + [t for t in bpe_tokens if t not in specials]
        types = [3] * len(specials) + [1] * (len(tokens) - len(specials))
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("smollm")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_add_bos_token(False)
    elif spec.tokenizer == "llama":
        pieces, scores = _train_spm(SAMPLE_TEXT, spec.spm_pieces)
        tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
        types = [2, 3, 3] + [6] * 256
        all_scores = [0.0, 0.0, 0.0] + [0.0] * 256
        for p, s in zip(pieces, scores):
            if p not in tokens:
                tokens.append(p)
                types.append(1)
                all_scores.append(s)
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_scores(all_scores)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)
        w.add_add_space_prefix(spec.add_space_prefix)
    else:
        raise ValueError(f"tokenizer must be gpt2 or llama, not {spec.tokenizer!r}")
    if spec.chat_template is not None:
        w.add_chat_template(spec.chat_template)
    for k, v in spec.extra_metadata.items():
        w.add_key_value(k, v[0], v[1])
    return tokens


def write_tiny_llama(path: str | Path, spec: TinyLlamaSpec | None = None, **overrides) -> Path:
    """Write a tiny random Llama GGUF to `path` and return the path."""
    spec = spec or TinyLlamaSpec()
    for k, v in overrides.items():
        if not hasattr(spec, k):
            raise TypeError(f"unknown TinyLlamaSpec field {k}")
        setattr(spec, k, v)
    rng = np.random.default_rng(spec.seed)
    path = Path(path)
    w = GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama-test")
    w.add_block_count(spec.n_layers)
    w.add_context_length(spec.context_length)
    w.add_embedding_length(spec.d_model)
    w.add_feed_forward_length(spec.d_ff)
    w.add_head_count(spec.n_heads)
    w.add_head_count_kv(spec.n_kv_heads)
    w.add_rope_freq_base(spec.rope_base)
    w.add_layer_norm_rms_eps(spec.rms_eps)
    w.add_rope_dimension_count(spec.d_model // spec.n_heads)
    if spec.rope_linear_scale is not None:
        w.add_string("llama.rope.scaling.type", "linear")
        w.add_float32("llama.rope.scaling.factor", spec.rope_linear_scale)

    tokens = _add_tokenizer(w, spec)
    vocab = len(tokens)
    d, f, hd = spec.d_model, spec.d_ff, spec.d_model // spec.n_heads
    kv = spec.n_kv_heads * hd
    wtype = GGMLQuantizationType[spec.weight_type]
    etype = GGMLQuantizationType[spec.embedding_type or spec.weight_type]

    def add_matrix(name: str, rows: int, cols: int, qtype: GGMLQuantizationType) -> None:
        values = rng.standard_normal((rows, cols)).astype(np.float32) * (spec.weight_scale / np.sqrt(cols))
        data = random_quantized(values, qtype, rng)
        if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)

    def add_norm(name: str) -> None:
        w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32))

    add_matrix("token_embd.weight", vocab, d, etype)
    for i in range(spec.n_layers):
        p = f"blk.{i}."
        add_norm(p + "attn_norm.weight")
        add_matrix(p + "attn_q.weight", d, d, wtype)
        add_matrix(p + "attn_k.weight", kv, d, wtype)
        add_matrix(p + "attn_v.weight", kv, d, wtype)
        add_matrix(p + "attn_output.weight", d, d, wtype)
        add_norm(p + "ffn_norm.weight")
        add_matrix(p + "ffn_gate.weight", f, d, wtype)
        add_matrix(p + "ffn_up.weight", f, d, wtype)
        add_matrix(p + "ffn_down.weight", d, f, wtype)
    add_norm("output_norm.weight")
    if spec.rope_freqs:
        half = spec.d_model // spec.n_heads // 2
        w.add_tensor("rope_freqs.weight", np.geomspace(1.0, 8.0, half).astype(np.float32))
    if not spec.tied_output:
        add_matrix("output.weight", vocab, d, wtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_tiny_gemma3(path: str | Path, spec: TinyGemma3Spec | None = None, **overrides) -> Path:
    """Write a tiny random Gemma 3 GGUF to `path` and return the path. Norm weights are stored as
    llama.cpp's converter stores them, with Gemma's 1 + w already folded in."""
    spec = spec or TinyGemma3Spec()
    for k, v in overrides.items():
        if not hasattr(spec, k):
            raise TypeError(f"unknown TinyGemma3Spec field {k}")
        setattr(spec, k, v)
    rng = np.random.default_rng(spec.seed)
    path = Path(path)
    w = GGUFWriter(str(path), "gemma3")
    w.add_name("tiny-gemma3-test")
    w.add_block_count(spec.n_layers)
    w.add_context_length(spec.context_length)
    w.add_embedding_length(spec.d_model)
    w.add_feed_forward_length(spec.d_ff)
    w.add_head_count(spec.n_heads)
    w.add_head_count_kv(spec.n_kv_heads)
    w.add_key_length(spec.head_dim)
    w.add_value_length(spec.head_dim)
    w.add_rope_freq_base(spec.rope_base)
    w.add_layer_norm_rms_eps(spec.rms_eps)
    w.add_sliding_window(spec.sliding_window)
    if spec.sliding_window_pattern is not None:
        w.add_uint32("gemma3.attention.sliding_window_pattern", spec.sliding_window_pattern)
    if spec.rope_local_base is not None:
        w.add_float32("gemma3.rope.freq_base_swa", spec.rope_local_base)
    if spec.final_logit_softcap is not None:
        w.add_float32("gemma3.final_logit_softcapping", spec.final_logit_softcap)
    tokens = _add_tokenizer(w, spec)

    vocab = len(tokens)
    d, f, hd = spec.d_model, spec.d_ff, spec.head_dim
    q, kv = spec.n_heads * hd, spec.n_kv_heads * hd

    def add_matrix(name: str, kind: str, rows: int, cols: int) -> None:
        qtype = GGMLQuantizationType[spec.weight_types.get(kind, spec.weight_type)]
        values = rng.standard_normal((rows, cols)).astype(np.float32) * (spec.weight_scale / np.sqrt(cols))
        data = random_quantized(values, qtype, rng)
        if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)

    def add_norm(name: str, n: int) -> None:
        w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32))

    add_matrix("token_embd.weight", "token_embd", vocab, d)
    for i in range(spec.n_layers):
        p = f"blk.{i}."
        add_norm(p + "attn_norm.weight", d)
        add_matrix(p + "attn_q.weight", "attn_q", q, d)
        add_matrix(p + "attn_k.weight", "attn_k", kv, d)
        add_matrix(p + "attn_v.weight", "attn_v", kv, d)
        add_norm(p + "attn_q_norm.weight", hd)
        add_norm(p + "attn_k_norm.weight", hd)
        add_matrix(p + "attn_output.weight", "attn_output", d, q)
        add_norm(p + "post_attention_norm.weight", d)
        add_norm(p + "ffn_norm.weight", d)
        add_matrix(p + "ffn_gate.weight", "ffn_gate", f, d)
        add_matrix(p + "ffn_up.weight", "ffn_up", f, d)
        add_matrix(p + "ffn_down.weight", "ffn_down", d, f)
        add_norm(p + "post_ffw_norm.weight", d)
    add_norm("output_norm.weight", d)
    if not spec.tied_output:
        add_matrix("output.weight", "output", vocab, d)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def copy_gguf(src: str | Path, dst: str | Path, arch: str | None = None, values: dict | None = None,
              extra: dict | None = None, tensors=None) -> Path:
    """Write a copy of the GGUF file `src` to `dst` and return `dst`: every metadata value and tensor
    as it is, except that `arch` renames the architecture (and its `{arch}.` keys), `values`
    ({key: value}) replaces existing values keeping their types, `extra` ({key: (value,
    GGUFValueType)}) adds keys, and `tensors(t, data)` (t: the reader's tensor, with its name, ggml
    shape and tensor_type; data: its array), when given, returns the (name, data, raw_dtype) triples
    written in its place (raw_dtype None: the array's own dtype)."""
    from gguf import GGUFReader, GGUFValueType

    r = GGUFReader(str(src))
    old = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")
    arch = arch or old
    w = GGUFWriter(str(dst), arch)
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        name = arch + f.name[len(old):] if f.name.startswith(old + ".") else f.name
        value = values[f.name] if values and f.name in values else f.contents()
        vtype = f.types[0]
        if vtype == GGUFValueType.ARRAY:
            w.add_key_value(name, value, vtype, sub_type=f.types[-1])
        else:
            w.add_key_value(name, value, vtype)
    for k, (v, vtype) in (extra or {}).items():
        w.add_key_value(k, v, vtype)
    for t in r.tensors:
        data = np.asarray(t.data)
        for name, out, raw_dtype in (tensors(t, data) if tensors else
                                     [(t.name, data, t.tensor_type)]):
            if raw_dtype is None:
                w.add_tensor(name, out)
            else:
                w.add_tensor(name, out, raw_shape=out.shape, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(dst)
