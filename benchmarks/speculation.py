"""What the stream's guesses save (simulmt/core/stream.py, "Guesses"), with a real model, in one run.

Every input is streamed twice, with ``Stream.speculate`` off and on, side by side; the outputs must be identical
(the script stops if a prediction differs). Prints, per configuration: LLM forward calls and wall ms per target
token, off and on, their ratio, and how many guessed tokens the layout placed::

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

from simulmt.core.policies import make_policy
from simulmt.core.stream import Stream


def _stream(make, speculate: bool):
    Stream.speculate = speculate
    try:
        start = time.perf_counter()
        session, result = make()
        return session, result, (time.perf_counter() - start) * 1000
    finally:
        Stream.speculate = True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", help="text, one sentence per line")
    parser.add_argument("--audio", help="a list of WAV files (one per line, relative to the list)")
    parser.add_argument("--lines", type=int, default=20)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--tau", type=float, default=0.5)
    parser.add_argument("--dtype", default="float16-packed")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if bool(args.source) == bool(args.audio):
        parser.error("give --source or --audio")
    torch.set_num_threads(args.threads)
    configurations, inputs = [], []
    if args.audio:
        from simulmt.speech.bench import audio_files, measure
        from simulmt.speech.model import SpeechTranslator, default_speech_model
        from simulmt.speech.translate_audio import read_audio

        speech = SpeechTranslator.load(default_speech_model(), dtype=args.dtype)
        head = speech.translator.policy_head
        inputs = [read_audio(str(f)) for f in audio_files(args.audio)[: args.lines]]
        for name, policy in ((f"speech wait-{args.k}", make_policy("wait-k", k=args.k)),
                             (f"speech learned tau={args.tau}", make_policy("learned", tau=args.tau, head=head))):
            def make(x, policy=policy):
                run, session = measure(speech, x, "interleaved", policy)
                return session.text, session.result()
            configurations.append((name, make))
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
            configurations.append((name, make))
    print(f"{len(inputs)} inputs, {args.dtype}, {torch.get_num_threads()} threads", file=sys.stderr)
    print("| configuration | target tokens | forwards / token off | on | ms / token off | on | on/off | guesses "
          "placed / fed |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, make in configurations:
        make(inputs[0])  # warm-up
        tokens = forwards_off = forwards_on = kept = guessed = 0
        ms_off = ms_on = 0.0
        for x in inputs:
            _, off, t_off = _stream(lambda: make(x), False)
            session, on, t_on = _stream(lambda: make(x), True)
            if on.prediction != off.prediction or on.delays != off.delays:
                raise SystemExit(f"{name}: guesses changed the output of {x if isinstance(x, str) else 'a clip'}: "
                                 f"{off.prediction!r} -> {on.prediction!r}")
            n = len(session.target_tokens)
            tokens += n
            forwards_off, forwards_on = forwards_off + off.forward_calls, forwards_on + on.forward_calls
            ms_off, ms_on = ms_off + t_off, ms_on + t_on
            kept, guessed = kept + on.speculated_kept, guessed + on.speculated
        print(f"| {name} | {tokens} | {forwards_off / tokens:.2f} | {forwards_on / tokens:.2f} | "
              f"{ms_off / tokens:.1f} | {ms_on / tokens:.1f} | {ms_on / ms_off:.2f} | {kept} / {guessed} |",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
