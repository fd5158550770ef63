"""Long-form runs (``simulmt evaluate --docids FILE``): whole talks as one stream each, scored on the whole talk.

The docids file names the talk of each source line; consecutive lines of one id form a talk. Each talk is
translated as one ``Talk`` stream (simulmt.core.talk: it cuts its own sentences and keeps the last pairs as
context; talks are batched like sentences), and logged as one line of ``instances.log``, in the JSON-lines format
OmniSTEval reads (``source`` is the talk's name, its recording; ``delays`` in source words of the talk, ``elapsed``
in ms since the talk began), with what scoring needs (each line's reference and word count) and the cost
counters. The run is resumable a talk at a time. ``scores.json`` (simulmt.metrics.longform) is a pure function
of the log and config.json, like a sentence-level run's, and the run directory gets ``longform/``: the same output
as the inputs of OmniSTEval's and SimulStream's own commands (times in ms and s of the assumed source rate), with
those commands in ``longform/README.md``.
"""

from __future__ import annotations

import json
import os
import sys
from itertools import accumulate
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from simulmt.core.sentence_ends import DEFAULT_MAX_WORDS
from simulmt.core.talk import ContextWindow
from simulmt.errors import SimulmtError
from simulmt.evaluation.run_dir import (CONFIG, LOG, SCORES, SIMULEVAL_CONFIG, _Lock, _read_json, _write_json,
                                        check_run_dir, decode_kwargs, read_log)
from simulmt.evaluation.runs import RunResult, RunSpec
from simulmt.evaluation.testset import TestSet, _read_lines
from simulmt.metrics.longform import emission_times

if TYPE_CHECKING:
    from simulmt.core.translation import Translation
    from simulmt.evaluation.options import EvaluateOptions
    from simulmt.translator import Translator

LONGFORM = "longform"  # a run's folder of inputs for OmniSTEval's and SimulStream's own commands


@dataclass(frozen=True)
class TalkLines:
    name: str
    start: int  # its first line (0-based) in the test set
    end: int  # one past its last


def read_talks(docids: str | Path, lines: int) -> tuple[list[TalkLines], Path, str]:
    """The talks of the first ``lines`` lines: (talks in order, the file's resolved path, its SHA-256). An empty
    id, a file shorter than the test set, or a talk whose lines are not consecutive is an error."""
    path = Path(docids).resolve()
    ids, sha = _read_lines(path, "docids")
    if len(ids) < lines:
        raise SimulmtError(f"the docids file {path} has {len(ids)} lines, fewer than the {lines} source lines")
    talks: list[TalkLines] = []
    for i, name in enumerate(ids[:lines]):
        if not name:
            raise SimulmtError(f"line {i + 1} of the docids file {path} is empty: every line needs its talk's id")
        if talks and talks[-1].name == name:
            talks[-1] = TalkLines(name, talks[-1].start, i + 1)
            continue
        if any(t.name == name for t in talks):
            raise SimulmtError(f"talk {name!r} comes back at line {i + 1} of {path}: a talk's lines must be "
                               f"consecutive")
        talks.append(TalkLines(name, i, i + 1))
    return talks, path, sha


def talk_config(config: dict, options: "EvaluateOptions", talks: list[TalkLines], path: Path, sha: str) -> dict:
    """A long-form run's config.json: a sentence-level run's, its records counted in talks."""
    return {**config, "lines": len(talks), "sentences": sum(t.end - t.start for t in talks), "docids": str(path),
            "docids_sha256": sha, "context_pairs": options.context_pairs, "context_tokens": options.context_tokens,
            "talk_max_words": DEFAULT_MAX_WORDS}


def talk_words(talks: list[TalkLines], test_set: TestSet) -> list[int]:
    """Source words per talk (what shards balance and the progress bar counts)."""
    return [sum(len(line.split()) for line in test_set.sources[t.start:t.end]) for t in talks]


