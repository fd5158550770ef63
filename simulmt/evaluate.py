"""The grid evaluation's old single-module face: every name it defined, handed on from ``simulmt.evaluation``.

The code lives in :mod:`simulmt.evaluation` (one concept per file; its ``__init__`` is the overview). This module
keeps ``from simulmt.evaluate import ...`` working for scripts and external users; new code imports the file that
defines a name. A name set here (a monkeypatch, say) changes nothing in the code that uses it: set it on the
module that defines it.
"""

from simulmt.evaluation.command import run_evaluate_command, run_score_command
from simulmt.evaluation.grid import (SHARDS, evaluate, find_runs, merge_shards, score_path, shard_bounds,
                                     shard_config)
from simulmt.evaluation.options import GRID_POLICIES, EvaluateOptions, ScoreOptions
from simulmt.evaluation.reports import (PLOT, RESULTS_JSON, RESULTS_MD, TABLE_COLUMNS, print_table,
                                        results_markdown, table_rows, write_reports)
from simulmt.evaluation.run_dir import (CONFIG, IDENTITY_KEYS, LOG, SCORES, SIMULEVAL_CONFIG, TIMING_KEYS,
                                        check_run_dir, instance_record, read_log, run_config, translate_run)
from simulmt.evaluation.runs import RunResult, RunSpec
from simulmt.evaluation.scores import LATENCY_SIGNATURE, score_instances, score_run
from simulmt.evaluation.testset import TestSet, read_audio_test_set, read_test_set

# the private names, for code written against the single module
from simulmt.evaluation.grid import _evaluate_shard, _grid_order  # noqa: F401
from simulmt.evaluation.options import _int_list, _name_list  # noqa: F401
from simulmt.evaluation.reports import _grid_caption  # noqa: F401
from simulmt.evaluation.run_dir import _Lock, _read_json, _write_json  # noqa: F401
from simulmt.evaluation.scores import _with_speech_atd  # noqa: F401
from simulmt.evaluation.testset import _paired_lines, _read_lines  # noqa: F401

__all__ = [
    "CONFIG", "GRID_POLICIES", "IDENTITY_KEYS", "LATENCY_SIGNATURE", "LOG", "PLOT", "RESULTS_JSON", "RESULTS_MD",
    "SCORES", "SHARDS", "SIMULEVAL_CONFIG", "TABLE_COLUMNS", "TIMING_KEYS",
    "EvaluateOptions", "RunResult", "RunSpec", "ScoreOptions", "TestSet",
    "check_run_dir", "evaluate", "find_runs", "instance_record", "merge_shards", "print_table", "read_audio_test_set",
    "read_log", "read_test_set", "results_markdown", "run_config", "run_evaluate_command", "run_score_command",
    "score_instances", "score_path", "score_run", "shard_bounds", "shard_config", "table_rows", "translate_run",
    "write_reports",
]
