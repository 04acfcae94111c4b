"""Device operations (kernel launches and stream copies) per decoded token of the TL Llama
forward pass (stdlib/llama.tl) on the CUDA backend. Generates N1 and N2 tokens in two fresh
processes with TL_CUDA_LAUNCH_STATS=1 (the backend prints its totals when destroyed) and divides
the differences by N2 - N1. Model: argv[1], else a generated SmolLM2-shaped 30-layer GGUF."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

CHILD = """
import gc, sys
from tensorlogic import _core
from tensorlogic.apps.llm_session import LlmSession
with LlmSession(sys.argv[1], backend="cuda", context=256) as s:
    s.generate(list(range(3, 43)), int(sys.argv[2]), stop_at_eog=False)
gc.collect()
_core.shutdown()
"""


def main() -> int:
    if len(sys.argv) > 1:
        model = sys.argv[1]
    else:
        from tensorlogic.models.testing import write_tiny_llama

        model = os.path.join(tempfile.mkdtemp(), "smollm2_shaped.gguf")
        write_tiny_llama(model, n_layers=30, d_model=576, n_heads=9, n_kv_heads=3, d_ff=1536,
                         context_length=512, rope_base=100000.0, weight_type="Q4_1",
                         embedding_type="Q8_0", seed=3)
    totals = {}
    for n in (8, 40):
        p = subprocess.run([sys.executable, "-c", CHILD, model, str(n)], capture_output=True, text=True,
                           env={**os.environ, "TL_CUDA_LAUNCH_STATS": "1"}, timeout=300)
        m = re.search(r"tl-cuda: (\d+) device operations .* in (\d+) command buffers", p.stderr)
        if p.returncode != 0 or not m:
            print(json.dumps({"launches_per_token": None, "stderr": p.stderr[-800:]}))
            return 1
        totals[n] = (int(m.group(1)), int(m.group(2)))
    steps = 40 - 8
    print(json.dumps({"launches_per_token": {
        "model": os.path.basename(model),
        "device_ops_per_token": round((totals[40][0] - totals[8][0]) / steps, 1),
        "command_buffers_per_token": round((totals[40][1] - totals[8][1]) / steps, 2)}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
