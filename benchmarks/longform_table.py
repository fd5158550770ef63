"""One markdown table of long-form runs (``simulmt evaluate --docids``), a row per run, read from their scores.json.

    python benchmarks/longform_table.py "LABEL=RUN_OR_GRID_DIR" ["LABEL=DIR" ...] [--complete]

Each DIR is a run directory (it has scores.json) or a grid directory holding runs; LABEL names the adapter (a
grid's runs share it). The columns are the scores `evaluate --docids` writes, latency in source words; the
computation-aware latencies (``*_CA``) are left out: on a shared CPU they measure the machine's load as much as
the system (they stay in each scores.json). ``--complete``: refuse a run that has not finished every talk.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

COLUMNS = ("BLEU", "chrF", "StreamLAAL", "LongYAAL", "LongLAAL")


def runs_of(directory: Path) -> list[Path]:
    if (directory / "scores.json").is_file():
        return [directory]
    found = sorted(d for d in directory.iterdir() if (d / "scores.json").is_file())
    if not found:
        raise SystemExit(f"{directory}: neither a run (no scores.json) nor a grid of runs")
    return found


def row(label: str, run: Path, complete: bool) -> str:
    scores = json.loads((run / "scores.json").read_text(encoding="utf-8"))
    if "LongYAAL" not in scores:
        raise SystemExit(f"{run}: not a long-form run (no LongYAAL in its scores.json: evaluate without --docids)")
    signature = scores["signature"]
    if complete and not signature.get("complete"):
        raise SystemExit(f"{run}: {scores['talks']} talks logged, not all of them (--complete)")
    pairs = signature.get("context_pairs") or 0
    context = f"{pairs} pairs / {signature['context_tokens']} tokens" if pairs else "none"
    cells = [f"{scores[c]:.2f}" for c in COLUMNS]
    return (f"| {label} | {scores['run']} | {context} | " + " | ".join(cells)
            + f" | {scores['tokens_fed']:.1f} | {scores['gflops']:.2f} | {scores['talks']} | {scores['sentences']} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="LABEL=DIR")
    parser.add_argument("--complete", action="store_true", help="refuse runs that have not finished every talk")
    args = parser.parse_args(argv)
    lines = ["| adapter | run | context | " + " | ".join(COLUMNS) + " | tokens / sentence | GFLOPs / sentence | "
             "talks | sentences |", "|---|---|---|" + "---:|" * (len(COLUMNS) + 4)]
    for item in args.runs:
        label, sep, directory = item.partition("=")
        if not sep:
            raise SystemExit(f"{item!r}: give LABEL=DIR")
        lines += [row(label, run, args.complete) for run in runs_of(Path(directory))]
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
