"""TensorLogic: a tensor programming language with a safe native runtime."""

__version__ = "0.1.0"
