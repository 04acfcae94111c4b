"""Tokenizers from a Hugging Face `tokenizer.json` (what older TL programs pass to load_tokenizer).

The file is run by the `tokenizers` library as is. A `tokenizer_config.json` beside it supplies the
chat template and the BOS/EOS names when present. Streaming decode re-decodes the reply so far and
prints only text that is final (no trailing replacement character), so a character split across
tokens is never printed half.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from . import bounded_json
from .chat_template import ChatTemplate
from .errors import ModelError

_END_TEXTS = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|end|>", "<end_of_turn>", "</s>")


class JsonTokenizer:
    kind = "json"

    def __init__(self, path: Path, config: dict):
        from tokenizers import Tokenizer as HFTokenizer

        try:
            self._hf = HFTokenizer.from_file(str(path))
        except Exception as e:  # the library raises plain Exceptions for bad files
            raise ModelError(f"{path}: not a valid tokenizer.json: {' '.join(str(e).split())}") from None
        self.source = str(path)
        self.vocab_size = self._hf.get_vocab_size(with_added_tokens=True)
        added = self._hf.get_added_tokens_decoder()
        self.special_ids = frozenset(i for i, t in added.items() if t.special)

        def named(key: str, fallbacks: Iterable[str]) -> int | None:
            value = config.get(key)
            if isinstance(value, dict):
                value = value.get("content")
            for text in ([value] if isinstance(value, str) else []) + list(fallbacks):
                tid = self._hf.token_to_id(text)
                if tid is not None:
                    return tid
            return None

        self.bos_id = named("bos_token", ["<s>", "<|begin_of_text|>"])
        self.eos_id = named("eos_token", ["</s>", "<|endoftext|>", "<|end_of_text|>"])
        self.add_bos = False
        eog = {self.eos_id} if self.eos_id is not None else set()
        for text in _END_TEXTS:
            tid = self._hf.token_to_id(text)
            if tid is not None and tid in self.special_ids:
                eog.add(tid)
        self.eog_ids = frozenset(eog)

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise ModelError(f"tokenize: expected a string, got {type(text).__name__}")
        self._hf.encode_special_tokens = not parse_special
        return self._hf.encode(text, add_special_tokens=add_special).ids

    def _check(self, ids: Iterable[int]) -> list[int]:
        out = []
        for t in ids:
            t = int(t)
            if not 0 <= t < self.vocab_size:
                raise ModelError(f"detokenize: token id {t} is outside the vocabulary (0..{self.vocab_size - 1})")
            out.append(t)
        return out

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        return self._hf.decode(self._check(ids), skip_special_tokens=skip_special)

    def is_special(self, tid: int) -> bool:
        return int(tid) in self.special_ids

    def token_id(self, text: str) -> int | None:
        return self._hf.token_to_id(text)

    def token_text(self, tid: int) -> str:
        return self._hf.id_to_token(self._check([tid])[0])

    def stream_decoder(self, skip_special: bool = True) -> "_RedecodeStream":
        return _RedecodeStream(self, skip_special)

    @property
    def bos_token(self) -> str:
        return self._hf.id_to_token(self.bos_id) if self.bos_id is not None else ""

    @property
    def eos_token(self) -> str:
        return self._hf.id_to_token(self.eos_id) if self.eos_id is not None else ""


class _RedecodeStream:
    def __init__(self, tok: JsonTokenizer, skip_special: bool):
        self.tok, self.skip_special = tok, skip_special
        self.ids: list[int] = []
        self.printed = 0

    def push(self, tid: int) -> str:
        self.ids.append(int(tid))
        text = self.tok.decode(self.ids, self.skip_special)
        if text.endswith("\ufffd"):
            return ""
        out, self.printed = text[self.printed:], len(text)
        return out

    def flush(self) -> str:
        text = self.tok.decode(self.ids, self.skip_special)
        out, self.printed = text[self.printed:], len(text)
        return out


def json_tokenizer(path: Path) -> tuple[JsonTokenizer, ChatTemplate]:
    """The tokenizer in `path` and the chat template of the tokenizer_config.json beside it."""
    path = Path(path)
    if not path.is_file():   # a FIFO or device would block or never end inside the tokenizers library
        raise ModelError(f"{path}: not a file")
    config: dict = {}
    config_path = path.with_name("tokenizer_config.json")
    if config_path.is_file():
        try:
            config = bounded_json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ModelError(f"{config_path}: cannot read: {e}") from None
    tok = JsonTokenizer(path, config if isinstance(config, dict) else {})
    source = config.get("chat_template") if isinstance(config, dict) else None
    if not isinstance(source, str):
        source = None
    has_chatml = tok.token_id("<|im_start|>") is not None
    return tok, ChatTemplate(source, tok.bos_token, tok.eos_token, has_chatml, str(path))
