"""Training the learned READ/WRITE policy (EASiST stage three's policy part) on a frozen model.

For every training pair, the pair is laid out along a schedule (``decision_points``: after each unit read, does
the schedule write next?), one forward pass of the frozen model (with the adapter it will be served with) gives
the hidden state at each decision point, and a linear head (``simulmt.core.learned_policy.PolicyHead``) is fitted
to those (hidden state, label) rows by class-balanced logistic regression: READ rows outnumber WRITE rows at low
latency and the reverse at high latency (EASiST reweights for the same imbalance). The model is not changed, so the
head can be trained, retrained or swapped without touching the adapter; only the rows it reads come from the same
forward as streaming (tests/test_learned_policy.py checks that the hidden states are the same).

Which schedule supplies the labels decides what the head learns: ``read-n`` chunks (the default) teach it to write
after a chunk of n words; a k-mix teaches a spread of waits, and the threshold tau then picks the latency. With
``--head-labels oracle`` the model itself supplies them: write a word once the source read so far makes the model
predict it right (``simulmt.finetune.oracle``), so the head learns when the source suffices, not a word count.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from simulmt.core.examples import decision_points
from simulmt.core.learned_policy import PolicyHead
from simulmt.core.prompt_format import source_units
from simulmt.finetune.oracle import correct_matrix, oracle_delays
from simulmt.errors import SimulmtError


@dataclass(frozen=True)
class HeadFit:
    """How the fit went: rows, class balance, and accuracy / balanced accuracy on the held-out rows."""

    rows: int
    write_fraction: float
    train_loss: float
    heldout_rows: int
    heldout_accuracy: float | None
    heldout_balanced_accuracy: float | None

    def to_json(self) -> dict:
        return {k: (round(v, 5) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def collect(translator, layout, pairs, schedule, seed: int = 0, progress: bool = False, oracle: bool = False,
            layer: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(hidden (N, d), labels (N,)) over the decision points of ``pairs`` (objects with .source and .target),
    each pair laid out along ``schedule.delays`` drawn with a seeded generator, or along the model's own oracle
    delays (``oracle``: simulmt/finetune/oracle.py). ``layer``: the output of that decoder layer instead of the
    last hidden state (``PolicyHead.layer``)."""
    rng = random.Random(seed)
    hidden, labels = [], []
    runner = translator.runner
    pairs, started = list(pairs), time.time()
    every = max(1, len(pairs) // 10)  # without a terminal (a log file): a line per tenth instead of the bar
    for done, pair in enumerate(tqdm(pairs, desc="policy head: hidden states", unit="pair", disable=not progress)):
        if not progress and done and done % every == 0:
            print(f"policy head: hidden states of {done}/{len(pairs)} pairs ({time.time() - started:.0f} s)",
                  file=sys.stderr, flush=True)
        words, target_words = pair.source.split(), pair.target.split()
        units = source_units(translator.tokenizer, translator.fmt, words)
        if oracle:
            delays = oracle_delays(correct_matrix(translator, layout, units, target_words))
        else:
            delays, _ = schedule.delays(len(words), len(target_words), rng)
        points = decision_points(layout, translator.fmt, translator.tokenizer, units, target_words, delays)
        if not points.indices:
            continue
        ex = points.example
        states = runner.hidden_states(ex.input_ids.tolist(), ex.position_ids.tolist(), ex.visible(layout),
                                      layer=layer)
        hidden.append(states[points.indices].cpu())  # the head is fitted on the CPU, whatever the model's device
        labels.append(torch.tensor(points.labels))
    if not hidden:
        raise SimulmtError("no decision points: every training pair has a one-word source")
    return torch.cat(hidden), torch.cat(labels)


def fit_head(hidden: torch.Tensor, labels: torch.Tensor, *, steps: int = 300, lr: float = 0.05,
             weight_decay: float = 1e-3, heldout: float = 0.1, seed: int = 0, info: dict | None = None
             ) -> tuple[PolicyHead, HeadFit]:
    """Class-balanced logistic regression (full batch, Adam) of ``labels`` on standardised ``hidden``; the
    standardisation is folded into the returned head's weight and bias, so it reads raw hidden states."""
    if hidden.shape[0] != labels.shape[0] or hidden.dim() != 2:
        raise SimulmtError(f"hidden states {tuple(hidden.shape)} and labels {tuple(labels.shape)} do not match")
    if labels.unique().numel() < 2:
        raise SimulmtError("the policy head needs both READ and WRITE decisions in its training data; the schedule "
                           "gives only one (e.g. offline, or one-word chunks); use read-n with n >= 2 or a k-mix")
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(hidden.shape[0], generator=g)
    n_held = int(len(order) * heldout)
    held, train = order[:n_held], order[n_held:]
    x, y = hidden[train].float(), labels[train].long()
    mean, std = x.mean(0), x.std(0).clamp_min(1e-4)
    z = (x - mean) / std
    weight = torch.bincount(y, minlength=2).float()
    weight = weight.sum() / (2 * weight.clamp_min(1))  # balanced: each class weighs half
    torch.manual_seed(seed)
    linear = torch.nn.Linear(hidden.shape[1], 2)
    opt = torch.optim.Adam(linear.parameters(), lr=lr, weight_decay=weight_decay)
    loss_fn = torch.nn.CrossEntropyLoss(weight=weight)
    loss = torch.tensor(0.0)
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(linear(z), y)
        loss.backward()
        opt.step()
    with torch.no_grad():  # fold the standardisation in: W' = W / std, b' = b - W' @ mean
        w = linear.weight / std
        b = linear.bias - w @ mean
    head = PolicyHead(w.detach().clone(), b.detach().clone(), dict(info or {}))
    acc = bal = None
    if n_held:
        pred = (head.p_write(hidden[held]) >= 0.5).long()
        truth = labels[held].long()
        acc = float((pred == truth).float().mean())
        recalls = [float((pred[truth == c] == c).float().mean()) for c in (0, 1) if (truth == c).any()]
        bal = sum(recalls) / len(recalls)
    fit = HeadFit(rows=len(train), write_fraction=float(y.float().mean()), train_loss=float(loss.detach()),
                  heldout_rows=n_held, heldout_accuracy=acc, heldout_balanced_accuracy=bal)
    head.info.update({"fit": fit.to_json()})
    return head, fit


def train_policy_head(options, recipe, pairs, out, model_name: str, translator=None, progress: bool = False) -> dict:
    """``simulmt finetune --recipe policy-head --init-adapter DIR``: fit a head on the model with that adapter and
    write ``OUT/adapter`` (the adapter's files, unchanged, + ``policy_head.safetensors``) and ``training.json``.
    ``translator``: the model with its adapter already applied (tests)."""
    from simulmt import __version__
    from simulmt.adapters import resolve_adapter
    from simulmt.translator import Translator

    if options.init_adapter is None:
        raise SimulmtError("--recipe policy-head trains a head for an interleaved model: pass its adapter with "
                           "--init-adapter DIR (trained with --recipe interleaved)")
    resolved = resolve_adapter(options.init_adapter, model_name)
    if resolved is None or not (resolved[1] / "adapter_config.json").is_file():
        raise SimulmtError(f"--init-adapter {options.init_adapter!r} is not a PEFT adapter directory")
    final = Path(out) / "adapter"
    if final.exists() and not options.resume:
        raise SimulmtError(f"{out} already holds a run (a saved adapter): choose another --output")
    if translator is None:
        from simulmt.models import load_model

        loaded = load_model(model_name, str(resolved[1]), device="cpu")
        translator = Translator(loaded.model, loaded.tokenizer, source_lang=options.source_lang,
                                target_lang=options.target_lang, name=f"{model_name}+{options.init_adapter}")
    started, cpu_started = time.perf_counter(), time.process_time()
    torch.set_grad_enabled(True)
    oracle = options.head_labels == "oracle"
    layer = options.head_layer
    if layer is not None and not 0 <= layer < len(translator.runner.layers):
        raise SimulmtError(f"--head-layer {layer}: the model's decoder layers are 0..{len(translator.runner.layers) - 1}")
    hidden, labels = collect(translator, recipe.layout(), pairs, recipe.schedule, options.seed, progress, oracle,
                             layer=layer)
    info = {"layout": recipe.layout().name, "labels": "oracle" if oracle else recipe.schedule.describe(),
            "pairs": len(pairs), "adapter": str(options.init_adapter)}
    if layer is not None:
        info["layer"] = layer
    head, fit = fit_head(hidden, labels, seed=options.seed, info=info)
    final.mkdir(parents=True, exist_ok=True)
    for f in resolved[1].iterdir():
        if f.is_file() and f.name != "policy_head.safetensors":
            shutil.copy2(f, final / f.name)
    head.save(final)
    card = {"simulmt_version": __version__, "command": options.command_line(), "model": model_name,
            "recipe": "policy-head (oracle labels)" if oracle else recipe.describe(), "serve_with": recipe.inference(), "policy_head": info, "fit": fit.to_json(),
            "seconds": round(time.perf_counter() - started, 1),
            "cpu_seconds": round(time.process_time() - cpu_started, 1), "saved": str(final)}
    (Path(out) / "training.json").write_text(json.dumps(card, indent=2) + "\n")
    print(f"policy head: {fit.rows} decisions ({fit.write_fraction:.0%} WRITE), held-out balanced accuracy "
          f"{fit.heldout_balanced_accuracy}; saved {final}", file=sys.stderr)
    return card
