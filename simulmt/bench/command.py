"""``simulmt bench``: what streaming costs, per layout and policy, measured in one run with a real model.

For each of the first N sentences of a file, the same model decodes greedily:

* **offline**: read the whole source, then write (``prefix`` layout: prompt | source | opener | target, every
  token fed once): the lower bound of compute;
* every **configuration** (layout x policy), freely, as it would stream;
* every configuration's own output and schedule **replayed through offline decoding** (teacher forced: the same
  target tokens, read everything first), so the cost of streaming is separated from differences in output length.

Two comparisons come out of it, every figure a ratio of totals over the same sentences:

1. *free decoding*: a configuration's free run vs offline free decoding (outputs may differ in length);
2. *same output*: a configuration's free run vs offline decoding of exactly its output.

Per configuration: tokens fed per sentence, GFLOPs per sentence (median, quartiles, range; docs/design.md §4), wall
milliseconds per target token. Runs of one sentence are interleaved (offline, then each configuration, then the
replays) so that a load change on a shared machine hits all of them alike; one warm-up translation runs before
anything is timed. ``--output DIR`` writes ``DIR/bench.json`` (settings, per-sentence records, summaries, ratios)
and ``DIR/bench.png`` (box plots of GFLOPs per sentence, as in ExPosST's Figure 8).

    simulmt bench --model gemma-3-270m --source talk.en --lines 10 --layouts expost,prefix --policy wait-k --k 3 \\
        --output runs/bench10
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

from simulmt import __version__
from simulmt.errors import SimulmtError
from simulmt.core.layouts import LAYOUTS, make_layout
from simulmt.option_fields import (adapter_field, device_field, dtype_field, head_vocabulary_field, k_field,
                                    language_field, model_field, n_field, phi_field, slot_field)
from simulmt.core.placed import Role
from simulmt.core.policies import POLICIES, Offline, Policy, make_policy
from simulmt.core.prompt_format import language_name
from simulmt.text.text_input import read_lines, require_text

if typing.TYPE_CHECKING:
    from simulmt.core.session import StreamingSession
    from simulmt.translator import Translator

OFFLINE = "offline"
OFFLINE_LAYOUT = "prefix"  # offline decoding: contiguous positions, nothing is ever fed twice
DEFAULT_LAYOUTS = "expost,prefix,naive,conversation,gpe"  # simulmask: naive's cost (ALiBi aside)

HELP = "measure the compute cost of streaming per layout and policy, as ratios to offline decoding"
DESCRIPTION = (
    "Decode the first N sentences of FILE offline and with every layout/policy configuration, replay each "
    "configuration's output through offline decoding, and report tokens fed, GFLOPs per sentence and wall ms per "
    "target token, each as a ratio to offline decoding (of the same sentences, and of the same output).")


def _names(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))


@dataclass(frozen=True)
class BenchOptions:
    model: str | None = model_field()
    adapter: str = adapter_field()
    source: str | None = field(default=None, metadata={
        "help": "text file with one source sentence per line (required)", "metavar": "FILE"})
    lines: int = field(default=10, metadata={"help": "benchmark the first N non-empty lines", "metavar": "N"})
    layouts: str = field(default=DEFAULT_LAYOUTS, metadata={
        "help": f"comma-separated layouts to measure ({', '.join(LAYOUTS)})", "metavar": "LIST"})
    policy: str = field(default="wait-k", metadata={
        "help": "comma-separated streaming policies (wait-k, read-n); offline decoding is always the reference",
        "metavar": "LIST"})
    k: int = k_field()
    n: int = n_field()
    slot: int = slot_field()
    phi: int = phi_field()
    source_lang: str = language_field("en", "source")
    target_lang: str = language_field("de", "target")
    output: str | None = field(default=None, metadata={
        "help": "directory for bench.json and bench.png (created); without it the tables are only printed",
        "metavar": "DIR"})
    streams: str | None = field(default=None, metadata={
        "help": "comma-separated stream counts (e.g. 1,4,16): measure many streams on one model instead (aggregate "
                "target tokens/s, ms per word p50/p95, KV cache memory, each vs the first count; the first layout "
                "and policy; give --lines at least 4 x the largest count)", "metavar": "LIST"})
    audio: str | None = field(default=None, metadata={
        "help": "speech instead of text: a recording (WAV, FLAC, MP3, ...) or a list of them (one per line); "
                "measures RTF, encoder ms per audio second and LLM ms per target token, streaming vs offline "
                "(--policy wait-k,learned; --speech-model)", "metavar": "AUDIO|LIST"})
    speech_model: str | None = field(default=None, metadata={
        "help": "with --audio: an end-to-end speech model folder (EASiST) instead of the Whisper recogniser "
                "feeding the text model (the default; its layout: the first of --layouts)", "metavar": "DIR"})
    tau: float = field(default=0.5, metadata={"help": "with --audio and --policy learned: the policy's threshold"})
    taus: str | None = field(default=None, metadata={
        "help": "with --audio and --policy learned: several thresholds, comma-separated, replacing --tau (one "
                "configuration each; the report adds their mean, as EASiST averages over its latency levels)",
        "metavar": "LIST"})
    threads: int | None = field(default=None, metadata={
        "help": "torch CPU threads (default: torch's choice); fix it to compare runs on a shared machine"})
    device: str | None = device_field()
    dtype: str = dtype_field()
    head_vocabulary: str | None = head_vocabulary_field()

    def __post_init__(self):
        if self.audio is not None:
            self._check_speech()
            return
        if not self.source:
            raise SimulmtError("--source FILE is required (one source sentence per line), or --audio for speech")
        if self.lines < 1:
            raise SimulmtError(f"--lines must be at least 1, got {self.lines}")
        for name in ("k", "n", "slot", "phi"):
            if getattr(self, name) < 1:
                raise SimulmtError(f"--{name} must be at least 1, got {getattr(self, name)}")
        if self.streams is not None:
            counts = self.stream_counts
            if not counts or min(counts) < 1:
                raise SimulmtError(f"--streams takes positive stream counts, e.g. 1,4,16; got {self.streams!r}")
        if self.threads is not None and self.threads < 1:
            raise SimulmtError(f"--threads must be at least 1, got {self.threads}")
        if not self.layout_names:
            raise SimulmtError("--layouts is empty; give at least one of: " + ", ".join(LAYOUTS))
        for name in self.layout_names:
            if name not in LAYOUTS:
                raise SimulmtError(f"unknown layout {name!r} in --layouts; choose from: {', '.join(LAYOUTS)}")
        if not self.policy_names:
            raise SimulmtError("--policy is empty; give wait-k or read-n")
        for name in self.policy_names:
            if name == OFFLINE:
                raise SimulmtError("offline decoding is always measured as the reference; --policy takes the "
                                   "streaming policies (wait-k, read-n)")
            if name not in POLICIES:
                raise SimulmtError(f"unknown policy {name!r} in --policy; choose from: wait-k, read-n")
        language_name(self.source_lang)
        language_name(self.target_lang)

    def _check_speech(self) -> None:
        if self.source or self.streams:
            raise SimulmtError("--audio measures speech: it takes no --source or --streams")
        for name in self.policy_names:
            if name not in ("wait-k", "learned"):
                raise SimulmtError(f"--audio: policy {name!r}; speech streams with wait-k (over blocks, or a "
                                   f"spelling model's words) or learned")
        for tau in self.tau_values:
            if not 0 <= tau <= 1:
                raise SimulmtError(f"--tau must be within 0..1, got {tau}")
        if self.k < 1:
            raise SimulmtError(f"--k must be at least 1, got {self.k}")

    @property
    def stream_counts(self) -> list[int]:
        try:
            return [int(x) for x in _names(self.streams or "")]
        except ValueError:
            raise SimulmtError(f"--streams takes comma-separated integers, e.g. 1,4,16; got {self.streams!r}") from None

    @property
    def tau_values(self) -> tuple[float, ...]:
        if self.taus is None:
            return (self.tau,)
        try:
            values = tuple(dict.fromkeys(float(x) for x in _names(self.taus)))  # (0.5 and 0.50: one configuration)
        except ValueError:
            raise SimulmtError(f"--taus takes comma-separated numbers, e.g. 0.3,0.5,0.7; got {self.taus!r}") from None
        if not values:
            raise SimulmtError("--taus is empty")
        return values

    @property
    def layout_names(self) -> tuple[str, ...]:
        return _names(self.layouts)

    @property
    def policy_names(self) -> tuple[str, ...]:
        return _names(self.policy)


# ---- measurements ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    """One sentence decoded once: what it cost and what it wrote."""

    tokens_fed: int
    flops: float
    wall_ms: float
    target_tokens: int  # target tokens accepted (the end token is proposed, never fed)
    target_words: int
    forward_calls: int
    prediction: str
    delays: tuple[int, ...]

    @property
    def gflops(self) -> float:
        return self.flops / 1e9

    def to_json(self) -> dict:
        out = asdict(self)
        out["delays"] = list(self.delays)
        return out


@dataclass(frozen=True)
class Configuration:
    layout: str
    policy: str  # policy registry name (wait-k, read-n, offline)

    def name(self, k: int, n: int) -> str:
        if self.policy == OFFLINE:
            return OFFLINE
        return f"{self.layout}/" + make_policy(self.policy, k=k, n=n).describe()


@dataclass
class ConfigurationResult:
    name: str
    layout: str
    policy: str
    runs: list[Run] = field(default_factory=list)  # free decoding, one per sentence
    same_output: list[Run] = field(default_factory=list)  # its output replayed through offline decoding


@dataclass
class Bench:
    settings: dict
    sentences: list[dict]  # line number (1-based), source, words
    results: list[ConfigurationResult]  # offline first
    skipped: list[dict]  # sentences left out of every configuration, with the error

    @property
    def offline(self) -> ConfigurationResult:
        return self.results[0]


def _measure(session: "StreamingSession", text: str) -> Run:
    start = time.perf_counter()
    result = session.run(text)
    wall = (time.perf_counter() - start) * 1000.0
    targets = sum(1 for t in session.state.tokens if t.role is Role.TARGET)
    return Run(result.tokens_fed, result.flops, round(wall, 3), targets, len(result.delays), result.forward_calls,
               result.prediction, tuple(result.delays))


class ReplayMismatchError(SimulmtError):
    """A teacher-forced replay did not write the streamed output (a bug in the engine, never skipped)."""


def _offline_replay(translator: "Translator", streamed: "StreamingSession", text: str) -> Run:
    """The streamed output, teacher forced through offline decoding: the same words, every token fed once."""
    forced = [(t.token_id, t.unit) for t in streamed.state.tokens if t.role is Role.TARGET]
    forced.append((translator.fmt.end_id, -1))
    run = _measure(translator.session(OFFLINE_LAYOUT, Offline(), forced=forced), text)
    wrote = " ".join(w.text for w in streamed.written).split()
    if run.prediction.split() != wrote:
        raise ReplayMismatchError(
            f"the offline replay wrote {run.prediction!r}, not the streamed output {' '.join(wrote)!r} (layout "
            f"{streamed.layout.describe()}): teacher forcing is broken")
    return run


def benchmark(translator: "Translator", sentences: list[str], layouts: tuple[str, ...], policies: tuple[str, ...],
              *, k: int = 3, n: int = 3, slot: int = 16, phi: int = 256, line_numbers: list[int] | None = None,
              progress: Callable[[int], None] | None = None,
              warn: Callable[[str], None] | None = None) -> Bench:
    """Measure every configuration on every sentence (one warm-up translation first); see the module docstring.

    A sentence that fails in any configuration (e.g. too long for the model's context) is left out of all of
    them, so that every ratio compares the same sentences; it is listed in ``Bench.skipped``."""
    if not sentences:
        raise SimulmtError("no sentences to benchmark")
    line_numbers = line_numbers or list(range(1, len(sentences) + 1))
    configs = [Configuration(OFFLINE_LAYOUT, OFFLINE)]
    configs += [Configuration(layout, policy) for layout in layouts for policy in policies]
    results = [ConfigurationResult(c.name(k, n), c.layout, c.policy) for c in configs]

    def session(config: Configuration) -> "StreamingSession":
        policy: Policy = Offline() if config.policy == OFFLINE else make_policy(config.policy, k=k, n=n)
        return translator.session(make_layout(config.layout, slot=slot, phi=phi), policy)

    def labelled(stage: str, measure: Callable[[], Run]) -> Run:
        try:
            return measure()
        except ReplayMismatchError:
            raise
        except SimulmtError as exc:
            raise SimulmtError(f"{stage}: {exc}") from exc

    def one_sentence(text: str) -> list[tuple[Run, Run]]:
        """(free run, offline replay of its output) per configuration; all free runs first, then the replays."""
        streamed = []
        for config in configs:
            s = session(config)
            streamed.append((config, s, labelled(config.name(k, n), lambda: _measure(s, text))))
        return [(run, run if config.policy == OFFLINE  # offline decoding of offline's own output is itself
                 else labelled(f"{config.name(k, n)} (offline replay)", lambda: _offline_replay(translator, s, text)))
                for config, s, run in streamed]

    try:  # warm-up (the first forward is slow), on the shortest sentence; a failure is reported below
        translator.session(OFFLINE_LAYOUT, Offline()).run(min(sentences, key=len))
    except SimulmtError:
        pass
    kept, skipped = [], []
    for number, text in zip(line_numbers, sentences):
        try:
            pairs = one_sentence(text)
        except ReplayMismatchError:
            raise
        except SimulmtError as exc:
            skipped.append({"line": number, "source": text, "error": str(exc)})
            if warn is not None:
                warn(f"line {number} is left out of every configuration: {exc}")
        else:
            kept.append({"line": number, "source": text, "words": len(text.split())})
            for result, (run, replay) in zip(results, pairs):
                result.runs.append(run)
                result.same_output.append(replay)
        if progress is not None:
            progress(1)
    if not kept:
        raise SimulmtError(f"no sentence could be benchmarked; the first error: {skipped[0]['error']}")
    settings = {"model": translator.name, "layouts": list(layouts), "policies": list(policies), "k": k, "n": n,
                "slot": slot, "phi": phi, "offline_layout": OFFLINE_LAYOUT, "sentences": len(kept)}
    return Bench(settings, kept, results, skipped)


# ---- summaries (pure functions of the per-sentence records) -------------------------------------------------------
def _spread(values: list[float]) -> dict:
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
    return {"median": statistics.median(values), "q1": q1, "q3": q3, "min": min(values), "max": max(values),
            "total": sum(values)}


def summarize(runs: list[Run]) -> dict:
    """Per-sentence distributions and totals of one configuration's runs."""
    tokens = sum(r.target_tokens for r in runs)
    wall = sum(r.wall_ms for r in runs)
    return {
        "tokens_fed": _spread([r.tokens_fed for r in runs]),
        "gflops": _spread([r.gflops for r in runs]),
        "wall_ms": _spread([r.wall_ms for r in runs]),
        "target_tokens": tokens,
        "wall_ms_per_target_token": wall / tokens if tokens else None,
    }


def ratios(runs: list[Run], reference: list[Run]) -> dict:
    """Totals of ``runs`` over totals of ``reference`` (same sentences); ms per target token over ms per token."""
    def over(a: float, b: float) -> float | None:
        return a / b if b else None

    mine, ref = summarize(runs), summarize(reference)
    per_token = (None if mine["wall_ms_per_target_token"] is None or not ref["wall_ms_per_target_token"]
                 else mine["wall_ms_per_target_token"] / ref["wall_ms_per_target_token"])
    return {"tokens_fed": over(mine["tokens_fed"]["total"], ref["tokens_fed"]["total"]),
            "gflops": over(mine["gflops"]["total"], ref["gflops"]["total"]),
            "wall_ms_per_target_token": per_token}


def signature(settings: dict) -> str:
    """One line saying how the numbers were made (sacrebleu-style)."""
    keys = ("model", "policies", "k", "n", "slot", "phi", "offline_layout", "sentences", "threads", "device",
            "dtype", "head_vocabulary", "torch", "simulmt")
    parts = []
    for key in keys:
        if key in settings and settings[key] is not None:
            value = settings[key]
            parts.append(f"{key}:{','.join(value) if isinstance(value, list) else value}")
    return "|".join(parts)


def to_json(bench: Bench) -> dict:
    offline = bench.offline.runs
    configurations = []
    for result in bench.results:
        configurations.append({
            "name": result.name, "layout": result.layout, "policy": result.policy,
            "summary": summarize(result.runs),
            "vs_offline": ratios(result.runs, offline),
            "same_output_offline_summary": summarize(result.same_output),
            "vs_offline_same_output": ratios(result.runs, result.same_output),
            "runs": [r.to_json() for r in result.runs],
            "same_output_offline_runs": [r.to_json() for r in result.same_output],
        })
    return {"signature": signature(bench.settings), "settings": bench.settings, "sentences": bench.sentences,
            "skipped": bench.skipped, "configurations": configurations,
            "notes": {
                "vs_offline": "free decoding of the configuration vs offline free decoding of the same sentences "
                              "(ratio of totals; outputs may differ in length)",
                "vs_offline_same_output": "free decoding of the configuration vs its own output teacher forced "
                                          "through offline decoding (ratio of totals)",
                "wall_ms_per_target_token": "total wall ms / total target tokens; its ratio divides the two",
                "flops": "2 x non-embedding params per token + 4 x layers x attention width per visible key + LM "
                         "head where logits are computed (simulmt.core.runner.ComputeModel)"}}


# ---- report ------------------------------------------------------------------------------------------------------
def _x(value: float | None) -> str:
    return "n/a" if value is None else f"x{value:.2f}"


def _g(value: float) -> str:
    return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3g}"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def print_report(bench: Bench, out: TextIO, terminal: bool = False) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, highlight=False, emoji=False, width=None if terminal else 150,
                      force_terminal=terminal, no_color=not terminal)
    offline = bench.offline.runs
    free = Table(title="1. free decoding vs offline free decoding (same sentences)", box=box.SIMPLE_HEAD)
    for header in ("configuration", "tokens fed/sent. median [min-max]", "ratio", "GFLOPs/sent. median [q1-q3]",
                   "ratio", "ms/target token", "ratio", "target tokens"):
        free.add_column(header, justify="left" if header == "configuration" else "right")
    for result in bench.results:
        s, r = summarize(result.runs), ratios(result.runs, offline)
        t, g = s["tokens_fed"], s["gflops"]
        free.add_row(result.name, f"{t['median']:.0f} [{t['min']:.0f}-{t['max']:.0f}]", _x(r["tokens_fed"]),
                     f"{_g(g['median'])} [{_g(g['q1'])}-{_g(g['q3'])}]", _x(r["gflops"]),
                     _ms(s["wall_ms_per_target_token"]), _x(r["wall_ms_per_target_token"]), str(s["target_tokens"]))
    same = Table(title="2. same output: each configuration vs its own output replayed through offline decoding",
                 box=box.SIMPLE_HEAD)
    for header in ("configuration", "tokens fed: stream / offline", "ratio", "GFLOPs/sent. median: stream / offl.",
                   "ratio", "ms/target token: stream / offl.", "ratio"):
        same.add_column(header, justify="left" if header == "configuration" else "right")
    for result in bench.results:
        s, o, r = summarize(result.runs), summarize(result.same_output), ratios(result.runs, result.same_output)
        same.add_row(result.name, f"{s['tokens_fed']['total']:.0f} / {o['tokens_fed']['total']:.0f}",
                     _x(r["tokens_fed"]), f"{_g(s['gflops']['median'])} / {_g(o['gflops']['median'])}",
                     _x(r["gflops"]), f"{_ms(s['wall_ms_per_target_token'])} / {_ms(o['wall_ms_per_target_token'])}",
                     _x(r["wall_ms_per_target_token"]))
    console.print(free)
    console.print(same)
    console.print(f"ratios are of totals over the {len(bench.sentences)} sentences; offline = {OFFLINE_LAYOUT} layout, "
                  f"read everything then write")
    console.print(f"signature: {signature(bench.settings)}", soft_wrap=True)
    if bench.skipped:
        console.print(f"left out: {len(bench.skipped)} sentence(s): "
                      + "; ".join(f"line {s['line']} ({s['error']})" for s in bench.skipped))


