"""LocalAgreement-n: which words of a recogniser's running transcripts are final.

A streaming recogniser transcribes its growing audio buffer again after every step of new audio. The newest words of
a transcript are unreliable (the word may be cut, the model may invent an ending), so a word is *confirmed* once
``n`` consecutive transcripts agree on it and on every word before it: the longest common prefix of the last ``n``
hypotheses (after the words already confirmed) is emitted (Liu et al. 2020, "Low-latency sequence-to-sequence
speech recognition and translation by partial hypothesis selection"; Macháček et al. 2023, whisper_streaming,
with n = 2). Words are compared without case and surrounding punctuation, a small number as its word ("2" and
"Two" agree); a confirmed word keeps the text and times of the newest hypothesis.

Three options widen and narrow what counts as agreeing (all off: the published rule, two consecutive transcripts):

* ``lookback``: the newest transcript may agree with any ``n - 1`` of the last ``n - 1 + lookback`` transcripts
  before it, not only the consecutive ones. One transcript that heard a word differently ("a by-grace" between two
  "a bike race") then delays nothing: the newest and the one before it confirm what they share.
* ``min_probability``: a word the newest transcript is unsure of (its probability, ``TimedWord.probability``, below
  this) waits, however many transcripts agree on it: Whisper writes "The" for a partial sentence's "A" in one
  transcript after another, at a probability of 0.3-0.45 where a word it has heard is above 0.8.
* ``cut_last``: an earlier transcript's last word is no evidence. That word ends where that transcript's audio
  ended, which may cut it ("agently" before "gently", "flatland" before "flat landscape"); the next transcript
  often keeps the cut form, and the two agree on it. Whisper's segment times are spread over a segment's words
  (recognizer.py), so a rule by time (``hold_ms``) misses most of these; the position does not.

A word is confirmed with the prefix: word ``i`` needs every word before it confirmed too.

Each transcript covers the buffer, which holds the last ``in_buffer`` confirmed words (the recogniser says how many
are left when it trims the buffer): a transcript that begins with them goes on after them. One that re-heard the
last few of them with other letters ("toward a" for "towards a", "A cute" for "Acute") goes on after them too, found
by a character alignment (``_respelled_end``; until 2026-11-30 by time, and Whisper's spread word times let them be
confirmed twice); one that joins or splits a hyphenated compound at their end ("smoke" confirmed, "smoke-trailing"
heard) goes on after the compound's parts they hold (``_after_words``; until 2026-12-07 by time: "smoke
smoke-trailing"). Otherwise words that end before the last confirmed word's end (less ``overlap_ms``) are the past,
and a run of words at the start that repeats the tail of the confirmed ones (up to 5 words) is dropped too. Pure:
no model, no audio.
"""

from __future__ import annotations

import string
from itertools import accumulate
from dataclasses import dataclass, field

from simulmt.speech.edit_distance import prefix_distances
from simulmt.speech.spoken_numbers import NUMBER_WORDS

_STRIP = string.punctuation + "“”‘’«»¿¡…–—"
_NUMBERS = dict(enumerate(NUMBER_WORDS))


@dataclass(frozen=True)
class TimedWord:
    text: str  # as the recogniser wrote it, punctuation and case included
    start_ms: float  # on the audio's clock
    end_ms: float
    ends_segment: bool = False  # the last word of a segment the recogniser timed (a safe place to cut audio)
    probability: float = 1.0  # how sure the recogniser was of it (recognizer.py: its tokens' product; 1.0 when not
    # computed)

    @property
    def key(self) -> str:
        return word_key(self.text)


def word_key(text: str) -> str:
    """A word as transcripts are compared: without case and surrounding punctuation, a small number as its word
    (Whisper writes "2 horses" in one transcript and "Two horses" in the next: the same words)."""
    key = text.strip().strip(_STRIP).lower()
    return _NUMBERS.get(int(key), key) if key.isdecimal() and len(key) <= 2 else key


