"""Training pairs of consecutive sentences joined within an article: sources with a full stop inside them.

Issue 42's logs say most of expost's early ends follow a full stop the model wrote in mid-sentence: in its training
every sentence-ending stop is followed by the end of the target. Joining N consecutive pairs of one article (the
headline rule of news_docids.py says where articles start) gives examples whose targets go on after a stop, and
that span several slots.

    python benchmarks/joined_pairs.py ../shared/data/wmt-news/train.en-de --langs en,de --start 3200 --count 1000 \
        --join 2 --max-words 70 --output /work/runs/joined/news
    # -> /work/runs/joined/news.en, news.de (line-aligned)

Pairs are taken in order from line ``--start``: a group of ``--join`` consecutive lines of one article whose source
has at most ``--max-words`` words, and whose every line but the last ends a sentence on both sides (so a headline
never starts a group), becomes one pair; a group that fails is skipped (its first line is dropped and the next group
starts at the line after it).

``--stride S`` samples instead: a group starts at lines ``--start``, ``--start + S``, ... (``--count`` of them); one
that fails is left out, or with ``--keep-single`` kept as its first line alone. Stage 2's news lines with every
third of them joined to the next line of its article (issue 42):

    python benchmarks/joined_pairs.py ../shared/data/wmt-news/train.en-de --start 13 --stride 42 --count 700 \
        --join 2 --keep-single --output /work/runs/stage2j/joined
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from news_docids import document_ids  # noqa: E402


CLOSERS = "\"'“”‘’«»)]"  # closing quotes (English and both German styles), brackets


def ends_sentence(text: str) -> bool:
    """The line ends with . ! or ? (before any closing quotes or brackets)."""
    return text.rstrip().rstrip(CLOSERS).endswith((".", "!", "?"))


def group_pair(sources: list[str], targets: list[str], docs: list[str], i: int, join: int,
               max_words: int) -> tuple[str, str] | None:
    """Lines ``i .. i + join - 1`` as one pair, or None where they cross a document, are too long, hold an empty
    line, or a line before the last does not end a sentence on both sides."""
    group = range(i, i + join)
    if i + join > len(sources) or len({docs[j] for j in group}) != 1:
        return None
    if not all(sources[j].strip() and targets[j].strip() for j in group):
        return None
    if not all(ends_sentence(sources[j]) and ends_sentence(targets[j]) for j in group[:-1]):
        return None
    source = " ".join(sources[j].strip() for j in group)
    if len(source.split()) > max_words:
        return None
    return source, " ".join(targets[j].strip() for j in group)


def joined(sources: list[str], targets: list[str], docs: list[str], start: int, count: int, join: int,
           max_words: int) -> list[tuple[str, str]]:
    """Up to ``count`` pairs of ``join`` consecutive lines of one document, in order from ``start``."""
    out, i = [], start
    while len(out) < count and i + join <= len(sources):
        pair = group_pair(sources, targets, docs, i, join, max_words)
        if pair:
            out.append(pair)
            i += join
        else:
            i += 1
    return out


def strided(sources: list[str], targets: list[str], docs: list[str], start: int, stride: int, count: int, join: int,
            max_words: int, keep_single: bool) -> tuple[list[tuple[str, str]], int]:
    """A group at each of lines ``start, start + stride, ...`` (``count`` of them, while the corpus lasts); a group
    that fails is left out or, with ``keep_single``, kept as its first line alone. Also: how many were joined."""
    out, groups = [], 0
    for i in range(start, min(len(sources), start + stride * count), stride):
        pair = group_pair(sources, targets, docs, i, join, max_words)
        if pair:
            out.append(pair)
            groups += 1
        elif keep_single and sources[i].strip() and targets[i].strip():
            out.append((sources[i].strip(), targets[i].strip()))
    return out, groups


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("prefix", help="the corpus without its language suffix (PREFIX.en, PREFIX.de)")
    p.add_argument("--langs", default="en,de")
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--join", type=int, default=2)
    p.add_argument("--max-words", type=int, default=70)
    p.add_argument("--stride", type=int, default=0, help="a group at every S-th line from --start (0: scan)")
    p.add_argument("--keep-single", action="store_true", help="with --stride: a group that fails stays one line")
    p.add_argument("--output", required=True, help="output prefix: OUTPUT.<src>, OUTPUT.<tgt>")
    a = p.parse_args()
    if a.join < 1 or a.stride < 0:
        p.error("--join must be at least 1 and --stride at least 0")
    if a.stride and a.stride < a.join:
        p.error(f"--stride {a.stride} is below --join {a.join}: groups would overlap (a line in two pairs)")
    if a.keep_single and not a.stride:
        p.error("--keep-single needs --stride (a scan skips a failed group's line)")
    src, tgt = a.langs.split(",")
    sources = Path(f"{a.prefix}.{src}").read_text(encoding="utf-8").splitlines()
    targets = Path(f"{a.prefix}.{tgt}").read_text(encoding="utf-8").splitlines()
    if len(sources) != len(targets):
        raise SystemExit(f"{a.prefix}: {len(sources)} source lines but {len(targets)} target lines")
    docs = document_ids(sources)
    if a.stride:
        pairs, groups = strided(sources, targets, docs, a.start, a.stride, a.count, a.join, a.max_words, a.keep_single)
    else:
        pairs = joined(sources, targets, docs, a.start, a.count, a.join, a.max_words)
        groups = len(pairs)
    Path(a.output).parent.mkdir(parents=True, exist_ok=True)
    for lang, side in ((src, 0), (tgt, 1)):
        Path(f"{a.output}.{lang}").write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")
    words = sum(len(p[0].split()) for p in pairs)
    print(f"{len(pairs)} pairs ({groups} of {a.join} lines), {words / max(1, len(pairs)):.1f} source words "
          f"each -> {a.output}.*")
    return 0


if __name__ == "__main__":
    sys.exit(main())
