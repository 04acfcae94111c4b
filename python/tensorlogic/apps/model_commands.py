"""The model commands of `tl`: `model fetch`, `model info`, `model list`, `generate`, `chat`.

`register_commands(subparsers)` adds them to the main parser; each parser sets `func`, a handler
taking the parsed arguments and returning the exit status. Handlers print one-line errors
(`tl: error: ...`) for user mistakes and bad files, never a Python traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..models.errors import ModelError
from .console import EXIT_INTERNAL


def register_commands(subparsers: argparse._SubParsersAction) -> None:
    model = subparsers.add_parser("model", help="download and inspect GGUF models")
    model_sub = model.add_subparsers(dest="model_command", metavar="{fetch,info,list}")
    model_sub.required = True

    fetch = model_sub.add_parser("fetch", help="download a known model into the cache")
    fetch.add_argument("name", nargs="?", default=None, help="model name (default: smollm2-135m-instruct)")
    fetch.add_argument("--verify", action="store_true", help="re-check the sha256 of a cached file")
    fetch.set_defaults(func=_cmd_fetch)

    info = model_sub.add_parser("info", help="print what a GGUF file holds")
    info.add_argument("path", help="a .gguf file, or a known model name")
    info.add_argument("--json", action="store_true", help="print one JSON object")
    info.set_defaults(func=_cmd_info)

    lst = model_sub.add_parser("list", help="list known models and whether they are cached")
    lst.set_defaults(func=_cmd_list)

    gen = subparsers.add_parser("generate", help="generate text with a GGUF model (Llama forward pass in TL)")
    _add_model_args(gen)
    gen.add_argument("--prompt", required=True, help="the prompt (a user message unless --raw)")
    gen.add_argument("--raw", action="store_true", help="use the prompt as is, without the chat template")
    gen.add_argument("--max-tokens", type=_non_negative_int, default=128, help="tokens to generate (default 128)")
    _add_sampling_args(gen)
    gen.add_argument("--json", action="store_true",
                     help='print {"prompt_ids": [...], "ids": [...], "text": "..."} instead of streaming')
    gen.add_argument("--dump-logits", metavar="FILE.npy",
                     help="save the last prompt position's logits (float32) as .npy")
    gen.add_argument("--ignore-eos", action="store_true", help="keep generating past end-of-generation tokens")
    gen.add_argument("--stats", action="store_true", help="print load time and tokens per second to stderr")
    gen.set_defaults(func=_cmd_generate)

    chat = subparsers.add_parser("chat", help="chat with a GGUF model (default: SmolLM2-135M-Instruct)")
    _add_model_args(chat)
    chat.add_argument("--prompt", help="answer this one message and exit")
    chat.add_argument("--system", help="a system message for the conversation")
    chat.add_argument("--max-tokens", type=_non_negative_int, default=512, help="tokens per reply (default 512)")
    _add_sampling_args(chat, default_temperature=0.0)
    chat.add_argument("--stats", action="store_true", help="print tokens per second after each reply")
    chat.set_defaults(func=_cmd_chat)


def _non_negative_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="a .gguf file or a known model name (default: smollm2-135m-instruct, "
                                   "downloaded on first use)")
    p.add_argument("--backend", help="cpu, cuda or metal (default: TL_BACKEND or cpu)")
    p.add_argument("--context", type=_non_negative_int, default=None,
                   help="KV cache length in tokens (default: the model's, at most 4096)")


def _add_sampling_args(p: argparse.ArgumentParser, default_temperature: float = 0.0) -> None:
    p.add_argument("--temperature", type=float, default=default_temperature,
                   help=f"sampling temperature; 0 is greedy (default {default_temperature:g})")
    p.add_argument("--top-k", type=_non_negative_int, default=0, help="keep the k most likely tokens (0: all)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default 1.0: off)")
    p.add_argument("--seed", type=int, default=None, help="random seed for sampling")


def _fail(message: str) -> int:
    print(f"tl: error: {message}", file=sys.stderr)
    return 1


def resolve_model_path(model: str | None, progress: bool = True) -> Path:
    from ..models.fetch import resolve_model

    return resolve_model(model, progress)


def _cmd_fetch(args: argparse.Namespace) -> int:
    from ..models.fetch import fetch_model

    try:
        path = fetch_model(args.name, progress=sys.stderr.isatty(), verify=args.verify)
    except ModelError as e:
        return _fail(str(e))
    print(path)
    return 0


def _cmd_info(args: argparse.Namespace) -> int:
    from ..models.info import format_info, model_info

    try:
        info = model_info(resolve_model_path(args.path))
    except ModelError as e:
        return _fail(str(e))
    print(json.dumps(info) if args.json else format_info(info))
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from ..models.fetch import DEFAULT_MODEL, KNOWN_MODELS, cache_dir

    for name, spec in KNOWN_MODELS.items():
        path = cache_dir() / spec.filename
        state = f"cached at {path}" if path.is_file() else "not downloaded"
        default = " (default)" if name == DEFAULT_MODEL else ""
        print(f"{name}{default}: {spec.description}; {state}")
    return 0


def _sampling(args: argparse.Namespace) -> dict:
    if args.temperature < 0:
        raise ModelError(f"--temperature must be >= 0, got {args.temperature}")
    if not 0.0 < args.top_p <= 1.0:
        raise ModelError(f"--top-p must be in (0, 1], got {args.top_p}")
    return dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)


def _open_session(args: argparse.Namespace):
    from .llm_session import LlmSession

    path = resolve_model_path(args.model, progress=sys.stderr.isatty())
    return LlmSession(path, backend=args.backend, context=args.context, progress=sys.stderr.isatty())


def _cmd_generate(args: argparse.Namespace) -> int:
    from .llm_session import run_generate

    return _run_with_session(args, run_generate)


def _cmd_chat(args: argparse.Namespace) -> int:
    from .llm_session import run_chat

    return _run_with_session(args, run_chat)


def _run_with_session(args: argparse.Namespace, command) -> int:
    """Open the model named by args and run `command(session, args, sampling)`, turning every way it
    can end into an exit status with at most one line on stderr."""
    from .console import silence_stdout
    from .llm_session import OutputClosed

    try:
        sampling = _sampling(args)
        with _open_session(args) as session:
            return command(session, args, sampling)
    except ModelError as e:
        return _fail(str(e))
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except (BrokenPipeError, OutputClosed):
        silence_stdout()  # the reader went away (`| head`): exit quietly
        return 0
    except Exception as e:  # a bug, not a user error: still one line, and its own exit status
        _fail(f"internal error: {type(e).__name__}: {' '.join(str(e).split())} (this is a bug in TensorLogic)")
        return EXIT_INTERNAL
