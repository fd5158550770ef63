"""A reproducible offline speech corpus, synthesised from parallel text, with exact word timestamps.

Each source sentence is spoken word by word: ``espeak-ng`` says one word (one process per word), ``sox`` resamples
it to the corpus rate (and, for tempo augmentation, time-stretches it with WSOLA), espeak's leading and trailing
silence is trimmed off, and the words are laid end to end with pauses of digital silence between them::

    |edge|  word 1  |gap| word 2 |gap|   word 3   |edge|        one array of int16 samples at sample_rate
          ^start_ms ^end_ms                                      known to the sample, by construction

Every piece already has its final sample rate and tempo before it is placed, so each word's ``(start_ms, end_ms)``
is exact in the final audio: ``sample = round(ms * sample_rate / 1000)`` gives back the sample index (at 16 kHz a
millisecond is 16 samples and the ms values are exact binary fractions). Pauses and edges are divided by the tempo
too, so a tempo of 1.25 shortens the whole utterance by 1/1.25, as ``sox tempo`` on the whole would, but without
its few-millisecond drift. The clean sentence is scaled to a peak of -6 dBFS; white Gaussian noise at the chosen
SNR (relative to the mean power of the word segments) is added last and moves nothing.

Everything random (voice, rate, pitch, tempo, SNR, pauses, noise) comes from ``sha256(seed, utterance id)``, so a
corpus does not depend on ``limit`` or on the order work was done in: the same seed, espeak-ng and sox give
byte-identical audio. A corpus folder holds::

    manifest.jsonl    one JSON object per utterance, in input order (see :meth:`Utterance.record`)
    corpus.json       options, tool versions, counts, and the skipped lines (an empty source line cannot be spoken)
    audio/<id>.wav    16-bit mono PCM; <id> is the 1-based line number, zero-padded to 6 digits
    audio/<id>.json   the utterance's record and the options' key, written after the wav: it marks the wav as done,
                      so a rerun after a kill skips the finished utterances and rebuilds the same manifest

Command line::

    python -m simulmt.finetune.speech.synth corpus SOURCE TARGET OUT_DIR [--limit N] [--seed S] [--tempo 0.9,1.1] ...
    python -m simulmt.finetune.speech.synth sentence "A man is riding a bike." OUT_STEM [--voice en-us] [--rate 175] ...
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import wave
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from simulmt.errors import SimulmtError
from simulmt.speech.wav import read_wav, write_wav
from simulmt.text.text_input import read_text_lines

ESPEAK = "espeak-ng"
SOX = "sox"
INSTALL_HINT = "apt-get install espeak-ng sox"
SILENCE_THRESHOLD = 32  # |sample| <= 32 (-60 dBFS) is silence when a word is trimmed
PEAK = 16384  # each clean sentence is scaled to this peak (-6 dBFS): the same loudness, headroom for the noise

# English voices of espeak-ng 1.51 that sound different from each other (`espeak-ng --voices=en`). A "+variant"
# must follow "en", "en-us" or an accent name: espeak-ng silently ignores it after "en-gb" (and ignores unknown
# variants), which :func:`check_voices` catches. The mb-* (MBROLA) voices need the mbrola package and are left out.
DEFAULT_VOICES = ("en-us", "en-gb", "en-gb-x-rp", "en-gb-scotland", "en-gb-x-gbclan", "en-us-nyc", "en-029",
                  "en-us+f3", "en+f2", "en-us+m3", "en-gb-x-rp+f4", "en+klatt")


class NothingAudible(SimulmtError):
    """espeak-ng said nothing audible for any word of a sentence (e.g. it was punctuation only)."""


# ---- the two tools -------------------------------------------------------------------------------------------
def require_tools() -> None:
    """A :class:`SimulmtError` saying how to install espeak-ng and sox, unless both are on the PATH."""
    missing = [tool for tool in (ESPEAK, SOX) if shutil.which(tool) is None]
    if missing:
        raise SimulmtError(f"{' and '.join(missing)} not found on the PATH: synthesised speech needs espeak-ng and "
                           f"sox; install them with `{INSTALL_HINT}`")


def _run(command: list[str], stdin: bytes = b"") -> bytes:
    """The standard output of ``command``; a missing tool or a failure is a :class:`SimulmtError`."""
    try:
        done = subprocess.run(command, input=stdin, capture_output=True, check=False)
    except FileNotFoundError:
        raise SimulmtError(f"{command[0]} not found: synthesised speech needs espeak-ng and sox; install them "
                           f"with `{INSTALL_HINT}`") from None
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip()
        raise SimulmtError(f"`{shlex.join(command)}` failed (exit code {done.returncode}): {message}")
    return done.stdout


def tool_versions() -> dict[str, str]:
    """The first line of ``espeak-ng --version`` and ``sox --version`` (the audio depends on both)."""
    def first_line(output: bytes) -> str:
        return output.decode(errors="replace").strip().splitlines()[0]
    return {"espeak_ng": first_line(_run([ESPEAK, "--version"])).split("  Data at:")[0],
            "sox": first_line(_run([SOX, "--version"])).removeprefix("sox:").strip()}


# ---- one word, one sentence ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WordTiming:
    """A word and where it is spoken in its utterance's audio: samples ``[start, end)`` at the sample rate."""
    word: str
    start_ms: float
    end_ms: float

    def samples(self, sample_rate: int) -> tuple[int, int]:
        """``(start, end)`` sample indices (exact: the ms values were computed from them)."""
        return round(self.start_ms * sample_rate / 1000), round(self.end_ms * sample_rate / 1000)


