"""Every row's policy-head score at once: a learned policy's p(WRITE) for all answers of a forward.

A learned policy (learned_policy.py) decides on the hidden state of the last token fed: p(WRITE) = softmax(W h +
b)[1] against its threshold. Asked stream by stream, that is a product of one row and a copy to the host per
stream and decision, and on a GPU each copy waits for the device: inside the forward (which rows get the LM head,
whether the forward may stop at the head's layer) and again when the stream decides. The engine instead gives
every forward one ``HeadScores``: the first time any stream asks for a score, the scores of all answered rows of
the streams that decide on features are computed, one product per head and one copy to the host (almost always one
head: the streams of one model); the others' questions are then list lookups. A forward in which no stream asks
computes none. The stream hands its number to the policy (``StreamState.score``), which compares a float.

Each row's score is that row's product with the head, as one stream's would be, to float32 rounding (a product
of many rows may sum in another order); a forward's features differ between a batched and a one-stream run within
float32 rounding anyway, so batched == one stream holds as before. A stream asks only where its policy looks at
the head (``consults_head``): a forward whose streams are all inside a chunk, or past the source, computes none.
"""

from __future__ import annotations

import torch

from simulmt.errors import SimulmtError


class HeadScores:
    """p(WRITE) of a forward's answered rows, each under its stream's policy head, computed for all rows at once when
    first asked. ``heads``: per request in row order, the head whose scores its answers want (``PolicyHead``; None:
    none); ``answered``: its number of consecutive answered rows."""

    def __init__(self, heads: list, answered: list[int]):
        self.row_heads = [head for head, n in zip(heads, answered) for _ in range(n)]
        self.features: torch.Tensor | None = None  # (R, hidden): what the scores are of
        self.values: list[float | None] | None = None  # per row, once computed
        self.products = 0  # head products computed (one per distinct head, once)

    def of(self, features: torch.Tensor) -> "HeadScores":
        """These scores are of ``features`` (the forward's answered rows); other features than before: not yet
        computed."""
        if features is not self.features:
            self.features, self.values = features, None
        return self

    def at(self, row: int) -> float | None:
        """The score of answered row ``row`` (None: its stream's policy has no head)."""
        if self.row_heads[row] is None:
            return None
        if self.values is None:
            self.values = self._compute()
        return self.values[row]

    def _compute(self) -> list[float | None]:
        if self.features is None:
            raise SimulmtError("HeadScores.at() before of(features)")
        values: list[float | None] = [None] * len(self.row_heads)
        groups: dict[int, tuple[object, list[int]]] = {}  # id(head) -> (head, its rows)
        for row, head in enumerate(self.row_heads):
            if head is not None:
                groups.setdefault(id(head), (head, []))[1].append(row)
        for head, rows in groups.values():
            part = self.features if len(rows) == self.features.shape[0] else self.features.index_select(
                0, torch.tensor(rows, device=self.features.device))
            for row, score in zip(rows, head.p_write(part).tolist()):
                values[row] = score
            self.products += 1
        return values