@dataclass
class LocalAgreement:
    n: int = 2
    overlap_ms: float = 100.0  # a hypothesis word ending this much before the last confirmed end is the past
    confirmed: list[TimedWord] = field(default_factory=list)
    history: list[list[TimedWord]] = field(default_factory=list)  # the last n-1+lookback hypotheses, past the
    # confirmed words
    in_buffer: int = 0  # the last confirmed words whose audio is still in the recogniser's buffer
    hold_ms: float = 0.0  # a word that ends this close to the end of the audio is not confirmed yet, agreed or not
    lookback: int = 0  # the newest may agree with any n-1 of the last n-1+lookback hypotheses (0: the n-1 before it)
    cut_last: bool = False  # an earlier hypothesis's last word is no evidence (its audio may have been cut)
    min_probability: float = 0.0  # a word the newest hypothesis gives a lower probability is not confirmed yet

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"LocalAgreement needs n >= 1, got {self.n}")
        if self.lookback < 0:
            raise ValueError(f"LocalAgreement needs lookback >= 0, got {self.lookback}")

    @property
    def kept(self) -> int:
        """How many earlier hypotheses a new one is compared with (none for n = 1: every transcript is final, and
        ``lookback`` does nothing)."""
        return 0 if self.n == 1 else self.n - 1 + self.lookback

    def update(self, hypothesis: list[TimedWord], audio_end_ms: float | None = None) -> list[TimedWord]:
        """A new transcript of the buffer (times on the audio's clock) -> the words it confirms, in order.
        ``audio_end_ms``: where the audio ends (with ``hold_ms``, a word ending within ``hold_ms`` of it waits: two
        transcripts of a short step may agree on a word the audio cut, "gentle" for "gentleman")."""
        fresh = self._after_confirmed(hypothesis)
        held = float("inf") if audio_end_ms is None or not self.hold_ms else audio_end_ms - self.hold_ms
        ready = len(fresh)  # the newest's words that may be confirmed now, by time
        for i, word in enumerate(fresh):
            if word.end_ms > held or word.probability < self.min_probability:
                ready = i
                break
        newly: list[TimedWord] = []
        if self.n == 1:
            newly = fresh[:ready]
        elif len(self.history) >= self.n - 1:
            # how far each earlier hypothesis agrees with the newest; the (n-1)-th longest agreement is confirmed
            agreed = sorted((self._agreement(h, fresh) for h in self.history[-self.kept:]), reverse=True)
            newly = fresh[:min(ready, agreed[self.n - 2])]
        self.confirmed += newly
        self.in_buffer += len(newly)
        # every hypothesis kept goes on past the newly confirmed words: the history the next one meets (the newest at
        # least: ``flush`` takes from it what ``hold_ms`` held back)
        self.history = [self._past(h, newly) for h in [*self.history, fresh]][-max(1, self.kept):]
        return newly

    def _agreement(self, earlier: list[TimedWord], fresh: list[TimedWord]) -> int:
        """How many of the newest's first words ``earlier`` agrees with (not counting its own last word with
        ``cut_last``)."""
        size = min(len(earlier) - (1 if self.cut_last else 0), len(fresh))
        for i in range(size):
            if earlier[i].key != fresh[i].key:
                return i
        return max(0, size)

    def _past(self, hypothesis: list[TimedWord], newly: list[TimedWord]) -> list[TimedWord]:
        """``hypothesis`` after the words just confirmed: past them if it begins with them, else past their time."""
        if not newly:
            return hypothesis
        after = _after_words(hypothesis, [w.key for w in newly])
        if after is not None:
            return after
        return [w for w in hypothesis if w.end_ms > newly[-1].end_ms - self.overlap_ms]

    def flush(self, but_last: bool = False) -> list[TimedWord]:
        """The audio is over: the newest hypothesis's words past the confirmed ones are final (``but_last``: all
        but its last word, which the audio may have cut: the buffer is full and must move on)."""
        rest = self.history[-1] if self.history else []
        if but_last:
            rest = rest[:-1]
            self.history = [self._past(h, rest) for h in self.history]
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
        after = _after_words(hypothesis, [w.key for w in inside]) if inside else None
        if after is not None:
            return after  # it begins with what is confirmed: what follows is new
        if inside and (end := _respelled_end(inside, hypothesis)) is not None:
            return list(hypothesis[end:])  # it begins with what is confirmed, heard a little differently
        last_end = self.confirmed[-1].end_ms
        words = [w for w in hypothesis if w.end_ms > last_end - self.overlap_ms]
        tail = [w.key for w in self.confirmed[-5:]]
        for size in range(min(5, len(words), len(tail)), 0, -1):  # a repeat of what was just confirmed
            if [w.key for w in words[:size]] == tail[-size:]:
                return words[size:]
        return words


