"""Reproduce the ExPosST paper's comparisons at small scale and write ``docs/results.md`` with its figures.

    .venv/bin/python benchmarks/reproduce.py                    # every unit not done yet, then the report
    .venv/bin/python benchmarks/reproduce.py --max-minutes 100  # stop starting new work after 100 minutes
    .venv/bin/python benchmarks/reproduce.py --methods expost,offline --threads 2
    .venv/bin/python benchmarks/reproduce.py --report-only

One adapter per method, all from the same base model (gemma-3-270m), on the same training pairs (a fixed mix of
Multi30k captions and long wmt-news sentences, ``--train-pairs``), with the same budget of training tokens
(``--budget-tokens``: each recipe trains until it has seen that many tokens, so recipes whose examples are longer
see fewer pairs). Each method is then served with its own inference layout on IWSLT17 tst2017 En-De (first
``--iwslt-lines``) and Multi30k test2016 (first ``--m30k-lines``) at wait-1/3/5/7 (conversation: read-n), and the
expost adapter also at inference slots 4..64 (the slot-mismatch table).

Staged and resumable. The unit of work is a method: train (``--resume`` continues an interrupted run), then
evaluate it run by run (``simulmt evaluate``'s resumable logs). Adapters and logs in progress live in ``--work``
(not committed); a finished adapter is kept under ``--adapters`` (default ``--results``/adapters, git-ignored) in bfloat16 (rank 16: 7.6 MB), so a
later run evaluates the same weights, and every run records its adapter's SHA-256 (runs of another adapter
are redone: one method's numbers never mix two adapters). What a finished run leaves in ``--results`` (committed: ``config.json``, ``scores.json``, the
gzipped ``instances.log``, ``cost.json`` with CPU seconds) is never redone, so a later run only does what is
missing, and ``--report-only`` rebuilds the page from the committed runs alone. No number is chosen on a test set:
the budget, mix and k-mixture are fixed here in advance.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import platform
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import mean, median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulmt.evaluation.options import EvaluateOptions  # noqa: E402
from simulmt.evaluation.run_dir import CONFIG, LOG, SCORES, run_config, translate_run  # noqa: E402
from simulmt.evaluation.runs import RunSpec  # noqa: E402
from simulmt.evaluation.scores import score_run  # noqa: E402
from simulmt.evaluation.testset import read_test_set  # noqa: E402


@dataclass(frozen=True)
class Method:
    recipe: str | None  # the finetune recipe; None: the method trains nothing of its own (see start)
    layout: str  # served with
    policy: str = "wait-k"  # wait-k | read-n | offline
    train: tuple = ()  # extra FinetuneOptions as (name, value) pairs
    start: str | None = None  # the method whose adapter this one uses (no recipe) or starts from (rl)
    rl: tuple | None = None  # trained with `simulmt rl` on top of start's adapter: extra RLOptions as (name, value)
    ks: tuple | None = None  # wait-k: evaluated at these k only (a model trained for one k); None: --ks


METHODS: dict[str, Method] = {
    "expost": Method("expost", "expost", train=(("k_mix", "1,3,5,7,9"),)),
    # issue 42, E3: new slots marked by positions only (no header, no opener; the token before a slot labelled)
    "expost-positions": Method("expost-positions", "expost-positions", train=(("k_mix", "1,3,5,7,9"),)),
    # issue 42, E2: a new slot's header and source see the target of earlier slots (the paper's visibility)
    "expost-sees-earlier": Method("expost-sees-earlier", "expost-sees-earlier", train=(("k_mix", "1,3,5,7,9"),)),
    "expost-nomask": Method("expost-nomask", "expost", train=(("k_mix", "1,3,5,7,9"),)),
    "slotless": Method("slotless", "naive", train=(("k_mix", "1,3,5,7,9"),)),
    "prefix": Method("prefix", "prefix", train=(("k_mix", "1,3,5,7,9"),)),
    "gpe": Method("gpe", "gpe", train=(("k_mix", "1,3,5,7,9"),)),
    "gpe-overlap": Method("gpe-overlap", "gpe-overlap", train=(("k_mix", "1,3,5,7,9"),)),  # issue 42, E4
    # issue 42, E5: one model per k, as the GPE paper trains them (served at its own k)
    "expost-k3": Method("expost", "expost", train=(("k", 3),), ks=(3,)),
    "gpe-k3": Method("gpe", "gpe", train=(("k", 3),), ks=(3,)),
    "conversation": Method("conversation", "conversation", policy="read-n", train=(("n", 3),)),
    "offline": Method("offline", "prefix", policy="offline"),
    # SeqPO-SiMT (issue 12): the conversation adapter is its warm-up (proportional reference prefixes per chunk of
    # 3 words); both are served with the seqpo layout (a step may write nothing), at chunks of 2/3/5/7 words.
    "seqpo-warmup": Method(None, "seqpo", policy="read-n", start="conversation"),
    "seqpo": Method(None, "seqpo", policy="read-n", start="conversation", rl=(
        ("chunk", 3), ("group", 5), ("sentences", 4), ("lam", 2.0), ("beta", 0.02), ("quality", "chrf"),
        ("latency", "AL"), ("truncation", "raw"), ("lr", 1e-5), ("lora_rank", 8))),
}
TEST_SETS = {  # name -> (source, reference) under --data
    "iwslt17": ("iwslt17/tst2017.en-de.en", "iwslt17/tst2017.en-de.de"),
    "multi30k": ("multi30k/test2016.en", "multi30k/test2016.de"),
}
SLOTS = (4, 8, 16, 32, 64)


@dataclass(frozen=True)
class Plan:
    data: str = str(ROOT.parent / "shared" / "data")
    work: str = str(ROOT / "runs" / "reproduce")
    results: str = str(ROOT / "docs" / "results")
    adapters: str = ""  # where each method's adapter is kept (bfloat16) and reused; default --results/adapters,
    # which git ignores (weights stay out of the tree). The adapters behind docs/results.md are in the history:
    # git archive a8cc180 docs/results/adapters | tar -x restores them
    model: str = "gemma-3-270m"
    methods: str = ",".join(METHODS)
    train_pairs: int = 8000  # half Multi30k train (its first lines), half wmt-news train (spread over the years)
    budget_tokens: int = 80_000
    rl_steps: int = 60  # SeqPO: GRPO steps (x 4 sentences x 5 samples) on the same training pairs
    lora_rank: int = 16  # the adapters are kept (bfloat16, 7.6 MB each at rank 16) so later runs reuse them
    batch_size: int = 8
    grad_accum: int = 4
    iwslt_lines: int = 300
    m30k_lines: int = 300
    mismatch_lines: int = 100
    ks: str = "1,3,5,7"
    ns: str = "2,3,5,7"
    eval_batch: int = 16
    dtype: str = "float32"
    threads: int | None = None
    max_minutes: float | None = None
    report_only: bool = False

    @property
    def k_values(self) -> list[int]:
        return [int(k) for k in self.ks.split(",")]

    @property
    def n_values(self) -> list[int]:
        return [int(n) for n in self.ns.split(",")]


def say(message: str) -> None:
    print(f"reproduce: {message}", file=sys.stderr, flush=True)


# ---- data ------------------------------------------------------------------------------------------------------
def training_files(plan: Plan) -> tuple[Path, Path]:
    """The training mix (written once into --work): Multi30k's first N/2 pairs and N/2 wmt-news pairs taken at an
    even stride over its 30k lines (2008-2018), captions and news alternating."""
    out = Path(plan.work) / "data"
    src, tgt = out / "train.en", out / "train.de"
    if src.is_file() and tgt.is_file():
        return src, tgt
    data = Path(plan.data)
    half = plan.train_pairs // 2
    m30k = [(data / "multi30k" / f"train.{lang}").read_text(encoding="utf-8").splitlines()[:half] for lang in "en de".split()]
    news = [(data / "wmt-news" / f"train.en-de.{lang}").read_text(encoding="utf-8").splitlines() for lang in ("en", "de")]
    stride = max(1, len(news[0]) // half)
    news = [lines[::stride][:half] for lines in news]
    out.mkdir(parents=True, exist_ok=True)
    for path, a, b in ((src, m30k[0], news[0]), (tgt, m30k[1], news[1])):
        mixed = [line for pair in zip(a, b) for line in pair]
        path.write_text("\n".join(mixed) + "\n", encoding="utf-8")
    return src, tgt


# ---- training ------------------------------------------------------------------------------------------------
def finetune_options(plan: Plan, name: str, **extra):
    from simulmt.finetune.options import FinetuneOptions

    src, tgt = training_files(plan)
    method = METHODS[name]
    return FinetuneOptions(train_source=str(src), train_target=str(tgt), model=plan.model, recipe=method.recipe,
                           lora_rank=plan.lora_rank, batch_size=plan.batch_size, grad_accum=plan.grad_accum, lr=2e-4,
                           warmup_steps=10,
                           eval_lines=0, save_steps=5, logging_steps=5, output=str(Path(plan.work) / "train" / name),
                           **dict(method.train), **extra)


def adapters_dir(plan: Plan) -> Path:
    return Path(plan.adapters) if plan.adapters else Path(plan.results) / "adapters"


def train(plan: Plan, name: str, deadline: float | None) -> Path | None:
    """The method's adapter: the kept one (``--adapters``), else trained (or resumed) within the
    deadline and then committed in bfloat16; None if time ran out first."""
    from simulmt.finetune.trainer import finetune

    method = METHODS[name]
    if method.recipe is None and method.rl is None:
        return train(plan, method.start, deadline)
    kept = adapters_dir(plan) / name
    if (kept / "adapter_config.json").is_file():
        return kept
    if method.rl is not None:
        return train_rl(plan, name, deadline)
    out = Path(plan.work) / "train" / name
    if (out / "adapter" / "adapter_config.json").is_file() and (out / "training.json").is_file():
        card = json.loads((out / "training.json").read_text())
        if not card.get("stopped_by_time_limit"):
            return keep_adapter(out / "adapter", kept)
    layout = finetune(finetune_options(plan, name, dry_run=True), progress=False)["data"]
    steps = max(1, round(plan.budget_tokens / (plan.batch_size * plan.grad_accum * layout["average_length"])))
    minutes = None if deadline is None else (deadline - time.time()) / 60
    if minutes is not None and minutes < 2:
        return None
    resume = any(out.glob("checkpoint-*"))
    say(f"{name}: training {steps} steps ({layout['average_length']:.1f} tokens per example)"
        + (" (resuming)" if resume else ""))
    card = finetune(finetune_options(plan, name, max_steps=steps, resume=resume, max_minutes=minutes), progress=False)
    spent = out / "cpu_seconds.txt"  # one line per process that trained this adapter (a resume is another)
    with open(spent, "a") as f:
        f.write(f"{card['cpu_seconds']}\n")
    if card["stopped_by_time_limit"] and card["steps"] < steps:
        return None
    results = Path(plan.results) / "training"
    results.mkdir(parents=True, exist_ok=True)
    cpu = sum(float(line) for line in spent.read_text().split())
    (results / f"{name}.json").write_text(json.dumps({**card, "cpu_seconds_total": cpu}, indent=2,
                                                     ensure_ascii=False) + "\n")
    return keep_adapter(out / "adapter", kept)


def train_rl(plan: Plan, name: str, deadline: float | None) -> Path | None:
    """A SeqPO adapter: ``simulmt rl`` on top of the start method's adapter (resumed from its checkpoint)."""
    from simulmt.rl.options import RLOptions
    from simulmt.rl.train import train as rl_train

    method = METHODS[name]
    warm = train(plan, method.start, deadline)
    if warm is None:
        return None
    minutes = None if deadline is None else (deadline - time.time()) / 60
    if minutes is not None and minutes < 2:
        return None
    out = Path(plan.work) / "train" / name
    src, tgt = training_files(plan)
    resume = (out / "checkpoint" / "state.pt").is_file()
    say(f"{name}: {plan.rl_steps} GRPO steps on top of {method.start}" + (" (resuming)" if resume else ""))
    card = rl_train(RLOptions(train_source=str(src), train_target=str(tgt), model=plan.model, init_adapter=str(warm),
                              steps=plan.rl_steps, output=str(out), resume=resume, max_minutes=minutes,
                              save_steps=5, **dict(method.rl)), progress=False)
    spent = out / "cpu_seconds.txt"
    with open(spent, "a") as f:
        f.write(f"{card['cpu_seconds_this_run']}\n")
    if card["stopped_by_time_limit"]:
        return None
    results = Path(plan.results) / "training"
    results.mkdir(parents=True, exist_ok=True)
    cpu = sum(float(line) for line in spent.read_text().split())
    log = [json.loads(line) for line in (out / "log.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    (results / f"{name}.json").write_text(json.dumps({**card, "cpu_seconds_total": cpu, "log": log}, indent=2,
                                                     ensure_ascii=False) + "\n")
    shutil.copyfile(out / "curves.png", Path(plan.results) / f"{name}_curves.png")
    return keep_adapter(out / "adapter", adapters_dir(plan) / name)


