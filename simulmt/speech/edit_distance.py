"""The Levenshtein distance of two sequences (words, tokens or characters): the fewest substitutions, deletions and
insertions that turn one into the other. Pure; shared by the recogniser's word error rate (``ctc.token_error_rate``)
and LocalAgreement's alignment of re-heard words by their letters (``local_agreement._respelled_end``: the distances
to every prefix of a transcript's letters at once, ``prefix_distances``)."""

from __future__ import annotations

from collections.abc import Sequence


def edit_distance(reference: Sequence, hypothesis: Sequence) -> int:
    return prefix_distances(reference, hypothesis)[-1]


def prefix_distances(reference: Sequence, hypothesis: Sequence) -> list[int]:
    """The distance of ``reference`` to every prefix of ``hypothesis``: ``[d(reference, hypothesis[:j]) for j in
    0..len(hypothesis)]``, in one pass (the table's last row)."""
    row = list(range(len(hypothesis) + 1))  # one row of the table at a time
    for i, r in enumerate(reference, 1):
        previous, row[0] = row[0], i
        for j, h in enumerate(hypothesis, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (r != h))
    return row
