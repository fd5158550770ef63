"""A cheap first alignment of the speech adapter: CTC against the LLM's own token embeddings.

The align stage teaches the adapter to speak to the LLM through the whole frozen LLM (about 5 s a step for
gemma-3-270m on 2 CPU cores). Before it, the adapter can learn *which tokens* a stretch of audio holds much more
cheaply: each adapter embedding is scored against the LLM's input-embedding rows (as the LLM sees them: Gemma's are
scaled) of the transcript's vocabulary, plus one learned blank, and CTC aligns those scores with the transcript's
tokens. No LLM forward runs, so a step costs about a tenth of an align step, and the adapter's outputs should move
next to the embeddings of the words spoken, which is where the align stage wants them.

A tied scorer is thrown away after the stage: only the adapter is kept (``SpeechAdapter.save``; the blank and the
score scale live in the stage's checkpoint). A free head is kept with the model (``CTCScorer.save``), which then
reads the words the head spells (simulmt.speech.spelled_words). Training sees the blocks streaming emits, each mapped
alone, as every speech stage does.

Scoring against the LLM's fixed rows (``head="tied"``) turned out to be what stops the stage: on 2,000 spoken
captions its best path's held-out token error rate stays at 0.78 after 400 steps, while the same adapter with a free
linear layer over the same vocabulary (``head="free"``, learned from scratch) reaches 0.39
(docs/speech-diagnosis.md). The free head leaves the adapter's output space arbitrary (align then has to map it into
the LLM's), but its convolutions have learned to pick the tokens out of the audio. Neither start made 200 align
steps teach the frozen LLM to read the audio; the free head's best path, read by the LLM as text, translates far
better than any aligned adapter (same page; docs/speech-cascade.md).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from torch import nn

from simulmt.errors import SimulmtError
from simulmt.speech.edit_distance import edit_distance

HEAD_WEIGHTS, HEAD_CONFIG = "ctc_head.safetensors", "ctc_head.json"
CTC_HEADS = ("tied", "free")  # the ctc stage's scorers (CTCScorer)


def collapse(classes: list[int], previous: int = 0) -> tuple[list[int], int]:
    """CTC's best-path rule on a run of frame classes (0 is the blank): the classes that start a run and are not
    blank. ``previous`` is the class of the frame before the first (0 at the start of an utterance), so a run that
    crosses two calls is counted once; returns (the classes spelled, the class of the last frame)."""
    out = []
    for c in classes:
        if c != previous and c != 0:
            out.append(c)
        previous = c
    return out, previous


class CTCScorer(nn.Module):
    """Scores of adapter embeddings over a fixed vocabulary; class 0 is the blank. ``head="tied"``: against the
    vocabulary's LLM embedding rows (a learned blank row and scale); ``"free"``: a linear layer of its own (the rows
    then only give the size)."""

    def __init__(self, vocab: list[int], rows: torch.Tensor, head: str = "tied"):
        super().__init__()
        if len(vocab) != rows.shape[0]:
            raise ValueError(f"{len(vocab)} token ids but {rows.shape[0]} embedding rows")
        if head not in CTC_HEADS:
            raise ValueError(f"unknown CTC head {head!r}; choose one of: {', '.join(CTC_HEADS)}")
        self.vocab = list(vocab)
        self.index = {token: n + 1 for n, token in enumerate(self.vocab)}
        dim = rows.shape[1]
        self.free = nn.Linear(dim, 1 + len(vocab)) if head == "free" else None
        if self.free is None:
            self.register_buffer("rows", rows.detach().float().clone())
            self.blank = nn.Parameter(torch.zeros(dim))
            self.scale = nn.Parameter(torch.tensor(1.0 / math.sqrt(dim)))  # a dot product of two unit-RMS rows is ~dim

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        """(frames, dim) adapter embeddings -> (frames, 1 + vocabulary) log-probabilities."""
        if self.free is not None:
            return self.free(embeddings.float()).log_softmax(-1)
        classes = torch.cat([self.blank[None], self.rows])
        return (self.scale * (embeddings.float() @ classes.T)).log_softmax(-1)

    def targets(self, ids: list[int]) -> torch.Tensor:
        """A transcript's token ids as class indices; a token outside the vocabulary is dropped."""
        return torch.tensor([self.index[i] for i in ids if i in self.index], dtype=torch.long)

    def loss(self, embeddings: torch.Tensor, ids: list[int]) -> torch.Tensor:
        """The CTC loss of one utterance (summed over its tokens' alignment; 0 when it cannot align)."""
        log_probs = self(embeddings)
        target = self.targets(ids)
        return nn.functional.ctc_loss(log_probs[:, None], target[None], torch.tensor([log_probs.shape[0]]),
                                      torch.tensor([len(target)]), blank=0, reduction="sum", zero_infinity=True)

    def greedy(self, embeddings: torch.Tensor) -> list[int]:
        """Best path, repeats merged and blanks removed: the token ids the adapter's embeddings spell."""
        spelled, _ = collapse(self(embeddings).argmax(-1).tolist())
        return [self.vocab[c - 1] for c in spelled]

    @property
    def head(self) -> str:
        return "tied" if self.free is None else "free"

    def save(self, folder: str | Path) -> None:
        """``ctc_head.safetensors`` (the weights) and ``ctc_head.json`` (the head's kind, the vocabulary's token
        ids in class order, the embedding size) in ``folder``."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().contiguous() for k, v in self.state_dict().items()}, str(folder / HEAD_WEIGHTS))
        dim = (self.free.in_features if self.free is not None else self.rows.shape[1])
        (folder / HEAD_CONFIG).write_text(json.dumps({"head": self.head, "dim": dim, "vocab": self.vocab}) + "\n")

    @classmethod
    def load(cls, folder: str | Path) -> "CTCScorer":
        from safetensors.torch import load_file

        folder = Path(folder)
        if not (folder / HEAD_CONFIG).is_file() or not (folder / HEAD_WEIGHTS).is_file():
            raise SimulmtError(f"no CTC head in {folder} (expected {HEAD_CONFIG} and {HEAD_WEIGHTS}): a speech-ctc "
                               f"stage with --ctc-head free saves one")
        config = json.loads((folder / HEAD_CONFIG).read_text())
        scorer = cls(config["vocab"], torch.zeros(len(config["vocab"]), config["dim"]), config["head"])
        scorer.load_state_dict(load_file(str(folder / HEAD_WEIGHTS)))
        return scorer.eval()


def token_error_rate(references: list[list[int]], hypotheses: list[list[int]]) -> float:
    """Edits (substitutions, deletions, insertions) to turn each hypothesis into its reference, over the
    references' tokens, for a corpus: 0.0 is a perfect transcript; above 1.0 is possible (many insertions)."""
    edits = total = 0
    for ref, hyp in zip(references, hypotheses, strict=True):
        edits += edit_distance(ref, hyp)
        total += len(ref)
    return edits / total if total else 0.0
