"""Load on `simulmt serve`: 1, 4, 16, 32 concurrent clients on loopback, in two modes, against one server process.

* fast: every client sends its whole talk at once, then "end": aggregate target words/s (all clients together);
* paced: every client sends its talk at a speaker's pace (--rate words/s): per-word lag = time a target word is
  received - time the source word it waited for was sent (its ``delay``-th word), p50 and p95.

Each client's talk is --sentences consecutive lines of --source (different lines per client). The server's CPU
seconds (user + system, from /proc) and peak resident memory are reported per run. Ratios are to the first
client count, measured in the same run.

    .venv/bin/python benchmarks/serve_load.py --source ../shared/data/multi30k/test2016.en --clients 1,4,16,32 \\
        --dtype float32 --threads 2
    ... --replicas 2 --threads 1    # two server processes of one thread each behind HAProxy (one per core)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from websockets.asyncio.client import connect

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_server(server: subprocess.Popen, port: int, seconds: float = 600) -> None:
    """Until the server on ``port`` answers /health (a server that exits or takes longer: SystemExit)."""
    deadline = time.time() + seconds
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return
        except OSError:
            if time.time() > deadline or server.poll() is not None:
                raise SystemExit("the server did not start")
            time.sleep(1)


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def proc_stats(pid: int) -> tuple[float, float]:
    """(CPU seconds, peak resident MB) of a process and its descendants (``--replicas``: the supervisor, HAProxy
    and every replica), from /proc; the peaks are summed (each replica holds its own model)."""
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = peak = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            status = Path(f"/proc/{p}/status").read_text().splitlines()
            todo += _children(p)
        except OSError:  # it exited meanwhile
            continue
        cpu += (int(fields[11]) + int(fields[12])) / ticks
        peak += next((int(line.split()[1]) for line in status if line.startswith("VmHWM:")), 0) / 1024
    return cpu, peak


async def client(url: str, words: list[str], rate: float | None, result: dict | None = None) -> dict:
    """One speaker: its words (at ``rate`` words/s, or at once), then end; the target words it got and their lags.
    ``result`` is filled as the words come (a caller that gives up early keeps what came)."""
    result = result if result is not None else {}
    result.update(words=0, lags=[])  # (reset: a fresh talk)
    sent_at: list[float] = []
    async with connect(url, max_size=None) as ws:
        async def sender():
            for word in words:
                sent_at.append(time.perf_counter())
                await ws.send(json.dumps({"type": "text", "text": word + " "}))
                if rate:
                    await asyncio.sleep(1.0 / rate)
            await ws.send(json.dumps({"type": "end"}))

        task = asyncio.create_task(sender())
        async for frame in ws:
            message = json.loads(frame)
            if message["type"] == "word":
                result["words"] += 1
                delay = message["delay"]
                if 0 < delay <= len(sent_at):
                    result["lags"].append((time.perf_counter() - sent_at[delay - 1]) * 1000.0)
        await task
    return result


async def run_load(url: str, talks: list[list[str]], rate: float | None) -> tuple[float, list[dict]]:
    start = time.perf_counter()
    results = await asyncio.gather(*(client(url, words, rate) for words in talks))
    return time.perf_counter() - start, results


def percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True)
    parser.add_argument("--clients", default="1,4,16,32")
    parser.add_argument("--sentences", type=int, default=3, help="sentences per client's talk")
    parser.add_argument("--rate", type=float, default=2.5, help="paced mode: source words per second per client")
    parser.add_argument("--modes", default="fast,paced")
    parser.add_argument("--model", default=None)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per server process")
    parser.add_argument("--replicas", type=int, default=1,
                        help="serve with --replicas N (N processes behind HAProxy; Debian's haproxy)")
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    lines = [line.strip() for line in open(args.source, encoding="utf-8") if line.strip()]
    port = free_port()
    command = [sys.executable, "-m", "simulmt.cli", "serve", "--port", str(port), "--dtype", args.dtype,
               "--max-streams", str(max(counts))] + (["--model", args.model] if args.model else []) + (
                  ["--replicas", str(args.replicas)] if args.replicas > 1 else [])
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    server = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
    try:
        wait_for_server(server, port)
        url = f"ws://127.0.0.1:{port}/v1/stream?k={args.k}"
        print(f"server: {' '.join(command[2:])} (OMP_NUM_THREADS={args.threads}); {args.sentences} sentences per "
              f"client; paced at {args.rate} words/s", flush=True)
        rows = []
        for mode in args.modes.split(","):
            for count in counts:
                talks = [" ".join(lines[(i * args.sentences + j) % len(lines)] for j in range(args.sentences)).split()
                         for i in range(count)]
                cpu0, _ = proc_stats(server.pid)
                seconds, results = asyncio.run(run_load(url, talks, args.rate if mode == "paced" else None))
                cpu1, peak = proc_stats(server.pid)
                words = sum(r["words"] for r in results)
                lags = [lag for r in results for lag in r["lags"]]
                rows.append({"mode": mode, "clients": count, "seconds": seconds, "words_per_s": words / seconds,
                             "lag_p50": percentile(lags, 50), "lag_p95": percentile(lags, 95),
                             "cpu_s": cpu1 - cpu0, "peak_mb": peak})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print("\n| mode | clients | target words/s | x first | lag p50 ms | lag p95 ms | x first p95 | server CPU s | "
          "peak RSS MB |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode in args.modes.split(","):
        mine = [r for r in rows if r["mode"] == mode]
        for r in mine:
            print(f"| {mode} | {r['clients']} | {r['words_per_s']:.2f} | {r['words_per_s'] / mine[0]['words_per_s']:.2f}"
                  f" | {r['lag_p50']:.0f} | {r['lag_p95']:.0f} | {r['lag_p95'] / max(mine[0]['lag_p95'], 1e-9):.2f}"
                  f" | {r['cpu_s']:.1f} | {r['peak_mb']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
