"""Evaluate a grid of layouts x policies on a line-aligned test set, resumably, and score it.

    simulmt evaluate --source tst.en --reference tst.de --layouts expost,prefix --ks 1,3,5 --output runs/x

    runs/x/
      expost-slot16.wait-1/  config.json  instances.log  scores.json     one directory per run
      prefix.wait-3/         ...
      offline/               ...                                         expost layout, Offline policy
      results.md  results.json  bleu_laal.png                            the whole grid

* A *run* is one (layout, policy, k or n) over the sentences. ``instances.log`` is SimulEval's JSON-lines log
  (``index, prediction, delays, elapsed, prediction_length, reference, source, source_length``, plus simulmt's
  cost counters). Each finished sentence is appended, flushed and fsynced at once, so a killed run loses at most
  the sentence in flight; rerunning continues after the last complete line (a torn last line is cut off and
  translated again). ``config.json`` says what produced the log; a rerun with other settings is refused.
* ``scores.json`` is a pure function of ``instances.log`` and the recorded settings (``simulmt score`` redoes it
  without the model): BLEU and chrF (sacrebleu, with signatures), the latency metrics of :mod:`simulmt.metrics`
  (SimulEval 1.1.4 definitions, in source words), their computation-aware variants ``*_CA`` in ms (delay x
  ``ms_per_word`` + wall time elapsed when the word was written), mean tokens fed, GFLOPs and wall ms.
* ``simuleval --score-only --output RUN`` reads the same log (a ``config.yaml`` saying text-to-text is written
  for it); it agrees on BLEU, AL, LAAL, AP, DAL and the offsets, not on ATD (it reports 0 for a text log) nor on
  the ``_CA`` variants (it would take ``elapsed`` for delays in source units).

Sharded (``--shard I/N``, or the rank under torchrun / accelerate launch): shard I translates its block of every
run's sentences into ``DIR/shards/I-of-N/<run>/`` (resumable like any run); the shard that finds all N finished
merges them into ``DIR/<run>/``, which is then what one process writes (the same ``instances.log`` lines in the same
order, timings aside; the same scores and signatures), and writes the grid's reports. Rerunning any shard's command
merges again.

Python: ``evaluate(translator, EvaluateOptions(...)) -> list[RunResult]``; ``score_path(path)`` rescores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from statistics import mean
from typing import TYPE_CHECKING, TextIO

from simulmt.errors import SimulmtError
from simulmt.core.layouts import LAYOUTS
from simulmt.core.policies import POLICIES, make_policy
from simulmt.core.registry import main_parameter, parameters
from simulmt.metrics import DEFAULT_MS_PER_SOURCE_UNIT, LATENCY_METRICS, bleu, chrf, latency_scores
from simulmt.metrics.latency import average_token_delay_ms
from simulmt.option_fields import (adapter_field, batch_size_field, device_field, dtype_field, language_field,
                                    model_field, phi_field, slot_field)
from simulmt.core.prompt_format import language_name
from simulmt.core.session import DecodeConfig, Translation
from simulmt.text_input import require_text, split_lines

if TYPE_CHECKING:
    from simulmt.translator import Translator

LOG, CONFIG, SCORES, SIMULEVAL_CONFIG = "instances.log", "config.json", "scores.json", "config.yaml"
RESULTS_MD, RESULTS_JSON, PLOT = "results.md", "results.json", "bleu_laal.png"
GRID_POLICIES = ("wait-k", "read-n", "learned")

# config.json keys that must match for a rerun to continue a run (lines and ms_per_word may change)
IDENTITY_KEYS = ("run", "model", "adapter", "dtype", "source_lang", "target_lang", "layout", "policy", "k", "n",
                 "slot", "phi", "decode", "simulmt", "source_sha256", "reference_sha256", "shard", "first_line")
SHARDS = "shards"
TIMING_KEYS = ("elapsed", "wall_ms")  # the only fields of an instance that depend on the machine and the moment

LATENCY_SIGNATURE = ("SimulEval-1.1.4-definitions|unit:word|ref_len:yes|empty:skipped|"
                     "CA:delay*{ms:g}ms+elapsed,ms")


# ---- options -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EvaluateOptions:
    source: str | None = field(default=None, metadata={
        "help": "source text, one sentence per line (required, unless --source-audio)", "metavar": "FILE"})
    source_audio: str | None = field(default=None, metadata={
        "help": "speech input instead of text: a file listing 16 kHz mono WAV files, one per line (relative to the "
                "list), line-aligned with --reference; with --speech-model (default: the shipped one). Delays and "
                "latencies are then in ms of audio, and *_CA adds the compute time", "metavar": "LIST"})
    speech_model: str | None = field(default=None, metadata={
        "help": "with --source-audio: a speech model folder (simulmt finetune-speech's DIR/model)", "metavar": "DIR"})
    reference: str | None = field(default=None, metadata={
        "help": "reference translations, line-aligned with --source (required)", "metavar": "FILE"})
    output: str | None = field(default=None, metadata={
        "help": "output directory: one subdirectory per run, results.md/json, bleu_laal.png (required); "
                "rerunning into it continues unfinished runs", "metavar": "DIR"})
    model: str | None = model_field()
    adapter: str = adapter_field()
    layouts: str = field(default="expost,prefix", metadata={
        "help": f"comma-separated layouts ({', '.join(LAYOUTS)})", "metavar": "LIST"})
    policies: str = field(default="wait-k", metadata={
        "help": f"comma-separated policies ({', '.join(GRID_POLICIES)})", "metavar": "LIST"})
    ks: str = field(default="1,3,5", metadata={"help": "wait-k: comma-separated k values", "metavar": "LIST"})
    ns: str = field(default="3,5", metadata={"help": "read-n: comma-separated n values", "metavar": "LIST"})
    taus: str = field(default="0.3,0.5,0.7", metadata={
        "help": "learned: comma-separated thresholds tau of the policy head (the adapter's policy_head.safetensors)",
        "metavar": "LIST"})
    slot: int = slot_field()
    phi: int = phi_field()
    no_offline: bool = field(default=False, metadata={
        "help": "skip the offline run (expost layout, whole source first) that gives the plot's reference line"})
    source_lang: str = language_field("en", "source")
    target_lang: str = language_field("de", "target")
    lines: int | None = field(default=None, metadata={
        "help": "evaluate the first N lines only (default: all)", "metavar": "N"})
    ms_per_word: float = field(default=DEFAULT_MS_PER_SOURCE_UNIT, metadata={
        "help": "source rate assumed by the computation-aware latency (*_CA): ms per source word"})
    max_words: int = field(default=256, metadata={
        "help": "refuse, before the model loads, a source line longer than this many words (a test set holds one "
                "sentence per line; a talk on one line would run for hours)", "metavar": "N"})
    batch_size: int = batch_size_field()
    shard: str | None = field(default=None, metadata={
        "help": "translate only block I of N of every run's sentences (I = 1..N: a job array's index), into "
                "DIR/shards/; the shard that finds all N finished merges them into the runs one process writes. "
                "Under torchrun / accelerate launch the rank gives the shard", "metavar": "I/N"})
    device: str | None = device_field()
    dtype: str = dtype_field()

    def __post_init__(self):
        self.shard_of()
        for name in ("batch_size", "max_words"):
            if getattr(self, name) < 1:
                raise SimulmtError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if bool(self.source) == bool(self.source_audio):
            raise SimulmtError("give exactly one of --source (text) and --source-audio (a list of WAV files)")
        for name in ("reference", "output"):
            if not getattr(self, name):
                raise SimulmtError(f"--{name} is required")
        self.grid()  # validates --layouts, --policies, --ks and --ns
        for name in ("slot", "phi"):
            if getattr(self, name) < 1:
                raise SimulmtError(f"--{name} must be at least 1, got {getattr(self, name)}")
        if self.lines is not None and self.lines < 1:
            raise SimulmtError(f"--lines must be at least 1, got {self.lines}")
        if not (self.ms_per_word > 0 and math.isfinite(self.ms_per_word)):
            raise SimulmtError(f"--ms-per-word must be a positive number, got {self.ms_per_word}")
        language_name(self.source_lang)
        language_name(self.target_lang)

    @property
    def unit_ms(self) -> float:
        """ms per source unit of the delays: speech delays are already in ms; text assumes ``ms_per_word``."""
        return 1.0 if self.source_audio else self.ms_per_word

    @property
    def layout_names(self) -> tuple[str, ...]:
        names = _name_list(self.layouts, "layouts")
        unknown = [n for n in names if n not in LAYOUTS]
        if unknown:
            raise SimulmtError(f"--layouts: unknown layout(s) {', '.join(unknown)}; choose from: {', '.join(LAYOUTS)}")
        return names

    @property
    def policy_names(self) -> tuple[str, ...]:
        names = _name_list(self.policies, "policies")
        if "offline" in names:
            raise SimulmtError("--policies: offline is not a grid policy; the offline run is made once, with the "
                               "expost layout, unless --no-offline")
        unknown = [n for n in names if n not in GRID_POLICIES]
        if unknown:
            raise SimulmtError(f"--policies: unknown policy(ies) {', '.join(unknown)}; "
                               f"choose from: {', '.join(GRID_POLICIES)}")
        return names

    def shard_of(self) -> tuple[int, int] | None:
        """(I, N) of ``--shard I/N``; else, under a launcher of several processes, (RANK + 1, WORLD_SIZE)."""
        if self.shard is None:
            world = int(os.environ.get("WORLD_SIZE", "1") or 1)
            return (int(os.environ.get("RANK", "0")) + 1, world) if world > 1 else None
        try:
            i, n = (int(part) for part in self.shard.split("/"))
        except ValueError:
            raise SimulmtError(f"--shard takes I/N (e.g. 2/4), got {self.shard!r}") from None
        if not 1 <= i <= n:
            raise SimulmtError(f"--shard {self.shard}: I must be in 1..N")
        return i, n

    @property
    def k_values(self) -> tuple[int, ...]:
        return _int_list(self.ks, "ks")

    @property
    def n_values(self) -> tuple[int, ...]:
        return _int_list(self.ns, "ns")

    @property
    def tau_values(self) -> tuple[float, ...]:
        try:
            values = tuple(float(v) for v in self.taus.split(",") if v.strip())
        except ValueError:
            raise SimulmtError(f"--taus takes comma-separated numbers within 0..1, got {self.taus!r}") from None
        if not values or any(not 0.0 <= v <= 1.0 for v in values):
            raise SimulmtError(f"--taus takes comma-separated numbers within 0..1, got {self.taus!r}")
        return values

    def values_of(self, policy: str) -> tuple:
        return {"wait-k": self.k_values, "read-n": self.n_values, "learned": self.tau_values}[policy]

    def grid(self) -> list[RunSpec]:
        """layouts x (wait-k x ks, read-n x ns), then the offline run."""
        specs = []
        for layout in self.layout_names:
            for policy in self.policy_names:
                for value in self.values_of(policy):
                    specs.append(RunSpec(layout, policy, value, self.slot, self.phi))
        if not self.no_offline:
            specs.append(RunSpec("expost", "offline", None, self.slot, self.phi))
        return specs


@dataclass(frozen=True)
class ScoreOptions:
    path: str | None = field(default=None, metadata={
        "help": "a run directory (with instances.log), or a grid directory whose runs are all rescored",
        "positional": True, "metavar": "DIR"})
    ms_per_word: float | None = field(default=None, metadata={
        "help": "source rate for the computation-aware latency, ms per word (default: as each run recorded)"})

    def __post_init__(self):
        if not self.path:
            raise SimulmtError("a run or grid directory is required")
        if self.ms_per_word is not None and not (self.ms_per_word > 0 and math.isfinite(self.ms_per_word)):
            raise SimulmtError(f"--ms-per-word must be a positive number, got {self.ms_per_word}")


def _name_list(text: str, flag: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(v.strip() for v in text.split(",") if v.strip()))
    if not names:
        raise SimulmtError(f"--{flag} is empty")
    return names


def _int_list(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(dict.fromkeys(int(v) for v in _name_list(text, flag)))
    except ValueError:
        raise SimulmtError(f"--{flag} takes comma-separated whole numbers, got {text!r}") from None
    if min(values) < 1:
        raise SimulmtError(f"--{flag}: every value must be at least 1, got {text!r}")
    return values


# ---- one run of the grid -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunSpec:
    layout: str
    policy: str  # wait-k | read-n | offline
    value: int | None  # k or n
    slot: int = 16
    phi: int = 256

    @property
    def layout_label(self) -> str:
        """``expost-slot16``, ``gpe-phi64``, ``prefix``: the layout and its own parameter, if it has one."""
        parameter = main_parameter(LAYOUTS[self.layout])
        return f"{self.layout}-{parameter}{getattr(self, parameter)}" if parameter else self.layout

    @property
    def policy_label(self) -> str:
        """``wait-3``, ``read-5``, ``offline``: as the policy describes itself."""
        return make_policy(self.policy, **self._policy_options()).describe()

    @property
    def name(self) -> str:
        """The run's directory: ``expost-slot16.wait-3``, ``prefix.read-5``, ``offline``."""
        return "offline" if self.policy == "offline" else f"{self.layout_label}.{self.policy_label}"

    @property
    def family(self) -> str:
        """One curve of the plot: ``expost-slot16 wait-k``."""
        return f"{self.layout_label} {self.policy}"

    @property
    def point_label(self) -> str:
        parameter = main_parameter(POLICIES[self.policy])
        return f"{parameter}={self.value}" if parameter else self.policy

    def _policy_options(self) -> dict:
        parameter = main_parameter(POLICIES[self.policy])
        return {parameter: self.value} if parameter else {}

    def session_kwargs(self) -> dict:
        return dict(layout=self.layout, policy=self.policy, slot=self.slot, phi=self.phi, **self._policy_options())

    def settings(self) -> dict:
        """What config.json and the signature say about the run (only the parameters that apply)."""
        applied = {**self._policy_options(), **{p: getattr(self, p) for p in parameters(LAYOUTS[self.layout])}}
        return {"layout": self.layout, "policy": self.policy,
                **{key: applied.get(key) for key in ("k", "n", "tau", "slot", "phi")}}

    @classmethod
    def from_config(cls, config: dict) -> RunSpec:
        parameter = main_parameter(POLICIES[config["policy"]])
        return cls(config["layout"], config["policy"], config[parameter] if parameter else None,
                   config["slot"] or 16, config["phi"] or 256)