def keep_adapter(adapter: Path, kept: Path) -> Path:
    """Copy a trained adapter into --adapters in bfloat16 (a later run evaluates the same weights)."""
    from simulmt.adapters import save_bfloat16_weights

    kept.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(adapter / "adapter_config.json", kept / "adapter_config.json")
    save_bfloat16_weights(adapter / "adapter_model.safetensors", kept / "adapter_model.safetensors")
    return kept


# ---- evaluation ----------------------------------------------------------------------------------------------
def run_specs(plan: Plan, name: str) -> list[tuple[str, RunSpec, int]]:
    """(test set, run, lines) of a method, including the slot-mismatch runs of expost."""
    method = METHODS[name]
    if method.policy == "offline":
        grid = [RunSpec(method.layout, "offline", None)]
    elif method.policy == "read-n":
        grid = [RunSpec(method.layout, "read-n", n) for n in plan.n_values]
    else:
        grid = [RunSpec(method.layout, "wait-k", k) for k in (method.ks or plan.k_values)]
    out = [(test, spec, plan.iwslt_lines if test == "iwslt17" else plan.m30k_lines)
           for test in TEST_SETS for spec in grid]
    if name == "expost":
        out += [("iwslt17-slots", RunSpec("expost", "wait-k", k, slot=slot), plan.mismatch_lines)
                for slot in SLOTS for k in plan.k_values]
    return out


