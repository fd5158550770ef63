"""Small numbers as a text writes them: the recogniser's "2 people" reaches the text model as "Two people".

Whisper writes the numbers it hears in digits ("2 horses", "1 black and 1 brown"), where an English text (and
the text model's training data) spells the small ones out; the text model then copies the digit ("2 Pferde") where
a translator writes "Zwei Pferde". A word that is a whole number from zero to twelve, with nothing but sentence
punctuation after it, is spelled out; at a sentence's start it is capitalised. Anything else (13 and up, "2:30",
"1.5", "3rd", "4%") is left as written. Measured in docs/speech-recogniser.md.
"""

from __future__ import annotations

import re


NUMBER_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                "sixteen seventeen eighteen nineteen twenty").split()
SPELLED_UP_TO = 12  # (a text writes 13 and up in digits as often as not)
_SMALL = re.compile(r"^(\d{1,2})([.,!?;:]?)$")


def spoken_number(word: str, sentence_start: bool) -> str:
    """``word`` with a small whole number spelled out ("2" -> "two", "Two" at a sentence's start; "3," -> "three,");
    any other word unchanged."""
    match = _SMALL.match(word)
    if match is None or int(match.group(1)) > SPELLED_UP_TO:
        return word
    spelled = NUMBER_WORDS[int(match.group(1))]
    return (spelled.capitalize() if sentence_start else spelled) + match.group(2)

