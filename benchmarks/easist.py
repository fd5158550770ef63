"""EASiST for gemma-3-270m En->De end to end: the interleaved text stage, its policy head, the three speech
stages, and their scores, written to ``docs/easist.md``.

    .venv/bin/python benchmarks/easist.py                       # every stage not done yet, then the page
    .venv/bin/python benchmarks/easist.py --max-minutes 150     # start no stage after 150 minutes
    .venv/bin/python benchmarks/easist.py --report-only         # the page from the committed results

Every stage is one ``simulmt`` command (or the synthesiser), run as its own process and listed on the page
exactly as it ran, with its wall and CPU time. A stage whose output exists is not run again; a training stage cut
by ``--max-minutes`` saves a checkpoint and the next run resumes it (``--resume``). Scores, training cards and the
commands go to ``--results`` (committed); audio, checkpoints and logs stay in ``--work``. A checkout starts with
an empty ``--work``, so each finished stage's result (final models, evaluation runs; not audio, which is
regenerated in minutes) is also kept under ``RESULTS/kept`` and put back into ``--work`` when missing: commit it,
and a fresh clone continues where the last one stopped. Ship a result with ``scripts/ship_adapter.py WORK/head
...`` and ``scripts/ship_speech_model.py WORK/sp-policy ...`` once it is worth it.

The data, fixed in advance (no choice is made on a test set):

* text stage: Multi30k train lines ``--text-first`` .. (after the ones the expost adapter it starts from saw),
  ``--text-pairs`` of them, laid out with ``--schedule``: ``mixed`` is half wait-k (``--k-mix``: long tails after
  the last read), half read-n (``--n-mix``: chunks of several words, each followed by the target words proportional
  to the source read so far); ``read-n`` is read-n only. Then the policy head on the next ``--head-pairs`` lines,
  with the model's own oracle labels. Why ``read-n``: served by the learned policy, the model writes a chunk until
  it ends it itself, and the wait-k half teaches it to end a chunk after one word whatever it has read; the head
  then reads several words per chunk and the model falls behind and drops source (the mixed run's learned
  policy wrote 0.64-0.68 target words per reference word against wait-3's 0.89). read-n teaches it to catch up;
* the speech-simul stage takes the same schedule (``read-n``: no ``--k-mix``);
* speech: the text stage's first ``--speech-pairs`` source lines spoken by espeak-ng
  (simulmt.finetune.speech.synth), or, with ``--speech-first N``, Multi30k train lines N .. N + ``--speech-pairs`` - 1
  (a corpus larger than the text stage's);
  the test set is Multi30k test2016's first ``--speech-test-lines`` lines spoken with another seed;
* with ``--ctc-steps N``, a cheap CTC stage (``finetune --recipe speech-ctc``: the adapter against the LLM's token
  embeddings, or with ``--ctc-head free`` a linear layer of its own; no LLM forward) starts the adapter before align;
  with ``--speech-held-out N``, the spoken corpus's last N utterances are kept out of ctc and align, and the frozen
  LLM's transcripts of them after each stage are scored (token error rate): does the LLM understand the adapter?
* scores: Multi30k test2016's first ``--test-lines`` lines (text), wait-k and the learned policy at every tau, the
  shipped interleaved adapter on the same lines for comparison, and the speech model on the spoken test lines,
  compared with text at the audio's word times (``benchmarks/speech_vs_text.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Plan:
    data: str = str(ROOT.parent / "shared" / "data")
    work: str = str(ROOT / "runs" / "easist")
    results: str = str(ROOT / "docs" / "easist")
    model: str = "gemma-3-270m"
    start_adapter: str = "gemma-3-270m-expost-kmix-en-de"  # the text stage continues it ("" : a fresh LoRA)
    # another adapter scored on the same lines ("": none). It was the shipped gemma-3-270m-interleaved-en-de until
    # the read-n run's model replaced it (session 11); the pages keep those scores as "shipped before"
    compare_adapter: str = ""
    text_first: int = 9101  # 1-based Multi30k train line where the text stage's pairs start
    text_pairs: int = 2400
    head_pairs: int = 600
    schedule: str = "mixed"  # text stage and speech-simul: mixed (wait-k over k_mix + read-n over n_mix) or read-n
    k_mix: str = "1,2,3,5,7"
    n_mix: str = "1,2,3,4"
    batch_size: int = 8
    grad_accum: int = 4
    test_lines: int = 300
    ks: str = "1,3,5,7"
    taus: str = "0.3,0.5,0.7,0.9"
    speech_pairs: int = 1200
    # 1-based Multi30k train line where the spoken corpus starts (0: the text stage's own lines are spoken). More
    # speech than the text stage's 2,400 lines needs its own range: session 12's 1,200 utterances were too few
    speech_first: int = 0
    speech_test_lines: int = 150
    encoder: str = "tiny.en"
    adapter_hidden: int = 512
    # a cheap CTC stage before align (simulmt.speech.ctc; 0: none, as the session-12 runs): the adapter against the
    # LLM's token embeddings
    ctc_steps: int = 0
    ctc_head: str = "tied"  # the ctc stage's scorer: the LLM's rows (tied, sessions 13-14) or a free layer
    # the spoken corpus's last N utterances: not trained on by ctc and align, whose transcripts of them are scored
    speech_held_out: int = 0
    # train the speech encoder's top N layers with the adapter in ctc, align and simul (0: frozen, as sessions 12-13)
    speech_encoder_layers: int = 0
    speech_encoder_lr: float = 2e-4
    align_steps: int = 300
    simul_steps: int = 200
    policy_utterances: int = 300
    speech_ks: str = "2,4,6"  # wait-k over audio blocks
    eval_batch: int = 32
    threads: int = 2
    max_minutes: float | None = None
    stop_before: str = ""  # a stage's name: run the stages before it, not it or any after it ("": all)
    report_only: bool = False


def say(message: str) -> None:
    print(f"easist: {message}", file=sys.stderr, flush=True)


# ---- data ------------------------------------------------------------------------------------------------------
def lines(path: Path, first: int, count: int | None) -> list[str]:
    rows = path.read_text(encoding="utf-8").splitlines()[first - 1:]
    return rows if count is None else rows[:count]


def write_data(plan: Plan) -> Path:
    """The text stage's, the head's, the test sets' and (with ``--speech-first``) the spoken corpus's line files
    under WORK/data (once; again when a file the plan names is missing)."""
    out = Path(plan.work) / "data"
    head_first = plan.text_first + plan.text_pairs
    files = [("text", "train", plan.text_first, plan.text_pairs), ("head", "train", head_first, plan.head_pairs),
             ("test", "test2016", 1, plan.test_lines), ("speech-test", "test2016", 1, plan.speech_test_lines)]
    if plan.speech_first:
        files.append(("speech", "train", plan.speech_first, plan.speech_pairs))
    if (out / "done").is_file() and all((out / f"{name}.en").is_file() for name, *_ in files):
        return out
    out.mkdir(parents=True, exist_ok=True)
    m30k = Path(plan.data) / "multi30k"
    for name, stem, first, count in files:
        for lang in ("en", "de"):
            rows = lines(m30k / f"{stem}.{lang}", first, count)
            if len(rows) < count:
                raise SystemExit(f"{m30k / stem}.{lang} has too few lines for {name}: {len(rows)} < {count}")
            (out / f"{name}.{lang}").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (out / "done").write_text("")
    return out


def audio_list(manifest: Path, out: Path) -> tuple[Path, Path]:
    """A speech corpus's WAV list and references (``evaluate --source-audio``), in manifest order."""
    rows = [json.loads(line) for line in manifest.read_text(encoding="utf-8").splitlines() if line.strip()]
    wavs, refs = out / "test.list", out / "test.de"
    wavs.write_text("\n".join(str((manifest.parent / r["audio"]).resolve()) for r in rows) + "\n")
    refs.write_text("\n".join(r["target"] for r in rows) + "\n", encoding="utf-8")
    return wavs, refs


