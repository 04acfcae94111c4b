"""`python -m tensorlogic` is the `tl` command."""
import signal
import sys


def _record_ctrl_c(signum, frame):
    """Ctrl-C raises KeyboardInterrupt as always, and is remembered: a C extension being imported
    can turn it into some other error (NumPy: "PyCapsule_Import could not import module datetime")
    with no trace of it, and that must still end as an interrupt (130), not an internal error."""
    sys.modules["tensorlogic"].ctrl_c_seen = True
    raise KeyboardInterrupt


try:
    signal.signal(signal.SIGINT, _record_ctrl_c)
except ValueError:  # not the main thread
    pass


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
    if not (_interrupted(e) or getattr(sys.modules["tensorlogic"], "ctrl_c_seen", False)):
        raise
    sys.stderr.write("\ntl: interrupted\n")
    sys.exit(130)

sys.exit(main())
