"""Training the speech encoder's top layers: the cached state below them, run through them, is exactly what the
streaming encoder gives with the same weights; the trained layers travel in the speech model folder."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import WhisperConfig, WhisperFeatureExtractor
from transformers.models.whisper.modeling_whisper import WhisperEncoder

from simulmt.errors import SimulmtError
from simulmt.speech.encoder_top import ENCODER_CONFIG, ENCODER_FILE, EncoderTop, apply_tuned, tuned_first_layer
from simulmt.speech.streaming_encoder import (StreamingEncoder, StreamingEncoderConfig, encode_utterance,
                                              window_states)
from simulmt.speech.whisper_ct2 import encode_frames, encode_from_layer


def encoder(layers: int = 3, seed: int = 0) -> WhisperEncoder:
    torch.manual_seed(seed)
    return WhisperEncoder(WhisperConfig(d_model=16, encoder_layers=layers, encoder_attention_heads=2,
                                        encoder_ffn_dim=32, num_mel_bins=80, max_source_positions=1500)).eval()


def speech(seconds: float = 2.1) -> np.ndarray:
    rng = np.random.default_rng(0)
    t = np.arange(int(seconds * 16000)) / 16000
    return (0.3 * np.sin(2 * np.pi * (180 + 250 * t) * t) + 0.05 * rng.standard_normal(len(t))).astype(np.float32)


def perturb(module: torch.nn.Module, seed: int = 1) -> None:
    """Weights that no longer equal the base encoder's, as training leaves them."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))


def test_the_encoder_stopped_below_a_layer_and_run_on_from_it_is_the_whole_encoder():
    enc = encoder()
    features = torch.randn(80, 46)
    whole = encode_frames(enc, features, position_offset=7)
    for n in range(4):
        below = encode_frames(enc, features, position_offset=7, until_layer=n)
        assert below.shape == whole.shape
        assert torch.equal(encode_from_layer(enc, below, n), whole)  # the same operations in the same order
    with pytest.raises(ValueError, match="3 layers"):
        encode_frames(enc, features, until_layer=4)


def test_cached_window_states_through_the_trained_top_are_the_streamed_blocks():
    """What training computes (cached state below layer 1, the trained layers on it, the block's frames kept)
    equals what the streaming encoder emits with the same trained weights, block by block."""
    enc, extractor, x = encoder(), WhisperFeatureExtractor(feature_size=80), speech()
    config = StreamingEncoderConfig(block_ms=320, left_context_ms=640)
    states = window_states(x, config, enc, extractor, until_layer=1)  # computed before the top trains
    top = EncoderTop(enc, 1)
    perturb(top)  # "training" changes the top, in the encoder itself
    assert [n for n, _ in top.named_parameters()][0].startswith("layers.0.")  # only the top is its state
    with torch.no_grad():
        trained = [top(hidden, span.kept) for hidden, span in states]
    streaming = StreamingEncoder(config, enc, extractor)
    pieces = [b.frames for start in range(0, len(x), 2100) for b in streaming.push(x[start:start + 2100])]
    pieces += [b.frames for b in streaming.finish()]
    offline = encode_utterance(x, config, enc, extractor)
    assert len(trained) == len(pieces) == len(offline) == 7
    for a, b, c in zip(trained, pieces, offline):
        assert torch.equal(a, b) and torch.equal(b, c)


def test_the_trained_layers_are_saved_and_put_into_a_fresh_base_encoder(tmp_path):
    tuned = encoder()
    top = EncoderTop(tuned, 2)
    perturb(top)
    top.save(tmp_path)
    assert (tmp_path / ENCODER_FILE).is_file() and tuned_first_layer(tmp_path) == 2
    fresh = encoder()  # the base weights, as whisper_encoder loads them
    features = torch.randn(80, 30)
    assert not torch.allclose(encode_frames(fresh, features), encode_frames(tuned, features))
    digest = apply_tuned(fresh, tmp_path)
    assert torch.equal(encode_frames(fresh, features), encode_frames(tuned, features))
    assert digest and apply_tuned(encoder(), tmp_path / "nothing") is None and tuned_first_layer(None) is None
    perturb(top, seed=2)
    top.save(tmp_path)
    assert apply_tuned(encoder(), tmp_path) != digest  # the digest names these weights
    with pytest.raises(SimulmtError, match="3-layer encoder, this one has 4"):
        apply_tuned(encoder(layers=4), tmp_path)
    with pytest.raises(SimulmtError, match="train 1 to 3"):
        EncoderTop(encoder(), 3)
    assert (tmp_path / ENCODER_CONFIG).read_text().strip() == '{"first_layer": 2, "layers": 3}'