# ---- stages ----------------------------------------------------------------------------------------------------
@dataclass
class Stage:
    name: str
    done: Path  # the stage is done when this exists
    command: list[str]
    resumable: Path | None = None  # a checkpoint: when it exists, the command gets --resume
    timed: bool = False  # the command takes --max-minutes
    keep: tuple[str, ...] = ()  # paths under WORK kept under RESULTS/kept once the stage finishes
    consumed_by: Path | None = None  # the next stage's result, which holds this one's (its kept copy is dropped)

    @property
    def finished(self) -> bool:
        if self.name != "text":
            return self.done.exists()
        card = self.done.parent.parent / "training.json"  # a text run cut by its time limit saves its adapter too
        complete = card.is_file() and not json.loads(card.read_text()).get("stopped_by_time_limit", False)
        return complete and (self.done.exists() or (self.consumed_by is not None and self.consumed_by.exists()))


def stages(plan: Plan) -> list[Stage]:
    w, d = Path(plan.work), Path(plan.work) / "data"
    cli = [sys.executable, "-m", "simulmt"]
    synth = [sys.executable, "-m", "simulmt.finetune.speech.synth", "corpus"]
    start = ["--init-adapter", plan.start_adapter] if plan.start_adapter else []
    if plan.schedule not in ("mixed", "read-n"):
        raise SystemExit(f"--schedule is mixed or read-n, got {plan.schedule!r}")
    wait_k = ["--k-mix", plan.k_mix] if plan.schedule == "mixed" else []  # speech-simul: read-n without a k-mix
    head = str(w / "head" / "adapter")
    spoken = "speech" if plan.speech_first else "text"  # the lines the speech corpus speaks (write_data)
    speech = ["--corpus", str(w / "speech-train" / "manifest.jsonl"), "--model", plan.model, "--adapter", head,
              "--encoder", plan.encoder, "--adapter-hidden", str(plan.adapter_hidden)]
    grid = ["--layouts", "interleaved", "--policies", "wait-k,learned", "--ks", plan.ks, "--taus", plan.taus,
            "--no-offline", "--batch-size", str(plan.eval_batch), "--dtype", "float32"]
    text_eval = ["--source", str(d / "test.en"), "--reference", str(d / "test.de"), "--model", plan.model, *grid]
    out = [
        Stage("text", w / "text" / "adapter" / "adapter_config.json", [
            *cli, "finetune", "--train-source", str(d / "text.en"), "--train-target", str(d / "text.de"),
            "--model", plan.model, "--recipe", "interleaved", "--policy", plan.schedule, *wait_k,
            "--n-mix", plan.n_mix, *start, "--batch-size", str(plan.batch_size), "--grad-accum", str(plan.grad_accum),
            "--epochs", "1", "--save-steps", "10", "--eval-lines", "0", "--output", str(w / "text")],
            resumable=w / "text", timed=True, keep=("text/adapter", "text/training.json"),
            consumed_by=w / "head" / "adapter" / "policy_head.safetensors"),  # the head's adapter holds the LoRA
        Stage("head", w / "head" / "adapter" / "policy_head.safetensors", [
            *cli, "finetune", "--train-source", str(d / "head.en"), "--train-target", str(d / "head.de"),
            "--model", plan.model, "--recipe", "policy-head", "--head-labels", "oracle",
            "--init-adapter", str(w / "text" / "adapter"), "--output", str(w / "head")],
            keep=("head/adapter", "head/training.json")),
        Stage("text-eval", w / "eval-text" / "results.json", [
            *cli, "evaluate", *text_eval, "--adapter", head, "--output", str(w / "eval-text")], keep=("eval-text",)),
    ]
    out += [
        Stage("speech-data", w / "speech-train" / "manifest.jsonl", [
            *synth, str(d / f"{spoken}.en"), str(d / f"{spoken}.de"), str(w / "speech-train"), "--limit",
            str(plan.speech_pairs)]),
        Stage("speech-test-data", w / "speech-test" / "manifest.jsonl", [
            *synth, str(d / "speech-test.en"), str(d / "speech-test.de"), str(w / "speech-test"), "--seed", "1"]),
    ]
    held_out = ["--held-out", str(plan.speech_held_out)] if plan.speech_held_out else []
    tune = (["--encoder-layers", str(plan.speech_encoder_layers), "--encoder-lr", str(plan.speech_encoder_lr)]
            if plan.speech_encoder_layers else [])
    if plan.ctc_steps:
        out.append(Stage("speech-ctc", w / "sp-ctc" / "model" / "speech.json", [
            *cli, "finetune", "--recipe", "speech-ctc", *speech, "--steps", str(plan.ctc_steps), "--batch-size", "8",
            "--lr", "1e-3", "--ctc-head", plan.ctc_head, *held_out, *tune, "--save-steps", "50",
            "--output", str(w / "sp-ctc")],
            resumable=w / "sp-ctc" / "checkpoint.pt", timed=True, keep=("sp-ctc/model", "sp-ctc/training.json")))
    from_ctc = ["--speech-adapter", str(w / "sp-ctc" / "model")] if plan.ctc_steps else []
    out += [
        Stage("speech-align", w / "sp-align" / "model" / "speech.json", [
            *cli, "finetune", "--recipe", "speech-align", *speech, *from_ctc, *held_out, *tune, "--steps",
            str(plan.align_steps), "--batch-size", "8", "--lr", "1e-3", "--save-steps", "10", "--output", str(w / "sp-align")],
            resumable=w / "sp-align" / "checkpoint.pt", timed=True, keep=("sp-align/model", "sp-align/training.json")),
        Stage("speech-simul", w / "sp-simul" / "model" / "speech.json", [
            *cli, "finetune", "--recipe", "speech-simul", *speech, "--speech-adapter", str(w / "sp-align" / "model"),
            "--n-mix", plan.n_mix, *wait_k, *tune, "--steps", str(plan.simul_steps), "--batch-size", "8",
            "--lr", "5e-4", "--save-steps", "10", "--output", str(w / "sp-simul")],
            resumable=w / "sp-simul" / "checkpoint.pt", timed=True, keep=("sp-simul/model", "sp-simul/training.json")),
        Stage("speech-policy", w / "sp-policy" / "model" / "speech.json", [
            *cli, "finetune", "--recipe", "speech-policy", *speech, "--speech-adapter", str(w / "sp-simul" / "model"),
            "--head-labels", "oracle", "--limit", str(plan.policy_utterances), "--output", str(w / "sp-policy")],
            keep=("sp-policy/model", "sp-policy/training.json")),
        Stage("speech-eval", w / "eval-speech" / "results.json", [
            *cli, "evaluate", "--source-audio", str(w / "speech-test" / "test.list"), "--reference",
            str(w / "speech-test" / "test.de"), "--speech-model", str(w / "sp-policy" / "model"), "--layouts",
            "interleaved", "--policies", "wait-k,learned", "--ks", plan.speech_ks, "--taus", plan.taus,
            "--no-offline", "--batch-size", str(plan.eval_batch), "--dtype", "float32", "--output",
            str(w / "eval-speech")], keep=("eval-speech",)),
        Stage("speech-bench", Path(plan.results) / "speech-bench.txt", [
            *cli, "bench", "--audio", str(w / "speech-test" / "test.list"), "--speech-model",
            str(w / "sp-policy" / "model"), "--lines", "20", "--policy", "wait-k,learned", "--k", "4", "--tau", "0.5",
            "--threads", str(plan.threads)]),
        Stage("speech-vs-text", Path(plan.results) / "speech_vs_text.md", [
            sys.executable, str(ROOT / "benchmarks" / "speech_vs_text.py"), "--text", str(w / "eval-text"),
            "--speech", str(w / "eval-speech"), "--manifest", str(w / "speech-test" / "manifest.jsonl"),
            "--markdown", str(Path(plan.results) / "speech_vs_text.md"), "--plot",
            str(Path(plan.results) / "speech_vs_text.png")]),
    ]
    if plan.compare_adapter:  # a comparison, not a step of the method: last
        out.append(Stage("text-eval-before", w / "eval-text-before" / "results.json", [
            *cli, "evaluate", *text_eval, "--adapter", plan.compare_adapter, "--output", str(w / "eval-text-before")],
            keep=("eval-text-before",)))
    return out


