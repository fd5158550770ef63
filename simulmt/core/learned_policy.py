"""A learned READ/WRITE policy (EASiST): a linear head on the model's last hidden state, and a threshold.

After each source unit is read, the stream feeds it and hands the policy the last hidden state of the last token
fed (the unit's last token). The head turns it into p(WRITE) = softmax(W h + b)[1]; the policy writes when
p >= ``tau``. In an engine, p(WRITE) comes computed for every row of the forward at once (``StreamState.score``:
head_scores.py); the policy computes it itself only when handed the hidden state alone. Once it writes, the
model writes a chunk until it ends it itself (the interleaved layout's end-of-write token, or any end token), then
the policy reads again. Sweeping ``tau`` from low to high moves along
the latency-quality curve: a low threshold writes early, a high one waits.

``per_arrival``: decide once per arrival of source, on the last unit of it (EASiST decides once per speech block):
while units that arrived with the one just read are waiting, read them first. A live speech stream gets its words
block by block; deciding between two words that came in the same block would cost a forward (for the hidden state)
and gain no time, since both were there at once. (Text pushed as a whole sentence is one arrival: off for text.)

The head is plain data (two tensors), trained apart from the model on hidden states of training sequences
(``simulmt.finetune.policy_head``) and saved beside the adapter as ``policy_head.safetensors``. The same head works
for text (a unit is a word) and for speech (a unit is a block of audio frames).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch

from simulmt.core.decisions import Action, StreamState
from simulmt.errors import SimulmtError

HEAD_FILE = "policy_head.safetensors"
NO_HEAD = (f"the learned policy needs a policy head: load a model whose adapter has {HEAD_FILE} (train one with "
           f"`simulmt finetune --recipe policy-head --init-adapter ADAPTER`)")


@dataclass(frozen=True, eq=False)
class PolicyHead:
    weight: torch.Tensor  # (2, hidden): rows READ, WRITE
    bias: torch.Tensor  # (2,)
    info: dict = field(default_factory=dict)  # how it was trained (layout, schedule, accuracy, ...)

    def __post_init__(self):
        if self.weight.dim() != 2 or self.weight.shape[0] != 2 or self.bias.shape != (2,):
            raise SimulmtError(f"a policy head is a (2, hidden) weight and a (2,) bias, got "
                               f"{tuple(self.weight.shape)} and {tuple(self.bias.shape)}")

    @property
    def hidden_size(self) -> int:
        return self.weight.shape[1]

    @property
    def layer(self) -> int | None:
        """The decoder layer whose output the head reads (0-based; its raw residual stream), or None: the last hidden
        state after the final norm. A head on an inner layer lets a READ stop the forward there (layer_split.py)."""
        layer = self.info.get("layer")
        return None if layer is None else int(layer)

    def p_write(self, hidden: torch.Tensor) -> torch.Tensor:
        """p(WRITE) for hidden states (..., hidden), on the head's device (a GPU's hidden state comes to it: the
        decision is read on the host anyway)."""
        logits = hidden.to(self.weight.device).float() @ self.weight.float().T + self.bias.float()
        return torch.softmax(logits, dim=-1)[..., 1]

    def save(self, folder: str | Path) -> Path:
        from safetensors.torch import save_file

        path = Path(folder) / HEAD_FILE
        save_file({"weight": self.weight.contiguous().float(), "bias": self.bias.contiguous().float()}, str(path),
                  metadata={"info": json.dumps(self.info)})
        return path

    @classmethod
    def load(cls, folder: str | Path) -> "PolicyHead":
        from safetensors import safe_open

        path = Path(folder) / HEAD_FILE if Path(folder).is_dir() else Path(folder)
        if not path.is_file():
            raise SimulmtError(f"no policy head at {path}: train one with `simulmt finetune --recipe policy-head`")
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            return cls(f.get_tensor("weight"), f.get_tensor("bias"), json.loads(meta.get("info", "{}")))


@dataclass(frozen=True, eq=False)
class Learned:
    """Write when the policy head's p(WRITE) after the last unit read reaches ``tau``."""

    tau: float = 0.5
    head: PolicyHead | None = None  # None only to describe a policy (the evaluation grid); deciding needs one
    per_arrival: bool = False  # decide on the last unit of each arrival only (see the module docstring)
    name: ClassVar[str] = "learned"
    lets_model_end_segment: ClassVar[bool] = True
    wants_features: ClassVar[bool] = True

    def __post_init__(self):
        if not 0.0 <= self.tau <= 1.0:
            raise SimulmtError(f"the learned policy's threshold tau must be within 0..1, got {self.tau}")

    def consults_head(self, state: StreamState) -> bool:
        """Will ``decide`` look at the hidden state? (The stream then feeds what was read before asking.)"""
        return not (state.source_finished or state.model_ended_segment or state.segment_words > 0
                    or state.source_read == 0 or (self.per_arrival and state.source_waiting > 0))

    def decide(self, state: StreamState) -> Action:
        if state.source_finished:
            return Action.WRITE
        if state.model_ended_segment:  # the model ended its chunk (or a bound did): read on
            return Action.READ
        if state.segment_words > 0:  # a chunk the model has not ended: it goes on writing
            return Action.WRITE
        if state.source_read == 0 or (self.per_arrival and state.source_waiting > 0):
            return Action.READ
        if self.head is None:
            raise SimulmtError(NO_HEAD)
        if state.score is not None:  # the engine's, for every row of the forward at once (head_scores.py)
            return Action.WRITE if state.score >= self.tau else Action.READ
        if state.features is None:
            raise SimulmtError("the learned policy was asked to decide without the model's hidden state")
        return Action.WRITE if float(self.head.p_write(state.features)) >= self.tau else Action.READ

    def describe(self) -> str:
        return f"learned-{self.tau:g}"
