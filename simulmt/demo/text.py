"""``simulmt demo``: stream a few English sentences into German and show every read and every write as it happens.

The source arrives one word at a time (a live session: ``push`` one word, ``advance``), so each READ is shown when
the policy takes the word in and each WRITE when the target word is complete, with its delay (source words read
when the word was started).
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from simulmt.errors import SimulmtError

SENTENCES = (
    "The cat is sleeping on the sofa.",
    "We are going to the cinema tonight.",
    "My sister works in a small bakery in Hamburg.",
    "Please close the window because it is getting cold.",
)

LAYOUT, SLOT = "expost", 16


def _console(out: TextIO):
    from rich.console import Console

    # colours only on a terminal; no wrapping or highlighting of model output
    return Console(file=out, highlight=False, soft_wrap=True, emoji=False)


def run_demo(translator, *, k: int = 3, fine_tuned: bool = False, out: TextIO | None = None) -> int:
    from rich.markup import escape

    console = _console(out or sys.stdout)
    model = translator.name or type(translator.model).__name__
    console.print(f"[bold]model[/]   {escape(model)}")
    if fine_tuned:
        console.print(f"[bold]adapter[/] {escape(str(getattr(translator, 'adapter', '')))}")
    console.print(f"[bold]layout[/]  {LAYOUT} (slot {SLOT}): source positions are reserved ahead, the cache is reused")
    console.print(f"[bold]policy[/]  wait-k, k={k}: target word j is written once {k} + j - 1 source words are read")
    console.print(f"[bold]task[/]    English -> German, greedy decoding on {translator.runner.device} "
                  f"({translator.dtype} weights); the source arrives word by word")
    if not fine_tuned:
        console.print("[bold yellow]NOTE:[/] no adapter: this is the base model, NOT fine-tuned for simultaneous "
                      "translation, so the translations will be poor. Without --adapter, the adapter shipped for "
                      "the model is used when there is one; --adapter DIR loads your own.")
    console.print()

    totals = {"words": 0, "target": 0, "fed": 0, "generated": 0, "seconds": 0.0}
    failures = 0
    for number, sentence in enumerate(SENTENCES, 1):
        console.print(f"[bold][{number}/{len(SENTENCES)}][/] {escape(sentence)}")
        words = sentence.split()
        session = translator.session(LAYOUT, "wait-k", k=k, slot=SLOT)
        shown = 0  # source words shown as READ

        def show_reads(upto: int) -> None:
            nonlocal shown
            while shown < upto:
                console.print(f"  [cyan]READ [/] {escape(words[shown])}")
                shown += 1

        def show_write(word) -> None:
            show_reads(word.delay)
            console.print(f"  {'':<14}[green]WRITE[/] {escape(word.text):<16} "
                          f"[dim]delay {word.delay}, {word.elapsed_ms / 1000:.2f} s[/]")

        start = time.perf_counter()
        try:
            for w in words:  # live: one source word arrives, the session acts on it
                session.push([w], finished=False)
                for word in session.advance():
                    show_write(word)
                show_reads(session.state.units_read)
            session.push([], finished=True)  # end of the source: write to the end
            for word in session.advance():
                show_write(word)
            show_reads(session.state.units_read)
        except SimulmtError as exc:
            console.print(f"  [red]error:[/] {escape(str(exc))}")
            failures += 1
            continue
        seconds = time.perf_counter() - start
        result = session.result()
        generated = sum(len(w.tokens) for w in session.written)
        console.print(f"  [bold]->[/] {escape(result.prediction) or '(empty)'}")
        console.print(f"  [dim]{len(words)} source words, {len(result.delays)} target words, delays "
                      f"{' '.join(map(str, result.delays)) or '-'}; {result.tokens_fed} tokens fed in "
                      f"{result.forward_calls} forwards, {generated} generated; {seconds:.2f} s, "
                      f"{generated / seconds if seconds else 0:.1f} generated tokens/s[/]")
        console.print()
        totals["words"] += len(words)
        totals["target"] += len(result.delays)
        totals["fed"] += result.tokens_fed
        totals["generated"] += generated
        totals["seconds"] += seconds

    s = totals["seconds"]
    console.print(f"[bold]total[/]   {len(SENTENCES) - failures} sentences, {totals['words']} source words -> "
                  f"{totals['target']} target words; {totals['fed']} tokens fed, {totals['generated']} generated; "
                  f"{s:.2f} s ({totals['fed'] / s if s else 0:.0f} tokens fed/s, "
                  f"{totals['generated'] / s if s else 0:.1f} generated tokens/s)")
    return 1 if failures else 0