@dataclass
class RunResult:
    spec: RunSpec
    directory: Path
    config: dict
    scores: dict

    @property
    def name(self) -> str:
        return self.spec.name


# ---- the test set ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TestSet:
    source_path: Path
    reference_path: Path
    sources: list[str]
    references: list[str]
    source_sha256: str
    reference_sha256: str


def _read_lines(path: Path, what: str) -> tuple[list[str], str]:
    """The stripped lines of a file (simulmt.text_input's rule; a line that is not UTF-8 is an error naming the file
    and the line) and the SHA-256 of its bytes."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SimulmtError(f"cannot read the {what} file {path}: {exc.strerror or exc}") from None
    lines = require_text(split_lines(data), f"the {what} file {path}")
    return [line.strip() for line in lines], hashlib.sha256(data).hexdigest()


def _paired_lines(source: str | Path, reference: str | Path, lines: int | None, what: str) -> TestSet:
    """Line-aligned ``what`` lines (the source text, or a list of audio files) and references; the first
    ``lines``."""
    source_path, reference_path = Path(source).resolve(), Path(reference).resolve()
    sources, source_hash = _read_lines(source_path, what)
    references, reference_hash = _read_lines(reference_path, "reference")
    if len(sources) != len(references):
        raise SimulmtError(f"{what} and reference are not line-aligned: {source_path} has {len(sources)} lines, "
                           f"{reference_path} has {len(references)}")
    if not sources:
        raise SimulmtError(f"the {what} file {source_path} is empty")
    if lines is not None:
        if lines > len(sources):
            raise SimulmtError(f"--lines {lines} asks for more lines than the test set has ({len(sources)})")
        sources, references = sources[:lines], references[:lines]
    return TestSet(source_path, reference_path, sources, references, source_hash, reference_hash)


def read_audio_test_set(audio_list: str | Path, reference: str | Path, lines: int | None = None) -> TestSet:
    """A list of WAV files (one path per line, relative to the list's folder) and the line-aligned references;
    every file is checked to exist before anything runs."""
    test_set = _paired_lines(audio_list, reference, lines, "audio list")
    paths = [str((test_set.source_path.parent / e).resolve()) for e in test_set.sources]
    missing = [(i, p) for i, p in enumerate(paths, 1) if not Path(p).is_file()]
    if missing:
        raise SimulmtError(f"{len(missing)} audio file(s) of {test_set.source_path} not found, e.g. line "
                           f"{missing[0][0]}: {missing[0][1]}")
    return replace(test_set, sources=paths)


def read_test_set(source: str | Path, reference: str | Path, lines: int | None = None,
                  max_words: int | None = None) -> TestSet:
    """Line-aligned source and reference (stripped, as SimulEval reads them); the first ``lines`` of each. A source
    line of more than ``max_words`` words is refused at once: evaluation scores one sentence per line, and a talk
    on one line would run for hours before it ran out of context."""
    test_set = _paired_lines(source, reference, lines, "source")
    source_path, sources = test_set.source_path, test_set.sources
    if max_words is not None:
        for number, text in enumerate(sources, 1):
            if len(text.split()) > max_words:
                raise SimulmtError(f"line {number} of {source_path} has {len(text.split())} words, more than "
                                   f"--max-words {max_words}: evaluation scores one sentence per line (as SimulEval "
                                   f"does); split the line into sentences, or raise --max-words")
    return test_set


# ---- run directories: config, log, resume ------------------------------------------------------------------------
def run_config(spec: RunSpec, model: str, options: EvaluateOptions, test_set: TestSet) -> dict:
    from simulmt import __version__

    return {"run": spec.name, "model": model, "adapter": options.adapter, "dtype": options.dtype,
            "source_lang": options.source_lang, "target_lang": options.target_lang, **spec.settings(),
            "decode": asdict(DecodeConfig()), "simulmt": __version__,
            "source": str(test_set.source_path), "reference": str(test_set.reference_path),
            "source_sha256": test_set.source_sha256, "reference_sha256": test_set.reference_sha256,
            "lines": len(test_set.sources), "ms_per_word": options.unit_ms, "batch_size": options.batch_size,
            **({"source_type": "speech", "speech_model": options.speech_model or "shipped"} if options.source_audio
               else {"shared_prompt": True})}  # text runs: one engine per run, the prompt computed once (prompt_cache.py)


def _write_json(path: Path, data) -> None:
    """Write atomically (a kill leaves the old file or the new one, never half of one)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SimulmtError(f"cannot read {path}: {exc}") from None


def check_run_dir(directory: Path, config: dict) -> None:
    """Refuse to continue a run directory written with other settings (or of unknown origin)."""
    log, saved_path = directory / LOG, directory / CONFIG
    if not saved_path.exists():
        if log.exists() and log.stat().st_size > 0:
            raise SimulmtError(f"{directory} has an {LOG} but no {CONFIG}: its settings are unknown, so it is not "
                               f"continued; move it away or choose another --output")
        return
    saved = _read_json(saved_path)
    changed = [key for key in IDENTITY_KEYS if saved.get(key) != config.get(key)]
    if changed:
        details = "; ".join(f"{key}: {saved.get(key)!r} there, {config.get(key)!r} now" for key in changed)
        raise SimulmtError(f"{directory} was written with other settings ({details}). Its sentences are not mixed "
                           f"with new ones: choose another --output, or delete that run directory")
    done = len(read_log(log, repair=False)) if log.exists() else 0
    if done > config["lines"]:
        raise SimulmtError(f"{directory} already holds {done} finished sentences, more than the {config['lines']} "
                           f"asked for now; use --lines {done} or more, or another --output")


def read_log(path: Path, repair: bool = False, err: TextIO | None = None) -> list[dict]:
    """The finished sentences of an ``instances.log``, in order.

    The last line may be torn (the process was killed while writing it): it has no final newline, or does not
    parse. It is dropped, and with ``repair`` cut off the file so that the sentence is translated again. Any
    other broken line, or indices that are not 0, 1, 2, ..., is an error.
    """
    data = path.read_bytes()
    records, good_end, start = [], 0, 0
    while start < len(data):
        end = data.find(b"\n", start)
        last = end == -1 or end == len(data) - 1
        line = data[start:] if end == -1 else data[start:end]
        try:
            record = json.loads(line) if end != -1 else None
        except json.JSONDecodeError:
            record = None
        if record is None:
            if not last:
                raise SimulmtError(f"{path}: line {len(records) + 1} is not a JSON object; the log is damaged")
            if repair:
                with open(path, "r+b") as f:
                    f.truncate(good_end)
                    f.flush()
                    os.fsync(f.fileno())
                print(f"simulmt: {path}: dropped a torn last line (sentence {len(records)} is translated again)",
                      file=err or sys.stderr)
            break
        if not isinstance(record, dict) or record.get("index") != len(records):
            raise SimulmtError(f"{path}: line {len(records) + 1} should be the sentence with index {len(records)}, "
                               f"found {record.get('index') if isinstance(record, dict) else record!r}")
        records.append(record)
        good_end = end + 1
        start = end + 1
    return records


def instance_record(index: int, translation: Translation, reference: str) -> dict:
    """One line of instances.log: SimulEval's keys first, then simulmt's cost counters."""
    record = {"index": index, "prediction": translation.prediction, "delays": translation.delays,
              "elapsed": translation.elapsed, "prediction_length": len(translation.delays), "reference": reference,
              "source": translation.source, "source_length": translation.source_length,
              "tokens_fed": translation.tokens_fed, "flops": translation.flops, "wall_ms": translation.wall_ms,
              "forward_calls": translation.forward_calls, "cache_crops": translation.cache_crops,
              "refed_tokens": translation.refed_tokens}
    if hasattr(translation, "delays_ms"):  # speech: SimulEval's speech log, delays and source length in ms
        record.update({"delays": translation.delays_ms, "source_length": translation.duration_ms,
                       "delays_blocks": translation.delays, "encoder_ms": translation.encoder_ms,
                       "adapter_ms": translation.adapter_ms})
    if translation.error:
        record["error"] = translation.error
    return record


class _Lock:
    """An exclusive lock on a run directory, so that two processes never append to the same log."""

    def __init__(self, directory: Path):
        self.path = directory / ".lock"
        self.handle = None

    def __enter__(self):
        self.handle = open(self.path, "a")
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock
            return self
        try:
            fcntl.flock(self.handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.handle.close()
            raise SimulmtError(f"another process is writing to {self.path.parent}; wait for it or stop it") from None
        return self

    def __exit__(self, *exc):
        self.handle.close()


def translate_run(translator: "Translator", spec: RunSpec, test_set: TestSet, directory: Path, config: dict, *,
                  progress: bool = True, err: TextIO | None = None, batch_size: int = 1) -> list[dict]:
    """Translate the sentences of one run that are not in its log yet (``batch_size`` streams at a time, logged
    in order as soon as each is done); return all its instances."""
    err = err or sys.stderr
    directory.mkdir(parents=True, exist_ok=True)
    with _Lock(directory):
        check_run_dir(directory, config)
        _write_json(directory / CONFIG, config)
        (directory / SIMULEVAL_CONFIG).write_text(f"source_type: {config.get('source_type', 'text')}\n"
                                                  f"target_type: text\n", encoding="utf-8")
        log = directory / LOG
        records = read_log(log, repair=True, err=err) if log.exists() else []
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(test_set.sources), initial=len(records), desc=spec.name, unit="sent", file=err,
                       dynamic_ncols=True)
        try:
            with open(log, "ab") as f:
                start = len(records)
                remaining = (test_set.sources[i] for i in range(start, len(test_set.sources)))
                translations = translator.translate_iter(remaining, batch_size=batch_size, **spec.session_kwargs())
                for index, translation in enumerate(translations, start):  # in order, as soon as each is done
                    if translation.error:  # e.g. too long for the context: recorded, counted, reported
                        message = f"simulmt: {spec.name}: sentence {index}: {translation.error}"
                        if bar is not None:
                            bar.write(message, file=err)
                        else:
                            print(message, file=err)
                    record = instance_record(index, translation, test_set.references[index])
                    f.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
                    f.flush()
                    os.fsync(f.fileno())
                    records.append(record)
                    if bar is not None:
                        bar.update(1)
        finally:
            if bar is not None:
                bar.close()
    return records


# ---- scores ------------------------------------------------------------------------------------------------------
def _with_speech_atd(latency: dict[str, float], instances: list[dict]) -> dict[str, float]:
    """``latency`` with ATD and ATD_CA (ms) of speech instances added, in the order text runs report their metrics.

    Both are SimulEval 1.1.4's speech-input ATD (:func:`~simulmt.metrics.latency.average_token_delay_ms`) on each
    sentence's ``delays`` (ms of audio), ATD_CA also on its ``elapsed`` (wall ms), averaged over the sentences
    with a prediction (SimulEval skips empty ones; ``latency_scores`` has already refused a corpus of only those).
    """
    scored = [ins for ins in instances if ins["delays"]]
    latency = {**latency, "ATD": mean(average_token_delay_ms(ins["delays"]) for ins in scored),
               "ATD_CA": mean(average_token_delay_ms(ins["delays"], ins["elapsed"]) for ins in scored)}
    order = [*LATENCY_METRICS, *(f"{name}_CA" for name in LATENCY_METRICS)]
    return {name: latency[name] for name in order if name in latency}


def score_instances(instances: list[dict], ms_per_word: float = DEFAULT_MS_PER_SOURCE_UNIT) -> dict:
    """Corpus scores of a run's instances (dicts as in instances.log), with the metrics' signatures.

    Speech instances (``delays_blocks`` logged; delays in ms of audio) also get ATD and ATD_CA in ms, SimulEval
    1.1.4's ATD for speech input (:func:`_with_speech_atd`); text instances get ATD in words and no ATD_CA."""
    if not instances:
        raise SimulmtError("no finished sentences to score")
    hypotheses = [ins["prediction"] for ins in instances]
    references = [ins["reference"] for ins in instances]
    bleu_score, bleu_signature = bleu(hypotheses, references)
    chrf_score, chrf_signature = chrf(hypotheses, references)
    speech = "delays_blocks" in instances[0]  # delays in ms of audio: ATD is SimulEval's speech-input ATD
    metrics = [m for m in LATENCY_METRICS if m != "ATD"] if speech else None
    latency = latency_scores(instances, metrics, computation_aware=True, ms_per_source_unit=ms_per_word)
    if speech:
        latency = _with_speech_atd(latency, instances)
    return {"BLEU": bleu_score, "chrF": chrf_score, **latency,
            "tokens_fed": mean(ins.get("tokens_fed", 0) for ins in instances),
            "gflops": mean(ins.get("flops", 0.0) for ins in instances) / 1e9,
            "wall_ms": mean(ins.get("wall_ms", 0.0) for ins in instances),
            "sentences": len(instances),
            "empty_predictions": sum(not ins["delays"] for ins in instances),
            "failed": sum(bool(ins.get("error")) for ins in instances),
            "metric_signatures": {"BLEU": bleu_signature, "chrF": chrf_signature,
                                  "latency": LATENCY_SIGNATURE.format(ms=ms_per_word)}}


def score_run(directory: Path, ms_per_word: float | None = None, write: bool = True) -> RunResult:
    """Recompute a run's scores.json from its instances.log and config.json alone."""
    directory = Path(directory)
    if not (directory / LOG).exists():
        raise SimulmtError(f"{directory} is not a run directory: it has no {LOG}")
    if not (directory / CONFIG).exists():
        raise SimulmtError(f"{directory} has no {CONFIG}, so its settings are unknown")
    config = _read_json(directory / CONFIG)
    ms = config.get("ms_per_word", DEFAULT_MS_PER_SOURCE_UNIT) if ms_per_word is None else ms_per_word
    instances = read_log(directory / LOG)
    try:
        scores = score_instances(instances, ms)
    except SimulmtError as exc:
        raise SimulmtError(f"{directory}: {exc}") from None
    metric_signatures = scores.pop("metric_signatures")
    batch = config.get("batch_size", 1)
    if batch > 1:  # computation-aware latency of a batched run: say what its elapsed times are
        metric_signatures["latency"] += f"|elapsed:in-engine,batch:{batch}"
    if config.get("shared_prompt"):  # every sentence after the first took its prompt's keys/values from the cache
        metric_signatures["latency"] += "|prompt:shared"
    signature = {"model": config["model"], "adapter": config["adapter"], "dtype": config["dtype"],
                 "source_lang": config["source_lang"], "target_lang": config["target_lang"],
                 **{key: config[key] for key in ("layout", "policy", "k", "n", "slot", "phi")},
                 "simulmt": config["simulmt"], "source": config["source"], "reference": config["reference"],
                 "lines": len(instances), "complete": len(instances) == config["lines"], "ms_per_word": ms,
                 "batch_size": batch,
                 **metric_signatures}
    scores = {"run": config["run"], **scores, "signature": signature}
    if write:
        _write_json(directory / SCORES, scores)
    return RunResult(RunSpec.from_config(config), directory, config, scores)


# ---- the grid ----------------------------------------------------------------------------------------------------
def evaluate(translator: "Translator", options: EvaluateOptions, *, progress: bool = True,
             err: TextIO | None = None) -> list[RunResult]:
    """Translate and score every run of the grid into ``options.output`` (continuing unfinished runs), write the
    grid's results.md, results.json and bleu_laal.png, and return the runs' results (by layout, policy, k or n;
    offline last: the order of ``simulmt score``)."""
    test_set = (read_audio_test_set(options.source_audio, options.reference, options.lines) if options.source_audio
                else read_test_set(options.source, options.reference, options.lines, options.max_words))
    output = Path(options.output)
    if output.exists() and not output.is_dir():
        raise SimulmtError(f"--output {output} exists and is not a directory")
    specs = options.grid()
    configs = {spec: run_config(spec, translator.name, options, test_set) for spec in specs}
    for spec in specs:  # every conflict is found before an hour of translation, not after
        if (output / spec.name).is_dir():
            check_run_dir(output / spec.name, configs[spec])
    shard = options.shard_of()
    if shard is not None:
        return _evaluate_shard(translator, options, test_set, specs, configs, shard, progress, err)
    results = []
    for spec in specs:
        translate_run(translator, spec, test_set, output / spec.name, configs[spec], progress=progress, err=err,
                      batch_size=options.batch_size)
        results.append(score_run(output / spec.name))
    results.sort(key=_grid_order)
    write_reports(output, results)
    return results


# ---- shards: one grid over several processes or machines ---------------------------------------------------------
def shard_bounds(lines: int, shard: int, shards: int) -> tuple[int, int]:
    """Sentences [start, end) of shard ``shard`` (1..N): contiguous blocks whose sizes differ by one at most."""
    return (shard - 1) * lines // shards, shard * lines // shards


def shard_config(config: dict, shard: int, shards: int) -> dict:
    """A run's config as one shard writes it: its block of the sentences, and which block it is."""
    start, end = shard_bounds(config["lines"], shard, shards)
    return {**config, "lines": end - start, "shard": f"{shard}/{shards}", "first_line": start}


def _evaluate_shard(translator, options: EvaluateOptions, test_set: TestSet, specs: list[RunSpec],
                    configs: dict, shard: tuple[int, int], progress: bool, err: TextIO | None) -> list[RunResult]:
    """Translate this shard's block of every run; merge when every shard is finished. Returns the merged runs'
    results, or [] while other shards still have work."""
    import dataclasses

    i, n = shard
    start, end = shard_bounds(len(test_set.sources), i, n)
    block = dataclasses.replace(test_set, sources=test_set.sources[start:end],
                                references=test_set.references[start:end])
    folder = Path(options.output) / SHARDS / f"{i}-of-{n}"
    for spec in specs:
        translate_run(translator, spec, block, folder / spec.name, shard_config(configs[spec], i, n),
                      progress=progress, err=err, batch_size=options.batch_size)
    return merge_shards(Path(options.output), specs, configs, n, err=err)


def merge_shards(output: Path, specs: list[RunSpec], configs: dict, shards: int,
                 err: TextIO | None = None) -> list[RunResult]:
    """If all ``shards`` shards of every run are finished, write each run as one process would have (the blocks'
    sentences in order, with their indices in the whole set), score the runs and write the grid's reports; else
    return [] and say which shards are missing."""
    err = err or sys.stderr
    blocks, missing = {}, set()
    for spec in specs:
        for i in range(1, shards + 1):
            directory = output / SHARDS / f"{i}-of-{shards}" / spec.name
            expected = shard_config(configs[spec], i, shards)
            if not (directory / CONFIG).is_file():
                missing.add(i)
                continue
            check_run_dir(directory, expected)  # a shard of another grid, or another split, is never merged
            records = read_log(directory / LOG) if (directory / LOG).exists() else []
            if len(records) < expected["lines"]:
                missing.add(i)
            blocks[spec, i] = records[:expected["lines"]]
    if missing:
        print(f"simulmt: shards {', '.join(f'{i}/{shards}' for i in sorted(missing))} not finished yet; the shard "
              f"that finishes last merges (or rerun any shard's command)", file=err)
        return []
    results = []
    (output / SHARDS).mkdir(parents=True, exist_ok=True)
    with _Lock(output / SHARDS):
        for spec in specs:
            directory = output / spec.name
            directory.mkdir(parents=True, exist_ok=True)
            check_run_dir(directory, configs[spec])
            lines = []
            for i in range(1, shards + 1):
                first = shard_config(configs[spec], i, shards)["first_line"]
                lines += [json.dumps({**record, "index": first + record["index"]}, ensure_ascii=False) + "\n"
                          for record in blocks[spec, i]]
            tmp = directory / f".{LOG}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.writelines(lines)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, directory / LOG)
            _write_json(directory / CONFIG, configs[spec])
            (directory / SIMULEVAL_CONFIG).write_text("source_type: text\ntarget_type: text\n", encoding="utf-8")
            results.append(score_run(directory))
    results.sort(key=_grid_order)
    write_reports(output, results)
    print(f"simulmt: merged {shards} shards of {len(specs)} run(s) into {output}", file=err)
    return results


def find_runs(directory: Path) -> list[Path]:
    """The run directories directly under a grid directory."""
    return [d for d in sorted(Path(directory).iterdir()) if d.is_dir() and (d / LOG).exists()]


def _grid_order(result: RunResult) -> tuple:
    spec = result.spec
    policy_rank = GRID_POLICIES.index(spec.policy) if spec.policy in GRID_POLICIES else len(GRID_POLICIES)
    return spec.policy == "offline", spec.layout_label, policy_rank, spec.value or 0


def score_path(path: str | Path, ms_per_word: float | None = None) -> tuple[list[RunResult], bool]:
    """Rescore a run directory, or every run of a grid directory (and rebuild its table and plot).

    Returns the results and whether ``path`` was a grid."""
    path = Path(path)
    if not path.is_dir():
        raise SimulmtError(f"{path} is not a directory")
    if (path / LOG).exists():
        return [score_run(path, ms_per_word)], False
    runs = find_runs(path)
    if not runs:
        raise SimulmtError(f"{path} holds no run: neither it nor a subdirectory has an {LOG}")
    results = sorted((score_run(run, ms_per_word) for run in runs), key=_grid_order)
    write_reports(path, results)
    return results, True


# ---- reports -----------------------------------------------------------------------------------------------------
# (column, key in scores, format)
TABLE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("BLEU", "BLEU", ".2f"), ("chrF", "chrF", ".2f"), ("AL", "AL", ".2f"), ("LAAL", "LAAL", ".2f"),
    ("AP", "AP", ".3f"), ("DAL", "DAL", ".2f"), ("ATD", "ATD", ".2f"), ("AL_CA ms", "AL_CA", ".0f"),
    ("LAAL_CA ms", "LAAL_CA", ".0f"), ("tokens fed", "tokens_fed", ".1f"), ("GFLOPs", "gflops", ".2f"),
    ("wall ms", "wall_ms", ".0f"), ("sentences", "sentences", "d"),
)


