"""What a stream asks of the engine (``Status``, ``Step``, ``ForwardRequest``) and what it gets back (``Answer``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

import torch

from simulmt.core.head_scores import HeadScores
from simulmt.core.placed import PlacedToken
from simulmt.core.translation import WrittenWord


class Answer(NamedTuple):
    """The model's answer at one token: where it is in the forward's tensors, and its best tokens. Its logits and
    hidden state are taken out of those tensors when asked for: most answers are used through their best tokens
    alone (a row taken out of a tensor costs microseconds, per stream and round)."""

    all_logits: torch.Tensor | None  # the forward's logits (None: none asked for)
    row: int  # this answer's row in them
    all_features: torch.Tensor | None  # the forward's hidden states (None: not asked for)
    feature_row: int
    best: Sequence[int] | None  # ``Vocabulary.best`` of its logits (a pair), when the engine found it
    scores: HeadScores | None = None  # the forward's policy-head scores (head_scores.py: for every row at once)

    @property
    def score(self) -> float | None:
        """Its stream's policy head's p(WRITE) of its features (None: none computed)."""
        return None if self.scores is None else self.scores.at(self.feature_row)

    @property
    def logits(self) -> torch.Tensor | None:
        return None if self.all_logits is None else self.all_logits[self.row]

    @property
    def features(self) -> torch.Tensor | None:
        return None if self.all_features is None else self.all_features[self.feature_row]


class Status(str, Enum):
    NEEDS_MODEL = "needs_model"
    NEEDS_SOURCE = "needs_source"
    DONE = "done"


@dataclass(slots=True)
class ForwardRequest:
    """Keep the first ``keep`` cached tokens of the stream, feed ``tokens`` after them, return the logits of the
    last one (``logits=False``: only its hidden state, for a policy that decides on it and whose decision adds
    tokens either way, so the LM head's row would be wasted). ``speculative``: the tokens after the list are a guess
    of what the layout places next (placed as it would place them), and ``alternatives`` more after them are other
    candidates for the guess's last token (same position id); the answer covers the last token of the list and each
    guessed one (or, with ``inner_answers=False``, the guess's last alone), ``answered`` rows.

    A value: never changed once posted (``dataclasses.replace`` makes another). Not ``frozen``: a frozen
    dataclass's ``__init__`` sets each field through ``object.__setattr__``, 2.4 us against 0.9 for this one, and
    every stream posts one per round."""

    keep: int
    tokens: tuple[PlacedToken, ...]
    logits: bool = True
    speculative: int = 0
    alternatives: int = 0  # the last tokens stand in for the last guess: see what it sees, not it (nor each other)
    inner_answers: bool = True  # every guessed token is answered; False: only the guess's last (a read-ahead guess:
    # what a read places before the next target asks for no proposal, and a row of the LM head costs about as much
    # as computing a token, with Gemma's 262k vocabulary more)
    move: tuple[int, int] | None = None  # before keeping: copy the cached token at index [0] to index [1]
    drop: int | None = None  # before keeping: take the cached token at this index out of the row (the later ones
    # move down by one): a guess that re-placed it is the layout's now (``replaces``)
    replaces: int | None = None  # the guess re-places the cached token at this index after what it places (a
    # read moves the list's last token there: expost's deferral): the guessed tokens do not see that token
    logits_if: Callable[[torch.Tensor, float | None], bool] | None = field(default=None, compare=False)  # given
    # the hidden state of the list's last token and its policy head's score (``StreamState.score``; None without a
    # head): are the logits wanted? (a learned policy that reads on needs none: no LM head)
    decides: bool = False  # the list's last token is a decision point: its features are wanted (at the policy
    # head's layer, ``Stream.features_layer``); a forward without one gives no features to a stream whose head
    # reads an inner layer, and computes no such layer apart
    reads_on: Callable[[torch.Tensor, float | None], bool] | None = field(default=None, compare=False)  # given
    # the features at the list's last token (a policy head's inner layer) and their score, as ``logits_if``: does
    # the policy read on? Then the forward may stop at that layer, and the tokens are fed again, whole, in the next
    # forward (``Stream.receive(stopped=True)``)

    @property
    def guess_answers(self) -> int:
        """How many of the guessed tokens are answered."""
        return self.speculative if self.inner_answers else min(self.speculative, 1)

    @property
    def answered(self) -> int:
        """Rows of the answer: the list's last token, the guessed tokens answered, the alternatives."""
        return 1 + self.guess_answers + self.alternatives

    def answer_offsets(self) -> list[int]:
        """Where the answered tokens are, as offsets from the end of ``tokens`` (-1: the last), in answer order."""
        alt, spec = self.alternatives, self.speculative
        guessed = range(-alt - spec, -alt) if self.inner_answers else range(-alt - min(spec, 1), -alt)
        return [-alt - spec - 1, *guessed, *range(-alt, 0)]


@dataclass(slots=True)
class Step:  # (a value, made per stream and round: not frozen, for its __init__'s cost; see ForwardRequest)
    words: list[WrittenWord]  # written since the last step
    status: Status
    request: ForwardRequest | None = None


class RequestDecisions:
    """The ``logits_if`` / ``reads_on`` rules of a forward's requests, asked by the forward on the features of each
    request's first answer (packed_forward.py's ``Decisions``); ``requests``: (stream, request) in row order;
    ``scores``: the forward's policy-head scores (head_scores.py), asked of the features the rules are asked on (for
    every row at once: one product and one copy to the host, not one per stream); the engine hands the same scores
    to the streams after the forward."""

    def __init__(self, requests, first: list[int], answered: list[int], may_stop: bool,
                 scores: HeadScores | None = None):
        self.requests, self.first, self.answered, self.may_stop = requests, first, answered, may_stop
        self.scores = scores if scores is not None else HeadScores([None] * len(requests), answered)

    def all_read_on(self, features: torch.Tensor) -> bool:
        scores = self.scores.of(features)
        return self.may_stop and all(r.reads_on(features[i], scores.at(i)) for (_, r), i in zip(self.requests,
                                                                                                self.first))

    def head_rows(self, features: torch.Tensor) -> torch.Tensor | None:
        scores = self.scores.of(features)
        got = [r.logits and (r.logits_if is None or r.logits_if(features[i], scores.at(i)))
               for (_, r), i in zip(self.requests, self.first)]
        if all(got):  # every answered query gets the head: no rows to pick
            return None
        return torch.tensor([g for g, n in zip(got, self.answered) for _ in range(n)], dtype=torch.bool)
