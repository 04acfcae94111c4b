"""Where a TL process's resident memory comes from on a backend, stage by stage: the interpreter
alone, `import tensorlogic`, the backend started, the model loaded, a generation run. Prints
VmRSS / VmHWM and the anonymous, file-backed and shared parts (/proc/self/status) after each
stage, then the mappings holding the most resident memory (/proc/self/smaps), so a peak RSS
figure can be traced to the CUDA context, cuBLAS, TL's own library, Python or the weights.

    python3 bench/gpu/rss_breakdown.py MODEL.gguf [--backend cuda] [--tokens 64] [--top 15]
"""
import argparse
import collections


def status() -> dict:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                out[k] = int(v.split()[0]) / 1024.0
    return out


def show(stage: str) -> None:
    s = status()
    print(f"{stage:<28}" + "  ".join(f"{k} {v:7.1f}" for k, v in s.items()) + "  (MiB)", flush=True)


def top_mappings(n: int) -> None:
    per = collections.Counter()
    name = None
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            if "-" in parts[0] and not parts[0].endswith(":"):
                name = parts[5] if len(parts) > 5 else "[anonymous]"
            elif parts[0] == "Rss:":
                per[name] += int(parts[1])
    print(f"largest resident mappings (MiB, of {sum(per.values()) / 1024:.1f}):")
    for k, v in per.most_common(n):
        print(f"  {v / 1024:8.1f}  {k}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    show("interpreter")
    import numpy  # noqa: F401  (bench/llm.py's process has it too)
    show("numpy imported")
    from tensorlogic import _core
    from tensorlogic.apps.llm_session import LlmSession
    show("tensorlogic imported")
    _core.init(a.backend)
    show(f"{a.backend} backend started")
    with LlmSession(a.model, backend=a.backend, context=512) as s:
        show("model loaded")
        ids = [3 + (i * 7919) % (s.config.vocab_size - 3) for i in range(128)]
        s.generate(ids, 1, temperature=0.0, stop_at_eog=False)
        show("128-token prompt + 1")
        s.generate(ids + [5, 6], 2, temperature=0.0, stop_at_eog=False)
        show("+ 2 (the decode step recorded)")
        s.generate(ids + [7, 8], 4, temperature=0.0, stop_at_eog=False)
        show("+ 4 (replayed, captured)")
        s.generate(ids, a.tokens, temperature=0.0, stop_at_eog=False)
        show(f"128 + {a.tokens} generated")
        stats = getattr(_core, "memory_stats", None)
        if stats is not None:
            print("runtime memory:", stats(), flush=True)
        top_mappings(a.top)


if __name__ == "__main__":
    main()