def table_rows(results: Iterable[RunResult]) -> tuple[list[str], list[list[str]]]:
    header = ["run"] + [title for title, _, _ in TABLE_COLUMNS]
    rows = []
    for result in results:
        row = [result.name]
        for _, key, fmt in TABLE_COLUMNS:
            value = result.scores.get(key)
            row.append("n/a" if value is None or (isinstance(value, float) and math.isnan(value))
                       else format(value, fmt))
        if not result.scores["signature"]["complete"]:
            row[0] += " (unfinished)"
        rows.append(row)
    return header, rows


def _grid_caption(results: list[RunResult]) -> str:
    first = results[0].scores["signature"]
    models = sorted({r.scores["signature"]["model"] for r in results})
    lines = sorted({r.config["lines"] for r in results})  # asked for; unfinished runs are marked in the table
    return (f"model {', '.join(models)}; {Path(first['source']).name} -> {Path(first['reference']).name}, "
            f"{'/'.join(map(str, lines))} sentences; latency in source words (SimulEval 1.1.4 definitions), "
            f"*_CA in ms at {first['ms_per_word']:g} ms per source word; simulmt {first['simulmt']}")


def results_markdown(results: list[RunResult]) -> str:
    header, rows = table_rows(results)
    out = [f"# Evaluation\n\n{_grid_caption(results)}\n", "| " + " | ".join(header) + " |",
           "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    signatures = results[0].scores["signature"]
    out += ["", f"BLEU: `{signatures['BLEU']}`  ", f"chrF: `{signatures['chrF']}`  ",
            f"latency: `{signatures['latency']}`", ""]
    return "\n".join(out)


def write_reports(directory: Path, results: list[RunResult]) -> None:
    """results.json, results.md and bleu_laal.png of a grid."""
    from simulmt.plots import plot_bleu_laal

    if not results:
        raise SimulmtError("no runs to report")
    _write_json(directory / RESULTS_JSON, {"caption": _grid_caption(results),
                                           "runs": [r.scores for r in results]})
    (directory / RESULTS_MD).write_text(results_markdown(results), encoding="utf-8")
    points = [{"family": r.spec.family, "label": r.spec.point_label, "offline": r.spec.policy == "offline",
               "BLEU": r.scores["BLEU"], "LAAL": r.scores["LAAL"], "LAAL_CA": r.scores["LAAL_CA"]}
              for r in results]
    plot_bleu_laal(points, directory / PLOT, title="; ".join(_grid_caption(results).split("; ")[:2]))


def print_table(results: list[RunResult], file: TextIO | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    header, rows = table_rows(results)
    table = Table(title="simulmt evaluate", caption=_grid_caption(results), caption_justify="left")
    for i, title in enumerate(header):
        table.add_column(title, justify="left" if i == 0 else "right", no_wrap=i == 0)
    for row in rows:
        table.add_row(*row)
    Console(file=file or sys.stdout, width=200 if not (file or sys.stdout).isatty() else None).print(table)


# ---- command line ------------------------------------------------------------------------------------------------
def run_evaluate_command(options: EvaluateOptions, parser: argparse.ArgumentParser,
                         load_translator: Callable[..., "Translator"]) -> int:
    try:  # the inputs are checked before the model loads
        if options.source_audio:
            read_audio_test_set(options.source_audio, options.reference, options.lines)
        else:
            read_test_set(options.source, options.reference, options.lines, options.max_words)
    except SimulmtError as exc:
        parser.error(str(exc))
    try:
        if options.source_audio:
            from simulmt.speech.model import SpeechTranslator, default_speech_model

            translator = SpeechTranslator.load(options.speech_model or default_speech_model(), device=options.device,
                                               dtype=options.dtype)
        else:
            translator = load_translator(model=options.model, adapter=options.adapter,
                                         source_lang=options.source_lang, target_lang=options.target_lang,
                                         device=options.device, dtype=options.dtype)
        results = evaluate(translator, options)
    except SimulmtError as exc:
        print(f"simulmt: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nsimulmt: interrupted; finished sentences are saved: rerun the same command to continue",
              file=sys.stderr)
        raise
    if not results:  # a shard whose siblings are still at work: its part is saved
        i, n = options.shard_of()
        print(f"shard {i}/{n} finished: {Path(options.output) / SHARDS / f'{i}-of-{n}'}")
        return 0
    print_table(results)
    output = Path(options.output)
    print(f"wrote {output / RESULTS_MD}, {output / RESULTS_JSON}, {output / PLOT}")
    failed = sum(r.scores["failed"] for r in results)
    if failed:
        print(f"simulmt: {failed} sentence(s) could not be translated (empty predictions, 'error' in the logs)",
              file=sys.stderr)
        return 1
    return 0


def run_score_command(options: ScoreOptions, parser: argparse.ArgumentParser) -> int:
    try:
        results, grid = score_path(options.path, options.ms_per_word)
    except SimulmtError as exc:
        print(f"simulmt: error: {exc}", file=sys.stderr)
        return 1
    print_table(results)
    path = Path(options.path)
    written = [path / "*" / SCORES, path / RESULTS_MD, path / RESULTS_JSON, path / PLOT] if grid else [path / SCORES]
    print("wrote " + ", ".join(map(str, written)))
    return 0
