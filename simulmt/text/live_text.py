"""Text as it arrives on a live stream -> whole words -> sentences.

A client sends text in pieces: whole words, several words, or a word cut in two. ``LiveText.feed`` keeps a trailing
partial word until the next whitespace (or the end) and returns what the translator should do, in order:
``Word(text)`` for every complete word, ``Boundary()`` before the first word of a new sentence.

A sentence ends where ``simulmt.core.sentence_ends.ends_sentence`` says so (that needs the next word, so the
boundary comes with the next word, one word late), at an explicit ``boundary()`` from the client, or after
``max_words`` words (the bound that keeps every sentence's context and time bounded, on a talk that runs for hours).

A word is at most ``max_word_chars`` characters: a longer one (a complete word, or a partial one that grows past
the bound while its end has not arrived) is dropped up to the next white space and ``Rejected(reason)`` is returned
in its place, so a client cannot grow the partial word without bound.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from simulmt.core.sentence_ends import DEFAULT_MAX_WORDS, ends_sentence


@dataclass(frozen=True)
class Word:
    text: str


@dataclass(frozen=True)
class Boundary:
    pass


@dataclass(frozen=True)
class Rejected:
    reason: str


DEFAULT_MAX_WORD_CHARS = 100
_SPACE = re.compile(r"\s")


class LiveText:
    def __init__(self, max_words: int = DEFAULT_MAX_WORDS, max_word_chars: int = DEFAULT_MAX_WORD_CHARS):
        self.max_words = max_words
        self.max_word_chars = max_word_chars
        self.partial = ""  # the start of a word whose end has not arrived
        self.skipping = False  # inside a word over max_word_chars: dropped up to the next white space
        self.last: str | None = None  # the last complete word (its sentence end is decided by the next one)
        self.in_sentence = 0  # words of the current sentence so far

    def feed(self, text: str) -> list[Word | Boundary | Rejected]:
        if self.skipping:
            space = _SPACE.search(text)
            if space is None:
                return []
            text, self.skipping = text[space.start():], False
        pieces = (self.partial + text).split()
        complete = pieces if text[-1:].isspace() else pieces[:-1]
        self.partial = "" if text[-1:].isspace() or not pieces else pieces[-1]
        out: list[Word | Boundary | Rejected] = []
        for word in complete:
            if len(word) > self.max_word_chars:
                out.append(self._rejected(len(word)))
                continue
            if self.last is not None and (ends_sentence(self.last, word) or self.in_sentence >= self.max_words):
                out.append(Boundary())
                self.in_sentence = 0
            out.append(Word(word))
            self.last = word
            self.in_sentence += 1
        if len(self.partial) > self.max_word_chars:
            out.append(self._rejected(len(self.partial), more=True))
            self.partial, self.skipping = "", True
        return out

    def _rejected(self, chars: int, more: bool = False) -> Rejected:
        return Rejected(f"a word of {'over ' if more else ''}{chars} characters was dropped: words are at most "
                        f"{self.max_word_chars} characters (separate words with spaces)")

    def boundary(self) -> list[Word | Boundary | Rejected]:
        """The client says the sentence is over: the partial word is complete, the sentence ends."""
        out = self.feed(" ") if self.partial or self.skipping else []
        if self.in_sentence:
            out.append(Boundary())
        self.last, self.in_sentence = None, 0
        return out

    def end(self) -> list[Word | Boundary | Rejected]:
        """The input is over: as ``boundary``."""
        return self.boundary()
