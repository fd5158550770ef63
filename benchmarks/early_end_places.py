"""Early ends by cause and by the place in the sentence, from a run's log (no model).

Every end proposed before the source was complete is logged in ``instances.log`` with the target words written
at that point, its cause (``end`` / ``newline``: the model's; ``repeat`` / ``bound``: a decoding rule's) and whether a
new slot had opened (``early_ends``). This prints, per cause, the early-end places per target word in bins of the
target word index (a stalled stream proposes its end once per read at one place: counted once), as
docs/slot-boundaries.md reports them.

    python benchmarks/early_end_places.py RUN_DIR [RUN_DIR ...]      # each holding instances.log(.gz)
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter
from pathlib import Path

BINS = [(0, 10), (10, 20), (20, 30), (30, 45), (45, 10**9)]


def places_by_cause(log: Path) -> tuple[list[int], dict[str, list[int]]]:
    """Target words per bin, and early-end places per cause and bin."""
    words, places = [0] * len(BINS), {}
    with (gzip.open(log, "rt", encoding="utf-8") if log.suffix == ".gz" else open(log, encoding="utf-8")) as f:
        for line in f:
            record = json.loads(line)
            n = record["prediction_length"]
            for i, (a, b) in enumerate(BINS):
                words[i] += max(0, min(n, b) - a)
            for at, cause in {(e[0], e[1]) for e in record.get("early_ends", ())}:  # (older logs: none kept)
                row = places.setdefault(cause, [0] * len(BINS))
                row[next(i for i, (a, b) in enumerate(BINS) if a <= at < b)] += 1
    return words, places


def main() -> None:
    for run in sys.argv[1:]:
        log = next((p for p in (Path(run) / "instances.log", Path(run) / "instances.log.gz") if p.exists()), None)
        if log is None:
            sys.exit(f"early_end_places.py: no instances.log(.gz) in {run}")
        words, places = places_by_cause(log)
        totals = Counter({cause: sum(row) for cause, row in places.items()})
        print(f"{run}: target words per bin {words}; places {dict(totals)}")
        print(f"  {'cause':8s} " + " ".join(f"{f'{a}-{b - 1}' if b < 10**9 else f'{a}+':>8s}" for a, b in BINS))
        for cause, row in sorted(places.items()):
            print(f"  {cause:8s} " + " ".join(f"{x / max(1, w):8.4f}" for x, w in zip(row, words)))


if __name__ == "__main__":
    main()
