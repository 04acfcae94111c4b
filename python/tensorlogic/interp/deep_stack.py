"""TL code runs on threads with a large C stack, so that deep TL recursion never overflows it.

Why: a TL call takes up to PYTHON_FRAMES_PER_CALL Python frames, so MAX_CALL_DEPTH calls need Python's
recursion limit near RECURSION_LIMIT (252,000). Python 3.11 checks C recursion (json, repr, sorted()
calling back into Python, ...) against that same limit, and at 252,000 levels those need far more than
the main thread's 8 MiB: a deep input segfaulted instead of raising RecursionError. Here the limit is
raised only while a deep thread runs, and deep threads get STACK_BYTES, enough for the worst C
recursion measured per level of the limit (about 2.6 KB: sorted() with a key that calls Python) with
room to spare.

Invariants:
- sys.getrecursionlimit() is above its normal value only while some deep thread is running; meanwhile
  every thread Python starts (threading.stack_size) gets STACK_BYTES too, and the thread that started a
  deep call only waits for it (and runs signal handlers, a few frames deep).
- `run_deep(fn)` on a deep thread is a plain call; elsewhere it runs fn on a new deep thread and returns
  its result or raises its exception in the caller.
- Signals reach only the main thread (deep threads block SIGINT and SIGTERM). While the main thread
  waits for a deep call, Ctrl-C raises KeyboardInterrupt inside the deep call (and runs the hooks that
  `interrupt_hook` registered, which mark what must stop even if that exception is swallowed); a
  second Ctrl-C stops waiting and raises KeyboardInterrupt in the caller at once.
"""
from __future__ import annotations

import contextlib
import ctypes
import signal
import sys
import threading
from typing import Any, Callable

from .control import MAX_CALL_DEPTH, PYTHON_FRAMES_PER_CALL

BYTES_PER_LEVEL = 4096  # of C stack per unit of the recursion limit; 2.6 KB is the worst measured
MAX_STACK_BYTES = 16 << 30  # TL_MAX_CALL_DEPTH beyond what this holds gets a lower recursion limit
RECURSION_LIMIT = min(MAX_CALL_DEPTH * PYTHON_FRAMES_PER_CALL + 2000, MAX_STACK_BYTES // BYTES_PER_LEVEL)
STACK_BYTES = max(256 << 20, (RECURSION_LIMIT * BYTES_PER_LEVEL + (1 << 20) - 1) & ~((1 << 20) - 1))

_lock = threading.Lock()
_active = 0  # deep threads running
_saved_limit = 0
_saved_stack = 0
_deep_idents: set[int] = set()
_hooks: list[Callable[[], None]] = []


def _pass() -> None:
    pass


def on_deep_thread() -> bool:
    return threading.get_ident() in _deep_idents


def _enter() -> None:
    """One more deep thread is about to start: raise the limit and the new-thread stack size."""
    global _active, _saved_limit, _saved_stack
    with _lock:
        if _active == 0:
            _saved_limit = sys.getrecursionlimit()
            _saved_stack = threading.stack_size()
            threading.stack_size(STACK_BYTES)
            sys.setrecursionlimit(max(_saved_limit, RECURSION_LIMIT))
        _active += 1


def _leave() -> None:
    global _active
    with _lock:
        _active -= 1
        if _active == 0:
            threading.stack_size(_saved_stack)
            sys.setrecursionlimit(_saved_limit)


def _body(target: Callable[[], Any]) -> Callable[[], Any]:
    def run():
        _deep_idents.add(threading.get_ident())
        try:
            if hasattr(signal, "pthread_sigmask"):  # signals go to the main thread, which forwards them
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            return target()
        finally:
            _deep_idents.discard(threading.get_ident())
            _leave()
    return run


def deep_thread(target: Callable[[], Any], name: str, daemon: bool = True) -> threading.Thread:
    """A started thread running `target` with the deep stack and limit (for long-lived workers)."""
    _enter()
    try:
        t = threading.Thread(target=_body(target), name=name, daemon=daemon)
        t.start()
    except BaseException:
        _leave()
        raise
    return t


def run_deep(fn: Callable[..., Any], *args: Any, signals: dict[int, Callable[[int], None]] | None = None,
             **kwargs: Any) -> Any:
    """fn(*args, **kwargs) on a deep thread. `signals`: handlers the waiting main thread runs instead
    of the default (SIGINT: interrupt the deep call), e.g. a server's graceful shutdown."""
    if on_deep_thread():
        return fn(*args, **kwargs)
    outcome: list = [None, None]

    running = [True]  # fn has not returned: a KeyboardInterrupt may still be sent into it
    # The deep thread's id, set by the thread itself: it runs TL code (and may print) before
    # Thread.start() returns in the caller, so a Ctrl-C that early must not depend on that return.
    deep_ident: list = [None]
    interrupted: list = []

    def target():
        deep_ident[0] = threading.get_ident()
        try:
            try:
                if interrupted:  # Ctrl-C before the thread was running: no async exception reached it
                    raise KeyboardInterrupt
                outcome[0] = fn(*args, **kwargs)
            finally:
                running[0] = False
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            outcome[1] = e
        # A KeyboardInterrupt sent just as fn returned is still pending: it must fire here, in a
        # Python call (an eval-breaker check), not in the bookkeeping after. (Withdrawing it with
        # PyThreadState_SetAsyncExc(id, NULL) is no option: in 3.11 that leaves the interpreter's
        # async-exception flag set, and every thread then crawls through the eval breaker.)
        for _ in range(3):
            try:
                _pass()
            except KeyboardInterrupt as e:
                if outcome[1] is None:
                    outcome[1] = e

    def on_sigint(signum, frame):
        if interrupted:  # a second Ctrl-C: the deep call did not stop (blocked in C); stop waiting
            raise KeyboardInterrupt
        interrupted.append(signum)
        for hook in list(_hooks):
            hook()
        ident = deep_ident[0]
        if ident is not None and running[0]:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(KeyboardInterrupt))

    handlers = {signal.SIGINT: on_sigint}
    for signum, handler in (signals or {}).items():
        handlers[signum] = lambda s, f, handler=handler: handler(s)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum, handler in handlers.items():
            try:
                previous[signum] = signal.signal(signum, handler)
            except (ValueError, OSError):  # not the main interpreter
                pass
    try:
        thread = deep_thread(target, "tl-deep")
        while thread.is_alive():
            thread.join(0.1)  # wakes now and then: a signal the kernel gave another thread is handled
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if outcome[1] is not None:
        exc = outcome[1]
        outcome[1] = None
        raise exc
    return outcome[0]  # (a deep call that caught its KeyboardInterrupt decided what Ctrl-C means)


@contextlib.contextmanager
def interrupt_hook(hook: Callable[[], None]):
    """Run `hook` (on the main thread, from its signal handler) when Ctrl-C interrupts a deep call
    inside this block: a mark that stops work even if the KeyboardInterrupt itself gets swallowed."""
    _hooks.append(hook)
    try:
        yield
    finally:
        _hooks.remove(hook)
