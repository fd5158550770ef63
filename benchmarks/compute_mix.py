"""What the engine computes per target token, against the plain batched loop, in one run.

Issue 40's CPU target compares the engine with many streams to a plain batched greedy loop of the same model
(``simulmt bench --streams``). On a CPU both are bound by their matrix products, so the ratio the engine can reach is
set by what it computes per target token: the plain loop computes one token and one row of the LM head; the engine
also computes the source, the layout's markers, the tokens a layout places again (expost's last target token after
each read), guesses, and a row of logits at every place a decision needs one (a word's end is known from the next
token's proposal). This script counts those, by role, with a wrapper around the runner's packed forward, and prints
the multiply-adds per target token of both loops (``ComputeModel``: parameters per token, the LM head per row; the
attention's pairs are left out, a few percent on short sentences), their tokens/s, and their multiply-adds per
second: the engine's own efficiency beside the plain loop's.

    python benchmarks/compute_mix.py [--source FILE] [--lines 64] [--streams 16] [--threads 1] [--dtype float16-packed]

Each configuration runs twice, alternating (``guess_rows``: the service's CPU setting, a forward of 16 rows or more
feeds no guesses).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import torch

import simulmt.core.engine as engine_module
from simulmt.bench.throughput import plain_decode, pushed_streams
from simulmt.core.engine import Engine, run_batched
from simulmt.core.execution import Execution, tune_collector
from simulmt.translator import Translator

DEFAULT_SOURCE = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k" / "test2016.en"


class Tally:
    """Counts what each packed forward computes: tokens by role (the engine's ``_columns`` sees every fed token)
    and rows of logits (the runner's answer)."""

    def __init__(self, runner):
        self.roles: Counter = Counter()
        self.head_rows = 0
        self.forwards = 0
        columns, forward = engine_module._columns, runner.forward_packed

        def counted_columns(tokens):
            self.roles.update(t.role.value for t in tokens)
            return columns(tokens)

        def counted_forward(queries, cache, wants):
            out = forward(queries, cache, wants)
            self.forwards += 1
            self.head_rows += 0 if out[0] is None else out[0].shape[0]
            return out

        engine_module._columns = counted_columns
        runner.forward_packed = counted_forward

    def clear(self) -> None:
        self.roles.clear()
        self.head_rows = self.forwards = 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default=str(DEFAULT_SOURCE))
    parser.add_argument("--lines", type=int, default=64)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="float16-packed")
    parser.add_argument("--layout", default="expost")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--moved-guesses", action="store_true", help="Execution.moved_guesses on (opt-in)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tune_collector()
    lines = [line.strip() for line in open(args.source, encoding="utf-8")][:args.lines]
    translator = Translator.load(dtype=args.dtype, execution=Execution(moved_guesses=args.moved_guesses))
    options = dict(layout=args.layout, policy="wait-k", k=args.k)
    compute = translator.runner.compute
    macs = lambda tokens, rows: compute.flops(tokens, 0, rows) / 2  # noqa: E731
    plain_macs = macs(1, 1)
    tally = Tally(translator.runner)
    translator.translate_many(lines[:2], batch_size=2, **options)  # warm-up
    print(f"{args.layout} wait-{args.k}, {len(lines)} lines, {args.streams} streams, {args.dtype}, "
          f"{args.threads} thread(s){', moved guesses' if args.moved_guesses else ''}; multiply-adds per token "
          f"{macs(1, 0) / 1e6:.0f}M, per LM head row "
          f"{macs(0, 1) / 1e6:.0f}M")
    for run in (1, 2):
        for guess_rows in (None, 16):
            tally.clear()
            streams = pushed_streams(translator, lines, options)
            engine = Engine(translator.runner, guess_rows=guess_rows)
            start = time.perf_counter()
            run_batched(streams, engine, args.streams)
            seconds = time.perf_counter() - start
            target = sum(len(s.target_tokens) for s in streams)
            tokens = sum(tally.roles.values())
            per_target = macs(tokens, tally.head_rows) / target
            roles = " ".join(f"{role} {n / target:.2f}" for role, n in sorted(tally.roles.items()))
            print(f"run {run}, guess_rows {guess_rows}: {target / seconds:.1f} target tok/s, {tally.forwards} "
                  f"forwards, per target token {tokens / target:.2f} tokens ({roles}; {engine.stats.shared_tokens} "
                  f"prompt tokens copied), {tally.head_rows / target:.2f} LM head rows, {per_target / 1e6:.0f}M "
                  f"multiply-adds ({per_target / plain_macs:.2f}x the plain loop's); "
                  f"{target * per_target / seconds / 1e9:.1f} G multiply-adds/s")
        plain = plain_decode(translator.model, args.streams)
        print(f"run {run}, plain loop, {args.streams} rows: {plain:.1f} tok/s, 1 token and 1 LM head row per token, "
              f"{plain_macs / 1e6:.0f}M multiply-adds; {plain * plain_macs / 1e9:.1f} G multiply-adds/s")


if __name__ == "__main__":
    main()