def planned(plan: Plan) -> list[Stage]:
    """The stages this run may start: all, or those before ``--stop-before``."""
    out = stages(plan)
    if not plan.stop_before:
        return out
    names = [s.name for s in out]
    if plan.stop_before not in names:
        raise SystemExit(f"--stop-before {plan.stop_before!r}: not a stage of this plan ({', '.join(names)})")
    return out[: names.index(plan.stop_before)]


def run_stage(plan: Plan, stage: Stage, deadline: float | None) -> bool:
    """Run one stage (True: it finished). Its command, times and exit status are appended to WORK/stages.jsonl."""
    command = list(stage.command)
    if stage.resumable is not None and stage.resumable.exists() and any(
            p.name.startswith("checkpoint") for p in ([stage.resumable] if stage.resumable.is_file()
                                                       else stage.resumable.iterdir())):
        command.append("--resume")
    if stage.timed and deadline is not None:
        command += ["--max-minutes", f"{max(1.0, (deadline - time.time()) / 60):.1f}"]
    if stage.name in ("speech-ctc", "speech-simul", "speech-policy"):  # one cache of encoder blocks: sp-align's
        out = Path(command[command.index("--output") + 1])
        out.mkdir(parents=True, exist_ok=True)
        if not (out / "blocks").exists():
            blocks = Path(plan.work) / "sp-align" / "blocks"  # absent when sp-align was restored from RESULTS/kept
            blocks.mkdir(parents=True, exist_ok=True)
            (out / "blocks").symlink_to(blocks.resolve())
    say(f"{stage.name}: {shlex.join(command)}")
    env = {**os.environ, "OMP_NUM_THREADS": str(plan.threads), "MKL_NUM_THREADS": str(plan.threads)}
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
    capture = stage.name == "speech-bench"
    proc = subprocess.run(command, env=env, cwd=ROOT, text=True, stdout=subprocess.PIPE if capture else None)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if capture and proc.returncode == 0:
        stage.done.parent.mkdir(parents=True, exist_ok=True)
        stage.done.write_text(proc.stdout)
    record = {"stage": stage.name, "command": shlex.join(_portable(command, plan)), "returncode": proc.returncode,
              "wall_seconds": round(time.time() - started, 1), "cpu_seconds": round(cpu, 1)}
    with open(Path(plan.work) / "stages.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
    if stage.name == "speech-test-data" and proc.returncode == 0:
        audio_list(stage.done, stage.done.parent)
    return proc.returncode == 0 and stage.finished


def _portable(command: list[str], plan: Plan) -> list[str]:
    """The command as a reader would type it from the repository root."""
    out = []
    for part in command:
        part = ".venv/bin/python" if part == sys.executable else part
        part = part.replace(str(ROOT) + "/", "")
        out.append(part.replace(str(Path(plan.data).resolve()), "../shared/data"))
    return [".venv/bin/simulmt", *out[3:]] if out[1:3] == ["-m", "simulmt"] else out


# ---- kept results: a fresh checkout continues ---------------------------------------------------------------------
# not kept: checkpoints and caches; the tokenizer an adapter saves (33 MB for Gemma, rebuilt from the base model on
# load) and the model card peft writes
NOT_KEPT = ("checkpoint*", "blocks", "*.tmp", "*.partial", ".lock", "tokenizer.json", "README.md")


def _copy(src: Path, dst: Path, slim: bool = False) -> None:
    """Copy a file or a folder (without checkpoints and caches) whole or not at all: into ``dst.partial``, then
    renamed, so a copy cut short is never taken for a result. ``slim``: an adapter's LoRA weights in bfloat16, as
    shipped adapters are (half the size; added tokens' rows stay float32)."""
    partial = dst.with_name(dst.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, partial, ignore=shutil.ignore_patterns(*NOT_KEPT))
        weights = partial / "adapter_model.safetensors"
        if slim and weights.is_file():
            from simulmt.adapters import save_bfloat16_weights

            save_bfloat16_weights(weights, weights)
    else:
        shutil.copyfile(src, partial)
    if dst.is_dir():
        shutil.rmtree(dst)
    partial.replace(dst)


def _identity(plan: Plan, stage: Stage) -> str:
    """What made a kept result: the stage's command, with the work and results folders named, not spelled, and
    the content hash of every input file it names (the plan writes WORK/data from its own settings)."""
    def named(part: str) -> str:
        for folder, name in ((plan.work, "WORK"), (plan.results, "RESULTS")):
            try:
                return str(Path(name) / Path(part).resolve().relative_to(Path(folder).resolve()))
            except ValueError:  # not a path under that folder
                continue
        return part

    command = shlex.join(_portable([stage.command[0], *map(named, stage.command[1:])], plan))
    inputs = [hashlib.sha256(Path(part).read_bytes()).hexdigest()[:16] for part in stage.command[1:]
              if Path(part).is_file()]  # the interpreter aside; paths absolute or relative to the current folder
    return command + "".join(f" #{digest}" for digest in inputs)


def keep(plan: Plan, stage: Stage) -> None:
    """Copy a finished stage's results from WORK to RESULTS/kept (committed with the page), with the command that
    made them."""
    kept = Path(plan.results) / "kept"
    for rel in stage.keep:
        if (Path(plan.work) / rel).exists():
            _copy(Path(plan.work) / rel, kept / rel, slim=True)
    if stage.keep:
        (kept / f"{stage.name}.command").write_text(_identity(plan, stage) + "\n")
    for earlier in stages(plan):  # a result the next stage's holds is not kept twice (the text stage's LoRA)
        if earlier.consumed_by is not None and earlier.consumed_by.exists() and (kept / earlier.name).is_dir():
            for rel in earlier.keep:
                if (kept / rel).is_dir():
                    shutil.rmtree(kept / rel)


def _kept(plan: Plan, stage: Stage) -> bool:
    """Are the stage's results kept, made by its present command?"""
    made_by = Path(plan.results) / "kept" / f"{stage.name}.command"
    return made_by.is_file() and made_by.read_text().strip() == _identity(plan, stage)


def restore(plan: Plan) -> list[str]:
    """In a fresh work folder (no stage has run there), put back the kept results of stages whose command is
    still the plan's; returns what was restored. A work folder in use is left alone: delete a stage's output
    there and it runs again."""
    if (Path(plan.work) / "stages.jsonl").exists():
        return []
    kept, restored = Path(plan.results) / "kept", []
    for stage in stages(plan):
        if not (kept / f"{stage.name}.command").is_file():
            continue
        if not _kept(plan, stage):
            say(f"{stage.name}: the kept result was made by another command; it runs again")
            continue
        for rel in stage.keep:
            src, dst = kept / rel, Path(plan.work) / rel
            if src.exists() and not dst.exists():
                _copy(src, dst)
                restored.append(rel)
    return restored


# ---- the page --------------------------------------------------------------------------------------------------
def collect(plan: Plan) -> None:
    """Copy what the page shows from WORK into RESULTS (scores, training cards, the stage log)."""
    w, r = Path(plan.work), Path(plan.results)
    r.mkdir(parents=True, exist_ok=True)
    for folder in ("eval-text", "eval-text-before", "eval-speech"):
        for name in ("results.md", "results.json", "bleu_laal.png"):
            if (w / folder / name).is_file():
                (r / folder).mkdir(exist_ok=True)
                shutil.copyfile(w / folder / name, r / folder / name)
    for run in ("text", "head", "sp-ctc", "sp-align", "sp-simul", "sp-policy"):
        if (w / run / "training.json").is_file():
            (r / "training").mkdir(exist_ok=True)
            shutil.copyfile(w / run / "training.json", r / "training" / f"{run}.json")
    if (w / "stages.jsonl").is_file():
        shutil.copyfile(w / "stages.jsonl", r / "stages.jsonl")


def _section(title: str, path: Path) -> list[str]:
    if not path.is_file():
        return [f"## {title}", "", "Not run yet.", ""]
    text = path.read_text(encoding="utf-8").strip().splitlines()
    text = [line for line in text if not line.startswith("# ")]  # the file's own title
    return [f"## {title}", "", *text, ""]


def _held_out_section(training: Path) -> list[str]:
    """The held-out utterances after the ctc and align stages: the CTC path's token error rate along the ctc run,
    and what the frozen LLM writes when it reads them and is asked for the transcript."""
    cards = {run: json.loads((training / f"{run}.json").read_text()) for run in ("sp-ctc", "sp-align")
             if (training / f"{run}.json").is_file()}
    cards = {run: card for run, card in cards.items() if "held_out_transcript_token_error_rate" in card}
    if not cards:
        return []
    held = next(iter(cards.values())).get("options", {}).get("held_out", "?")
    out = ["", f"### Does the LLM understand the adapter? ({held} held-out spoken training-range utterances)", "",
           "After each stage, the frozen LLM reads each held-out utterance whole and is asked for the English "
           "transcript (greedy); token error rate = edits over reference tokens.", "",
           "| after | LLM transcript token error rate |", "|---|---:|",
           *(f"| {run} | {card['held_out_transcript_token_error_rate']:.3f} |" for run, card in cards.items()), ""]
    ctc = cards.get("sp-ctc", {})
    points = [h for h in ctc.get("loss_history", []) if "held_out_token_error_rate" in h]
    if points:
        out += [f"The ctc stage's own best CTC path (against the LLM's embeddings of {ctc.get('vocabulary', '?')} "
                "training tokens), along its run:", "", "| step | train loss | CTC path token error rate |",
                "|---:|---:|---:|", *(f"| {h['step']} | {h['loss']} | {h['held_out_token_error_rate']:.3f} |"
                                      for h in points), ""]
    for run, card in cards.items():
        out += [f"Examples after {run}:", ""]
        spelled = {e["reference"]: e["adapter_spells"] for e in card.get("held_out_examples", [])}
        for example in card.get("held_out_transcripts", []):
            out += [f"- {example['reference']}  ", f"  LLM: {example['llm_writes']}" + (
                f"  \n  CTC path: {spelled[example['reference']]}" if example["reference"] in spelled else "")]
        out.append("")
    return out


def write_page(plan: Plan) -> Path:
    r = Path(plan.results)
    page = ["# EASiST for gemma-3-270m En->De: the text stage, the policy head, speech", "",
            "> The runs committed for this page (made before 2026-11-29) that start from `gemma-3-270m-expost-kmix-en-de`",
            "> (`--init-adapter`, or \"the shipped adapter\") used it as at commit fbde002, the default until then: `git show",
            "> fbde002:simulmt/adapters/gemma-3-270m-expost-kmix-en-de/adapter_model.safetensors` (and `adapter_config.json`)",
            "> into a folder, and pass that folder.", "",
            "Generated by `benchmarks/easist.py` (rebuild the page with `--report-only`). Multi30k, greedy, float32; "
            "text latency in source words, speech latency in ms of audio. The plan, fixed in advance:", "",
            "```", json.dumps({k: v for k, v in asdict(plan).items()
                               if k not in ("data", "work", "results", "max_minutes", "report_only")}, indent=1), "```",
            ""]
    page += _section("Text: the new interleaved adapter with its policy head", r / "eval-text" / "results.md")
    if plan.compare_adapter or (r / "eval-text-before" / "results.md").is_file():
        title = (f"Text: {plan.compare_adapter} on the same lines" if plan.compare_adapter else
                 "Text: the interleaved adapter shipped before the read-n run (three stages of wait-k and read-n "
                 "chunks, its own head) on the same lines")
        page += _section(title, r / "eval-text-before" / "results.md")
    page += _section("Speech: the speech model on spoken test lines", r / "eval-speech" / "results.md")
    page += _section("Speech against text at the audio's word times", r / "speech_vs_text.md")
    bench = r / "speech-bench.txt"
    page += ["## Speech compute (`simulmt bench --audio`)", "", "```",
             *(bench.read_text().strip().splitlines() if bench.is_file() else ["not run yet"]), "```", ""]
    page += ["## Training", "", "| run | steps | final loss | wall min | CPU min |", "|---|---:|---:|---:|---:|"]
    for run in ("text", "head", "sp-ctc", "sp-align", "sp-simul", "sp-policy"):
        card_path = r / "training" / f"{run}.json"
        if card_path.is_file():
            card = json.loads(card_path.read_text())
            history = card.get("loss_history") or []
            loss = history[-1]["loss"] if history else card.get("fit", {}).get("train_loss")
            page.append(f"| {run} | {card.get('steps', '-')} | {loss if loss is not None else '-'} | "
                        f"{card.get('seconds', 0) / 60:.1f} | {card.get('cpu_seconds', 0) / 60:.1f} |")
    page += _held_out_section(r / "training")
    page += ["", "## Commands, as run", ""]
    log = r / "stages.jsonl"
    for line in (log.read_text().splitlines() if log.is_file() else []):
        s = json.loads(line)
        status = "" if s["returncode"] == 0 else f" (exit {s['returncode']})"
        page += [f"- {s['stage']}{status}: {s['wall_seconds'] / 60:.1f} min wall, {s['cpu_seconds'] / 60:.1f} min CPU",
                 "", f"  `{s['command']}`", ""]
    path = r.parent / f"{r.name}.md"  # docs/easist -> docs/easist.md
    path.write_text("\n".join(page) + "\n", encoding="utf-8")
    say(f"wrote {path}")
    return path


def main(argv: list[str] | None = None) -> int:
    from simulmt.cli import add_dataclass_arguments

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_dataclass_arguments(parser, Plan)
    plan = Plan(**vars(parser.parse_args(argv)))
    deadline = time.time() + plan.max_minutes * 60 if plan.max_minutes else None
    finished = True
    if not plan.report_only:
        Path(plan.work).mkdir(parents=True, exist_ok=True)
        write_data(plan)
        restored = restore(plan)
        if restored:
            say(f"restored from {Path(plan.results) / 'kept'}: {', '.join(restored)}")
        for stage in planned(plan):
            if stage.finished:
                if not _kept(plan, stage):
                    keep(plan, stage)  # a stage finished before results were kept
                continue
            if deadline is not None and time.time() > deadline:
                say(f"time is up before {stage.name}; rerun to continue")
                finished = False
                break
            if not run_stage(plan, stage, deadline):
                say(f"{stage.name} did not finish (a time limit, or an error above); rerun to continue")
                finished = False
                break
            keep(plan, stage)
        collect(plan)
    write_page(plan)
    return 0 if finished else 3


if __name__ == "__main__":
    sys.exit(main())
