"""Voice activity (simulmt.speech.voice_activity): silero VAD from faster-whisper on the packaged sample sentence, in
pieces as a stream gets it, against one pass; the track's questions and its bound."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("faster_whisper", reason="the speech extra (setup.sh installs it)")

from simulmt.speech.voice_activity import WINDOW, WINDOW_MS, Silero, VoiceActivity  # noqa: E402
from simulmt.speech.wav import read_audio  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[1] / "simulmt" / "speech" / "samples" / "a_man_rides_a_bike.wav"


def padded_sample() -> np.ndarray:
    """1 s of silence, the sentence (3.7 s), 1 s of silence."""
    speech = read_audio(SAMPLE).astype(np.float32)
    speech = speech / 32768.0 if np.abs(speech).max() > 1.0 else speech
    silence = np.zeros(16000, dtype=np.float32)
    return np.concatenate([silence, speech, silence])


def test_silero_in_pieces_equals_one_pass_and_finds_the_sentence():
    audio = padded_sample()
    model = Silero()
    whole = VoiceActivity(model)
    whole.push(audio)
    pieces = VoiceActivity(model)
    for start in range(0, len(audio), 3000):  # pieces that do not line up with windows
        pieces.push(audio[start:start + 3000])
    assert pieces.speech == whole.speech and len(whole.speech) == len(audio) // WINDOW
    flags = np.array(whole.speech)
    first, last = np.flatnonzero(flags)[[0, -1]] * WINDOW_MS
    assert 900 <= first <= 1400 and 4000 <= last <= 4800  # the sentence, give or take its quiet edges
    assert not flags[: int(900 // WINDOW_MS)].any() and not flags[int(4800 // WINDOW_MS) + 1:].any()
    assert 1000 <= whole.trailing_silence_ms() <= 1500  # the padding and the sentence's own quiet end
    assert whole.speech_since(2000) and not whole.speech_since(4900)


def test_the_track_forgets_what_the_recogniser_no_longer_needs():
    class Loud:  # a window that is not all zeros is speech
        def start(self):
            return None

        def __call__(self, windows, state):
            return (np.abs(windows).max(axis=1) > 0).astype(np.float32), state

    track = VoiceActivity(Loud())
    for _ in range(600):  # 10 minutes in 1 s pieces, the recogniser's buffer moving on
        track.push(np.ones(16000, dtype=np.float32))
        track.forget_before(track.heard_ms - 5000)
    assert track.heard_ms == pytest.approx(600_000, abs=WINDOW_MS) and len(track.speech) <= 5000 / WINDOW_MS + 1
    assert track.speech_since(track.heard_ms - 100) and track.trailing_silence_ms() == 0
    track.push(np.zeros(16000, dtype=np.float32))
    assert track.trailing_silence_ms() == pytest.approx(1000, abs=2 * WINDOW_MS)
