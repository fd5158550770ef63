"""The best allowed token of every row of a forward's logits at once: greedy decoding's choice, batched.

A stream's greedy proposal is the first argmax of its logits with some tokens excluded: always the special tokens
(``Vocabulary.banned``), and the end tokens while its policy may not end a segment. Done per stream, that is
several passes over the vocabulary (262k tokens for Gemma 3) each round and stream, and, on a GPU, a device-to-host
copy each. ``BestTokens`` does it for every row of a forward together: one reduction pass over the logits, and one
small tensor of token ids (one column per exclusion set) that the engine copies to the host once per forward.

How: the vocabulary is cut into blocks of ``BLOCK`` tokens. Each row's block maxima are taken over the raw logits
(one pass); the few blocks that hold excluded tokens (15 of 512 for Gemma 3: its special tokens are mostly one
range) are taken again with those tokens at -inf. The first block whose maximum is the row's maximum holds the
first argmax; within it, the first maximum. That is ``torch.argmax`` of the masked row, ties included (tested).
A row whose every token is excluded gets -1.

The stream checks the rules this does not know (a word that must start, a segment end once the source is finished,
a repeated n-gram) on the token it gets; where one applies, it decides on its logits row as before (rare).
"""

from __future__ import annotations

import torch

BLOCK = 512


class BestTokens:
    """``best(logits)`` -> (rows, sets) long: per row, the first argmax over the first ``vocab`` logits with each
    exclusion set's tokens left out (-1: all were). ``excluded``: boolean (vocab,) tables, one per set."""

    def __init__(self, excluded: list[torch.Tensor]):
        vocab = excluded[0].shape[0]
        self.vocab = vocab
        self.blocks = -(-vocab // BLOCK)
        pad = self.blocks * BLOCK - vocab  # the last block's slots beyond the vocabulary are excluded from every set
        self._sets = []
        for table in excluded:
            out = torch.cat([table.bool(), torch.ones(pad, dtype=torch.bool)]).view(self.blocks, BLOCK)
            dirty = out.any(dim=1).nonzero()[:, 0]
            bias = torch.zeros(self.blocks, BLOCK).masked_fill(out, float("-inf"))
            self._sets.append((dirty, bias))
        self._on: dict[torch.device, list[tuple[torch.Tensor, torch.Tensor]]] = {torch.device("cpu"): self._sets}

    def _tables(self, device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
        if device not in self._on:
            self._on[device] = [(d.to(device), b.to(device)) for d, b in self._sets]
        return self._on[device]

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        rows = logits.shape[0]
        x = logits[:, : self.vocab]
        whole = (self.vocab // BLOCK) * BLOCK
        if whole < self.vocab or x.stride(-1) != 1:  # a padded copy (a vocabulary that is not whole blocks)
            padded = x.new_full((rows, self.blocks * BLOCK), float("-inf"))
            padded[:, : self.vocab] = x
            x = padded
        blocks = x.reshape(rows, self.blocks, BLOCK)
        maxima = blocks.amax(dim=-1).float()  # (rows, blocks): the one pass over the vocabulary
        index = torch.arange(rows, device=logits.device)
        out = []
        for dirty, bias in self._tables(logits.device):
            m = maxima.clone()
            if len(dirty):
                m[:, dirty] = (blocks[:, dirty].float() + bias[dirty]).amax(dim=-1)
            block = m.argmax(dim=-1)  # the first block that holds the maximum
            within = (blocks[index, block].float() + bias[block]).argmax(dim=-1)
            token = block * BLOCK + within
            out.append(torch.where(m[index, block] == float("-inf"), torch.full_like(token, -1), token))
        return torch.stack(out, dim=1)
