"""Score the first N sentences of evaluation runs: runs of different lengths compared on the same lines.

A run of all 1,138 TED lines and a run of the first 500 say nothing to each other through their scores.json; this
reads each run's instances.log (or .gz), keeps its first N sentences and scores them as ``simulmt evaluate`` does
(BLEU, chrF, LAAL, the early-end rates), and prints one row a run.

    python benchmarks/score_prefix.py --lines 500 RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulmt.evaluation.run_dir import read_log  # noqa: E402
from simulmt.evaluation.scores import score_instances  # noqa: E402

COLUMNS = ("BLEU", "chrF", "LAAL", "early_ends_per_word_first_slot", "early_ends_per_word_new_slot",
           "early_end_places_per_word_first_slot", "early_end_places_per_word_new_slot", "sentences_with_early_end")


def first_instances(run: Path, lines: int) -> list[dict]:
    """The first ``lines`` finished sentences of a run (an error if it has fewer)."""
    log = run / "instances.log"
    if not log.is_file():
        packed = run / "instances.log.gz"
        if not packed.is_file():
            raise SystemExit(f"{run}: no instances.log(.gz)")
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "instances.log"
            log.write_bytes(gzip.decompress(packed.read_bytes()))
            records = read_log(log)
    else:
        records = read_log(log)
    if len(records) < lines:
        raise SystemExit(f"{run}: {len(records)} sentences, fewer than {lines}")
    return records[:lines]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--lines", type=int, required=True)
    a = p.parse_args(argv)
    print("| run | " + " | ".join(COLUMNS) + " |")
    print("|---|" + "---:|" * len(COLUMNS))
    for run in a.runs:
        scores = score_instances(first_instances(run, a.lines))
        cells = [f"{scores[c]:.4g}" if isinstance(scores.get(c), float) else str(scores.get(c, "-")) for c in COLUMNS]
        print(f"| {run} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
