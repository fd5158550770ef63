"""The grid: every run of ``EvaluateOptions.grid()`` translated and scored into one directory, with its reports;
or, sharded, this shard's block of every run, merged when all shards are finished; and ``score_path``, which
rescores a run or a grid without the model."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from simulmt.errors import SimulmtError
from simulmt.evaluation.options import GRID_POLICIES, EvaluateOptions
from simulmt.evaluation.reports import write_reports
from simulmt.evaluation.run_dir import (CONFIG, LOG, SIMULEVAL_CONFIG, _Lock, _write_json, check_run_dir, read_log,
                                        run_config, translate_run)
from simulmt.evaluation.runs import RunResult, RunSpec
from simulmt.evaluation.scores import score_run
from simulmt.evaluation.talks import (TalkLines, check_talk_records, read_talks, talk_config, talk_shard_bounds,
                                      talk_shard_config, translate_talk_run)
from simulmt.evaluation.testset import TestSet, read_audio_test_set, read_test_set
from simulmt.output_dir import check_output_dir

if TYPE_CHECKING:
    from simulmt.translator import Translator

SHARDS = "shards"


def evaluate(translator: "Translator", options: EvaluateOptions, *, progress: bool = True,
             err: TextIO | None = None) -> list[RunResult]:
    """Translate and score every run of the grid into ``options.output`` (continuing unfinished runs), write the
    grid's results.md, results.json and bleu_laal.png, and return the runs' results (by layout, policy, k or n;
    offline last: the order of ``simulmt score``)."""
    test_set = (read_audio_test_set(options.source_audio, options.reference, options.lines) if options.source_audio
                else read_test_set(options.source, options.reference, options.lines, options.max_words))
    output = check_output_dir(options.output)
    specs = options.grid()
    decides = getattr(translator, "learned_decides", None)  # a speech translator's
    head = getattr(translator, "head_vocabulary", None)  # (an end-to-end speech translator has none)
    configs = {spec: run_config(spec, translator.name, options, test_set, translator.dtype, decides, head)
               for spec in specs}
    talks = None
    if options.docids is not None:  # whole talks (talks.py): a run's records are talks
        talks, path, sha = read_talks(options.docids, len(test_set.sources))
        configs = {spec: talk_config(configs[spec], options, talks, path, sha) for spec in specs}
    for spec in specs:  # every conflict is found before an hour of translation, not after
        if (output / spec.name).is_dir():
            check_run_dir(output / spec.name, configs[spec])
    shard = options.shard_of()
    if shard is not None:
        return _evaluate_shard(translator, options, test_set, specs, configs, shard, progress, err, talks)
    results = []
    for spec in specs:
        if talks is not None:
            translate_talk_run(translator, spec, test_set, talks, output / spec.name, configs[spec],
                               progress=progress, err=err, batch_size=options.batch_size)
        else:
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
                    configs: dict, shard: tuple[int, int], progress: bool, err: TextIO | None,
                    talks: list[TalkLines] | None = None) -> list[RunResult]:
    """Translate this shard's block of every run (of its sentences; of its whole talks with ``talks``, balanced
    by source words: talks.py); merge when every shard is finished. Returns the merged runs' results, or [] while
    other shards still have work."""
    import dataclasses

    i, n = shard
    folder = Path(options.output) / SHARDS / f"{i}-of-{n}"
    if talks is not None:  # whole talks (talks.py: blocks of talks balanced by source words)
        def config_of(spec: RunSpec, shard: int) -> dict:
            return talk_shard_config(configs[spec], talks, test_set, shard, n)

        def check(spec: RunSpec, shard: int, records: list[dict], directory: Path) -> None:
            start, end = talk_shard_bounds(talks, test_set, shard, n)
            check_talk_records(records, talks[start:end], directory)

        start, end = talk_shard_bounds(talks, test_set, i, n)
        for spec in specs:
            translate_talk_run(translator, spec, test_set, talks[start:end], folder / spec.name, config_of(spec, i),
                               progress=progress, err=err, batch_size=options.batch_size)
        return merge_shards(Path(options.output), specs, configs, n, err=err, config_of=config_of, check=check)
    start, end = shard_bounds(len(test_set.sources), i, n)
    block = dataclasses.replace(test_set, sources=test_set.sources[start:end],
                                references=test_set.references[start:end])
    for spec in specs:
        translate_run(translator, spec, block, folder / spec.name, shard_config(configs[spec], i, n),
                      progress=progress, err=err, batch_size=options.batch_size)
    return merge_shards(Path(options.output), specs, configs, n, err=err)


def merge_shards(output: Path, specs: list[RunSpec], configs: dict, shards: int,
                 err: TextIO | None = None, config_of: Callable[[RunSpec, int], dict] | None = None,
                 check: Callable[[RunSpec, int, list[dict], Path], None] | None = None) -> list[RunResult]:
    """If all ``shards`` shards of every run are finished, write each run as one process would have (the blocks'
    records in order, with their indices in the whole set), score the runs and write the grid's reports; else
    return [] and say which shards are missing. ``config_of(spec, i)``: shard i's config (default: a block of
    sentences, ``shard_config``); ``check(spec, i, records, directory)``: raises if shard i's records are not
    those of its block (whole talks: talks.py)."""
    err = err or sys.stderr
    if config_of is None:
        def config_of(spec: RunSpec, shard: int) -> dict:
            return shard_config(configs[spec], shard, shards)
    blocks, missing = {}, set()
    for spec in specs:
        for i in range(1, shards + 1):
            directory = output / SHARDS / f"{i}-of-{shards}" / spec.name
            expected = config_of(spec, i)
            if not (directory / CONFIG).is_file():
                missing.add(i)
                continue
            check_run_dir(directory, expected)  # a shard of another grid, or another split, is never merged
            records = read_log(directory / LOG) if (directory / LOG).exists() else []
            if check is not None:
                check(spec, i, records, directory)
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
                first = config_of(spec, i)["first_line"]
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
