"""The collator: pads a batch of laid-out examples (right padding) into model inputs.

Per example of length T_i, padded to T = max T_i::

    input_ids     (B, T)   the example's ids, then ``pad_id``
    position_ids  (B, T)   the layout's explicit position ids, then 0
    attention_mask         (B, 1, T, T) additive float mask, or a dict of them per attention type (models with
                           sliding-window layers, e.g. Gemma 3), rendered by ``simulmt.core.runner.render_masks``;
                           ALiBi models: (B, H, T, T), the bias of the layout's key distances per head
    labels        (B, T)   the next-token labels of ``labels_for`` (already aligned: labels[i] is what the output
                           at i predicts, no shift), -100 elsewhere and on padding

The visibility of each example is the layout's rule over its target-side flags (``Visibility.matrix_from_sides``,
the very function streaming inference uses). A pad row sees only itself (no softmax row is empty) and no real
token sees a pad (pads come after every real token, and visibility is causal)::

    example 1 (T=4) + example 2 (T=2), B=2, T=4:
        ■ ⬚ ⬚ ⬚      ■ ⬚ ⬚ ⬚
        ■ ■ ⬚ ⬚      ■ ■ ⬚ ⬚
        ■ ■ ■ ⬚      ⬚ ⬚ ■ ⬚    <- pad rows: only the diagonal
        ■ ■ ■ ■      ⬚ ⬚ ⬚ ■
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from simulmt.core.alibi import Alibi
from simulmt.core.examples import IGNORE
from simulmt.core.runner import render_masks
from simulmt.core.visibility import Visibility, key_distances


@dataclass
class SimulCollator:
    visibility: Visibility
    attention_types: list[str]
    window: int | None
    pad_id: int
    dtype: torch.dtype = torch.float32  # the mask's dtype (the trainer casts it to the model's dtype)
    pad_to_multiple_of: int | None = None
    alibi: Alibi | None = None  # ALiBi models: per-head masks with the layout's distances (simulmt.core.alibi)

    def visible(self, batch: list[dict[str, np.ndarray]], length: int) -> torch.Tensor:
        """(B, T, T) boolean visibility of the padded batch."""
        out = torch.eye(length, dtype=torch.bool).repeat(len(batch), 1, 1)  # pads: themselves only
        for b, item in enumerate(batch):
            n = len(item["input_ids"])
            before = torch.from_numpy(np.asarray(item["slot_start"])) if self.visibility.earlier_slots else None
            out[b, :n, :n] = self.visibility.matrix_from_sides(torch.from_numpy(np.asarray(item["target_side"])),
                                                               0, before)
        return out

    def __call__(self, batch: list[dict[str, np.ndarray]]) -> dict:
        length = max(len(item["input_ids"]) for item in batch)
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        ids = torch.full((len(batch), length), self.pad_id, dtype=torch.long)
        positions = torch.zeros((len(batch), length), dtype=torch.long)
        labels = torch.full((len(batch), length), IGNORE, dtype=torch.long)
        for b, item in enumerate(batch):
            n = len(item["input_ids"])
            ids[b, :n] = torch.as_tensor(item["input_ids"])
            positions[b, :n] = torch.as_tensor(item["position_ids"])
            labels[b, :n] = torch.as_tensor(item["labels"])
        visible = self.visible(batch, length)
        distances = None
        if self.alibi is not None:
            sides = torch.zeros((len(batch), length), dtype=torch.bool)
            valid = torch.zeros((len(batch), length), dtype=torch.bool)
            for b, item in enumerate(batch):
                n = len(item["input_ids"])
                sides[b, :n] = torch.as_tensor(np.asarray(item["target_side"]))
                valid[b, :n] = True
            q_index = torch.arange(length).expand(len(batch), length)
            distances = key_distances(self.visibility.distance, visible, q_index, sides, sides, valid)
        mask = render_masks(visible, 0, self.attention_types, self.window, self.dtype, alibi=self.alibi,
                            distances=distances)
        return {"input_ids": ids, "position_ids": positions, "attention_mask": mask, "labels": labels,
                "real_tokens": torch.tensor(sum(len(item["input_ids"]) for item in batch))}
