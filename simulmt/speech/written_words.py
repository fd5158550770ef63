"""Confirmed words as a text writes them: what the recogniser gives the text model.

Whisper writes what it heard, not always as the text model's training data would. Two differences cost BLEU and
have a rule that holds for any sentence:

* Small numbers in digits ("2 horses"): spelled out, English only (``spoken_numbers.py``).
* A sentence begun in lower case. A transcript of a partial buffer now and then starts "two teams of girls" or "a
  bike race" where the whole file's transcript starts "Two teams", "A bike race" (23 of 300 flite lines with
  Whisper base, session 46); the text model keeps the case ("zwei Mannschaften"). A word that starts a sentence
  is given with its first letter in capitals, in any language (a script without case is unchanged).

Pure: the words in, the words out, and whether the word after them starts a sentence (a full stop, question or
exclamation mark ends one: ``sentence_ends.py``; so does a pause, which the recogniser passes as a new start).
"""

from __future__ import annotations

from simulmt.core.sentence_ends import ends_sentence
from simulmt.speech.spoken_numbers import spoken_number


def capitalised(word: str) -> str:
    """``word`` with its first letter in capitals ("two" -> "Two", "iPhone" -> "IPhone", "Über" as it is)."""
    return word[:1].upper() + word[1:]


def written_words(words: list[str], sentence_start: bool = True, spell_numbers: bool = False,
                  capitalise_starts: bool = True) -> tuple[list[str], bool]:
    """Confirmed words in order as a text writes them (``sentence_start``: whether the first starts a sentence;
    ``spell_numbers``: English small numbers in words; ``capitalise_starts``: a sentence's first word with a
    capital), and whether the word after them starts a sentence."""
    out = []
    for word in words:
        if spell_numbers:
            word = spoken_number(word, sentence_start)
        if capitalise_starts and sentence_start:
            word = capitalised(word)
        out.append(word)
        sentence_start = ends_sentence(word, "X")
    return out, sentence_start
