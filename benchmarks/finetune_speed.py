"""``simulmt finetune`` against a bare forward+backward loop of the same model and the same batches, in one run.

The bare loop is what the model costs: the same LoRA on the same weights (same dtype), the same collated batches
in the Trainer's order (same padding), the same loss (cross-entropy at the labelled positions), backward, AdamW
step. ``simulmt finetune`` adds the Trainer and its callbacks, and, around the training loop, start-up (model load,
example layout) and the save. Printed: tokens/s of the training loop and of the whole command, start-up and save
seconds, and the ratio of the loop to the bare loop.

    python benchmarks/finetune_speed.py [--model smollm2-135m] [--pairs 400] [--steps 12] [--batch 8]
        [--device cpu|cuda] [--bf16] [--threads 2] [--source FILE --target FILE]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

DATA = Path(__file__).resolve().parents[2] / "shared/data/multi30k"


def bare_loop(options, steps: int, device: str) -> dict:
    """The model's own speed on the batches ``simulmt finetune`` trains on (its Trainer's dataloader)."""
    import torch.nn.functional as F

    from simulmt.core.alibi import adopt_alibi
    from simulmt.core.runner import attention_spec
    from simulmt.finetune import data
    from simulmt.finetune.collator import SimulCollator
    from simulmt.finetune import trainer
    from simulmt.finetune.trainer import SimulTrainer, _wrap_model, label_logits, load_pairs, make_recipe
    from simulmt.models import load_model
    from simulmt.translator import Translator

    dtype = trainer.model_load_dtype(options, device) if hasattr(trainer, "model_load_dtype") else torch.float32
    loaded = load_model(options.model, device=device, dtype=dtype)
    tr = Translator(loaded.model, loaded.tokenizer, source_lang=options.source_lang, target_lang=options.target_lang)
    recipe = make_recipe(options)
    dataset = data.build_dataset(recipe, tr.fmt, tr.tokenizer, load_pairs(options, data.PairStats()),
                                 options.max_length, options.seed)
    torch.manual_seed(options.seed)
    model = _wrap_model(tr.model, options, options.model)
    types, window = attention_spec(model)
    pad = tr.tokenizer.pad_token_id if tr.tokenizer.pad_token_id is not None else tr.fmt.end_id
    collator = SimulCollator(recipe.visibility, types, window, pad, alibi=adopt_alibi(model))
    with tempfile.TemporaryDirectory() as tmp:
        args = trainer.training_arguments(options, Path(tmp), steps)
        loader = SimulTrainer(model=model, args=args, train_dataset=dataset, data_collator=collator).get_train_dataloader()
    batches = [b for _, b in zip(range(steps), loader)]
    model.train()
    model.to(device)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=options.learning_rate)
    dtype = next(p.dtype for p in model.parameters())
    autocast = torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=options.bf16)

    def step(batch) -> int:
        batch = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in batch.items()}
        real = int(batch.pop("real_tokens"))
        with autocast:
            logits, labels = label_logits(model, batch, dtype)
            loss = F.cross_entropy(logits.float(), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return real

    step(batches[0])  # warm-up (the first step's allocations and kernel choices)
    _sync(device)
    start, tokens = time.perf_counter(), 0
    for batch in batches[1:]:
        tokens += step(batch)
    _sync(device)
    seconds = time.perf_counter() - start
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


class StepClock:
    """A Trainer callback: the time and tokens at the end of each optimizer step (steady-state speed)."""

    def __init__(self):
        from transformers import TrainerCallback

        class _Clock(TrainerCallback):
            def on_step_end(inner, args, state, control, **kwargs):
                self.marks.append((time.perf_counter(), state.num_input_tokens_seen))
        self.marks: list[tuple[float, int]] = []
        self.callback = _Clock()

    def steady_tokens_per_s(self, skip: int = 2) -> float | None:
        if len(self.marks) <= skip + 1:
            return None
        (t0, n0), (t1, n1) = self.marks[skip], self.marks[-1]
        return (n1 - n0) / (t1 - t0)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--source", default=str(DATA / "train.en"))
    parser.add_argument("--target", default=str(DATA / "train.de"))
    parser.add_argument("--pairs", type=int, default=400)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--recipe", default="expost")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", default=None, help="write the figures as JSON here")
    parser.add_argument("--profile", action="store_true", help="cProfile simulmt finetune (top 45, cumulative)")
    parser.add_argument("--bare-first", action="store_true", help="run the bare loop before simulmt finetune")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from simulmt.finetune.options import FinetuneOptions
    from simulmt.finetune.trainer import finetune

    with tempfile.TemporaryDirectory() as tmp:
        options = FinetuneOptions(train_source=args.source, train_target=args.target, limit=args.pairs,
                                  model=args.model, recipe=args.recipe, max_steps=args.steps, batch_size=args.batch,
                                  grad_accum=1, eval_lines=0, output=str(Path(tmp) / "run"), save_steps=10**6,
                                  logging_steps=max(1, args.steps // 4), bf16=args.bf16)
        bare = bare_loop(options, args.steps, args.device) if args.bare_first else None
        clock = StepClock()
        start = time.perf_counter()
        if args.profile:
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            profiler.enable()
        card = finetune(options, progress=False, callbacks=(clock.callback,))
        command = time.perf_counter() - start
        if args.profile:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(45)
        bare = bare_loop(options, args.steps, args.device) if not args.bare_first else bare
    loop = card["tokens_per_s"]
    timing = card.get("timing", {})
    result = {"model": args.model, "device": args.device, "bf16": args.bf16, "batch": args.batch, "steps": args.steps,
              "finetune_loop_tokens_per_s": loop,
              "finetune_steady_tokens_per_s": round(clock.steady_tokens_per_s() or 0, 1), "finetune_command_seconds": round(command, 1),
              "finetune_command_tokens_per_s": round(card["tokens_this_run"] / command, 1),
              "startup_seconds": timing.get("startup_seconds"), "layout_seconds": timing.get("layout_seconds"),
              "save_seconds": timing.get("save_seconds"), "activation_checkpointing": card.get("activation_checkpointing"),
              "weights_dtype": card.get("weights_dtype"),
              "bare_tokens_per_s": round(bare["tokens_per_s"], 1), "loop_over_bare": round(loop / bare["tokens_per_s"], 3),
              "steady_over_bare": round((clock.steady_tokens_per_s() or 0) / bare["tokens_per_s"], 3)}
    print(json.dumps(result, indent=1))
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
