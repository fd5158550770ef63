"""``simulmt finetune`` options: one typed dataclass, which is both the Python API's config and the CLI's flags.

Defaults follow the ExPosST paper's appendix A: LoRA rank 32, alpha 16, AdamW, learning rate 2e-4, weight decay
0.1, inverse-sqrt schedule with 500 warmup steps (capped here at a tenth of the run), max gradient norm 1, max
sequence length 512, batch 64 (8 x 8 gradient accumulation), 2 epochs. This module imports nothing heavy: the
trainer (transformers, peft) is imported when the command runs.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, fields

from simulmt.errors import SimulmtError
from simulmt.finetune.recipes import DEFAULT_POLICY, RECIPES
from simulmt.option_fields import language_field, model_field
from simulmt.core.prompt_format import language_name

_DATA_SOURCES = ("train_source", "train_tsv", "train_jsonl", "train_dataset")


@dataclass(frozen=True)
class FinetuneOptions:
    # ---- data ----
    train_source: str | None = field(default=None, metadata={
        "help": "training source text, one sentence a line (with --train-target)", "metavar": "FILE"})
    train_target: str | None = field(default=None, metadata={
        "help": "training target text, aligned with --train-source", "metavar": "FILE"})
    train_tsv: str | None = field(default=None, metadata={
        "help": "training pairs as 'source<TAB>target' lines", "metavar": "FILE"})
    train_jsonl: str | None = field(default=None, metadata={
        "help": "training pairs as JSON lines with --source-field/--target-field (or a 'translation' object)",
        "metavar": "FILE"})
    train_dataset: str | None = field(default=None, metadata={
        "help": "Hugging Face dataset id (owner/name[:config]); needs the datasets package and hub access",
        "metavar": "ID"})
    dataset_split: str = field(default="train", metadata={"help": "split of --train-dataset"})
    source_field: str = field(default="source", metadata={"help": "JSONL / dataset field of the source"})
    target_field: str = field(default="target", metadata={"help": "JSONL / dataset field of the target"})
    dev_source: str | None = field(default=None, metadata={
        "help": "dev source text for the evaluation at the end (with --dev-reference)", "metavar": "FILE"})
    dev_reference: str | None = field(default=None, metadata={
        "help": "dev reference translations, aligned with --dev-source", "metavar": "FILE"})
    limit: int | None = field(default=None, metadata={"help": "use only the first N training pairs", "metavar": "N"})
    context_pairs: int = field(default=0, metadata={
        "help": "train with context: each pair's prompt holds up to N pairs before it in its document, by the "
                "rule a talk streams with (simulmt.core.talk; serve with evaluate --docids / --context-pairs N). "
                "The pairs are taken in file order: one document, unless --train-docids", "metavar": "N"})
    context_tokens: int = field(default=384, metadata={
        "help": "with --context-pairs: at most this many context tokens", "metavar": "N"})
    train_docids: str | None = field(default=None, metadata={
        "help": "with --train-source: each line's document (talk, article), line-aligned; context never crosses "
                "from one document to the next", "metavar": "FILE"})
    train_context_target: str | None = field(default=None, metadata={
        "help": "with --context-pairs and --train-source: the target side the context pairs show, line-aligned with "
                "--train-target (e.g. the model's own translations of the training source, as a talk's context "
                "holds at inference); the labels stay --train-target's. Default: --train-target itself",
        "metavar": "FILE"})
    source_lang: str = language_field("en", "source")
    target_lang: str = language_field("de", "target")
    # ---- model and recipe ----
    model: str | None = model_field()
    recipe: str = field(default="expost", metadata={
        "help": "how training sequences are laid out: " + "; ".join(f"{k}: {v}" for k, v in RECIPES.items()),
        "choices": tuple(RECIPES)})
    policy: str | None = field(default=None, metadata={
        "help": "training schedule (default: read-n for conversation, offline for offline, else wait-k); mixed: "
                "wait-k (--k / --k-mix) or read-n (--n / --n-mix) drawn per pair",
        "choices": ("wait-k", "read-n", "mixed", "offline")})
    k: int = field(default=3, metadata={"help": "wait-k: g(j) = min(k + j - 1, |X|)"})
    k_mix: str | None = field(default=None, metadata={
        "help": "wait-k with one k drawn per sentence pair from this list, e.g. 1,3,5,7,9 (one model for all k)",
        "metavar": "K,K,..."})
    n: int = field(default=3, metadata={"help": "read-n: source words per chunk"})
    n_mix: str | None = field(default=None, metadata={
        "help": "read-n with one n drawn per sentence pair from this list, e.g. 1,2,3,4 (chunks of every size: what "
                "a learned policy needs the interleaved model to write)", "metavar": "N,N,..."})
    head_labels: str = field(default="schedule", metadata={
        "help": "policy-head: where READ/WRITE labels come from: schedule (--policy's chunks) or oracle (write a "
                "word once the model gets it right from the source read so far; simulmt/finetune/oracle.py)",
        "choices": ("schedule", "oracle")})
    head_layer: int | None = field(default=None, metadata={
        "help": "policy-head: read the output of this decoder layer (0-based) instead of the last hidden state; "
                "a READ then stops its forward at that layer (about layer/layers of its cost; "
                "simulmt/core/layer_split.py)", "metavar": "LAYER"})
    slot: int = field(default=16, metadata={"help": "expost: slot length in tokens"})
    phi: int = field(default=256, metadata={"help": "gpe: first position id of the target group"})
    # ---- adapter ----
    lora_rank: int = field(default=32, metadata={"help": "LoRA rank"})
    lora_alpha: float = field(default=16.0, metadata={"help": "LoRA alpha"})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout"})
    lora_targets: str = field(default="all-linear", metadata={
        "help": "modules that get LoRA: all-linear, or comma-separated names (q_proj,v_proj,...)"})
    full: bool = field(default=False, metadata={"help": "fine-tune every weight instead of a LoRA adapter"})
    init_adapter: str | None = field(default=None, metadata={
        "help": "continue training this LoRA adapter (a shipped adapter's name or a PEFT directory) instead of a "
                "fresh one; its rank, alpha, dropout and target modules are the adapter's own (--lora-* are "
                "ignored; training.json records the adapter's)", "metavar": "ADAPTER"})
    # ---- optimisation ----
    lr: float | None = field(default=None, metadata={
        "help": "peak learning rate (default: 2e-4 with LoRA, as in the paper; 1e-5 with --full)"})
    marker_lr: float = field(default=5e-3, metadata={
        "help": "interleaved: learning rate of the added marker tokens' rows (they start near zero and must "
                "grow to the scale of real rows; the LoRA's rate leaves <|end-of-write|> unlikely)"})
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW weight decay"})
    warmup_steps: int | None = field(default=None, metadata={
        "help": "linear warmup before the inverse-sqrt decay (default: the paper's 500, at most a tenth of the run)"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping norm"})
    max_length: int = field(default=512, metadata={
        "help": "longest training sequence in tokens; longer examples are dropped (and counted)"})
    batch_size: int = field(default=8, metadata={"help": "sequences per device and micro-batch"})
    grad_accum: int = field(default=8, metadata={"help": "micro-batches per optimizer step"})
    max_steps: int | None = field(default=None, metadata={"help": "optimizer steps (overrides --epochs)"})
    epochs: float = field(default=2.0, metadata={"help": "passes over the training examples"})
    max_minutes: float | None = field(default=None, metadata={
        "help": "stop after this many minutes of training (checkpoint and adapter saved; --resume continues); "
                "with several processes, process 0's clock decides for all"})
    sampling: str = field(default="group_by_length", metadata={
        "help": "batch order: group_by_length (less padding) or random", "choices": ("group_by_length", "random")})
    bf16: bool = field(default=False, metadata={
        "help": "bfloat16 mixed precision (autocast; as in the paper): GPUs, and CPUs with AVX512-BF16 or AMX"})
    activation_checkpointing: str = field(default="auto", metadata={
        "help": "recompute activations in the backward pass to save memory (slower): auto turns it on only when "
                "the estimated activations of a batch would not fit the GPU's free memory (never on a CPU), and "
                "says what it chose", "choices": ("auto", "on", "off")})
    deepspeed: str | None = field(default=None, metadata={
        "help": "DeepSpeed config JSON, passed to the Hugging Face Trainer (shipped: simulmt/finetune/configs/)",
        "metavar": "FILE"})
    num_processes: int = field(default=1, metadata={
        "help": "data-parallel processes on this machine (started with torchrun: gloo on a CPU, NCCL on GPUs); "
                "--batch-size is per process, so the global batch is batch x accumulation x processes", "metavar": "N"})
    # ---- run ----
    output: str = field(default="simulmt-finetune", metadata={
        "help": "run directory: checkpoints, adapter/ (or model/ with --full), training.json, eval.json",
        "metavar": "DIR"})
    resume: bool = field(default=False, metadata={"help": "continue the run in --output from its last checkpoint"})
    save_steps: int = field(default=200, metadata={"help": "checkpoint every N optimizer steps"})
    save_total_limit: int = field(default=2, metadata={"help": "checkpoints kept"})
    logging_steps: int = field(default=10, metadata={"help": "loss logged every N steps"})
    seed: int = field(default=0, metadata={"help": "seed of the data order, k-mix draws, LoRA init and dropout"})
    eval_lines: int = field(default=100, metadata={
        "help": "dev sentences translated by the streaming engine at the end (0: no evaluation)"})
    eval_k: int | None = field(default=None, metadata={
        "help": "wait-k used at the end's evaluation (default: --k, or the middle k of --k-mix)"})
    dry_run: bool = field(default=False, metadata={
        "help": "lay out the training data, print its statistics (examples, average length) and stop"})

    def __post_init__(self):
        given = [name for name in _DATA_SOURCES if getattr(self, name)]
        if len(given) != 1:
            raise SimulmtError("give exactly one training source: --train-source/--train-target, --train-tsv, "
                               "--train-jsonl or --train-dataset" + (f" (got {', '.join(given)})" if given else ""))
        if bool(self.train_source) != bool(self.train_target):
            raise SimulmtError("--train-source and --train-target go together")
        if bool(self.dev_source) != bool(self.dev_reference):
            raise SimulmtError("--dev-source and --dev-reference go together")
        language_name(self.source_lang)
        language_name(self.target_lang)
        if self.recipe not in RECIPES:
            raise SimulmtError(f"unknown recipe {self.recipe!r}; choose one of: {', '.join(RECIPES)}")
        policy = self.training_policy
        if self.recipe == "offline" and policy != "offline":
            raise SimulmtError("--recipe offline trains on full sentences: it takes no --policy")
        if self.recipe != "offline" and policy == "offline":
            raise SimulmtError(f"--recipe {self.recipe} needs --policy wait-k or read-n; for full-sentence training "
                               f"use --recipe offline")
        if self.k_mix is not None and policy not in ("wait-k", "mixed"):
            raise SimulmtError("--k-mix is a wait-k schedule: use it with --policy wait-k (or mixed)")
        if self.n_mix is not None and policy not in ("read-n", "mixed"):
            raise SimulmtError("--n-mix is a read-n schedule: use it with --policy read-n (or mixed)")
        self.ks  # parses --k-mix
        self.ns  # parses --n-mix
        for name in ("k", "n", "slot", "phi", "lora_rank", "batch_size", "grad_accum", "save_steps",
                     "save_total_limit", "logging_steps"):
            if getattr(self, name) < 1:
                raise SimulmtError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        for name in ("limit", "max_steps", "eval_k"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise SimulmtError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.context_pairs < 0 or self.context_tokens < 0:
            raise SimulmtError("--context-pairs and --context-tokens must be at least 0")
        if self.train_docids and not self.train_source:
            raise SimulmtError("--train-docids goes with --train-source/--train-target (line-aligned files)")
        if self.train_context_target and not (self.train_source and self.context_pairs):
            raise SimulmtError("--train-context-target goes with --train-source/--train-target and --context-pairs N "
                               "(it is the target side of the context pairs)")
        if self.max_length < 16:
            raise SimulmtError(f"--max-length must be at least 16, got {self.max_length}")
        if self.lr is not None and self.lr <= 0:
            raise SimulmtError(f"--lr must be positive, got {self.lr}")
        if self.marker_lr <= 0:
            raise SimulmtError(f"--marker-lr must be positive, got {self.marker_lr}")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise SimulmtError(f"--max-minutes must be positive, got {self.max_minutes}")
        if self.epochs <= 0:
            raise SimulmtError(f"--epochs must be positive, got {self.epochs}")
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise SimulmtError(f"--warmup-steps must be 0 or more, got {self.warmup_steps}")
        if self.weight_decay < 0 or not 0 <= self.lora_dropout < 1 or self.lora_alpha <= 0 or self.max_grad_norm <= 0:
            raise SimulmtError("--weight-decay >= 0, 0 <= --lora-dropout < 1, --lora-alpha > 0 and --max-grad-norm > 0")
        if self.init_adapter is not None and self.full:
            raise SimulmtError("--init-adapter continues a LoRA adapter: it does not go with --full")
        if self.num_processes < 1:
            raise SimulmtError(f"--num-processes must be at least 1, got {self.num_processes}")
        if self.eval_lines < 0:
            raise SimulmtError(f"--eval-lines must be 0 or more, got {self.eval_lines}")

    @property
    def training_policy(self) -> str:
        return self.policy or DEFAULT_POLICY.get(self.recipe, "wait-k")

    @property
    def ks(self) -> tuple[int, ...]:
        return (self.k,) if self.k_mix is None else _mix(self.k_mix, "--k-mix", "k", "1,3,5,7,9")

    @property
    def ns(self) -> tuple[int, ...]:
        return () if self.n_mix is None else _mix(self.n_mix, "--n-mix", "n", "1,2,3,4")

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else (1e-5 if self.full else 2e-4)

    def command_line(self) -> str:
        """The ``simulmt finetune`` command that reproduces these options (defaults left out)."""
        parts = ["simulmt", "finetune"]
        for f in fields(self):
            value = getattr(self, f.name)
            if value == f.default:
                continue
            flag = "--" + f.name.replace("_", "-")
            if isinstance(value, bool):
                parts.append(flag)
            else:
                parts += [flag, str(value)]
        return shlex.join(parts)


def _mix(text: str, flag: str, name: str, example: str) -> tuple[int, ...]:
    """``"5,1,3"`` -> ``(1, 3, 5)``: the values of a schedule mix, each at least 1, or a clear error."""
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise SimulmtError(f"{flag} takes comma-separated integers, e.g. {example}; got {text!r}") from None
    if not values or min(values) < 1:
        raise SimulmtError(f"{flag} needs {name} values of at least 1, got {text!r}")
    return tuple(sorted(set(values)))


# Options that must not change when a run is resumed (they change the data, the model or the batches).
_RESUME_KEYS = ("train_source", "train_target", "train_tsv", "train_jsonl", "train_dataset", "dataset_split",
                "source_field", "target_field", "limit", "source_lang", "target_lang", "model", "recipe", "policy",
                "k", "k_mix", "n", "n_mix", "slot", "phi", "init_adapter", "lora_rank", "lora_alpha", "lora_dropout",
                "lora_targets", "full", "max_length", "batch_size", "grad_accum", "sampling", "seed", "context_pairs",
                "context_tokens", "train_docids", "train_context_target")


def resume_conflicts(saved: dict, options: FinetuneOptions) -> list[str]:
    """The options of a resumed run that differ from the interrupted run's (``run.json``)."""
    return [f"--{k.replace('_', '-')}: was {saved.get(k)!r}, now {getattr(options, k)!r}"
            for k in _RESUME_KEYS if saved.get(k) != getattr(options, k)]
