"""Training examples: a sentence pair laid out along a schedule, with the layout code streaming uses.

``build_examples`` replays the events streaming inference would send for that schedule (read the units of word
j, open the target side, write the tokens of word j, ..., read the rest, end) and keeps the placed list. One
forward pass over it, with position ids from the list and the mask from the layout's visibility rule, gives at
every labelled position the logits streaming inference computes for the same schedule (the parity invariant,
tests/test_parity.py).

Layouts that recompute (``prefix``) give one example per read point (prefix pairs); each labels only the target
tokens of its own segment.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from simulmt.errors import SimulmtError
from simulmt.core.layouts.base import Layout
from simulmt.core.placed import PlacedToken, Role, labels_for
from simulmt.core.prompt_format import PromptFormat, word_tokens

IGNORE = -100


@dataclass
class TrainingExample:
    tokens: list[PlacedToken]
    labels: list[int]  # IGNORE where nothing is predicted

    @property
    def input_ids(self) -> torch.Tensor:
        return torch.tensor([t.token_id for t in self.tokens])

    @property
    def position_ids(self) -> torch.Tensor:
        return torch.tensor([t.position for t in self.tokens])

    def visible(self, layout: Layout) -> torch.Tensor:
        """The (T, T) boolean attention pattern (True = may attend)."""
        return layout.visibility.matrix(self.tokens)

    def __len__(self) -> int:
        return len(self.tokens)


def build_examples(layout: Layout, fmt: PromptFormat, tokenizer, source: list[tuple[int, ...]],
                   target_words: list[str], delays: list[int],
                   reads: list[tuple[int, PlacedToken]] | None = None) -> list[TrainingExample]:
    """Lay out one sentence pair. ``source``: token ids per source unit; ``delays[j]``: units read before target
    word j+1 is written (non-decreasing, at most len(source)). ``reads``, when given, receives (index, token) of
    the last placed token after each read: where a learned policy decides (``decision_points``)."""
    if len(delays) != len(target_words):
        raise SimulmtError(f"{len(target_words)} target words but {len(delays)} delays")
    if any(b < a for a, b in zip(delays, delays[1:])) or any(not 0 <= d <= len(source) for d in delays):
        raise SimulmtError(f"delays must be non-decreasing within 0..{len(source)}: {delays}")
    state = layout.start(fmt)
    snapshots: list[list[PlacedToken]] = []  # prefix layouts: the list as it stands before each read point
    written_since_read = False

    def read_until(units: int) -> None:
        nonlocal written_since_read
        while state.units_read < units:
            if written_since_read and not layout.reuses_cache:
                snapshots.append(list(state.tokens))
            layout.read(state, source[state.units_read])
            written_since_read = False
            if reads is not None:
                reads.append((len(state.tokens) - 1, state.tokens[-1]))

    for j, word in enumerate(target_words):
        read_until(delays[j])
        layout.open_target(state)
        leading_space = layout.continues_text(state) or fmt.target_first_space
        for token_id in word_tokens(tokenizer, word, leading_space):
            layout.write(state, token_id, j)
        written_since_read = True
    read_until(len(source))
    layout.open_target(state)
    layout.write_end(state, fmt.end_id)
    if layout.reuses_cache:
        tokens = layout.training_view(state.tokens)
        return [TrainingExample(tokens, labels_for(tokens))]
    return _prefix_pairs(snapshots + [list(state.tokens)])


def _prefix_pairs(snapshots: list[list[PlacedToken]]) -> list[TrainingExample]:
    """Each snapshot labels only target tokens (and the end) that no earlier snapshot labelled."""
    examples, done = [], 0
    for tokens in snapshots:
        labels = labels_for(tokens)
        predicted = 0
        for i, tok in enumerate(tokens):
            if labels[i] == IGNORE:
                continue
            predicted += 1
            if predicted <= done:
                labels[i] = IGNORE
        done = max(done, predicted)
        examples.append(TrainingExample(tokens, labels))
    return examples


def target_token_ids(example: TrainingExample) -> list[int]:
    """The predicted tokens of a (cache-reusing) example in order: what teacher forcing feeds."""
    return [t.token_id for t in example.tokens if t.role in (Role.TARGET, Role.END)]


@dataclass(frozen=True)
class DecisionPoints:
    """Where a learned READ/WRITE policy decides in a laid-out sentence, and what the schedule did there."""

    example: TrainingExample
    indices: list[int]  # the last placed token after each read (but the last read: the source is then finished)
    labels: list[int]  # 1: the schedule writes next (WRITE), 0: it reads another unit (READ)


def decision_points(layout: Layout, fmt: PromptFormat, tokenizer, source: list[tuple[int, ...]],
                    target_words: list[str], delays: list[int]) -> DecisionPoints:
    """Lay out a sentence pair along a schedule and say, after each unit read, whether the schedule writes next.

    Streaming hands a learned policy the hidden state of the last token fed after a read, so that token must keep
    its place in the training sequence: layouts that defer a token past later reads (``expost``) are refused."""
    if not layout.reuses_cache:
        raise SimulmtError(f"a learned policy needs a layout that reuses the cache; {layout.name} recomputes")
    reads: list[tuple[int, PlacedToken]] = []
    (example,) = build_examples(layout, fmt, tokenizer, source, target_words, delays, reads=reads)
    writes_after = set(delays)
    indices, labels = [], []
    for units, (index, token) in enumerate(reads[: len(source) - 1], start=1):
        if index >= len(example.tokens) or example.tokens[index] is not token:
            raise SimulmtError(f"layout {layout.name} moves tokens after a read: a learned policy's decision "
                               f"points cannot be laid out for training (use the interleaved layout)")
        indices.append(index)
        labels.append(int(units in writes_after))
    return DecisionPoints(example, indices, labels)
