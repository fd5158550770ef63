"""What each host-side saving of one stream's decoding is worth, measured side by side in one run.

    python benchmarks/host_savings.py [--model gemma-3-270m] [--adapter gemma-3-270m-interleaved-en-de]
        [--source FILE] [--lines 20] [--layout interleaved] [--k 3] [--dtype float16-packed] [--threads 2]

Three switches, each off and on with the others on, over the same sentences (wait-k, one stream at a time, the
whole sentence given at once, as `simulmt translate` of a file does), alternating which goes first per sentence:

* ``fused``: the model's RMSNorms and gated MLPs fused (``simulmt.core.fused_layers``, ``Translator.load(fuse=)``);
* ``inference_mode``: the engine serves its forwards in ``torch.inference_mode`` instead of ``torch.no_grad``
  (``Engine.inference_mode``);
* ``read_ahead``: a READ whose source is at hand is fed in the forward of the word's last token (``Execution.read_ahead``).

Each must leave the output unchanged (checked: predictions and delays); the script prints wall ms and forwards per
target token, off and on, and the ratio on/off. Pin the threads and keep other jobs off the cores.
"""

from __future__ import annotations

import argparse
import time

import torch

BUILT_IN = ["A man in an orange hat starring at something.",
            "A Boston Terrier is running on lush green grass in front of a white fence.",
            "A girl in karate uniform breaking a stick with a front kick.",
            "Five people wearing winter jackets and helmets stand in the snow, with snowmobiles in the background.",
            "People are fixing the roof of a house.",
            "A man in light colored clothing photographs a group of men wearing dark suits and hats standing around "
            "a woman dressed in a strapless gown."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--adapter", default="gemma-3-270m-interleaved-en-de")
    parser.add_argument("--source", default=None, help="one sentence a line (default: six built-in captions)")
    parser.add_argument("--lines", type=int, default=20)
    parser.add_argument("--layout", default="interleaved")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--dtype", default="float16-packed")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from dataclasses import replace
    from simulmt.translator import Translator

    lines = (open(args.source, encoding="utf-8").read().splitlines() if args.source else BUILT_IN)[: args.lines]
    lines = [line for line in lines if line.strip()]
    fused = Translator.load(args.model, args.adapter, dtype=args.dtype)
    plain = Translator.load(args.model, args.adapter, dtype=args.dtype, fuse=False)
    fused.translate(lines[0], layout=args.layout, policy="wait-k", k=args.k)  # warm-up
    plain.translate(lines[0], layout=args.layout, policy="wait-k", k=args.k)

    def run(translator, inference_mode: bool, read_ahead: bool, line: str):
        saved = translator.runner.execution
        translator.runner.execution = replace(saved, inference_mode=inference_mode, read_ahead=read_ahead)
        try:
            start = time.perf_counter()
            result = translator.translate(line, layout=args.layout, policy="wait-k", k=args.k)
            return time.perf_counter() - start, result
        finally:
            translator.runner.execution = saved

    switches = {"fused": lambda on, line: run(fused if on else plain, True, True, line),
                "inference_mode": lambda on, line: run(fused, on, True, line),
                "read_ahead": lambda on, line: run(fused, True, on, line)}
    print(f"{fused.name}, {fused.dtype}, {args.layout} wait-{args.k}, {len(lines)} sentences, "
          f"{torch.get_num_threads()} threads")
    print("| saving | ms / target token off | on | on / off | forwards / target token off | on |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, measure in switches.items():
        seconds, forwards, tokens = [0.0, 0.0], [0, 0], [0, 0]
        for i, line in enumerate(lines):
            results = {}
            for on in ((False, True) if i % 2 else (True, False)):
                wall, result = measure(on, line)
                results[on] = result
                seconds[on] += wall
                forwards[on] += result.forward_calls
                tokens[on] += max(1, len(fused.tokenizer(result.prediction, add_special_tokens=False)["input_ids"]))
            if (results[True].prediction, results[True].delays) != (results[False].prediction, results[False].delays):
                raise SystemExit(f"{name} changed the output of {line!r}: {results[False].prediction!r} -> "
                                 f"{results[True].prediction!r}")
        ms = [seconds[i] * 1000 / tokens[i] for i in (0, 1)]
        print(f"| {name} | {ms[0]:.1f} | {ms[1]:.1f} | {seconds[1] / seconds[0]:.3f} | "
              f"{forwards[0] / tokens[0]:.3f} | {forwards[1] / tokens[1]:.3f} |")


if __name__ == "__main__":
    main()
