"""A stream's source side: words (or speech units that carry embeddings) arriving, and what the policy sees of them.

A mixin of ``Stream`` (stream.py), which owns the state it reads and writes: ``units`` (token ids per source unit),
``arrivals`` (which arrival brought each), ``embeddings`` (what embedded units carry), ``source_words``.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from dataclasses import replace

import torch

from simulmt.core.head_vocabulary import source_spellings
from simulmt.core.placed import embedded_units, embedding_row
from simulmt.core.policies import StreamState
from simulmt.core.prompt_format import source_units
from simulmt.errors import SimulmtError


class Source:
    def push(self, words: list[str], finished: bool = False, arrivals: list[int] | None = None) -> None:
        """More source words arrived (``finished``: none will follow). They arrived at once, unless ``arrivals``
        numbers each word's arrival (non-decreasing; e.g. the speech block that completed it): a policy may decide
        once per arrival (``StreamState.source_waiting``)."""
        if self.stream_finished:
            raise SimulmtError("the source of this stream has already finished")
        if arrivals is not None and (len(arrivals) != len(words) or arrivals != sorted(arrivals)
                                     or (self.arrivals and arrivals and arrivals[0] < self.arrivals[-1])):
            raise SimulmtError(f"arrivals must number each of the {len(words)} words, in non-decreasing order after "
                               f"the earlier ones; got {arrivals}")
        for word in words:
            try:
                word.encode("utf-8")
            except UnicodeEncodeError as exc:  # a lone surrogate: bytes that were not UTF-8, read leniently
                raise SimulmtError(f"source word {len(self.source_words) + 1 + words.index(word)} is not valid text "
                                   f"({exc.reason} at character {exc.start + 1}); read the input as UTF-8") from None
        if self.t0 is None:
            self.t0 = time.perf_counter()
        self.units += source_units(self.tokenizer, self.fmt, words, first_index=len(self.source_words))
        self.arrivals += arrivals if arrivals is not None else [self._next_arrival()] * len(words)
        self.source_words += words
        self.stream_finished = finished
        if finished and not self.source_words:  # an empty line: an empty translation, no model call
            self.done = True

    def push_embedded(self, blocks: list[torch.Tensor], finished: bool = False,
                      labels: list[str] | None = None) -> None:
        """More source units that carry embeddings instead of token ids (speech: one block of adapter outputs,
        (frames, hidden), per unit). Each row becomes a placed token whose id is ``-1 - f``: row f of
        ``self.embeddings``, which the engine feeds in place of a token embedding. ``labels`` name the units
        in the result's ``source`` (default: ``<unit i>``)."""
        if self.stream_finished:
            raise SimulmtError("the source of this stream has already finished")
        if labels is not None and len(labels) != len(blocks):
            raise SimulmtError(f"{len(blocks)} embedded units but {len(labels)} labels")
        if self.t0 is None:
            self.t0 = time.perf_counter()
        for block in blocks:
            if block.dim() != 2 or block.shape[0] == 0:
                raise SimulmtError(f"an embedded unit is a (frames >= 1, hidden) tensor, got {tuple(block.shape)}")
        self.units += embedded_units([b.shape[0] for b in blocks], first_row=len(self.embeddings))
        self.arrivals += [self._next_arrival() + i for i in range(len(blocks))]  # a block is an arrival of its own
        self.embeddings += [row for block in blocks for row in block.detach()]
        self.source_words += labels if labels is not None else [f"<unit {len(self.source_words) + i}>"
                                                                for i in range(len(blocks))]
        self.stream_finished = finished
        if finished and not self.source_words:
            self.done = True

    def _next_arrival(self) -> int:
        return self.arrivals[-1] + 1 if self.arrivals else 0

    def source_spellings(self, unit: int) -> tuple[int, ...]:
        """The token ids of source unit ``unit``'s other spellings (a head vocabulary computes them once the unit is
        read: head_vocabulary.py); none for an embedded unit."""
        ids = self.units[unit] if 0 <= unit < len(self.units) else ()
        return source_spellings(self.tokenizer, ids) if ids and ids[0] >= 0 else ()

    def embedding_of(self, token_id: int) -> torch.Tensor:
        """The embedding an embedded source token (id < 0) carries."""
        return self.embeddings[embedding_row(token_id)]

    @property
    def source_finished(self) -> bool:
        return self.stream_finished and self.state.units_read == len(self.units)

    def decision_point(self) -> tuple:
        """Where the policy is asked, as a plain tuple: the fields of ``stream_state()`` but the features and their
        score (a policy's answer at a point stands: ``Stream._decide``; a tuple is made and compared in C, a state
        is not)."""
        read = self.state.units_read
        # units that came with the last one read and wait to be read (arrivals never decrease: a run after ``read``)
        waiting = bisect_right(self.arrivals, self.arrivals[read - 1], lo=read) - read if read else 0
        return (read, self.source_finished, len(self.written), self.segment_reads, self.segment_words,
                self.model_ended_segment, waiting)

    def stream_state(self, point: tuple | None = None) -> StreamState:
        """What the policy sees (``point``: ``decision_point()``, when the caller has it)."""
        read, finished, written, segment_reads, segment_words, ended, waiting = point or self.decision_point()
        features = self.features if self.wants_features else None
        state = StreamState(read, finished, written, segment_reads, segment_words, ended, features, waiting)
        consults = getattr(self.policy, "consults_head", None)
        if features is None or (consults is not None and not consults(state)):
            return state  # (the head's score is asked for only where the policy looks at it: head_scores.py computes
            # a forward's scores when first asked)
        return replace(state, score=self.features_and_score()[1])
