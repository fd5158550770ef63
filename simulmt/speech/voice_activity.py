"""Voice activity: is a stream's audio speech, window by window, as it arrives (silero VAD).

The recogniser (recognizer.py) asks two things of it: has the speaker paused (how long the audio has been silent
since the last speech), and is there any speech since a point of the audio (silence alone is not transcribed).

``Silero`` runs silero VAD v6, the ONNX file that ships inside faster-whisper (no download), on 32 ms windows
(512 samples at 16 kHz). The model is recurrent: its state and the last 64 samples of the previous window carry
over from one call to the next, so the probabilities of audio given in pieces equal one pass over the whole audio
(tested). About 1.5 ms of one CPU core per second of audio.

``VoiceActivity`` is one stream's track: ``push`` samples, then ask. It keeps one flag per window, and forgets the
windows before a point the recogniser no longer needs (``forget_before``): bounded for audio of any length.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simulmt.errors import SimulmtError

WINDOW = 512  # samples per decision (32 ms at 16 kHz)
WINDOW_MS = 1000.0 * WINDOW / 16000
CONTEXT = 64  # samples of the previous window the model sees before each window


class Silero:
    """silero VAD over consecutive windows with carried state: ``start()`` -> a stream's initial state;
    ``(windows (N, 512), state) -> (speech probability per window, state)``."""

    def __init__(self):
        try:
            from faster_whisper.vad import get_vad_model
        except ImportError:
            raise SimulmtError("voice activity detection needs faster-whisper (it ships silero VAD): "
                               "pip install 'simulmt[speech]'") from None
        try:
            self.session = get_vad_model().session
        except RuntimeError as exc:  # (onnxruntime missing)
            raise SimulmtError(f"cannot load silero VAD: {exc}") from None

    def start(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        zeros = np.zeros((1, 1, 128), dtype=np.float32)
        return zeros, zeros.copy(), np.zeros(CONTEXT, dtype=np.float32)

    def __call__(self, windows: np.ndarray, state) -> tuple[np.ndarray, tuple]:
        h, c, context = state
        before = np.concatenate([context[None], windows[:-1, -CONTEXT:]], axis=0)
        out, h, c = self.session.run(None, {"input": np.concatenate([before, windows], axis=1), "h": h, "c": c})
        return out.reshape(-1), (h, c, windows[-1, -CONTEXT:].copy())


@dataclass
class VoiceActivity:
    """One stream's speech flags, one per whole window of the audio pushed so far (the clock starts at 0)."""

    model: object  # Silero, or anything with its interface
    threshold: float = 0.5  # a window is speech when its probability reaches this (silero's own default)
    first: int = 0  # the index of the first window kept
    speech: list[bool] = field(default_factory=list)  # per window kept

    def __post_init__(self):
        self.state = self.model.start()
        self.rest = np.zeros(0, dtype=np.float32)  # samples not yet in a whole window

    def push(self, samples: np.ndarray) -> None:
        audio = np.concatenate([self.rest, samples.astype(np.float32, copy=False)])
        whole = len(audio) // WINDOW * WINDOW
        self.rest = audio[whole:]
        if whole:
            probabilities, self.state = self.model(audio[:whole].reshape(-1, WINDOW), self.state)
            self.speech += [bool(p >= self.threshold) for p in probabilities]

    @property
    def heard_ms(self) -> float:
        """The audio time up to which every window has been decided."""
        return (self.first + len(self.speech)) * WINDOW_MS

    def trailing_silence_ms(self) -> float:
        """How long the audio has been silent at its end (the windows kept)."""
        silent = 0
        for flag in reversed(self.speech):
            if flag:
                break
            silent += 1
        return silent * WINDOW_MS

    def speech_since(self, ms: float) -> bool:
        """Is any window that ends after ``ms`` speech?"""
        start = max(0, int(ms // WINDOW_MS) - self.first)
        return any(self.speech[start:])

    def forget_before(self, ms: float) -> None:
        """Drop the windows that end at or before ``ms`` (the recogniser's buffer starts there)."""
        drop = min(len(self.speech), max(0, int(ms // WINDOW_MS) - self.first))
        del self.speech[:drop]
        self.first += drop