def result_dir(plan: Plan, name: str, test: str, spec: RunSpec) -> Path:
    return Path(plan.results) / "runs" / test / name / spec.name


def evaluate_method(plan: Plan, name: str, adapter: Path, deadline: float | None) -> bool:
    """Evaluate every run of the method not in --results yet; True when all are done."""
    from simulmt.translator import Translator

    digest = hashlib.sha256((adapter / "adapter_model.safetensors").read_bytes()).hexdigest()
    for test, spec, _ in run_specs(plan, name):  # runs of another adapter (retrained after its loss) are redone
        done = result_dir(plan, name, test, spec)
        cost = done / "cost.json"
        if cost.is_file() and json.loads(cost.read_text()).get("adapter_sha256") != digest:
            say(f"{name}: {test} {spec.name} was made with another adapter: redoing it")
            shutil.rmtree(done)
    todo = [(t, s, n) for t, s, n in run_specs(plan, name) if not (result_dir(plan, name, t, s) / SCORES).is_file()]
    if not todo:
        return True
    translator = Translator.load(plan.model, adapter=str(adapter), dtype=plan.dtype, device="cpu")
    for test, spec, lines in todo:
        if deadline is not None and time.time() > deadline:
            return False
        source, reference = TEST_SETS[test.removesuffix("-slots")]
        test_set = read_test_set(Path(plan.data) / source, Path(plan.data) / reference, lines)
        options = EvaluateOptions(source=str(test_set.source_path), reference=str(test_set.reference_path),
                                  output="-", adapter=f"{name} ({adapter})", lines=lines, batch_size=plan.eval_batch,
                                  dtype=plan.dtype)
        config = run_config(spec, plan.model, options, test_set, translator.dtype)
        work = Path(plan.work) / "eval" / test / name / spec.name
        say(f"{name}: {test} {spec.name} ({lines} lines)")
        cpu, wall = time.process_time(), time.time()
        translate_run(translator, spec, test_set, work, config, progress=sys.stderr.isatty(),
                      batch_size=plan.eval_batch)
        score_run(work)
        cost = {"cpu_seconds": round(time.process_time() - cpu, 1), "wall_seconds": round(time.time() - wall, 1),
                "adapter_sha256": digest}
        done = result_dir(plan, name, test, spec)
        done.mkdir(parents=True, exist_ok=True)
        for file in (CONFIG, SCORES):
            shutil.copyfile(work / file, done / file)
        with open(work / LOG, "rb") as f, gzip.GzipFile(done / (LOG + ".gz"), "wb", mtime=0) as g:
            shutil.copyfileobj(f, g)
        (done / "cost.json").write_text(json.dumps(cost) + "\n")
    return True


