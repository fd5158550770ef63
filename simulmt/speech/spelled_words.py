"""A speech model that reads words: the CTC head's best path, spelled block by block, enters the LLM as text.

The aligned adapter (``reads="embeddings"``) hands the LLM its own embeddings and relies on the align stage to make
the LLM understand them; at the sizes trainable here it did not (docs/speech-diagnosis.md). A ctc stage with a free
head (``--ctc-head free``) learns instead to *spell* the audio in the LLM's tokens. A model saved by that stage
(``reads="ctc-words"``) runs the head on each block's adapter frames and turns the best path into source words::

    block 1 frames -> classes  a a _ b _      -> tokens "▁A" "▁woman"          -> words: "A"   ("woman" may go on)
    block 2 frames -> classes  b b _ c c      -> tokens "▁drinks"              -> words: "woman"
    ...                                           finish: every word left     -> words: "drinks", ...

* Repeats merge across block edges: the class of a block's last frame is carried to the next (``previous``), so
  spelling block by block gives exactly the tokens of the whole utterance's best path (``CTCScorer.greedy``).
* A word is complete once the text the tokens decode to has started another word after it (or the audio has
  ended), so a word split over two blocks is never cut; a block may complete no word, or several.
* The words are pushed as the text path's words (``Stream.push``): the LLM, its adapter and its policy (wait-k
  counts words, a learned head sees the text it was trained on) work as for text. A word's delay is the audio
  time of the block that completed it.

This is a cascade (speech recognition, then text translation) inside one model: what it gains over the aligned
adapter, and what it costs, is measured in docs/speech-cascade.md. State is explicit and plain: the last frame's
class, the tokens spelled, and how many words were given out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from simulmt.speech.ctc import CTCScorer, collapse


@dataclass
class SpelledWords:
    """One utterance's words as its blocks arrive. ``decode`` turns token ids into text (the LLM's tokenizer)."""

    scorer: CTCScorer
    decode: Callable[[list[int]], str]
    previous: int = 0  # the class of the last frame seen (0, the blank, before the first)
    tokens: list[int] = field(default_factory=list)  # the token ids spelled so far
    given: int = 0  # how many words were given out

    @torch.no_grad()
    def push(self, frames: torch.Tensor) -> list[str]:
        """One block's adapter frames, (frames, dim); returns the words this block completed."""
        classes, self.previous = collapse(self.scorer(frames).argmax(-1).tolist(), self.previous)
        self.tokens += [self.scorer.vocab[c - 1] for c in classes]
        text = self.decode(self.tokens)
        words = text.split()
        complete = words if text[-1:].isspace() else words[:-1]
        return self._give(complete)

    def finish(self) -> list[str]:
        """The end of the audio: the words not given out yet."""
        return self._give(self.decode(self.tokens).split())

    def _give(self, words: list[str]) -> list[str]:
        new = words[self.given:]
        self.given = max(self.given, len(words))
        return new


def spelled_words(scorer: CTCScorer, decode: Callable[[list[int]], str], blocks: list[torch.Tensor]
                  ) -> tuple[list[str], list[int]]:
    """A whole utterance's words (its blocks' adapter frames, in order) and, for each, the index of the block that
    completed it (the last block for the words only the end completes): what streaming gives, word for word."""
    spelling = SpelledWords(scorer, decode)
    words: list[str] = []
    completed: list[int] = []
    for b, frames in enumerate(blocks):
        new = spelling.push(frames)
        words += new
        completed += [b] * len(new)
    new = spelling.finish()
    return words + new, completed + [len(blocks) - 1] * len(new)
