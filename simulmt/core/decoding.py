"""The decoding rules a stream applies to the model's answer, and the vocabulary's tables they read.

Decoding never writes garbage (each rule has a test in tests/test_decoding.py): special and markup tokens are
never proposed; an end proposed before the source is finished is a READ under policies that allow it
(``early_end="read"``; ``"ban"``: it is not proposed); a token
that only ends a segment (the layout's ``segment_ends``) is not proposed once the source is finished; a
proposal that would repeat a 4-token sequence of the sentence is an end proposal; the target tokens of a sentence
are bounded by ``DecodeConfig.max_target_tokens`` of the source tokens read, and its words by ``max_len_a/b``.

``DecodeConfig`` holds the bounds; ``Rules`` says which tokens the rules exclude at a proposal; ``Vocabulary`` holds
the per-token tables (built once per model) and finds every row's best allowed token at once (best_tokens.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from simulmt.core.best_tokens import BestTokens
from simulmt.errors import SimulmtError


EARLY_END = ("read", "ban")
SENTENCE_END = ("allow", "source")


@dataclass(frozen=True)
class DecodeConfig:
    """Bounds of greedy decoding. Every bound reached acts as an end token proposed by the model: the end of the
    sentence once the source is finished, a READ before (under a policy that lets the model end segments)."""

    max_len_a: float = 2.0  # after the source ends: at most a * |X| + b target words
    max_len_b: int = 10
    max_tokens_per_word: int = 24  # a word that never ends is cut here
    max_tokens_a: float = 2.0  # at any time: at most a * (source tokens read) + b target tokens
    max_tokens_b: int = 16
    no_repeat_ngram: int = 4  # a token that would repeat an n-token sequence of the sentence ends instead (0: off)
    early_end: str = "read"  # an end (or, with plain markers, a line break) proposed before the source is finished,
    # under a policy that lets the model end segments (wait-k, read-n): "read" reads on; "ban": it is not proposed
    # (the model's best other token is: a pure wait-k / read-n schedule, as the papers run it)
    sentence_end: str = "allow"  # "source": before the source is finished, the target ends no more sentences
    # (a token that ends in . ? !) than the source read so far has ended; a number's full stop ("am 19. April")
    # stays allowed. "allow": no such rule (issue 42: most early ends follow a mid-sentence full stop)

    def __post_init__(self):
        if (self.max_len_a < 0 or self.max_len_b < 1 or self.max_tokens_per_word < 1 or self.max_tokens_a < 0
                or self.max_tokens_b < 1 or self.no_repeat_ngram < 0 or self.no_repeat_ngram == 1):
            raise SimulmtError(f"invalid decoding bounds: {self}")
        if self.early_end not in EARLY_END:
            raise SimulmtError(f"early_end is one of {', '.join(EARLY_END)}, got {self.early_end!r}")
        if self.sentence_end not in SENTENCE_END:
            raise SimulmtError(f"sentence_end is one of {', '.join(SENTENCE_END)}, got {self.sentence_end!r}")

    def max_target_tokens(self, source_tokens_read: int) -> int:
        return int(self.max_tokens_a * source_tokens_read) + self.max_tokens_b


def repeated_ngram_bans(tokens: list[int], n: int) -> set[int]:
    """Tokens that would complete an n-gram already in ``tokens`` (Hugging Face's ``no_repeat_ngram_size``)."""
    if n < 2 or len(tokens) < n:
        return set()
    tail = tokens[len(tokens) - n + 1:]
    return {tokens[i + n - 1] for i in range(len(tokens) - n + 1) if tokens[i:i + n - 1] == tail}



@dataclass(frozen=True)
class Vocabulary:
    """Per-token tables of the model's vocabulary, built once per model (``simulmt.core.vocabulary``)."""

    word_starts: torch.Tensor  # (vocab,) bool: the token begins a new word
    stops: torch.Tensor  # (vocab,) bool: the token ends a segment or the sentence
    banned: torch.Tensor  # (vocab,) bool: never proposed (special tokens that are not stops)
    sentence_ends: torch.Tensor | None = None  # (vocab,) bool: the token ends a sentence (``sentence_end_table``);
    # None: no token is known to (the ``sentence_end`` rule then excludes nothing)

    def __post_init__(self):
        minus_inf = lambda table: torch.zeros(table.shape).masked_fill(table, float("-inf"))  # noqa: E731
        if self.sentence_ends is None:
            object.__setattr__(self, "sentence_ends", torch.zeros_like(self.stops))
        biases = {"banned": minus_inf(self.banned), "stops": minus_inf(self.stops),
                  "inside_word": minus_inf(~(self.word_starts | self.stops)),
                  "sentence_ends": minus_inf(self.sentence_ends & ~self.stops)}
        object.__setattr__(self, "_biases", {torch.device("cpu"): biases})
        # the same tables as bytes, for a stream's per-token questions (a tensor lookup costs microseconds)
        object.__setattr__(self, "_starts", bytes(self.word_starts.tolist()))
        object.__setattr__(self, "_stops", bytes(self.stops.tolist()))
        object.__setattr__(self, "_sentence_ends", bytes(self.sentence_ends.tolist()))
        object.__setattr__(self, "_best", None)

    def is_stop(self, token: int) -> bool:
        return 0 <= token < len(self._stops) and bool(self._stops[token])

    def is_word_start(self, token: int) -> bool:
        return 0 <= token < len(self._starts) and bool(self._starts[token])

    def is_sentence_end(self, token: int) -> bool:
        return 0 <= token < len(self._sentence_ends) and bool(self._sentence_ends[token])

    def best(self, logits: torch.Tensor) -> torch.Tensor:
        """(rows, 2) the first argmax of each row without the banned tokens, and without the banned and the stops
        (best_tokens.py): what greedy proposals and drafts need, for every row of a forward at once."""
        if self._best is None:
            object.__setattr__(self, "_best", BestTokens([self.banned, self.banned | self.stops]))
        return self._best(logits)

    def bias(self, name: str, device: torch.device | str = "cpu") -> torch.Tensor:
        """(vocab,) float: -inf on the tokens of the named rule, 0 elsewhere; on ``device`` (the logits' device:
        the tables are copied there once, so decoding on a GPU adds them where the logits are)."""
        device = torch.device(device)
        if device not in self._biases:  # (two threads may both copy; the dict keeps one)
            self._biases.setdefault(device, {k: v.to(device) for k, v in self._biases[torch.device("cpu")].items()})
        return self._biases[device][name]


@dataclass(frozen=True)
class Rules:
    """The decoding rules that exclude tokens from a proposal (``Stream._rules``), besides the special tokens."""

    stops: bool  # the end tokens: the policy may not end a segment and the source is not finished
    segment_ends: bool  # tokens that only end a segment: the source is finished
    word_start: bool  # tokens that continue a word: the previous word is complete
    sentence_end: bool = False  # tokens that end a sentence: the target has ended as many as the source read

    @staticmethod
    def of(stops: bool, segment_ends: bool, word_start: bool, sentence_end: bool = False) -> Rules:
        """The rules (one of sixteen values, made once: a stream asks for them at every proposal)."""
        return _RULES[stops, segment_ends, word_start, sentence_end]


_RULES = {flags: Rules(*flags) for flags in itertools.product((False, True), repeat=4)}
