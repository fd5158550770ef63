"""AlignAtt for a streaming recogniser: a word is final once the decoder's attention for it has left the newest audio.

LocalAgreement (local_agreement.py) waits for a second transcript to agree on a word: a word spoken just after an
update is confirmed one to two steps later. AlignAtt (Papi et al. 2023, "AlignAtt: Using Attention-based
Audio-Translation Alignments as a Guide for Simultaneous Speech Translation"; SimulStreaming, the best system of the
IWSLT 2025 simultaneous track, runs it on Whisper) decides on one transcript: the decoder emits tokens until one
attends to the last ``f`` frames of the audio, which may still change as more audio comes. Here the newest
transcript's words are aligned to the audio by Whisper's cross-attention (its alignment heads and dynamic time
warping, CTranslate2's ``align``: ``Whisper.transcribe(..., aligned=True)``), and the words whose aligned end lies at
least ``margin_ms`` before the end of the audio are confirmed, up to the first that does not.

The same bookkeeping as LocalAgreement (what is past, what is in the recogniser's buffer, ``flush``), so the
recogniser runs either. Pure: no model, no audio.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulmt.speech.local_agreement import LocalAgreement, TimedWord


@dataclass
class AlignAtt(LocalAgreement):
    margin_ms: float = 500.0  # a word whose aligned end is this close to the end of the audio is not final yet

    def update(self, hypothesis: list[TimedWord], audio_end_ms: float | None = None) -> list[TimedWord]:
        """A new transcript of the buffer, its words aligned (times on the audio's clock), and where the audio
        ends -> the words it confirms, in order."""
        if audio_end_ms is None:
            raise ValueError("AlignAtt decides on the end of the audio: give audio_end_ms")
        fresh = self._after_confirmed(hypothesis)
        newly: list[TimedWord] = []
        for word in fresh:
            if word.end_ms > audio_end_ms - self.margin_ms:
                break
            newly.append(word)
        self.confirmed += newly
        self.in_buffer += len(newly)
        self.history = [fresh[len(newly):]]  # what ``flush`` takes when the audio ends
        return newly
