"""Model files and text: GGUF reading, tokenizers, chat templates, downloads, `tl` model commands.

Python handles file formats here; the network architecture itself is TL code in
`tensorlogic/stdlib/llama.tl`.
"""
from .errors import ModelError

__all__ = ["ModelError"]
