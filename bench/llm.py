"""LLM benchmark: TensorLogic against llama.cpp and Hugging Face transformers, measured in one run.

Every engine runs in its own worker process (this file, re-invoked with --worker ENGINE) so that
peak RSS and load time are its own. For each engine and thread count: load time, prompt tokens/s
(one prefill of a fixed prompt of --prompt-tokens tokens), decode tokens/s (--decode-tokens greedy
single-token steps after one warm-up run), peak RSS; for TL also device allocations and pool hits
per decode token and the interpreter's share of decode time. Prints a table and the ratios TL/peer,
and writes JSON with --json. Peers are installed into their own virtual environment on first use
(--peers-venv, default ~/.cache/tensorlogic/bench-peers); `--peers none` skips them.

TL runs in the variants of --tl-variants (default: the exact default path; `fast` = 8-bit activations,
`kv-f16` = f16 KV cache, `fast+kv-f16`), and --tl-baseline DIR adds a row for another checkout's
TensorLogic (its python/ dir on PYTHONPATH; the default variant) for before/after figures.
--rounds N runs every row N times, interleaved (row 1, row 2, ..., row 1, row 2, ...), and reports the
median and range: on a shared machine the load changes over minutes, so rows measured in one sweep
are compared fairly. Long contexts: --prompt-tokens 4096 --decode-tokens 32 (decode then runs with
4,096 tokens in the cache).

    python bench/llm.py [--model PATH|NAME] [--threads 2] [--prompt-tokens 128] [--decode-tokens 128]
                        [--peers llama.cpp,hf] [--repeat 3] [--rounds 1] [--tl-variants default,fast]
                        [--tl-baseline DIR] [--json OUT]

GPU mode (`--gpu`, on a CUDA machine): TL on its CUDA backend against llama.cpp CUDA with flash
attention on and off, each engine in its own process, three scenarios per engine: decode tokens/s
after a 128-token prompt (256 new tokens), decode tokens/s at 2,048 tokens of context (64 new
tokens after a 2,048-token prefill) and prompt tokens/s of a 512-token prefill. Decode is timed in
process from the first generated token to the last ((N-1) steps), the same way for both engines,
after one warm-up run; the median of --repeat runs. llama-cpp-python built with CUDA is imported
from --llama-cpp-path (a `pip install --target` directory) or the current environment.

    python bench/llm.py --gpu [--llama-cpp-path DIR] [--model PATH] [--repeat 3] [--json OUT]
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


TL_VARIANTS = {"default": {}, "fast": {"fast": True}, "kv-f16": {"kv_dtype": "f16"},
               "fast+kv-f16": {"fast": True, "kv_dtype": "f16"}}


def _worker_tl(args) -> dict:
    os.environ["TL_THREADS"] = str(args.threads)
    try:
        from tensorlogic.apps.llm_session import LlmSession
    except ImportError:  # a --tl-baseline checkout from before the apps/ layout
        from tensorlogic.models.llm_session import LlmSession

    t0 = time.perf_counter()
    session = LlmSession(args.model, context=len(args.prompt_ids) + args.decode_tokens + 8,
                         **TL_VARIANTS[args.tl_variant])
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


def _llamacpp_next(llm) -> int:
    """Greedy id from the logits of the last evaluated token (llama-cpp-python keeps `scores` only
    with logits_all, so read the context's logits)."""
    import numpy as np

    return int(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm._n_vocab,)).argmax())


def _worker_llamacpp(args) -> dict:
    from llama_cpp import Llama

    t0 = time.perf_counter()
    # n_batch = n_ctx: llama-cpp-python keeps logits rows for one batch only, so a prompt longer than
    # n_batch would leave the last position's logits out of `scores`
    n_ctx = args.prompt_tokens + args.decode_tokens + 8
    llm = Llama(model_path=args.model, n_ctx=n_ctx, n_threads=args.threads, n_threads_batch=args.threads,
                n_batch=max(512, n_ctx), verbose=False)
    load_s = time.perf_counter() - t0
    ids = list(args.prompt_ids)

    def one_run():
        llm.reset()
        llm._ctx.kv_cache_clear() if hasattr(llm._ctx, "kv_cache_clear") else None
        t = time.perf_counter()
        llm.eval(ids)
        prefill = time.perf_counter() - t
        tok = _llamacpp_next(llm)
        t = time.perf_counter()
        for _ in range(args.decode_tokens):
            llm.eval([tok])
            tok = _llamacpp_next(llm)
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


