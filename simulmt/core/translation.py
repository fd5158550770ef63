"""What a stream produces: its written words, the proposals it recorded (parity tests) and its ``Translation``."""

from __future__ import annotations

from dataclasses import asdict, dataclass

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

    def to_json(self) -> dict:
        return asdict(self)
