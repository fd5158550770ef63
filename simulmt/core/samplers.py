"""Samplers: how a stream picks its next target token from the scores the decoder allows.

The stream masks the model's logits first (special tokens, the end where the policy forbids it, word starts after
a complete word); the sampler only chooses among what is left and says how likely its choice was. Every sampler
returns ``(token id, log-probability)``, the log-probability under the distribution it sampled from (the masked
scores, divided by the temperature), so sequence-level training (SeqPO, GRPO) can use it directly.

A sampler is stream state: ``Sampling`` owns a seeded ``torch.Generator``, so a stream draws the same tokens
whether it runs alone or batched with others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from simulmt.errors import SimulmtError


class Sampler(Protocol):
    def choose(self, scores: torch.Tensor, step: int) -> tuple[int, float]:
        """``scores``: (vocab,) float, -inf where forbidden; ``step``: index of the target token being chosen."""
        ...

    def describe(self) -> str: ...


def _log_prob(scores: torch.Tensor, token: int) -> float:
    return float(torch.log_softmax(scores.float(), dim=-1)[token])


@dataclass
class Greedy:
    def choose(self, scores: torch.Tensor, step: int) -> tuple[int, float]:
        token = int(torch.argmax(scores))
        return token, _log_prob(scores, token)

    def describe(self) -> str:
        return "greedy"


@dataclass
class Sampling:
    """Ancestral sampling with temperature and nucleus (top-p) truncation; reproducible from ``seed``."""

    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    generator: torch.Generator = field(init=False, repr=False)

    def __post_init__(self):
        if self.temperature <= 0:
            raise SimulmtError(f"sampling needs a temperature > 0, got {self.temperature} (use greedy decoding)")
        if not 0 < self.top_p <= 1:
            raise SimulmtError(f"top_p must be in (0, 1], got {self.top_p}")
        self.generator = torch.Generator().manual_seed(self.seed)

    def choose(self, scores: torch.Tensor, step: int) -> tuple[int, float]:
        scores = scores.float().cpu() / self.temperature
        if self.top_p < 1:
            probs = torch.softmax(scores, dim=-1)
            sorted_probs, order = torch.sort(probs, descending=True)
            outside = torch.cumsum(sorted_probs, dim=-1) - sorted_probs >= self.top_p  # keep the smallest nucleus
            scores = scores.clone()
            scores[order[outside]] = float("-inf")
        probs = torch.softmax(scores, dim=-1)
        token = int(torch.multinomial(probs, 1, generator=self.generator))
        return token, _log_prob(scores, token)

    def describe(self) -> str:
        return f"sample(t={self.temperature},p={self.top_p},seed={self.seed})"


@dataclass
class Forced:
    """Teacher forcing: the given tokens in order, whatever the scores (their log-probability is still reported)."""

    tokens: list[int]

    def choose(self, scores: torch.Tensor, step: int) -> tuple[int, float]:
        if step >= len(self.tokens):
            raise SimulmtError("teacher forcing ran past the forced target")
        token = self.tokens[step]
        return token, _log_prob(scores, token)

    def describe(self) -> str:
        return "forced"
