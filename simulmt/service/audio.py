"""Audio on the service's WebSocket: binary frames of 16-bit little-endian mono PCM become source words.

A client that sends binary frames gets a streaming recogniser of its own (``simulmt.speech.recognizer``: Whisper +
LocalAgreement-2; the model is shared, the buffer and the agreement state are the client's alone). Frames at another
rate than 16 kHz (the query option ``audio_rate``) are resampled (libswresample, through PyAV). The recogniser runs
in a worker thread (CTranslate2 releases the GIL), never on the event loop or the engine's thread; each word it
confirms is sent back as ``{"type": "heard", "text", "audio_ms"}`` (the audio time it was confirmed at) and enters
the client's text intake as if the client had typed it, so sentences, back-pressure and translation are the text
path's. ``end`` flushes the recogniser first (its last words), then ends the input.

Limits: a frame is at most ``--max-frame-bytes`` and an even number of bytes; audio waiting for the recogniser is
at most ``max_pending_s`` seconds (then the socket is not read: back-pressure, as for text).

A pause the recogniser hears (its voice activity, ``RecognizerOptions.pause_ms``) ends the client's sentence as a
boundary message would, without waiting for the next word.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from simulmt.errors import SimulmtError
from simulmt.speech.recognizer import RATE, StreamingRecognizer, Whisper

MAX_PENDING_S = 30.0


class AudioIntake:
    """One client's audio: frames in (``put``), confirmed words out (through ``on_words``), in order."""

    def __init__(self, whisper: Whisper, rate: int, pool: ThreadPoolExecutor, on_words, on_end,
                 max_pending_s: float = MAX_PENDING_S, on_pause=None):
        self.recognizer = StreamingRecognizer(whisper, whisper.options)
        self.rate, self.pool = rate, pool
        self.on_words, self.on_end = on_words, on_end  # callables: ([ConfirmedWord]) -> None, () -> None
        self.on_pause = on_pause  # () -> None: the speaker paused after the words so far (``pause_ms``)
        self.max_pending = int(max_pending_s * RATE)
        self.pending: list[np.ndarray] = []
        self.pending_samples = 0
        self.ended = False
        self.arrived = asyncio.Event()
        self.resampler = None if rate == RATE else _resampler(rate)

    @property
    def full(self) -> bool:
        return self.pending_samples >= self.max_pending

    def put(self, frame: bytes) -> None:
        """A binary frame; a ``SimulmtError`` says what is wrong with it (the stream goes on)."""
        if self.ended:
            raise SimulmtError("the input has ended; no more audio is taken")
        if len(frame) % 2:
            raise SimulmtError(f"an audio frame is 16-bit mono PCM: an even number of bytes, got {len(frame)}")
        samples = np.frombuffer(frame, dtype="<i2")
        if self.resampler is not None:
            samples = self.resampler(samples)
        self.pending.append(samples)
        self.pending_samples += len(samples)
        self.arrived.set()

    def end(self) -> None:
        self.ended = True
        self.arrived.set()

    async def run(self) -> None:
        """Feed the recogniser as audio arrives, in a worker thread; on ``end``, flush it and end the input."""
        loop = asyncio.get_running_loop()
        while True:
            while not self.pending and not self.ended:
                self.arrived.clear()
                await self.arrived.wait()
            if self.pending:
                samples = np.concatenate(self.pending)
                self.pending, self.pending_samples = [], 0
                words = await loop.run_in_executor(self.pool, self.recognizer.push, samples)
                start = 0
                for at in self.recognizer.pauses if self.on_pause is not None else ():
                    if at > start:
                        self.on_words(words[start:at])
                    self.on_pause()
                    start = at
                if words[start:]:
                    self.on_words(words[start:])
                continue
            words = await loop.run_in_executor(self.pool, self.recognizer.finish)
            if words:
                self.on_words(words)
            self.on_end()
            return


def _resampler(rate: int):
    """``rate`` Hz int16 -> 16 kHz int16, a stream (the resampler keeps its state between frames)."""
    if not 8000 <= rate <= 192000:
        raise SimulmtError(f"audio_rate must be within 8000..192000 Hz, got {rate}")
    try:
        import av

        from simulmt.speech.wav import resampler_to_16k
    except ImportError:
        raise SimulmtError(f"audio at {rate} Hz needs resampling (PyAV: pip install 'simulmt[speech]'); or send "
                           f"16 kHz") from None
    resampler = resampler_to_16k()

    def resample(samples: np.ndarray) -> np.ndarray:
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = rate
        out = [f.to_ndarray().reshape(-1) for f in resampler.resample(frame)]
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int16)

    return resample