def slot_lengths(plan: Plan) -> dict:
    """Average training sequence length of the expost recipe per slot length (a dry run: no model forward)."""
    path = Path(plan.results) / "training" / "slot_lengths.json"
    if path.is_file():
        return json.loads(path.read_text())
    from simulmt.finetune.trainer import finetune

    out = {}
    for slot in SLOTS:
        card = finetune(finetune_options(plan, "expost", slot=slot, dry_run=True), progress=False)
        out[str(slot)] = card["data"]["average_length"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    return out


# ---- the report ------------------------------------------------------------------------------------------------
def load_runs(plan: Plan) -> list[dict]:
    runs = []
    for scores in sorted(Path(plan.results).glob("runs/*/*/*/" + SCORES)):
        run = scores.parent
        test, name = run.parent.parent.name, run.parent.name
        record = {"test": test, "method": name, "run": run.name, **json.loads(scores.read_text()),
                  "config": json.loads((run / CONFIG).read_text())}
        cost = run / "cost.json"
        record["cost"] = json.loads(cost.read_text()) if cost.is_file() else {}
        with gzip.open(run / (LOG + ".gz"), "rt", encoding="utf-8") as f:
            record["instances"] = [json.loads(line) for line in f if line.strip()]
        runs.append(record)
    return runs


def point(run: dict) -> tuple[str, int | None]:
    c = run["config"]
    return c["policy"], c.get("k") if c["policy"] == "wait-k" else c.get("n")


def write_report(plan: Plan) -> Path:
    from simulmt.evaluation.plots import plot_bleu_laal

    runs = load_runs(plan)
    results = Path(plan.results)
    page = ["# Results: the ExPosST comparisons at small scale", "",
            f"Generated by `benchmarks/reproduce.py` from the runs committed under `docs/{results.name}/runs/` (rebuild the "
            "page with `--report-only`). Base model gemma-3-270m; every method is a LoRA adapter (rank 16, alpha 16) "
            "trained "
            f"from scratch on the same {plan.train_pairs:,} pairs (Multi30k captions and wmt-news sentences, "
            f"alternating, in a seeded order) with the same budget of {plan.budget_tokens:,} training tokens (so "
            "each method sees as many examples as fit in it: the training table says how many), then served with its own "
            "layout (float32, greedy, simulmt's decoding). BLEU and chrF by sacrebleu, latency in source words "
            "(SimulEval's definitions). The scale is tiny next to the paper's (an 8B model, full IWSLT training "
            "data): read orderings, not absolute numbers.", "",
            "SimulMask: on gemma-3-270m, a RoPE model, the `simulmask` recipe lays out exactly the `slotless` sequence "
            "(policy mask, contiguous positions), so its row is the w/o slot row; its modified ALiBi needs an ALiBi "
            "model (Bloom, Falcon-RW), none of which installs offline here (README, \"ALiBi models and SimulMask\").",
            ""]
    measured = {r["method"] for r in runs}
    planned = [m for m in plan.methods.split(",") if m in METHODS]  # (the page reports the methods it was run for)
    missing = [m for m in planned if m not in measured]
    expected = sum(len(run_specs(plan, m)) for m in planned)
    done = sum((result_dir(plan, m, test, spec) / SCORES).is_file() for m in planned for test, spec, _ in run_specs(plan, m))
    page += [f"Status: {done} of {expected} runs measured"  # (runs of other experiments in --results not counted)
             + (f"; methods not measured yet: {', '.join(missing)} (rerun the command to continue)." if missing
                else "."), ""]
    page += _environment(runs)
    for test in TEST_SETS:
        main = [r for r in runs if r["test"] == test]
        if not main:
            continue
        page += [f"## {test}: BLEU against LAAL", "", f"![{test}]({results.name}/{test}_bleu_laal.png)", ""]
        points = [{"family": r["method"], "label": f"{point(r)[0][0] if point(r)[0] != 'offline' else ''}"
                   f"{point(r)[1] if point(r)[1] is not None else ''}", "offline": r["method"] == "offline",
                   "BLEU": r["BLEU"], "LAAL": r["LAAL"], "LAAL_CA": r.get("LAAL_CA", math.nan)} for r in main]
        plot_bleu_laal(points, results / f"{test}_bleu_laal.png",
                       title=f"{test} ({main[0]['sentences']} lines): one curve per method")
        page += _table(main)
    page += _ablation(runs) + _slot_mismatch(runs) + _compute(runs, results) + _training(plan) + _orderings(runs)
    page += _seqpo(plan, runs, results) + _commands(plan)
    path = results.parent / f"{results.name}.md"  # docs/results -> docs/results.md; another --results, its own page
    path.write_text("\n".join(page) + "\n", encoding="utf-8")
    say(f"wrote {path}")
    return path


RESULT_FIELDS = ("results", "model", "methods", "train_pairs", "budget_tokens", "rl_steps", "lora_rank", "batch_size",
                 "grad_accum", "iwslt_lines", "m30k_lines", "mismatch_lines", "ks", "ns", "eval_batch", "dtype")


def _driver_command(plan: Plan) -> str:
    """The driver's command line that makes this page: the options that shape its results, where not the defaults."""
    default = Plan()
    words = [".venv/bin/python benchmarks/reproduce.py"]
    for name in RESULT_FIELDS:
        value, usual = getattr(plan, name), getattr(default, name)
        if name == "results":  # a folder: compared resolved, written from the repository's root where it lies there
            value, usual = Path(value).resolve(), Path(usual).resolve()
            value = value.relative_to(ROOT) if value.is_relative_to(ROOT) else value
            usual = usual.relative_to(ROOT)
        if value != usual:
            words.append(f"--{name.replace('_', '-')} {value}")
    return " ".join(words + ["--threads 2 --max-minutes 120"])


def _commands(plan: Plan) -> list[str]:
    """The commands behind the page: the driver, and each adapter's training as it ran (from its training record;
    an in-process run such as ``simulmt rl`` is written out from its recorded options)."""
    def portable(text: str) -> str:
        words = text.split()
        if "--output" in words[:-1]:  # the --work it trained under (OUTPUT = WORK/train/NAME): written as the default's
            work = str(Path(words[words.index("--output") + 1]).parent.parent)
            text = text.replace(work + "/", Plan.work + "/")
        return text.replace(str(ROOT) + "/", "")

    out = ["## Commands", "", "Everything on this page, staged and resumable (rerun to continue; `--methods A,B` for "
           "some methods, `--report-only` for the page alone):", "", "```bash",
           _driver_command(plan), "```", "",
           "Each adapter's training, as it ran (the driver adds `--max-minutes` and, after an interruption, `--resume`):",
           ""]
    for name in METHODS:
        record = Path(plan.results) / "training" / f"{name}.json"
        if not record.is_file():
            continue
        card = json.loads(record.read_text())
        command = card.get("command", "")
        if card.get("options") and command.split() == ["simulmt", "rl"]:
            flags = [f"--{k.replace('_', '-')} {v}" for k, v in card["options"].items()
                     if v is not None and v is not False and k != "resume"]  # 0 is a value (--seed 0)
            command = " ".join(["simulmt rl", *flags])
        out.append(f"- {name}: `{portable(command)}`")
    out += ["", "Evaluation runs in the driver's process through the code behind `simulmt evaluate` "
            "(`simulmt.evaluation.run_dir.translate_run` and `simulmt.evaluation.scores.score_run`, float32, "
            "greedy); each run's settings (adapter, layout, policy, k or n, slot, decoding bounds, test set and "
            "lines) are in its "
            f"`docs/{Path(plan.results).name}/runs/TEST/METHOD/RUN/config.json`, its CPU time and adapter hash in "
            "`cost.json`.", ""]
    return out


def _environment(runs: list[dict]) -> list[str]:
    import torch
    import transformers

    from simulmt import __version__

    cpu_eval = sum(r["cost"].get("cpu_seconds", 0) for r in runs) / 60
    return [f"simulmt {__version__}, torch {torch.__version__}, transformers {transformers.__version__}, "
            f"Python {platform.python_version()}, {platform.machine()}; evaluation CPU time "
            f"{cpu_eval:.0f} min over {len(runs)} runs (training CPU time in the training table).", ""]


def _table(runs: list[dict]) -> list[str]:
    rows = ["| method | run | BLEU | chrF | AL | LAAL | tokens fed | GFLOPs | sentences |", "|---|---|---:|---:|---:|"
            "---:|---:|---:|---:|"]
    order = list(METHODS)
    for r in sorted(runs, key=lambda r: (order.index(r["method"]) if r["method"] in order else 99, point(r)[1] or 0)):
        rows.append(f"| {r['method']} | {r['run']} | {r['BLEU']:.2f} | {r['chrF']:.2f} | {r['AL']:.2f} | "
                    f"{r['LAAL']:.2f} | {r['tokens_fed']:.1f} | {r['gflops']:.2f} | {r['sentences']} |")
    return rows + [""]


def _by(runs: list[dict], test: str, method: str) -> dict:
    return {point(r)[1]: r for r in runs if r["test"] == test and r["method"] == method}


def _ablation(runs: list[dict]) -> list[str]:
    out = ["## Ablation: ExPosST vs w/o mask vs w/o slot (BLEU / LAAL)", ""]
    for test in TEST_SETS:
        cols = {m: _by(runs, test, m) for m in ("expost", "expost-nomask", "slotless")}
        ks = sorted({k for c in cols.values() for k in c if k is not None})
        if not ks:
            continue
        out += [f"{test}:", "", "| k | " + " | ".join(cols) + " |", "|---:|" + "---:|" * len(cols)]
        for k in ks:
            cells = [f"{c[k]['BLEU']:.2f} / {c[k]['LAAL']:.2f}" if k in c else "-" for c in cols.values()]
            out.append(f"| {k} | " + " | ".join(cells) + " |")
        out.append("")
    return out


def _slot_mismatch(runs: list[dict]) -> list[str]:
    mine = [r for r in runs if r["test"] == "iwslt17-slots"]
    if not mine:
        return []
    ks = sorted({r["config"]["k"] for r in mine})
    out = [f"## Slot mismatch: trained with slot 16, served with slot L (IWSLT17, first {mine[0]['sentences']} "
           "lines, BLEU)", "", "| inference slot | " + " | ".join(f"wait-{k}" for k in ks) + " |",
           "|---:|" + "---:|" * len(ks)]
    for slot in SLOTS:
        cells = {r["config"]["k"]: r["BLEU"] for r in mine if r["config"]["slot"] == slot}
        out.append(f"| {slot} | " + " | ".join(f"{cells[k]:.2f}" if k in cells else "-" for k in ks) + " |")
    return out + [""]


def _compute(runs: list[dict], results: Path) -> list[str]:
    """GFLOPs per sentence at wait-3 (conversation: read-3), box plots, ratios to offline."""
    test = "iwslt17"
    chosen = {}
    for r in runs:
        if r["test"] != test:
            continue
        policy, value = point(r)
        if policy == "offline" or value == 3:
            chosen[r["method"]] = r
    if not chosen:
        return []
    names = [m for m in METHODS if m in chosen]
    flops = {m: [ins.get("flops", 0.0) / 1e9 for ins in chosen[m]["instances"]] for m in names}
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 4.5), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    ax.boxplot([flops[m] for m in names], tick_labels=names, showfliers=False)
    ax.set_ylabel("GFLOPs per sentence")
    ax.set_title(f"{test}: compute per sentence at wait-3 (conversation: read-3; offline: whole source)")
    ax.grid(True, axis="y", alpha=0.3)
    figure.savefig(results / "compute_wait3.png", format="png")
    base = mean(flops["offline"]) if "offline" in flops else None
    out = ["## Compute per sentence at wait-3", "", f"![compute]({results.name}/compute_wait3.png)", "",
           "| method | mean GFLOPs | median | x offline | tokens fed |", "|---|---:|---:|---:|---:|"]
    for m in names:
        ratio = f"{mean(flops[m]) / base:.2f}" if base else "-"
        out.append(f"| {m} | {mean(flops[m]):.1f} | {median(flops[m]):.1f} | {ratio} | "
                   f"{chosen[m]['tokens_fed']:.1f} |")
    return out + [""]