def _worker_tl_eager(args) -> dict:
    """TL with compiled functions off (TL_COMPILE=0): every decode step interpreted op by op."""
    os.environ["TL_COMPILE"] = "0"
    return _worker_tl(args)


# GPU scenarios: name -> (prompt tokens, generated ids). Decode scenarios time the N-1 steps after
# the first id; "prompt512" times the prefill only.
GPU_SCENARIOS = {"decode": (128, 257), "decode@2048": (2048, 65), "prompt512": (512, 1)}


def _gpu_runs(args, run_once) -> dict:
    """Median prompt/decode rates of `run_once(prompt_ids, n_ids) -> (prefill_s, decode_s, steps)`
    per scenario, after one warm-up run of each."""
    out = {}
    for name, (n_prompt, n_ids) in GPU_SCENARIOS.items():
        ids = args.long_ids[:n_prompt]
        run_once(ids, n_ids)  # warm-up
        runs = [run_once(ids, n_ids) for _ in range(args.repeat)]
        r = {"prompt_tokens": n_prompt, "prompt_tok_s": n_prompt / _median([x[0] for x in runs])}
        if n_ids > 1:
            r["decode_tokens"] = runs[0][2]
            r["decode_tok_s"] = runs[0][2] / _median([x[1] for x in runs])
        out[name] = r
    return out


def _gpu_worker_tl(args) -> dict:
    from tensorlogic.apps.llm_session import LlmSession

    t0 = time.perf_counter()
    session = LlmSession(args.model, backend=args.tl_backend, context=2048 + 72, **TL_VARIANTS[args.tl_variant])
    load_s = time.perf_counter() - t0
    ops = []

    def run_once(ids, n_ids):
        session.cached_ids = []  # prefill the whole prompt every run (no prefix reuse)
        r = session.generate(ids, n_ids, temperature=0.0, stop_at_eog=False, track_memory=True)
        steps = len(r.ids) - 1
        if steps:
            ops.append((r.memory_at_last["ops_encoded"] - r.memory_at_first["ops_encoded"]) / steps)
        return r.prompt_seconds, r.decode_seconds, steps

    result = {"load_s": load_s, "scenarios": _gpu_runs(args, run_once)}
    result["device_ops_per_token"] = min(ops) if ops else None
    return result


def _gpu_worker_llamacpp(args) -> dict:
    from llama_cpp import Llama

    t0 = time.perf_counter()
    llm = Llama(model_path=args.model, n_ctx=2048 + 72, n_gpu_layers=-1, n_batch=2048, n_ubatch=512,
                flash_attn=args.flash_attn == "on", verbose=False)
    load_s = time.perf_counter() - t0

    def run_once(ids, n_ids):
        llm.reset()
        t = time.perf_counter()
        llm.eval(ids)
        tok = _llamacpp_next(llm)
        prefill = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(n_ids - 1):
            llm.eval([tok])
            tok = _llamacpp_next(llm)
        return prefill, time.perf_counter() - t, n_ids - 1

    return {"load_s": load_s, "scenarios": _gpu_runs(args, run_once)}


WORKERS = {"tl": _worker_tl, "tl-eager": _worker_tl_eager, "llama.cpp": _worker_llamacpp, "hf": _worker_hf,
           "tl-cuda": _gpu_worker_tl, "llama.cpp-cuda": _gpu_worker_llamacpp}


def worker_main(args) -> int:
    args.prompt_ids = json.loads(args.prompt_ids_json)
    args.long_ids = args.prompt_ids
    result = WORKERS[args.worker](args)
    result["peak_rss_mib"] = _peak_rss_mib()
    print("BENCH_RESULT " + json.dumps(result), flush=True)
    return 0


# ----------------------------------------------------------------------------------- driver


