"""LLM benchmark: TensorLogic against llama.cpp and Hugging Face transformers, measured in one run.

Every engine runs in its own worker process (this file, re-invoked with --worker ENGINE) so that
peak RSS and load time are its own. For each engine and thread count: load time, prompt tokens/s
(one prefill of a fixed prompt of --prompt-tokens tokens), decode tokens/s (--decode-tokens greedy
single-token steps after one warm-up run), peak RSS; for TL also device allocations and pool hits
per decode token and the interpreter's share of decode time. Prints a table and the ratios TL/peer,
and writes JSON with --json. Peers are installed into their own virtual environment on first use
(--peers-venv, default ~/.cache/tensorlogic/bench-peers); `--peers none` skips them.

    python bench/llm.py [--model PATH] [--threads 2] [--prompt-tokens 128] [--decode-tokens 128]
                        [--peers llama.cpp,hf] [--repeat 3] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# A fixed English text; the prompt is its first --prompt-tokens tokens (same ids for every engine,
# taken from TensorLogic's tokenizer of the model, which equals the reference tokenizer).
PROMPT_TEXT = (
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg "
    "combined movable metal type, oil-based inks and a wooden press adapted from those used for "
    "wine and olive oil. Before this, books were copied by hand, a slow and costly process that kept "
    "written knowledge in the hands of a few. Within decades, presses spread across Europe, from "
    "Mainz to Venice, Paris and London, and the number of books in circulation grew from thousands "
    "to millions. Scholars could compare identical copies of a text, scientists shared results more "
    "quickly, and new ideas in religion and politics reached readers far beyond the universities. "
    "The press also changed languages themselves: printers standardised spelling and grammar, and "
    "vernacular literature found a wide audience for the first time. Historians still debate how "
    "much the press caused these changes and how much it simply accelerated trends already under way, "
    "but few doubt that it was one of the most important inventions of the second millennium."
)

PEER_PACKAGES = {
    "llama.cpp": ["llama-cpp-python==0.3.36"],
    "hf": ["torch==2.13.0", "transformers", "accelerate", "gguf", "numpy"],
}


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _median(xs):
    return statistics.median(xs) if xs else None


# ----------------------------------------------------------------------------------- workers


def _worker_tl(args) -> dict:
    os.environ["TL_THREADS"] = str(args.threads)
    from tensorlogic.apps.llm_session import LlmSession

    t0 = time.perf_counter()
    session = LlmSession(args.model, context=len(args.prompt_ids) + args.decode_tokens + 8)
    load_s = time.perf_counter() - t0
    ids = list(args.prompt_ids)

    def one_run():
        session.cached_ids = []  # prefill the whole prompt every run (no prefix reuse)
        cpu0 = time.thread_time()
        r = session.generate(ids, args.decode_tokens + 1, temperature=0.0, stop_at_eog=False,
                             track_memory=True)
        cpu = time.thread_time() - cpu0
        a, b = r.memory_at_first, r.memory_at_last
        n = len(r.ids) - 1
        return {"prefill": r.prompt_seconds, "decode": r.decode_seconds, "n": n,
                "allocs": (b["allocations"] - a["allocations"]) / n,
                "hits": (b["pool_hits"] - a["pool_hits"]) / n,
                "res_hits": (b["reservation_hits"] - a["reservation_hits"]) / n,
                "host_busy": cpu / (r.prompt_seconds + r.decode_seconds)}

    one_run()  # warm-up
    runs = [one_run() for _ in range(args.repeat)]
    return {"load_s": load_s,
            "prompt_tok_s": len(ids) / _median([r["prefill"] for r in runs]),
            "decode_tok_s": runs[0]["n"] / _median([r["decode"] for r in runs]),
            "allocs_per_token": max(r["allocs"] for r in runs),
            "pool_hits_per_token": _median([r["hits"] for r in runs]),
            "reservation_hits_per_token": _median([r["res_hits"] for r in runs]),
            # share of wall time the interpreter's thread was busy (interpreting and encoding
            # ops; kernels run on the runtime's worker threads)
            "interp_share": _median([r["host_busy"] for r in runs])}


def _worker_llamacpp(args) -> dict:
    import numpy as np
    from llama_cpp import Llama

    t0 = time.perf_counter()
    llm = Llama(model_path=args.model, n_ctx=args.prompt_tokens + args.decode_tokens + 8,
                n_threads=args.threads, n_threads_batch=args.threads, n_batch=512, verbose=False)
    load_s = time.perf_counter() - t0
    ids = list(args.prompt_ids)

    def one_run():
        llm.reset()
        llm._ctx.kv_cache_clear() if hasattr(llm._ctx, "kv_cache_clear") else None
        t = time.perf_counter()
        llm.eval(ids)
        prefill = time.perf_counter() - t
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        t = time.perf_counter()
        for _ in range(args.decode_tokens):
            llm.eval([tok])
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        return prefill, time.perf_counter() - t

    one_run()  # warm-up
    runs = [one_run() for _ in range(args.repeat)]
    return {"load_s": load_s,
            "prompt_tok_s": len(ids) / _median([r[0] for r in runs]),
            "decode_tok_s": args.decode_tokens / _median([r[1] for r in runs])}


def _worker_hf(args) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    model_path = Path(args.model)
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(str(model_path.parent), gguf_file=model_path.name,
                                                 dtype=torch.float32)
    model.eval()
    load_s = time.perf_counter() - t0
    ids = torch.tensor([list(args.prompt_ids)])

    def one_run():
        with torch.inference_mode():
            t = time.perf_counter()
            out = model(ids, use_cache=True)
            prefill = time.perf_counter() - t
            past = out.past_key_values
            tok = out.logits[0, -1].argmax().view(1, 1)
            t = time.perf_counter()
            for _ in range(args.decode_tokens):
                out = model(tok, past_key_values=past, use_cache=True)
                past = out.past_key_values
                tok = out.logits[0, -1].argmax().view(1, 1)
            return prefill, time.perf_counter() - t

    one_run()
    runs = [one_run() for _ in range(args.repeat)]
    return {"load_s": load_s,
            "prompt_tok_s": len(ids[0]) / _median([r[0] for r in runs]),
            "decode_tok_s": args.decode_tokens / _median([r[1] for r in runs])}


WORKERS = {"tl": _worker_tl, "llama.cpp": _worker_llamacpp, "hf": _worker_hf}


def worker_main(args) -> int:
    args.prompt_ids = json.loads(args.prompt_ids_json)
    result = WORKERS[args.worker](args)
    result["peak_rss_mib"] = _peak_rss_mib()
    print("BENCH_RESULT " + json.dumps(result), flush=True)
    return 0


# ----------------------------------------------------------------------------------- driver


def ensure_peer_venv(venv: Path, peers: list[str]) -> Path:
    python = venv / "bin" / "python"
    marker = venv / "installed.json"
    have = json.loads(marker.read_text()) if marker.exists() else []
    missing = [p for p in peers if p not in have]
    if not missing:
        return python
    if not python.exists():
        print(f"bench: creating the peers' virtual environment in {venv}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    for peer in missing:
        print(f"bench: installing {peer} into {venv} (first use; llama-cpp-python builds from source, "
              f"about 4 minutes on 2 cores)", file=sys.stderr)
        env = dict(os.environ)
        if peer == "llama.cpp":
            env.setdefault("CMAKE_ARGS", "-DGGML_NATIVE=ON")
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES[peer]], check=True, env=env)
        have.append(peer)
        marker.write_text(json.dumps(have))
    return python


def run_worker(python: str, engine: str, args, prompt_ids: list[int]) -> dict:
    cmd = [python, str(Path(__file__).resolve()), "--worker", engine, "--model", args.model,
           "--threads", str(args.threads), "--prompt-tokens", str(len(prompt_ids)),
           "--decode-tokens", str(args.decode_tokens), "--repeat", str(args.repeat),
           "--prompt-ids-json", json.dumps(prompt_ids)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONUNBUFFERED="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("BENCH_RESULT "):
            return json.loads(line[len("BENCH_RESULT "):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {"error": f"{engine} worker failed (exit {proc.returncode}): " + " | ".join(tail)}


def prompt_ids_for(model: str, n: int) -> list[int]:
    from tensorlogic.models.gguf_file import open_gguf
    from tensorlogic.models.tokenizer import Tokenizer

    with open_gguf(model) as gguf:
        tok = Tokenizer.from_gguf(gguf)
    ids = tok.encode(PROMPT_TEXT * 4, add_special=False)
    if len(ids) < n:
        raise SystemExit(f"bench: the prompt text gives only {len(ids)} tokens; ask for fewer")
    return ids[:n]


def format_table(rows: list[dict]) -> str:
    head = ["engine", "threads", "load s", "prompt tok/s", "decode tok/s", "peak RSS MiB", "allocs/tok",
            "pool hits/tok", "interp share"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    for r in rows:
        if "error" in r:
            lines.append(f"| {r['engine']} | {r['threads']} | error: {r['error']} |")
            continue
        lines.append("| " + " | ".join([
            r["engine"], str(r["threads"]), f(r.get("load_s"), ".2f"), f(r.get("prompt_tok_s"), ".1f"),
            f(r.get("decode_tok_s"), ".1f"), f(r.get("peak_rss_mib"), ".0f"),
            f(r.get("allocs_per_token"), ".2f"), f(r.get("pool_hits_per_token"), ".1f"),
            f(r.get("interp_share"), ".0%")]) + " |")
    return "\n".join(lines)


def ratios(rows: list[dict]) -> list[str]:
    out = []
    tl = next((r for r in rows if r["engine"] == "tl" and "error" not in r), None)
    if tl is None:
        return out
    for peer in rows:
        if peer["engine"] == "tl" or "error" in peer:
            continue
        out.append(
            f"TL/{peer['engine']}: decode {tl['decode_tok_s'] / peer['decode_tok_s']:.2f}x, "
            f"prompt {tl['prompt_tok_s'] / peer['prompt_tok_s']:.2f}x, "
            f"peak RSS {tl['peak_rss_mib'] / peer['peak_rss_mib']:.2f}x, "
            f"load {tl['load_s']:.2f}s vs {peer['load_s']:.2f}s")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="GGUF path (default: the cached SmolLM2-135M-Instruct Q4_1)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--decode-tokens", type=int, default=128)
    p.add_argument("--repeat", type=int, default=3, help="timed repetitions after one warm-up (median)")
    p.add_argument("--peers", default="llama.cpp,hf", help="comma list of llama.cpp, hf; or none")
    p.add_argument("--peers-venv", default=str(Path.home() / ".cache" / "tensorlogic" / "bench-peers"))
    p.add_argument("--json", dest="json_out", help="write the results as JSON here")
    p.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    p.add_argument("--prompt-ids-json", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.model is None:
        from tensorlogic.models.fetch import default_model_path

        args.model = str(default_model_path())
    if args.worker:
        return worker_main(args)

    peers = [] if args.peers in ("", "none") else [x.strip() for x in args.peers.split(",")]
    for peer in peers:
        if peer not in PEER_PACKAGES:
            p.error(f"unknown peer {peer!r} (known: {', '.join(PEER_PACKAGES)})")
    prompt_ids = prompt_ids_for(args.model, args.prompt_tokens)
    peer_python = str(ensure_peer_venv(Path(args.peers_venv), peers)) if peers else None

    rows = []
    for engine in ["tl"] + peers:
        python = sys.executable if engine == "tl" else peer_python
        print(f"bench: running {engine} ({args.threads} threads)...", file=sys.stderr, flush=True)
        r = run_worker(python, engine, args, prompt_ids)
        r.update(engine=engine, threads=args.threads)
        rows.append(r)

    print(f"model: {args.model}; prompt {len(prompt_ids)} tokens, decode {args.decode_tokens} tokens, "
          f"median of {args.repeat} after a warm-up; {time.strftime('%Y-%m-%d')}")
    print(format_table(rows))
    for line in ratios(rows):
        print(line)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"rows": rows, "ratios": ratios(rows)}, indent=1))
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
