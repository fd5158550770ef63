"""``simulmt rl``: SeqPO-SiMT training (Algorithm 1 of the paper, with GRPO), resumable.

Each step: take ``--sentences`` pairs (a seeded order, reshuffled each epoch), sample ``--group`` trajectories of
each through the batched engine (``rollout``), score them (quality, latency, fused reward: ``reward``), and take one
AdamW step on the GRPO loss (``grpo``), whose reference is the warm-up model: ``--init-adapter`` is merged into the
weights, a fresh LoRA is trained on top, and switching that LoRA off gives the reference exactly.

The run directory::

    log.jsonl      one line per step: reward, quality, latency, KL, loss, tokens, seconds, a sample
    curves.png     the training curves (mean reward, quality, latency, KL per step)
    checkpoint/    the LoRA, the optimizer, the step: --resume continues from it (same options required)
    adapter/       the result, ONE ordinary LoRA adapter for ``--adapter``: the warm-up adapter and the LoRA
                   trained here concatenated along the rank (exact: rank r1 + r2, each half scaled by its own
                   alpha / r), so nothing else is needed to serve it (layout seqpo, policy read-n, n = --chunk)
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from simulmt.errors import SimulmtError
from simulmt.output_dir import check_output_dir
from simulmt.finetune import data
from simulmt.rl.grpo import grpo_loss
from simulmt.rl.options import RLOptions
from simulmt.rl.reward import fused_rewards, latency_score, normalise, quality_scores
from simulmt.rl.rollout import sample_groups

# options that may change when a run is resumed (they do not change what the run computes step by step)
_RESUMABLE = {"steps", "resume", "save_steps", "max_minutes", "rollout_batch", "device"}
STATE = "state.pt"


def _say(message: str) -> None:
    print(f"simulmt rl: {message}", file=sys.stderr, flush=True)


def sentence_order(count: int, seed: int, step: int, per_step: int) -> list[int]:
    """The pair indices of ``step``: a seeded permutation per epoch, consumed ``per_step`` at a time."""
    out = []
    position = step * per_step
    while len(out) < per_step:
        epoch, offset = divmod(position, count)
        order = list(range(count))
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
        take = min(per_step - len(out), count - offset)
        out += order[offset:offset + take]
        position += take
    return out


def train(options: RLOptions, *, translator=None, progress: bool | None = None) -> dict:
    """Run (or continue) SeqPO training; returns the summary written to ``training.json``.
    ``translator``: a ready ``Translator`` instead of loading ``options.model`` (tests)."""
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict

    from simulmt.models import DEFAULT_MODEL
    from simulmt.translator import Translator

    progress = sys.stderr.isatty() if progress is None else progress
    out = check_output_dir(Path(options.output).expanduser())  # refused before the model loads
    checkpoint = out / "checkpoint"
    state = _check_output(options, out, checkpoint)
    model_name = options.model or DEFAULT_MODEL
    if options.init_adapter is not None:  # "auto": the shipped adapter for this language pair, if any
        from simulmt.adapters import named_adapter

        options = dataclasses.replace(options, init_adapter=named_adapter(options.init_adapter, model_name,
                                                                          (options.source_lang, options.target_lang)))
        if options.init_adapter is not None:
            warm_adapter(options.init_adapter, model_name)  # refused now, not after the run
    pairs = data.parallel_files(options.train_source, options.train_target, options.limit)
    if not pairs:
        raise SimulmtError("no training pairs")
    if translator is None:
        from simulmt.models import load_model

        _say(f"loading {model_name}" + (f" with the warm-up adapter {options.init_adapter} merged" if
                                       options.init_adapter else "") + " ...")
        loaded = load_model(model_name, options.init_adapter or "none", device=options.device)
        base, tokenizer = loaded.model, loaded.tokenizer
    else:
        base, tokenizer = translator.model, translator.tokenizer
    torch.manual_seed(options.seed)
    config = LoraConfig(r=options.lora_rank, lora_alpha=options.lora_alpha, lora_dropout=0.0,
                        target_modules="all-linear", task_type="CAUSAL_LM", bias="none")
    model = get_peft_model(base, config)
    model.eval()  # no dropout anywhere: rollouts and the loss see the same function
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=options.lr, weight_decay=0.0)
    start = 0
    if state is not None:
        set_peft_model_state_dict(model, state["lora"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        _say(f"resuming at step {start}")
    policy = Translator(model, tokenizer, source_lang=options.source_lang, target_lang=options.target_lang,
                        name=f"{model_name}+seqpo")
    out.mkdir(parents=True, exist_ok=True)
    (out / "run.json").write_text(json.dumps({"options": asdict(options)}, indent=2) + "\n")
    log_path = out / "log.jsonl"
    history = _read_log(log_path, start)
    started, cpu_started = time.perf_counter(), time.process_time()
    deadline = started + options.max_minutes * 60 if options.max_minutes else None
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else policy.fmt.end_id
    stopped_by_time = False
    step = start
    for step in range(start, options.steps):
        t0 = time.perf_counter()
        batch = [pairs[i] for i in sentence_order(len(pairs), options.seed, step, options.sentences)]
        record = _step(options, model, policy, optimizer, trainable, batch, step, pad)
        record.update(step=step + 1, seconds=round(time.perf_counter() - t0, 2))
        history.append(record)
        with open(log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
        if progress or (step + 1) % 5 == 0 or step == start:
            _say(f"step {step + 1}/{options.steps} reward {record['reward']:+.3f} quality {record['quality']:.2f} "
                 f"latency {record['latency']:.2f} KL {record['kl']:.4f} ({record['seconds']:.1f} s)")
        done = step + 1 == options.steps
        stopped_by_time = deadline is not None and time.perf_counter() > deadline and not done
        if (step + 1) % options.save_steps == 0 or done or stopped_by_time:
            _save_checkpoint(checkpoint, model, optimizer, step + 1, get_peft_model_state_dict)
        if stopped_by_time:
            step += 1
            break
    else:
        step = options.steps
    summary = {"command": "simulmt rl", "options": asdict(options), "model": model_name, "steps": step,
               "stopped_by_time_limit": stopped_by_time, "seconds_this_run": round(time.perf_counter() - started, 1),
               "cpu_seconds_this_run": round(time.process_time() - cpu_started, 1),
               "serve_with": {"layout": "seqpo", "policy": "read-n", "n": options.chunk}}
    if history:
        summary["first"], summary["last"] = history[0], history[-1]
    if not stopped_by_time:
        adapter = out / "adapter"
        save_combined_adapter(model, options.init_adapter, model_name, adapter)
        summary["saved"] = str(adapter)
        plot_curves(history, out / "curves.png")
    (out / "training.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return summary


def _step(options: RLOptions, model, policy, optimizer, trainable, batch, step: int, pad: int) -> dict:
    groups = sample_groups(policy, [(p.source, p.target) for p in batch], group=options.group, chunk=options.chunk,
                           temperature=options.temperature, top_p=options.top_p,
                           seed=options.seed * 7919 + step, batch_size=options.rollout_batch)
    examples, advantages, rewards, qualities, latencies = [], [], [], [], []
    for members in groups:
        members = [t for t in members if t.error is None]
        if len(members) < 2:
            continue
        q = quality_scores([t.prediction for t in members], [t.reference for t in members],
                           [t.source for t in members], options.quality)
        lat = [latency_score(t.delays, len(t.source.split()), t.reference, options.latency) for t in members]
        r = fused_rewards(q, lat, options.chunk, options.lam, options.truncation)
        examples += [t.example for t in members]
        advantages += normalise(r)
        rewards += r
        qualities += q
        latencies += lat
    optimizer.zero_grad(set_to_none=True)
    loss_total, kl_total, tokens = 0.0, 0.0, 0
    for i in range(0, len(examples), options.micro_batch):
        part = slice(i, i + options.micro_batch)
        loss, stats = grpo_loss(model, examples[part], advantages[part], pad, options.beta)
        weight = len(examples[part]) / len(examples)
        (loss * weight).backward()
        loss_total += stats.loss * weight
        kl_total += stats.kl * weight
        tokens += stats.tokens
    norm = float(torch.nn.utils.clip_grad_norm_(trainable, options.max_grad_norm)) if examples else 0.0
    if examples:
        optimizer.step()
    sample = groups[0][0] if groups and groups[0] else None
    return {"reward": _mean(rewards), "quality": _mean(qualities), "latency": _mean(latencies), "kl": kl_total,
            "loss": loss_total, "grad_norm": round(norm, 4), "tokens": tokens, "trajectories": len(examples),
            "sample": {"source": sample.source, "prediction": sample.prediction} if sample else None}


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 4) if values else math.nan


def _check_output(options: RLOptions, out: Path, checkpoint: Path) -> dict | None:
    if options.resume:
        if not (checkpoint / STATE).is_file():
            raise SimulmtError(f"--resume: no checkpoint in {checkpoint}")
        saved = json.loads((out / "run.json").read_text())["options"]
        changed = [f"--{k.replace('_', '-')}: was {saved.get(k)!r}, now {v!r}" for k, v in asdict(options).items()
                   if k not in _RESUMABLE and saved.get(k) != v]
        if changed:
            raise SimulmtError("--resume with options that change the run:\n  " + "\n  ".join(changed))
        return torch.load(checkpoint / STATE, weights_only=True)
    if checkpoint.exists() or (out / "adapter").exists():
        raise SimulmtError(f"{out} already holds a run: pass --resume to continue it, or choose another --output")
    return None


def _read_log(path: Path, steps: int) -> list[dict]:
    """The log of the first ``steps`` steps (lines of steps after the checkpoint are dropped and rewritten)."""
    if not path.is_file():
        return []
    kept = [r for r in (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
            if r["step"] <= steps]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept), encoding="utf-8")
    return kept


def _save_checkpoint(checkpoint: Path, model, optimizer, step: int, state_dict) -> None:
    """One file, written then renamed: a kill leaves the previous checkpoint or this one, never a mix."""
    checkpoint.mkdir(parents=True, exist_ok=True)
    torch.save({"lora": state_dict(model), "optimizer": optimizer.state_dict(), "step": step},
               checkpoint / "state.pt.tmp")
    (checkpoint / "state.pt.tmp").replace(checkpoint / STATE)


# ---- the result: one adapter ---------------------------------------------------------------------------------------
def save_combined_adapter(model, init_adapter: str | None, model_name: str, directory: Path) -> None:
    """Save the trained LoRA, concatenated with the warm-up adapter when there is one: for every module,
    A = [A_warm; A_rl], B = [B_warm * s_warm, B_rl * s_rl] (s = alpha / r), rank r_warm + r_rl and alpha equal to
    that rank (scale 1), so B A = s_warm B_warm A_warm + s_rl B_rl A_rl: the sum of both deltas, exactly."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import load_file, save_file

    model.save_pretrained(str(directory))
    if init_adapter is None:
        return
    warm_dir, warm_config = warm_adapter(init_adapter, model_name)
    mine_config = json.loads((directory / "adapter_config.json").read_text())
    warm = load_file(str(warm_dir / "adapter_model.safetensors"))
    mine = {k: v.detach().float().cpu() for k, v in get_peft_model_state_dict(model).items()}
    s_warm = warm_config["lora_alpha"] / warm_config["r"]
    s_mine = mine_config["lora_alpha"] / mine_config["r"]
    combined = {}
    for key in sorted({k.replace("lora_B", "lora_A") for k in list(warm) + list(mine) if "lora_" in k}):
        b_key = key.replace("lora_A", "lora_B")
        if key not in warm or key not in mine:
            raise SimulmtError(f"the warm-up adapter and the trained LoRA cover different modules ({key}); "
                               f"train the warm-up adapter with --lora-targets all-linear")
        combined[key] = torch.cat([warm[key].float(), mine[key]], dim=0).contiguous()
        combined[b_key] = torch.cat([warm[b_key].float() * s_warm, mine[b_key] * s_mine], dim=1).contiguous()
    rank = warm_config["r"] + mine_config["r"]
    config = {**warm_config, "r": rank, "lora_alpha": rank, "lora_dropout": 0.0}
    save_file(combined, str(directory / "adapter_model.safetensors"), metadata={"format": "pt"})
    (directory / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")


def warm_adapter(init_adapter: str, model_name: str) -> tuple[Path, dict]:
    """The warm-up adapter's directory and config, if it can be combined with the LoRA trained on top."""
    from simulmt.adapters import resolve_adapter

    resolved = resolve_adapter(init_adapter, model_name)
    if resolved is None:
        raise SimulmtError(f"--init-adapter {init_adapter!r} names no adapter")
    directory = resolved[1]
    if not (directory / "adapter_config.json").is_file() or not (directory / "adapter_model.safetensors").is_file():
        raise SimulmtError(f"--init-adapter: {directory} holds no PEFT LoRA adapter (adapter_config.json and "
                           f"adapter_model.safetensors)")
    config = json.loads((directory / "adapter_config.json").read_text())
    if config.get("peft_type", "LORA") != "LORA" or config.get("rank_pattern") or config.get("alpha_pattern") \
            or config.get("use_rslora") or config.get("use_dora"):
        raise SimulmtError(f"--init-adapter {directory}: only a plain LoRA adapter (no rank/alpha patterns, rsLoRA or "
                           f"DoRA) can be combined with the LoRA trained on top")
    return directory, config


def plot_curves(history: list[dict], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11, 6), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    steps = [r["step"] for r in history]
    for ax, key, label in zip(figure.subplots(2, 2).flat, ("reward", "quality", "latency", "kl"),
                              ("mean reward", "quality (per sentence)", "latency (source words)", "KL to reference")):
        ax.plot(steps, [r[key] for r in history], marker=".")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
    figure.savefig(path, format="png")


def run_rl(options: RLOptions, parser=None) -> int:
    try:
        train(options)
    except SimulmtError as exc:
        print(f"simulmt rl: error: {exc}", file=sys.stderr)
        return 1
    return 0