def _llama_cpp_cmake_args() -> str:
    """-DGGML_NATIVE=ON, except where the CPU reports AMX: ggml's native build then runs AMX tile
    kernels, which die with a general protection fault in VMs that do not grant the tile state
    (seen on this 2-core machine: exit -11 in ggml_backend_amx_mul_mat). There it lists the CPU's
    other vector extensions instead."""
    try:
        flags = set(next(l for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("flags")).split())
    except (OSError, StopIteration):
        return "-DGGML_NATIVE=ON"
    if "amx_tile" not in flags:
        return "-DGGML_NATIVE=ON"
    isa = {"avx": "AVX", "avx2": "AVX2", "fma": "FMA", "f16c": "F16C", "bmi2": "BMI2", "avx512f": "AVX512",
           "avx512vbmi": "AVX512_VBMI", "avx512_vnni": "AVX512_VNNI", "avx512_bf16": "AVX512_BF16",
           "avx_vnni": "AVX_VNNI"}
    return " ".join(["-DGGML_NATIVE=OFF"] + [f"-DGGML_{v}=ON" for k, v in isa.items() if k in flags])


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
            env.setdefault("CMAKE_ARGS", _llama_cpp_cmake_args())
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES[peer]], check=True, env=env)
        have.append(peer)
        marker.write_text(json.dumps(have))
    return python


def run_worker(python: str, engine: str, args, prompt_ids: list[int], variant: str = "default",
               pythonpath: str | None = None) -> dict:
    cmd = [python, str(Path(__file__).resolve()), "--worker", engine, "--model", args.model,
           "--threads", str(args.threads), "--prompt-tokens", str(len(prompt_ids)),
           "--decode-tokens", str(args.decode_tokens), "--repeat", str(args.repeat),
           "--tl-variant", variant, "--prompt-ids-json", json.dumps(prompt_ids)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONUNBUFFERED="1")
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
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
    repeats = 4
    ids = tok.encode(PROMPT_TEXT * repeats, add_special=False)
    while len(ids) < n and repeats < 64:  # long contexts: the text again (same ids for every engine)
        repeats *= 2
        ids = tok.encode(PROMPT_TEXT * repeats, add_special=False)
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
    tls = [r for r in rows if r["engine"].startswith("tl") and "error" not in r]
    eager = next((r for r in tls if r["engine"] == "tl-eager"), None)
    compiled = next((r for r in tls if r["engine"] == "tl"), None)
    if eager is not None and compiled is not None:
        out.append(f"TL compiled/eager: decode {compiled['decode_tok_s'] / eager['decode_tok_s']:.2f}x")
    for tl in tls:
        for peer in rows:
            if peer["engine"].startswith("tl") or "error" in peer:
                continue
            out.append(
                f"{tl['engine']}/{peer['engine']}: decode {tl['decode_tok_s'] / peer['decode_tok_s']:.2f}x, "
                f"prompt {tl['prompt_tok_s'] / peer['prompt_tok_s']:.2f}x, "
                f"peak RSS {tl['peak_rss_mib'] / peer['peak_rss_mib']:.2f}x, "
                f"load {tl['load_s']:.2f}s vs {peer['load_s']:.2f}s")
    return out


def merge_rounds(results: list[dict]) -> dict:
    """One row from the same engine's results of several rounds: medians, plus the decode range."""
    ok = [r for r in results if "error" not in r]
    if not ok:
        return results[0]
    row = {}
    for key in ok[0]:
        vals = [r[key] for r in ok if isinstance(r.get(key), (int, float))]
        if vals and len(vals) == len(ok):
            row[key] = _median(vals)
    decode = [r["decode_tok_s"] for r in ok]
    row["decode_range"] = [min(decode), max(decode)]
    row["rounds"] = len(ok)
    return row


