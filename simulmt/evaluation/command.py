"""The command line of ``simulmt evaluate`` (inputs checked before the model loads; the table and the files
written) and ``simulmt score``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from simulmt.errors import SimulmtError
from simulmt.evaluation.grid import SHARDS, evaluate, score_path
from simulmt.evaluation.options import EvaluateOptions, ScoreOptions
from simulmt.evaluation.reports import PLOT, RESULTS_JSON, RESULTS_MD, print_table
from simulmt.evaluation.run_dir import SCORES
from simulmt.evaluation.testset import read_audio_test_set, read_test_set
from simulmt.output_dir import check_output_dir

if TYPE_CHECKING:
    from simulmt.translator import Translator


def run_evaluate_command(options: EvaluateOptions, parser: argparse.ArgumentParser,
                         load_translator: Callable[..., "Translator"]) -> int:
    try:  # the inputs are checked before the model loads
        if options.source_audio:
            read_audio_test_set(options.source_audio, options.reference, options.lines)
        else:
            test_set = read_test_set(options.source, options.reference, options.lines, options.max_words)
            if options.docids is not None:  # its talks too (an id missing, a talk whose lines are not consecutive)
                from simulmt.evaluation.talks import read_talks

                read_talks(options.docids, len(test_set.sources))
    except SimulmtError as exc:
        parser.error(str(exc))
    try:  # and where the runs go: a folder that cannot be written is refused now, not after the model loads
        check_output_dir(options.output)
    except SimulmtError as exc:
        print(f"simulmt: error: {exc}", file=sys.stderr)
        return 1
    if options.threads is not None:
        import torch

        torch.set_num_threads(options.threads)
    try:
        if options.source_audio:
            from simulmt.speech.loading import load_speech

            translator, _ = load_speech(options.speech_model, model=options.model, adapter=options.adapter,
                                        asr_model=options.asr_model, asr_step_ms=options.asr_step_ms,
                                        asr_pause_ms=options.asr_pause_ms, asr_policy=options.asr_policy,
                                        asr_beam=options.asr_beam, asr_later_step_ms=options.asr_later_step_ms,
                                        source_lang=options.source_lang,
                                        target_lang=options.target_lang,
                                        max_words=options.max_words, device=options.device, dtype=options.dtype,
                                        head_vocabulary=options.head_vocabulary)
        else:
            translator = load_translator(model=options.model, adapter=options.adapter,
                                         source_lang=options.source_lang, target_lang=options.target_lang,
                                         device=options.device, dtype=options.dtype,
                                         head_vocabulary=options.head_vocabulary)
        results = evaluate(translator, options)  # the runs record translator.dtype: what auto became here
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
