"""A speech model that reads words: the CTC head's best path, spelled block by block, enters the LLM as text.

The aligned adapter (``reads="embeddings"``) hands the LLM its own embeddings and relies on the align stage to make
the LLM understand them; at the sizes trainable here it did not (docs/speech-diagnosis.md). A ctc stage with a free
head (``--ctc-head free``) learns instead to *spell* the audio in the LLM's tokens. A model saved by that stage
(``reads="ctc-words"``) runs the head on each block's adapter frames and turns the best path into source words::

    block 1 frames -> classes  a a _ b b      -> tokens "▁A" "▁wo"             -> words: "A"   ("wo" goes on)
    block 2 frames -> classes  b c _ _ _      -> tokens "man"                  -> words: none  ("woman" may go on)
    block 3 frames -> classes  d d _ e _      -> tokens "▁drinks" "▁a"         -> words: "woman", "drinks"
    ...                                           finish: the word left        -> words: "a", ...

* Repeats merge across block edges: the class of a block's last frame is carried to the next (``previous``), so
  spelling block by block gives exactly the tokens of the whole utterance's best path (``CTCScorer.greedy``).
* A word is complete once a token that starts another word arrives (a ``▁``/``Ġ`` piece: the tokenizer's word
  starts, as the decoder's ``word_start_table``), or the audio ends. Each complete word's tokens are decoded on their
  own, so a word given out never changes (a tokenizer's decode may rewrite earlier text as more tokens follow:
  byte pieces, space clean-up), a word split over two blocks is never cut, and a block may complete no word, or
  several.
* The words are pushed as the text path's words (``Stream.push``): the LLM, its adapter and its policy (wait-k
  counts words, a learned head sees the text it was trained on) work as for text. A word's delay is the audio
  time of the block that completed it; the last word's is the end of the audio.

This is a cascade (speech recognition, then text translation) inside one model: what it gains over the aligned
adapter, and what it costs, is measured in docs/speech-cascade.md. State is explicit and plain: the last frame's
class and the tokens of the word not complete yet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from simulmt.core.vocabulary import WORD_START_PREFIXES
from simulmt.speech.ctc import CTCScorer, collapse


def word_start_ids(tokenizer, vocab: list[int]) -> frozenset[int]:
    """The token ids of ``vocab`` that begin a new word (a leading ``▁``, ``Ġ``, space or newline piece)."""
    pieces = tokenizer.convert_ids_to_tokens(list(vocab))
    return frozenset(t for t, piece in zip(vocab, pieces) if piece and piece.startswith(WORD_START_PREFIXES))


@dataclass
class SpelledWords:
    """One utterance's words as its blocks arrive. ``decode`` turns token ids into text (the LLM's tokenizer);
    ``word_starts`` are the token ids that begin a word (:func:`word_start_ids`)."""

    scorer: CTCScorer
    decode: Callable[[list[int]], str]
    word_starts: frozenset[int]
    previous: int = 0  # the class of the last frame seen (0, the blank, before the first)
    pending: list[int] = field(default_factory=list)  # the tokens of the word not complete yet

    @torch.no_grad()
    def push(self, frames: torch.Tensor) -> list[str]:
        """One block's adapter frames, (frames, dim); returns the words this block completed."""
        classes, self.previous = collapse(self.scorer(frames).argmax(-1).tolist(), self.previous)
        words: list[str] = []
        for token in (self.scorer.vocab[c - 1] for c in classes):
            if token in self.word_starts and self.pending:  # the word before it is complete
                words += self.decode(self.pending).split()
                self.pending = []
            self.pending.append(token)
        return words

    def finish(self) -> list[str]:
        """The end of the audio: the word not complete yet, if any."""
        words, self.pending = self.decode(self.pending).split(), []
        return words


def spelled_words(new_spelling: Callable[[], SpelledWords], blocks: list[torch.Tensor], end: int | None = None
                  ) -> tuple[list[str], list[int]]:
    """A whole utterance's words (its blocks' adapter frames, in order; ``new_spelling`` makes a fresh state)
    and, for each, the index of the block that completed it (for the word only the end completes: ``end``, by default
    the last block's; ``len(blocks)`` numbers it as the live session numbers its arrival): what streaming gives, word
    for word."""
    spelling = new_spelling()
    words: list[str] = []
    completed: list[int] = []
    for b, frames in enumerate(blocks):
        new = spelling.push(frames)
        words += new
        completed += [b] * len(new)
    new = spelling.finish()
    return words + new, completed + [len(blocks) - 1 if end is None else end] * len(new)
