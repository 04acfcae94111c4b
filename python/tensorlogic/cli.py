"""The `tl` command.

    tl run [--test | --bench] [--backend cpu|cuda|metal] [--memory-check] [--seed N] [--debug] FILE [ARGS...]
    tl test [-k NAME] FILE  same as `tl run --test FILE` (-k: only tests whose name contains NAME)
    tl check FILE...        parse and static checks only (undefined names, arity, break outside loops)
    tl repl                 interactive prompt (also reads piped input)
    tl help builtins | tl help NAME | tl help learn
    tl generate | chat | serve | model ...   (model commands, from tensorlogic.apps.model_commands;
                            tl serve: an OpenAI-compatible HTTP server, tensorlogic.apps.server)
    tl --version

Exit status: 0 success; 1 a TL error (syntax, runtime, import) or a failed test; 2 a usage error
(bad options, missing/unreadable file); 3 `--memory-check` found device bytes still live after
teardown; 4 an internal error (a bug in TensorLogic, not in the program); 130 interrupted
(Ctrl-C). docs/exit-codes.md lists them per command. Invariant: a TL user never
sees a Python traceback unless they pass --debug.
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback

from . import __version__
from .apps.console import (EXIT_ERROR, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_LEAK, EXIT_OK, EXIT_USAGE,
                           seed_arg, silence_stdout)
from .apps.model_commands import register_commands as register_model_commands

class _ArgParser(argparse.ArgumentParser):
    def error(self, message):  # usage errors: one line and exit status 2
        self.print_usage(sys.stderr)
        sys.stderr.write(f"tl: error: {message}\n")
        sys.exit(EXIT_USAGE)


def _read_program(path: str) -> tuple[str | None, str | None]:
    """(source, None), or (None, one clear error line) when PATH cannot be a TL source file.
    The file is read exactly once, so pipes (`/dev/stdin`, `<(...)`) work; `-` is standard input."""
    if path == "-":
        data = sys.stdin.buffer.read()
    else:
        if not os.path.exists(path):
            return None, f"tl: {path}: no such file"
        if os.path.isdir(path):
            return None, f"tl: {path}: is a directory, not a .tl file"
        if not os.access(path, os.R_OK):
            return None, f"tl: {path}: permission denied"
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            return None, f"tl: {path}: cannot read ({e.strerror or e})"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as e:
        return None, f"tl: {path}: not UTF-8 text (bad byte at offset {e.start})"


def _program_name(path: str) -> str:
    return "<stdin>" if path == "-" else path


def _select_backend(name: str | None) -> str | None:
    """Initialize `_core` on the requested backend; returns an error line or None."""
    if name is None and not os.environ.get("TL_BACKEND"):
        return None
    from .builtins.core import init_backend
    try:
        init_backend(name or os.environ.get("TL_BACKEND"))
    except Exception as e:  # BackendUnavailable and friends: one line
        backend = name or os.environ.get("TL_BACKEND")
        text = str(e).splitlines()[0] if str(e) else type(e).__name__
        if text.startswith(f"{backend}: "):
            text = text[len(backend) + 2:]
        return f"tl: backend {backend}: {text}"
    return None


def _print_error(err: BaseException, debug: bool) -> int:
    """Print `err` for the user; returns the exit status it means."""
    from .lang.errors import TLError, TLInternalError
    if debug:
        traceback.print_exception(err)
        if isinstance(err, TLInternalError) and err.python_traceback:
            sys.stderr.write("the Python exception inside TensorLogic:\n" + err.python_traceback)
    if isinstance(err, TLInternalError):
        sys.stderr.write(err.format() + "\n")
        return EXIT_INTERNAL
    if isinstance(err, TLError):
        sys.stderr.write(err.format() + "\n")
        return EXIT_ERROR
    sys.stderr.write(f"tl: internal error: {type(err).__name__}: {err}\n"
                     "(this is a bug in TensorLogic; run with --debug for the Python traceback)\n")
    return EXIT_INTERNAL


def _release_everything(interp) -> None:
    from .builtins.memory import release_all
    interp.close()
    release_all()


def _memory_check(out) -> int:
    import gc

    from .builtins.core import core
    gc.collect()
    core.synchronize()
    core.clear_cache()
    stats = dict(core.memory_stats())
    keys = ["live_bytes", "live_tensors", "peak_bytes", "cached_bytes", "reserved_bytes", "allocations", "frees",
            "pool_hits", "pool_misses", "reservation_hits", "command_buffers_committed",
            "command_buffers_in_flight"]
    out.write("memory ledger after teardown:\n")
    for k in keys:
        if k in stats:
            out.write(f"  {k:28s} {stats[k]}\n")
    live = int(stats.get("live_bytes", 0))
    if live != 0:
        out.write(f"memory check FAILED: {live} device bytes still live\n")
        return EXIT_LEAK
    out.write("memory check passed: 0 live bytes\n")
    return EXIT_OK


def cmd_run(args) -> int:
    from .interp.interpreter import Interpreter
    from .lang.errors import TLError
    source, bad = _read_program(args.file)
    if bad:
        sys.stderr.write(bad + "\n")
        return EXIT_USAGE
    err_line = _select_backend(args.backend)
    if err_line:
        sys.stderr.write(err_line + "\n")
        return EXIT_USAGE
    interp = Interpreter(seed=args.seed)
    interp.ctx.args = list(args.args)
    if args.debug:
        from .interp import compiled
        compiled.set_debug(True)
    status = EXIT_OK
    try:
        try:
            loaded = interp.load_file(_program_name(args.file), source)
            interp.run_top_level(loaded)
            if args.test:
                status = _run_tests(interp, loaded, args.filter)
            elif args.bench:
                _run_benches(interp, loaded)
            else:
                interp.run_main(loaded)
        except TLError as e:
            _drop_traceback(e, args.debug)
            status = _print_error(e, args.debug)
        except KeyboardInterrupt:
            sys.stderr.write("tl: interrupted\n")
            status = EXIT_INTERRUPTED
        except BrokenPipeError:
            raise  # stdout's reader went away (`tl run ... | head`): main() ends quietly
        except Exception as e:  # noqa: BLE001 - an interpreter bug: one message, never a raw traceback
            _drop_traceback(e, args.debug)
            status = _print_error(e, args.debug)
        sys.stdout.flush()
    finally:
        _release_everything(interp)
        del interp
    if args.memory_check:
        leak = _memory_check(sys.stdout)
        if leak:
            return EXIT_LEAK
    return status


def _drop_traceback(e: BaseException, debug: bool) -> None:
    """Drop Python frames held by the error (they hold program values) unless --debug wants them."""
    if debug:
        return
    e.__traceback__ = None
    e.__context__ = None
    e.__cause__ = None


def _run_tests(interp, loaded, name_filter: str | None = None) -> int:
    if name_filter is not None:
        loaded.tests = [t for t in loaded.tests if name_filter in t[0]]
    if not loaded.tests:
        print("no tests found" if name_filter is None else f"no tests named like '{name_filter}'")
        return EXIT_OK

    def report(outcome):
        if outcome.passed:
            print(f"test {outcome.name} ... ok")
        else:
            print(f"test {outcome.name} ... FAILED")
            _drop_traceback(outcome.error, False)
            print("    " + outcome.error.format().replace("\n", "\n    "))
        sys.stdout.flush()
    from .lang.errors import TLInternalError
    outcomes = interp.run_tests(loaded, report)
    passed = sum(o.passed for o in outcomes)
    failed = len(outcomes) - passed
    print(f"{passed} passed, {failed} failed")
    if any(isinstance(o.error, TLInternalError) for o in outcomes):
        return EXIT_INTERNAL
    return EXIT_OK if failed == 0 else EXIT_ERROR


def _run_benches(interp, loaded) -> None:
    if not loaded.benches:
        print("no benches found")
        return

    def report(name, runs, mean_s, min_s):
        print(f"bench {name}: mean {mean_s * 1e3:.3f} ms, min {min_s * 1e3:.3f} ms ({runs} runs)")
        sys.stdout.flush()
    interp.run_benches(loaded, report)


def cmd_check(args) -> int:
    from .interp.static_check import check_file
    from .lang.errors import TLWarning
    status = EXIT_OK
    for path in args.files:
        source, bad = _read_program(path)
        if bad:
            sys.stderr.write(bad + "\n")
            return EXIT_USAGE
        path = _program_name(path)
        problems = check_file(path, source)
        for e in problems:
            sys.stderr.write(e.format(show_trace=False) + "\n")
        errors = [e for e in problems if not isinstance(e, TLWarning)]
        if errors:
            status = EXIT_ERROR
        else:
            print(f"{path}: ok")
    return status


def cmd_repl(args) -> int:
    from .repl import run_repl
    err_line = _select_backend(args.backend)
    if err_line:
        sys.stderr.write(err_line + "\n")
        return EXIT_USAGE
    return run_repl(seed=args.seed)


COMPILE_HELP = """\
@compile fn NAME(...) { ... }
    Record the first call per signature (tensor shapes and dtypes, which arguments are ints or
    floats, other values by identity) and replay later calls natively as one command buffer.
    int/float arguments are inputs of the recording, not constants: rope positions, KV-cache write
    positions and attended lengths, and tensor-scalar arithmetic follow them at every replay.
    What a replay could not reproduce (host reads, printing, `if` on a scalar argument, random
    numbers, state outside tensors) makes that signature run normally; `tl run --debug` says why.
    TL_COMPILE=0 turns compilation off. Details: docs/compiled-functions.md"""


def cmd_help(args) -> int:
    from . import builtins as _builtins  # noqa: F401 - registers the table
    from .builtins.registry import BUILTINS
    topic = args.topic
    if topic == "compile":
        print(COMPILE_HELP)
        return EXIT_OK
    if topic in (None, "builtins"):
        by_category: dict[str, list] = {}
        for b in BUILTINS.values():
            by_category.setdefault(b.category, []).append(b)
        for category in sorted(by_category):
            print(f"{category}:")
            for b in sorted(by_category[category], key=lambda b: b.name):
                print(f"  {b.signature:52s} {b.doc}")
        return EXIT_OK
    if topic == "learn":
        from .interp.learn_block import LEARN_HELP  # noqa: PLC0415
        print(LEARN_HELP)
        return EXIT_OK
    b = BUILTINS.get(topic)
    if b is None:
        close = [n for n in BUILTINS if topic.lower() in n.lower()]
        sys.stderr.write(f"tl: no builtin named '{topic}'" + (f" (similar: {', '.join(sorted(close)[:8])})"
                                                             if close else "") + "\n")
        return EXIT_ERROR
    print(f"{b.signature}\n    {b.doc}\n    category: {b.category}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgParser(prog="tl", description="TensorLogic: run .tl programs")
    parser.add_argument("--version", action="version", version=f"tl {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_ArgParser)

    def add_run_options(p):
        p.add_argument("--backend", choices=["cpu", "cuda", "metal"], help="device backend (overrides TL_BACKEND)")
        p.add_argument("--memory-check", action="store_true",
                       help="after teardown print the memory ledger; exit 3 if device bytes are still live")
        p.add_argument("--seed", type=seed_arg, default=None, help="seed the random generator (rand, sampling)")
        p.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
        p.add_argument("-k", dest="filter", metavar="NAME", default=None,
                       help="with --test: run only the tests whose name contains NAME")
        p.add_argument("file", help="the .tl program ('-' reads it from standard input)")
        p.add_argument("args", nargs=argparse.REMAINDER, help="arguments the program reads with args()")

    run = sub.add_parser("run", help="run a program")
    mode = run.add_mutually_exclusive_group()
    mode.add_argument("--test", action="store_true", help="run the program's test blocks")
    mode.add_argument("--bench", action="store_true", help="run the program's bench blocks")
    add_run_options(run)
    run.set_defaults(func=cmd_run)

    test = sub.add_parser("test", help="run a program's test blocks")
    add_run_options(test)
    test.set_defaults(func=cmd_run, test=True, bench=False)

    check = sub.add_parser("check", help="parse and check programs without running them")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.set_defaults(func=cmd_check)

    repl = sub.add_parser("repl", help="interactive prompt")
    repl.add_argument("--backend", choices=["cpu", "cuda", "metal"])
    repl.add_argument("--seed", type=seed_arg, default=None)
    repl.set_defaults(func=cmd_repl)

    helpp = sub.add_parser("help", help="builtin reference: `tl help builtins`, `tl help NAME`, `tl help learn`")
    helpp.add_argument("topic", nargs="?", default=None)
    helpp.set_defaults(func=cmd_help)

    register_model_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    if sys.stdin is None:  # `tl ... <&-`: a closed stdin reads as empty input
        sys.stdin = open(os.devnull)
    if sys.stdout is None:  # `tl ... >&-`: nowhere to write results
        if sys.stderr is not None:
            sys.stderr.write("tl: error: standard output is closed\n")
        return EXIT_USAGE
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if getattr(args, "func", None) is None:
            parser.print_help()
            return EXIT_USAGE
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        sys.stderr.write("\ntl: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        silence_stdout()
        return EXIT_OK
    except Exception as e:  # noqa: BLE001 - escaped a command: a bug or a broken install, still one line
        if getattr(sys.modules.get("tensorlogic"), "ctrl_c_seen", False):  # see __main__._record_ctrl_c
            sys.stderr.write("\ntl: interrupted\n")
            return EXIT_INTERRUPTED
        text = " ".join(str(e).split())
        sys.stderr.write(f"tl: internal error: {type(e).__name__}: {text} "
                         "(a bug in TensorLogic, or a broken installation)\n")
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
