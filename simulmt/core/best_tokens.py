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
A row whose every token is excluded gets -1. Where the excluded tokens are in most blocks (a small vocabulary:
every block), a second pass would be the whole vocabulary again, so the masked rows are taken whole instead: one
addition and one maximum over (rows, sets, vocab), the same first argmax.

The stream checks the rules this does not know (a word that must start, a segment end once the source is finished,
a repeated n-gram) on the token it gets; where one applies, it decides on its logits row as before (rare).
"""

from __future__ import annotations

import torch

BLOCK = 512


class BestTokens:
    """``best(logits)`` -> (rows, sets) long: per row, the first argmax over the first ``vocab`` logits with each
    exclusion set's tokens left out (-1: all were). ``excluded``: boolean (vocab,) tables, one per set; ``dense``:
    the masked rows whole (True) or by blocks (False); None chooses (see above).

    Every set is done in the same tensor operations (a set is one more index of a small dimension), so a forward's
    best tokens cost the same few operations however many sets there are: on a GPU each is a kernel launch, host
    time the chip waits for."""

    def __init__(self, excluded: list[torch.Tensor], dense: bool | None = None):
        vocab = excluded[0].shape[0]
        self.vocab = vocab
        self.blocks = -(-vocab // BLOCK)
        pad = self.blocks * BLOCK - vocab  # the last block's slots beyond the vocabulary are excluded from every set
        out = torch.stack([torch.cat([t.bool(), torch.ones(pad, dtype=torch.bool)]) for t in excluded])
        out = out.view(len(excluded), self.blocks, BLOCK)
        dirty = out.any(dim=2).any(dim=0).nonzero()[:, 0]  # blocks that hold an excluded token of some set
        bias = torch.zeros(out.shape).masked_fill(out, float("-inf"))  # (sets, blocks, BLOCK)
        self.dense = 2 * len(dirty) > self.blocks if dense is None else dense  # (None: the masked rows whole where
        # most blocks hold an excluded token)
        if self.dense:
            self._cpu = (bias.view(len(excluded), -1)[:, :vocab].contiguous(),)
        else:
            self._cpu = (dirty, bias[:, dirty], bias, torch.arange(len(excluded)) * self.blocks)
        self._row_starts: dict[tuple[int, torch.device], torch.Tensor] = {}  # (rows, device) -> each row's first
        # block as a flat block number, (rows, 1): made once per batch size, not per forward
        self._on: dict[torch.device, tuple[torch.Tensor, ...]] = {torch.device("cpu"): self._cpu}

    def _tables(self, device: torch.device) -> tuple[torch.Tensor, ...]:
        if device not in self._on:
            self._on[device] = tuple(t.to(device) for t in self._cpu)
        return self._on[device]

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        if self.dense:
            (bias,) = self._tables(logits.device)
            best, index = (logits[:, None, : self.vocab].float() + bias).max(dim=-1)  # (rows, sets)
            return index.masked_fill(best == float("-inf"), -1)
        rows = logits.shape[0]
        dirty, dirty_bias, bias, set_starts = self._tables(logits.device)
        sets = len(set_starts)
        x = logits[:, : self.vocab]
        whole = (self.vocab // BLOCK) * BLOCK
        if whole < self.vocab or x.stride(-1) != 1:  # a padded copy (a vocabulary that is not whole blocks)
            padded = x.new_full((rows, self.blocks * BLOCK), float("-inf"))
            padded[:, : self.vocab] = x
            x = padded
        blocks = x.reshape(rows, self.blocks, BLOCK)
        m = blocks.amax(dim=-1).float()[:, None, :]
        m = torch.cat([m] * sets, dim=1)  # (rows, sets, blocks): the one pass (``cat``: a quarter of
        # ``repeat``'s cost on a CPU)
        if len(dirty):  # the blocks that hold excluded tokens, again without them
            m.index_copy_(2, dirty, (blocks.index_select(1, dirty).float()[:, None] + dirty_bias).amax(dim=-1))
        best, block = m.max(dim=-1)  # (rows, sets): the first block that holds the maximum (``max`` gives the
        # first index of a tie, as ``argmax``, at about half its cost on a CPU)
        # each row's chosen blocks and their exclusions, by flat row numbers (``index_select``: a fraction of the
        # cost of indexing with tensors on a CPU; logits wider than the vocabulary are not one flat table: indexed)
        if blocks.is_contiguous():
            key = (rows, logits.device)
            if key not in self._row_starts:
                self._row_starts[key] = torch.arange(rows, device=logits.device)[:, None] * self.blocks
            chosen = blocks.view(rows * self.blocks, BLOCK).index_select(0, (self._row_starts[key] + block).view(-1))
        else:
            chosen = blocks[torch.arange(rows, device=logits.device)[:, None], block].reshape(-1, BLOCK)
        excluded = bias.view(-1, BLOCK).index_select(0, (set_starts + block).view(-1))
        within = (chosen.float() + excluded).view(rows, sets, BLOCK).max(dim=-1).indices
        return (block * BLOCK + within).masked_fill(best == float("-inf"), -1)
