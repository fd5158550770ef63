"""The speech encoder's top layers, trained with the adapter (EASiST trains its encoder in stages II and III).

With the encoder frozen, a block's frames are fixed and a training corpus caches them once. Training Whisper's top
``n`` layers (and its final norm) keeps most of that saving: the hidden state *entering* the first trained layer
depends only on the frozen layers below, so it is cached per window (``streaming_encoder.window_states``: every
block's whole window, left context included, because the trained layers attend over all of it), and each training
step runs only the top layers on it and keeps the block's own frames::

    window mel frames --convs, positions, layers[:first] (frozen, cached)--> hidden --layers[first:], norm
        (trained: EncoderTop)--> window frames --[span.kept]--> the block's frames --SpeechAdapter--> ...

That is exactly what streaming computes with the same weights (``whisper_ct2.encode_frames`` runs the same
operations in the same order), so training and inference stay at parity (tests/test_encoder_top.py).

The trained layers are part of the speech model: ``save`` writes them beside the adapter (``speech_encoder.json``
says from which layer; ``speech_encoder.safetensors`` holds those layers and the final norm), and
``apply_tuned(encoder, folder)`` puts them into a freshly loaded base encoder (``SpeechTranslator.load`` and the
next training stage do).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from torch import nn

from simulmt.errors import SimulmtError
from simulmt.speech.whisper_ct2 import encode_from_layer

ENCODER_FILE, ENCODER_CONFIG = "speech_encoder.safetensors", "speech_encoder.json"


class EncoderTop(nn.Module):
    """Layers ``first_layer..`` and the final norm of ``encoder``, shared with it (training this trains the
    encoder in place)."""

    def __init__(self, encoder, first_layer: int):
        super().__init__()
        n = len(encoder.layers)
        if not 0 <= first_layer < n:
            raise SimulmtError(f"the speech encoder has {n} layers: train 1 to {n} of them (--encoder-layers), "
                               f"not {n - first_layer}")
        self.first_layer = first_layer
        self.layers = nn.ModuleList(encoder.layers[first_layer:])
        self.layer_norm = encoder.layer_norm
        self._encoder = [encoder]  # not a submodule: only the top's weights are this module's state

    def forward(self, hidden: torch.Tensor, kept: slice) -> torch.Tensor:
        """(window frames, d) hidden state entering ``first_layer`` -> the block's own (frames, d) outputs."""
        return encode_from_layer(self._encoder[0], hidden[None], self.first_layer)[0][kept]

    def save(self, folder: str | Path) -> None:
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().contiguous() for k, v in self.state_dict().items()}, str(folder / ENCODER_FILE))
        (folder / ENCODER_CONFIG).write_text(json.dumps({"first_layer": self.first_layer,
                                                          "layers": self.first_layer + len(self.layers)}) + "\n")


def tuned_first_layer(folder: str | Path | None) -> int | None:
    """The first trained encoder layer of a speech model folder, or None when its encoder is the base one."""
    if folder is None or not (Path(folder) / ENCODER_CONFIG).is_file():
        return None
    return int(json.loads((Path(folder) / ENCODER_CONFIG).read_text())["first_layer"])


def apply_tuned(encoder, folder: str | Path) -> str | None:
    """Load a speech model folder's trained encoder layers into ``encoder`` (in place); returns a short digest of
    those weights (it names caches of what the tuned encoder computes), or None when the folder has none."""
    from safetensors.torch import load_file

    folder = Path(folder)
    first = tuned_first_layer(folder)
    if first is None:
        return None
    spec = json.loads((folder / ENCODER_CONFIG).read_text())
    if spec["layers"] != len(encoder.layers):
        raise SimulmtError(f"{folder}: its trained encoder layers belong to a {spec['layers']}-layer encoder, this "
                           f"one has {len(encoder.layers)} (speech.json's encoder must be the one it was trained on)")
    top = EncoderTop(encoder, first)
    state = load_file(str(folder / ENCODER_FILE))
    missing, unexpected = top.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SimulmtError(f"{folder / ENCODER_FILE}: does not fit the encoder's layers {first}..: missing "
                           f"{missing}, unexpected {unexpected}")
    return hashlib.sha256((folder / ENCODER_FILE).read_bytes()).hexdigest()[:10]