def plot(bench: Bench, path: Path) -> None:
    """Box plots of GFLOPs per sentence (free decoding) and of the per-sentence ratio to offline decoding of the
    same output, one row per configuration (horizontal, like ExPosST's Figure 8)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise SimulmtError(f"the box plot needs matplotlib (pip install matplotlib); {path} was not written "
                           f"(bench.json was)") from exc
    results = bench.results[::-1]  # offline at the top
    names = [r.name for r in results]
    fig = Figure(figsize=(11, 1.2 + 0.55 * len(results)), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [3, 2]})
    left.boxplot([[r.gflops for r in result.runs] for result in results], orientation="horizontal",
                 tick_labels=names, widths=0.6)
    left.set_xlabel("GFLOPs per sentence (free decoding)")
    left.grid(axis="x", alpha=0.3)
    right.boxplot([[a.flops / b.flops for a, b in zip(result.runs, result.same_output) if b.flops]
                   for result in results], orientation="horizontal", tick_labels=names, widths=0.6)
    right.axvline(1.0, color="gray", linestyle="--", linewidth=1)
    right.set_xlabel("GFLOPs / offline decoding of the same output")
    right.grid(axis="x", alpha=0.3)
    fig.suptitle(f"compute per sentence: {bench.settings['model']}, {len(bench.sentences)} sentences", fontsize=11)
    fig.savefig(path, dpi=120)


def write_outputs(bench: Bench, directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    data, image = directory / "bench.json", directory / "bench.png"
    data.write_text(json.dumps(to_json(bench), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    plot(bench, image)
    return data, image


# ---- the command -------------------------------------------------------------------------------------------------
def read_sentences(path: str, lines: int) -> tuple[list[str], list[int]]:
    """The first ``lines`` non-empty lines of a file, and their 1-based line numbers (simulmt.text.text_input's
    rule; a line that is not UTF-8 is an error naming the file and the line)."""
    sentences, numbers = [], []
    for line in read_lines(path, "source"):
        text = require_text([line], f"the source file {path}")[0]  # only the lines used must be UTF-8
        if text.strip():
            sentences.append(" ".join(text.split()))
            numbers.append(line.number)
            if len(sentences) == lines:
                break
    return sentences, numbers


def run(options: BenchOptions, parser: argparse.ArgumentParser, load_translator: Callable[..., "Translator"]) -> int:
    """``load_translator(model=, adapter=, source_lang=, target_lang=, device=, dtype=)``: the CLI's model loader."""
    import torch
    from tqdm import tqdm

    if options.audio is not None:
        return _run_speech(options)
    try:
        sentences, numbers = read_sentences(options.source, options.lines)
    except SimulmtError as exc:
        parser.error(str(exc))
    if not sentences:
        parser.error(f"{options.source} has no non-empty line")
    if not _output_ok(options):
        return 1
    if options.threads is not None:
        torch.set_num_threads(options.threads)
    try:
        translator = load_translator(model=options.model, adapter=options.adapter,
                                     source_lang=options.source_lang, target_lang=options.target_lang,
                                     device=options.device, dtype=options.dtype,
                                     head_vocabulary=options.head_vocabulary)
    except SimulmtError as exc:
        print(f"simulmt: error: {exc}", file=sys.stderr)
        return 1
    if options.streams is not None:
        return _run_streams(options, translator, sentences)
    configurations = 1 + len(options.layout_names) * len(options.policy_names)
    print(f"simulmt bench: {len(sentences)} sentences x {configurations} configurations (+ offline replays) on "
          f"{translator.name}, {torch.get_num_threads()} threads", file=sys.stderr, flush=True)
    with tqdm(total=len(sentences), unit="sentence", file=sys.stderr, dynamic_ncols=True) as bar:
        try:
            bench = benchmark(translator, sentences, options.layout_names, options.policy_names, k=options.k,
                              n=options.n, slot=options.slot, phi=options.phi, line_numbers=numbers,
                              progress=bar.update, warn=lambda m: bar.write(f"simulmt: {m}", file=sys.stderr))
        except SimulmtError as exc:
            bar.close()
            print(f"simulmt: error: {exc}", file=sys.stderr)
            return 1
    bench.settings.update(source=options.source, threads=torch.get_num_threads(),
                          device=translator.runner.device_label, dtype=translator.dtype,
                          head_vocabulary=translator.head_vocabulary,
                          torch=torch.__version__.split("+")[0], simulmt=__version__)
    print_report(bench, sys.stdout, terminal=sys.stdout.isatty())
    if options.output:
        try:
            data, image = write_outputs(bench, Path(options.output))
        except (OSError, SimulmtError) as exc:
            print(f"simulmt: error: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {data} and {image}")
    return 1 if bench.skipped else 0


