"""Print the parity table: max |logit difference| between the training forward and streaming inference, per
architecture x layout x schedule, on tiny random models (or a real one with --model).

    python benchmarks/parity_report.py                      # tiny random Llama, Qwen2, Gemma 3, Mistral, Phi-3
    python benchmarks/parity_report.py --model smollm2-135m # a real model
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simulmt.core.layouts import Conversation, Expost, GroupPositions, NaiveReuse, PrefixRecompute
from simulmt.finetune.parity import teacher_forced_parity
from simulmt.core.policies import wait_k_delays

SOURCE = "The weather is nice today and the children play in the garden"
TARGET = "Das Wetter ist heute schön und die Kinder spielen im Garten"


def read_n(n: int, x: int, y: int) -> list[int]:
    return [min(n * -(-((j * x) // y + 1) // n), x) for j in range(y)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="a model name for simulmt.Translator.load (default: tiny ones)")
    args = ap.parse_args(argv)
    x, y = len(SOURCE.split()), len(TARGET.split())
    schedules = {"wait-1": wait_k_delays(1, x, y), "wait-3": wait_k_delays(3, x, y), "read-3": read_n(3, x, y)}
    layouts = {"expost(slot=4)": lambda: Expost(4), "gpe": lambda: GroupPositions(300), "conversation": Conversation,
               "prefix": PrefixRecompute, "naive": NaiveReuse}
    if args.model:
        from simulmt import Translator

        translators = {args.model: Translator.load(args.model)}
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from tiny_models import ARCHS, make_model, make_tokenizer

        from simulmt import Translator

        tok = make_tokenizer(chat=True)
        translators = {arch: Translator(make_model(arch, len(tok)), tok) for arch in ARCHS}
    print(f"{'model':14s} {'layout':15s} " + " ".join(f"{s:>9s}" for s in schedules))
    for name, tr in translators.items():
        for lname, make in layouts.items():
            cells = []
            for delays in schedules.values():
                run = teacher_forced_parity(tr, make(), SOURCE, TARGET, delays, match_positions=lname != "naive")
                cells.append(f"{run.max_diff:9.1e}" + ("!" if run.unmatched else " "))
            print(f"{name:14s} {lname:15s} " + " ".join(cells))
    print("(max |logit diff| at every labelled position; naive is the ablation and is expected to differ)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
