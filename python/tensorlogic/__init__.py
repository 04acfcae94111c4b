"""TensorLogic: a tensor programming language with a safe native runtime."""

__version__ = "0.1.0"


def run(path_or_source, **kwargs):
    """Run a TL program; see tensorlogic.api.run."""
    from .api import run as _run
    return _run(path_or_source, **kwargs)


__all__ = ["__version__", "run"]
