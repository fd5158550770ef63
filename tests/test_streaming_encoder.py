"""Tests for simulmt.speech.streaming_encoder: block timing, split invariance, training == streaming parity,
causal features, long streams, bounded state, errors.

A tiny random ``WhisperEncoder`` (16 wide, 2 layers, Whisper's 1500 positions) and Whisper's feature extractor;
each test takes well under a second. One slow test runs the real tiny.en on the shipped sample.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import WhisperConfig, WhisperFeatureExtractor
from transformers.models.whisper.modeling_whisper import WhisperEncoder

from simulmt.errors import ModelNotFoundError, SimulmtError
from simulmt.speech.streaming_encoder import (
    STFT_REACH_MS,
    StreamingEncoder,
    StreamingEncoderConfig,
    causal_log_mel,
    encode_utterance,
    utterance_spans,
)
from simulmt.speech.whisper_ct2 import encode_frames, log_mel

SAMPLES = Path(__file__).resolve().parents[1] / "simulmt" / "speech" / "samples"


@pytest.fixture(scope="module")
def encoder() -> WhisperEncoder:
    torch.manual_seed(0)
    config = WhisperConfig(d_model=16, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=32,
                           num_mel_bins=80, max_source_positions=1500)
    return WhisperEncoder(config).eval()


@pytest.fixture(scope="module")
def extractor() -> WhisperFeatureExtractor:
    return WhisperFeatureExtractor(feature_size=80)


def signal(seconds: float, seed: int = 0, extra_samples: int = 0) -> np.ndarray:
    """A chirp in noise with a louder burst in the middle (so the running maximum moves), float32 in [-1, 1]."""
    n = int(seconds * 16000) + extra_samples
    t = np.arange(n) / 16000
    x = 0.1 * np.sin(2 * np.pi * (150 + 80 * t) * t) * (1 + np.sin(2 * np.pi * 0.7 * t))  # |x| <= 0.2
    x[n // 2:n // 2 + 1600] *= 2.0
    return (x + 0.01 * np.random.default_rng(seed).standard_normal(n)).astype(np.float32)


def stream(audio: np.ndarray, config, encoder, extractor, pieces: list[int] | None = None):
    """Push ``audio`` in pieces of the given sizes (the rest in one), then finish: (blocks, the encoder)."""
    streaming = StreamingEncoder(config, encoder, extractor)
    blocks, at = [], 0
    for size in pieces or []:
        blocks += streaming.push(audio[at:at + size])
        at += size
    blocks += streaming.push(audio[at:])
    return blocks + streaming.finish(), streaming


def random_pieces(n: int, seed: int, largest: int) -> list[int]:
    rng = np.random.default_rng(seed)
    sizes = []
    while sum(sizes) < n:
        sizes.append(int(rng.integers(0, largest)))  # empty pieces too
    return sizes


# --------------------------------------------------------------------------- blocks and their timing


def test_blocks_appear_when_their_last_sample_arrives(encoder, extractor):
    config = StreamingEncoderConfig(block_ms=640, left_context_ms=1280, lookahead_ms=0)
    streaming = StreamingEncoder(config, encoder, extractor)
    audio = (signal(2.0) * 32767).astype(np.int16)  # int16 works as well
    # block 0 needs mel frames 0..63, whose last window ends at sample 160 * 64 + 40 (640 ms + 2.5 ms)
    assert streaming.push(audio[:10279]) == []
    (block,) = streaming.push(audio[10279:10280])
    assert (block.index, block.start_ms, block.end_ms, block.available_ms) == (0, 0, 640, 640 + STFT_REACH_MS)
    assert block.frames.shape == (32, 16) and block.span.context_ms == 0
    blocks = streaming.push(audio[10280:])  # up to 2000 ms: blocks 1 (needs 1282.5 ms) and 2 (1922.5 ms)
    assert [(b.index, b.available_ms, b.span.context_ms) for b in blocks] == [(1, 1282.5, 640), (2, 1922.5, 1280)]
    (last,) = streaming.finish()  # 1920..2000 ms: 4 encoder frames, shorter than a block, available at the end
    assert (last.index, last.start_ms, last.end_ms, last.available_ms, last.frames.shape[0]) == (3, 1920, 2000,
                                                                                                 2000.0, 4)
    assert last.span.context_ms == 1280 and last.span.lookahead_ms == 0
    compute = streaming.compute
    assert compute.windows == 4 and compute.mel_frames == 64 + 128 + 192 + 136 and compute.audio_ms == 2000
    assert compute.encoder_seconds > 0 and compute.encoder_ms_per_audio_second > 0


def test_lookahead_delays_blocks_and_is_cut_at_the_end(encoder, extractor):
    config = StreamingEncoderConfig(block_ms=320, left_context_ms=640, lookahead_ms=200)
    audio = signal(1.0, extra_samples=100)  # 1006.25 ms: mel frames 0..101, padded to 102
    streaming = StreamingEncoder(config, encoder, extractor)
    assert streaming.push(audio[:160 * 52 + 39]) == []  # block 0 + 200 ms lookahead: 52 frames
    early = streaming.push(audio[160 * 52 + 39:])
    late = streaming.finish()
    spans = [b.span for b in early + late]
    assert [(s.start_ms, s.end_ms, s.available_ms, s.context_ms, s.lookahead_ms) for s in spans] == [
        (0, 320, 522.5, 0, 200),
        (320, 640, 842.5, 320, 200),
        (640, 960, 1006.25, 640, 60),  # 960 + 200 + 2.5 ms > the audio's end: released by finish()
        (960, 1020, 1006.25, 640, 0),  # the last block: 3 encoder frames, its end padded to 1020 ms
    ]
    assert [b.index for b in early] == [0, 1]
    assert spans == utterance_spans(config, len(audio))


def test_block_frames_cover_the_padded_audio(encoder, extractor):
    config = StreamingEncoderConfig(block_ms=400, left_context_ms=400)
    for n in [1, 319, 320, 321, 6400, 6401, 16000]:
        blocks, _ = stream(signal(1.0)[:n], config, encoder, extractor)
        frames = math.ceil(n / 320)  # 20 ms encoder frames, the last one zero-padded
        assert sum(b.frames.shape[0] for b in blocks) == frames
        assert len(blocks) == math.ceil(frames / 20) and blocks[-1].end_ms == 20 * frames
    assert stream(np.zeros(0, np.float32), config, encoder, extractor)[0] == []


# --------------------------------------------------------------------------- determinism and parity


@pytest.mark.parametrize("config", [StreamingEncoderConfig(640, 1280, 0), StreamingEncoderConfig(320, 2560, 120),
                                    StreamingEncoderConfig(40, 0, 0)])
def test_blocks_do_not_depend_on_how_the_audio_was_split(encoder, extractor, config):
    audio = signal(3.0, seed=1, extra_samples=77)
    whole, _ = stream(audio, config, encoder, extractor)
    for seed, largest in [(0, 3000), (1, 200), (2, 30000)]:
        split, _ = stream(audio, config, encoder, extractor, random_pieces(len(audio), seed, largest))
        assert [b.span for b in split] == [b.span for b in whole]
        assert all(torch.equal(a.frames, b.frames) for a, b in zip(split, whole))


@pytest.mark.parametrize("config", [StreamingEncoderConfig(640, 1280, 0), StreamingEncoderConfig(1280, 640, 320),
                                    StreamingEncoderConfig(320, 0, 0)])
def test_encode_utterance_equals_streaming(encoder, extractor, config):
    audio = signal(4.0, seed=2, extra_samples=1234)
    blocks, _ = stream(audio, config, encoder, extractor, random_pieces(len(audio), 3, 5000))
    offline = encode_utterance(audio, config, encoder, extractor)
    assert len(offline) == len(blocks)
    for a, b in zip(offline, blocks):
        assert a.dtype == torch.float32 and a.shape == b.frames.shape
        torch.testing.assert_close(a, b.frames, rtol=0, atol=1e-6)
    assert utterance_spans(config, len(audio)) == [b.span for b in blocks]


def test_a_block_sees_only_its_window(encoder, extractor):
    """Changing audio before a block's window (without moving the running maximum) leaves the block unchanged."""
    config = StreamingEncoderConfig(block_ms=320, left_context_ms=640)
    audio = signal(3.0, seed=4)
    changed = audio.copy()
    changed[6400:6400 + 3200] *= 0.5  # 400..600 ms; block 4's window is 640..1280 ms (its first frame: 627.5 ms on)
    before, after = encode_utterance(audio, config, encoder, extractor), encode_utterance(changed, config, encoder,
                                                                                          extractor)
    assert not torch.equal(before[1], after[1])  # covers 320..640 ms
    assert all(torch.equal(before[k], after[k]) for k in range(4, len(before)))


