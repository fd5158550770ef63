"""A run directory: ``config.json`` (what produced the log; a rerun with other settings is refused), the
``instances.log`` that is appended, flushed and fsynced a sentence at a time (a torn last line is cut off and
translated again), the lock that keeps two processes off one log, and ``translate_run``, which continues a run."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from simulmt.errors import SimulmtError
from simulmt.core.session import DecodeConfig, Translation
from simulmt.evaluation.options import EvaluateOptions
from simulmt.evaluation.runs import RunSpec
from simulmt.evaluation.testset import TestSet

if TYPE_CHECKING:
    from simulmt.translator import Translator

LOG, CONFIG, SCORES, SIMULEVAL_CONFIG = "instances.log", "config.json", "scores.json", "config.yaml"

# config.json keys that must match for a rerun to continue a run (lines and ms_per_word may change)
IDENTITY_KEYS = ("run", "model", "adapter", "dtype", "source_lang", "target_lang", "layout", "policy", "k", "n",
                 "slot", "phi", "decode", "simulmt", "source_sha256", "reference_sha256", "shard", "first_line",
                 "learned_decides", "docids_sha256", "context_pairs", "context_tokens", "talk_max_words",
                 "head_vocabulary", "source_type", "speech_model")  # (the recogniser, its step and agreement rule)
TIMING_KEYS = ("elapsed", "wall_ms")  # the only fields of an instance that depend on the machine and the moment


def run_config(spec: RunSpec, model: str, options: EvaluateOptions, test_set: TestSet,
               dtype: str | None = None, learned_decides: str | None = None, head_vocabulary: str | None = None) -> dict:
    """A run's config.json; ``dtype``: what the model computes with (``translator.dtype``; default: the option);
    ``learned_decides``: when a speech translator's learned policy decides (its ``learned_decides``);
    ``head_vocabulary``: what its LM head computes when not the whole vocabulary (``translator.head_vocabulary``)."""
    from simulmt import __version__

    pause = f", pause {options.asr_pause_ms} ms" if options.asr_pause_ms else ""
    agreement = ""
    if options.source_audio:
        from simulmt.core.prompt_format import language_code
        from simulmt.speech.recognizer import RecognizerOptions, agreement_label

        agreement = agreement_label(RecognizerOptions(policy=options.asr_policy))
        if RecognizerOptions().spell_numbers and language_code(options.source_lang) == "en":
            agreement += ", small numbers in words"  # (since 2026-11-30: runs before it gave the digits)
        if RecognizerOptions().capitalise_starts:
            agreement += ", first words with a capital"  # (since 2026-11-30, session 46)
        if options.asr_policy != "alignatt":
            agreement += ", compounds and numbers matched"  # (since 2026-12-07, session 48: a confirmed word is
            # found again in a transcript that writes it as part of a compound, or a number in digits)
    beam = f", beam {options.asr_beam}" if options.asr_beam > 1 else ""
    later = f", {options.asr_later_step_ms} ms after a sentence's first words" if options.asr_later_step_ms else ""
    return {"run": spec.name, "model": model, "adapter": options.adapter, "dtype": dtype or options.dtype,
            "source_lang": options.source_lang, "target_lang": options.target_lang, **spec.settings(),
            "decode": asdict(options.decode_config()), "simulmt": __version__,
            "source": str(test_set.source_path), "reference": str(test_set.reference_path),
            "source_sha256": test_set.source_sha256, "reference_sha256": test_set.reference_sha256,
            "lines": len(test_set.sources), "ms_per_word": options.unit_ms, "batch_size": options.batch_size,
            # the LM head over those files' tokens and each sentence's source only (head_vocabulary.py)
            **({"head_vocabulary": head_vocabulary} if head_vocabulary else {}),
            **({"source_type": "speech", "speech_model": options.speech_model or f"whisper {options.asr_model} "
                f"(step {options.asr_step_ms} ms{later}, {agreement}{pause}{beam})"} if options.source_audio else {}),
            **({"learned_decides": learned_decides or "once per block"}
               if options.source_audio and spec.policy == "learned" else {}),
            # one engine per run computes the prompt once (prompt_cache.py): text runs, and batched speech runs
            **({"shared_prompt": True} if not options.source_audio or options.batch_size > 1 else {})}


def decode_kwargs(config: dict) -> dict:
    """The run's decoding rules (config.json's ``decode``) as a stream's ``config``; none for runs whose rules are
    the defaults (a speech translator takes no ``config``)."""
    decode = DecodeConfig(**config.get("decode", {}))
    return {} if decode == DecodeConfig() else {"config": decode}


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
        what = "talks" if "docids" in config else "sentences"
        advice = ("a shard of another split: use the same --lines and shards, or another --output" if "shard" in config
                  else f"use --lines {done} or more, or another --output" if what == "sentences"
                  else "use the --lines that wrote it, or another --output")
        raise SimulmtError(f"{directory} already holds {done} finished {what}, more than the {config['lines']} "
                           f"asked for now; {advice}")


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
              "refed_tokens": translation.refed_tokens, "speculated": translation.speculated,
              "speculated_kept": translation.speculated_kept, "early_ends": translation.early_ends,
              "header_words": translation.header_words}
    if hasattr(translation, "delays_ms"):  # speech: SimulEval's speech log, delays and source length in ms
        record.update({"delays": translation.delays_ms, "source_length": translation.duration_ms,
                       f"delays_{translation.unit}": translation.delays, "encoder_ms": translation.encoder_ms,
                       "adapter_ms": translation.adapter_ms})  # delays_blocks, or delays_words when spelled
        if translation.heard:
            record["heard"] = translation.heard  # the words the CTC head spelled: what the LLM read
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
                translations = translator.translate_iter(remaining, batch_size=batch_size, **spec.session_kwargs(),
                                                         **decode_kwargs(config))
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