def _after_words(hypothesis: list[TimedWord], keys: list[str]) -> list[TimedWord] | None:
    """The words of ``hypothesis`` after its first words, if they are ``keys``; else, if its words with each
    hyphenated compound cut into its parts begin with ``keys`` ("smoke" confirmed, then "smoke-trailing its"
    heard: "trailing its" is new; "smoke trailing" confirmed, then "smoke-trailing its": "its"), what follows,
    the rest of a compound cut there a word of its own; else None. (Without the parts, the time rule would take
    the whole compound for new words: "smoke smoke-trailing".)"""
    if [w.key for w in hypothesis[:len(keys)]] == keys:
        return list(hypothesis[len(keys):])
    parts, owners = _compound_parts(hypothesis)
    if len(parts) == len(hypothesis) or [p.key for p in parts[:len(keys)]] != keys:
        return None
    after: list[TimedWord] = []
    for i in range(len(keys), len(parts)):  # the parts of one compound left after the cut join again
        part = parts[i]
        if after and owners[i] == owners[i - 1]:
            last = after[-1]
            after[-1] = TimedWord(last.text + part.text, last.start_ms, part.end_ms, part.ends_segment,
                                  part.probability)
        else:
            after.append(part)
    return after


def _compound_parts(words: list[TimedWord]) -> tuple[list[TimedWord], list[int]]:
    """The words with each hyphenated compound cut after its hyphens ("smoke-trailing," -> "smoke-", "trailing,"),
    each part timed by its share of the word's letters (and the word's segment end on its last part), and the index
    of the word each part comes from."""
    parts: list[TimedWord] = []
    owners: list[int] = []
    for index, word in enumerate(words):
        pieces = word.text.strip().replace("-", "-\n").split("\n")
        if len(pieces) < 2 or not all(word_key(p) for p in pieces):  # (a lone or trailing hyphen: not a compound)
            parts.append(word)
            owners.append(index)
            continue
        total, done = sum(len(p) for p in pieces), 0
        for i, piece in enumerate(pieces):
            start = word.start_ms + (word.end_ms - word.start_ms) * done / total
            done += len(piece)
            end = word.start_ms + (word.end_ms - word.start_ms) * done / total
            parts.append(TimedWord(piece, start, end, word.ends_segment and i == len(pieces) - 1, word.probability))
            owners.append(index)
    return parts, owners


RESPELLED_WORDS = 6  # at most this many confirmed words heard differently are looked for by their letters


def _letters(words: list[TimedWord]) -> str:
    """The words' keys run together (small numbers spelled out, ``word_key``): "a cute" and "acute" alike."""
    return "".join(w.key for w in words)


def _respelled_end(inside: list[TimedWord], hypothesis: list[TimedWord]) -> int | None:
    """Where the confirmed words still in the buffer (``inside``) end in a new transcript that heard their last
    few differently ("toward a" for "towards a", "A cute" for "Acute", "Two" for "2"): the hypothesis's first
    words agree with ``inside`` up to some word, and the rest of ``inside`` is matched by letters to the fewest
    edits (a character edit distance over the words that follow). None when the rest is longer than
    ``RESPELLED_WORDS`` or no end matches it to within a third of its letters ("to" is not "two", "Grotto" not
    "Group": a word heard wrong, then right, is kept twice rather than lost): then the caller goes by time.
    Word times cannot do this: Whisper's segment times are spread over the words (recognizer.py), so a re-heard
    word's time moves by a few hundred ms between transcripts."""
    same = 0
    while same < min(len(inside), len(hypothesis)) and inside[same].key == hypothesis[same].key:
        same += 1
    rest = inside[same:]
    if len(rest) > RESPELLED_WORDS:
        return None
    target = _letters(rest)
    last = min(len(hypothesis), same + len(rest) + 2)
    distances = prefix_distances(target, _letters(hypothesis[same:last]))  # (to every prefix of their letters)
    ends = list(accumulate((len(_letters([w])) for w in hypothesis[same:last]), initial=0))  # letters before each
    best: tuple[int, int, int] | None = None  # (edits, words apart from the count in inside, end): on a tie the
    # shorter end, which keeps a word rather than lose it
    for end in range(same, last + 1):
        edits = distances[ends[end - same]]
        candidate = (edits, abs(end - same - len(rest)), end)
        if best is None or candidate < best:
            best = candidate
    if best is None or best[0] * 3 > len(target):
        return None
    return best[2]

