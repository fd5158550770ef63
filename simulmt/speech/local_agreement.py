"""LocalAgreement-n: which words of a recogniser's running transcripts are final.

A streaming recogniser transcribes its growing audio buffer again after every step of new audio. The newest words of
a transcript are unreliable (the word may be cut, the model may invent an ending), so a word is *confirmed* once
``n`` consecutive transcripts agree on it and on every word before it: the longest common prefix of the last ``n``
hypotheses (after the words already confirmed) is emitted (Liu et al. 2020, "Low-latency sequence-to-sequence
speech recognition and translation by partial hypothesis selection"; Macháček et al. 2023, whisper_streaming,
with n = 2). Words are compared without case and surrounding punctuation; a confirmed word keeps the text and
times of the newest hypothesis.

Each transcript covers the buffer, which holds the last ``in_buffer`` confirmed words (the recogniser says how many
are left when it trims the buffer): a transcript that begins with them goes on after them. Otherwise (it heard them
differently) words that end before the last confirmed word's end (less ``overlap_ms``) are the past, and a run of
words at the start that repeats the tail of the confirmed ones (up to 5 words) is dropped too. Pure: no model, no
audio.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field

_STRIP = string.punctuation + "“”‘’«»¿¡…–—"


@dataclass(frozen=True)
class TimedWord:
    text: str  # as the recogniser wrote it, punctuation and case included
    start_ms: float  # on the audio's clock
    end_ms: float
    ends_segment: bool = False  # the last word of a segment the recogniser timed (a safe place to cut audio)

    @property
    def key(self) -> str:
        return word_key(self.text)


def word_key(text: str) -> str:
    """A word as transcripts are compared: without case and surrounding punctuation."""
    return text.strip().strip(_STRIP).lower()


@dataclass
class LocalAgreement:
    n: int = 2
    overlap_ms: float = 100.0  # a hypothesis word ending this much before the last confirmed end is the past
    confirmed: list[TimedWord] = field(default_factory=list)
    history: list[list[TimedWord]] = field(default_factory=list)  # the last n-1 hypotheses, past the confirmed
    in_buffer: int = 0  # the last confirmed words whose audio is still in the recogniser's buffer
    hold_ms: float = 0.0  # a word that ends this close to the end of the audio is not confirmed yet, agreed or not

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"LocalAgreement needs n >= 1, got {self.n}")

    def update(self, hypothesis: list[TimedWord], audio_end_ms: float | None = None) -> list[TimedWord]:
        """A new transcript of the buffer (times on the audio's clock) -> the words it confirms, in order.
        ``audio_end_ms``: where the audio ends (with ``hold_ms``, a word ending within ``hold_ms`` of it waits: two
        transcripts of a short step may agree on a word the audio cut, "gentle" for "gentleman")."""
        fresh = self._after_confirmed(hypothesis)
        candidates = [*self.history[-(self.n - 1):], fresh] if self.n > 1 else [fresh]
        newly: list[TimedWord] = []
        held = float("inf") if audio_end_ms is None or not self.hold_ms else audio_end_ms - self.hold_ms
        if len(candidates) == self.n:
            for i, word in enumerate(fresh):
                if word.end_ms > held:
                    break
                if all(i < len(h) and h[i].key == word.key for h in candidates):
                    newly.append(word)
                else:
                    break
        self.confirmed += newly
        self.in_buffer += len(newly)
        # every candidate starts with the confirmed words: what follows them is the history the next one meets
        self.history = [h[len(newly):] for h in candidates][-(self.n - 1):] if self.n > 1 else []
        return newly

    def flush(self, but_last: bool = False) -> list[TimedWord]:
        """The audio is over: the newest hypothesis's words past the confirmed ones are final (``but_last``: all
        but its last word, which the audio may have cut: the buffer is full and must move on)."""
        rest = self.history[-1] if self.history else []
        if but_last:
            rest = rest[:-1]
            self.history = [h[len(rest):] for h in self.history] if rest else self.history
            self.confirmed += rest
            self.in_buffer += len(rest)
            return rest
        self.confirmed += rest
        self.in_buffer += len(rest)
        self.history = []
        return rest

    def _after_confirmed(self, hypothesis: list[TimedWord]) -> list[TimedWord]:
        if not self.confirmed:
            return list(hypothesis)
        inside = self.confirmed[len(self.confirmed) - min(self.in_buffer, len(self.confirmed)):]
        if inside and [w.key for w in hypothesis[:len(inside)]] == [w.key for w in inside]:
            return list(hypothesis[len(inside):])  # it begins with what is confirmed: what follows is new
        last_end = self.confirmed[-1].end_ms
        words = [w for w in hypothesis if w.end_ms > last_end - self.overlap_ms]
        tail = [w.key for w in self.confirmed[-5:]]
        for size in range(min(5, len(words), len(tail)), 0, -1):  # a repeat of what was just confirmed
            if [w.key for w in words[:size]] == tail[-size:]:
                return words[size:]
        return words
