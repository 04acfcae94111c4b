"""In-process cost of one batched decode step (stdlib/batch.tl's model_decode_batch, what
`tl serve --parallel` runs per token) for B rows against one row, with exact or 8-bit (--fast)
activations (not a test). Each run is its own process (the compiled step records the kernels of
its mode); runs alternate the modes and row counts, so load from other jobs falls on all of them.

    python bench/decode_steps.py [--rows 1 8] [--steps 24] [--repeats 3] [--model PATH|NAME]
                                 [--modes exact fast] [--threads N] [--kv-dtype f32 f16] [--prompt 12]

Prints, per mode, KV cache dtype and row count, the median ms per step over the runs (each run's figure is its
median step after a warm-up step that records), tokens/s (B / step time), and the ratio of B rows'
tokens/s to one row's.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["The capital of France is", "Once upon a time, there was", "def main():", "1, 2, 3, 4,",
           "The quick brown fox", "In 1492, Columbus", "Water boils at", "My favourite colour is"]


def _one_run(model: str | None, fast: bool, rows: int, steps: int, kv_dtype: str = "f32",
             prompt_tokens: int = 12) -> float:
    """Median ms per step of `rows` rows (in this process), each row's prompt `prompt_tokens` long
    (its text repeated), so the steps attend over prompt_tokens.. prompt_tokens + steps keys."""
    sys.path.insert(0, str(ROOT / "python"))
    from tensorlogic.apps.llm_session import STDLIB_DIR, LlmSession
    from tensorlogic.builtins.kvcache import SlotStore
    from tensorlogic.interp.deep_stack import run_deep

    with LlmSession(model or "smollm2-135m-instruct", context=prompt_tokens + steps + 64, fast=fast,
                    kv_dtype=kv_dtype) as s:
        interp = s.interp
        interp.load_file(str(STDLIB_DIR / "batch.tl"))
        f = interp.functions
        cfg = s.config
        store = SlotStore(rows, cfg.n_layers, prompt_tokens + steps + 32, cfg.n_kv_heads, cfg.head_dim, kv_dtype)
        prompts = []
        for b in range(rows):
            ids = s.raw_prompt_ids(PROMPTS[b % len(PROMPTS)])
            prompts.append((ids * (prompt_tokens // len(ids) + 1))[:prompt_tokens])
        for b, p in enumerate(prompts):
            interp.call_value(f["prefill_piece"], [s.model, store.cache(b), p, 0])
        tokens = [p[-1] for p in prompts]
        positions = [len(p) for p in prompts]
        times: list[float] = []

        def steps_loop(tokens: list, positions: list) -> None:
            for step in range(steps + 1):
                start = time.perf_counter()
                # under --fast (LlmSession(fast=True): row limit 0) every product takes the 8-bit path
                logits = interp.call_value(f["model_decode_batch"], [s.model, store, list(range(rows)), tokens, positions])
                ids = logits.numpy().reshape(rows, -1).argmax(axis=1)
                if step > 0:  # the first call records the compiled step
                    times.append(time.perf_counter() - start)
                tokens = [int(t) for t in ids]
                positions = [p + 1 for p in positions]

        # on one deep-stack thread, as the server's worker (from the main thread every call would
        # start a thread of its own: ~1 ms a step that a served step does not pay)
        run_deep(steps_loop, tokens, positions)
    return 1000 * statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", default=None)
    ap.add_argument("--modes", nargs="+", choices=["exact", "fast"], default=["exact", "fast"])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--kv-dtype", nargs="+", choices=["f32", "f16"], default=["f32"],
                    help="the KV cache dtypes to run (each a row of the report)")
    ap.add_argument("--prompt", type=int, default=12, help="prompt tokens per row before the steps (default 12)")
    ap.add_argument("--run", nargs=2, help=argparse.SUPPRESS)  # internal: MODE ROWS, one run in this process
    args = ap.parse_args()
    if args.run:
        print(json.dumps(_one_run(args.model, args.run[0] == "fast", int(args.run[1]), args.steps,
                                  args.kv_dtype[0], args.prompt)))
        return 0
    env = dict(os.environ)
    if args.threads:
        env["TL_THREADS"] = str(args.threads)
    ms: dict[tuple[str, int], list[float]] = {}
    modes = [(m, kv) for m in args.modes for kv in args.kv_dtype]
    for _ in range(args.repeats):
        for mode, kv in modes:
            for rows in args.rows:
                cmd = [sys.executable, __file__, "--run", mode, str(rows), "--steps", str(args.steps),
                       "--kv-dtype", kv, "--prompt", str(args.prompt)]
                if args.model:
                    cmd += ["--model", args.model]
                r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
                if r.returncode != 0:
                    print(r.stderr, file=sys.stderr)
                    return 1
                ms.setdefault((mode, kv, rows), []).append(json.loads(r.stdout.strip().splitlines()[-1]))
    print(f"load average {os.getloadavg()[0]:.2f}")
    for mode, kv in modes:
        one = statistics.median(ms[(mode, kv, args.rows[0])])
        for rows in args.rows:
            m = statistics.median(ms[(mode, kv, rows)])
            runs = ", ".join(f"{v:.1f}" for v in ms[(mode, kv, rows)])
            print(f"{mode:5s} kv {kv} rows {rows}: {m:6.1f} ms/step ({runs}), {1000 * rows / m:6.1f} tokens/s, "
                  f"{(rows / m) / (args.rows[0] / one):.2f}x {args.rows[0]} row(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
