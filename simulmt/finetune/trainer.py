"""Policy-consistent fine-tuning (ExPosST §2.3) on the Hugging Face ``Trainer``.

    pairs --recipe (layout + schedule, simulmt.core.examples)--> laid-out examples --collator--> padded batch
          --SimulTrainer.compute_loss--> loss on labelled tokens only --Trainer--> checkpoints, DIR/adapter
          --streaming engine on a dev subset--> BLEU, LAAL  (training.json, eval.json)

Because the loop is the stock ``Trainer``, data parallelism is the launcher's job (tested: 2 gloo processes train
exactly what 1 process trains with the same global batch, tests/test_distributed_finetune.py)::

    simulmt finetune ... --num-processes 2                        # torchrun underneath (CPU: gloo, GPUs: NCCL)
    torchrun --nproc_per_node 4 -m simulmt finetune ...           # the same, launched by hand
    accelerate launch --multi_gpu --num_processes 8 -m simulmt finetune ... --deepspeed zero2 --bf16  # or zero3
    accelerate launch --config_file "$(python -m simulmt.finetune.configs fsdp)" -m simulmt finetune ... --bf16

Logits only where there is a label: the model's forward gets ``logits_to_keep`` as a (B, T) boolean mask, so its
LM head projects only the N labelled rows, (N, V), instead of all B x T (Gemma 3's vocabulary has 262k entries;
about a third of the rows carry a label). This goes through the top-level forward, so PEFT, DDP and DeepSpeed
wrappers see a normal call.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import ProgressCallback, Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from simulmt import __version__
from simulmt.errors import SimulmtError
from simulmt.output_dir import check_output_dir
from simulmt.core.examples import IGNORE
from simulmt.core.talk import ContextWindow
from simulmt.finetune import data
from simulmt.finetune.collator import SimulCollator
from simulmt.finetune.configs import deepspeed_config
from simulmt.finetune.options import FinetuneOptions, resume_conflicts
from simulmt.finetune.recipes import Recipe
from simulmt.finetune.schedules import Schedule
from simulmt.core.alibi import adopt_alibi
from simulmt.core.fused_layers import is_fused
from simulmt.core.markers import MARKERS, add_interleaved_markers
from simulmt.core.runner import attention_spec


# ---- the loss --------------------------------------------------------------------------------------------------
def label_logits(model, batch: dict, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits at the labelled positions (N, V), their labels (N,)), rows in batch-major, time order; the batch is
    moved to the model's device (a collator builds it on the CPU; the Trainer has moved it already)."""
    device = next(model.parameters()).device
    labels = batch["labels"].to(device)
    keep = labels != IGNORE  # (B, T)
    mask = batch["attention_mask"]  # additive masks follow ``dtype`` when given (bf16 weights need a bf16 mask)
    mask = ({k: v.to(device=device, dtype=dtype) for k, v in mask.items()} if isinstance(mask, dict)
            else mask.to(device=device, dtype=dtype))
    out = model(input_ids=batch["input_ids"].to(device), position_ids=batch["position_ids"].to(device),
                attention_mask=mask,
                logits_to_keep=keep, use_cache=False)
    logits = out.logits
    if logits.dim() != 2 or logits.shape[0] != int(keep.sum()):
        raise SimulmtError(f"the model returned logits of shape {tuple(logits.shape)} for a boolean logits_to_keep "
                           f"with {int(keep.sum())} rows: this model class does not support logits at selected "
                           f"positions (transformers >= 5 models do, through slice_logits_to_keep)")
    return logits, labels[keep]