def test_a_window_holding_the_whole_utterance_is_one_offline_pass(encoder, extractor):
    audio = signal(3.0, seed=9)  # 300 mel frames: every window below is all of them
    config = StreamingEncoderConfig(block_ms=640, left_context_ms=2560, lookahead_ms=2560)
    one_pass = encode_frames(encoder, causal_log_mel(audio, extractor))[0]  # (150, 16)
    torch.testing.assert_close(torch.cat(encode_utterance(audio, config, encoder, extractor)), one_pass,
                               rtol=0, atol=1e-6)


# --------------------------------------------------------------------------- features


def test_causal_features_are_whispers_once_the_loudest_frame_is_past(extractor):
    audio = signal(2.0, seed=5)
    audio[:800] *= 4.0  # the loudest frames come first: the running maximum is the clip's from frame 0
    ours = causal_log_mel(audio, extractor)  # (80, 200)
    whisper = log_mel(audio, extractor, pad_to_30s=True)[:, :ours.shape[1]]
    assert ours.shape == (80, 200)
    torch.testing.assert_close(ours, whisper, rtol=0, atol=1e-6)


def test_causal_features_depend_only_on_the_past(extractor):
    audio = signal(2.0, seed=6)
    full = causal_log_mel(audio, extractor)
    # mel frame i is final once sample 160 i + 200 has arrived: a prefix gives the same frames, but for the last two
    # (which see the prefix's zero padding)
    for n in [3200, 3201, 16000, 24000]:
        prefix = causal_log_mel(audio[:n], extractor)
        ready = (n - 40) // 160
        assert torch.equal(prefix[:, :ready], full[:, :ready])