def _training(plan: Plan) -> list[str]:
    folder = Path(plan.results) / "training"
    cards = {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json")) if p.stem in METHODS and METHODS[p.stem].rl is None}
    out = []
    if cards:
        out += ["## Training", "", "| method | recipe | examples laid out | average length (tokens) | steps | "
                "sequences trained | tokens trained | CPU min | final loss |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for name in METHODS:
            if name in cards:
                c = cards[name]
                seen = c["steps"] * c["hyperparameters"]["effective_batch"]
                out.append(f"| {name} | {c['recipe']} | {c['data']['examples']:,} | {c['data']['average_length']:.1f} | "
                           f"{c['steps']} | {seen:,} | {c['tokens_seen_total']:,} | "
                           f"{c.get('cpu_seconds_total', 0) / 60:.0f} | "
                           f"{c['loss_history'][-1]['loss'] if c['loss_history'] else float('nan'):.3f} |")
        out += [f"- {name}: {cards[name]['note']}." for name in METHODS if cards.get(name, {}).get("note")]
        out.append("")
        out += _loss_curves(cards, Path(plan.results))
    slots = folder / "slot_lengths.json"
    if slots.is_file():
        lengths = json.loads(slots.read_text())
        out += ["Average expost training sequence length per slot length (the same pairs and k-mixture). Unused "
                "slot positions are skipped, not padded; the length grows as the slot shrinks because a source "
                "unit that does not fit opens a new slot after the output, with its chat markers (turn end, user "
                "header, target opener):", "",
                "| slot | " + " | ".join(lengths) + " |", "|---|" + "---:|" * len(lengths),
                "| tokens | " + " | ".join(f"{v:.1f}" for v in lengths.values()) + " |", ""]
    return out


def _loss_curves(cards: dict[str, dict], results: Path) -> list[str]:
    """Each method's training loss (the logged averages) against the tokens it had trained on by then, one plot:
    methods are compared at a token budget, and their sequences differ in length. A step's tokens are the run's
    average (tokens trained / steps)."""
    curves = {name: c for name, c in cards.items() if c.get("loss_history") and c.get("steps")}
    if not curves:
        return []
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 4.5), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    for name in [m for m in METHODS if m in curves]:
        c = curves[name]
        per_step = c["tokens_seen_total"] / c["steps"]
        ax.plot([h["step"] * per_step / 1000 for h in c["loss_history"]], [h["loss"] for h in c["loss_history"]],
                marker=".", label=name)
    ax.set_xlabel("tokens trained (thousands)")
    ax.set_ylabel("training loss")
    ax.set_title("training loss against tokens trained")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    figure.savefig(results / "training_loss.png", format="png")
    return ["Training loss against tokens trained (each point a logged average over the last steps). The saw-tooth is "
            "the length-grouped sampler (`--sampling group_by_length`): batches of long news sentences come in runs "
            "and have the higher loss, so compare methods at the same token count, not a curve's ups and downs:", "",
            f"![training loss]({results.name}/training_loss.png)", ""]


def _orderings(runs: list[dict]) -> list[str]:
    """The paper's claims, checked on what was measured (a claim without its runs is reported as not measured),
    then the evidence for each claim that does not hold: BLEU per source length and the sentences that differ most."""
    out = ["## The paper's orderings, checked", ""]
    failed: list[tuple[str, str, int]] = []  # (test, other method, k) where ExPosST loses the claim
    for test in TEST_SETS:
        e, g, p = _by(runs, test, "expost"), _by(runs, test, "gpe"), _by(runs, test, "prefix")
        nm, sl = _by(runs, test, "expost-nomask"), _by(runs, test, "slotless")
        for k in sorted(e):
            checks = []
            if k in g:
                holds = e[k]["BLEU"] >= g[k]["BLEU"]
                checks.append(f"ExPosST {'>=' if holds else '<'} GPE")
                failed += [] if holds else [(test, "gpe", k)]
            for name, label, other in (("expost-nomask", "w/o mask", nm), ("slotless", "w/o slot", sl)):
                if k in other:
                    holds = e[k]["BLEU"] > other[k]["BLEU"]
                    checks.append(f"ExPosST {'>' if holds else '<='} {label}")
                    failed += [] if holds else [(test, name, k)]
            if k in p:
                gap = e[k]["BLEU"] - p[k]["BLEU"]
                holds = gap >= -1
                checks.append(f"ExPosST - prefix = {gap:+.2f} BLEU ({'holds: at most 1 below' if holds else 'fails: more than 1 below'})")
                failed += [] if holds else [(test, "prefix", k)]
                if k == 3 and e[k]["gflops"]:
                    ratio = p[k]["gflops"] / e[k]["gflops"]
                    checks.append(f"prefix / ExPosST GFLOPs = {ratio:.2f} ({'>=' if ratio >= 4 else '<'} 4)")
            out.append(f"- wait-{k} ({test}): " + ("; ".join(checks) if checks else "not measured yet"))
    out.append("")
    return out + _length_breakdown(runs) + _examples(runs, failed)


LENGTHS = ((1, 10), (11, 20), (21, 30), (31, 10_000))  # source words


def _length_breakdown(runs: list[dict], k: int = 3) -> list[str]:
    """BLEU per source-length bucket at wait-k (conversation: read-k; offline as is), per test set and method."""
    from simulmt.metrics.quality import bleu

    out = []
    for test in TEST_SETS:
        chosen = {r["method"]: r for r in runs if r["test"] == test and point(r)[1] in (k, None)}
        if not chosen:
            continue
        sources = {ins["index"]: ins["source"] for run in chosen.values() for ins in run["instances"]}
        buckets = {b: [i for i in sorted(sources) if b[0] <= len(sources[i].split()) <= b[1]] for b in LENGTHS}
        buckets = {b: idx for b, idx in buckets.items() if idx}
        label = {b: f"{b[0]}-{b[1]}" if b[1] < 10_000 else f"{b[0]}+" for b in buckets}
        out += [f"BLEU per source length at wait-{k} (conversation: read-{k}), {test}; sentences per bucket in the "
                "header:", "", "| method | " + " | ".join(f"{label[b]} words ({len(i)})" for b, i in buckets.items())
                + " |", "|---|" + "---:|" * len(buckets)]
        for name in [m for m in METHODS if m in chosen]:
            by_index = {ins["index"]: ins for ins in chosen[name]["instances"]}
            cells = []
            for idx in buckets.values():
                pairs = [(by_index[i]["prediction"], by_index[i]["reference"]) for i in idx if i in by_index]
                cells.append(f"{bleu([h for h, _ in pairs], [r for _, r in pairs])[0]:.2f}" if pairs else "-")
            out.append(f"| {name} | " + " | ".join(cells) + " |")
        out.append("")
    return out


def _examples(runs: list[dict], failed: list[tuple[str, str, int]]) -> list[str]:
    """For each claim that fails: the sentence where the other method's chrF most exceeds ExPosST's."""
    from sacrebleu.metrics import CHRF

    chrf = CHRF()
    out = []
    for test, other, k in failed:
        e, o = _by(runs, test, "expost")[k], _by(runs, test, other)[k]
        theirs = {ins["index"]: ins for ins in o["instances"]}
        best = max(((chrf.sentence_score(theirs[ins["index"]]["prediction"], [ins["reference"]]).score
                     - chrf.sentence_score(ins["prediction"], [ins["reference"]]).score, ins)
                    for ins in e["instances"] if ins["index"] in theirs), key=lambda t: t[0], default=None)
        if best is None:
            continue
        gap, ins = best
        if not out:
            out += ["Where a claim fails: the sentence where the other method's chrF most exceeds ExPosST's (one "
                    "sentence each, an illustration; the length tables above are the summary):", ""]
        out += [f"- {test}, wait-{k}, ExPosST vs {other}, line {ins['index'] + 1} (chrF {gap:+.1f}):", "",
                f"  - source: {ins['source']}", f"  - reference: {ins['reference']}",
                f"  - expost: {ins['prediction']}", f"  - {other}: {theirs[ins['index']]['prediction']}", ""]
    return out


def _seqpo(plan: Plan, runs: list[dict], results: Path) -> list[str]:
    """Issue 12's experiment: SeqPO against its warm-up (both served with the seqpo layout, chunks of n words) and
    against ExPosST wait-k at a similar AL; BLEU against AL, the paper's axes."""
    warm_name, rl_name = "seqpo-warmup", "seqpo"
    if not any(r["method"] in (warm_name, rl_name) for r in runs):
        return []
    spec = dict(METHODS[rl_name].rl)
    out = ["## SeqPO-SiMT: GRPO on top of the warm-up (issue 12)", "",
           f"Warm-up: the `conversation` adapter above (recipe conversation, read-{dict(METHODS['conversation'].train)['n']}"
           " chunks, partial translations = proportional prefixes of the reference). SeqPO: `simulmt rl` on top of "
           f"it, {plan.rl_steps} steps of {spec['sentences']} sentences x {spec['group']} sampled trajectories (chunks "
           f"of {spec['chunk']} words) from the same training pairs; reward = {spec['lam']} x normalised "
           f"{spec['quality']} - normalised {spec['latency']} (truncation `{spec['truncation']}`: the paper's "
           "max(m, normalised L) is the constant m for m >= 2, so it would leave quality alone in the reward), "
           f"KL weight {spec['beta']}, LoRA rank {spec['lora_rank']} on top, lr {spec['lr']}. Both adapters are served "
           "with the `seqpo` layout and read-n (a step may write nothing) at chunks of n words. Command: "
           "`.venv/bin/python benchmarks/reproduce.py --methods seqpo-warmup,seqpo`.", ""]
    card_path = results / "training" / f"{rl_name}.json"
    if card_path.is_file():
        card = json.loads(card_path.read_text())
        log = card.get("log", [])
        tenth = max(1, len(log) // 5)
        if log:
            head, tail = log[:tenth], log[-tenth:]
            avg = lambda rows, key: mean(r[key] for r in rows if isinstance(r[key], (int, float)) and math.isfinite(r[key]))  # noqa: E731
            out += [f"Training: {card['steps']} steps, {card.get('cpu_seconds_total', 0) / 60:.0f} CPU min. Means of "
                    f"the first and last {tenth} steps over the sampled trajectories (the current policy, temperature "
                    "1; the fused reward is normalised within each group, so its mean is 0 by construction and is "
                    "not shown):", "",
                    f"| steps | {spec['quality']} | {spec['latency']} (source words) | KL to the warm-up |",
                    "|---|---:|---:|---:|",
                    f"| first {tenth} | {avg(head, 'quality'):.2f} | {avg(head, 'latency'):.2f} | {avg(head, 'kl'):.4f} |",
                    f"| last {tenth} | {avg(tail, 'quality'):.2f} | {avg(tail, 'latency'):.2f} | {avg(tail, 'kl'):.4f} |",
                    "", f"![curves]({results.name}/{rl_name}_curves.png)", ""]
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    for test in TEST_SETS:
        warm, rl, wk = _by(runs, test, warm_name), _by(runs, test, rl_name), _by(runs, test, "expost")
        ns = sorted(set(warm) | set(rl))
        if not ns:
            continue
        figure = Figure(figsize=(7, 4.6), dpi=110, layout="constrained")
        FigureCanvasAgg(figure)
        ax = figure.subplots()
        for name, curve, prefix in ((warm_name, warm, "n"), (rl_name, rl, "n"), ("expost wait-k", wk, "k")):
            keys = sorted(curve, key=lambda v: curve[v]["AL"])
            if keys:
                line, = ax.plot([curve[v]["AL"] for v in keys], [curve[v]["BLEU"] for v in keys], marker="o", label=name)
                for v in keys:
                    ax.annotate(f"{prefix}{v}", (curve[v]["AL"], curve[v]["BLEU"]), textcoords="offset points",
                                xytext=(4, 4), fontsize=8, color=line.get_color())
        ax.set_xlabel("AL (source words)")
        ax.set_ylabel("BLEU")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=9)
        ax.set_title(f"{test}: SeqPO vs its warm-up (seqpo layout, chunks of n words)", fontsize=10)
        figure.savefig(results / f"{test}_seqpo_bleu_al.png", format="png")
        out += [f"{test} (first {next(iter((warm or rl).values()))['sentences']} lines):", "",
                f"![{test} seqpo]({results.name}/{test}_seqpo_bleu_al.png)", "",
                "| n | warm-up BLEU / AL / LAAL / length | SeqPO BLEU / AL / LAAL / length | SeqPO above the warm-up's curve? | "
                "ExPosST wait-k nearest in AL |", "|---:|---:|---:|---|---|"]
        for n in ns:
            w = f"{warm[n]['BLEU']:.2f} / {warm[n]['AL']:.2f} / {warm[n]['LAAL']:.2f} / {_length_ratio(warm[n]):.2f}" \
                if n in warm else "-"
            r = f"{rl[n]['BLEU']:.2f} / {rl[n]['AL']:.2f} / {rl[n]['LAAL']:.2f} / {_length_ratio(rl[n]):.2f}" \
                if n in rl else "-"
            verdict = "-"
            if n in rl and len(warm) >= 1:
                ref = _interpolate([(warm[v]["AL"], warm[v]["BLEU"]) for v in warm], rl[n]["AL"])
                if ref is not None:
                    verdict = (f"{'yes' if rl[n]['BLEU'] > ref else 'no'} ({rl[n]['BLEU'] - ref:+.2f} BLEU against the "
                               "warm-up's curve at the same AL)")
                else:  # outside the warm-up's AL range: compare with its points of at least as much latency
                    slower = [warm[v]["BLEU"] for v in warm if warm[v]["AL"] >= rl[n]["AL"]]
                    verdict = ("yes (higher BLEU than every warm-up point with at least its AL)" if slower and
                               rl[n]["BLEU"] > max(slower) else "no (outside the warm-up's AL range, not dominating)")
            near = "-"
            if n in rl and wk:
                k = min(wk, key=lambda v: abs(wk[v]["AL"] - rl[n]["AL"]))
                near = f"wait-{k}: {wk[k]['BLEU']:.2f} / {wk[k]['AL']:.2f}"
            out.append(f"| {n} | {w} | {r} | {verdict} | {near} |")
        out += ["", _curves_compared([(warm[v]["AL"], warm[v]["BLEU"]) for v in warm],
                                     [(rl[v]["AL"], rl[v]["BLEU"]) for v in rl]), ""]
    out += ["Length: target words written / reference words over the run. AL here is SimulEval's (the rate of the "
            "reference length), so a system that writes more words, sooner, also gets a lower AL; LAAL takes the longer of "
            "the two lengths and does not reward writing more.", ""]
    return out


def _curves_compared(warm: list[tuple[float, float]], rl: list[tuple[float, float]]) -> str:
    """Curve against curve on the AL range both cover: every point of either against the other interpolated."""
    checks = [(b, _interpolate(rl, a)) for a, b in warm] + [(_interpolate(warm, a), b) for a, b in rl]
    checks = [(w, r) for w, r in checks if w is not None and r is not None]
    if not checks:
        return "The two curves share no AL range yet."
    above = sum(r > w for w, r in checks)
    return (f"On the AL range both curves cover, SeqPO's curve is above the warm-up's at {above} of {len(checks)} "
            "points (each point of either curve against the other curve interpolated at its AL).")


def _length_ratio(run: dict) -> float:
    written = sum(len(ins["prediction"].split()) for ins in run["instances"])
    return written / max(1, sum(len(ins["reference"].split()) for ins in run["instances"]))


def _interpolate(curve: list[tuple[float, float]], x: float) -> float | None:
    """BLEU of a piecewise-linear curve (AL, BLEU) at AL = x; None outside its AL range."""
    curve = sorted(curve)
    if len(curve) == 1:
        return curve[0][1] if abs(curve[0][0] - x) < 1e-9 else None
    for (x0, y0), (x1, y1) in zip(curve, curve[1:]):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return None


# ---- driver ----------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    from simulmt.cli import add_dataclass_arguments

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_dataclass_arguments(parser, Plan)
    plan = Plan(**vars(parser.parse_args(argv)))
    if plan.threads:
        import torch

        torch.set_num_threads(plan.threads)
    deadline = time.time() + plan.max_minutes * 60 if plan.max_minutes else None
    say(json.dumps(asdict(plan)))
    finished = True
    if not plan.report_only:
        for name in plan.methods.split(","):
            if name not in METHODS:
                raise SystemExit(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
            todo = [s for t, s, n in run_specs(plan, name) if not (result_dir(plan, name, t, s) / SCORES).is_file()]
            if not todo:
                continue
            adapter = train(plan, name, deadline)
            if adapter is None or not evaluate_method(plan, name, adapter, deadline):
                finished = False
                say(f"{name}: time is up; rerun to continue")
                break
        if "expost" in plan.methods.split(",") and (deadline is None or time.time() < deadline):
            slot_lengths(plan)
    write_report(plan)
    return 0 if finished else 3


if __name__ == "__main__":
    sys.exit(main())
