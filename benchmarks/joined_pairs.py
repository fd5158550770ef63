"""Training pairs of consecutive sentences joined within an article: sources with a full stop inside them.

Issue 42's logs say most of expost's early ends follow a full stop the model wrote in mid-sentence: in its training
every sentence-ending stop is followed by the end of the target. Joining N consecutive pairs of one article (the
headline rule of news_docids.py says where articles start) gives examples whose targets go on after a stop, and
that span several slots.

    python benchmarks/joined_pairs.py ../shared/data/wmt-news/train.en-de --langs en,de --start 3200 --count 1000 \
        --join 2 --max-words 70 --output /work/runs/joined/news
    # -> /work/runs/joined/news.en, news.de (line-aligned)

Pairs are taken in order from line ``--start``: a group of ``--join`` consecutive lines of one article whose source
has at most ``--max-words`` words becomes one pair; a group that crosses an article or is too long is skipped
(its first line is dropped and the next group starts at the line after it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from news_docids import document_ids  # noqa: E402


def joined(sources: list[str], targets: list[str], docs: list[str], start: int, count: int, join: int,
           max_words: int) -> list[tuple[str, str]]:
    """Up to ``count`` pairs of ``join`` consecutive lines of one document, in order from ``start``."""
    out, i = [], start
    while len(out) < count and i + join <= len(sources):
        group = range(i, i + join)
        source = " ".join(sources[j].strip() for j in group)
        if len({docs[j] for j in group}) == 1 and len(source.split()) <= max_words \
                and all(sources[j].strip() and targets[j].strip() for j in group):
            out.append((source, " ".join(targets[j].strip() for j in group)))
            i += join
        else:
            i += 1
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("prefix", help="the corpus without its language suffix (PREFIX.en, PREFIX.de)")
    p.add_argument("--langs", default="en,de")
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--join", type=int, default=2)
    p.add_argument("--max-words", type=int, default=70)
    p.add_argument("--output", required=True, help="output prefix: OUTPUT.<src>, OUTPUT.<tgt>")
    a = p.parse_args()
    src, tgt = a.langs.split(",")
    sources = Path(f"{a.prefix}.{src}").read_text(encoding="utf-8").splitlines()
    targets = Path(f"{a.prefix}.{tgt}").read_text(encoding="utf-8").splitlines()
    if len(sources) != len(targets):
        raise SystemExit(f"{a.prefix}: {len(sources)} source lines but {len(targets)} target lines")
    pairs = joined(sources, targets, document_ids(sources), a.start, a.count, a.join, a.max_words)
    Path(a.output).parent.mkdir(parents=True, exist_ok=True)
    for lang, side in ((src, 0), (tgt, 1)):
        Path(f"{a.output}.{lang}").write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")
    words = sum(len(p[0].split()) for p in pairs)
    print(f"{len(pairs)} pairs of {a.join} lines, {words / max(1, len(pairs)):.1f} source words each -> {a.output}.*")
    return 0


if __name__ == "__main__":
    sys.exit(main())
