"""``simulmt evaluate`` and ``simulmt score`` options: typed dataclasses, the Python API's config and the CLI's
flags; ``EvaluateOptions.grid()`` is the grid they ask for (layouts x policies x values, then the offline run)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from simulmt.errors import SimulmtError
from simulmt.core.layouts import LAYOUTS
from simulmt.metrics import DEFAULT_MS_PER_SOURCE_UNIT
from simulmt.option_fields import (asr_beam_field, asr_later_step_ms_field, asr_pause_ms_field, asr_policy_field,
                                   check_asr_later_step)
from simulmt.option_fields import (adapter_field, batch_size_field, context_pairs_field, context_tokens_field,
                                    device_field, dtype_field, head_vocabulary_field, language_field, model_field,
                                    phi_field, slot_field, threads_field)
from simulmt.core.prompt_format import language_name
from simulmt.evaluation.runs import RunSpec

GRID_POLICIES = ("wait-k", "read-n", "learned")


@dataclass(frozen=True)
class EvaluateOptions:
    source: str | None = field(default=None, metadata={
        "help": "source text, one sentence per line (required, unless --source-audio)", "metavar": "FILE"})
    source_audio: str | None = field(default=None, metadata={
        "help": "speech input instead of text: a file listing recordings (WAV, FLAC, MP3, ...: any rate, resampled "
                "to 16 kHz mono), one per line (relative to the list), line-aligned with --reference; heard by a "
                "streaming Whisper recogniser (--asr-model) that feeds the text model, or by --speech-model. Delays "
                "and latencies are then in ms of audio, and *_CA adds the compute time (the recogniser's included)",
        "metavar": "LIST"})
    asr_model: str = field(default="tiny.en", metadata={
        "help": "with --source-audio: the recogniser (a packaged Whisper: tiny.en, base; or a CTranslate2 folder)",
        "metavar": "NAME|DIR"})
    asr_step_ms: int = field(default=1000, metadata={
        "help": "with --source-audio: the recogniser transcribes again after this much new audio", "metavar": "MS"})
    asr_later_step_ms: int = asr_later_step_ms_field('with --source-audio: ')
    asr_pause_ms: int = asr_pause_ms_field('with --source-audio: ')
    asr_policy: str = asr_policy_field('with --source-audio: ')
    asr_beam: int = asr_beam_field('with --source-audio: ')
    speech_model: str | None = field(default=None, metadata={
        "help": "with --source-audio: an end-to-end speech model folder instead of the recogniser (EASiST: "
                "simulmt finetune-speech's DIR/model); its card's layout, policy and tau are the grid's defaults",
        "metavar": "DIR"})
    reference: str | None = field(default=None, metadata={
        "help": "reference translations, line-aligned with --source (required)", "metavar": "FILE"})
    output: str | None = field(default=None, metadata={
        "help": "output directory: one subdirectory per run, results.md/json, bleu_laal.png (required); "
                "rerunning into it continues unfinished runs", "metavar": "DIR"})
    model: str | None = model_field()
    adapter: str = adapter_field()
    layouts: str | None = field(default=None, metadata={
        "help": f"comma-separated layouts ({', '.join(LAYOUTS)}; default: expost,prefix; with --speech-model, the "
                f"model's own)", "metavar": "LIST"})
    policies: str | None = field(default=None, metadata={
        "help": f"comma-separated policies ({', '.join(GRID_POLICIES)}; default: wait-k; with --speech-model, the "
                f"model's own)", "metavar": "LIST"})
    ks: str = field(default="1,3,5", metadata={"help": "wait-k: comma-separated k values", "metavar": "LIST"})
    ns: str = field(default="3,5", metadata={"help": "read-n: comma-separated n values", "metavar": "LIST"})
    taus: str | None = field(default=None, metadata={
        "help": "learned: comma-separated thresholds tau of the policy head (the adapter's policy_head.safetensors; "
                "default: 0.3,0.5,0.7; with --speech-model, the model's own)", "metavar": "LIST"})
    slot: int = slot_field()
    phi: int = phi_field()
    no_offline: bool = field(default=False, metadata={
        "help": "skip the offline run (expost layout, whole source first) that gives the plot's reference line"})
    docids: str | None = field(default=None, metadata={
        "help": "long-form: the talk (document) id of each source line; consecutive lines of one id form a talk, "
                "translated as one stream (simulmt.core.talk) and scored on the whole talk: output resegmented to "
                "the reference sentences, BLEU, chrF, StreamLAAL, LongYAAL (OmniSTEval, SimulStream; the "
                "longform extra)", "metavar": "FILE"})
    context_pairs: int = context_pairs_field("with --docids")
    context_tokens: int = context_tokens_field()
    early_end: str = field(default="read", metadata={
        "help": "an end the model proposes before the source is finished (wait-k, read-n): read (read on: the "
                "default) or ban (not proposed: a pure wait-k / read-n schedule, as the papers run it); logs count "
                "each early end and its cause either way", "choices": ("read", "ban")})
    sentence_end: str = field(default="allow", metadata={
        "help": "source: before the source is finished, the target ends no more sentences (a token ending in . ? !) "
                "than the source read so far (a number's full stop stays allowed); allow: no such rule (the "
                "default)", "choices": ("allow", "source")})
    no_repeat_ngram: int = field(default=4, metadata={
        "help": "a token that would repeat an N-token sequence of the sentence is an end proposal instead (0: off)",
        "metavar": "N"})
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
    threads: int | None = threads_field()
    shard: str | None = field(default=None, metadata={
        "help": "translate only block I of N of every run's sentences (I = 1..N: a job array's index; with "
                "--docids, of its whole talks, balanced by source words), into DIR/shards/; the shard that finds "
                "all N finished merges them into the runs one process writes. "
                "Under torchrun / accelerate launch the rank gives the shard", "metavar": "I/N"})
    device: str | None = device_field()
    dtype: str = dtype_field()
    head_vocabulary: str | None = head_vocabulary_field()

    def __post_init__(self):
        self.shard_of()
        if self.threads is not None and self.threads < 1:
            raise SimulmtError(f"--threads must be at least 1, got {self.threads}")
        for name in ("batch_size", "max_words"):
            if getattr(self, name) < 1:
                raise SimulmtError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if bool(self.source) == bool(self.source_audio):
            raise SimulmtError("give exactly one of --source (text) and --source-audio (a list of recordings)")
        if self.speech_model is not None and (self.model is not None or self.adapter != "auto"):
            raise SimulmtError("--speech-model DIR carries its own LLM and adapter: give no --model / --adapter")
        if self.docids is not None and self.source_audio:
            raise SimulmtError("--docids (whole talks) takes a text --source; speech talks are not scored long-form "
                               "yet")
        self.decode_config()  # validates --no-repeat-ngram
        if self.context_pairs < 0 or self.context_tokens < 0:
            raise SimulmtError("--context-pairs and --context-tokens must be at least 0")
        if self.asr_step_ms < 1:
            raise SimulmtError(f"--asr-step-ms must be at least 1, got {self.asr_step_ms}")
        if self.asr_beam < 1:
            raise SimulmtError(f"--asr-beam must be at least 1, got {self.asr_beam}")
        check_asr_later_step(self.asr_step_ms, self.asr_later_step_ms)
        if self.asr_pause_ms < 0:
            raise SimulmtError(f"--asr-pause-ms must be at least 0 (0: off), got {self.asr_pause_ms}")
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

    def decode_config(self):
        from simulmt.core.decoding import DecodeConfig

        if self.no_repeat_ngram == 1:
            raise SimulmtError("--no-repeat-ngram is 0 (off) or at least 2")
        return DecodeConfig(no_repeat_ngram=self.no_repeat_ngram, early_end=self.early_end,
                            sentence_end=self.sentence_end)

    @property
    def unit_ms(self) -> float:
        """ms per source unit of the delays: speech delays are already in ms; text assumes ``ms_per_word``."""
        return 1.0 if self.source_audio else self.ms_per_word

    def defaults(self) -> dict[str, str]:
        """The grid's defaults: a speech model's card's (--speech-model), else the text ones."""
        if self.speech_model is None:
            return {"layouts": "expost,prefix", "policies": "wait-k", "taus": "0.3,0.5,0.7"}
        from simulmt.speech.model import read_card

        card = read_card(self.speech_model)
        return {"layouts": card.layout, "policies": card.policy, "taus": str(card.tau)}

    def _given(self, name: str) -> str:
        value = getattr(self, name)
        return self.defaults()[name] if value is None else value

    @property
    def layout_names(self) -> tuple[str, ...]:
        names = _name_list(self._given("layouts"), "layouts")
        unknown = [n for n in names if n not in LAYOUTS]
        if unknown:
            raise SimulmtError(f"--layouts: unknown layout(s) {', '.join(unknown)}; choose from: {', '.join(LAYOUTS)}")
        return names

    @property
    def policy_names(self) -> tuple[str, ...]:
        names = _name_list(self._given("policies"), "policies")
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
        taus = self._given("taus")
        try:
            values = tuple(float(v) for v in taus.split(",") if v.strip())
        except ValueError:
            raise SimulmtError(f"--taus takes comma-separated numbers within 0..1, got {taus!r}") from None
        if not values or any(not 0.0 <= v <= 1.0 for v in values):
            raise SimulmtError(f"--taus takes comma-separated numbers within 0..1, got {taus!r}")
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
