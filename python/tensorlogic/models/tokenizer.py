"""Tokenizers built from GGUF metadata: byte-level BPE (`gpt2`) and SentencePiece (`llama`).

Token ids must equal the model's reference tokenizer for every string: byte-level BPE runs on the
Hugging Face `tokenizers` library (vocabulary + merges + the pre-tokenizer named by
`tokenizer.ggml.pre`); SentencePiece follows llama.cpp's score-driven bigram merge with byte
fallback. Decoding works on bytes, token by token, so a streamed reply never prints half a UTF-8
character: `StreamDecoder` holds incomplete sequences back until they complete.
"""
from __future__ import annotations

import codecs
import heapq
from typing import Iterable, Sequence

import numpy as np

from .errors import ModelError
from .gguf_file import GGUFFile

# tokenizer.ggml.token_type values (llama.cpp's llama_token_type)
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6

_GPT2_REGEX = None  # the ByteLevel pre-tokenizer's built-in GPT-2 regex
_LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# tokenizer.ggml.pre → (split regex or None for GPT-2's, digits split one by one)
PRE_TOKENIZERS: dict[str, tuple[str | None, bool]] = {
    "default": (_GPT2_REGEX, False), "gpt-2": (_GPT2_REGEX, False), "gpt2": (_GPT2_REGEX, False),
    "phi-2": (_GPT2_REGEX, False), "olmo": (_GPT2_REGEX, False),
    "smollm": (_GPT2_REGEX, True), "starcoder": (_GPT2_REGEX, True), "refact": (_GPT2_REGEX, True),
    "llama-bpe": (_LLAMA3_REGEX, False), "llama3": (_LLAMA3_REGEX, False), "dbrx": (_LLAMA3_REGEX, False),
    "smaug-bpe": (_LLAMA3_REGEX, False),
    "qwen2": (_QWEN2_REGEX, False), "stablelm2": (_QWEN2_REGEX, False),
}
# Control tokens whose text marks the end of a turn in common chat formats.
_END_OF_TURN_TEXTS = {"<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|end|>",
                      "<end_of_turn>", "</s>", "<|eom_id|>"}


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable character table (byte-level BPE's alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_BYTE_OF_CHAR = {c: b for b, c in _bytes_to_unicode().items()}


class Tokenizer:
    """Text ↔ token ids for one model. `kind` is "gpt2" or "llama" (the GGUF tokenizer model)."""

    def __init__(self, kind: str, tokens: Sequence[str], token_types: np.ndarray | None,
                 scores: np.ndarray | None = None, merges: Sequence[str] | None = None,
                 pre: str | None = None, bos_id: int | None = None, eos_id: int | None = None,
                 unk_id: int | None = None, eot_id: int | None = None, eom_id: int | None = None,
                 add_bos: bool = False, add_eos: bool = False, add_space_prefix: bool = True,
                 source: str = "tokenizer"):
        self.kind = kind
        self.source = source
        self.tokens = list(tokens)
        n = len(self.tokens)
        if n == 0:
            raise ModelError(f"{source}: the vocabulary is empty")
        if token_types is None:
            token_types = np.full(n, TOKEN_NORMAL, dtype=np.int32)
        self.token_types = np.asarray(token_types, dtype=np.int32)
        if len(self.token_types) != n:
            raise ModelError(f"{source}: tokenizer.ggml.token_type has {len(self.token_types)} entries "
                             f"for {n} tokens")
        for label, tid in (("bos", bos_id), ("eos", eos_id), ("unknown", unk_id), ("eot", eot_id),
                           ("eom", eom_id)):
            if tid is not None and not 0 <= tid < n:
                raise ModelError(f"{source}: {label} token id {tid} is outside the vocabulary of {n}")
        self.bos_id, self.eos_id, self.unk_id = bos_id, eos_id, unk_id
        self.add_bos = bool(add_bos) and bos_id is not None
        self.add_eos = bool(add_eos) and eos_id is not None
        self.add_space_prefix = bool(add_space_prefix)
        self.vocab_size = n
        eog = {t for t in (eos_id, eot_id, eom_id) if t is not None}
        # as llama.cpp: control or user-defined tokens that spell an end of turn (Gemma's "</s>" is
        # user-defined) also end generation
        for i in np.nonzero(np.isin(self.token_types, (TOKEN_CONTROL, TOKEN_USER_DEFINED)))[0]:
            if self.tokens[i] in _END_OF_TURN_TEXTS:
                eog.add(int(i))
        self.eog_ids = frozenset(eog)
        self._piece_bytes: list[bytes | None] = [None] * n
        special_types = np.isin(self.token_types, (TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNKNOWN))
        specials = [int(i) for i in np.nonzero(special_types)[0] if self.tokens[i]]
        self.special_ids = frozenset(i for i in specials if self.token_types[i] != TOKEN_USER_DEFINED)
        if kind == "gpt2":
            self._hf = self._build_byte_level_bpe(merges or [], pre, specials)
        elif kind == "llama":
            if scores is None or len(scores) != n:
                raise ModelError(f"{source}: SentencePiece tokenizer needs tokenizer.ggml.scores "
                                 f"with one score per token")
            self._spm = _SentencePiece(self.tokens, self.token_types, np.asarray(scores, dtype=np.float64),
                                       unk_id, add_space_prefix, specials)
        else:
            raise ModelError(f"{source}: tokenizer model {kind!r} is not supported (supported: gpt2, llama)")

    # ------------------------------------------------------------------ construction
    @staticmethod
    def from_gguf(g: GGUFFile) -> "Tokenizer":
        return Tokenizer.from_metadata(g.metadata, str(g.path))

    @staticmethod
    def from_metadata(metadata: dict, label: str) -> "Tokenizer":
        """The tokenizer described by GGUF `tokenizer.ggml.*` metadata."""
        kind = metadata.get("tokenizer.ggml.model")
        if kind is None:
            raise ModelError(f"{label}: missing metadata key tokenizer.ggml.model (the file has no tokenizer)")
        if not isinstance(kind, str):
            raise ModelError(f"{label}: metadata tokenizer.ggml.model should be a string")
        tokens = metadata.get("tokenizer.ggml.tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise ModelError(f"{label}: metadata tokenizer.ggml.tokens should be an array of strings")

        def opt_id(key: str) -> int | None:
            v = metadata.get(key)
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ModelError(f"{label}: metadata {key} should be an integer")
            return int(v)

        def opt_array(key: str, kinds: str) -> np.ndarray | None:
            v = metadata.get(key)
            if v is None:
                return None
            if not isinstance(v, np.ndarray) or v.dtype.kind not in kinds:
                raise ModelError(f"{label}: metadata {key} should be a numeric array")
            return v

        merges = metadata.get("tokenizer.ggml.merges")
        if kind == "gpt2" and merges is None:
            raise ModelError(f"{label}: byte-level BPE tokenizer without tokenizer.ggml.merges")
        if merges is not None and (not isinstance(merges, list) or not all(isinstance(m, str) for m in merges)):
            raise ModelError(f"{label}: metadata tokenizer.ggml.merges should be an array of strings")
        pre = metadata.get("tokenizer.ggml.pre")
        return Tokenizer(
            kind, tokens, opt_array("tokenizer.ggml.token_type", "iu"),
            scores=opt_array("tokenizer.ggml.scores", "fiu"), merges=merges,
            pre=pre if isinstance(pre, str) else None,
            bos_id=opt_id("tokenizer.ggml.bos_token_id"), eos_id=opt_id("tokenizer.ggml.eos_token_id"),
            unk_id=opt_id("tokenizer.ggml.unknown_token_id"), eot_id=opt_id("tokenizer.ggml.eot_token_id"),
            eom_id=opt_id("tokenizer.ggml.eom_token_id"),
            add_bos=bool(metadata.get("tokenizer.ggml.add_bos_token", kind == "llama")),
            add_eos=bool(metadata.get("tokenizer.ggml.add_eos_token", False)),
            add_space_prefix=bool(metadata.get("tokenizer.ggml.add_space_prefix", kind == "llama")),
            source=label,
        )

    def _build_byte_level_bpe(self, merges: Sequence[str], pre: str | None, specials: list[int]):
        from tokenizers import AddedToken, Regex
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers

        pre_name = pre or "default"
        if pre_name not in PRE_TOKENIZERS:
            raise ModelError(f"{self.source}: pre-tokenizer {pre_name!r} (tokenizer.ggml.pre) is not supported "
                             f"(supported: {', '.join(sorted(PRE_TOKENIZERS))})")
        regex, split_digits = PRE_TOKENIZERS[pre_name]
        vocab: dict[str, int] = {}
        for i, t in enumerate(self.tokens):
            vocab.setdefault(t, i)
        pairs = []
        for m in merges:
            a, sep, b = m.partition(" ")
            if not sep or not a or not b:
                raise ModelError(f"{self.source}: malformed merge {m!r} in tokenizer.ggml.merges")
            pairs.append((a, b))
        try:
            hf = HFTokenizer(models.BPE(vocab, pairs, fuse_unk=False))
        except Exception as e:  # the library reports bad merges as a plain Exception
            raise ModelError(f"{self.source}: invalid BPE vocabulary or merges: {e}") from None
        steps = []
        if split_digits:
            steps.append(pre_tokenizers.Digits(individual_digits=True))
        if regex is None:
            steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
        else:
            steps.append(pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False))
            steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
        hf.pre_tokenizer = pre_tokenizers.Sequence(steps)
        hf.decoder = decoders.ByteLevel()
        hf.add_special_tokens([AddedToken(self.tokens[i], special=self.token_types[i] != TOKEN_USER_DEFINED,
                                          normalized=False) for i in specials])
        return hf

    @staticmethod
    def from_file(path) -> "Tokenizer":
        with GGUFFile(path) as g:
            return Tokenizer.from_gguf(g)

    # ------------------------------------------------------------------ encoding
    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids of `text`. `add_special` adds BOS/EOS where the model asks for them;
        `parse_special` recognises control tokens written literally (e.g. `<|im_start|>`)."""
        if not isinstance(text, str):
            raise ModelError(f"tokenize: expected a string, got {type(text).__name__}")
        if self.kind == "gpt2":
            self._hf.encode_special_tokens = not parse_special
            ids = self._hf.encode(text, add_special_tokens=False).ids
        else:
            ids = self._spm.encode(text, parse_special)
        if add_special:
            if self.add_bos:
                ids = [self.bos_id] + ids
            if self.add_eos:
                ids = ids + [self.eos_id]
        return ids

    # ------------------------------------------------------------------ decoding
    def _check_id(self, tid: int) -> int:
        try:
            tid = int(tid)
        except (TypeError, ValueError):
            raise ModelError(f"detokenize: token id {tid!r} is not an integer") from None
        if not 0 <= tid < self.vocab_size:
            raise ModelError(f"detokenize: token id {tid} is outside the vocabulary (0..{self.vocab_size - 1})")
        return tid

    def token_bytes(self, tid: int) -> bytes:
        """The bytes token `tid` stands for in decoded text."""
        tid = self._check_id(tid)
        cached = self._piece_bytes[tid]
        if cached is not None:
            return cached
        text, ttype = self.tokens[tid], self.token_types[tid]
        if ttype in (TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNKNOWN):
            out = text.encode("utf-8")
        elif self.kind == "gpt2":
            try:
                out = bytes(_BYTE_OF_CHAR[c] for c in text)
            except KeyError:  # not a byte-level entry: stands for its own text
                out = text.encode("utf-8")
        elif ttype == TOKEN_BYTE:
            out = _parse_byte_token(text)
        else:
            out = text.replace("\u2581", " ").encode("utf-8")
        self._piece_bytes[tid] = out
        return out

    def is_special(self, tid: int) -> bool:
        return self._check_id(tid) in self.special_ids

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text of `ids`. SentencePiece models drop the space their encoder put in front."""
        data = b"".join(self.token_bytes(t) for t in ids if not (skip_special and self.is_special(t)))
        text = data.decode("utf-8", "replace")
        if self.kind == "llama" and self.add_space_prefix and text.startswith(" "):
            text = text[1:]
        return text

    def token_text(self, tid: int) -> str:
        """The vocabulary entry of `tid` as stored (byte-level or ▁-escaped)."""
        return self.tokens[self._check_id(tid)]

    def stream_decoder(self, skip_special: bool = True) -> "StreamDecoder":
        return StreamDecoder(self, skip_special)

    def token_id(self, text: str) -> int | None:
        """The id of a token whose vocabulary entry is exactly `text`, if any."""
        if self.kind == "gpt2":
            return self._hf.token_to_id(text)
        return self._spm.vocab.get(text)

    @property
    def bos_token(self) -> str:
        return self.tokens[self.bos_id] if self.bos_id is not None else ""

    @property
    def eos_token(self) -> str:
        return self.tokens[self.eos_id] if self.eos_id is not None else ""


class StreamDecoder:
    """Turns generated ids into text pieces as they arrive; a piece is printed only once its
    UTF-8 characters are complete (an incomplete tail waits for the next token)."""

    def __init__(self, tok: Tokenizer, skip_special: bool = True):
        self.tok = tok
        self.skip_special = skip_special
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, tid: int) -> str:
        if self.skip_special and self.tok.is_special(tid):
            return ""
        return self._utf8.decode(self.tok.token_bytes(tid))

    def flush(self) -> str:
        """The held-back tail (as replacement characters if it never completed)."""
        return self._utf8.decode(b"", final=True)


