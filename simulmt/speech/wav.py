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

import sys
import wave
from collections.abc import Iterator
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
# extensions of recordings, where a path may name a recording or a list of them (``bench --audio``)
AUDIO_SUFFIXES = frozenset({".wav", ".flac", ".mp3", ".ogg", ".oga", ".opus", ".m4a", ".aac", ".webm", ".mka",
                            ".mp4", ".mkv", ".mov", ".aif", ".aiff", ".wma"})


def read_audio(path: str | Path) -> np.ndarray:
    """A recording as 16 kHz mono int16 samples (see above), or a clear error. A pipe (``/dev/stdin``) is decoded
    by FFmpeg."""
    chunks = list(audio_chunks(path))
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


def probe_audio(path: str | Path) -> None:
    """Fail now, with ``audio_chunks``' error, if the recording cannot be read: a file's first chunk is decoded (a
    pipe, which can be read once, is only checked to exist)."""
    if Path(path).is_file():
        chunks = audio_chunks(path)
        next(chunks)
        chunks.close()
    elif not Path(path).exists():
        raise SimulmtError(f"audio file not found: {path}")


def audio_pieces(path: str | Path, size: int) -> Iterator[np.ndarray]:
    """The recording in consecutive pieces of ``size`` samples (the last one shorter), decoded as they are asked for:
    a recording of any length in bounded memory (``translate --audio``), the samples ``read_audio`` gives."""
    held: list[np.ndarray] = []
    count = 0
    for chunk in audio_chunks(path):
        held.append(chunk)
        count += len(chunk)
        if count >= size:
            joined = np.concatenate(held)
            whole = len(joined) // size * size
            yield from np.split(joined[:whole], whole // size)
            held, count = [joined[whole:]], len(joined) - whole
    if count:
        yield np.concatenate(held)


def audio_chunks(path: str | Path) -> Iterator[np.ndarray]:
    """The recording as 16 kHz mono int16 chunks in the sizes they are decoded in; a missing file, a folder, a file
    with no audio and an empty recording are errors (before the first chunk, or at the end for an empty one)."""
    p = Path(path)
    if not p.exists():
        raise SimulmtError(f"audio file not found: {path}")
    if p.is_dir():
        raise SimulmtError(f"{path} is a folder, not a recording")
    chunks = _plain_wav(p) if p.is_file() else None  # (a pipe is read once: FFmpeg reads it)
    empty = True
    for chunk in chunks if chunks is not None else _decoded(p):
        if len(chunk):
            empty = False
            yield chunk
    if empty:
        raise SimulmtError(f"{path}: the audio is empty")


CHUNK = 10 * RATE  # samples a plain WAV file is read in


def _plain_wav(path: Path) -> Iterator[np.ndarray] | None:
    """The samples of a 16 kHz mono 16-bit WAV file as they are, in chunks; None for anything else, FFmpeg's to
    decode (another format, rate or width; a header whose sizes were never written, as a recorder stopped mid-file
    leaves them)."""
    try:
        f = wave.open(str(path), "rb")
    except (wave.Error, EOFError, ValueError):
        return None
    except OSError as exc:
        raise SimulmtError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if (f.getnchannels(), f.getsampwidth(), f.getframerate()) != (1, 2, RATE) or f.getnframes() == 0:
        f.close()
        return None

    def chunks() -> Iterator[np.ndarray]:
        with f:
            while True:
                data = f.readframes(CHUNK)
                if not data:
                    return
                yield np.frombuffer(data[: len(data) // 2 * 2], dtype="<i2").astype(np.int16)

    return chunks()


def resampler_to_16k():
    """A libswresample resampler (PyAV) to 16 kHz mono 16-bit samples, channels averaged: files here, the service's
    frames (service/audio.py). It keeps its state between the pieces given to it."""
    import av

    return av.AudioResampler(format="s16", layout="mono", rate=RATE)


def _decoded(path: Path) -> Iterator[np.ndarray]:
    """Any recording FFmpeg reads, as 16 kHz mono int16 chunks: its first audio stream decoded packet by packet,
    mixed down and resampled. A damaged packet (a few ms of a damaged MP3) is skipped and the rest decoded; how many
    were skipped is said on stderr at the end."""
    try:
        import av
    except ImportError:
        raise SimulmtError(f"{path}: only 16 kHz mono 16-bit WAV files are read without PyAV: pip install "
                           f"'simulmt[speech]' (or convert it: sox {path} -r 16000 -c 1 -b 16 out.wav)") from None
    damaged = decoded = 0
    try:
        with av.open(str(path), metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise SimulmtError(f"{path}: it holds no audio stream")
            stream = container.streams.audio[0]
            resampler = resampler_to_16k()
            for packet in container.demux(stream):  # (the last packet is empty: it flushes the decoder)
                try:
                    frames = packet.decode()
                except av.error.InvalidDataError:
                    damaged += 1
                    continue
                for frame in frames:
                    for piece in resampler.resample(frame):
                        decoded += piece.samples
                        yield piece.to_ndarray().reshape(-1)
            for piece in resampler.resample(None):  # what the resampler holds
                decoded += piece.samples
                yield piece.to_ndarray().reshape(-1)
    except (av.error.FFmpegError, ValueError) as exc:
        raise SimulmtError(f"{path}: not an audio file FFmpeg can decode ({exc})") from None
    if damaged:
        print(f"simulmt: {path}: {damaged} damaged packet(s) of its audio skipped; {decoded / RATE:.2f} s decoded",
              file=sys.stderr)