def _ms(samples: int, sample_rate: int) -> float:
    return round(samples * 1000 / sample_rate, 4)  # at 16 kHz exact (a multiple of 1/16)


def trim_silence(audio: np.ndarray, threshold: int = SILENCE_THRESHOLD) -> np.ndarray:
    """``audio`` without its leading and trailing samples of magnitude <= ``threshold`` (empty if all are)."""
    loud = np.flatnonzero(np.abs(audio.astype(np.int32)) > threshold)
    return audio[loud[0]:loud[-1] + 1] if loud.size else audio[:0]


def synthesise_word(word: str, voice: str = "en-us", rate: int = 175, pitch: int = 50, *, tempo: float = 1.0,
                    sample_rate: int = 16000) -> np.ndarray:
    """One word spoken by espeak-ng, resampled (and time-stretched by ``tempo``) by sox, silence trimmed.

    Returns ``(T,)`` int16 at ``sample_rate``; empty when nothing is audible (espeak says nothing for "-")."""
    # the text goes on stdin: a word such as "-5" would be read as an option on the command line
    spoken = _run([ESPEAK, "-v", voice, "-s", str(rate), "-p", str(pitch), "--stdout"], stdin=word.encode())
    if len(spoken) <= 44:  # a WAV header and no samples
        return np.zeros(0, dtype=np.int16)
    effects = (["tempo", "-s", f"{tempo:g}"] if tempo != 1.0 else []) + ["rate", "-v", str(sample_rate)]
    # -D: no dither (it would put noise into the silence), -R: repeatable; espeak's header gives the input rate
    raw = _run([SOX, "-D", "-R", "-t", "wav", "-", "-t", "raw", "-e", "signed-integer", "-b", "16", "-c", "1",
                "-r", str(sample_rate), "-", *effects], stdin=spoken)
    return trim_silence(np.frombuffer(raw, dtype="<i2").astype(np.int16))