def _output_ok(options: BenchOptions) -> bool:
    """--output can be written (or created): checked before the model loads and the benchmark runs."""
    from simulmt.output_dir import check_output_dir

    if options.output:
        try:
            check_output_dir(options.output)
        except SimulmtError as exc:
            print(f"simulmt: error: {exc}", file=sys.stderr)
            return False
    return True


def _run_streams(options: BenchOptions, translator: "Translator", sentences: list[str]) -> int:
    """``--streams``: the same sentences once per stream count (simulmt.bench.throughput)."""
    import torch

    from simulmt.bench import throughput

    kwargs = dict(layout=options.layout_names[0], policy=options.policy_names[0], k=options.k, n=options.n,
                  slot=options.slot, phi=options.phi)
    print(f"simulmt bench: {len(sentences)} sentences, {kwargs['layout']} {kwargs['policy']}, streams "
          f"{options.stream_counts} on {translator.name} ({translator.dtype}, {torch.get_num_threads()} threads)",
          file=sys.stderr, flush=True)
    points = throughput.measure_all(
        translator, sentences, options.stream_counts, kwargs,
        progress=lambda p: print(f"  {p.streams} streams: {p.tokens_per_s:.2f} target tok/s", file=sys.stderr,
                                 flush=True))
    print(throughput.markdown(points))
    if options.output:
        out = Path(options.output)
        out.mkdir(parents=True, exist_ok=True)
        settings = {**kwargs, "model": translator.name, "source": options.source, "lines": len(sentences),
                    "dtype": translator.dtype, "threads": torch.get_num_threads(),
                    "device": translator.runner.device_label, "head_vocabulary": translator.head_vocabulary,
                    "torch": torch.__version__.split("+")[0], "simulmt": __version__}
        path = out / "bench-streams.json"
        path.write_text(json.dumps({"settings": settings, "points": [p.to_json() for p in points]}, indent=2) + "\n",
                        encoding="utf-8")
        print(f"wrote {path}")
    return 0


