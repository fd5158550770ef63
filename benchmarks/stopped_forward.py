"""What a forward stopped at a policy head's layer costs against a whole one (simulmt/core/layer_split.py).

    python benchmarks/stopped_forward.py [--model gemma-3-270m] [--dtype float16-packed] [--threads 2]

One cache row holding ``--cached`` tokens; forwards of 1, 4 and 8 new tokens, whole (with the LM head on the last
row), split at ``--layer`` and going on, and stopped there. Rounds alternate the cases; prints the median ms and
the ratio to the whole forward of the same tokens.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--adapter", default="none")
    parser.add_argument("--dtype", default="float16-packed")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--layer", type=int, default=4)
    parser.add_argument("--cached", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from simulmt.core.batch_cache import BatchKVCache
    from simulmt.translator import Translator

    runner = Translator.load(args.model, args.adapter, dtype=args.dtype).runner
    cache = BatchKVCache()
    cache.add_row()
    p = args.cached
    q = cache.prepare([0], [p], torch.zeros(p, dtype=torch.bool))
    with torch.inference_mode():
        runner.forward_packed(torch.arange(100, 100 + p), torch.arange(p), torch.tril(torch.ones(p, p).bool()), q,
                              torch.tensor([p - 1]), cache)

    def forward(n: int, layer: int | None, stop: bool) -> None:
        q = cache.prepare([0], [n], torch.zeros(n, dtype=torch.bool))
        with torch.inference_mode():
            runner.forward_packed(torch.arange(200, 200 + n), torch.arange(p, p + n), torch.ones(n, p + n).bool(), q,
                                  torch.tensor([n - 1]), cache, True, features_layer=layer,
                                  stop=(lambda f: True) if stop else None)
        cache.crop(0, p)
    cases = [(f"{n} new: {name}", n, layer, stop) for n in (1, 4, 8)
             for name, layer, stop in (("whole", None, False), (f"split at {args.layer}, goes on", args.layer, False),
                                       (f"stopped after layer {args.layer}", args.layer, True))]
    times: dict[str, list[float]] = {c[0]: [] for c in cases}
    for _ in range(args.rounds):
        for name, n, layer, stop in cases:
            start = time.perf_counter()
            for _ in range(args.repeats):
                forward(n, layer, stop)
            times[name].append((time.perf_counter() - start) / args.repeats * 1000)
    print(f"{args.model} {args.dtype}, {args.threads} threads, {len(runner.layers)} layers, {p} cached tokens")
    print("| forward | median ms | vs whole |\n|---|---:|---:|")
    for name, n, _, _ in cases:
        whole = statistics.median(times[f"{n} new: whole"])
        ms = statistics.median(times[name])
        print(f"| {name} | {ms:.2f} | {ms / whole:.2f}x |")


if __name__ == "__main__":
    main()
