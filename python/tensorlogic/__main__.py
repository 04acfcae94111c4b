"""`python -m tensorlogic` is the `tl` command."""
import sys


def _interrupted(exc: BaseException) -> bool:
    """Whether `exc` is Ctrl-C, or an error an import raised because Ctrl-C stopped it (NumPy turns a
    KeyboardInterrupt inside its C extension's import into an ImportError)."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


try:
    from .cli import main
except BaseException as e:  # Ctrl-C while the command is still importing
    if not _interrupted(e):
        raise
    sys.stderr.write("\ntl: interrupted\n")
    sys.exit(130)

sys.exit(main())
