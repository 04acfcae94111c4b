"""Greedy ids of a long prompt on the CUDA backend against the CPU backend's, for a real model: the
prefill kernels (tiled attention past a sliding window, cuBLAS products) and the compiled decode
step on CUDA must choose the CPU's tokens. Each backend runs in its own process.

    python3 bench/gpu/check_long_prompt.py MODEL.gguf [--tokens 900] [--new 32]

Prints both id lists' agreement and exits 1 when they differ.
"""
import argparse
import json
import subprocess
import sys

TEXT = ("The history of the lighthouse begins with fires lit on hills to guide ships home. Later, "
        "towers of stone carried lamps of oil, then of gas, and lenses focused their light into beams "
        "that reached far across the water. Keepers lived beside them, trimming wicks and winding the "
        "clockwork that turned the lens through every night of storm and calm. ")


def run(model: str, backend: str, tokens: int, new: int) -> list:
    from tensorlogic import _core
    from tensorlogic.apps.llm_session import LlmSession

    with LlmSession(model, backend=backend, context=tokens + new + 8) as s:
        ids = []
        while len(ids) < tokens:
            ids += s.raw_prompt_ids(TEXT)
        r = s.generate(ids[:tokens], new, temperature=0.0, stop_at_eog=False)
        out = list(r.ids)
    _core.shutdown()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=900)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--backend", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.backend:
        print(json.dumps(run(a.model, a.backend, a.tokens, a.new)))
        return
    got = {}
    for backend in ("cpu", "cuda"):
        p = subprocess.run([sys.executable, __file__, a.model, "--tokens", str(a.tokens), "--new", str(a.new),
                            "--backend", backend], capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            sys.exit(f"{backend}: {p.stderr[-1500:]}")
        got[backend] = json.loads(p.stdout.strip().splitlines()[-1])
    same = next((i for i, (x, y) in enumerate(zip(got["cpu"], got["cuda"])) if x != y), None)
    print(f"{a.tokens}-token prompt, {a.new} greedy ids: cpu {got['cpu'][:8]}..., cuda {got['cuda'][:8]}...")
    if same is None and len(got["cpu"]) == len(got["cuda"]):
        print("OK: the CUDA backend's greedy ids equal the CPU backend's")
    else:
        print(f"DIFFER from id {same}")
        sys.exit(1)


if __name__ == "__main__":
    main()