def talk_shard_bounds(talks: list[TalkLines], test_set: TestSet, shard: int, shards: int) -> tuple[int, int]:
    """Talks [start, end) of shard ``shard`` (1..N) of a long-form run: contiguous blocks of whole talks (a talk
    is one stream, never cut), balanced by source words: a talk goes to the shard whose share of the run's words
    holds its middle word. A shard may get no talk (one talk longer than the others together)."""
    words = talk_words(talks, test_set)
    total = max(1, sum(words))
    owner = [min(shards, (2 * before + w) * shards // (2 * total) + 1)  # (the middle word's share, in integers)
             for before, w in zip(accumulate(words, initial=0), words)]
    return sum(o < shard for o in owner), sum(o <= shard for o in owner)


def check_talk_records(records: list[dict], talks: list[TalkLines], directory: Path) -> None:
    """The talks a log holds are the first of ``talks``, whole: same names, same number of lines (another --lines
    may cut the last talk elsewhere, and a run's talks are never mixed with other cuts of them)."""
    for record, talk in zip(records, talks):
        if record["source"] != talk.name or len(record["line_words"]) != talk.end - talk.start:
            raise SimulmtError(f"{directory}: talk {record['source']!r} was logged with {len(record['line_words'])} "
                               f"lines, and the test set now gives talk {talk.name!r} {talk.end - talk.start} (another "
                               f"--lines cuts the talks elsewhere): choose another --output, or delete that run")


def talk_shard_config(config: dict, talks: list[TalkLines], test_set: TestSet, shard: int, shards: int) -> dict:
    """A long-form run's config as one shard writes it: its block of the talks, and which block it is."""
    start, end = talk_shard_bounds(talks, test_set, shard, shards)
    return {**config, "lines": end - start, "sentences": sum(t.end - t.start for t in talks[start:end]),
            "shard": f"{shard}/{shards}", "first_line": start}


def talk_record(index: int, talk: TalkLines, translation: "Translation", test_set: TestSet) -> dict:
    sources = test_set.sources[talk.start:talk.end]
    record = {"index": index, "source": talk.name, "prediction": translation.prediction,
              "delays": translation.delays, "elapsed": translation.elapsed,
              "prediction_length": len(translation.delays), "source_length": translation.source_length,
              "line_words": [len(s.split()) for s in sources], "references": test_set.references[talk.start:talk.end],
              "source_lines": sources, "read_elapsed": translation.read_elapsed,
              "tokens_fed": translation.tokens_fed, "flops": translation.flops,
              "wall_ms": translation.wall_ms, "forward_calls": translation.forward_calls,
              "cache_crops": translation.cache_crops, "refed_tokens": translation.refed_tokens}
    if translation.error:
        record["error"] = translation.error
    return record


def translate_talk_run(translator: "Translator", spec: RunSpec, test_set: TestSet, talks: list[TalkLines],
                       directory: Path, config: dict, *, progress: bool = True, err: TextIO | None = None,
                       batch_size: int = 1) -> list[dict]:
    """Translate the talks of one run that are not in its log yet (``batch_size`` talks at a time, each logged as
    soon as it and those before it are done); return all its records."""
    err = err or sys.stderr
    directory.mkdir(parents=True, exist_ok=True)
    window = ContextWindow(config["context_pairs"], config["context_tokens"])
    with _Lock(directory):
        check_run_dir(directory, config)
        _write_json(directory / CONFIG, config)
        (directory / SIMULEVAL_CONFIG).write_text("source_type: text\ntarget_type: text\n", encoding="utf-8")
        log = directory / LOG
        records = read_log(log, repair=True, err=err) if log.exists() else []
        check_talk_records(records, talks, directory)
        # progress in source words, as each sentence of any talk in the batch is done (a talk's lines are logged
        # only when the talk is: with many talks batched, the first may take most of the run)
        words = list(accumulate(talk_words(talks, test_set), initial=0))
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=words[-1], initial=words[len(records)], desc=spec.name, unit="word", file=err,
                       dynamic_ncols=True)
        try:
            with open(log, "ab") as f:
                start = len(records)
                texts = (test_set.sources[t.start:t.end] for t in talks[start:])
                translations = translator.translate_talks(
                    texts, batch_size=batch_size, window=window, max_words=config["talk_max_words"],
                    on_sentence=(lambda done: bar.update(done.source_length)) if bar is not None else None,
                    **spec.session_kwargs(), **decode_kwargs(config))
                for index, translation in enumerate(translations, start):
                    if translation.error:
                        (bar.write if bar is not None else print)(
                            f"simulmt: {spec.name}: talk {talks[index].name}: {translation.error}", file=err)
                    record = talk_record(index, talks[index], translation, test_set)
                    f.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
                    f.flush()
                    os.fsync(f.fileno())
                    records.append(record)
                    if bar is not None:  # (the talks logged so far, and what the later ones have done)
                        bar.set_postfix_str(f"{len(records)}/{len(talks)} talks", refresh=True)
            if bar is not None:  # (a talk that failed before its first sentence reported none of its words)
                bar.update(words[len(records)] - bar.n)
        finally:
            if bar is not None:
                bar.close()
    return records


def talk_outputs(records: list[dict]):
    from simulmt.metrics.longform import TalkOutput

    return [TalkOutput(r["source"], r["prediction"].split(), r["delays"], r["elapsed"], r["line_words"],
                       r["references"], r.get("source_lines", ()), r.get("read_elapsed", ())) for r in records]