class SimulTrainer(Trainer):
    """``Trainer`` with the loss of laid-out examples: cross-entropy at labelled positions only, normalised by the
    number of labelled tokens of the whole optimizer step (``num_items_in_batch``), so gradient accumulation and
    data parallelism weigh every target token the same."""

    loss_is_scaled_for_ga = True

    def __init__(self, *args, marker_lr: float | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.marker_lr = marker_lr  # learning rate of added tokens' rows (peft's trainable_tokens), if any
        self.model_accepts_loss_kwargs = True  # makes the Trainer count labelled tokens per optimizer step
        self._loss_shifts_labels = False  # our labels are aligned with their predicting position: no shift
        self.run_tokens = 0  # real (non-pad) tokens trained on in this process run
        self.run_sequences = 0
        self.run_padded = 0  # tokens fed including padding

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        """A LoRA adapter is saved without the embedding matrix: peft's ``save_embedding_layers="auto"`` would save
        it whole when it thinks the vocabulary changed (335 MB for Gemma's 262k vocabulary), and to decide it asks
        the hub for the base model's config (a wait on a machine without network). An adapter that also trains a
        few added tokens (the interleaved markers) saves their rows' deltas: the base rows are deterministic
        (``simulmt.core.markers.grow_embeddings``)."""
        from peft import PeftModel

        if not isinstance(self.model, PeftModel):
            return super()._save(output_dir, state_dict)
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if self.args.should_save:
            self.model.save_pretrained(output_dir, state_dict=state_dict, save_embedding_layers=False)
            if self.processing_class is not None:
                self.processing_class.save_pretrained(output_dir)

    def create_optimizer(self, model=None):
        """The Trainer's optimizer, with added tokens' rows (the interleaved markers) in a group of their own at
        ``marker_lr`` and no weight decay: they start at the mean embedding, about zero, and must reach the scale of
        the real rows (norm ~1 for Gemma) within a short run, which the LoRA's learning rate does not allow (the
        end-of-write loss stays near 10 nats after 40 steps at 2e-4)."""
        fresh = self.optimizer is None
        optimizer = super().create_optimizer(model)
        if not fresh or self.marker_lr is None:
            return optimizer
        names = {id(p): n for n, p in (self.model if model is None else model).named_parameters()}
        markers = []
        for group in optimizer.param_groups:
            keep = [p for p in group["params"] if "trainable_tokens" not in names.get(id(p), "")]
            markers += [p for p in group["params"] if "trainable_tokens" in names.get(id(p), "")]
            group["params"] = keep
        if markers:
            optimizer.add_param_group({"params": markers, "lr": self.marker_lr, "weight_decay": 0.0})
        return optimizer

    def _get_train_sampler(self, train_dataset=None):
        """group_by_length over the GLOBAL batch (per device x accumulation x processes), so N processes of batch
        b/N see the very batches one process of batch b sees (the stock sampler groups per device: another order)."""
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if self.args.train_sampling_strategy != "group_by_length" or dataset is None:
            return super()._get_train_sampler(train_dataset)
        from transformers.trainer_pt_utils import LengthGroupedSampler

        size = self.args.train_batch_size * self.args.gradient_accumulation_steps * max(1, self.args.world_size)
        return LengthGroupedSampler(size, dataset=dataset, model_input_name="input_ids")

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        real = inputs.pop("real_tokens", None)
        dtype = next(p.dtype for p in model.parameters())
        logits, labels = label_logits(model, inputs, dtype)
        loss = F.cross_entropy(logits.float(), labels, reduction="sum")
        if num_items_in_batch is not None:
            loss = loss / num_items_in_batch
            if self.args.average_tokens_across_devices and self.accelerator.num_processes > 1:
                loss = loss * self.accelerator.num_processes  # DDP averages gradients over processes
        else:
            loss = loss / max(labels.numel(), 1)
            if model.training:
                loss = loss / self.current_gradient_accumulation_steps
        if model.training:
            n = int(real) if real is not None else int(inputs["input_ids"].numel())
            self.run_tokens += n
            self.run_sequences += inputs["input_ids"].shape[0]
            self.run_padded += inputs["input_ids"].numel()
            self.state.num_input_tokens_seen += n * max(1, self.args.world_size)
        return (loss, {"logits": logits}) if return_outputs else loss


class LossProgress(ProgressCallback):
    """A progress bar with loss, learning rate and tokens/s (``bar=False``: one printed line per log instead)."""

    def __init__(self, trainer: "SimulTrainer | None" = None, bar: bool = True):
        super().__init__()
        self.trainer, self.bar = trainer, bar
        self.started = time.perf_counter()

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()
        self.current_step = state.global_step
        if self.bar:
            super().on_train_begin(args, state, control, **kwargs)
            if self.training_bar is not None:
                self.training_bar.set_description("fine-tuning")
                self.training_bar.update(state.global_step)
            self.current_step = state.global_step

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar:
            super().on_step_end(args, state, control, **kwargs)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        post = {}
        if "loss" in logs:
            post["loss"] = f"{logs['loss']:.3f}"
        if "learning_rate" in logs:
            post["lr"] = f"{logs['learning_rate']:.2e}"
        if self.trainer is not None:
            post["tok/s"] = f"{self.trainer.run_tokens / max(time.perf_counter() - self.started, 1e-9):.0f}"
        if self.bar and self.training_bar is not None:
            if "loss" in logs:
                self.training_bar.set_postfix(post, refresh=True)
            if "train_loss" in logs:
                self.training_bar.write(f"train loss {logs['train_loss']:.4f} over {state.global_step} steps")
        elif "loss" in logs:
            _say(f"step {state.global_step}/{state.max_steps} " + " ".join(f"{k} {v}" for k, v in post.items()))

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar:
            super().on_train_end(args, state, control, **kwargs)


class TimeLimit(TrainerCallback):
    """Stop (and save a checkpoint) once ``minutes`` of training have passed. The inverse-sqrt schedule does not
    depend on the total number of steps, so a run cut by time is a complete run. With several processes, process
    0's clock decides and the decision is broadcast every step, so all stop after the same step (a process that
    stopped alone would leave the others waiting in their next all-reduce)."""

    def __init__(self, minutes: float):
        self.seconds, self.started, self.hit = minutes * 60.0, time.perf_counter(), False

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        stop = time.perf_counter() - self.started >= self.seconds
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            flag = torch.tensor([int(stop)], device=args.device)
            torch.distributed.broadcast(flag, src=0)
            stop = bool(flag.item())
        if stop:
            control.should_training_stop = control.should_save = self.hit = True


# ---- the run ---------------------------------------------------------------------------------------------------
def _say(message: str) -> None:
    print(f"simulmt finetune: {message}", file=sys.stderr, flush=True)


def load_pairs(options: FinetuneOptions, stats: data.PairStats) -> list[data.Pair]:
    o = options
    if o.train_source:
        return data.parallel_files(o.train_source, o.train_target, o.limit, stats=stats, docids=o.train_docids,
                                   context_target=o.train_context_target)
    if o.train_tsv:
        return data.tsv_file(o.train_tsv, o.limit, stats=stats)
    if o.train_jsonl:
        return data.jsonl_file(o.train_jsonl, o.source_field, o.target_field, o.source_lang, o.target_lang, o.limit,
                               stats=stats)
    return data.hub_dataset(o.train_dataset, o.dataset_split, o.source_field, o.target_field, o.source_lang,
                            o.target_lang, o.limit, stats=stats)


def make_recipe(options: FinetuneOptions) -> Recipe:
    return Recipe(options.recipe, Schedule(options.training_policy, options.ks, options.n, options.ns), options.slot, options.phi)


def _check_output(options: FinetuneOptions, out: Path) -> str | None:
    """The checkpoint to resume from (or None); refuses to write over another run."""
    last = get_last_checkpoint(str(out)) if out.is_dir() else None
    if options.resume:
        if last is None:
            raise SimulmtError(f"--resume: no checkpoint-* directory in {out} to continue from")
        saved_path = out / "run.json"
        if saved_path.is_file():
            saved = json.loads(saved_path.read_text())
            conflicts = resume_conflicts(saved["options"], options)
            processes = saved.get("world_size", 1)
            if processes != _world_size():
                conflicts.append(f"processes: the run was trained on {processes}, this one has {_world_size()} "
                                 f"(the global batch would change)")
            if conflicts:
                raise SimulmtError("--resume with options that change the run:\n  " + "\n  ".join(conflicts))
        return last
    if last is not None or (out / "adapter").exists() or (out / "model").exists():
        raise SimulmtError(f"{out} already holds a run (checkpoints or a saved adapter): pass --resume to continue "
                           f"it, or choose another --output")
    return None


def _world_size() -> int:
    """Processes of this run as the launcher (torchrun, accelerate) set them up."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def _wrap_model(model, options: FinetuneOptions, model_name: str, new_tokens: tuple[int, ...] = ()):
    """The model to train: every weight (--full), the --init-adapter, or a new LoRA adapter; ``new_tokens`` are
    added vocabulary rows (the interleaved markers) that a new LoRA adapter trains too."""
    if is_fused(model):
        raise SimulmtError("this model was fused for inference (Translator.load fuses its norms and MLPs): its "
                           "layers are not the ones an adapter or a checkpoint names; load it with "
                           "Translator.load(..., fuse=False) to train it")
    if options.full:
        for p in model.parameters():
            p.requires_grad_(True)
        return model
    from peft import LoraConfig, PeftModel, get_peft_model

    if options.init_adapter is not None:  # continued training: the adapter's weights and shape, trainable
        from simulmt.adapters import resolve_adapter

        resolved = resolve_adapter(options.init_adapter, model_name)
        if resolved is None:
            raise SimulmtError(f"--init-adapter {options.init_adapter!r} names no adapter")
        if not (resolved[1] / "adapter_config.json").is_file():
            raise SimulmtError(f"--init-adapter: not a PEFT adapter directory (no adapter_config.json): {resolved[1]}")
        if new_tokens:  # the markers were added just now: the adapter does not train them; continue it in a LoRA
            return _continue_with_new_tokens(model, resolved[1], new_tokens)  # of its shape that also does
        try:  # autocast_adapter_dtype: an adapter stored in bfloat16 trains in float32
            return PeftModel.from_pretrained(model, str(resolved[1]), is_trainable=True, autocast_adapter_dtype=True)
        except (ValueError, KeyError, RuntimeError) as exc:
            raise SimulmtError(f"--init-adapter {resolved[1]} could not be put on {model_name}: {exc}") from exc

    targets = options.lora_targets
    target_modules = targets if targets == "all-linear" else [t.strip() for t in targets.split(",") if t.strip()]
    config = LoraConfig(r=options.lora_rank, lora_alpha=options.lora_alpha, lora_dropout=options.lora_dropout,
                        target_modules=target_modules, task_type="CAUSAL_LM", bias="none",
                        trainable_token_indices=list(new_tokens) or None)
    try:
        return get_peft_model(model, config)
    except ValueError as exc:
        raise SimulmtError(f"LoRA could not be applied with --lora-targets {targets}: {exc}") from exc


def _init_adapter_markers(options: FinetuneOptions, model_name: str) -> tuple[str, ...]:
    """The interleaved markers the --init-adapter was trained with (none: it has none, or there is none). An
    adapter trained with two markers is continued with its two, so its saved marker rows fit."""
    from simulmt.adapters import resolve_adapter
    from simulmt.models import adapter_markers

    resolved = resolve_adapter(options.init_adapter, model_name) if options.init_adapter is not None else None
    return adapter_markers(resolved[1]) if resolved is not None else ()


def _continue_with_new_tokens(model, directory: Path, new_tokens: tuple[int, ...]):
    """A LoRA adapter trained without the interleaved markers (e.g. the shipped expost adapter), continued with
    them: a new LoRA of the same rank, alpha, dropout and targets whose ``trainable_token_indices`` are the new
    rows, with the old adapter's LoRA weights loaded into it (every one must fit; the marker deltas start at 0)."""
    from peft import LoraConfig, get_peft_model
    from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict
    from safetensors.torch import load_file

    old = json.loads((directory / "adapter_config.json").read_text())
    if old.get("peft_type") != "LORA":
        raise SimulmtError(f"--init-adapter {directory}: a {old.get('peft_type')} adapter; only LoRA can be continued "
                           "with the interleaved markers")
    weights = directory / "adapter_model.safetensors"
    if not weights.is_file():
        raise SimulmtError(f"--init-adapter {directory}: no adapter_model.safetensors")
    targets = old.get("target_modules")
    config = LoraConfig(r=old["r"], lora_alpha=old["lora_alpha"], lora_dropout=old.get("lora_dropout", 0.0),
                        target_modules=targets if isinstance(targets, str) else list(targets),
                        task_type="CAUSAL_LM", bias=old.get("bias", "none"),
                        trainable_token_indices=list(new_tokens))
    wrapped = get_peft_model(model, config)
    dtype = next(p for p in wrapped.parameters() if p.requires_grad).dtype
    state = {k: v for k, v in get_peft_model_state_dict(wrapped, save_embedding_layers=False).items()
             if "trainable_tokens" in k}  # the new marker deltas (zero), then the old adapter's weights
    state.update({k: v.to(dtype) for k, v in load_file(str(weights)).items()})
    result = set_peft_model_state_dict(wrapped, state)
    missing = [k for k in result.missing_keys if "lora_" in k]
    if result.unexpected_keys or missing:
        raise SimulmtError(f"--init-adapter {directory} does not fit a LoRA of its own config: "
                           f"{len(result.unexpected_keys)} unexpected (e.g. {result.unexpected_keys[:1]}), "
                           f"{len(missing)} missing LoRA weights (e.g. {missing[:1]})")
    return wrapped


def _adapter_card(model, options: FinetuneOptions) -> dict:
    """The LoRA actually trained: its own rank, alpha, dropout and targets (an --init-adapter brings its own)."""
    config = getattr(model, "peft_config", {}).get("default")
    if config is None:
        return {"lora_rank": options.lora_rank, "lora_alpha": options.lora_alpha,
                "lora_dropout": options.lora_dropout, "lora_targets": options.lora_targets, "init_adapter": None}
    targets = config.target_modules
    return {"lora_rank": config.r, "lora_alpha": config.lora_alpha, "lora_dropout": config.lora_dropout,
            "lora_targets": targets if isinstance(targets, str) else ",".join(sorted(targets)),
            "init_adapter": options.init_adapter}


def _warmup(options: FinetuneOptions, total_steps: int) -> int:
    if options.warmup_steps is not None:
        return options.warmup_steps
    return min(500, max(1, total_steps // 10))


def _total_steps(options: FinetuneOptions, examples: int, world_size: int = 1) -> int:
    if options.max_steps is not None:
        return options.max_steps
    per_epoch = math.ceil(examples / (options.batch_size * world_size)) / options.grad_accum
    return max(1, math.ceil(per_epoch * options.epochs))


def training_device() -> str:
    """Where this process trains: its GPU (``LOCAL_RANK`` under torchrun / accelerate), else the CPU."""
    if torch.cuda.is_available():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return "cpu"


def model_load_dtype(options: FinetuneOptions, device: str) -> torch.dtype:
    """The dtype the model's weights are loaded in. A LoRA run with ``--bf16`` on a GPU keeps its frozen weights in
    bfloat16: autocast computes in bfloat16 anyway, and float32 copies cost twice the memory and a cast of every
    weight at every use (the adapter's own weights stay float32: peft). A full fine-tune keeps float32 master
    weights (AdamW's small updates are lost in bfloat16 weights), and so does a CPU run (its autocast is opt-in)."""
    if options.bf16 and not options.full and device.startswith("cuda"):
        return torch.bfloat16
    return torch.float32


def activation_bytes(model, batch: int, length: int) -> int:
    """Estimated memory of the activations a training step keeps for its backward pass (Korthikanti et al. 2022,
    per layer s·b·h·(34 + 5·a·s/h) bytes in 16-bit, eager attention), plus the logits (float32 and their gradient)
    of every position: a bound for a batch of ``batch`` sequences of ``length`` tokens."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    h, a, layers = config.hidden_size, config.num_attention_heads, config.num_hidden_layers
    per_layer = length * batch * h * (34 + 5 * a * length / h)
    logits = 2 * 4 * batch * length * config.vocab_size
    return int(layers * per_layer + logits)


def choose_checkpointing(options: FinetuneOptions, model, longest: int, device: str) -> tuple[bool, str]:
    """(recompute activations?, why): ``--activation-checkpointing on/off`` as given; ``auto`` on only on a GPU
    where a batch of the longest examples would not leave its estimated activations room in free memory."""
    if options.activation_checkpointing != "auto":
        return options.activation_checkpointing == "on", f"--activation-checkpointing {options.activation_checkpointing}"
    if not device.startswith("cuda"):
        return False, "auto: off on a CPU (memory is not what limits it)"
    need = activation_bytes(model, options.batch_size, longest)
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    on_device = next(model.parameters()).device.type == "cuda"  # (else its weights still have to move there)
    weights = 0 if on_device else sum(p.numel() * p.element_size() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    room = free - weights - 16 * trainable  # weights, and float32 grads + AdamW moments + master copy of the trained
    on = need > 0.8 * room
    return on, (f"auto: {'on' if on else 'off'}, a batch of {options.batch_size} x {longest} tokens needs about "
                f"{need / 2**30:.1f} GiB of activations, {max(room, 0) / 2**30:.1f} GiB free")


def training_arguments(options: FinetuneOptions, out: Path, total_steps: int,
                       checkpointing: bool = False) -> TrainingArguments:
    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    recompute = ("activation_checkpointing" if "activation_checkpointing" in fields  # (transformers renamed it)
                 else "gradient_checkpointing")
    return TrainingArguments(
        **{recompute: checkpointing},
        output_dir=str(out),
        per_device_train_batch_size=options.batch_size,
        gradient_accumulation_steps=options.grad_accum,
        learning_rate=options.learning_rate,
        weight_decay=options.weight_decay,
        adam_beta1=0.9, adam_beta2=0.999, optim="adamw_torch",
        lr_scheduler_type="inverse_sqrt",
        warmup_steps=_warmup(options, total_steps),
        max_grad_norm=options.max_grad_norm,
        max_steps=options.max_steps if options.max_steps is not None else -1,
        num_train_epochs=options.epochs,
        logging_steps=options.logging_steps,
        save_strategy="steps",
        save_steps=options.save_steps,
        save_total_limit=options.save_total_limit,
        seed=options.seed,
        data_seed=options.seed,
        bf16=options.bf16,
        # no GPU: say so, which also makes several processes (torchrun, accelerate) one gloo data-parallel group
        # instead of independent runs, and lets bf16 autocast on a CPU (AVX512-BF16: ~1.6x)
        use_cpu=not (torch.cuda.is_available() or torch.backends.mps.is_available()),
        deepspeed=deepspeed_config(options.deepspeed) if options.deepspeed else None,
        train_sampling_strategy=options.sampling,
        remove_unused_columns=False,
        report_to="none",
        disable_tqdm=False,
        dataloader_num_workers=0,
        dataloader_pin_memory=torch.cuda.is_available(),
    )


def finetune(options: FinetuneOptions, *, translator=None, callbacks: tuple = (), progress: bool | None = None) -> dict:
    """Run the fine-tuning described by ``options``; returns the ``training.json`` card.

    ``translator``: a ready ``Translator`` (model + tokenizer) instead of loading ``options.model`` (tests).
    """
    from simulmt.models import DEFAULT_MODEL
    from simulmt.translator import Translator

    progress = sys.stderr.isatty() if progress is None else progress
    started_at = time.perf_counter()
    out = Path(options.output).expanduser()
    if not options.dry_run:  # a folder that cannot be written is refused before the data and the model load
        check_output_dir(out)
    resume_from = None if options.dry_run else _check_output(options, out)

    pair_stats = data.PairStats()
    pairs = load_pairs(options, pair_stats)
    if not pairs:
        raise SimulmtError(f"no training pairs: {pair_stats.read} read, {pair_stats.empty} with an empty side")
    dev = []
    if options.dev_source and options.eval_lines:
        dev = data.parallel_files(options.dev_source, options.dev_reference, options.eval_lines, what="dev data")

    model_name = options.model or DEFAULT_MODEL
    if options.init_adapter is not None:  # "auto": the shipped adapter for this language pair, if any
        from simulmt.adapters import named_adapter

        options = dataclasses.replace(options, init_adapter=named_adapter(options.init_adapter, model_name,
                                                                          (options.source_lang, options.target_lang)))
    if options.recipe == "policy-head":  # a head on the frozen model with its adapter: no Trainer
        from simulmt.finetune.policy_head import train_policy_head

        return train_policy_head(options, make_recipe(options), pairs, out, model_name, translator, progress)
    if translator is None:
        from simulmt.models import load_model

        _say(f"loading {model_name} ...")
        device = training_device() if not options.deepspeed else "cpu"  # (DeepSpeed places the weights itself)
        loaded = load_model(model_name, device=device, dtype=model_load_dtype(options, device))
        translator = Translator(loaded.model, loaded.tokenizer, source_lang=options.source_lang,
                                target_lang=options.target_lang, name=model_name)
    recipe = make_recipe(options)
    new_tokens: tuple[int, ...] = ()
    if recipe.name == "interleaved" and translator.fmt.end_of_read is None:
        markers = _init_adapter_markers(options, model_name) or MARKERS  # a continued adapter keeps its own
        new_tokens = add_interleaved_markers(translator.model, translator.tokenizer, markers)
        _say(f"added {', '.join(markers)} as tokens {', '.join(map(str, new_tokens))}")
        translator = Translator(translator.model, translator.tokenizer, source_lang=options.source_lang,
                                target_lang=options.target_lang, name=translator.name)
    built = loaded_at = time.perf_counter()
    context = ContextWindow(options.context_pairs, options.context_tokens) if options.context_pairs else None
    dataset = data.build_dataset(recipe, translator.fmt, translator.tokenizer, pairs, options.max_length,
                                 options.seed, progress=progress, context=context)
    stats = dataset.stats
    layout_seconds = time.perf_counter() - built
    skipped = f" ({pair_stats.empty} with an empty side skipped)" if pair_stats.empty else ""
    _say(f"{recipe.describe()}: {len(pairs)} pairs{skipped} -> {stats.examples} examples, average length "
         f"{stats.average_length:.1f} tokens, {stats.label_tokens} labelled tokens "
         f"({stats.too_long} too long, {stats.unplaceable} refused) in {layout_seconds:.1f} s")
    card = {"simulmt_version": __version__, "command": options.command_line(), "model": model_name,
            "recipe": recipe.describe(), "serve_with": recipe.inference(options.eval_k),
            "context": {"pairs": options.context_pairs, "tokens": options.context_tokens,
                        "documents": options.train_docids or "the pairs in order, one document",
                        "targets": options.train_context_target or "the training targets"}
            if context else None,
            "data": {"pairs_read": pair_stats.read, "pairs_empty": pair_stats.empty, **stats.to_json()}}
    if options.dry_run:
        print(json.dumps(card, indent=2, ensure_ascii=False))
        return card

    torch.manual_seed(options.seed)  # LoRA initialisation
    model = _wrap_model(translator.model, options, model_name, new_tokens)
    types, window = attention_spec(model)
    pad_id = translator.tokenizer.pad_token_id
    pad_id = pad_id if pad_id is not None else translator.fmt.end_id
    collator = SimulCollator(recipe.visibility, types, window, pad_id, alibi=adopt_alibi(model))
    total_steps = _total_steps(options, len(dataset))
    checkpointing, why = choose_checkpointing(options, model, max(len(e["input_ids"]) for e in dataset.items),
                                              "cpu" if options.deepspeed else training_device())
    _say(f"activation checkpointing {why}")
    args = training_arguments(options, out, total_steps, checkpointing)
    limit = TimeLimit(options.max_minutes) if options.max_minutes else None
    trainer = SimulTrainer(model=model, args=args, train_dataset=dataset, data_collator=collator,
                           processing_class=translator.tokenizer, callbacks=[*callbacks, *([limit] if limit else [])],
                           marker_lr=options.marker_lr if recipe.name == "interleaved" else None)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(LossProgress(trainer, bar=progress))
    if trainer.is_world_process_zero():
        out.mkdir(parents=True, exist_ok=True)
        if resume_from is None:
            (out / "run.json").write_text(json.dumps({"options": asdict(options), "world_size": args.world_size},
                                                     indent=2) + "\n")
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    kind = "full" if options.full else (f"LoRA from {options.init_adapter}" if options.init_adapter
                                         else f"LoRA r={options.lora_rank}")
    _say(f"training {trainable:,} parameters ({kind}), "
         f"{args.max_steps if args.max_steps > 0 else total_steps} steps of {options.batch_size} x "
         f"{options.grad_accum} sequences" + (f", resuming from {resume_from}" if resume_from else ""))

    started, cpu_started = time.perf_counter(), time.process_time()
    startup = started - started_at
    result = trainer.train(resume_from_checkpoint=resume_from)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    state = trainer.state
    card.update({
        "steps": state.global_step, "epochs": round(state.epoch or 0.0, 4), "resumed_from": resume_from,
        "stopped_by_time_limit": bool(limit and limit.hit),
        "train_loss": round(result.training_loss, 5),
        "loss_history": [{"step": h["step"], "loss": round(h["loss"], 5)} for h in state.log_history if "loss" in h],
        "seconds": round(seconds, 1), "cpu_seconds": round(cpu_seconds, 1),  # CPU time of this process (all threads)
        "tokens_this_run": trainer.run_tokens,
        "tokens_per_s": round(trainer.run_tokens / seconds, 1) if seconds else None,
        "padding_fraction": round(1 - trainer.run_tokens / trainer.run_padded, 4) if trainer.run_padded else None,
        "average_train_length": round(trainer.run_tokens / trainer.run_sequences, 2) if trainer.run_sequences else None,
        "tokens_seen_total": int(state.num_input_tokens_seen),
        "hyperparameters": {"lr": options.learning_rate, "weight_decay": options.weight_decay, "optimizer": "AdamW",
                            "scheduler": "inverse_sqrt", "warmup_steps": args.warmup_steps,
                            "max_grad_norm": options.max_grad_norm, "max_length": options.max_length,
                            "batch_size": options.batch_size, "grad_accum": options.grad_accum,
                            "world_size": args.world_size,
                            "effective_batch": options.batch_size * options.grad_accum * args.world_size,
                            "adapter": "full" if options.full else _adapter_card(model, options),
                            "seed": options.seed, "bf16": options.bf16,
                            **({"marker_lr": trainer.marker_lr} if trainer.marker_lr is not None else {})},
    })
    final_dir = out / ("model" if options.full else "adapter")
    saving = time.perf_counter()
    trainer.save_model(str(final_dir))  # PEFT: the adapter only; --full: a whole checkpoint (+ the tokenizer)
    card["saved"] = str(final_dir)
    card["weights_dtype"] = str(next(p.dtype for p in model.parameters() if not p.requires_grad) if not options.full
                                else next(model.parameters()).dtype).replace("torch.", "")
    card["activation_checkpointing"] = {"on": checkpointing, "why": why}
    card["timing"] = {"startup_seconds": round(startup, 1), "load_seconds": round(loaded_at - started_at, 1),
                      "layout_seconds": round(layout_seconds, 1), "train_seconds": round(seconds, 1),
                      "save_seconds": round(time.perf_counter() - saving, 1)}
    if trainer.is_world_process_zero():
        if dev:
            # Decode without the mixed-precision wrapper accelerate put around forward: under autocast every call
            # would cast the whole LM head (262k rows for Gemma) to bfloat16 again.
            model = trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)
            model.eval()
            merged = hasattr(model, "merge_adapter") and not options.full and not options.deepspeed
            if merged:  # the adapter is saved: fold it into the weights while decoding (fewer matmuls per step)
                model.merge_adapter()
            evaluator = Translator(model, translator.tokenizer, source_lang=options.source_lang,
                                   target_lang=options.target_lang, name=f"{model_name}+{final_dir}")
            card["eval"] = evaluate(evaluator, dev, recipe.inference(options.eval_k), out, progress)
            if merged:
                model.unmerge_adapter()
        (out / "training.json").write_text(json.dumps(card, indent=2, ensure_ascii=False) + "\n")
        _say(f"{state.global_step} steps in {seconds:.0f} s, {card['tokens_per_s']} tokens/s, average training "
             f"length {card['average_train_length']}; saved {final_dir} and {out / 'training.json'}")
    return card


# ---- the evaluation at the end ---------------------------------------------------------------------------------
def evaluate(translator, pairs: list[data.Pair], session_kwargs: dict, out: Path | None = None,
             progress: bool = False, batch_size: int = 8) -> dict:
    """Translate ``pairs`` with the streaming engine (``batch_size`` streams at a time: the same output as one by
    one); BLEU (sacrebleu) and AL / LAAL (SimulEval's definitions)."""
    from simulmt.metrics.latency import latency_scores
    from simulmt.metrics.quality import bleu

    records, started = [], time.perf_counter()
    translations = translator.translate_iter((p.source for p in pairs), batch_size=batch_size, **session_kwargs)
    if progress:
        from tqdm import tqdm

        translations = tqdm(translations, total=len(pairs), desc="evaluating", unit="line", dynamic_ncols=True)
    with torch.no_grad():
        for pair, result in zip(pairs, translations):
            records.append({**result.to_json(), "reference": pair.target})
    predictions = [r["prediction"] for r in records]
    score, signature = bleu(predictions, [p.target for p in pairs])
    try:
        latency = latency_scores(records, ["AL", "LAAL"])
    except SimulmtError:
        latency = {"AL": math.nan, "LAAL": math.nan}
    summary = {"lines": len(pairs), **session_kwargs, "BLEU": round(score, 2), "bleu_signature": signature,
               "AL": round(latency["AL"], 3), "LAAL": round(latency["LAAL"], 3),
               "errors": sum(1 for r in records if r.get("error")),
               "seconds": round(time.perf_counter() - started, 1)}
    _say(f"dev ({len(pairs)} lines, {session_kwargs['layout']} {session_kwargs['policy']}): BLEU {summary['BLEU']}, "
         f"LAAL {summary['LAAL']}, AL {summary['AL']}")
    if out is not None:
        (out / "eval.json").write_text(json.dumps(summary, indent=2) + "\n")
        with open(out / "eval.jsonl", "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return summary


def launch_command(options: FinetuneOptions) -> list[str]:
    """The torchrun command that runs ``options`` on ``options.num_processes`` processes of this machine (the
    same ``simulmt finetune`` in each, without ``--num-processes``; torchrun gives each process its rank)."""
    import dataclasses
    import shlex

    inner = shlex.split(dataclasses.replace(options, num_processes=1).command_line())[1:]  # simulmt finetune ...
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
            str(options.num_processes), "-m", "simulmt", *inner]


def run_finetune(options: FinetuneOptions, parser=None) -> int:
    """The CLI entry: run (or dry-run) the fine-tuning; a ``SimulmtError`` is printed, exit code 1.
    ``--num-processes N`` (outside a launcher) starts N processes with torchrun and waits for them."""
    import subprocess

    launched = "WORLD_SIZE" in os.environ
    if not options.dry_run:  # once, before any process starts (finetune() checks it again: the Python API)
        try:
            check_output_dir(Path(options.output).expanduser())
        except SimulmtError as exc:
            print(f"simulmt finetune: error: {exc}", file=sys.stderr)
            return 1
    if options.num_processes > 1 and not launched and not options.dry_run:
        command = launch_command(options)
        _say(f"starting {options.num_processes} processes: {' '.join(command[1:])}")
        env = dict(os.environ)
        if "OMP_NUM_THREADS" not in env and not torch.cuda.is_available():  # share the cores, do not oversubscribe
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // options.num_processes))
        return subprocess.run(command, env=env).returncode
    if launched and options.num_processes > 1 and options.num_processes != _world_size():
        print(f"simulmt finetune: error: --num-processes {options.num_processes} inside a launcher of "
              f"{_world_size()} processes: leave --num-processes out under torchrun / accelerate launch",
              file=sys.stderr)
        return 1
    try:
        finetune(options)
    except SimulmtError as exc:
        print(f"simulmt finetune: error: {exc}", file=sys.stderr)
        return 1
    return 0