# --------------------------------------------------------------------------- long streams


def test_forty_seconds_in_a_sliding_window(encoder, extractor):
    config = StreamingEncoderConfig(block_ms=1280, left_context_ms=10240, lookahead_ms=0)
    audio = signal(40.0, seed=7)
    streaming = StreamingEncoder(config, encoder, extractor)
    blocks = []
    for at in range(0, len(audio), 8000):  # half a second at a time
        blocks += streaming.push(audio[at:at + 8000])
        assert streaming._features.shape[1] <= config.window_ms // 10  # bounded state, whatever the length
        assert len(streaming._audio) <= 16 * config.window_ms + 8000
    blocks += streaming.finish()
    assert len(blocks) == 32 and all(b.frames.shape == (64, 16) for b in blocks[:-1])
    assert blocks[-1].frames.shape == (16, 16) and blocks[-1].end_ms == 40000
    assert all(torch.isfinite(b.frames).all() for b in blocks)
    assert max(b.span.window_end - b.span.window_start for b in blocks) == 1152  # 11.52 s: 576 positions
    # utterance positions: a window starts at its place in the utterance, until the longest window would no longer
    # fit in the 1500 positions; from block 23 (29.44 s) on, every window starts at 1500 - 576
    assert [b.span.position for b in blocks] == [64 * max(0, k - 8) for k in range(23)] + [924] * 9
    assert blocks[-1].span.position + (blocks[-1].span.window_end - blocks[-1].span.window_start) // 2 <= 1500
    compute = streaming.compute
    assert compute.mel_frames == sum(b.span.window_end - b.span.window_start for b in blocks)
    # block k's window: min(k, 8) blocks of context + itself; the last block is 16 encoder frames (32 mel frames)
    assert compute.mel_frames == 128 * sum(min(k, 8) + 1 for k in range(31)) + (1024 + 32) == 32160
    offline = encode_utterance(audio, config, encoder, extractor)
    assert all(torch.allclose(a, b.frames, rtol=0, atol=1e-6) for a, b in zip(offline, blocks))


