"""EASiST's speech adapter: encoder frames of one block -> a few embeddings in the LLM's input space.

Two 1-D convolutions (kernel 5, stride 2, each followed by GELU) shorten a block of speech-encoder frames four times
(Whisper's 20 ms frames -> one embedding per 80 ms), then a linear layer projects them to the LLM's hidden size.
The convolutions run on each block alone (zero padding at its edges), so a block's embeddings never depend on later
audio: they are final when the block is emitted and enter the LLM's append-only cache as they are (placed source
tokens that carry embeddings, ``Stream.push_embedded``). Training and streaming call the same ``forward`` on the
same blocks (``simulmt.speech.streaming_encoder.encode_utterance`` gives streaming's blocks), so they agree.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from simulmt.errors import SimulmtError

ADAPTER_FILE, CONFIG_FILE = "speech_adapter.safetensors", "speech_adapter.json"


@dataclass(frozen=True)
class SpeechAdapterConfig:
    encoder_dim: int  # the speech encoder's output size (Whisper tiny 384, base 512)
    llm_dim: int  # the LLM's hidden size (embedding size)
    hidden: int = 1024  # channels of the two convolutions
    kernel: int = 5
    stride: int = 2


class SpeechAdapter(nn.Module):
    def __init__(self, config: SpeechAdapterConfig):
        super().__init__()
        self.config = config
        c = config
        self.conv1 = nn.Conv1d(c.encoder_dim, c.hidden, c.kernel, c.stride, padding=c.kernel // 2)
        self.conv2 = nn.Conv1d(c.hidden, c.hidden, c.kernel, c.stride, padding=c.kernel // 2)
        self.proj = nn.Linear(c.hidden, c.llm_dim)

    def output_frames(self, frames: int) -> int:
        """How many embeddings a block of ``frames`` encoder frames gives."""
        for _ in range(2):
            frames = (frames + 2 * (self.config.kernel // 2) - self.config.kernel) // self.config.stride + 1
        return frames

    def forward(self, block: torch.Tensor) -> torch.Tensor:
        """(frames, encoder_dim) or (batch, frames, encoder_dim) -> (.., output_frames(frames), llm_dim)."""
        single = block.dim() == 2
        x = block[None] if single else block
        if x.shape[-1] != self.config.encoder_dim:
            raise SimulmtError(f"the speech adapter takes {self.config.encoder_dim}-dim encoder frames, got "
                               f"{x.shape[-1]}")
        x = nn.functional.gelu(self.conv1(x.transpose(1, 2).to(self.proj.weight.dtype)))
        x = nn.functional.gelu(self.conv2(x))
        out = self.proj(x.transpose(1, 2))
        return out[0] if single else out

    def save(self, folder: str | Path) -> None:
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().contiguous() for k, v in self.state_dict().items()}, str(folder / ADAPTER_FILE))
        (folder / CONFIG_FILE).write_text(json.dumps(asdict(self.config), indent=2) + "\n")

    @classmethod
    def load(cls, folder: str | Path) -> "SpeechAdapter":
        from safetensors.torch import load_file

        folder = Path(folder)
        if not (folder / CONFIG_FILE).is_file() or not (folder / ADAPTER_FILE).is_file():
            raise SimulmtError(f"no speech adapter in {folder} (expected {CONFIG_FILE} and {ADAPTER_FILE}): train "
                               f"one with `simulmt finetune --recipe speech-align`")
        adapter = cls(SpeechAdapterConfig(**json.loads((folder / CONFIG_FILE).read_text())))
        adapter.load_state_dict(load_file(str(folder / ADAPTER_FILE)))
        return adapter.eval()