def run_gpu_worker(engine: str, args, ids: list[int], flash_attn: str = "off", variant: str = "default") -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", engine, "--model", args.model,
           "--repeat", str(args.repeat), "--flash-attn", flash_attn, "--tl-backend", args.tl_backend,
           "--tl-variant", variant, "--prompt-ids-json", json.dumps(ids)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if engine.startswith("llama.cpp") and args.llama_cpp_path:
        env["PYTHONPATH"] = args.llama_cpp_path + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("BENCH_RESULT "):
            return json.loads(line[len("BENCH_RESULT "):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {"error": f"{engine} worker failed (exit {proc.returncode}): " + " | ".join(tail)}


def format_gpu_table(rows: list[dict]) -> list[str]:
    head = ["engine", "decode tok/s (128 + 256)", "decode tok/s @2048", "prompt tok/s (512)",
            "load s", "peak RSS MiB", "device ops/token"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['engine']} | error: {r['error']} |")
            continue
        sc = r["scenarios"]
        ops = r.get("device_ops_per_token")
        lines.append("| " + " | ".join([
            r["engine"], f"{sc['decode']['decode_tok_s']:.1f}", f"{sc['decode@2048']['decode_tok_s']:.1f}",
            f"{sc['prompt512']['prompt_tok_s']:.0f}", f"{r['load_s']:.2f}", f"{r['peak_rss_mib']:.0f}",
            "-" if ops is None else f"{ops:.1f}"]) + " |")
    tl = next((r for r in rows if r["engine"] == "tl-cuda" and "error" not in r), None)
    peers = [r for r in rows if not r["engine"].startswith("tl-cuda") and "error" not in r]
    if tl and peers:
        for key, field, label in (("decode", "decode_tok_s", "decode"), ("decode@2048", "decode_tok_s", "decode@2048"),
                                  ("prompt512", "prompt_tok_s", "prompt 512")):
            best = max(peers, key=lambda r: r["scenarios"][key][field])
            lines.append(f"TL / best llama.cpp ({best['engine']}) {label}: "
                         f"{tl['scenarios'][key][field] / best['scenarios'][key][field]:.2f}x")
    return lines


def main_gpu(args, variants: list[str]) -> int:
    ids = prompt_ids_for(args.model, 2048)
    rows = []
    # TL's rows: --tl-variants (e.g. kv-f16, the f16 KV cache that llama.cpp uses by default)
    engines = [("tl-cuda", "off", v) for v in variants]
    if args.peers not in ("", "none"):
        engines += [("llama.cpp-cuda", "on", "default"), ("llama.cpp-cuda", "off", "default")]
    for engine, fa, variant in engines:
        name = (engine if variant == "default" else f"{engine} {variant}") if engine == "tl-cuda" else f"{engine} fa={fa}"
        print(f"bench: running {name}...", file=sys.stderr, flush=True)
        r = run_gpu_worker(engine, args, ids, fa, variant)
        r["engine"] = name
        rows.append(r)
    print(f"model: {args.model}; GPU mode, median of {args.repeat} after a warm-up; {time.strftime('%Y-%m-%d')}")
    lines = format_gpu_table(rows)
    print("\n".join(lines))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"rows": rows, "summary": lines}, indent=1))
    return 0 if all("error" not in r for r in rows) else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="GGUF path or known model name, e.g. gemma-3-270m "
                                   "(default: SmolLM2-135M-Instruct Q4_1)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--decode-tokens", type=int, default=128)
    p.add_argument("--repeat", type=int, default=3, help="timed repetitions after one warm-up (median)")
    p.add_argument("--peers", default="llama.cpp,hf", help="comma list of llama.cpp, hf; or none")
    p.add_argument("--peers-venv", default=str(Path.home() / ".cache" / "tensorlogic" / "bench-peers"))
    p.add_argument("--rounds", type=int, default=1, help="run every row this many times, interleaved (median)")
    p.add_argument("--tl-variants", default="default",
                   help=f"comma list of TL variants to run: {', '.join(TL_VARIANTS)}")
    p.add_argument("--tl-baseline", metavar="DIR",
                   help="also run the TensorLogic of another checkout (DIR/python on PYTHONPATH)")
    p.add_argument("--json", dest="json_out", help="write the results as JSON here")
    p.add_argument("--eager", action="store_true",
                   help="also run TL with compiled functions off (TL_COMPILE=0), to compare in the same run")
    p.add_argument("--gpu", action="store_true", help="GPU mode: TL CUDA against llama.cpp CUDA (see above)")
    p.add_argument("--llama-cpp-path", help="GPU mode: directory holding a CUDA build of llama_cpp")
    p.add_argument("--flash-attn", choices=["on", "off"], default="off", help=argparse.SUPPRESS)
    p.add_argument("--tl-backend", default="cuda", help="GPU mode: TL's backend (cpu for a dry run)")
    p.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    p.add_argument("--tl-variant", default="default", choices=sorted(TL_VARIANTS), help=argparse.SUPPRESS)
    p.add_argument("--prompt-ids-json", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker and args.worker.startswith("llama.cpp"):
        # Before tensorlogic (which imports numpy): numpy first segfaults llama.cpp's CUDA build.
        import llama_cpp  # noqa: F401
    from tensorlogic.models.fetch import resolve_model

    args.model = str(resolve_model(args.model))  # a path, a known name (fetched), or the default
    if args.worker:
        return worker_main(args)
    variants = [v.strip() for v in args.tl_variants.split(",") if v.strip()]
    for v in variants:
        if v not in TL_VARIANTS:
            p.error(f"unknown TL variant {v!r} (known: {', '.join(TL_VARIANTS)})")
    if args.gpu:
        return main_gpu(args, variants or ["default"])

    peers = [] if args.peers in ("", "none") else [x.strip() for x in args.peers.split(",")]
    for peer in peers:
        if peer not in PEER_PACKAGES:
            p.error(f"unknown peer {peer!r} (known: {', '.join(PEER_PACKAGES)})")
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    prompt_ids = prompt_ids_for(args.model, args.prompt_tokens)
    peer_python = str(ensure_peer_venv(Path(args.peers_venv), peers)) if peers else None

    # (label, python, engine, variant, PYTHONPATH)
    plan = [("tl" if v == "default" else f"tl {v}", sys.executable, "tl", v, None) for v in variants]
    if args.eager:
        plan.append(("tl-eager", sys.executable, "tl-eager", "default", None))
    if args.tl_baseline:
        base = str(Path(args.tl_baseline).resolve() / "python")
        plan.append(("tl@baseline", sys.executable, "tl", "default", base))
    plan += [(peer, peer_python, peer, "default", None) for peer in peers]
    results: dict[str, list[dict]] = {label: [] for label, *_ in plan}
    loads = []
    for rnd in range(args.rounds):
        for label, python, engine, variant, pythonpath in plan:
            print(f"bench: round {rnd + 1}/{args.rounds}: running {label} ({args.threads} threads)...",
                  file=sys.stderr, flush=True)
            loads.append(os.getloadavg()[0])
            r = run_worker(python, engine, args, prompt_ids, variant, pythonpath)
            results[label].append(r)
            brief = r.get("error") or (f"prompt {r['prompt_tok_s']:.1f} tok/s, decode {r['decode_tok_s']:.1f} tok/s, "
                                       f"peak RSS {r['peak_rss_mib']:.0f} MiB")
            print(f"bench: {label}: {brief}", file=sys.stderr, flush=True)
    rows = []
    for label, *_ in plan:
        r = merge_rounds(results[label])
        r.update(engine=label, threads=args.threads)
        rows.append(r)

    print(f"model: {args.model}; prompt {len(prompt_ids)} tokens, decode {args.decode_tokens} tokens, "
          f"median of {args.repeat} after a warm-up, {args.rounds} interleaved round(s) (median); "
          f"load average {min(loads):.1f}-{max(loads):.1f}; {time.strftime('%Y-%m-%d %H:%M')}")
    print(format_table(rows))
    if args.rounds > 1:
        for r in rows:
            if "decode_range" in r:
                lo, hi = r["decode_range"]
                print(f"{r['engine']}: decode tok/s over {r['rounds']} rounds {lo:.1f}-{hi:.1f}")
    for line in ratios(rows):
        print(line)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"rows": rows, "ratios": ratios(rows),
                                                   "rounds": {k: v for k, v in results.items()},
                                                   "load_average": loads}, indent=1))
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
