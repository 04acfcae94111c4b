"""How fast the compiled decode step runs when the host never waits for it: N calls of
`model_decode_step` with a fixed token at successive positions and no read in between (one read at
the end), against the same loop with the greedy id read after each step (what generation does).
The first is bounded by the device (or by the host's call overhead, whichever is slower); the gap
between the two is the time the device waits for the host each token. Then whole generations (greedy,
the same ids either way): the loop that picks each id on the device and queues the next step before
reading it (generate.tl's generate_greedy_ahead, the default) against the loop that reads each id
before queuing the next step (what a sampler choosing on the host gets), interleaved.

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

        class HostGreedy(SamplerValue):  # overrides sample alone: generate reads each id first
            def __init__(self):
                super().__init__(0.0, 0, 1.0, lambda: None)

            def sample(self, logits):
                return super().sample(logits)

        prompt = list(range(3, 131))
        ids = {}
        for rnd in range(2):
            for name, sampler in (("picked ahead", None), ("read first", HostGreedy())):
                s.cached_ids = list(prompt)  # the prompt stays cached: decode only
                kw = {} if sampler is None else {"sampler": sampler}
                r = s.generate(prompt + [7], a.steps, temperature=0.0, stop_at_eog=False, **kw)
                ids.setdefault(name, r.ids)
                print(f"round {rnd}: generate, {name}: {r.decode_tok_s:.1f} tok/s")
        print("same ids:", ids["picked ahead"] == ids["read first"])
    _core.shutdown()


if __name__ == "__main__":
    main()
