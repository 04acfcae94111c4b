"""Load benchmark of `tl serve --parallel N` (not a test): one client alone, then --clients concurrent
streaming clients, against one server; reports generated tokens/s and time to first token (p50) of
each phase and their ratios (issue #26's targets: tokens/s >= 3x, TTFT p50 <= 2x), and the
second-turn TTFT of a chat whose first turn is in the prompt cache against the first turn's.

Every request is a streamed chat completion at temperature 0 (or --temperature, seeded) with
max_tokens --tokens, its prompt made unique (a request number) so that only the chat template's
shared opening is reused from the prompt cache; generated tokens are the usage's completion_tokens (stream_options.include_usage).
The concurrent clients start --stagger seconds apart and then loop, as independent users would,
each with a connection pool of its own (httpx.Client, as an OpenAI client keeps one);
besides the whole phase's tokens/s the many-client phase reports them over the window in which all
clients are active (from the last client's first request to the first client's last answer), and
its ratio to one client's.
Each phase also reports CPU seconds (Linux): the server's (when this script started it), the
clients' (this process), and other processes' over the phase, so that a run on a shared machine
shows what else took the cores; the clients share the cores with the server, as the issue's
measurement has it.

    python bench/serve_batch.py [--parallel 8] [--clients 8] [--requests 3] [--tokens 64] [--stagger 0.25]
                                [--temperature 0] [--fast] [--kv-dtype f32|f16] [--model PATH|NAME] [--context 4096] [--url http://HOST:PORT]
                                [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
TOPICS = ["a dragon who learns to cook", "the history of the bicycle", "a robot lost in a city",
          "why the sky is blue", "a journey across the ocean", "the life of a honey bee",
          "a lighthouse keeper's night", "how bread is made"]


TEMPERATURE = 0.0  # --temperature: 0 is greedy; above it every request samples (seeded by its number)


def _stream(client: httpx.Client, url: str, messages: list, tokens: int, seed: int = 0,
            events: list | None = None) -> tuple[float, float, int, dict]:
    """(time to first token, total time, completion tokens, usage) of one streamed chat request;
    `events`, when given, gets the time (perf_counter) of each chunk of text that arrived. `client`:
    the user's connection pool (an OpenAI client keeps one: its keep-alive connection is reused, and
    no TLS context is built per request, which cost the clients ~4 % of the 2 cores' time here)."""
    body = {"messages": messages, "max_tokens": tokens, "temperature": TEMPERATURE, "stream": True,
            "stream_options": {"include_usage": True}}
    if TEMPERATURE > 0:
        body["seed"] = seed
    start = time.perf_counter()
    first = None
    usage: dict = {}
    text = []
    with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                usage = event["usage"]
            for choice in event.get("choices", []):
                piece = choice.get("delta", {}).get("content")
                if piece:
                    text.append(piece)
                    if events is not None:
                        events.append(time.perf_counter())
                    if first is None:
                        first = time.perf_counter() - start
    total = time.perf_counter() - start
    usage["text"] = "".join(text)
    return (first if first is not None else total), total, usage.get("completion_tokens", 0), usage


def _cpu_seconds(server_pid: int | None) -> dict | None:
    """CPU seconds so far (Linux /proc; None elsewhere): the server process's (every thread: the
    kernels', the worker's, the event loop's), this process's (the clients' threads), and the whole
    machine's busy time, from which _phase reports what other processes took during a phase."""
    try:
        hz = os.sysconf("SC_CLK_TCK")
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        busy = (sum(fields) - fields[3] - fields[4]) / hz  # all but idle and iowait
        server = None
        if server_pid is not None:
            stat = Path(f"/proc/{server_pid}/stat").read_text().rsplit(")", 1)[1].split()
            server = (int(stat[11]) + int(stat[12])) / hz  # utime + stime
    except (OSError, ValueError, IndexError):
        return None
    me = resource.getrusage(resource.RUSAGE_SELF)
    return {"server": server, "clients": me.ru_utime + me.ru_stime, "busy": busy}