def _parse_byte_token(text: str) -> bytes:
    # "<0x0A>" → b"\n"
    if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
        try:
            return bytes([int(text[3:5], 16)])
        except ValueError:
            pass
    return text.encode("utf-8")


class _SentencePiece:
    """llama.cpp's SentencePiece encoding: escape spaces as ▁ (one in front when asked), split into
    characters, repeatedly merge the adjacent pair whose concatenation is the highest-scoring
    vocabulary entry (ties: leftmost), then emit tokens; characters outside the vocabulary become
    byte tokens <0xXX> (or the unknown token)."""

    def __init__(self, tokens: list[str], types: np.ndarray, scores: np.ndarray, unk_id: int | None,
                 add_space_prefix: bool, specials: list[int]):
        self.vocab: dict[str, int] = {}
        for i, t in enumerate(tokens):
            self.vocab.setdefault(t, i)
        self.scores = scores
        self.unk_id = unk_id
        self.add_space_prefix = add_space_prefix
        self.byte_ids: list[int | None] = [self.vocab.get(f"<0x{b:02X}>") for b in range(256)]
        self.specials = sorted(((tokens[i], i, int(types[i])) for i in specials), key=lambda s: -len(s[0]))

    def encode(self, text: str, parse_special: bool) -> list[int]:
        ids: list[int] = []
        prev_special = True
        for fragment, special_id in self._partition(text, parse_special):
            if special_id is not None:
                ids.append(special_id)
                prev_special = True
                continue
            if not fragment:
                continue
            if self.add_space_prefix and prev_special:
                fragment = " " + fragment
            ids.extend(self._encode_fragment(fragment.replace(" ", "\u2581")))
            prev_special = False
        return ids

    def _partition(self, text: str, parse_special: bool) -> list[tuple[str, int | None]]:
        parts: list[tuple[str, int | None]] = [(text, None)]
        for piece, tid, ttype in self.specials:
            if not parse_special and ttype != TOKEN_USER_DEFINED:
                continue
            out: list[tuple[str, int | None]] = []
            for frag, fid in parts:
                if fid is not None or piece not in frag:
                    out.append((frag, fid))
                    continue
                chunks = frag.split(piece)
                for k, chunk in enumerate(chunks):
                    if k:
                        out.append((piece, tid))
                    if chunk:
                        out.append((chunk, None))
            parts = out
        return parts

    def _encode_fragment(self, text: str) -> list[int]:
        if not text:
            return []
        symbols = list(text)
        n = len(symbols)
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        alive = [True] * n
        merged_from: dict[str, tuple[str, str]] = {}
        heap: list[tuple[float, int, int, str]] = []

        def push(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            merged = symbols[left] + symbols[right]
            tid = self.vocab.get(merged)
            if tid is None:
                return
            heapq.heappush(heap, (-float(self.scores[tid]), left, right, merged))

        for i in range(n - 1):
            push(i, i + 1)
        while heap:
            _, left, right, merged = heapq.heappop(heap)
            if not alive[left] or not alive[right] or nxt[left] != right or symbols[left] + symbols[right] != merged:
                continue
            merged_from.setdefault(merged, (symbols[left], symbols[right]))
            symbols[left] = merged
            alive[right] = False
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            push(prev[left], left)
            push(left, nxt[left])
        ids: list[int] = []
        i = 0
        while i >= 0:
            self._resegment(symbols[i], merged_from, ids)
            i = nxt[i]
        return ids

    def _resegment(self, text: str, merged_from: dict[str, tuple[str, str]], out: list[int]) -> None:
        tid = self.vocab.get(text)
        if tid is not None:
            out.append(tid)
            return
        if text in merged_from:
            left, right = merged_from[text]
            self._resegment(left, merged_from, out)
            self._resegment(right, merged_from, out)
            return
        for b in text.encode("utf-8"):
            bid = self.byte_ids[b]
            if bid is not None:
                out.append(bid)
            elif self.unk_id is not None:
                out.append(self.unk_id)
