"""What the stream's guesses save (simulmt/core/stream.py, "Guesses"), with a real model, in one run.

Every input is streamed four times side by side: guesses off (``Execution.speculate``), the draft alone
(``Execution.alternatives = 0``, the default), the draft with the read-ahead that places a moved token again
(``Execution.moved_guesses``, opt-in: expost's deferral), and the draft with alternatives (``--alternatives``, 2
here); the outputs must be identical (the script stops if a prediction differs). Prints, per configuration: LLM forward calls and wall
ms per target token in each run, the ratio of the last to off, and how many guessed tokens the layout placed::

    .venv/bin/python benchmarks/speculation.py --source ../shared/data/multi30k/test2016.en --lines 20
    .venv/bin/python benchmarks/speculation.py --audio runs/s16/test2016/test300.list --lines 20   # speech

Text runs use the shipped interleaved adapter (wait-k and its learned policy head) and expost (wait-k); speech
runs the shipped speech model, fed one block at a time as a live stream. Pin threads (``--threads``): the
timings are ratios measured in the same process, alternating off and on per input.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from dataclasses import replace

from simulmt.core.policies import make_policy


def _stream(make, runner, speculate: bool, alternatives: int, moved: bool = False):
    saved = runner.execution
    runner.execution = replace(saved, speculate=speculate, alternatives=alternatives, moved_guesses=moved)
    try:
        start = time.perf_counter()
        session, result = make()
        return session, result, (time.perf_counter() - start) * 1000
    finally:
        runner.execution = saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", help="text, one sentence per line")
    parser.add_argument("--audio", help="a list of WAV files (one per line, relative to the list)")
    parser.add_argument("--lines", type=int, default=20)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--tau", type=float, default=0.5)
    parser.add_argument("--dtype", default="float16-packed")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--alternatives", type=int, default=2)
    parser.add_argument("--only", default="", help="only the configurations whose name holds this (e.g. expost)")
    args = parser.parse_args(argv)
    if bool(args.source) == bool(args.audio):
        parser.error("give --source or --audio")
    torch.set_num_threads(args.threads)
    configurations, inputs = [], []
    if args.audio:
        from simulmt.bench.speech import audio_files, measure
        from simulmt.speech.model import SpeechTranslator, default_speech_model
        from simulmt.speech.wav import read_audio

        speech = SpeechTranslator.load(default_speech_model(), dtype=args.dtype)
        head = speech.translator.policy_head
        inputs = [read_audio(str(f)) for f in audio_files(args.audio)[: args.lines]]
        for name, policy in ((f"speech wait-{args.k}", make_policy("wait-k", k=args.k)),
                             (f"speech learned tau={args.tau}", make_policy("learned", tau=args.tau, head=head))):
            def make(x, policy=policy):
                run, session = measure(speech, x, "interleaved", policy)
                return session.text, session.result()
            configurations.append((name, make, speech.translator.runner))
    else:
        from simulmt.translator import Translator

        lines = [line.strip() for line in open(args.source, encoding="utf-8") if line.strip()][: args.lines]
        inputs = lines
        interleaved = Translator.load("gemma-3-270m", adapter="gemma-3-270m-interleaved-en-de", dtype=args.dtype)
        expost = Translator.load("gemma-3-270m", adapter="gemma-3-270m-expost-kmix-en-de", dtype=args.dtype)
        for name, tr, layout, policy in (
                (f"interleaved wait-{args.k}", interleaved, "interleaved", make_policy("wait-k", k=args.k)),
                (f"interleaved learned tau={args.tau}", interleaved, "interleaved",
                 make_policy("learned", tau=args.tau, head=interleaved.policy_head)),
                (f"expost wait-{args.k}", expost, "expost", make_policy("wait-k", k=args.k))):
            def make(x, tr=tr, layout=layout, policy=policy):
                session = tr.session(layout, policy)
                return session, session.run(x)
            configurations.append((name, make, tr.runner))
    configurations = [c for c in configurations if args.only in c[0]]
    print(f"{len(inputs)} inputs, {args.dtype}, {torch.get_num_threads()} threads", file=sys.stderr)
    runs = (("off", False, 0, False), ("draft", True, 0, False), ("+ moved guesses", True, 0, True),
            (f"+{args.alternatives} alternatives", True, args.alternatives, False))
    print(f"| configuration | target tokens | forwards / token: {' | '.join(r[0] for r in runs)} | ms / token: "
          f"{' | '.join(r[0] for r in runs)} | last / off | guesses placed / fed: "
          f"{' | '.join(r[0] for r in runs[1:])} |")
    print("|---|---:" + "|---:" * (2 * len(runs) + 1 + len(runs) - 1) + "|")
    for name, make, runner in configurations:
        make(inputs[0])  # warm-up
        tokens = 0
        forwards, ms, kept, guessed = ([0.0] * len(runs) for _ in range(4))
        for x in inputs:
            outputs = []
            for i, (_, speculate, alternatives, moved) in enumerate(runs):
                session, result, t = _stream(lambda: make(x), runner, speculate, alternatives, moved)
                outputs.append(result)
                forwards[i] += result.forward_calls
                ms[i] += t
                kept[i] += result.speculated_kept
                guessed[i] += result.speculated
            off = outputs[0]
            for on in outputs[1:]:
                if on.prediction != off.prediction or on.delays != off.delays:
                    raise SystemExit(f"{name}: guesses changed the output of "
                                     f"{x if isinstance(x, str) else 'a clip'}: {off.prediction!r} -> "
                                     f"{on.prediction!r}")
            tokens += len(session.target_tokens)
        print(f"| {name} | {tokens} | " + " | ".join(f"{f / tokens:.2f}" for f in forwards) + " | "
              + " | ".join(f"{m / tokens:.1f}" for m in ms) + f" | {ms[-1] / ms[0]:.2f} | "
              + " | ".join(f"{int(k)} / {int(g)}" for k, g in zip(kept[1:], guessed[1:])) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
