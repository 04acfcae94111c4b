"""The model commands of `tl`: `model fetch`, `model info`, `model list`, `generate`, `chat`, `serve`.

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
    fetch.add_argument("name", nargs="?", default=None,
                       help="model name: smollm2-135m-instruct (default) or gemma-3-270m")
    fetch.add_argument("--verify", action="store_true", help="re-check the sha256 of a cached file")
    fetch.set_defaults(func=_cmd_fetch)

    info = model_sub.add_parser("info", help="print what a GGUF file holds")
    info.add_argument("path", help="a .gguf file, or a known model name")
    info.add_argument("--json", action="store_true", help="print one JSON object")
    info.set_defaults(func=_cmd_info)

    lst = model_sub.add_parser("list", help="list known models (cached or to fetch, with sizes) and other cached files")
    lst.set_defaults(func=_cmd_list)

    gen = subparsers.add_parser("generate",
                                help="generate text with a GGUF model (Llama or Gemma 3; the forward pass is TL)")
    _add_model_args(gen)
    source = gen.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="the prompt (a user message unless --raw); '-' reads standard input "
                                         "(one final newline dropped)")
    source.add_argument("--prompt-file", metavar="FILE", help="read the prompt from FILE (UTF-8; one final "
                                                              "newline dropped)")
    gen.add_argument("--system", help="a system message before the prompt (with the chat template)")
    gen.add_argument("--raw", action="store_true", help="use the prompt as is, without the chat template")
    gen.add_argument("--max-tokens", type=_non_negative_int, default=128, help="tokens to generate (default 128)")
    _add_sampling_args(gen)
    gen.add_argument("--json", action="store_true",
                     help='print {"prompt_ids": [...], "ids": [...], "text": "..."} instead of streaming')
    gen.add_argument("--dump-logits", metavar="FILE.npy",
                     help="save the last prompt position's logits (float32) as .npy")
    gen.add_argument("--ignore-eos", action="store_true", help="keep generating past end-of-generation tokens")
    gen.add_argument("--json-schema", metavar="SCHEMA",
                     help="constrain the reply to JSON valid against SCHEMA (a file, or the schema itself when it "
                          "starts with '{'; '{}': any JSON object; the subset: docs/models.md)")
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

    serve = subparsers.add_parser("serve", help="serve a GGUF model over an OpenAI-compatible HTTP API")
    _add_model_args(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine "
                                                           "only; 0.0.0.0 exposes the server; several: "
                                                           "127.0.0.1,::1)")
    serve.add_argument("--port", type=_port, default=8080, help="TCP port (default 8080; 0: any free port)")
    serve.add_argument("--api-key", default=None,
                       help="require `Authorization: Bearer KEY` on /v1/ requests (default: TL_API_KEY if set)")
    serve.add_argument("--max-queue", type=_non_negative_int, default=16,
                       help="requests that may wait while one runs (default 16); more get 503")
    serve.add_argument("--parallel", "-np", type=_positive_int, default=1,
                       help="requests served at once, decoded together in one batched step per token "
                            "(default 1); --context is divided among them")
    serve.add_argument("--max-tokens", type=_positive_int, default=None,
                       help="cap on tokens per reply (default: what is left of the context)")
    serve.add_argument("--name", default=None, help="the model id the API reports (default: the model's name)")
    serve.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                       help="let web pages from ORIGIN (e.g. http://localhost:3000; '*': any) call the API "
                            "(repeatable; default: none)")
    serve.add_argument("--no-request-log", action="store_true",
                       help="do not print one line per request on standard error")
    serve.add_argument("--pooling", choices=("mean", "last"), default="mean",
                       help="how /v1/embeddings pools a text's final hidden states: their mean (default) or "
                            "the last token's (as llama-server's --pooling)")
    _add_sampling_args(serve, default_temperature=0.0, with_stop=False)
    serve.set_defaults(func=_cmd_serve)


def _non_negative_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


def _positive_int(text: str) -> int:
    v = _non_negative_int(text)
    if v == 0:
        raise argparse.ArgumentTypeError("must be positive, got 0")
    return v


def _non_negative_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return v


def _probability_mass(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 < v <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return v


def _port(text: str) -> int:
    v = _non_negative_int(text)
    if v > 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port (0 to 65535), got {v}")
    return v


def _threads(text: str) -> int:
    v = _positive_int(text)
    if v > 4096:
        raise argparse.ArgumentTypeError(f"must be at most 4096, got {v}")
    return v


def _repeat_penalty(text: str) -> float:
    v = _non_negative_float(text)
    if v == 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number (1.0: off), got {text}")
    return v


def _min_p(text: str) -> float:
    v = _non_negative_float(text)
    if v > 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return v


def _stop_string(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="a .gguf file or a known model name (default: smollm2-135m-instruct, "
                                   "downloaded on first use)")
    p.add_argument("--backend", choices=["cpu", "cuda", "metal"], help="default: TL_BACKEND or cpu")
    sized = "what the prompt and --max-tokens need" if p.prog.endswith("generate") else "2048"
    p.add_argument("--context", type=_positive_int, default=None, metavar="N",
                   help=f"KV cache length in tokens (default: {sized}; at most the model's context length)")
    p.add_argument("--fast", action="store_true",
                   help="quantize activations to 8 bits in every quantized product (decode steps, batched ones, and "
                        "prompt pieces), as llama.cpp does (CPU backend; faster, logits approximate: see README)")
    p.add_argument("--kv-dtype", choices=["f32", "f16"], default="f32",
                   help="KV cache dtype: f32 (default, exact) or f16 (half the memory and bandwidth at long "
                        "contexts; logits approximate)")
    p.add_argument("--threads", type=_threads, default=None, metavar="N",
                   help="CPU backend kernel threads (default: TL_THREADS, else one per core)")


def _add_sampling_args(p: argparse.ArgumentParser, default_temperature: float = 0.0, with_stop: bool = True) -> None:
    from .console import seed_arg

    p.add_argument("--temperature", type=_non_negative_float, default=default_temperature,
                   help=f"sampling temperature; 0 is greedy (default {default_temperature:g})")
    p.add_argument("--top-k", type=_non_negative_int, default=0, help="keep the k most likely tokens (0: all)")
    p.add_argument("--top-p", type=_probability_mass, default=1.0, help="nucleus sampling mass (default 1.0: off)")
    p.add_argument("--seed", type=seed_arg, default=None, help="random seed for sampling")
    p.add_argument("--repeat-penalty", type=_repeat_penalty, default=1.0,
                   help="divide positive / multiply negative logits of the last 64 generated ids by F "
                        "(as llama.cpp; default 1.0: off)")
    p.add_argument("--min-p", type=_min_p, default=0.0,
                   help="drop tokens less likely than P times the most likely one (default 0: off)")
    if with_stop:
        p.add_argument("--stop", type=_stop_string, action="append", default=[], metavar="STR",
                       help="end the reply where this text appears (not printed); repeatable")


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

    cache = cache_dir()
    known_files = set()
    for name, spec in KNOWN_MODELS.items():
        path = cache / spec.filename
        known_files.add(spec.filename)
        if path.is_file():
            state = f"cached at {path} ({_size(path.stat().st_size)})"
        else:
            state = f"not downloaded ({_size(spec.size)} to fetch: tl model fetch {name})"
        default = " (default)" if name == DEFAULT_MODEL else ""
        print(f"{name}{default}: {spec.description}; {state}")
    try:
        others = sorted(p for p in cache.glob("*.gguf") if p.is_file() and p.name not in known_files)
    except OSError:
        others = []
    for path in others:
        print(f"{path.name}: a GGUF file in the cache ({_size(path.stat().st_size)}); use --model {path}")
    return 0


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n < 1e9 else f"{n / 1e9:.2f} GB"


def _sampling(args: argparse.Namespace) -> dict:
    if args.temperature < 0:
        raise ModelError(f"--temperature must be >= 0, got {args.temperature}")
    if not 0.0 < args.top_p <= 1.0:
        raise ModelError(f"--top-p must be in (0, 1], got {args.top_p}")
    options = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                   repeat_penalty=args.repeat_penalty, min_p=args.min_p)
    if getattr(args, "stop", None):
        options["stop"] = list(args.stop)
    return options


def _open_session(args: argparse.Namespace):
    from .llm_session import LlmSession

    path = resolve_model_path(args.model, progress=sys.stderr.isatty())
    return LlmSession(path, backend=args.backend, context=args.context, progress=sys.stderr.isatty(),
                      kv_dtype=args.kv_dtype, fast=args.fast)


def _cmd_generate(args: argparse.Namespace) -> int:
    from .generate_command import run_generate

    if args.system is not None and args.raw:
        print("tl: error: --system needs the chat template; it cannot go with --raw", file=sys.stderr)
        return 2
    prompt, error = _read_prompt(args)
    if error:
        print(f"tl: error: {error}", file=sys.stderr)
        return 2
    args.prompt = prompt
    return _run_with_session(args, run_generate)


def _read_prompt(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """The prompt text of `tl generate` (--prompt TEXT, --prompt - for standard input, --prompt-file F;
    from a stream one final newline is dropped, as llama.cpp's --file does), or (None, one error line)."""
    if args.prompt_file is None and args.prompt != "-":
        return args.prompt, None
    where = "standard input" if args.prompt_file is None else args.prompt_file
    flag = "" if args.prompt_file is None else "--prompt-file "
    try:
        if args.prompt_file is None:
            data = sys.stdin.buffer.read()
        else:
            with open(args.prompt_file, "rb") as f:
                data = f.read()
    except IsADirectoryError:
        return None, f"{flag}{where}: is a directory"
    except OSError as e:
        return None, f"{flag}{where}: {e.strerror or e}"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"{where}: not UTF-8 text (bad byte at offset {e.start})"
    if not text.strip():
        return None, f"the prompt from {where} is empty"
    if text.endswith("\n"):
        text = text[:-2] if text.endswith("\r\n") else text[:-1]
    return text, None


def _cmd_serve(args: argparse.Namespace) -> int:
    import os

    from .server import ServeOptions, run_server

    if args.api_key is None:
        args.api_key = os.environ.get("TL_API_KEY") or None
    status = _start_backend(args)
    if status:
        return status
    try:
        sampling = _sampling(args)
        path = resolve_model_path(args.model, progress=sys.stderr.isatty())
    except ModelError as e:
        return _fail(str(e))
    from ..models.fetch import ALIASES, DEFAULT_MODEL, KNOWN_MODELS

    known = (args.model or DEFAULT_MODEL).lower()
    name = args.name or (ALIASES.get(known, known) if known in KNOWN_MODELS or known in ALIASES else path.stem)
    options = ServeOptions(model_path=path, name=name, host=args.host, port=args.port,
                           api_key=args.api_key, max_queue=args.max_queue, max_tokens=args.max_tokens,
                           context=args.context, backend=args.backend, kv_dtype=args.kv_dtype, fast=args.fast,
                           parallel=args.parallel, defaults=sampling, cors_origins=tuple(args.cors_origin),
                           request_log=not args.no_request_log, pooling=args.pooling)
    engine_class = None
    if args.parallel > 1:
        from .batching import BatchEngine

        engine_class = BatchEngine
    return run_server(options, engine_class)


def _cmd_chat(args: argparse.Namespace) -> int:
    from .chat_command import run_chat

    return _run_with_session(args, run_chat)


def _run_with_session(args: argparse.Namespace, command) -> int:
    """Open the model named by args and run `command(session, args, sampling)`, turning every way it
    can end into an exit status with at most one line on stderr."""
    from .console import OutputClosed, silence_stdout

    status = _start_backend(args)
    if status:
        return status
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


def _start_backend(args: argparse.Namespace) -> int:
    """Start the device named by --backend with --threads kernel threads; 0, or 2 (a usage error,
    found before the model loads) when it cannot start."""
    from ..builtins.core import RuntimeFailure, init_backend

    threads = getattr(args, "threads", None) or 0
    if not args.backend and not threads:
        return 0
    try:
        init_backend(args.backend, threads)
    except RuntimeFailure as e:
        name = args.backend or "default"
        print(f"tl: error: backend {name}: {_without_prefix(str(e), args.backend or '')}", file=sys.stderr)
        return 2
    return 0


def _without_prefix(text: str, name: str) -> str:
    return text[len(name) + 2:] if text.startswith(name + ": ") else text
