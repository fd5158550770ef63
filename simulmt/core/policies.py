"""Read/write policies: pure functions of the stream state that answer READ or WRITE.

A policy never touches the model, the tokens or the cache; the session acts on its answer. The session asks at
word boundaries only (a target word is written whole), so "WRITE" means "write the next target word".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

from simulmt.core.decisions import Action, StreamState
from simulmt.core.learned_policy import Learned
from simulmt.core.registry import build
from simulmt.errors import SimulmtError


class Policy(Protocol):
    name: str
    lets_model_end_segment: bool  # may the model end a segment (propose an end token) before the source ends?
    # a policy may also set ``wants_features = True`` and have ``consults_head(state) -> bool``: where that says
    # yes, the stream feeds what was read before asking, and ``state.features`` is the last token's hidden state
    # (with a ``head`` that has ``p_write``, the engine also gives ``state.score``, the head's p(WRITE) of it, computed
    # for every row of a forward at once: head_scores.py).
    # ``decide`` must be a pure function of the state: it may be asked more than once at the same point (the engine
    # asks a learned policy whether it writes before the stream does, to skip the LM head when it reads)

    def decide(self, state: StreamState) -> Action: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class WaitK:
    """wait-k (Ma et al., 2019), SimulEval semantics: write word j once min(k + j - 1, |X|) units are read.

    An end token proposed before the source is finished means the model has translated what it read: that is a
    READ (as SimulEval's LLM agents do), never a forced word. Word j is then written later than k + j - 1."""

    k: int
    name: ClassVar[str] = "wait-k"
    lets_model_end_segment: ClassVar[bool] = True

    def __post_init__(self):
        if self.k < 1:
            raise SimulmtError(f"wait-k needs k >= 1, got {self.k}")

    def decide(self, state: StreamState) -> Action:
        if state.source_finished:
            return Action.WRITE
        if state.model_ended_segment:
            return Action.READ
        return Action.WRITE if state.source_read >= self.k + state.target_words else Action.READ

    def describe(self) -> str:
        return f"wait-{self.k}"


@dataclass(frozen=True)
class ReadN:
    """read-n & incremental decoding: read n units, then write a segment until the model ends it (an end token)
    or ``max_segment_words`` words are written; repeat. After the source ends, write to the end."""

    n: int
    max_segment_words: int | None = None  # default: 2 * n
    name: ClassVar[str] = "read-n"
    lets_model_end_segment: ClassVar[bool] = True

    def __post_init__(self):
        if self.n < 1:
            raise SimulmtError(f"read-n needs n >= 1, got {self.n}")
        if self.max_segment_words is not None and self.max_segment_words < 1:
            raise SimulmtError(f"read-n needs max_segment_words >= 1, got {self.max_segment_words}")

    @property
    def bound(self) -> int:
        return self.max_segment_words if self.max_segment_words is not None else 2 * self.n

    def decide(self, state: StreamState) -> Action:
        if state.source_finished:
            return Action.WRITE
        if state.source_read == 0 or 0 < state.segment_reads < self.n:
            return Action.READ
        if state.model_ended_segment or state.segment_words >= self.bound:
            return Action.READ
        return Action.WRITE

    def describe(self) -> str:
        return f"read-{self.n}"


@dataclass(frozen=True)
class Offline:
    """Read the whole source, then write: the offline lower bound of compute and the upper bound of latency."""

    name: ClassVar[str] = "offline"
    lets_model_end_segment: ClassVar[bool] = False

    def decide(self, state: StreamState) -> Action:
        return Action.WRITE if state.source_finished else Action.READ

    def describe(self) -> str:
        return "offline"


@dataclass(frozen=True)
class Scheduled:
    """Follow a given schedule: write word j (1-based) once ``delays[j-1]`` units are read (replay, teacher
    forcing, training data). Beyond the schedule it reads to the end of the source."""

    delays: tuple[int, ...]
    name: ClassVar[str] = "scheduled"
    lets_model_end_segment: ClassVar[bool] = False

    def decide(self, state: StreamState) -> Action:
        if state.source_finished:
            return Action.WRITE
        if state.target_words < len(self.delays) and state.source_read >= self.delays[state.target_words]:
            return Action.WRITE
        return Action.READ

    def describe(self) -> str:
        return "scheduled"


POLICIES = {"wait-k": WaitK, "read-n": ReadN, "offline": Offline, "learned": Learned}


def make_policy(name: str, **options) -> Policy:
    """``make_policy("wait-k", k=3, n=5)`` -> ``WaitK(3)``: each policy takes the options it has (registry.py)."""
    return build(POLICIES, "policy", name, options)


def wait_k_delays(k: int, source_length: int, target_length: int) -> list[int]:
    """g(j) = min(k + j - 1, |X|) for j = 1..|Y|."""
    return [min(k + j - 1, source_length) for j in range(1, target_length + 1)]
