"""TL builtins for text: load_tokenizer, tokenize, detokenize, detokenize_single,
apply_chat_template and text_stream (prints generated tokens as their text completes). A tokenizer
comes from a model (models.py's TokenizerValue), a .gguf file or a tokenizer.json.

Invariant: every tokenizer error is one BuiltinArgError line (a TL error at the call), never an
internal error.
"""
from __future__ import annotations

from typing import Any

from ..models.errors import ModelError
from .convert import BuiltinArgError, to_int, type_name
from .models import ModelValue, TokenizerValue, _model_error, resolve_model_path
from .registry import TLObject, builtin


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
