"""Audio files in, WAV files out: the 16 kHz mono recording that every speech translator reads.

``read_audio`` is the one reader of the commands and translators (``translate --audio``, ``evaluate
--source-audio``, ``bench --audio``, ``translate_iter`` over files). It takes what users bring: a 16 kHz mono 16-bit
WAV file is read as it is (Python's ``wave``); any other recording that FFmpeg decodes (WAV at another rate, width or
channel count, FLAC, MP3, Ogg, Opus, M4A/AAC, the audio track of a video) is decoded through PyAV (installed with
``simulmt[speech]``), its channels mixed down to one and resampled to 16 kHz by libswresample, as the service
resamples its clients' frames. A file that is missing, holds no audio, cannot be decoded or is empty is a clear
error. The corpus synthesiser writes its utterances with ``write_wav``.
"""

from __future__ import annotations

import warnings
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


RATE = 16000  # what every recogniser and speech model here reads
AUDIO_SUFFIXES = frozenset({".wav", ".flac", ".mp3", ".ogg", ".oga", ".opus", ".m4a", ".aac", ".webm", ".mka", ".mp4",
                            ".mkv", ".mov", ".aif", ".aiff", ".wma"})  # where a path may be a recording or a list
# of them (``bench --audio``): these are recordings


def read_audio(path: str | Path) -> np.ndarray:
    """A recording as 16 kHz mono int16 samples (see above), or a clear error."""
    if not Path(path).is_file():
        raise SimulmtError(f"audio file not found: {path}" if not Path(path).exists() else f"{path}: not a file")
    try:
        samples, rate = read_wav(path)
    except Exception:  # noqa: BLE001 - not a 16-bit mono WAV file (wave.Error, EOFError, ...): FFmpeg decodes it
        samples, rate = None, None
    if samples is None or rate != RATE:
        samples = decode_audio(path)
    if len(samples) == 0:
        raise SimulmtError(f"{path}: the audio is empty")
    return samples


def decode_audio(path: str | Path) -> np.ndarray:
    """Any recording FFmpeg reads -> 16 kHz mono int16 samples: its first audio stream decoded, mixed down and
    resampled (libswresample, through PyAV). Decoding stops at data that cannot be decoded; what came before it is
    kept, with a warning (a damaged end of an MP3 file), unless nothing did."""
    try:
        import av
    except ImportError:
        raise SimulmtError(f"{path}: only 16 kHz mono 16-bit WAV files are read without PyAV: pip install "
                           f"'simulmt[speech]' (or convert it: sox {path} -r 16000 -c 1 -b 16 out.wav)") from None
    pieces: list[np.ndarray] = []
    try:
        with av.open(str(path), metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise SimulmtError(f"{path}: it holds no audio stream")
            resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
            frames = container.decode(audio=0)
            while True:
                try:
                    frame = next(frames)
                except StopIteration:
                    break
                except av.error.InvalidDataError as exc:
                    if not pieces:
                        raise
                    warnings.warn(f"{path}: decoding stopped at invalid data ({exc}); the audio before it is used",
                                  stacklevel=2)
                    break
                pieces += [f.to_ndarray().reshape(-1) for f in resampler.resample(frame)]
            pieces += [f.to_ndarray().reshape(-1) for f in resampler.resample(None)]  # what the resampler holds
    except av.error.FFmpegError as exc:
        raise SimulmtError(f"{path}: not an audio file FFmpeg can decode ({exc})") from None
    return np.concatenate(pieces).astype(np.int16) if pieces else np.zeros(0, dtype=np.int16)
