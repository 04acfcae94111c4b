"""`tl generate`: one prompt, one reply, printed as it is generated (or as JSON), and the terminal
output `tl generate` and `tl chat` share (the prefill progress line, the --stats line).

Invariant: stdout holds only the reply (or the JSON); progress, notes and statistics go to stderr.
"""
from __future__ import annotations

import json
import sys
from typing import Callable

import numpy as np

from ..builtins.core import device_threads
from ..models.errors import ModelError
from .console import write_stdout
from .llm_session import GenerationResult, LlmSession


def prefill_progress() -> Callable[[int, int], None] | None:
    """A progress line on stderr while a long prompt is processed, when stderr is a terminal (it is
    erased once the prompt is done, so the reply starts on a clean line)."""
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        line = f"[prompt {done}/{total} tokens]"
        sys.stderr.write("\r" + (line if done < total else " " * len(line) + "\r"))
        sys.stderr.flush()
    return show


def print_stats(session: LlmSession, r: GenerationResult) -> None:
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    threads = device_threads()
    print(f"[{f'{threads} thread' + ('s' if threads > 1 else '') if threads > 0 else 'threads: one per core'} | "
          f"load {session.load_seconds:.2f} s | prompt {r.prefilled} tok, {r.prompt_tok_s:.1f} tok/s | "
          f"decode {len(r.ids)} tok, {r.decode_tok_s:.1f} tok/s | peak RSS {rss:.0f} MiB | "
          f"stopped by {r.stopped_by}]", file=sys.stderr)


def no_template_note(session: LlmSession, what: str) -> None:
    print(f"tl: {session.config.name} has no chat template (a base model): {what}", file=sys.stderr)


def schema_sampler(session: LlmSession, schema: str, sampling: dict, ignore_eos: bool):
    """--json-schema: the sampling settings, constrained to JSON valid against the schema."""
    from pathlib import Path

    from ..builtins.convert import BuiltinArgError
    from ..builtins.guided import GuidedSampler
    from ..builtins.sampling import SamplerValue
    from ..models.json_grammar import JsonConstraint, SchemaError, compile_schema, token_index

    if ignore_eos:
        raise ModelError("--json-schema cannot be combined with --ignore-eos (the reply ends with the value)")
    text = schema
    if not schema.lstrip().startswith("{"):
        try:
            text = Path(schema).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ModelError(f"--json-schema: cannot read {schema}: {getattr(e, 'strerror', None) or e}") from None
    try:
        value = json.loads(text)
        root = compile_schema(value if value != {} else {"type": "object"})
    except ValueError as e:  # (SchemaError is one)
        what = "" if isinstance(e, SchemaError) else "not JSON: "
        raise ModelError(f"--json-schema: {what}{' '.join(str(e).split())}") from None
    try:
        inner = SamplerValue.seeded(sampling.get("temperature", 0.0), sampling.get("top_k", 0),
                                    sampling.get("top_p", 1.0), sampling.get("seed"),
                                    sampling.get("repeat_penalty", 1.0), sampling.get("min_p", 0.0))
    except BuiltinArgError as e:
        raise ModelError(str(e)) from None
    vocab = session.config.vocab_size
    return GuidedSampler(inner, vocab, constraint=JsonConstraint(root, token_index(session.tokenizer.tok, vocab)))


def run_generate(session: LlmSession, args, sampling: dict) -> int:
    raw = args.raw or not session.has_chat_template
    system = getattr(args, "system", None)
    if not args.raw and raw:
        ignored = "; --system is ignored" if system else ""
        no_template_note(session, f"completing the prompt as raw text (--raw){ignored}")
    if raw:
        prompt_ids = session.raw_prompt_ids(args.prompt)
    else:
        messages = ([("system", system)] if system else []) + [("user", args.prompt)]
        prompt_ids = session.chat_prompt_ids(messages)
    stream = None if args.json else write_stdout
    sampler = schema_sampler(session, args.json_schema, sampling, args.ignore_eos) \
        if getattr(args, "json_schema", None) else None
    result = session.generate(prompt_ids, args.max_tokens, stop_at_eog=not args.ignore_eos, on_text=stream,
                              keep_logits=bool(args.dump_logits), on_prefill=prefill_progress(), sampler=sampler,
                              **sampling)
    if args.dump_logits:
        try:
            np.save(args.dump_logits, result.prompt_logits)
        except OSError as e:
            raise ModelError(f"cannot write {args.dump_logits}: {e.strerror or e}") from None
    interrupted = result.stopped_by == "interrupt"
    if args.json:
        print(json.dumps({"prompt_ids": result.prompt_ids, "ids": result.ids, "text": result.text,
                          "stopped_by": result.stopped_by, "interrupted": interrupted},
                         ensure_ascii=False))
    elif result.ids:
        write_stdout("\n")
    if args.stats:
        print_stats(session, result)
    if interrupted:
        print("tl: interrupted", file=sys.stderr)
        return 130  # as a Ctrl-C before the model loaded
    return 0
