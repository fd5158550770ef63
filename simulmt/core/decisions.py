"""What a policy sees and what it answers: the stream's state in, READ or WRITE out (plain data)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class Action(str, Enum):
    READ = "read"
    WRITE = "write"


@dataclass(frozen=True)
class StreamState:
    source_read: int  # source units read so far
    source_finished: bool  # the source has ended and all of it has been read
    target_words: int  # target words written so far
    segment_reads: int = 0  # units read since the last written word
    segment_words: int = 0  # words written since the last read
    model_ended_segment: bool = False  # the model proposed an end token before the source finished
    features: Any = None  # last hidden state of the last token fed (for policies with ``wants_features = True``)
    source_waiting: int = 0  # units that arrived together with the last one read and are not read yet
    score: float | None = None  # the policy head's p(WRITE) of ``features``, as the engine computed it for every row
    # of a forward at once (head_scores.py); None: not computed (a policy with a head computes it from ``features``)
