"""WAV files in and out: 16-bit mono PCM, and the 16 kHz recording that every speech translator reads.

``read_audio`` is the one reader of the commands and translators (``translate --audio``, ``evaluate
--source-audio``, ``bench --audio``, ``translate_iter`` over files): a file that is missing, unreadable, not 16 kHz
or empty is a clear error. The corpus synthesiser writes its utterances with ``write_wav``.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from simulmt.errors import SimulmtError


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """``(samples, sample_rate)`` of a 16-bit mono WAV file; samples: ``(T,)`` int16."""
    with wave.open(str(path), "rb") as f:
        if f.getnchannels() != 1 or f.getsampwidth() != 2:
            raise SimulmtError(f"{path}: expected 16-bit mono PCM, got {f.getnchannels()} channel(s) of "
                               f"{8 * f.getsampwidth()} bits")
        return np.frombuffer(f.readframes(f.getnframes()), dtype="<i2").astype(np.int16), f.getframerate()


def write_wav(path: str | Path, audio: np.ndarray, sample_rate: int) -> None:
    """Write ``(T,)`` int16 ``audio`` as a 16-bit mono WAV file."""
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(sample_rate)
        f.writeframes(np.asarray(audio, dtype="<i2").tobytes())


def read_audio(path: str) -> np.ndarray:
    """A 16 kHz mono 16-bit WAV file as int16 samples, or a clear error."""
    try:
        samples, rate = read_wav(path)
    except FileNotFoundError:
        raise SimulmtError(f"audio file not found: {path}") from None
    except (EOFError, OSError, ValueError) as exc:  # wave.Error is an Exception subclass: caught below
        raise SimulmtError(f"{path}: not a readable WAV file ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - wave.Error
        raise SimulmtError(f"{path}: not a readable WAV file ({exc})") from None
    if rate != 16000:
        raise SimulmtError(f"{path}: the audio is {rate} Hz; simulmt takes 16 kHz mono 16-bit WAV "
                           f"(sox {path} -r 16000 -c 1 -b 16 out.wav)")
    if len(samples) == 0:
        raise SimulmtError(f"{path}: the audio is empty")
    return samples
