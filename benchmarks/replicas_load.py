"""Load on `simulmt serve --replicas N` behind HAProxy: aggregate target words/s for 1 replica vs N, same clients.

Each configuration is started fresh (the supervisor, its replicas and HAProxy), warmed up with one client, then
--clients clients send their whole talk at once (serve_load.py's fast mode) through the balancer's port. The
cores are split between the replicas (OMP threads = --threads / replicas), so on one machine the comparison says
what N smaller processes give against one process with all the cores. Ratios are to the first --replicas value,
measured in the same run.

    .venv/bin/python benchmarks/replicas_load.py --source ../shared/data/multi30k/test2016.en --replicas 1,2 \\
        --clients 16 --threads 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_load import free_port, run_load  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def start(replicas: int, args, port: int, folder: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "simulmt", "serve", "--port", str(port), "--dtype", args.dtype,
               "--max-streams", str(max(args.clients, 1))] + (["--model", args.model] if args.model else []) \
        + (["--adapter", args.adapter] if args.adapter else [])
    if replicas > 1:
        command += ["--replicas", str(replicas), "--balancer-dir", str(folder / f"lb{replicas}")]
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, args.threads // replicas))}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
    deadline = time.time() + 900
    while True:
        try:
            ready = [urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200]
            if replicas > 1:
                ready += [urllib.request.urlopen(f"http://127.0.0.1:{port}/replicas/{i}/health", timeout=2).status
                          == 200 for i in range(1, replicas + 1)]
            if all(ready):
                time.sleep(2.0)  # HAProxy's checks mark every replica up
                return process
        except OSError:
            pass
        if time.time() > deadline or process.poll() is not None:
            raise SystemExit(f"simulmt serve --replicas {replicas} did not start")
        time.sleep(1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True)
    parser.add_argument("--replicas", default="1,2")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--sentences", type=int, default=2, help="sentences per client's talk")
    parser.add_argument("--model", default=None)
    parser.add_argument("--adapter", default=None)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=2, help="cores in all, split between the replicas")
    args = parser.parse_args()
    lines = [line.strip() for line in open(args.source, encoding="utf-8") if line.strip()]
    talks = [" ".join(lines[(i * args.sentences + j) % len(lines)] for j in range(args.sentences)).split()
             for i in range(args.clients)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="simulmt-replicas-") as tmp:
        for replicas in (int(r) for r in args.replicas.split(",")):
            port = free_port()
            process = start(replicas, args, port, Path(tmp))
            try:
                url = f"ws://127.0.0.1:{port}/v1/stream?k={args.k}"
                asyncio.run(run_load(url, talks[:1], None))  # warm-up
                seconds, results = asyncio.run(run_load(url, talks, None))
            finally:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=120)
            words = sum(r["words"] for r in results)
            rows.append({"replicas": replicas, "threads_each": max(1, args.threads // replicas),
                         "clients": args.clients, "seconds": round(seconds, 2), "target_words": words,
                         "words_per_s": round(words / seconds, 2)})
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{args.clients} clients x {args.sentences} sentences, fast mode, {args.dtype}, {args.threads} cores in all\n"
          "\n| replicas | threads each | target words/s | x first |\n|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['replicas']} | {r['threads_each']} | {r['words_per_s']:.2f} | "
              f"{r['words_per_s'] / rows[0]['words_per_s']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
