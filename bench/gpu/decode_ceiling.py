"""How fast the compiled decode step runs when the host never waits for it: N calls of
`model_decode_step` with a fixed token at successive positions and no read in between (one read at
the end), against the same loop with the greedy id read after each step (what generation does).
The first is bounded by the device (or by the host's call overhead, whichever is slower); the gap
between the two is the time the device waits for the host each token.

    python3 bench/gpu/decode_ceiling.py MODEL.gguf [--steps 256] [--backend cuda]
"""
import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--backend", default="cuda")
    a = ap.parse_args()
    from tensorlogic import _core
    from tensorlogic.apps.llm_session import LlmSession
    from tensorlogic.builtins.sampling import SamplerValue

    with LlmSession(a.model, backend=a.backend, context=128 + 2 * a.steps + 16) as s:
        step = s.interp.functions["model_decode_step"]
        greedy = SamplerValue.seeded(0.0, 0, 1.0, 0)
        s.generate(list(range(3, 131)), 2, temperature=0.0, stop_at_eog=False)  # prefill, warm recording

        def run(read_each: bool, start: int) -> float:
            t = time.perf_counter()
            logits = None
            tok = 5
            for i in range(a.steps):
                logits = s.interp.call_value(step, [s.model, s.cache, tok, start + i])
                if read_each:
                    tok = greedy.sample(logits)
            greedy.sample(logits)
            return a.steps / (time.perf_counter() - t)

        for rnd in range(2):
            free = run(False, 129)
            synced = run(True, 129)
            print(f"round {rnd}: no read between steps {free:.1f} steps/s; greedy id read after each "
                  f"{synced:.1f} steps/s; device waits {1e6 * (1 / synced - 1 / free):.0f} us per token")
    _core.shutdown()


if __name__ == "__main__":
    main()
