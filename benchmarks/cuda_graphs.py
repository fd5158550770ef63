"""The engine on a GPU with and without CUDA graphs (static_decoder.py), side by side in one process.

For each stream count, eager and graphs alternate on the same sentences: one untimed pass first (it records the
graphs of each shape; with graphs off it warms the kernels), then the timed pass, through a fresh engine each (the
second takes the first's store and graphs, as one-sentence sessions do). Prints target tokens/s, ms per forward,
the graphs recorded and the warm pass's seconds, and whether the two modes wrote the same words. Then one sentence
at a time through ``translate`` (a session per sentence): ms per target token, eager vs graphs.

    python benchmarks/cuda_graphs.py MODEL [--adapter A] --source FILE [--lines 32] [--streams 1,8,32]
        [--dtype bfloat16] [--device cuda] [--profile]

On a CPU (a dry run) the static-shape forward runs eagerly: the figures then say nothing about graphs.
"""

from __future__ import annotations

import argparse
import time

import torch

from simulmt.core.engine import Engine, run_batched
from simulmt.core.static_decoder import StaticDecoder
from simulmt.bench.throughput import pushed_streams


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(tr, sentences: list[str], streams: int, kwargs: dict) -> tuple[float, int, int, list[str]]:
    """(seconds, target tokens, forwards, predictions) of one pass through a fresh engine."""
    made = pushed_streams(tr, sentences, kwargs)
    engine = Engine(tr.runner)
    sync(tr.runner.device)
    start = time.perf_counter()
    run_batched(made, engine, streams)
    sync(tr.runner.device)
    return (time.perf_counter() - start, sum(len(s.target_tokens) for s in made), engine.stats.forwards,
            [s.result().prediction for s in made])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--adapter", default="auto")
    parser.add_argument("--source", required=True)
    parser.add_argument("--lines", type=int, default=32)
    parser.add_argument("--streams", default="1,8,32")
    parser.add_argument("--single", type=int, default=6, help="sentences translated one at a time")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--device", default=None)
    parser.add_argument("--profile", action="store_true",
                        help="then one more graphs pass at the last stream count under cProfile: where the host time goes")
    args = parser.parse_args()
    from simulmt.translator import Translator

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tr = Translator.load(args.model, adapter=args.adapter, dtype=args.dtype, device=device)
    sentences = [line.strip() for line in open(args.source, encoding="utf-8") if line.strip()][: args.lines]
    kwargs = dict(layout="expost", policy="wait-k", k=3)
    modes = {"eager": None, "graphs": StaticDecoder(tr.runner)}
    print(f"{args.model} on {device} ({args.dtype}), expost wait-3, {len(sentences)} sentences")
    print("| streams | mode | target tok/s | ms / forward | forwards | graphs recorded | warm pass s | same words |")
    print("|---:|---|---:|---:|---:|---:|---:|---|")
    for count in (int(c) for c in args.streams.split(",")):
        words = {}
        for name, static in modes.items():
            tr.runner.static = static
            recorded = static.recorded if static else 0
            warm = run(tr, sentences, count, kwargs)[0]
            seconds, tokens, forwards, words[name] = run(tr, sentences, count, kwargs)
            new = (static.recorded - recorded) if static else 0
            same = "" if name == "eager" else ("yes" if words["graphs"] == words["eager"] else
                                               f"{sum(a == b for a, b in zip(words['graphs'], words['eager']))}"
                                               f" of {len(sentences)}")
            print(f"| {count} | {name} | {tokens / seconds:.1f} | {seconds * 1000 / forwards:.2f} | {forwards} | "
                  f"{new} | {warm:.2f} | {same} |", flush=True)
    if args.profile:
        import cProfile
        import pstats

        tr.runner.static = modes["graphs"]
        profiler = cProfile.Profile()
        profiler.enable()
        seconds, tokens, forwards, _ = run(tr, sentences, count, kwargs)
        profiler.disable()
        print(f"\ncProfile, graphs, {count} streams: {seconds * 1000 / forwards:.2f} ms per forward (profiled)")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(22)
    print(f"\none sentence at a time (a session each), {args.single} sentences, after one untimed:")
    for name, static in modes.items():
        tr.runner.static = static
        tr.translate(sentences[0], **kwargs)
        sync(tr.runner.device)
        start, tokens = time.perf_counter(), 0
        for text in sentences[1: 1 + args.single]:
            stream = tr.new_stream(**kwargs)
            stream.push(text.split(), finished=True)
            run_batched([stream], Engine(tr.runner), 1)
            tokens += len(stream.target_tokens)
        sync(tr.runner.device)
        print(f"  {name}: {(time.perf_counter() - start) * 1000 / tokens:.2f} ms per target token ({tokens} tokens)")


if __name__ == "__main__":
    main()
