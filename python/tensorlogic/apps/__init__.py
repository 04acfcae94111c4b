"""Applications built on the interpreter: the LLM session behind `tl generate` and `tl chat`, the
`tl model/generate/chat/serve` command handlers, the HTTP server of `tl serve` (server.py), and the
benchmark helpers of bench/llm.py.

This is the floor above the interpreter: it may import interp, builtins, models and lang; nothing
below it imports it (docs/layers.md).
"""