def _cpu_report(before: dict | None, after: dict | None, wall: float) -> dict | None:
    """A phase's CPU seconds: the server's, the clients', other processes' (a shared machine's other
    jobs: a run where they took much is not comparable), and the cores' capacity over the phase."""
    if before is None or after is None:
        return None
    server = after["server"] - before["server"] if before["server"] is not None else None
    clients = after["clients"] - before["clients"]
    other = after["busy"] - before["busy"] - clients - (server or 0.0)
    return {"server_s": round(server, 2) if server is not None else None, "clients_s": round(clients, 2),
            "other_processes_s": round(other, 2) if server is not None else None,
            "capacity_s": round(wall * (os.cpu_count() or 1), 2)}


SERVER_PID: int | None = None  # the server this script started (its CPU is reported), else None


def _phase(url: str, clients: int, requests: int, tokens: int, tag: str, stagger: float = 0.0) -> dict:
    ttft: list[float] = []
    generated = [0]
    lock = threading.Lock()

    spans: list[tuple[int, list[float]]] = []  # per request: its completion tokens, its chunks' times
    began = [0.0] * clients  # when each client sent its first request
    ended = [0.0] * clients  # when each client's last request finished

    def client(c: int) -> None:
        time.sleep(c * stagger)  # clients arrive one after the other, not all in the same instant
        began[c] = time.perf_counter()
        with httpx.Client(timeout=600) as session:
            for i in range(requests):
                topic = TOPICS[(c + i) % len(TOPICS)]
                msg = [{"role": "user", "content": f"Request {tag}-{c}-{i}. Write a long story about {topic}."}]
                events: list[float] = []
                t, _, n, _ = _stream(session, url, msg, tokens, seed=1000 * c + i, events=events)
                with lock:
                    ttft.append(t)
                    generated[0] += n
                    spans.append((n, events))
        ended[c] = time.perf_counter()

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    cpu = _cpu_seconds(SERVER_PID)
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    # While every client is in its request loop (from the last one's first request to the first
    # one's last answer): the staggered arrivals and the uneven finish left out. A request's tokens
    # count in proportion to its chunks of text that arrived inside that window.
    lo, hi = max(began), min(ended)
    inside = sum(n * sum(lo <= e <= hi for e in ev) / len(ev) for n, ev in spans if ev)
    steady = {"window_s": round(hi - lo, 2), "tokens_per_s": round(inside / (hi - lo), 1)} if hi > lo else None
    return {"clients": clients, "requests": clients * requests, "generated_tokens": generated[0],
            "seconds": round(wall, 2), "tokens_per_s": round(generated[0] / wall, 1), "all_clients_active": steady,
            "ttft_p50_ms": round(1000 * statistics.median(ttft), 1),
            "ttft_max_ms": round(1000 * max(ttft), 1),
            "cpu": _cpu_report(cpu, _cpu_seconds(SERVER_PID), wall)}


def _server_counters(url: str, before: dict | None = None, wall: float = 0.0) -> dict:
    """The batched server's step and prefill counters (/health), or with `before` what the phase
    added: its decode steps, mean rows a step, seconds in steps and in prefill (from the rounded
    per-step and per-token means) and their share of the phase's `wall` seconds."""
    h = httpx.get(url + "/health", timeout=30).json().get("slots", {})
    now = {"steps": h.get("decode_steps", 0), "rows": h.get("mean_batch", 0.0) * h.get("decode_steps", 0),
           "decode_s": h.get("decode_ms_per_step", 0.0) * h.get("decode_steps", 0) / 1000,
           "prefill_tokens": h.get("prefill_tokens", 0),
           "prefill_s": h.get("prefill_ms_per_token", 0.0) * h.get("prefill_tokens", 0) / 1000}
    if before is None:
        return now
    d = {k: now[k] - before[k] for k in now}
    steps = max(d["steps"], 1)
    return {"steps": d["steps"], "mean_batch": round(d["rows"] / steps, 2),
            "ms_per_step": round(1000 * d["decode_s"] / steps, 1), "prefill_tokens": d["prefill_tokens"],
            "prefill_ms_per_token": round(1000 * d["prefill_s"] / max(d["prefill_tokens"], 1), 2),
            "decode_share": round(d["decode_s"] / wall, 2) if wall else None,
            "prefill_share": round(d["prefill_s"] / wall, 2) if wall else None}


