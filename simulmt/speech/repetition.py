"""Whisper's loops: telling a transcript that repeats itself from speech, and cutting the repeats.

Greedy Whisper decoding falls into loops on audio it hears badly (a telephone line, crosstalk, a buffer cut in
mid-word): "Hello. Hello. Hello. ..." forty times for two seconds of audio, or a sentence said once and written
ten times. Whisper's own decoding catches them by the transcript's compression ratio (above 2.4 the decoding is
tried again at a higher temperature); a streaming recogniser has a second reason to care: two consecutive loops
agree with each other, so LocalAgreement confirms them, and confirmed words become the next decoding's prompt,
which invites the loop again.

* ``degenerate(texts, audio_ms)``: Whisper's test (zlib compression ratio above ``COMPRESSION_LIMIT``), or more
  words than anyone says in that much audio (``WORDS_PER_SECOND``); the recogniser then decodes again without
  the prompt and with repeated tokens penalised by ``FALLBACK_PENALTY``, and keeps the less repetitive transcript
  (``repetitiveness``);
* ``collapse_loops(texts)``: the positions of the words to keep where a run of one to ``LONGEST_UNIT`` words comes
  ``LOOP`` or more times in a row: its first ``KEEP`` copies (people do say "Hello? Hello? Hello? Hello?", and
  not much more often than that).
"""

from __future__ import annotations

import zlib

from simulmt.speech.local_agreement import word_key

COMPRESSION_LIMIT = 2.4  # Whisper's compression_ratio_threshold
WORDS_PER_SECOND = 6.0  # fast speech is about 4 words a second; more than 6 (and 3 more) is not speech
FALLBACK_PENALTY = 1.3  # a degenerate transcript is decoded again with repeated tokens penalised by this much
LOOP = 5  # a run that comes this many times in a row is a loop
KEEP = 3  # the copies of a loop that are kept
LONGEST_UNIT = 8  # the longest run (in words) that is looked for


def compression_ratio(text: str) -> float:
    """Length of ``text`` in UTF-8 over its zlib-compressed length, as Whisper computes it."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def degenerate(texts: list[str], audio_ms: float) -> bool:
    """A transcript (its words) that repeats itself as Whisper's loops do, or has more words than the audio can
    hold."""
    if not texts:
        return False
    return (compression_ratio(" ".join(texts)) > COMPRESSION_LIMIT
            or len(texts) > 3 + WORDS_PER_SECOND * audio_ms / 1000.0)


def repetitiveness(texts: list[str], audio_ms: float) -> tuple[bool, float]:
    """What picks the less repetitive of two transcripts (the smaller): degenerate or not, then the compression
    ratio."""
    return degenerate(texts, audio_ms), compression_ratio(" ".join(texts))


def _loop_at(keys: list[str], i: int, loop: int, longest: int) -> tuple[int, int]:
    """(size, copies) of the shortest run starting at ``i`` that comes ``loop`` or more times in a row, or
    (0, 0)."""
    for size in range(1, min(longest, (len(keys) - i) // loop) + 1):
        unit = keys[i:i + size]
        copies = 1
        while keys[i + copies * size:i + (copies + 1) * size] == unit:
            copies += 1
        if copies >= loop:
            return size, copies
    return 0, 0


def collapse_loops(texts: list[str], loop: int = LOOP, keep: int = KEEP, longest: int = LONGEST_UNIT) -> list[int]:
    """Indices of the words to keep: wherever a run of 1..``longest`` words (compared as LocalAgreement compares
    them: without case and surrounding punctuation) comes ``loop`` or more times in a row, only its first ``keep``
    copies stay. The shortest repeating run is taken first, from left to right."""
    if not 1 <= keep < loop:
        raise ValueError(f"collapse_loops needs 1 <= keep < loop, got keep={keep}, loop={loop}")
    keys = [word_key(t) for t in texts]
    kept: list[int] = []
    i = 0
    while i < len(keys):
        size, copies = _loop_at(keys, i, loop, longest)
        if size:
            kept += range(i, i + keep * size)
            i += copies * size
        else:
            kept.append(i)
            i += 1
    return kept