def synthesise_sentence(words: Sequence[str], voice: str = "en-us", rate: int = 175, pitch: int = 50, *,
                        tempo: float = 1.0, snr_db: float | None = None,
                        word_gap_ms: float | Sequence[float] = 60.0, edge_ms: float = 100.0,
                        sample_rate: int = 16000, seed: int = 0) -> tuple[np.ndarray, list[WordTiming]]:
    """Speak ``words`` one by one and join them with pauses; returns ``(audio, timings)``.

    audio: ``(T,)`` int16 at ``sample_rate``; timings: one :class:`WordTiming` per word, in order, exact to the
    sample. ``word_gap_ms`` is one pause for all, or one per pair of neighbouring words (``len(words) - 1``);
    ``edge_ms`` of silence begins and ends the audio; both are divided by ``tempo``. A word espeak-ng says nothing
    for gets ``start_ms == end_ms`` (where the previous word ended) and no pause. ``snr_db``: white Gaussian noise,
    seeded by ``seed``, at this ratio to the mean power of the word segments; None: none."""
    if not words:
        raise SimulmtError("synthesise_sentence needs at least one word")
    gaps = [float(word_gap_ms)] * (len(words) - 1) if isinstance(word_gap_ms, (int, float)) else list(word_gap_ms)
    if len(gaps) != len(words) - 1:
        raise SimulmtError(f"{len(words)} words need {len(words) - 1} pauses, got {len(gaps)}")

    def silence(ms: float) -> np.ndarray:
        return np.zeros(round(ms / tempo * sample_rate / 1000), dtype=np.int16)

    pieces = [silence(edge_ms)]
    cursor = len(pieces[0])  # samples placed so far
    spans: list[tuple[int, int]] = []  # [start, end) of each word
    for i, word in enumerate(words):
        spoken = synthesise_word(word, voice, rate, pitch, tempo=tempo, sample_rate=sample_rate)
        if spoken.size and any(end > start for start, end in spans):  # a pause before each audible word but the first
            pieces.append(silence(gaps[i - 1]))
            cursor += len(pieces[-1])
        pieces.append(spoken)
        spans.append((cursor, cursor + len(spoken)))
        cursor += len(spoken)
    if not any(end > start for start, end in spans):
        raise NothingAudible(f"espeak-ng says nothing audible for {' '.join(words)!r}")
    pieces.append(silence(edge_ms))
    clean = np.concatenate(pieces).astype(np.float64)  # (T,)

    signal = clean * (PEAK / np.abs(clean).max())
    if snr_db is not None:
        speech = np.concatenate([signal[start:end] for start, end in spans])
        noise_power = np.mean(speech ** 2) / 10 ** (snr_db / 10)
        signal = signal + np.random.default_rng(seed).standard_normal(len(signal)) * np.sqrt(noise_power)
    audio = np.clip(np.round(signal), -32768, 32767).astype(np.int16)
    timings = [WordTiming(word, _ms(start, sample_rate), _ms(end, sample_rate)) for word, (start, end) in
               zip(words, spans)]
    return audio, timings


def check_voices(voices: Sequence[str]) -> None:
    """A :class:`SimulmtError` for a voice espeak-ng does not have, or whose "+variant" it ignores (espeak-ng
    1.51 ignores unknown variants, and any variant after "en-gb": use "en+f2" for a British female voice)."""
    def say(voice: str) -> bytes:
        return _run([ESPEAK, "-v", voice, "--stdout"], stdin=b"testing")
    for voice in voices:
        try:
            spoken = say(voice)
        except SimulmtError as exc:
            raise SimulmtError(f"espeak-ng has no voice {voice!r} (see `espeak-ng --voices=en`): {exc}") from None
        if "+" in voice and spoken == say(voice.split("+")[0]):
            raise SimulmtError(f"espeak-ng ignores the variant of {voice!r} (it sounds exactly like "
                               f"{voice.split('+')[0]!r}); see `espeak-ng --voices=variant`, and put a variant "
                               f"after 'en', 'en-us' or an accent such as 'en-gb-x-rp', not after 'en-gb'")


# ---- the corpus ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SynthOptions:
    """How a corpus is spoken. Each utterance draws one voice, rate and pitch, a tempo and an SNR in their
    ``(min, max)`` ranges and each pause in ``word_gap_ms``, from ``sha256(seed, utterance id)``."""
    voices: tuple[str, ...] = DEFAULT_VOICES
    rates: tuple[int, ...] = (150, 165, 175, 190)  # espeak-ng -s: words per minute (its default: 175)
    pitches: tuple[int, ...] = (35, 50, 65)  # espeak-ng -p: 0..99 (its default: 50)
    word_gap_ms: tuple[float, float] = (50.0, 100.0)  # (min, max) of each pause between two words, at tempo 1
    edge_ms: float = 100.0  # silence before the first and after the last word, at tempo 1
    tempo: tuple[float, float] = (1.0, 1.0)  # (min, max) sox tempo factor, 2 decimals; (1, 1): none
    snr_db: tuple[float, float] | None = None  # (min, max) SNR of white noise, 0.1 dB steps; None: clean audio
    seed: int = 0
    limit: int | None = None  # only the first N lines of the files
    sample_rate: int = 16000

    def __post_init__(self):
        if not (self.voices and self.rates and self.pitches):
            raise SimulmtError("voices, rates and pitches each need at least one value")
        if not all(80 <= r <= 450 for r in self.rates):
            raise SimulmtError(f"espeak-ng rates are 80..450 words per minute, got {self.rates}")
        if not all(0 <= p <= 99 for p in self.pitches):
            raise SimulmtError(f"espeak-ng pitches are 0..99, got {self.pitches}")
        for name in ("word_gap_ms", "tempo", "snr_db"):
            low_high = getattr(self, name)
            if low_high is not None and (len(low_high) != 2 or low_high[0] > low_high[1]):
                raise SimulmtError(f"{name} is a (min, max) range, got {low_high}")
        if self.word_gap_ms[0] < 0 or self.edge_ms < 0:
            raise SimulmtError("pauses cannot be negative")
        if not 0.5 <= self.tempo[0] <= self.tempo[1] <= 2.0:
            raise SimulmtError(f"tempo factors must lie in 0.5..2, got {self.tempo}")
        if self.limit is not None and self.limit < 1:
            raise SimulmtError(f"limit must be at least 1, got {self.limit}")
        if self.sample_rate < 8000:
            raise SimulmtError(f"sample_rate must be at least 8000, got {self.sample_rate}")

    def key(self, versions: dict[str, str]) -> str:
        """What the audio depends on (all options but ``limit``, and the tool versions), as a short hash."""
        described = {**asdict(self), "limit": None, **versions}
        return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Plan:
    """The random choices for one utterance."""
    voice: str
    rate: int
    pitch: int
    tempo: float
    snr_db: float | None
    gaps_ms: tuple[float, ...]
    noise_seed: int