def _chat_turns(url: str, tokens: int, repeats: int = 3) -> dict:
    """First turn (a long system prompt, nothing cached) and second turn (the first in the cache),
    each conversation one user's, through one client (its connection kept, as the phases' clients)."""
    system = ("You are a careful assistant for a small library. " * 12).strip()
    first, second = [], []
    u2: dict = {}
    with httpx.Client(timeout=600) as client:
        for r in range(repeats):
            turn1 = [{"role": "system", "content": f"[{r}] {system}"},
                     {"role": "user", "content": "Recommend a book about the sea and say why in two sentences."}]
            t1, _, _, u1 = _stream(client, url, turn1, tokens)
            turn2 = turn1 + [{"role": "assistant", "content": u1["text"]},
                             {"role": "user", "content": "And one about mountains?"}]
            t2, _, _, u2 = _stream(client, url, turn2, tokens)
            first.append(t1)
            second.append(t2)
    m1, m2 = statistics.median(first), statistics.median(second)
    return {"first_turn_ttft_ms": round(1000 * m1, 1), "second_turn_ttft_ms": round(1000 * m2, 1),
            "ratio": round(m2 / m1, 3), "second_turn_prompt_tokens": u2.get("prompt_tokens"),
            "second_turn_cached_tokens": (u2.get("prompt_tokens_details") or {}).get("cached_tokens")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=3, help="requests per client in each phase")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--stagger", type=float, default=0.25,
                    help="seconds between two clients' first requests (default 0.25)")
    ap.add_argument("--model", default=None)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="every request's temperature (default 0: greedy; the chat turns stay greedy)")
    ap.add_argument("--fast", action="store_true", help="start the server with --fast (8-bit activations)")
    ap.add_argument("--kv-dtype", choices=["f32", "f16"], default=None, help="the server's --kv-dtype (default: its own)")
    ap.add_argument("--url", default=None, help="a running server (then --parallel, --model, --fast are its own)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    global TEMPERATURE, SERVER_PID

    proc = None
    url = args.url
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    if url is None:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
        cmd = [sys.executable, "-m", "tensorlogic", "serve", "--port", "0", "--parallel", str(args.parallel),
               "--context", str(args.context), "--max-queue", "64"]
        if args.model:
            cmd += ["--model", args.model]
        if args.fast:
            cmd.append("--fast")
        if args.kv_dtype:
            cmd += ["--kv-dtype", args.kv_dtype]
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        SERVER_PID = proc.pid
        deadline = time.time() + 300
        while True:
            m = re.search(r"on http://127\.0\.0\.1:(\d+)/v1", Path(log.name).read_text())
            if m:
                url = f"http://127.0.0.1:{m.group(1)}"
                break
            if proc.poll() is not None or time.time() > deadline:
                print(Path(log.name).read_text(), file=sys.stderr)
                return 1
            time.sleep(0.2)
    try:
        TEMPERATURE = args.temperature
        _phase(url, 1, 1, 8, "warm")  # the first decode step records the compiled step
        _phase(url, args.clients, 1, 8, "warm8")
        one = _phase(url, 1, args.requests, args.tokens, "one")
        before = _server_counters(url)
        many = _phase(url, args.clients, args.requests, args.tokens, "many", args.stagger)
        many["server"] = _server_counters(url, before, many["seconds"])
        TEMPERATURE = 0.0
        turns = _chat_turns(url, 16)
        health = httpx.get(url + "/health", timeout=30).json()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    out = {"parallel": args.parallel, "fast": args.fast, "kv_dtype": args.kv_dtype, "temperature": args.temperature, "one_client": one, "many_clients": many,
           "tokens_per_s_ratio": round(many["tokens_per_s"] / one["tokens_per_s"], 2),
           # the 8 clients' rate while all of them are active, against one client's whole phase
           "all_active_tokens_per_s_ratio": round(many["all_clients_active"]["tokens_per_s"] / one["tokens_per_s"], 2)
           if many["all_clients_active"] else None,
           "ttft_p50_ratio": round(many["ttft_p50_ms"] / one["ttft_p50_ms"], 2),
           "chat_turns": turns, "slots": {k: v for k, v in health.get("slots", {}).items() if k != "slots"}}
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