@pytest.mark.parametrize("positions", ["utterance", "window"])
def test_positions(encoder, extractor, positions):
    audio = signal(40.0, seed=8)
    config = StreamingEncoderConfig(block_ms=1280, left_context_ms=10240, positions=positions)
    spans = utterance_spans(config, len(audio))
    assert [s.position for s in spans] == [min(s.window_start // 2, 924) if positions == "utterance" else 0
                                           for s in spans]
    features = causal_log_mel(audio, extractor)
    blocks = encode_utterance(audio, config, encoder, extractor)
    for k in (0, 12, 31):  # a window from 0, one inside the utterance, the last one (clamped)
        s = spans[k]
        expected = encode_frames(encoder, features[:, s.window_start:s.window_end], s.position)[0][s.kept]
        torch.testing.assert_close(blocks[k], expected, rtol=0, atol=0)
    if positions == "utterance":
        assert (spans[12].position, spans[31].position) == (256, 924)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("fields, message", [
    ({"block_ms": 620}, "block_ms must be a positive multiple of 40 ms .a whole, even number.*e.g. 640"),
    ({"block_ms": 0}, "block_ms must be a positive multiple of 40 ms"),
    ({"block_ms": 640.0}, "block_ms must be a whole number of ms (int), got 640.0"),
    ({"left_context_ms": -640}, "left_context_ms must be a multiple of 20 ms, at least 0"),
    ({"left_context_ms": 650}, "left_context_ms must be a multiple of 20 ms"),
    ({"lookahead_ms": -20}, "lookahead_ms must be a multiple of 20 ms, at least 0"),
    ({"positions": "absolute"}, "positions must be one of ('utterance', 'window'), got 'absolute'"),
])
def test_bad_config(fields, message):
    with pytest.raises(SimulmtError, match=message.replace("(", r"\(").replace(")", r"\)")):
        StreamingEncoderConfig(**fields)


def test_window_must_fit_the_encoders_positions(encoder, extractor):
    config = StreamingEncoderConfig(block_ms=1280, left_context_ms=28800)  # 30.08 s
    with pytest.raises(SimulmtError, match=r"30080 ms does not fit in the encoder's 1500 positions \(30000 ms\)"):
        StreamingEncoder(config, encoder, extractor)
    with pytest.raises(SimulmtError, match="does not fit"):
        encode_utterance(signal(1.0), config, encoder, extractor)


def test_extractor_must_match_the_encoder(encoder):
    with pytest.raises(SimulmtError, match="makes 128 mel bins, the encoder takes 80"):
        StreamingEncoder(StreamingEncoderConfig(), encoder, WhisperFeatureExtractor(feature_size=128))


@pytest.mark.parametrize("audio, sample_rate, message", [
    (np.zeros(800, np.float32), 8000, "takes 16000 Hz audio, got 8000 Hz; resample first"),
    (np.zeros(800, np.float64), 16000, "int16 samples or float32 samples in .-1, 1., got float64; convert with"),
    (np.zeros(800, np.int32), 16000, "got int32"),
    (np.zeros((800, 2), np.float32), 16000, r"expected mono audio of shape \(samples,\), got shape \(800, 2\)"),
    (np.array([0.0, np.nan, 0.5, np.inf], np.float32), 16000, "2 samples are NaN or infinite .the first at index 1"),
    (np.array([0.0, 1200.0], np.float32), 16000, "peak of 1200 .int16 values cast to float. divide by 32768"),
    ([0.0, 0.1], 16000, "expected a numpy array of samples, got list"),
])
def test_bad_audio(encoder, extractor, audio, sample_rate, message):
    streaming = StreamingEncoder(StreamingEncoderConfig(), encoder, extractor)
    with pytest.raises(SimulmtError, match=message):
        streaming.push(audio, sample_rate=sample_rate)
    with pytest.raises(SimulmtError, match=message):
        encode_utterance(audio, StreamingEncoderConfig(), encoder, extractor, sample_rate=sample_rate)


def test_one_stream_per_encoder(encoder, extractor):
    streaming = StreamingEncoder(StreamingEncoderConfig(), encoder, extractor)
    streaming.push(signal(0.5))
    streaming.finish()
    with pytest.raises(SimulmtError, match="push.. after finish"):
        streaming.push(signal(0.5))
    with pytest.raises(SimulmtError, match="finish.. called twice"):
        streaming.finish()


# --------------------------------------------------------------------------- the real tiny.en


@pytest.mark.slow
def test_real_tiny_en_on_the_shipped_sample():
    from simulmt.speech.wav import read_wav
    from simulmt.speech.whisper_ct2 import whisper_encoder

    try:
        encoder, extractor = whisper_encoder("tiny.en")
    except ModelNotFoundError as e:
        pytest.skip(f"Whisper tiny.en is not installed: {e}")
    audio, rate = read_wav(SAMPLES / "a_man_rides_a_bike.wav")  # 3680.5625 ms
    assert json.loads((SAMPLES / "a_man_rides_a_bike.json").read_text())["duration_ms"] == len(audio) / 16
    config = StreamingEncoderConfig()
    blocks, streaming = stream(audio, config, encoder, extractor, random_pieces(len(audio), 0, 4000))
    assert [b.end_ms for b in blocks] == [640, 1280, 1920, 2560, 3200, 3700]
    assert [b.frames.shape for b in blocks] == [(32, 384)] * 5 + [(25, 384)]
    offline = encode_utterance(audio, config, encoder, extractor, sample_rate=rate)
    for a, b in zip(offline, blocks):
        torch.testing.assert_close(a, b.frames, rtol=0, atol=1e-5)  # 384 wide, 4 layers of float32
    # the streamed frames against Whisper's own offline encoding (30 s padded, the whole clip in context)
    with torch.no_grad():
        whisper = encoder(log_mel(audio.astype(np.float32) / 32768, extractor)[None]).last_hidden_state[0, :185]
    cosine = torch.nn.functional.cosine_similarity(torch.cat([b.frames for b in blocks]), whisper, dim=-1)
    assert cosine.mean() > 0.8, cosine
    # the whole clip fits in each block's left context: windows of 64, 128, ..., 320 and 370 mel frames
    assert streaming.compute.mel_frames == 64 + 128 + 192 + 256 + 320 + 370
