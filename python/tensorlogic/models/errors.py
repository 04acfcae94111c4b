"""The one error type of the model layer (GGUF files, tokenizers, chat templates, downloads).

Its message is a single line a user can act on: it names the file (or model) and the problem.
Callers (builtins, CLI) show `str(err)` as is; they never need a traceback to explain it.
"""
from __future__ import annotations


class ModelError(Exception):
    """A model file, tokenizer, template or download problem, described in one line."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split("\n")))
