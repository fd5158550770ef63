"""Whisper's encoder run block by block on audio as it arrives, each block's output final once emitted.

Why blocks
----------
Whisper encodes a 30 s window bidirectionally, and its log-mel features are normalised by the clip's own maximum.
A simultaneous translator feeds encoder frames to an LLM whose KV cache only grows, so a frame, once given, can
never change. Here audio is cut into blocks of ``block_ms``; each block is encoded once, in a window that adds up
to ``left_context_ms`` of earlier audio (recomputed: the whole window goes through the encoder, only the block's
own output frames are kept) and ``lookahead_ms`` of later audio (which delays the block by as much)::

    audio (10 ms mel frames)  |-------|-------|-------|-------|-------|-------|--
    blocks                    |   0   |   1   |   2   |   3   |   4   |   5   |
    block 3's window:             [  left context  |   3   | lookahead ]
    kept:                                          ^^^^^^^^^              (block_ms / 20 frames of 20 ms)
    encoder positions:            the window's frames keep their places in the utterance (see Positions)

A block's output depends on its window's audio, the window's first encoder position (below) and one number from
before the window (the running maximum, below), so memory and compute per block are bounded whatever the length
of the stream: no 30 s limit.

Features: Whisper's log-mel, made causal
----------------------------------------
Mel frame ``i`` is exactly Whisper's: the power spectrum of samples ``[160 i - 200, 160 i + 200)`` (25 ms Hann window,
10 ms hop; the first frames reflect samples 1..200 as Whisper's ``torch.stft(center=True)`` does), mel filtered,
``log10`` of at least 1e-10. Whisper then floors every value at ``max - 8``, the maximum over the whole clip, and
scales by ``(x + 4) / 4``. Here the maximum is a running one: frame ``i`` is floored at ``M_i - 8`` with ``M_i`` the
largest log-mel value of frames ``0..i``. So a frame depends only on audio up to the end of its own window, and
its value is fixed when computed (the left context of a later window reuses it, it is not re-floored). Measured
(docs/speech-streaming.md), Whisper's encoder on these features stays at cosine >= 0.996 of its output on its own
features, at any level; a fixed floor (no state at all) falls to 0.86-0.90 for speech 40 dB quieter than the level
it was set for. The running maximum's one weak spot is exact digital silence before the first sound (synthesised
audio), where the floor has nothing to adapt to yet.

Frame ``i``'s window reaches 2.5 ms past the frame's 10 ms hop (``STFT_REACH_MS``): the block of mel frames
``[a, b)`` covers ``[10 a, 10 b)`` ms in Whisper's time convention and needs audio up to ``10 b + 2.5`` ms. The
frame grid is Whisper's own, so streamed frames compare one to one with Whisper's offline frames.

Block timing and the end of the stream
--------------------------------------
Block ``k`` covers ``[k * block_ms, (k + 1) * block_ms)`` ms and becomes available at
``available_ms = end_ms + lookahead_ms + 2.5`` (the audio time at which its last needed sample has arrived; the
delays of speech latency metrics start from it). At :meth:`StreamingEncoder.finish` the audio is padded with zeros
(as Whisper pads to 30 s) up to a whole number of 20 ms encoder frames, and every block not yet emitted is: those
waiting for lookahead get what lookahead there is, and the last block is shorter than ``block_ms`` (never padded
to a full block: no output frames for audio that does not exist). Blocks emitted at ``finish`` are available at
the end of the audio, ``min(end_ms + lookahead_ms + 2.5, duration_ms)``; the last one's ``end_ms`` is the padded
end, up to 20 ms past ``duration_ms``.

Positions
---------
Whisper's positional embeddings are absolute within its 30 s window. With ``positions="utterance"`` (the
default) a window's frames take the positions they have in one offline pass over the utterance: encoder frame
``j`` (20 ms) at position ``j``, the window starting at position ``window_start / 2`` instead of 0. Past 30 s the
windows stop moving along the positions: a window starts at position ``min(window_start / 2, 1500 - window_ms /
20)``, so every later block sits where the last blocks of a 30 s window sit, and a stream may run for hours.
``positions="window"`` restarts every window at position 0 (a sliding window).

Measured (docs/speech-streaming.md), the rule matters more than the amount of context: Whisper's encoder output
says where in its window a frame is, and a block moved to another position comes out as a different vector. On a
19 s input (640 ms blocks, 5.12 s of context) the streamed frames stay at cosine 0.93 (tiny.en) and 0.90 (base)
of Whisper's offline frames with utterance positions, 0.61 and 0.63 with window positions; Whisper's own decoder
reads the utterance-position stream better (word error rate 0.35 vs 0.54 for tiny.en; 0.22 vs 0.44 for base with
1280 ms blocks). Inputs of sentence length (< 30 s) never reach the clamp; a stream that does shows the model
downstream positions that training on sentences never showed it. Windows are never padded to 30 s (Whisper's
always were): padding them with silence did not bring the frames closer to Whisper's offline ones.

Parity
------
:func:`encode_utterance` (training) and :class:`StreamingEncoder` (inference) share :func:`block_span` (which
frames a block covers and sees), :func:`encode_window` (the encoder on one window) and the feature code; they
differ only in that the stream computes mel frames block by block and the utterance all at once.
:func:`window_states` stops the same windows below a layer, for training the layers above. The blocks of a
stream do not depend on how the audio was split into :meth:`~StreamingEncoder.push` pieces: features are
computed when a block is due, for the frames it is the first to need, whatever arrived when.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch

from simulmt.errors import SimulmtError
from simulmt.speech.whisper_ct2 import encode_frames

if TYPE_CHECKING:
    from transformers import WhisperFeatureExtractor
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

__all__ = [
    "STFT_REACH_MS",
    "BlockSpan",
    "EncodedBlock",
    "EncoderCompute",
    "StreamingEncoder",
    "StreamingEncoderConfig",
    "block_span",
    "causal_log_mel",
    "encode_utterance",
    "encode_window",
    "utterance_spans",
    "window_states",
    "window_position",
]

SAMPLE_RATE = 16000
HOP = 160  # samples per mel frame (10 ms)
N_FFT = 400  # samples per STFT window (25 ms)
HALF = N_FFT // 2  # mel frame i is centred on sample HOP * i
MEL_MS = 10  # ms per mel frame
ENCODER_MS = 20  # ms per encoder frame (the second convolution has stride 2)
STFT_REACH_MS = (HALF - HOP) * 1000 / SAMPLE_RATE  # 2.5: how far a frame's window reaches past its hop
LOG_FLOOR = 1e-10  # Whisper clamps mel power at this before log10
DYNAMIC_RANGE = 8.0  # Whisper floors log10 mel at max - 8
UNKNOWN_MAX = float("-inf")  # the running maximum before any frame
WHISPER_POSITIONS = 1500  # encoder positions of every Whisper size (30 s)
POSITION_RULES = ("utterance", "window")


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class StreamingEncoderConfig:
    """How audio is cut into blocks and how much context each block is encoded with.

    block_ms: audio per block; a multiple of 40 ms: a whole, even number of 20 ms encoder frames.
    left_context_ms: at most this much earlier audio is encoded with each block (less at the stream's start);
        a multiple of 20 ms. The default, 5120 ms, is the knee of the measured gain (docs/speech-streaming.md):
        for base, 2.56 -> 5.12 s brings the frames as much closer to Whisper's offline ones as 1.28 -> 2.56 s,
        and 10.24 s adds <= 0.01 cosine for 1.7 times the encoder work.
    lookahead_ms: this much later audio is encoded with each block, which delays the block by as much; a
        multiple of 20 ms. The frames at a block's end, encoded with nothing after them, are the furthest from
        Whisper's; 320 ms of lookahead repairs them at almost no compute (same document).
    positions: "utterance", each window's frames at their positions in the utterance (clamped past 30 s), or
        "window", every window from position 0 (module docstring, "Positions").
    A window (left context + block + lookahead) must fit in the encoder's positions (30 s for Whisper).
    """

    block_ms: int = 640
    left_context_ms: int = 5120
    lookahead_ms: int = 0
    positions: Literal["utterance", "window"] = "utterance"

    def __post_init__(self):
        for name in ("block_ms", "left_context_ms", "lookahead_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise SimulmtError(f"StreamingEncoderConfig.{name} must be a whole number of ms (int), got "
                                   f"{value!r} ({type(value).__name__})")
        if self.block_ms <= 0 or self.block_ms % (2 * ENCODER_MS):
            raise SimulmtError(f"StreamingEncoderConfig.block_ms must be a positive multiple of {2 * ENCODER_MS} ms "
                               f"(a whole, even number of {ENCODER_MS} ms encoder frames), got {self.block_ms}; "
                               f"e.g. {max(40, round(self.block_ms / 40) * 40)}")
        for name in ("left_context_ms", "lookahead_ms"):
            value = getattr(self, name)
            if value < 0 or value % ENCODER_MS:
                raise SimulmtError(f"StreamingEncoderConfig.{name} must be a multiple of {ENCODER_MS} ms, at least 0 "
                                   f"(a whole number of encoder frames), got {value}")
        if self.positions not in POSITION_RULES:
            raise SimulmtError(f"StreamingEncoderConfig.positions must be one of {POSITION_RULES}, got "
                               f"{self.positions!r}")

    @property
    def window_ms(self) -> int:
        """The longest window: left context + block + lookahead."""
        return self.left_context_ms + self.block_ms + self.lookahead_ms

    @property
    def block_frames(self) -> int:
        """Mel frames (10 ms) per block."""
        return self.block_ms // MEL_MS

    @property
    def context_frames(self) -> int:
        return self.left_context_ms // MEL_MS

    @property
    def lookahead_frames(self) -> int:
        return self.lookahead_ms // MEL_MS


# --------------------------------------------------------------------------- which frames a block covers and sees


@dataclass(frozen=True)
class BlockSpan:
    """Block ``index`` in mel frames (10 ms): it covers ``[start, end)`` and is encoded in ``[window_start,
    window_end)``, whose first encoder frame takes encoder position ``position``; ``available_ms``: the audio time
    at which all of that window's audio had arrived."""

    index: int
    start: int
    end: int
    window_start: int
    window_end: int
    position: int
    available_ms: float

    @property
    def start_ms(self) -> int:
        return self.start * MEL_MS

    @property
    def end_ms(self) -> int:
        return self.end * MEL_MS

    @property
    def context_ms(self) -> int:
        """Left context actually used (less than configured at the stream's start)."""
        return (self.start - self.window_start) * MEL_MS

    @property
    def lookahead_ms(self) -> int:
        """Lookahead actually used (less than configured at the stream's end)."""
        return (self.window_end - self.end) * MEL_MS

    @property
    def kept(self) -> slice:
        """The block's own frames among the window's encoder outputs (20 ms frames)."""
        return slice((self.start - self.window_start) // 2, (self.end - self.window_start) // 2)


def window_position(config: StreamingEncoderConfig, window_start: int, max_positions: int = WHISPER_POSITIONS
                    ) -> int:
    """The encoder position of the first frame of a window starting at mel frame ``window_start``."""
    if config.positions == "window":
        return 0
    last_start = max_positions - config.window_ms // ENCODER_MS  # a longest window still fits from here
    if last_start < 0:
        raise SimulmtError(f"a window of {config.window_ms} ms does not fit in {max_positions} encoder positions")
    return min(window_start // 2, last_start)


def block_span(config: StreamingEncoderConfig, index: int, total_frames: int | None = None,
               duration_ms: float | None = None, max_positions: int = WHISPER_POSITIONS) -> BlockSpan:
    """Block ``index`` of a stream.

    total_frames: None while the stream goes on (the block gets its full lookahead); at its end, the number of mel
        frames of the padded audio (:func:`_total_frames`), which cuts the last block and the lookahead short.
    duration_ms: the audio's length, once known; caps ``available_ms`` for blocks that only the end released.
    max_positions: the encoder's positions (``encoder.config.max_source_positions``).
    """
    start = index * config.block_frames
    end = start + config.block_frames
    window_end = end + config.lookahead_frames
    if total_frames is not None:
        if start >= total_frames:
            raise SimulmtError(f"block {index} starts at mel frame {start}, past the audio's {total_frames} frames")
        end, window_end = min(end, total_frames), min(window_end, total_frames)
    available_ms = end * MEL_MS + config.lookahead_ms + STFT_REACH_MS
    if duration_ms is not None:
        available_ms = min(available_ms, duration_ms)
    window_start = max(0, start - config.context_frames)
    return BlockSpan(index=index, start=start, end=end, window_start=window_start, window_end=window_end,
                     position=window_position(config, window_start, max_positions), available_ms=available_ms)


def _total_frames(num_samples: int) -> int:
    """Mel frames of ``num_samples`` of audio: every frame starting before its end, rounded up to whole encoder
    frames (the audio is zero-padded to ``HOP * frames + HALF - HOP`` samples to compute them)."""
    return 2 * math.ceil(num_samples / (2 * HOP))


def _samples_needed(frames: int) -> int:
    """Audio samples needed to compute mel frames ``[0, frames)``: frame ``frames - 1`` ends at ``HOP * frames +
    HALF - HOP``."""
    return HOP * frames + HALF - HOP


def utterance_spans(config: StreamingEncoderConfig, num_samples: int, max_positions: int = WHISPER_POSITIONS
                    ) -> list[BlockSpan]:
    """The spans of all blocks of a whole utterance of ``num_samples`` (16 kHz), as the stream emits them."""
    total = _total_frames(num_samples)
    duration_ms = num_samples * 1000 / SAMPLE_RATE
    return [block_span(config, k, total, duration_ms, max_positions)
            for k in range(math.ceil(total / config.block_frames))]


# --------------------------------------------------------------------------- features


def _checked_audio(samples: np.ndarray, sample_rate: int, what: str) -> np.ndarray:
    """``samples`` as float32 in [-1, 1]: int16 is scaled by 1/32768, float32 is taken as it is."""
    if sample_rate != SAMPLE_RATE:
        raise SimulmtError(f"{what}: Whisper's encoder takes {SAMPLE_RATE} Hz audio, got {sample_rate} Hz; resample "
                           f"first (e.g. `sox in.wav -r {SAMPLE_RATE} out.wav`)")
    if not isinstance(samples, np.ndarray):
        raise SimulmtError(f"{what}: expected a numpy array of samples, got {type(samples).__name__}")
    if samples.ndim != 1:
        raise SimulmtError(f"{what}: expected mono audio of shape (samples,), got shape {samples.shape}")
    if samples.dtype == np.int16:
        return samples.astype(np.float32) / 32768.0
    if samples.dtype != np.float32:
        raise SimulmtError(f"{what}: expected int16 samples or float32 samples in [-1, 1], got {samples.dtype}"
                           + ("; convert with .astype(np.float32)" if samples.dtype.kind == "f" else ""))
    if not np.isfinite(samples).all():
        bad = np.flatnonzero(~np.isfinite(samples))
        raise SimulmtError(f"{what}: {bad.size} samples are NaN or infinite (the first at index {bad[0]})")
    peak = float(np.abs(samples).max()) if samples.size else 0.0
    if peak > 1.0:
        raise SimulmtError(f"{what}: float32 samples must lie in [-1, 1], got a peak of {peak:g}"
                           + (" (int16 values cast to float? divide by 32768)" if peak > 2 else ""))
    return samples


def _raw_log_mel(signal: np.ndarray, mel_filters: torch.Tensor) -> torch.Tensor:
    """log10 mel power of consecutive frames of ``signal`` (its first frame's window starts at ``signal[0]``):
    (n_mels, 1 + (len - N_FFT) // HOP), before Whisper's floor and scaling."""
    spectrum = torch.stft(torch.from_numpy(signal), N_FFT, HOP, window=torch.hann_window(N_FFT), center=False,
                          return_complex=True)  # (201, frames)
    power = spectrum.abs() ** 2  # (201, frames)
    return (mel_filters @ power).clamp(min=LOG_FLOOR).log10()  # (n_mels, frames)


def _frame_signal(audio: np.ndarray, first_sample: int, start: int, end: int) -> np.ndarray:
    """The samples that mel frames ``[start, end)`` see, ``audio`` holding the stream's samples from index
    ``first_sample`` on: ``[HOP * start - HALF, HOP * (end - 1) + HALF)``, reflected at the stream's start."""
    lo, hi = HOP * start - HALF, HOP * (end - 1) + HALF
    if hi - first_sample > len(audio) or max(lo, 0) < first_sample:
        raise AssertionError(f"frames {start}..{end} need samples {lo}..{hi}, the buffer holds "
                             f"{first_sample}..{first_sample + len(audio)}")  # a bug here, not a user error
    signal = audio[max(lo, 0) - first_sample:hi - first_sample]
    if lo < 0:  # Whisper's reflect padding: sample -j is sample j
        signal = np.concatenate([audio[1 - first_sample:1 - first_sample - lo][::-1], signal])
    return signal


def _floored(raw: torch.Tensor, running_max: float) -> tuple[torch.Tensor, float]:
    """Whisper's floor and scaling with a running maximum: ``(max(x, M_i - 8) + 4) / 4`` where ``M_i`` is the
    largest value of all frames up to frame i, ``running_max`` that of the frames before ``raw``.
    Returns (features (n_mels, frames), the running maximum after them)."""
    frame_max = raw.amax(dim=0).cummax(dim=0).values  # (frames,)
    top = torch.clamp(frame_max, min=running_max)  # (frames,) M_i
    features = (torch.maximum(raw, top - DYNAMIC_RANGE) + 4.0) / 4.0  # (n_mels, frames)
    return features, (top[-1].item() if len(top) else running_max)


def _mel_filters(extractor: WhisperFeatureExtractor) -> torch.Tensor:
    return torch.from_numpy(np.asarray(extractor.mel_filters, dtype=np.float32)).T.contiguous()  # (n_mels, 201)


def causal_log_mel(audio: np.ndarray, extractor: WhisperFeatureExtractor, sample_rate: int = SAMPLE_RATE
                   ) -> torch.Tensor:
    """The causal log-mel features of a whole utterance, as the stream computes them: (n_mels, frames), float32,
    frames = ``2 * ceil(len(audio) / 320)`` (the end zero-padded to whole 20 ms encoder frames)."""
    _check_extractor(extractor, None)
    audio = _checked_audio(audio, sample_rate, "causal_log_mel")
    total = _total_frames(len(audio))
    if total == 0:
        return torch.zeros(extractor.feature_size, 0)
    padded = np.concatenate([audio, np.zeros(_samples_needed(total) - len(audio), np.float32)])
    raw = _raw_log_mel(_frame_signal(padded, 0, 0, total), _mel_filters(extractor))
    return _floored(raw, UNKNOWN_MAX)[0]


def _check_extractor(extractor: WhisperFeatureExtractor, encoder: WhisperEncoder | None) -> None:
    settings = {"sampling_rate": SAMPLE_RATE, "hop_length": HOP, "n_fft": N_FFT}
    wrong = {k: getattr(extractor, k, None) for k, v in settings.items() if getattr(extractor, k, None) != v}
    if wrong:
        raise SimulmtError(f"the feature extractor has {wrong}; the streaming encoder computes Whisper's features, "
                           f"{settings}")
    if encoder is not None and extractor.feature_size != encoder.config.num_mel_bins:
        raise SimulmtError(f"the feature extractor makes {extractor.feature_size} mel bins, the encoder takes "
                           f"{encoder.config.num_mel_bins}: pass the extractor whisper_encoder() returned with it")


def _check_window(config: StreamingEncoderConfig, encoder: WhisperEncoder) -> None:
    limit_ms = ENCODER_MS * encoder.config.max_source_positions
    if config.window_ms > limit_ms:
        raise SimulmtError(f"left_context_ms + block_ms + lookahead_ms = {config.window_ms} ms does not fit in the "
                           f"encoder's {encoder.config.max_source_positions} positions ({limit_ms} ms)")


# --------------------------------------------------------------------------- the encoder on one window


def encode_window(encoder: WhisperEncoder, features: torch.Tensor, span: BlockSpan) -> torch.Tensor:
    """The output frames of ``span``'s block: ``features`` (n_mels, window frames) are its window's mel frames,
    encoded at positions from ``span.position``; returns (block frames, d_model), the block's own 20 ms frames."""
    if features.shape[1] != span.window_end - span.window_start:
        raise AssertionError(f"block {span.index}: {features.shape[1]} frames for a window of "
                             f"{span.window_end - span.window_start}")
    with torch.no_grad():
        out = encode_frames(encoder, features, position_offset=span.position)[0]  # (window frames / 2, d)
    return out[span.kept].clone()  # (block frames / 2, d), not a view of the whole window


def encode_utterance(audio: np.ndarray, config: StreamingEncoderConfig, encoder: WhisperEncoder,
                     extractor: WhisperFeatureExtractor, sample_rate: int = SAMPLE_RATE) -> list[torch.Tensor]:
    """The blocks a :class:`StreamingEncoder` emits for ``audio`` (int16, or float32 in [-1, 1], mono), in
    order: one (frames, d_model) tensor per block, computed at once. Block timings: :func:`utterance_spans`."""
    _check_extractor(extractor, encoder)
    _check_window(config, encoder)
    features = causal_log_mel(audio, extractor, sample_rate)  # (n_mels, frames)
    spans = utterance_spans(config, len(audio), encoder.config.max_source_positions)
    return [encode_window(encoder, features[:, span.window_start:span.window_end], span) for span in spans]


def window_states(audio: np.ndarray, config: StreamingEncoderConfig, encoder: WhisperEncoder,
                  extractor: WhisperFeatureExtractor, until_layer: int, sample_rate: int = SAMPLE_RATE
                  ) -> list[tuple[torch.Tensor, BlockSpan]]:
    """Per block of ``audio``, the hidden state of its whole window entering encoder layer ``until_layer`` (window
    frames / 2, d_model), with its span: what training the layers above needs (``simulmt.speech.encoder_top``).
    Those layers and the final norm on it, kept to ``span.kept``, give the block :func:`encode_utterance` gives."""
    _check_extractor(extractor, encoder)
    _check_window(config, encoder)
    features = causal_log_mel(audio, extractor, sample_rate)  # (n_mels, frames)
    spans = utterance_spans(config, len(audio), encoder.config.max_source_positions)
    with torch.no_grad():
        return [(encode_frames(encoder, features[:, span.window_start:span.window_end], span.position,
                               until_layer=until_layer)[0].clone(), span) for span in spans]


# --------------------------------------------------------------------------- streaming


@dataclass(frozen=True, eq=False)
class EncodedBlock:
    """One block's encoder output, final: ``frames`` (block_ms / 20, d_model), and where it lies in the audio."""

    frames: torch.Tensor
    span: BlockSpan

    @property
    def index(self) -> int:
        return self.span.index

    @property
    def start_ms(self) -> int:
        return self.span.start_ms

    @property
    def end_ms(self) -> int:
        return self.span.end_ms

    @property
    def available_ms(self) -> float:
        return self.span.available_ms


@dataclass(frozen=True)
class EncoderCompute:
    """What a stream has cost so far. ``mel_frames``: 10 ms frames pushed through the encoder, context and
    lookahead included (each recomputed in every window that holds it); times are wall-clock seconds."""

    audio_ms: float  # audio received
    windows: int  # encoder calls (one per block)
    mel_frames: int
    encoder_seconds: float
    feature_seconds: float

    @property
    def encoder_ms_per_audio_second(self) -> float:
        return 1000 * self.encoder_seconds / (self.audio_ms / 1000) if self.audio_ms else 0.0

    @property
    def frames_per_audio_frame(self) -> float:
        """Encoder work relative to one pass over the audio (1.0: no recomputation)."""
        return self.mel_frames / (self.audio_ms / MEL_MS) if self.audio_ms else 0.0


class StreamingEncoder:
    """Encodes one stream of 16 kHz audio block by block: :meth:`push` pieces of any size, then :meth:`finish`.

    Each returns the blocks it completed, in order, each final. State: the samples and mel frames later windows
    still need (bounded by the window), the running maximum of the features, the next block's index.
    One object per utterance; :attr:`compute` counts its cost.
    """

    def __init__(self, config: StreamingEncoderConfig, encoder: WhisperEncoder,
                 extractor: WhisperFeatureExtractor):
        _check_extractor(extractor, encoder)
        _check_window(config, encoder)
        self.config = config
        self.encoder = encoder
        self._mel_filters = _mel_filters(extractor)  # (n_mels, 201)
        self._n_mels = extractor.feature_size
        self._max_positions = encoder.config.max_source_positions
        self._audio = np.zeros(0, np.float32)  # the stream's samples from index _first_sample on
        self._first_sample = 0
        self._received = 0  # samples pushed so far
        self._features = torch.zeros(self._n_mels, 0)  # mel frames [_first_frame, _first_frame + width)
        self._first_frame = 0
        self._running_max = UNKNOWN_MAX
        self._next_block = 0
        self._finished = False
        self._windows = 0
        self._mel_frames = 0
        self._encoder_seconds = 0.0
        self._feature_seconds = 0.0

    @property
    def received_ms(self) -> float:
        return self._received * 1000 / SAMPLE_RATE

    @property
    def compute(self) -> EncoderCompute:
        return EncoderCompute(audio_ms=self.received_ms, windows=self._windows, mel_frames=self._mel_frames,
                              encoder_seconds=self._encoder_seconds, feature_seconds=self._feature_seconds)

    def push(self, samples: np.ndarray, sample_rate: int = SAMPLE_RATE) -> list[EncodedBlock]:
        """Append ``samples`` (int16, or float32 in [-1, 1], mono); returns the blocks they completed."""
        if self._finished:
            raise SimulmtError("push() after finish(): a StreamingEncoder encodes one stream; start a new one")
        samples = _checked_audio(samples, sample_rate, "StreamingEncoder.push")
        self._audio = np.concatenate([self._audio, samples])
        self._received += len(samples)
        blocks = []
        while True:
            span = block_span(self.config, self._next_block, max_positions=self._max_positions)
            if self._received < _samples_needed(span.window_end):
                return blocks
            blocks.append(self._emit(span))

    def finish(self) -> list[EncodedBlock]:
        """The end of the stream: pads the audio with zeros to whole encoder frames and returns every block not
        yet emitted (the last one shorter than ``block_ms`` unless the audio ends on a block boundary)."""
        if self._finished:
            raise SimulmtError("finish() called twice on one StreamingEncoder")
        self._finished = True
        total = _total_frames(self._received)
        padding = _samples_needed(total) - self._received if total else 0
        self._audio = np.concatenate([self._audio, np.zeros(padding, np.float32)])
        blocks = []
        while self._next_block * self.config.block_frames < total:
            blocks.append(self._emit(block_span(self.config, self._next_block, total, self.received_ms,
                                                self._max_positions)))
        return blocks

    def _emit(self, span: BlockSpan) -> EncodedBlock:
        self._compute_features(span.window_end)
        window = self._features[:, span.window_start - self._first_frame:span.window_end - self._first_frame]
        started = time.perf_counter()
        frames = encode_window(self.encoder, window, span)  # (block frames / 2, d)
        if frames.is_cuda:
            torch.cuda.synchronize(frames.device)
        self._encoder_seconds += time.perf_counter() - started
        self._windows += 1
        self._mel_frames += window.shape[1]
        self._next_block += 1
        self._forget_before(max(0, span.end - self.config.context_frames))  # the next window's start
        return EncodedBlock(frames=frames, span=span)

    def _compute_features(self, end: int) -> None:
        """Compute mel frames up to ``end`` (those not computed yet), floored with the running maximum."""
        start = self._first_frame + self._features.shape[1]
        if end <= start:
            return
        started = time.perf_counter()
        raw = _raw_log_mel(_frame_signal(self._audio, self._first_sample, start, end), self._mel_filters)
        features, self._running_max = _floored(raw, self._running_max)
        self._features = torch.cat([self._features, features], dim=1)
        self._feature_seconds += time.perf_counter() - started

    def _forget_before(self, frame: int) -> None:
        """Drop mel frames before ``frame`` and the samples no frame still to compute needs."""
        drop = frame - self._first_frame
        if drop > 0:
            self._features = self._features[:, drop:].clone()
            self._first_frame = frame
        next_frame = self._first_frame + self._features.shape[1]
        keep_from = max(0, HOP * next_frame - HALF)  # the first sample the next frame to compute sees
        drop = keep_from - self._first_sample
        if drop > 0:
            self._audio = self._audio[drop:].copy()
            self._first_sample = keep_from
