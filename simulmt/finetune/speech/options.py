"""``simulmt finetune-speech`` options: one typed dataclass, the Python API's config and the CLI's flags (the
training itself is ``simulmt.finetune.speech.train``; this module imports nothing heavy)."""

from __future__ import annotations

from dataclasses import dataclass, field

from simulmt.errors import SimulmtError
from simulmt.option_fields import language_field
from simulmt.speech.ctc import CTC_HEADS

STAGES = ("ctc", "align", "simul", "policy")


@dataclass(frozen=True)
class SpeechTrainOptions:
    corpus: str = field(default="", metadata={
        "help": "manifest.jsonl of a speech corpus (python -m simulmt.finetune.speech.synth corpus ...); required",
        "metavar": "FILE"})
    stage: str = field(default="align", metadata={
        "help": "ctc (optional, cheap: the adapter against the LLM's token embeddings, no LLM forward) | align | "
                "simul | policy", "choices": STAGES})
    model: str = field(default="gemma-3-270m", metadata={"help": "the LLM"})
    adapter: str | None = field(default=None, metadata={
        "help": "the LLM's LoRA adapter, trained with --recipe interleaved (it carries the marker tokens)",
        "metavar": "DIR"})
    encoder: str = field(default="tiny.en", metadata={"help": "speech encoder: tiny.en, base, or a CTranslate2 folder"})
    speech_adapter: str | None = field(default=None, metadata={
        "help": "start from this speech model folder's adapter (align: the ctc stage's output, if it ran; simul and "
                "policy: the align stage's)",
        "metavar": "DIR"})
    output: str = field(default="simulmt-speech", metadata={"help": "run directory", "metavar": "DIR"})
    block_ms: int = field(default=640, metadata={"help": "audio per source unit (a multiple of 40 ms)"})
    left_context_ms: int = field(default=5120, metadata={
        "help": "earlier audio encoded again with each block (docs/speech-streaming.md)"})
    align_target: str = field(default="transcript", metadata={
        "help": "align: what the model writes after the speech", "choices": ("transcript", "translation")})
    n_mix: str = field(default="1,2,3,4", metadata={"help": "simul/policy: read-n chunk sizes in words, one drawn "
                                                            "per utterance", "metavar": "N,N,..."})
    k_mix: str | None = field(default=None, metadata={
        "help": "simul/policy: half the utterances take wait-k word schedules (k drawn from this list) instead of "
                "read-n, as `finetune --policy mixed`: their long tails teach the model to write a backlog once the "
                "source ends", "metavar": "K,K,..."})
    head_labels: str = field(default="schedule", metadata={
        "help": "policy: READ/WRITE labels from the --n-mix chunks (schedule) or from the model itself (oracle: write "
                "a word after the first block from which the model predicts it right; simulmt/finetune/oracle.py)",
        "choices": ("schedule", "oracle")})
    head_layer: int | None = field(default=None, metadata={
        "help": "policy: the head reads this decoder layer's output (0-based) instead of the last hidden state; a "
                "READ then stops its forward there (simulmt/core/layer_split.py)", "metavar": "LAYER"})
    adapter_hidden: int = field(default=1024, metadata={"help": "channels of the speech adapter's convolutions"})
    encoder_layers: int = field(default=0, metadata={
        "help": "ctc, align, simul: also train the speech encoder's top N layers and its final norm, as EASiST trains "
                "its encoder (0: the encoder stays frozen); the state below them is cached per block window",
        "metavar": "N"})
    encoder_lr: float = field(default=1e-4, metadata={"help": "peak learning rate of the encoder's trained layers"})
    ctc_head: str = field(default="tied", metadata={
        "help": "ctc: score the adapter against the LLM's token embeddings (tied) or a linear layer of its own (free: "
                "learns far faster, docs/speech-diagnosis.md; the model then reads the words the head spells, "
                "docs/speech-cascade.md)", "choices": CTC_HEADS})
    steps: int = field(default=200, metadata={"help": "optimizer steps (align, simul)"})
    batch_size: int = field(default=8, metadata={"help": "utterances per step"})
    lr: float = field(default=1e-3, metadata={"help": "peak learning rate (warmup a tenth, then cosine)"})
    save_steps: int = field(default=50, metadata={"help": "checkpoint every N steps"})
    max_minutes: float | None = field(default=None, metadata={
        "help": "stop after this many minutes with a checkpoint (--resume continues)"})
    resume: bool = field(default=False, metadata={"help": "continue the run in --output from its checkpoint"})
    limit: int | None = field(default=None, metadata={"help": "use only the first N utterances", "metavar": "N"})
    held_out: int = field(default=0, metadata={
        "help": "ctc, align: the corpus's last N utterances are not trained on; the LLM's transcripts of them are "
                "scored (token error rate)",
        "metavar": "N"})
    seed: int = field(default=0, metadata={"help": "seed of the batches, the chunk draws and the adapter's init"})
    source_lang: str = language_field("en", "source")
    target_lang: str = language_field("de", "target")

    def __post_init__(self):
        if not self.corpus:
            raise SimulmtError("--corpus is required: a speech corpus manifest "
                               "(python -m simulmt.finetune.speech.synth corpus)")
        if self.stage not in STAGES:
            raise SimulmtError(f"unknown speech stage {self.stage!r}; choose one of: {', '.join(STAGES)}")
        if self.stage in ("simul", "policy") and self.speech_adapter is None:
            raise SimulmtError(f"--stage {self.stage} continues an aligned speech adapter: pass --speech-adapter DIR "
                               f"(the align stage's OUT/model)")
        self._check_blocks()
        self.schedule  # parses --n-mix and --k-mix
        if min(self.steps, self.batch_size, self.save_steps) < 1 or self.lr <= 0:
            raise SimulmtError("--steps, --batch-size and --save-steps must be at least 1, --lr positive")
        if self.encoder_layers < 0 or (self.encoder_layers and self.stage == "policy") or self.encoder_lr <= 0:
            raise SimulmtError(f"--encoder-layers N (at least 0) is for --stage ctc, align and simul, and "
                               f"--encoder-lr must be positive; got {self.encoder_layers} with --stage {self.stage} "
                               f"and {self.encoder_lr}")
        if self.ctc_head not in CTC_HEADS or (self.ctc_head != "tied" and self.stage != "ctc"):
            raise SimulmtError(f"--ctc-head {'|'.join(CTC_HEADS)} is for --stage ctc, got {self.ctc_head!r} with "
                               f"--stage {self.stage}")
        if self.held_out < 0 or (self.held_out and self.stage not in ("ctc", "align")):
            raise SimulmtError(f"--held-out N (at least 0) is for --stage ctc and align, got {self.held_out} with "
                               f"--stage {self.stage}")

    @property
    def ns(self) -> list[int]:
        return _positive_ints(self.n_mix, "--n-mix")

    @property
    def ks(self) -> list[int]:
        return [] if self.k_mix is None else _positive_ints(self.k_mix, "--k-mix")

    @property
    def schedule(self):
        """The word schedule of the simul and policy stages: read-n over --n-mix, mixed with wait-k over --k-mix."""
        from simulmt.finetune.schedules import Schedule

        if self.k_mix is None:
            return Schedule("read-n", ns=tuple(self.ns))
        return Schedule("mixed", ks=tuple(self.ks), ns=tuple(self.ns))

    def _check_blocks(self) -> None:
        if self.block_ms <= 0 or self.block_ms % 40 or self.left_context_ms < 0 or self.left_context_ms % 20:
            raise SimulmtError(f"--block-ms must be a positive multiple of 40 and --left-context-ms a multiple of 20 "
                               f"(at least 0), got {self.block_ms} and {self.left_context_ms}")


def _positive_ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SimulmtError(f"{flag} takes comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise SimulmtError(f"{flag} takes integers of at least 1, got {text!r}")
    return values
