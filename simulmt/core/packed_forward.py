"""What the engine asks of the model in one batched forward, and what it gets back: plain named tensors.

The engine packs the new tokens of every stream of a round into one forward, one query per batch row
(batch_cache.py), and asks ``ModelRunner.forward_packed(queries, cache, wants)`` for the answers: the logits (and,
for learned policies, the features) of the queries ``last``. Another runtime serving the same streams implements
that one call over these values (llama.cpp's batch API has explicit positions, sequence ids and position-range
removal).

``Wants.decisions`` is the only part that is not data: a learned policy decides on the features, and the forward
needs the decision before it is over (a READ needs no LM head row, and, when every stream reads on at an inner
layer, no layer above it: layer_split.py). The engine hands over the streams' rules as one object with two
questions (``Decisions``) instead of loose callbacks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

import torch


@dataclass(frozen=True)
class PackedQueries:
    """The new tokens of one forward, one query per batch row."""

    ids: torch.Tensor  # (N,) token ids; an id < 0 takes the next row of ``embedded`` (speech frames)
    positions: torch.Tensor  # (N,) position ids
    visible: torch.Tensor  # (N, K) bool: the cache's keys each query sees (its own key included)
    q_index: torch.Tensor  # (N,) the key index each query is at (its sliding window ends there)
    last: torch.Tensor  # (R,) the queries answered, in order
    distances: torch.Tensor | None = None  # (N, K) key distances, ALiBi models only (visibility.py)
    embedded: torch.Tensor | None = None  # the embeddings of the ids < 0, in query order
    head_extras: list | None = None  # per answered query, the source token ids its stream has read (numpy int64
    # arrays): with a head vocabulary they are computed besides it (head_vocabulary.py); None without one


class Decisions(Protocol):
    """Policies that decide on the features of the answered queries (R, hidden), asked during the forward."""

    def all_read_on(self, features: torch.Tensor) -> bool:
        """Does every stream read on? Then the forward may end at the features' layer (no logits)."""

    def head_rows(self, features: torch.Tensor) -> torch.Tensor | None:
        """(R,) bool: the answered queries whose logits are wanted (a READ needs none); None: all of them."""

    # A runtime returns as ``PackedAnswer.features`` the very tensor it asked these questions on: the engine's
    # policy-head scores (head_scores.py) are kept for that tensor by identity, and another one, even equal, has
    # them computed again (the same numbers, one more head product).


@dataclass(frozen=True)
class Wants:
    """What the engine wants besides the logits of every answered query."""

    features: bool = False  # the features of every answered query
    features_layer: int | None = None  # the features are this decoder layer's output (None: the last hidden state)
    head_rows: torch.Tensor | None = None  # (R,) bool: only these queries' logits (None: all, unless ``decisions``)
    decisions: Decisions | None = None  # rules that say, from the features, which rows get logits and whether
    # the forward may stop at ``features_layer`` (a layer must be given for it to stop)


class PackedAnswer(NamedTuple):
    logits: torch.Tensor | None  # (rows given the LM head, vocab) float32; None: the forward stopped at the layer
    features: torch.Tensor | None  # (R, hidden) float32, when asked
    head_rows: torch.Tensor | None  # (R,) bool: which answered queries have rows in ``logits`` (None: all)
