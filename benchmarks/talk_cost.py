"""What a talk costs per sentence over an hour, per layout and context window (simulmt.core.talk).

A talk of ``--sentences`` sentences (600: about an hour at 150 words a minute) is streamed as one ``Talk`` on a
zero-cost forward (engine_cost.py's: the logits peak on a scripted German text, so every run writes the same kind
of output; the tokenizer and vocabulary are the model's; the script is read by position, so layouts that place
the target at other positions write other words: the words per sentence are printed). Counted per sentence: the
tokens the model computes (``tokens_fed``: what a real forward would cost, the context's recomputation included),
the most tokens the cache row held, and the host time; each over the first and the last tenth of the talk, so a
cost that grows with the talk shows.

    python benchmarks/talk_cost.py [--sentences 600] [--layouts expost,prefix,conversation,gpe] [--model DIR]

Without context a sentence computes its source and target (the prompt stays in the row); with context it also
computes the newest pair once (as context) and, at each eviction (every few sentences), the whole window again.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from engine_cost import SOURCE, translator_for


def talk_words(sentences: int) -> list[str]:
    """Sentences of 12 to 28 words of SOURCE, each ending with a period."""
    words = []
    for i in range(sentences):
        sentence = SOURCE[: 12 + (i * 7) % 17]
        words += sentence[:-1] + [sentence[-1] + "."]
    return words


def run(tr, layout: str, window, sentences: int) -> dict:
    from simulmt.core.engine import Engine
    from simulmt.core.session import DecodeConfig

    talk = tr.new_talk(layout, "wait-k", k=3, window=window, phi=2048,
                       config=DecodeConfig()) if layout == "gpe" else tr.new_talk(layout, "wait-k", k=3, window=window)
    engine = Engine(tr.runner)
    engine.add(talk)
    talk.push(talk_words(sentences), finished=True)
    rows, seconds, marks = [], [], [time.perf_counter()]
    longest = 0
    while engine.streams:
        engine.step()
        if engine.streams:
            longest = max(longest, int(engine.cache.lengths[0]))
        while len(marks) <= len(talk.sentences):
            marks.append(time.perf_counter())
            rows.append(longest)
            longest = 0
    seconds = [b - a for a, b in zip(marks, marks[1:])]
    parts = talk.sentences
    tenth = max(1, len(parts) // 10)

    def mean(xs):
        return sum(xs) / len(xs)

    return dict(first_tokens=mean([p.tokens_fed for p in parts[:tenth]]),
                last_tokens=mean([p.tokens_fed for p in parts[-tenth:]]),
                all_tokens=mean([p.tokens_fed for p in parts]), row=max(rows),
                first_ms=mean(seconds[:tenth]) * 1e3, last_ms=mean(seconds[-tenth:]) * 1e3,
                words=sum(len(p.prediction.split()) for p in parts), errors=sum(bool(p.error) for p in parts))


def main() -> None:
    from simulmt.core.talk import ContextWindow

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=600)
    parser.add_argument("--layouts", default="expost,prefix,conversation,gpe")
    parser.add_argument("--model", default=str(Path.home() / ".cache/simulmt/models/gemma-3-270m"),
                        help="tokenizer and vocabulary of this model ('tiny': the tests' tokenizer)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tr, _ = translator_for(None if args.model == "tiny" else args.model)
    words = len(talk_words(args.sentences))
    print(f"talk cost: {args.sentences} sentences, {words} source words (~{words / 150:.0f} min at 150 words/min), "
          f"zero-cost forward, vocab {tr.runner.compute.vocab}, wait-3")
    print(f"{'layout':<14}{'context':<22}{'words/sent':>11}{'tokens/sentence':>16}{'first 10%':>11}{'last 10%':>10}"
          f"{'row max':>9}{'ms/sent first':>15}{'last':>7}{'errors':>8}")
    for layout in args.layouts.split(","):
        for window in (ContextWindow(0), ContextWindow(3, 384)):
            r = run(tr, layout, window, args.sentences)
            print(f"{layout:<14}{window.describe():<22}{r['words'] / args.sentences:>11.1f}"
                  f"{r['all_tokens']:>16.1f}{r['first_tokens']:>11.1f}"
                  f"{r['last_tokens']:>10.1f}{r['row']:>9d}{r['first_ms']:>15.1f}{r['last_ms']:>7.1f}"
                  f"{r['errors']:>8d}")


if __name__ == "__main__":
    main()
