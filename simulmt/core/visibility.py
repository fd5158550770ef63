"""The visibility rule: which earlier placed token a query token may attend to.

Tokens are in time order (the order streaming inference feeds them). A query at index q may see a key at index
k only if k <= q (it exists when q is fed), and:

* a source-side query (prompt, source, source marker) never sees a target-side key, unless the layout is a plain
  chat (``source_sees_target``): new source tokens join the cache without depending on the target written so far;
* a target-side query sees every earlier key. Which source it sees is therefore decided by *when* the layout
  places it: the token whose output predicts the first token of target word j is placed after the g(j)-th
  source unit was read (layouts defer it past later reads, see ``simulmt.core.layouts``).

Example, wait-1 on "a b" -> "X Y" (s = source, m = target marker, t = target), expost time order::

          p  sa  m  tX  sb  tX'  tY
    p     ■
    sa    ■  ■
    m     ■  ■   ■
    tX    ■  ■   ■  ■
    sb    ■  ■   ⬚  ⬚   ■             <- a source query never sees target keys
    tX'   ■  ■   ■  ■   ■   ■         (tX' is the last token of X, re-placed after sb: it predicts Y)
    tY    ■  ■   ■  ■   ■   ■   ■

Sliding-window layers (Gemma 3 and others) additionally hide keys whose *index* is ``window`` or more behind the
query (index distance = cache distance, the same in training and in streaming).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from simulmt.core.placed import PlacedToken


@dataclass(frozen=True)
class Visibility:
    source_sees_target: bool = False

    def matrix(self, tokens: list[PlacedToken], query_start: int = 0) -> torch.Tensor:
        """Boolean (Q, K) matrix for queries ``tokens[query_start:]`` over keys ``tokens[:]`` (True = visible)."""
        target_side = torch.tensor([t.role.target_side for t in tokens], dtype=torch.bool)
        return self.matrix_from_sides(target_side, query_start)

    def matrix_from_sides(self, target_side: torch.Tensor, query_start: int = 0) -> torch.Tensor:
        n = target_side.shape[0]
        q_index = torch.arange(query_start, n).unsqueeze(0)  # (1, Q)
        return visible_rows(q_index, target_side[query_start:].unsqueeze(0), target_side.unsqueeze(0),
                            torch.tensor([self.source_sees_target]))[0]


def visible_rows(q_index: torch.Tensor, q_target: torch.Tensor, k_target: torch.Tensor,
                 source_sees_target: torch.Tensor) -> torch.Tensor:
    """The rule for a batch of rows (one stream per row, keys in the row's time order == its cache order).

    ``q_index`` (R, Q): the key index each query is stored at; ``q_target`` (R, Q) and ``k_target`` (R, K):
    target-side flags; ``source_sees_target`` (R,): the layout's flag. Returns (R, Q, K).
    """
    k_idx = torch.arange(k_target.shape[1], device=k_target.device)
    visible = k_idx[None, None, :] <= q_index[:, :, None]  # causal in time order
    blocked = ~q_target[:, :, None] & k_target[:, None, :] & ~source_sees_target[:, None, None]
    return visible & ~blocked


def sliding(visible: torch.Tensor, q_index: torch.Tensor, window: int) -> torch.Tensor:
    """(R, Q, K) visibility restricted to keys less than ``window`` indices behind each query (``q_index`` (R, Q):
    each query's key index)."""
    k_idx = torch.arange(visible.shape[-1], device=visible.device)
    return visible & (q_index[:, :, None] - k_idx[None, None, :] < window)


def additive(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(..., Q, K) boolean -> float mask to add to attention scores: 0 where visible, the dtype's minimum elsewhere."""
    mask = torch.zeros(visible.shape, dtype=dtype)
    return mask.masked_fill(~visible, torch.finfo(dtype).min)
