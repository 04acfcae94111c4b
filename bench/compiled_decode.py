"""Decode speed of TL with compiled functions on and off (TL_COMPILE=0), in one run.

Each engine runs in its own process: load the model, prefill a prompt, then greedy-decode N tokens
through `LlmSession.generate` (the `tl generate` path) after a warm-up; decode tokens/s is the median
over --repeat runs of (N - 1) / (time of the last token - time of the first). Also checks that both
produce the same ids. Model: a GGUF path, or `generated` for a SmolLM2-shaped 30-layer Q4_1 model
(random weights; for machines without the real file, such as the GPU machine).

  PYTHONPATH=python python bench/compiled_decode.py --backend cpu --decode-tokens 128
  PYTHONPATH=python python bench/compiled_decode.py --backend cuda --model generated
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = """
import json, sys
from tensorlogic.apps.llm_session import LlmSession
model, backend, n_prompt, n_new, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
with LlmSession(model, backend=backend, context=n_prompt + n_new + 8) as s:
    prompt = [3 + (i * 37) % (s.config.vocab_size - 3) for i in range(n_prompt)]
    rates, ids = [], None
    for i in range(repeat + 1):
        s.cached_ids = []
        r = s.generate(prompt, n_new, stop_at_eog=False)
        if i:
            rates.append(r.decode_tok_s)
        ids = r.ids
    fn = s.interp.functions["model_decode_step"].impl
    print("RESULT " + json.dumps({"rates": rates, "ids": ids, "records": getattr(fn, "records", 0),
                                  "replays": getattr(fn, "replays", 0)}))
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="GGUF path, or 'generated' (default: the cached SmolLM2)")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--decode-tokens", type=int, default=128)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    model = args.model
    if model == "generated":
        from tensorlogic.models.testing import write_tiny_llama

        model = os.path.join(tempfile.mkdtemp(), "smollm2_shaped.gguf")
        write_tiny_llama(model, n_layers=30, d_model=576, n_heads=9, n_kv_heads=3, d_ff=1536,
                         context_length=4096, rope_base=100000.0, weight_type="Q4_1",
                         embedding_type="Q8_0", seed=3)
    elif model is None:
        from tensorlogic.models.fetch import default_model_path

        model = str(default_model_path())
    results = {}
    for name, env in (("compiled", {}), ("eager", {"TL_COMPILE": "0"})):
        proc = subprocess.run([sys.executable, "-c", CHILD, model, args.backend, str(args.prompt_tokens),
                               str(args.decode_tokens), str(args.repeat)],
                              capture_output=True, text=True, env={**os.environ, **env}, timeout=900)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if proc.returncode != 0 or line is None:
            print(f"{name}: failed: {proc.stderr[-1500:]}")
            return 1
        results[name] = json.loads(line[len("RESULT "):])
    c, e = results["compiled"], results["eager"]
    mc, me = statistics.median(c["rates"]), statistics.median(e["rates"])
    print(f"model {os.path.basename(model)}, backend {args.backend}, prompt {args.prompt_tokens}, "
          f"decode {args.decode_tokens} tokens, median of {args.repeat} after a warm-up")
    print(f"| TL | decode tok/s | runs |\n|---|---|---|\n| compiled | {mc:.1f} | "
          f"{', '.join(f'{r:.1f}' for r in c['rates'])} |\n| eager (TL_COMPILE=0) | {me:.1f} | "
          f"{', '.join(f'{r:.1f}' for r in e['rates'])} |")
    print(f"compiled/eager: {mc / me:.2f}x; ids equal: {c['ids'] == e['ids']}; "
          f"recordings {c['records']}, replays {c['replays']}")
    return 0 if c["ids"] == e["ids"] else 1


if __name__ == "__main__":
    sys.exit(main())
