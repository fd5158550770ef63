"""A head vocabulary: logits for the target language's tokens and the stream's own source tokens only (opt-in).

Gemma 3's vocabulary has 262,144 tokens for some 140 languages, and its LM head (262k x 640) costs more per row
than the decoder does per token (168M multiply-adds against 100M): a third of a one-stream forward's time on a
CPU, and more with many streams. A German translation uses a few tens of thousands of those tokens. With a head
vocabulary, each answered query gets logits for

* the *kept* tokens: those that occur in target-language text the user names (a training set's target side, a
  monolingual corpus), plus the prompt format's end tokens; one product with that many rows of the head, and
* the tokens of the source words its stream has read before that query (names and numbers are copied from the
  source: without them "Sarandos" became "Saradas"), with and without a leading space and with the first letter
  upper-cased (German nouns from English words: "scooter" -> "Scooter"), each row's own, computed row by row,

and minus infinity for every other token, so a greedy choice, the decoding rules and a sampler see only those.

What it changes, and why it is not an ``Execution`` switch: wherever the full head's best token is outside both
sets, the output (docs/engine-speed.md, "A head vocabulary", measures how often). Log-probabilities are
normalised over the tokens computed (a forced token outside them has -inf). What it keeps: batched == one stream
(a row's extra tokens are its own stream's, computed row by row), guesses on == off (the source tokens read are a
function of the placed list, the same whether a read was guessed or not), live == simulated (no word the stream
has not read enters its vocabulary). Only the engine's head is shortened: ``ModelRunner.forward`` (training-style
checks, the parity tests) computes the whole vocabulary. Other special tokens than the format's ends are never
proposed (vocabulary.py), so they are not kept.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from simulmt.core.packed_linear import PackedLinear
from simulmt.core.placed import Role
from simulmt.core.prompt_format import word_tokens
from simulmt.core.vocabulary import memo, remember, word_text
from simulmt.errors import SimulmtError


@dataclass(frozen=True)
class HeadVocabulary:
    """The token ids to keep in the LM head (sorted, unique) and where they came from."""

    ids: tuple[int, ...]
    origin: str = ""

    @classmethod
    def from_texts(cls, tokenizer, paths: Iterable[str | Path], origin: str | None = None) -> "HeadVocabulary":
        """Every token of the lines of ``paths`` (UTF-8 text in the target language), as the tokenizer splits them
        (without special tokens: the translator adds its format's end tokens)."""
        paths = [Path(str(p).strip()) for p in paths if str(p).strip()]
        if not paths:
            raise SimulmtError("a head vocabulary needs at least one text file in the target language")
        ids: set[int] = set()
        for path in paths:
            if not path.is_file():
                raise SimulmtError(f"head vocabulary: {path} is not a file (give text in the target language, one "
                                   f"sentence a line)")
            lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            for start in range(0, len(lines), 4096):
                for encoded in tokenizer(lines[start:start + 4096], add_special_tokens=False)["input_ids"]:
                    ids.update(encoded)
        if not ids:
            raise SimulmtError(f"head vocabulary: no text in {', '.join(map(str, paths))}")
        return cls(tuple(sorted(ids)), origin or ",".join(p.name for p in paths))

    def with_ids(self, more: Iterable[int]) -> "HeadVocabulary":
        return HeadVocabulary(tuple(sorted(set(self.ids) | set(more))), self.origin)

    def within(self, vocab_size: int) -> "HeadVocabulary":
        """The ids below ``vocab_size`` (a tokenizer may know ids the model's head has no row for)."""
        return HeadVocabulary(tuple(i for i in self.ids if 0 <= i < vocab_size), self.origin)

    @property
    def label(self) -> str:
        """What a run records: where the ids came from, how many, and a digest of them."""
        digest = hashlib.sha256(np.asarray(self.ids, dtype=np.int64).tobytes()).hexdigest()[:16]
        return f"{self.origin}: {len(self.ids)} tokens, sha256 {digest}, source spellings"


def source_spellings(tokenizer, unit: tuple[int, ...]) -> tuple[int, ...]:
    """The token ids of a source word's other spellings that a translation may copy: with and without its leading
    space, and with its first letter upper-cased ("scooter" -> " Scooter", a German noun from an English word; a name
    that began the source, tokenised without its space, written inside the target). Memoised per tokenizer."""
    table = memo(tokenizer, "source_spellings")
    found = table.get(unit)
    if found is None:
        word = word_text(tokenizer, unit)
        first = next((i for i, c in enumerate(word) if c.isalpha()), None)  # ('"frog"': its first letter)
        forms = {word} if first is None else {word, word[:first] + word[first].upper() + word[first + 1:]}
        ids = {i for form in forms for space in (False, True) for i in word_tokens(tokenizer, form, space)}
        found = remember(table, unit, tuple(sorted(ids.difference(unit))))
    return found


def read_source_ids(tokens, keep: int, fed, offsets: list[int], spellings) -> list[np.ndarray]:
    """For each answered query of one request: the ids of the source tokens placed before it (those of
    ``tokens[:keep]``, the stream's cached list, and of ``fed`` up to the query), and those of the other spellings
    of each source word read (``spellings``: source unit index -> token ids, ``Source.source_spellings``).
    ``offsets``: the answered queries as offsets from the end of ``fed`` (``ForwardRequest.answer_offsets``). (An
    alternative stands in for the guessed target token before it and does not see it: a target token, so the
    source read is the same.)"""
    cached = [t for t in tokens[:keep] if t.role is Role.SOURCE and t.token_id >= 0]
    base = {t.token_id for t in cached}
    units = {t.unit for t in cached}
    for unit in units:
        base.update(spellings(unit))
    out = []
    for offset in offsets:
        more = [t for t in fed[:len(fed) + offset + 1] if t.role is Role.SOURCE and t.token_id >= 0]
        ids = base | {t.token_id for t in more}
        for unit in {t.unit for t in more} - units:
            ids.update(spellings(unit))
        out.append(np.fromiter(ids, dtype=np.int64, count=len(ids)))
    return out


class ShortlistHead(nn.Module):
    """The LM head over a ``HeadVocabulary`` (and each row's extra tokens): (R, hidden) -> (R, vocab) logits,
    minus infinity outside. ``softcap``: the model's final logit soft-capping, applied to the computed logits."""

    def __init__(self, head: nn.Module, vocabulary: HeadVocabulary, vocab_size: int, softcap: float | None = None,
                 embeddings: nn.Module | None = None):
        super().__init__()
        keep = torch.tensor(sorted(set(vocabulary.ids)), dtype=torch.long)
        if keep.numel() == 0 or int(keep.max()) >= vocab_size or int(keep.min()) < 0:
            raise SimulmtError(f"head vocabulary {vocabulary.origin!r}: ids must lie in 0..{vocab_size - 1}")
        self.vocab_size, self.softcap, self.label = vocab_size, softcap, vocabulary.label
        self.kept = np.zeros(vocab_size, dtype=bool)
        self.kept[keep.numpy()] = True
        device = next(head.parameters(), torch.empty(0)).device
        self.keep = keep.to(device)  # (a plain attribute: this module is never moved; it lives where the head does)
        if isinstance(head, PackedLinear):
            weight, bias = head.unpacked()  # (the float16-rounded weights it computes with, as float32)
            sub = nn.Linear(weight.shape[1], keep.numel(), bias=bias is not None)
            sub.weight.data = weight[keep].contiguous()
            if bias is not None:
                sub.bias.data = bias[keep].contiguous()
            self.sub: nn.Module = PackedLinear(sub)
            tied = embeddings is not None and _same_rows(embeddings.weight, weight)
            # the rows of the extra tokens: the embedding table when the head is tied to it (float32; rounded as
            # the packed head's were), else a float16 copy of the head (what the packed head holds)
            self.rows = embeddings.weight if tied else weight.half()
            self.bias = bias
            self.round_rows = True
        elif isinstance(head, nn.Linear):
            sub = nn.Linear(head.in_features, keep.numel(), bias=head.bias is not None, device=head.weight.device,
                            dtype=head.weight.dtype)
            sub.weight.data = head.weight.detach()[keep.to(head.weight.device)].contiguous()
            if head.bias is not None:
                sub.bias.data = head.bias.detach()[keep.to(head.weight.device)].contiguous()
            self.sub = sub
            self.rows, self.bias, self.round_rows = head.weight.detach(), head.bias, False
        else:
            raise SimulmtError(f"a head vocabulary needs a linear LM head, not {type(head).__name__}")

    @property
    def size(self) -> int:
        return int(self.keep.numel())

    def _cap(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.tanh(logits / self.softcap) * self.softcap if self.softcap else logits

    def forward(self, hidden: torch.Tensor, extras: list[np.ndarray] | None = None) -> torch.Tensor:
        """``extras``: per row of ``hidden``, more token ids to compute (ids already kept are skipped). Each row's
        extra logits are computed on their own (one row, its ids: nothing of another row's), to float32 rounding
        the values the full head gives."""
        computed = self._cap(self.sub(hidden))
        out = computed.new_full((hidden.shape[0], self.vocab_size), float("-inf"))
        out.index_copy_(1, self.keep, computed)
        if extras is None:
            return out
        extras = [ids[ids < self.vocab_size] for ids in extras]  # (a spelling's token beyond the head's rows)
        extras = [ids[~self.kept[ids]] if len(ids) else ids for ids in extras]
        sizes = [len(ids) for ids in extras]
        if not sum(sizes):
            return out
        index = torch.from_numpy(np.concatenate(extras)).to(self.rows.device, non_blocking=True)  # one copy
        rows = self.rows.index_select(0, index)
        if self.round_rows:
            rows = rows.half().float()
        bias = None if self.bias is None else self.bias.index_select(0, index)
        start = 0
        for row, size in enumerate(sizes):
            if size:
                span = slice(start, start + size)
                values = rows[span] @ hidden[row].to(rows.dtype)
                if bias is not None:
                    values = values + bias[span].to(values.dtype)
                out[row, index[span]] = self._cap(values).to(out.dtype)
                start += size
        return out


def _same_rows(embedding: torch.Tensor, unpacked: torch.Tensor) -> bool:
    """Is the packed head the embedding table rounded to float16 (a tied head)? Checked on a spread of rows."""
    if embedding.shape != unpacked.shape:
        return False
    sample = torch.linspace(0, embedding.shape[0] - 1, steps=min(64, embedding.shape[0])).long()
    return torch.equal(embedding.detach()[sample].float().half().float(), unpacked[sample])
