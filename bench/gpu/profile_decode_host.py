"""Where the host's time goes while a model decodes (the interpreter thread, cProfile): per generated
token, the compiled step's call (`compiled.__call__`, of which `_core.replay` submits the recording),
the sampler's reads (`_core.item`: mostly waiting for the device) and the rest of the TL loop. On a
GPU, host time outside the waits is time the device may sit idle between tokens.

    python3 bench/gpu/profile_decode_host.py MODEL.gguf [--backend cuda] [--tokens 64]
"""
import argparse
import contextlib
import cProfile
import pstats
import sys
import threading
import time


@contextlib.contextmanager
def interpreter_thread_profile():
    """A cProfile.Profile of the threads started inside the block (the interpreter runs a call on a
    thread of its own, deep_stack), from each one's first event."""
    prof = cProfile.Profile()

    def start(*_):
        sys.setprofile(None)
        prof.enable()
    threading.setprofile(start)
    try:
        yield prof
    finally:
        threading.setprofile(None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--tokens", type=int, default=64)
    a = ap.parse_args()
    from tensorlogic import _core
    from tensorlogic.apps.llm_session import LlmSession

    prompt = list(range(3, 131))
    with LlmSession(a.model, backend=a.backend, context=len(prompt) + a.tokens + 16) as s:
        s.generate(prompt, 8, temperature=0.0, stop_at_eog=False)  # recording made, warm
        s.cached_ids = list(prompt)
        with interpreter_thread_profile() as prof:
            t = time.perf_counter()
            r = s.generate(prompt + [7], a.tokens, temperature=0.0, stop_at_eog=False)
            wall = time.perf_counter() - t
        n = len(r.ids)
        print(f"{n} tokens, {1e6 * wall / n:.0f} us per token (decode {r.decode_tok_s:.1f} tok/s)")
        stats = pstats.Stats(prof)
        rows = []
        for (file, line, name), (cc, nc, tt, ct, _) in stats.stats.items():
            rows.append((tt, ct, nc, f"{file.split('/')[-1]}:{line}({name})" if file != "~" else name))
        waits = ("_core.item", "_core.numpy", "_core.replay", "acquire")
        python = sum(r[0] for r in rows if not any(w in r[3] for w in waits))
        print(f"host time per token outside the native calls that wait (item, numpy, replay, locks): "
              f"{1e6 * python / n:.0f} us (under cProfile)")
        print("per token: tottime us | cumtime us | calls | function")
        for tt, ct, nc, label in sorted(rows, reverse=True)[:22]:
            print(f"  {1e6 * tt / n:9.1f} | {1e6 * ct / n:9.1f} | {nc / n:6.1f} | {label}")
    _core.shutdown()


if __name__ == "__main__":
    main()
