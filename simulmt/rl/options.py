"""``simulmt rl`` options: one typed dataclass, the Python API's config and the CLI's flags (imports nothing heavy).

Defaults follow SeqPO-SiMT (Xu et al.): group size B = 5, lambda = 2, beta = 0.02 (their En->Zh value), the
quality and latency of eq. 2 (COMET and AL in the paper; chrF here by default because COMET checkpoints are not
installed offline), LoRA on top of the warm-up adapter, which is merged into the weights and is the reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulmt.errors import SimulmtError
from simulmt.option_fields import device_field, language_field, model_field
from simulmt.core.prompt_format import language_name
from simulmt.rl.reward import LATENCY_METRICS, QUALITY_METRICS, TRUNCATIONS


@dataclass(frozen=True)
class RLOptions:
    # ---- data ----
    train_source: str | None = field(default=None, metadata={
        "help": "source sentences, one a line (required)", "metavar": "FILE"})
    train_target: str | None = field(default=None, metadata={
        "help": "reference translations, aligned with --train-source (required)", "metavar": "FILE"})
    limit: int | None = field(default=None, metadata={"help": "use only the first N pairs", "metavar": "N"})
    source_lang: str = language_field("en", "source")
    target_lang: str = language_field("de", "target")
    # ---- model ----
    model: str | None = model_field()
    init_adapter: str | None = field(default=None, metadata={
        "help": "the warm-up adapter (e.g. a `finetune --recipe conversation --n M` run's adapter), merged into the "
                "weights: the policy starts there and it is the KL reference", "metavar": "ADAPTER"})
    device: str | None = device_field()
    lora_rank: int = field(default=8, metadata={"help": "rank of the LoRA adapter trained on top"})
    lora_alpha: float = field(default=16.0, metadata={"help": "its alpha"})
    # ---- the process and the reward ----
    chunk: int = field(default=3, metadata={"help": "m: source words per step (chunk)"})
    group: int = field(default=5, metadata={"help": "B: trajectories sampled per sentence"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature of the rollouts"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus of the rollouts"})
    lam: float = field(default=2.0, metadata={"help": "lambda: weight of quality against latency in the reward"})
    beta: float = field(default=0.02, metadata={"help": "weight of the KL penalty to the reference"})
    quality: str = field(default="chrf", metadata={"help": "quality scorer", "choices": QUALITY_METRICS})
    latency: str = field(default="AL", metadata={"help": "latency scorer (source words)", "choices": LATENCY_METRICS})
    truncation: str = field(default="paper", metadata={
        "help": "latency truncation: paper = max(m, normalised L) as eq. 2 writes it; raw = normalise(max(m, L))",
        "choices": TRUNCATIONS})
    # ---- optimisation ----
    sentences: int = field(default=4, metadata={"help": "sentences per step (x group = trajectories per step)"})
    steps: int = field(default=100, metadata={"help": "optimizer steps"})
    lr: float = field(default=1e-5, metadata={"help": "AdamW learning rate"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping norm"})
    micro_batch: int = field(default=8, metadata={"help": "trajectories per training forward (memory bound)"})
    rollout_batch: int = field(default=16, metadata={"help": "streams sampled together by the engine"})
    seed: int = field(default=0, metadata={"help": "seed of the sentence order, the samples and the LoRA init"})
    # ---- run ----
    output: str = field(default="simulmt-rl", metadata={
        "help": "run directory: adapter/, log.jsonl, curves.png, checkpoint/", "metavar": "DIR"})
    resume: bool = field(default=False, metadata={"help": "continue the run in --output from its checkpoint"})
    save_steps: int = field(default=10, metadata={"help": "checkpoint every N steps"})
    max_minutes: float | None = field(default=None, metadata={
        "help": "stop after this many minutes (checkpoint saved; --resume continues)"})

    def __post_init__(self):
        if not self.train_source or not self.train_target:
            raise SimulmtError("--train-source and --train-target are required")
        language_name(self.source_lang)
        language_name(self.target_lang)
        for name in ("lora_rank", "chunk", "group", "sentences", "steps", "micro_batch", "rollout_batch",
                     "save_steps"):
            if getattr(self, name) < 1:
                raise SimulmtError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.group < 2:
            raise SimulmtError("--group must be at least 2: GRPO compares the samples of a sentence with each other")
        if self.limit is not None and self.limit < 1:
            raise SimulmtError(f"--limit must be at least 1, got {self.limit}")
        if self.temperature <= 0 or not 0 < self.top_p <= 1:
            raise SimulmtError("--temperature must be > 0 and --top-p in (0, 1]")
        if self.lr <= 0 or self.beta < 0 or self.max_grad_norm <= 0:
            raise SimulmtError("--lr > 0, --beta >= 0 and --max-grad-norm > 0")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise SimulmtError(f"--max-minutes must be positive, got {self.max_minutes}")