def score_talk_run(directory: Path, ms_per_word: float | None = None, write: bool = True) -> RunResult:
    """A long-form run's scores.json from its instances.log and config.json alone (and its ``longform/``)."""
    from statistics import mean

    from simulmt.metrics.longform import longform_scores

    directory = Path(directory)
    config = _read_json(directory / CONFIG)
    ms = config["ms_per_word"] if ms_per_word is None else ms_per_word
    records = read_log(directory / LOG)
    if not records:
        raise SimulmtError(f"{directory}: no finished talks to score")
    scores = longform_scores(talk_outputs(records), ms, lang=config["target_lang"])
    resegmented, signature = scores.pop("resegmented"), scores.pop("signature")
    sentences = sum(len(r["line_words"]) for r in records)
    scores.update({"tokens_fed": sum(r["tokens_fed"] for r in records) / sentences,  # per reference sentence
                   "gflops": sum(r["flops"] for r in records) / sentences / 1e9,
                   "wall_ms": mean(r["wall_ms"] for r in records), "talks": len(records), "sentences": sentences,
                   "empty_predictions": sum(not p.strip() for p in resegmented),
                   "failed": sum(bool(r.get("error")) for r in records)})
    signature = {"model": config["model"], "adapter": config["adapter"], "dtype": config["dtype"],
                 "source_lang": config["source_lang"], "target_lang": config["target_lang"],
                 **{key: config[key] for key in ("layout", "policy", "k", "n", "slot", "phi", "context_pairs",
                                                 "context_tokens")},
                 "simulmt": config["simulmt"], "source": config["source"], "reference": config["reference"],
                 "docids": config["docids"], "lines": sentences, "talks": len(records),
                 "complete": len(records) == config["lines"], "ms_per_word": ms, "batch_size": config["batch_size"],
                 "decode": config.get("decode"),
                 "longform": signature, "BLEU": signature, "chrF": signature, "latency": signature,
                 "cost": "tokens_fed and gflops per reference sentence, wall_ms per talk"}
    scores = {"run": config["run"], **scores, "signature": signature}
    if write:
        _write_json(directory / SCORES, scores)
        write_longform_inputs(directory / LONGFORM, records, ms, resegmented, config["target_lang"])
    return RunResult(RunSpec.from_config(config), directory, config, scores)


def write_longform_inputs(folder: Path, records: list[dict], ms: float, resegmented: list[str], lang: str) -> None:
    """The run's output as OmniSTEval's ``longform`` and SimulStream's scoring commands read it: times in ms
    (OmniSTEval's hypotheses) and s (the segmentation, SimulStream's log) of ``ms`` per source word."""
    folder.mkdir(parents=True, exist_ok=True)
    refs, segments, hypotheses, stream_log = [], [], [], [json.dumps({"model_loading_time": 0.0})]
    for number, (r, talk) in enumerate(zip(records, talk_outputs(records))):
        cu, ca, spans, end = emission_times(talk, ms)  # (what scores.json was computed from)
        wav = f"{r['source']}.wav"
        segments += [{"wav": wav, "offset": start / 1000, "duration": duration / 1000} for start, duration in spans]
        refs += r["references"]
        hypotheses.append(json.dumps({"source": wav, "prediction": r["prediction"], "delays": cu, "elapsed": ca,
                                      "source_length": end}, ensure_ascii=False))
        stream_log.append(json.dumps({"id": number, "metadata": {"wav_name": wav}}))
        for word, c, a in zip(r["prediction"].split(), cu, ca):  # a word per chunk, emitted at its time
            stream_log.append(json.dumps({"id": number, "total_audio_processed": c / 1000,
                                          "computation_time": (a - c) / 1000, "generated_tokens": [word],
                                          "deleted_tokens": []}, ensure_ascii=False))

    def write(name: str, lines) -> None:
        (folder / name).write_text("".join(f"{x}\n" for x in lines), encoding="utf-8")

    write("references.txt", refs)
    write("resegmented.txt", resegmented)
    write("hypotheses.jsonl", hypotheses)
    write("simulstream.jsonl", stream_log)
    write("segmentation.yaml", [f"- {{wav: {json.dumps(s['wav'])}, offset: {s['offset']!r}, "
                                f"duration: {s['duration']!r}}}" for s in segments])
    write("simulstream.yaml", ["detokenizer_type: simuleval", "latency_unit: word"])
    write("README.md", [
        "# The run's output for OmniSTEval and SimulStream", "",
        f"Times assume {ms:g} ms per source word (a text talk has no clock): OmniSTEval reports latency in ms,",
        "SimulStream in s; divide by that rate for source words, as scores.json does. From this folder:", "",
        "    omnisteval longform --speech_segmentation segmentation.yaml --ref_sentences_file references.txt \\",
        f"        --hypothesis_file hypotheses.jsonl --word_level --lang {lang} --bleu_tokenizer 13a \\",
        "        --output_folder omnisteval", "",
        "    simulstream_score_latency --scorer stream_laal --eval-config simulstream.yaml \\",
        "        --log-file simulstream.jsonl --reference references.txt --audio-definition segmentation.yaml"])


__all__ = ["LONGFORM", "TalkLines", "check_talk_records", "read_talks", "score_talk_run", "talk_config", "talk_record",
           "talk_shard_bounds", "talk_shard_config", "talk_words", "translate_talk_run", "write_longform_inputs"]
