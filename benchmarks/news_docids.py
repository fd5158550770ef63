"""Document ids for a news corpus in article order, from its headlines (for ``finetune --train-docids``).

wmt-news (../shared/data/wmt-news) is WMT's newstest sets joined, articles in order, with no document ids. Each
article starts with its headline, which (unlike the article's sentences) does not end a sentence: "Food: Where
European inflation slipped up", "Government crisis coming, says Gallup". A line whose last word does not end a
sentence (``simulmt.core.sentence_ends``) starts a new document here, so training with context
(``--context-pairs N``) takes its context from the same article instead of across articles. Lines that are not
headlines but lack a final stop ("Article from Napi Gazdaság") start a short document of their own: context is
then lost for a line or two, never taken from another article.

    python benchmarks/news_docids.py ../shared/data/wmt-news/train.en-de.en --output /work/runs/news.docids
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulmt.core.sentence_ends import ends_sentence  # noqa: E402


def document_ids(lines: list[str]) -> list[str]:
    """One id per line ("doc0", "doc1", ...): a line that does not end a sentence opens a new document."""
    ids, current = [], -1
    for i, line in enumerate(lines):
        words = line.split()
        if current < 0 or (words and not ends_sentence(words[-1], None)):
            current += 1
        ids.append(f"doc{current}")
    return ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", help="the corpus's source side, one sentence a line, articles in order")
    parser.add_argument("--output", required=True, help="where to write the ids (one a line, line-aligned)")
    args = parser.parse_args()
    lines = Path(args.source).read_text(encoding="utf-8").splitlines()
    ids = document_ids(lines)
    Path(args.output).write_text("\n".join(ids) + "\n", encoding="utf-8")
    sizes = sorted(Counter(ids).values())
    print(f"{len(lines)} lines -> {len(sizes)} documents (lines per document: median {sizes[len(sizes) // 2]}, "
          f"max {sizes[-1]}, {sum(1 for s in sizes if s == 1)} of one line) -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
