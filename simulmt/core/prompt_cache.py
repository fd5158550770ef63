"""Shared prompts: the keys and values of a prompt computed once and copied into every new stream that starts with it.

Every stream of a run (every sentence of an evaluation, every sentence a service cuts from a talk) starts with the
same instruction and chat header: the ``PROMPT`` tokens before its first source token. Their keys and values
depend on those tokens alone (a prompt token sees only earlier prompt tokens, whatever the layout), so the engine
computes them with the first stream that brings them and copies them into the cache row of every later stream
whose first request starts with the same tokens at the same position ids::

    first request of a new stream:   p p p p p p p p p p p p  s s m m m     keep 0, 17 tokens
    the prompt is in the store:      [copied: 12 keys/values]  s s m m m     keep 12, 5 tokens computed

The stream itself is unchanged: it asked for the same forward and receives the same logits (the copy holds what
its own forward would have written, up to float rounding of a different batch), and its compute count is that of
the whole request, so a sentence's FLOPs do not depend on what ran before it. The engine counts the tokens it
did not compute (``EngineStats.shared_tokens``).

A prompt is shared only when the request feeds more than the prompt (a token must be left to give the logits),
from token ids (speech frames carry embeddings, never shared). The store keeps the most recently used prompts, a
few at most (a run has one or two: one per layout and language pair).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from simulmt.core.placed import PlacedToken, Role

PromptKey = tuple[tuple[int, int], ...]  # (token id, position id) of each prompt token


@dataclass
class SharedPrompt:
    keys: list[torch.Tensor]  # per layer: (kv heads, length, head dim)
    values: list[torch.Tensor]

    @property
    def length(self) -> int:
        return self.keys[0].shape[1]


def prompt_key(tokens: tuple[PlacedToken, ...] | list[PlacedToken], min_length: int = 2) -> PromptKey | None:
    """The leading prompt tokens of a first request, when they can be shared: at least ``min_length`` of them,
    all from token ids, and at least one token after them."""
    n = 0
    while n < len(tokens) and tokens[n].role is Role.PROMPT and tokens[n].token_id >= 0:
        n += 1
    if n < min_length or n >= len(tokens):
        return None
    return tuple((t.token_id, t.position) for t in tokens[:n])


class PromptCache:
    def __init__(self, capacity: int = 4):
        self.capacity = capacity
        self._store: OrderedDict[PromptKey, SharedPrompt] = OrderedDict()

    def get(self, key: PromptKey) -> SharedPrompt | None:
        entry = self._store.get(key)
        if entry is not None:
            self._store.move_to_end(key)
        return entry

    def put(self, key: PromptKey, entry: SharedPrompt) -> None:
        self._store[key] = entry
        self._store.move_to_end(key)
        while len(self._store) > self.capacity:
            self._store.popitem(last=False)

    def __len__(self) -> int:
        return len(self._store)

    def memory_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for e in self._store.values() for t in (*e.keys, *e.values))