def plan_utterance(options: SynthOptions, utterance_id: str, n_words: int) -> Plan:
    """Draw an utterance's voice, rate, pitch, tempo, SNR, pauses and noise seed from ``(seed, utterance_id)``."""
    digest = hashlib.sha256(f"{options.seed}/{utterance_id}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    voice = options.voices[rng.integers(len(options.voices))]
    rate = options.rates[rng.integers(len(options.rates))]
    pitch = options.pitches[rng.integers(len(options.pitches))]
    u_tempo, u_snr = rng.random(2)  # drawn whether used or not, so that each option leaves the others' draws alone
    noise_seed = int(rng.integers(2 ** 62))
    low, high = options.tempo
    tempo = round(low + (high - low) * float(u_tempo), 2)
    snr_db = None if options.snr_db is None else round(
        options.snr_db[0] + (options.snr_db[1] - options.snr_db[0]) * float(u_snr), 1)
    gaps = tuple(round(float(g), 1) for g in rng.uniform(*options.word_gap_ms, size=max(n_words - 1, 0)))
    return Plan(voice, int(rate), int(pitch), tempo, snr_db, gaps, noise_seed)


@dataclass(frozen=True)
class Utterance:
    """One line of ``manifest.jsonl``; ``audio`` is absolute here, relative to the manifest's folder there."""
    id: str
    audio: Path
    source: str
    target: str
    words: tuple[WordTiming, ...]
    duration_ms: float
    voice: str
    rate: int
    pitch: int
    tempo: float
    snr_db: float | None
    sample_rate: int

    def record(self, root: Path) -> dict:
        """The manifest's JSON object: id, audio (relative path), source, target, words [{word, start_ms, end_ms}],
        duration_ms, voice, rate, pitch, tempo, snr_db (null: clean), sample_rate."""
        record = asdict(self)
        record["audio"] = self.audio.relative_to(root).as_posix()
        record["words"] = [asdict(w) for w in self.words]
        return record

    @classmethod
    def from_record(cls, record: dict, root: Path) -> Utterance:
        return cls(**{**record, "audio": root / record["audio"],
                      "words": tuple(WordTiming(**w) for w in record["words"])})

    def read_audio(self) -> np.ndarray:
        """The utterance's samples, ``(T,)`` int16."""
        return read_wav(self.audio)[0]


def read_manifest(path: str | Path) -> list[Utterance]:
    """The utterances of a ``manifest.jsonl``, their audio paths resolved against its folder."""
    path = Path(path)
    root = path.parent.resolve()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise SimulmtError(f"cannot read the manifest {path}: {exc.strerror or exc}") from None
    return [Utterance.from_record(json.loads(line), root) for line in lines if line.strip()]


def _write_atomically(path: Path, data: bytes) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


def _finished(root: Path, utterance_id: str, source: str, target: str, key: str) -> Utterance | None:
    """The utterance if an earlier run finished it with the same options and text, else None."""
    try:
        done = json.loads((root / "audio" / f"{utterance_id}.json").read_text(encoding="utf-8"))
        utterance = Utterance.from_record(done["record"], root)
        with wave.open(str(utterance.audio), "rb") as f:
            complete = (f.getnframes() == round(utterance.duration_ms * utterance.sample_rate / 1000)
                        and f.getnchannels() == 1 and f.getsampwidth() == 2)
    except (OSError, ValueError, KeyError, TypeError, EOFError, wave.Error):
        return None
    if done.get("key") != key or not complete or (utterance.source, utterance.target) != (source, target):
        return None
    return utterance


def _synthesise_utterance(root: Path, utterance_id: str, source: str, target: str, options: SynthOptions,
                          key: str) -> Utterance:
    """Speak one source line and store its wav, then its record (which marks it as finished)."""
    words = source.split()
    plan = plan_utterance(options, utterance_id, len(words))
    audio, timings = synthesise_sentence(words, plan.voice, plan.rate, plan.pitch, tempo=plan.tempo,
                                         snr_db=plan.snr_db, word_gap_ms=plan.gaps_ms, edge_ms=options.edge_ms,
                                         sample_rate=options.sample_rate, seed=plan.noise_seed)
    wav_path = root / "audio" / f"{utterance_id}.wav"
    partial = wav_path.with_name(wav_path.name + ".partial")
    write_wav(partial, audio, options.sample_rate)
    os.replace(partial, wav_path)
    utterance = Utterance(utterance_id, wav_path, source, target, tuple(timings), _ms(len(audio), options.sample_rate),
                          plan.voice, plan.rate, plan.pitch, plan.tempo, plan.snr_db, options.sample_rate)
    done = {"key": key, "record": utterance.record(root)}
    _write_atomically(root / "audio" / f"{utterance_id}.json", json.dumps(done, ensure_ascii=False).encode())
    return utterance


def synthesise_corpus(source_path: str | Path, target_path: str | Path, out_dir: str | Path,
                      options: SynthOptions = SynthOptions()) -> Path:
    """Speak each source line of a parallel corpus into ``out_dir``; returns the path of its ``manifest.jsonl``.

    Resumable: an utterance an earlier run finished with the same options, text and tools is kept, so a rerun
    after a kill does only the rest and writes the same manifest. An empty source line cannot be spoken: it is
    skipped and listed in ``corpus.json`` (its id is not used, the others keep their line numbers); an empty
    target line is kept as "". Source and target must have the same number of lines."""
    from tqdm import tqdm  # imported here: the rest of the module does not need it

    require_tools()
    check_voices(options.voices)
    sources = read_text_lines(source_path, "source")
    targets = read_text_lines(target_path, "target")
    if len(sources) != len(targets):
        raise SimulmtError(f"the source file {source_path} has {len(sources)} lines but the target file "
                           f"{target_path} has {len(targets)}: they must be aligned line by line")
    root = Path(out_dir).resolve()
    (root / "audio").mkdir(parents=True, exist_ok=True)
    for partial in (root / "audio").glob("*.partial"):  # left by a kill in the middle of a write
        partial.unlink()
    versions = tool_versions()
    key = options.key(versions)

    lines = list(enumerate(zip(sources, targets), 1))[:options.limit]
    utterances: list[Utterance] = []
    skipped: list[dict] = []
    for number, (source, target) in tqdm(lines, desc="synthesising", unit="line", disable=None):
        utterance_id = f"{number:06d}"
        if not source.split():
            skipped.append({"line": number, "reason": "empty source line"})
            continue
        try:
            utterances.append(_finished(root, utterance_id, source, target, key)
                              or _synthesise_utterance(root, utterance_id, source, target, options, key))
        except NothingAudible as exc:
            skipped.append({"line": number, "reason": str(exc)})

    manifest = root / "manifest.jsonl"
    _write_atomically(manifest, "".join(json.dumps(u.record(root), ensure_ascii=False) + "\n"
                                        for u in utterances).encode())
    summary = {"manifest": manifest.name, "source": str(Path(source_path).resolve()),
               "target": str(Path(target_path).resolve()), "options": asdict(options), **versions,
               "utterances": len(utterances), "words": sum(len(u.words) for u in utterances),
               "audio_seconds": round(sum(u.duration_ms for u in utterances) / 1000, 3), "skipped": skipped}
    _write_atomically(root / "corpus.json", (json.dumps(summary, indent=2, ensure_ascii=False) + "\n").encode())
    return manifest


def write_sentence(text: str, out_stem: str | Path, voice: str = "en-us", rate: int = 175, pitch: int = 50, *,
                   word_gap_ms: float = 60.0, edge_ms: float = 100.0, sample_rate: int = 16000) -> Path:
    """Speak one sentence into ``<out_stem>.wav`` and its words and timestamps into ``<out_stem>.json``."""
    require_tools()
    check_voices([voice])
    audio, timings = synthesise_sentence(text.split(), voice, rate, pitch, word_gap_ms=word_gap_ms,
                                         edge_ms=edge_ms, sample_rate=sample_rate)
    stem = Path(out_stem)
    write_wav(stem.with_suffix(".wav"), audio, sample_rate)
    described = {"text": text, "audio": stem.with_suffix(".wav").name, "sample_rate": sample_rate,
                 "duration_ms": _ms(len(audio), sample_rate), "voice": voice, "rate": rate, "pitch": pitch,
                 "words": [asdict(t) for t in timings], **tool_versions()}
    stem.with_suffix(".json").write_text(json.dumps(described, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return stem.with_suffix(".wav")


# ---- command line ------------------------------------------------------------------------------------------------
def _numbers(kind: type):
    return lambda text: tuple(kind(x) for x in text.split(","))


def main(argv: list[str] | None = None) -> int:
    defaults = SynthOptions()
    parser = argparse.ArgumentParser(prog="python -m simulmt.finetune.speech.synth",
                                     description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    corpus = commands.add_parser("corpus", help="speak a parallel corpus into a folder (wavs + manifest.jsonl)")
    corpus.add_argument("source", help="source text, one sentence a line")
    corpus.add_argument("target", help="target text, aligned line by line with the source")
    corpus.add_argument("out_dir")
    corpus.add_argument("--voices", type=lambda t: tuple(t.split(",")), default=defaults.voices)
    corpus.add_argument("--rates", type=_numbers(int), default=defaults.rates)
    corpus.add_argument("--pitches", type=_numbers(int), default=defaults.pitches)
    corpus.add_argument("--word-gap-ms", type=_numbers(float), default=defaults.word_gap_ms, metavar="MIN,MAX")
    corpus.add_argument("--edge-ms", type=float, default=defaults.edge_ms)
    corpus.add_argument("--tempo", type=_numbers(float), default=defaults.tempo, metavar="MIN,MAX")
    corpus.add_argument("--snr-db", type=_numbers(float), default=None, metavar="MIN,MAX")
    corpus.add_argument("--seed", type=int, default=defaults.seed)
    corpus.add_argument("--limit", type=int, default=None, help="only the first N lines")
    corpus.add_argument("--sample-rate", type=int, default=defaults.sample_rate)
    sentence = commands.add_parser("sentence", help="speak one sentence into OUT_STEM.wav and OUT_STEM.json")
    sentence.add_argument("text")
    sentence.add_argument("out_stem")
    sentence.add_argument("--voice", default="en-us")
    sentence.add_argument("--rate", type=int, default=175)
    sentence.add_argument("--pitch", type=int, default=50)
    sentence.add_argument("--word-gap-ms", type=float, default=60.0)
    sentence.add_argument("--edge-ms", type=float, default=100.0)
    sentence.add_argument("--sample-rate", type=int, default=16000)
    args = parser.parse_args(argv)
    try:
        if args.command == "corpus":
            options = SynthOptions(voices=args.voices, rates=args.rates, pitches=args.pitches,
                                   word_gap_ms=args.word_gap_ms, edge_ms=args.edge_ms, tempo=args.tempo,
                                   snr_db=args.snr_db, seed=args.seed, limit=args.limit, sample_rate=args.sample_rate)
            print(synthesise_corpus(args.source, args.target, args.out_dir, options))
        else:
            print(write_sentence(args.text, args.out_stem, args.voice, args.rate, args.pitch,
                                 word_gap_ms=args.word_gap_ms, edge_ms=args.edge_ms, sample_rate=args.sample_rate))
    except SimulmtError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


__all__ = ["DEFAULT_VOICES", "NothingAudible", "Plan", "SynthOptions", "Utterance", "WordTiming", "check_voices",
           "plan_utterance", "read_manifest", "require_tools", "synthesise_corpus", "synthesise_sentence",
           "synthesise_word", "tool_versions", "trim_silence", "write_sentence"]

if __name__ == "__main__":
    sys.exit(main())
