"""Confirmed words as a text writes them: what the recogniser gives the text model.

Whisper writes what it heard, not always as the text model's training data would. Two differences cost BLEU and
have a rule that holds for any sentence:

* Small numbers in digits ("2 horses"): spelled out, English only (``spoken_numbers.py``).
* A recording begun in lower case. A transcript of the first second or so of speech now and then starts "two teams
  of girls" or "a bike race" where the whole file's transcript starts "Two teams", "A bike race" (34 of 300 flite
  lines with Whisper base, session 46, every one a file's first word); the text model keeps the case ("zwei
  Mannschaften"). The first word of a recording, and the first after a pause, are given with a capital (after any
  opening quote or bracket), in any language (a script without case is unchanged).

A word after a full stop starts a sentence where ``sentence_ends.ends_sentence`` says so with the next word as
Whisper wrote it, the rule the talk splits sentences by: a lower-case word after a stop ("device. standing",
"the... night": Whisper's stray stops inside a sentence) does not start one, so it keeps its case and the talk
keeps the sentence whole. Pure: the words in, the words out, and the last word as Whisper wrote it (the state the
next call needs; None: the next word starts a sentence whatever it is).
"""

from __future__ import annotations

from simulmt.core.sentence_ends import OPENERS, ends_sentence
from simulmt.speech.spoken_numbers import spoken_number


def capitalised(word: str) -> str:
    """``word`` with its first letter, after any opening quotes or brackets, in capitals ("two" -> "Two",
    "“the" -> "“The", "¿qué" -> "¿Qué", "Über" as it is)."""
    opened = len(word) - len(word.lstrip(OPENERS))
    return word[:opened] + word[opened:opened + 1].upper() + word[opened + 1:]


def written_words(words: list[str], before: str | None = None, spell_numbers: bool = False,
                  capitalise_starts: bool = True) -> tuple[list[str], str | None]:
    """Confirmed words in order (as Whisper wrote them) as a text writes them, and the last of them as Whisper wrote
    it (``before`` of the next call). ``before``: the word before them as Whisper wrote it, None when the first
    starts a sentence (a recording's start, or after a pause). ``spell_numbers``: English small numbers in words;
    ``capitalise_starts``: a recording's first word, and the first after a pause, with a capital."""
    out = []
    for word in words:
        starts = before is None or ends_sentence(before, word)
        written = spoken_number(word, starts) if spell_numbers else word
        if capitalise_starts and before is None:
            written = capitalised(written)
        out.append(written)
        before = word
    return out, before
