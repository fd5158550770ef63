"""The reports of a grid: results.md, results.json and bleu_laal.png in its directory, and the table printed on
the terminal."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from simulmt.errors import SimulmtError
from simulmt.evaluation.run_dir import _write_json
from simulmt.evaluation.runs import RunResult

RESULTS_MD, RESULTS_JSON, PLOT = "results.md", "results.json", "bleu_laal.png"


# (column, key in scores, format)
TABLE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("BLEU", "BLEU", ".2f"), ("chrF", "chrF", ".2f"), ("AL", "AL", ".2f"), ("LAAL", "LAAL", ".2f"),
    ("AP", "AP", ".3f"), ("DAL", "DAL", ".2f"), ("ATD", "ATD", ".2f"), ("AL_CA ms", "AL_CA", ".0f"),
    ("LAAL_CA ms", "LAAL_CA", ".0f"), ("tokens fed", "tokens_fed", ".1f"), ("GFLOPs", "gflops", ".2f"),
    ("wall ms", "wall_ms", ".0f"), ("sentences", "sentences", "d"),
)


# whole talks (--docids): long-form scores (simulmt.metrics.longform), cost per reference sentence
TALK_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("BLEU", "BLEU", ".2f"), ("chrF", "chrF", ".2f"), ("StreamLAAL", "StreamLAAL", ".2f"),
    ("LongYAAL", "LongYAAL", ".2f"), ("LongLAAL", "LongLAAL", ".2f"), ("StreamLAAL_CA ms", "StreamLAAL_CA", ".0f"),
    ("LongYAAL_CA ms", "LongYAAL_CA", ".0f"), ("tokens fed/sent", "tokens_fed", ".1f"),
    ("GFLOPs/sent", "gflops", ".2f"), ("talks", "talks", "d"), ("sentences", "sentences", "d"),
)


def _columns(results: list[RunResult]) -> tuple[tuple[str, str, str], ...]:
    return TALK_COLUMNS if results and "docids" in results[0].config else TABLE_COLUMNS


def table_rows(results: Iterable[RunResult]) -> tuple[list[str], list[list[str]]]:
    results = list(results)
    columns = _columns(results)
    header = ["run"] + [title for title, _, _ in columns]
    rows = []
    for result in results:
        row = [result.name]
        for _, key, fmt in columns:
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
    if "docids" in results[0].config:
        talks = sorted({r.scores["talks"] for r in results})
        return (f"model {', '.join(models)}; {Path(first['source']).name} -> {Path(first['reference']).name}, "
                f"{'/'.join(map(str, talks))} whole talks ({Path(first['docids']).name}), context "
                f"{first['context_pairs']} pairs / {first['context_tokens']} tokens; output resegmented to the "
                f"reference sentences (OmniSTEval SoftSegmenter; StreamLAAL: SimulStream, mwerSegmenter); latency "
                f"in source words, *_CA in ms at {first['ms_per_word']:g} ms per source word; simulmt "
                f"{first['simulmt']}")
    if results[0].config.get("source_type") == "speech":
        latency = "latency in ms of audio (SimulEval 1.1.4 definitions), *_CA adds the compute time so far, in ms"
    else:
        latency = (f"latency in source words (SimulEval 1.1.4 definitions), *_CA in ms at {first['ms_per_word']:g} "
                   f"ms per source word")
    return (f"model {', '.join(models)}; {Path(first['source']).name} -> {Path(first['reference']).name}, "
            f"{'/'.join(map(str, lines))} sentences; {latency}; simulmt {first['simulmt']}")


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
    from simulmt.evaluation.plots import plot_bleu_laal

    if not results:
        raise SimulmtError("no runs to report")
    _write_json(directory / RESULTS_JSON, {"caption": _grid_caption(results),
                                           "runs": [r.scores for r in results]})
    (directory / RESULTS_MD).write_text(results_markdown(results), encoding="utf-8")
    points = [{"family": r.spec.family, "label": r.spec.point_label, "offline": r.spec.policy == "offline",
               "BLEU": r.scores["BLEU"], "LAAL": r.scores.get("LAAL", r.scores.get("StreamLAAL")),
               "LAAL_CA": r.scores.get("LAAL_CA", r.scores.get("StreamLAAL_CA"))}
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
