"""Soak benchmark of `tl serve` (not a test): starts a server (or drives --url), keeps --clients
concurrent clients sending chat completions for --minutes, and reports request latency and
time-to-first-token percentiles, throughput, errors, and the server's RSS sampled over time (it
should stay flat: no leak per request).

Every client loops: a chat request (streamed every other time) with one of a few prompts, a
random max_tokens in [--min-tokens, --max-tokens], temperature 0 or 0.8; every 10th request of a
client is cancelled after its first chunk (a disconnect mid-stream), and every 25th is a bad
request that must get a 4xx. Only requests that completed count in the latency figures.

    python bench/serve_soak.py [--minutes 10] [--clients 4] [--model PATH|NAME] [--threads 2]
                               [--parallel N] [--context N] [--fast]
                               [--min-tokens 8] [--max-tokens 48] [--url http://HOST:PORT] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["What is the capital of France?", "Write a short poem about the sea.",
           "Explain what a tensor is in two sentences.", "List three fruits.",
           "Tell me a story about a dragon who learns to cook."]


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.latency: list[float] = []
        self.ttft: list[float] = []
        self.tokens = 0
        self.counts: dict[str, int] = {}

    def count(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n


def client_loop(url: str, idx: int, stop_at: float, args, stats: Stats) -> None:
    rng = random.Random(idx)
    n = 0
    with httpx.Client(base_url=url, timeout=300) as c:
        while time.time() < stop_at:
            n += 1
            try:
                if n % 25 == 0:
                    r = c.post("/v1/chat/completions", json={"messages": "not a list"})
                    stats.count("bad_request_4xx" if 400 <= r.status_code < 500 else "bad_request_WRONG")
                    continue
                body = {"messages": [{"role": "user", "content": rng.choice(PROMPTS)}],
                        "max_tokens": rng.randint(args.min_tokens, args.max_tokens),
                        "temperature": rng.choice([0.0, 0.8]), "seed": rng.randrange(1 << 30)}
                stream = n % 2 == 0 or n % 10 == 0
                started = time.perf_counter()
                if not stream:
                    r = c.post("/v1/chat/completions", json=body)
                    if r.status_code != 200:
                        stats.count(f"http_{r.status_code}")
                        continue
                    done = time.perf_counter()
                    with stats.lock:
                        stats.latency.append(done - started)
                        stats.tokens += r.json()["usage"]["completion_tokens"]
                    stats.count("ok")
                    continue
                body["stream"] = True
                body["stream_options"] = {"include_usage": True}
                first = None
                with c.stream("POST", "/v1/chat/completions", json=body) as r:
                    if r.status_code != 200:
                        r.read()
                        stats.count(f"http_{r.status_code}")
                        continue
                    usage = None
                    for line in r.iter_lines():
                        if not line.startswith("data: ") or line == "data: [DONE]":
                            continue
                        if first is None:
                            first = time.perf_counter()
                            if n % 10 == 0:
                                break  # disconnect mid-stream
                        obj = json.loads(line[6:])
                        if obj.get("usage"):
                            usage = obj["usage"]
                if n % 10 == 0:
                    stats.count("disconnected")
                    continue
                done = time.perf_counter()
                with stats.lock:
                    stats.latency.append(done - started)
                    if first is not None:
                        stats.ttft.append(first - started)
                    stats.tokens += usage["completion_tokens"] if usage else 0
                stats.count("ok")
            except (httpx.HTTPError, KeyError, ValueError) as e:
                stats.count(f"client_error_{type(e).__name__}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--parallel", type=int, default=None, help="the server's --parallel (continuous batching)")
    ap.add_argument("--fast", action="store_true", help="the server's --fast (8-bit activations)")
    ap.add_argument("--context", type=int, default=None, help="the server's --context")
    ap.add_argument("--min-tokens", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--sample-every", type=float, default=None, help="seconds between RSS samples "
                                                                     "(default: 1/10 of the run)")
    ap.add_argument("--url", default=None, help="drive a running server instead of starting one")
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args()

    proc = None
    log = None
    url = args.url
    if url is None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT / "python"), env.get("PYTHONPATH", "")] if p)
        cmd = [sys.executable, "-m", "tensorlogic", "serve", "--port", "0", "--max-queue", str(4 * args.clients)]
        if args.model:
            cmd += ["--model", args.model]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        if args.parallel:
            cmd += ["--parallel", str(args.parallel)]
        if args.fast:
            cmd.append("--fast")
        if args.context:
            cmd += ["--context", str(args.context)]
        log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            m = re.search(r"on http://([^/]+)/v1", Path(log.name).read_text())
            if m:
                url = f"http://{m.group(1)}"
                break
            time.sleep(0.2)
        if url is None:
            print(Path(log.name).read_text(), file=sys.stderr)
            return 1
    pid = proc.pid if proc else None
    print(f"soak: {args.clients} clients for {args.minutes:g} min against {url}", file=sys.stderr)
    stats = Stats()
    started = time.time()
    stop_at = started + args.minutes * 60
    threads = [threading.Thread(target=client_loop, args=(url, i, stop_at, args, stats), daemon=True)
               for i in range(args.clients)]
    for t in threads:
        t.start()
    every = args.sample_every or max(5.0, args.minutes * 6)
    samples: list[tuple[float, float]] = []
    try:
        while any(t.is_alive() for t in threads):
            if pid:
                samples.append((time.time() - started, _rss_mib(pid)))
                print(f"  t={samples[-1][0]:6.0f} s  RSS {samples[-1][1]:7.1f} MiB  ok {stats.counts.get('ok', 0)}",
                      file=sys.stderr)
            for t in threads:
                t.join(timeout=every / max(1, len(threads)))
        if pid:
            samples.append((time.time() - started, _rss_mib(pid)))
        health = httpx.get(url + "/health", timeout=30).json()
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    elapsed = time.time() - started
    lat, ttft = stats.latency, stats.ttft
    figures = {
        "minutes": args.minutes, "clients": args.clients, "requests": stats.counts,
        "completed_per_s": round(len(lat) / elapsed, 2), "generated_tok_per_s": round(stats.tokens / elapsed, 1),
        "latency_s": {p: round(_pct(lat, p), 3) for p in (50, 90, 99)} | {"max": round(max(lat, default=0), 3)},
        "ttft_s": {p: round(_pct(ttft, p), 3) for p in (50, 90, 99)},
        "rss_mib": " ".join(f"{t:.0f}s:{r:.1f}" for t, r in samples),
        "server_health": health,
    }
    if samples:
        warm = [r for t, r in samples if t >= min(30.0, elapsed / 4)] or [r for _, r in samples]
        figures["rss_growth_after_warmup_mib"] = round(warm[-1] - warm[0], 1)
    print(json.dumps(figures, indent=1, default=str))
    print(f"latency p50/p90/p99 {figures['latency_s'][50]}/{figures['latency_s'][90]}/{figures['latency_s'][99]} s; "
          f"first token p50/p90/p99 {figures['ttft_s'][50]}/{figures['ttft_s'][90]}/{figures['ttft_s'][99]} s; "
          f"{figures['completed_per_s']} req/s, {figures['generated_tok_per_s']} tok/s; "
          f"RSS {samples[0][1] if samples else float('nan'):.0f} -> {samples[-1][1] if samples else float('nan'):.0f} MiB",
          file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1, default=str) + "\n")
    bad = {k: v for k, v in stats.counts.items() if k not in ("ok", "disconnected", "bad_request_4xx")}
    if bad:
        print(f"soak: unexpected outcomes: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
