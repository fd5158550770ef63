"""Where a forward's time goes, by op (torch.profiler): a few sentences through the engine on a real-sized model.

    python benchmarks/profile_engine.py MODEL [--adapter DIR] [--device cuda] [--dtype bfloat16] [--source FILE]

Prints the ops with the most host (self CPU) time (totals over the run), then per forward the calls and host time
of the ops that copy or synchronise (on a GPU: host-device transfers and waits). On a lent H200 the engine spent
~45 ms per forward of Gemma-3-270M, far above the GPU's arithmetic; this table says which host work that is.
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--adapter", default="none")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--source", default=None, help="source lines (default: two built-in sentences)")
    parser.add_argument("--sentences", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=1, help="streams advanced together")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--rows", type=int, default=18)
    parser.add_argument("--no-fuse", action="store_true", help="keep the model's own norms and MLPs (fused_layers.py)")
    args = parser.parse_args()
    from torch.profiler import ProfilerActivity, profile

    if args.threads:
        torch.set_num_threads(args.threads)

    from simulmt.translator import Translator

    tr = Translator.load(args.model, adapter=args.adapter, device=args.device, dtype=args.dtype,
                         fuse=not args.no_fuse)
    lines = (open(args.source, encoding="utf-8").read().splitlines() if args.source else
             ["A man in a blue shirt is standing on a ladder cleaning windows.",
              "Two young girls are playing soccer in a green field."])[: args.sentences]
    tr.translate_many(lines[:2], batch_size=2, layout="expost", policy="wait-k", k=3)  # warm-up
    calls, forward = [0], tr.runner.forward_packed

    def counted(*a, **kw):  # the engine's one model call per round, whatever the number of streams
        calls[0] += 1
        return forward(*a, **kw)

    tr.runner.forward_packed = counted
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if tr.runner.device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        results = tr.translate_many(lines, batch_size=args.batch_size, layout="expost", policy="wait-k", k=3)
        wall = time.perf_counter() - start
    forwards = max(1, calls[0])
    tokens = sum(len(r.prediction.split()) for r in results)
    events = prof.key_averages()
    ops = sum(e.count for e in events if e.key.startswith("aten::") or e.key.startswith("quantized::"))
    print(f"{tr.name} on {tr.runner.device} ({args.dtype}{', not fused' if args.no_fuse else ''}), "
          f"{args.batch_size} stream(s): {forwards} forwards, {wall * 1000 / forwards:.1f} ms each under the "
          f"profiler, {ops / forwards:.0f} torch ops each, {tokens} target words")
    print(events.table(sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=48))
    for name in ("cudaStreamSynchronize", "cudaDeviceSynchronize", "aten::_local_scalar_dense", "aten::item",
                 "cudaMemcpyAsync", "cudaLaunchKernel", "aten::copy_", "aten::to"):
        hits = [e for e in events if e.key == name]
        if hits:
            print(f"{name:32s} {hits[0].count / forwards:8.1f} per forward, "
                  f"{hits[0].self_cpu_time_total / 1000 / forwards:6.2f} ms host per forward")


if __name__ == "__main__":
    main()