def _run_speech(options: BenchOptions) -> int:
    """``--audio``: the speech model streamed over the files (simulmt.bench.speech)."""
    import torch
    from tqdm import tqdm

    from simulmt.core.policies import make_policy
    from simulmt.bench import speech as speech_bench
    from simulmt.speech.loading import load_speech

    if not _output_ok(options):
        return 1
    if options.threads is not None:
        torch.set_num_threads(options.threads)
    try:
        files = speech_bench.audio_files(options.audio)[: options.lines]
        from simulmt.speech.wav import read_audio

        clips = [(str(f), read_audio(str(f))) for f in files]
        speech, defaults = load_speech(options.speech_model, model=options.model, adapter=options.adapter,
                                       source_lang=options.source_lang, target_lang=options.target_lang,
                                       device=options.device, dtype=options.dtype,
                                       head_vocabulary=options.head_vocabulary)
        end_to_end = options.speech_model is not None
        layout = defaults["layout"] if end_to_end else options.layout_names[0]
        if end_to_end and options.layouts != DEFAULT_LAYOUTS and options.layout_names != (layout,):
            raise SimulmtError(f"--speech-model {options.speech_model} runs the layout it was trained for "
                               f"({layout}); give no other --layouts")
        configurations = []
        for name in options.policy_names:
            if name == "learned":
                if speech.translator.policy_head is None:
                    raise SimulmtError(f"{speech.name} has no policy head: --policy learned needs one")
                configurations += [(f"learned tau={tau}", make_policy("learned", tau=tau,
                                                                       head=speech.translator.policy_head), {})
                                   for tau in options.tau_values]
            else:
                configurations.append((f"wait-{options.k} ({speech.unit})", make_policy("wait-k", k=options.k), {}))
        print(f"simulmt bench: {len(clips)} utterances x {1 + len(configurations)} configurations (+ offline "
              f"replays) on {speech.name}, {torch.get_num_threads()} threads", file=sys.stderr, flush=True)
        with tqdm(total=len(clips), unit="utterance", file=sys.stderr, dynamic_ncols=True) as bar:
            bench = speech_bench.speech_benchmark(speech, clips, configurations, progress=bar.update, layout=layout,
                                                  replay=end_to_end)
    except SimulmtError as exc:
        print(f"simulmt: error: {exc}", file=sys.stderr)
        return 1
    bench["settings"] = {"model": speech.name, "speech_model": options.speech_model or "whisper cascade",
                         "layout": layout, "dtype": speech.translator.dtype,
                         "threads": torch.get_num_threads(), "block_ms": speech.piece_ms,
                         "device": speech.translator.runner.device_label,
                         "head_vocabulary": getattr(speech.translator, "head_vocabulary", None),
                         "torch": torch.__version__.split("+")[0],
                         "simulmt": __version__}
    speech_bench.print_report(bench, sys.stdout)
    if options.output:
        print(f"wrote {speech_bench.write_outputs(bench, Path(options.output))}")
    return 0
