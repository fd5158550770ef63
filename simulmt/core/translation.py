"""What a stream produces: its written words, the proposals it recorded (parity tests) and its ``Translation``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import torch

from simulmt.core.placed import PlacedToken


@dataclass(frozen=True)
class WrittenWord:
    index: int  # 0-based target word index
    text: str
    tokens: tuple[int, ...]
    delay: int  # source units read when the word was written
    elapsed_ms: float  # wall time since the session started


@dataclass(frozen=True)
class Proposal:
    """A recorded proposal (for parity tests): the placed tokens in the cache, the logits of the last one."""

    context: tuple[PlacedToken, ...]
    logits: torch.Tensor
    token: int


@dataclass
class Translation:
    source: str
    prediction: str
    delays: list[int]
    elapsed: list[float]  # ms since the start, per target word
    tokens_fed: int
    flops: float
    layout: str
    policy: str
    slot: int | None
    model: str = ""
    source_length: int = 0
    forward_calls: int = 0
    cache_crops: int = 0
    refed_tokens: int = 0
    speculated: int = 0  # tokens fed ahead of the layout's list (a guess of what it places next; stream.py)
    speculated_kept: int = 0  # of those, the tokens the layout then placed (the others were computed in vain)
    stopped_forwards: int = 0  # forwards that stopped at a policy head's inner layer (a READ: layer_split.py)
    wall_ms: float = 0.0
    error: str | None = None
    read_elapsed: list[float] = field(default_factory=list)  # ms since the start when each source unit was read
    early_ends: list = field(default_factory=list)  # [target words written, cause, after a new slot/turn] of each
    # end proposed before the source finished (a READ): cause "end" / "newline" / "stop" (the model's) or "repeat" /
    # "bound" (a decoding rule's)
    header_words: int = 0  # target words written after a new slot or turn header

    def to_json(self) -> dict:
        return asdict(self)


def merge_translations(parts: Sequence[Translation], shared_clock: bool = False) -> Translation:
    """The translations of a line's consecutive sentences -> the line's translation.

    Predictions and sources are joined with spaces. Delays are offset by the source words of the earlier sentences
    (a word written after 2 words of the second sentence, whose first sentence had 7, has delay 9), ``elapsed`` by
    their wall time (``shared_clock``: not offset, each part's clock already started with the first part's, as in a
    talk: talk.py); counters and wall time are summed. A sentence that failed (``error``) contributes its source
    words and its cost but no target words; the line's ``error`` says which sentence failed and why.
    """
    if not parts:
        raise ValueError("merge_translations needs at least one translation")
    if len(parts) == 1:
        return parts[0]
    delays: list[int] = []
    elapsed: list[float] = []
    reads: list[float] = []
    early: list = []
    target_before = 0
    failed: dict[str, list[tuple[int, int, int]]] = {}  # error -> (sentence, first word, last word) of each
    words_before, ms_before = 0, 0.0
    for number, part in enumerate(parts, 1):
        delays += [d + words_before for d in part.delays]
        elapsed += part.elapsed if shared_clock else [round(e + ms_before, 3) for e in part.elapsed]
        reads += part.read_elapsed if shared_clock else [round(e + ms_before, 3) for e in part.read_elapsed]
        early += [[w + target_before, cause, header] for w, cause, header in part.early_ends]
        target_before += len(part.delays)
        if part.error:
            failed.setdefault(part.error, []).append((number, words_before + 1, words_before + part.source_length))
        words_before += part.source_length
        ms_before += part.wall_ms
    errors = [_which_sentences(where, len(parts)) + f": {error}" for error, where in failed.items()]
    first = parts[0]
    return Translation(
        source=" ".join(p.source for p in parts if p.source),
        prediction=" ".join(p.prediction for p in parts if p.prediction),
        delays=delays, elapsed=elapsed,
        tokens_fed=sum(p.tokens_fed for p in parts), flops=sum(p.flops for p in parts),
        layout=first.layout, policy=first.policy, slot=first.slot, model=first.model,
        source_length=words_before, forward_calls=sum(p.forward_calls for p in parts),
        cache_crops=sum(p.cache_crops for p in parts), refed_tokens=sum(p.refed_tokens for p in parts),
        speculated=sum(p.speculated for p in parts), speculated_kept=sum(p.speculated_kept for p in parts),
        stopped_forwards=sum(p.stopped_forwards for p in parts),
        wall_ms=parts[-1].wall_ms if shared_clock else round(ms_before, 3), error="; ".join(errors) or None,
        read_elapsed=reads, early_ends=early, header_words=sum(p.header_words for p in parts))


def _which_sentences(where: list[tuple[int, int, int]], total: int) -> str:
    """``sentence 2 of 5 (source words 8-14)``, or for several with the same error ``sentences 1-3, 5 of 5``."""
    if len(where) == 1:
        number, first, last = where[0]
        return f"sentence {number} of {total} (source words {first}-{last})"
    runs: list[list[int]] = []
    for number, _, _ in where:
        if runs and runs[-1][1] == number - 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return "sentences " + ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs) + f" of {total}"
