"""The visibility rule: which earlier placed token a query token may attend to.

Tokens are in time order (the order streaming inference feeds them). A query at index q may see a key at index
k only if k <= q (it exists when q is fed), and:

* a source-side query (prompt, source, source marker) never sees a target-side key, unless the layout is a plain
  chat (``source_sees_target``): new source tokens join the cache without depending on the target written so far;
* a target-side query sees every earlier key. Which source it sees is therefore decided by *when* the layout
  places it: the token whose output predicts the first token of target word j is placed after the g(j)-th
  source unit was read (layouts defer it past later reads, see ``simulmt.core.layouts``).
* ``earlier_slots`` (issue 42, E2, expost's later slots as the paper lays them out): a source-side query also
  sees the target-side keys placed before its slot began, the target of earlier slots, never the target written
  in its own slot (``slot_starts``). A slot begins with its header, a source marker right after a target-side token;
  a source unit that fits its slot after target text begins nothing.

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

ALiBi models (Bloom, Falcon-RW) have no position ids: a query's bias for a key is ``-slope x distance``. The
distance is part of the rule too (``Distance``), computed from the same flags in training and in streaming:

* ``Distance("time", "all")`` (every layout's default): keys between them in time order, visible or not. This
  is the model's own ALiBi over the cache, and training lays out the same time order: parity holds.
* ``Distance("sides", "visible")``: SimulMask's modified ALiBi. Keys are ranked in SimulMask's training order
  (every source-side key before every target-side key, time order within a side: prompt, source, opener,
  target) and only keys the query can see count. wait-1, target query tY (predicting after reading sa, sb of
  "sa sb sc")::

        training order   p  sa  sb  sc  m  tX  tY          stock ALiBi (count all)   : tY -> sa = 5
        visible to tY    ■  ■   ■   ⬚   ■  ■   ■           modified (count visible)  : tY -> sa = 4

  At inference sc is not in the cache yet, so only the modified distance is the same on both sides.
* ``Distance("sides", "all")``: SimulMask's training with stock ALiBi (the paper's ablation): unread source keys
  add distance in training but do not exist at inference; parity breaks, as it should.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from simulmt.core.placed import PlacedToken, Role


ORDERS, COUNTS = ("time", "sides"), ("all", "visible")


@dataclass(frozen=True)
class Distance:
    """How an ALiBi model counts the distance from a query to a key (see the module docstring)."""

    order: str = "time"  # "time": time (cache) order; "sides": source side first, then target side
    count: str = "all"  # "all": every key of the row between them; "visible": only keys the query sees

    def __post_init__(self):
        if self.order not in ORDERS or self.count not in COUNTS:
            raise ValueError(f"Distance(order in {ORDERS}, count in {COUNTS}), got ({self.order!r}, {self.count!r})")


@dataclass(frozen=True)
class Visibility:
    source_sees_target: bool = False
    distance: Distance = Distance()
    earlier_slots: bool = False  # a source-side query sees the target placed before its slot began (E2)

    def matrix(self, tokens: list[PlacedToken], query_start: int = 0) -> torch.Tensor:
        """Boolean (Q, K) matrix for queries ``tokens[query_start:]`` over keys ``tokens[:]`` (True = visible)."""
        target_side = torch.tensor([t.role.target_side for t in tokens], dtype=torch.bool)
        return self.matrix_from_sides(target_side, query_start, self.target_before(tokens))

    def target_before(self, tokens: list[PlacedToken]) -> torch.Tensor | None:
        """(T,) per token: the key index below which a source-side query sees target keys (``slot_starts``);
        None where the rule has no such exception."""
        return torch.tensor(slot_starts(tokens)) if self.earlier_slots else None

    def matrix_from_sides(self, target_side: torch.Tensor, query_start: int = 0,
                          target_before: torch.Tensor | None = None) -> torch.Tensor:
        n = target_side.shape[0]
        q_index = torch.arange(query_start, n).unsqueeze(0)  # (1, Q)
        before = None if target_before is None else target_before[query_start:].unsqueeze(0)
        return visible_rows(q_index, target_side[query_start:].unsqueeze(0), target_side.unsqueeze(0),
                            torch.tensor([self.source_sees_target]), before)[0]


def slot_starts(tokens: list[PlacedToken], start: int = 0) -> list[int]:
    """For ``tokens[start:]``: the index at which each token's slot began (0 in the first slot). A slot begins with
    its header: a source marker right after a target-side token (a source unit that fits its slot after target text,
    or one that grows a slot, is plain source and begins nothing). A function of the list up to each token, so
    training and streaming agree. Slots without a header (``expost-positions``) cannot be told from the list this
    way: such a layout does not take ``earlier_slots``."""
    after_target, begun, out = False, 0, []
    for i, token in enumerate(tokens):
        if after_target and token.role is Role.SOURCE_MARKER:
            begun = i
        after_target = token.role.target_side
        if i >= start:
            out.append(begun)
    return out


def visible_rows(q_index: torch.Tensor, q_target: torch.Tensor, k_target: torch.Tensor,
                 source_sees_target: torch.Tensor, target_before: torch.Tensor | None = None) -> torch.Tensor:
    """The rule for a batch of rows (one stream per row, keys in the row's time order == its cache order).

    ``q_index`` (R, Q): the key index each query is stored at; ``q_target`` (R, Q) and ``k_target`` (R, K):
    target-side flags; ``source_sees_target`` (R,): the layout's flag; ``target_before`` (R, Q), optional: a
    source-side query also sees the target keys below this index (``earlier_slots``). Returns (R, Q, K).
    Tensors, or numpy arrays (the engine's packed forward: on a CPU, numpy's operations on its few thousand flags
    cost a quarter of torch's).
    """
    if isinstance(k_target, np.ndarray):
        k_idx = np.arange(k_target.shape[1])
    else:
        k_idx = torch.arange(k_target.shape[1], device=k_target.device)
    visible = k_idx[None, None, :] <= q_index[:, :, None]  # causal in time order
    blocked = ~q_target[:, :, None] & k_target[:, None, :] & ~source_sees_target[:, None, None]
    if target_before is not None:
        blocked &= k_idx[None, None, :] >= target_before[:, :, None]
    return visible & ~blocked


def sliding(visible: torch.Tensor, q_index: torch.Tensor, window: int) -> torch.Tensor:
    """(R, Q, K) visibility restricted to keys less than ``window`` indices behind each query (``q_index`` (R, Q):
    each query's key index)."""
    k_idx = torch.arange(visible.shape[-1], device=visible.device)
    return visible & (q_index[:, :, None] - k_idx[None, None, :] < window)


def key_distances(distance: Distance, visible: torch.Tensor, q_index: torch.Tensor, q_target: torch.Tensor,
                  k_target: torch.Tensor, k_valid: torch.Tensor) -> torch.Tensor:
    """(R, Q, K) float: for each query, how many counted keys lie after each key, up to and including the query,
    in the rule's order (``visible`` (R, Q, K); ``q_index``, ``q_target`` (R, Q); ``k_target``, ``k_valid``
    (R, K): target-side flags, and which key slots hold a key of the row at all)."""
    n_keys = k_target.shape[1]
    k_idx = torch.arange(n_keys, device=k_target.device).expand_as(k_target)
    k_rank, q_rank = k_idx, q_index
    if distance.order == "sides":  # target side after every source-side key; time order within a side
        k_rank, q_rank = k_idx + n_keys * k_target.long(), q_index + n_keys * q_target.long()
    if distance.count == "visible":
        counted = visible
    else:
        counted = k_valid[:, None, :] & (k_rank[:, None, :] <= q_rank[:, :, None])
    order = torch.argsort(k_rank, dim=1)[:, None, :].expand(counted.shape)  # keys by rank, per row
    ranked = counted.gather(2, order).float()
    after = ranked.flip(-1).cumsum(-1).flip(-1) - ranked  # counted keys ranked strictly after each key
    return torch.empty_like(after).scatter_(2, order, after)


def additive(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(..., Q, K) boolean -> float mask to add to attention scores: 0 where visible, the dtype's minimum elsewhere."""
    mask = torch.zeros(visible.shape, dtype=dtype)
    return mask.masked_fill(~visible, torch.finfo(dtype).min)
