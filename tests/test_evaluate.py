"""simulmt evaluate / score on a tiny random model: files, scores from the metric functions, resume, refusal."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from helpers import tiny_translator, write_test_set
from simulmt import cli
from simulmt.errors import SimulmtError
from simulmt.evaluation.grid import evaluate, score_path
from simulmt.evaluation.options import EvaluateOptions
from simulmt.evaluation.run_dir import read_log
from simulmt.evaluation.testset import read_test_set
from simulmt.metrics import bleu, chrf, latency_scores
from simulmt.core.policies import wait_k_delays
from simulmt.translator import Translator

SOURCES = ["The weather is nice today.", "The children are playing in the garden.", "",
           "Where is the train station?"]
REFERENCES = ["Das Wetter ist heute schön.", "Die Kinder spielen im Garten.", "", "Wo ist der Bahnhof?"]
GRID_RUNS = ["expost-slot16.wait-1", "expost-slot16.wait-2", "prefix.wait-1", "prefix.wait-2", "offline"]
SIMULEVAL_KEYS = ["index", "prediction", "delays", "elapsed", "prediction_length", "reference", "source",
                  "source_length"]


@pytest.fixture(scope="module")
def translator():
    return tiny_translator("llama", True)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path]:
    return write_test_set(tmp_path_factory.mktemp("data"), SOURCES, REFERENCES)


def _args(data, output, *extra) -> list[str]:
    return ["evaluate", "--source", str(data[0]), "--reference", str(data[1]), "--output", str(output), *extra]


@pytest.fixture(scope="module")
def grid(tmp_path_factory, data, translator) -> tuple[Path, str]:
    """2 layouts x 2 k (+ offline) on 4 sentences, through the command line."""
    output = tmp_path_factory.mktemp("grid")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cli, "_load_translator", lambda **kwargs: translator)
        import io
        import sys

        out = io.StringIO()
        mp.setattr(sys, "stdout", out)
        assert cli.main(_args(data, output, "--layouts", "expost,prefix", "--ks", "1,2")) == 0
    return output, out.getvalue()


def _log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_grid_writes_every_file(grid):
    output, printed = grid
    assert sorted(p.name for p in output.iterdir() if p.is_dir()) == sorted(GRID_RUNS)
    for run in GRID_RUNS:
        for name in ("config.json", "instances.log", "scores.json", "config.yaml"):
            assert (output / run / name).is_file(), f"{run}/{name}"
        assert run in printed
    assert (output / "bleu_laal.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = (output / "results.md").read_text(encoding="utf-8")
    for run in GRID_RUNS:
        assert f"| {run} |" in markdown
    summary = json.loads((output / "results.json").read_text(encoding="utf-8"))
    assert [r["run"] for r in summary["runs"]] == GRID_RUNS
    assert "tiny-llama" in summary["caption"] and "BLEU" in printed


def test_instances_are_simuleval_logs(grid):
    output, _ = grid
    for run, k in (("expost-slot16.wait-1", 1), ("prefix.wait-2", 2)):
        rows = _log(output / run / "instances.log")
        assert [r["index"] for r in rows] == [0, 1, 2, 3]
        for row, source, reference in zip(rows, SOURCES, REFERENCES):
            assert list(row)[: len(SIMULEVAL_KEYS)] == SIMULEVAL_KEYS
            assert row["source"] == source and row["reference"] == reference
            assert row["source_length"] == len(source.split())
            assert row["prediction_length"] == len(row["delays"]) == len(row["elapsed"])
            assert row["prediction_length"] == len(row["prediction"].split())
            assert row["delays"] == wait_k_delays(k, len(source.split()), len(row["delays"]))
            assert row["elapsed"] == sorted(row["elapsed"])
        empty = rows[2]
        assert empty["prediction"] == "" and empty["delays"] == [] and empty["tokens_fed"] == 0
        assert all(r["tokens_fed"] > 0 and r["flops"] > 0 for i, r in enumerate(rows) if i != 2)
    config = json.loads((output / "prefix.wait-2" / "config.json").read_text())
    assert (config["layout"], config["policy"], config["k"], config["n"], config["slot"]) == ("prefix", "wait-k", 2,
                                                                                              None, None)
    offline = json.loads((output / "offline" / "config.json").read_text())
    assert (offline["layout"], offline["policy"], offline["slot"]) == ("expost", "offline", 16)


def test_scores_are_the_metric_functions_of_the_instances(grid):
    output, _ = grid
    for run in GRID_RUNS:
        rows = _log(output / run / "instances.log")
        scores = json.loads((output / run / "scores.json").read_text())
        hypotheses, references = [r["prediction"] for r in rows], [r["reference"] for r in rows]
        expected = latency_scores(rows, computation_aware=True, ms_per_source_unit=300.0)
        expected["BLEU"], bleu_signature = bleu(hypotheses, references)
        expected["chrF"], chrf_signature = chrf(hypotheses, references)
        expected["tokens_fed"] = sum(r["tokens_fed"] for r in rows) / 4
        expected["gflops"] = sum(r["flops"] for r in rows) / 4 / 1e9
        expected["wall_ms"] = sum(r["wall_ms"] for r in rows) / 4
        for key, value in expected.items():
            assert scores[key] == pytest.approx(value, rel=1e-12), (run, key)
        assert {"AL", "LAAL", "AP", "DAL", "ATD", "StartOffset", "EndOffset", "AL_CA", "LAAL_CA", "AP_CA", "DAL_CA",
                "StartOffset_CA", "EndOffset_CA"} <= scores.keys()
        assert (scores["sentences"], scores["empty_predictions"], scores["failed"]) == (4, 1, 0)
        signature = scores["signature"]
        assert signature["BLEU"] == bleu_signature and signature["chrF"] == chrf_signature
        assert signature["model"] == "tiny-llama" and signature["lines"] == 4 and signature["complete"]
        assert signature["ms_per_word"] == 300.0 and "SimulEval" in signature["latency"]
        assert signature["source"].endswith("src.en")


def test_score_reproduces_scores_json(grid, capsys):
    output, _ = grid
    before = {run: (output / run / "scores.json").read_text() for run in GRID_RUNS}
    results_before = (output / "results.json").read_text()
    for run in GRID_RUNS:
        (output / run / "scores.json").unlink()
    (output / "results.json").unlink()
    (output / "bleu_laal.png").unlink()
    assert cli.main(["score", str(output)]) == 0
    assert {run: (output / run / "scores.json").read_text() for run in GRID_RUNS} == before
    assert (output / "results.json").read_text() == results_before
    assert (output / "bleu_laal.png").read_bytes()[:4] == b"\x89PNG"
    assert cli.main(["score", str(output / "prefix.wait-1")]) == 0
    assert (output / "prefix.wait-1" / "scores.json").read_text() == before["prefix.wait-1"]
    assert "prefix.wait-1" in capsys.readouterr().out
    assert cli.main(["score", str(output / "nowhere")]) == 1
    assert "not a directory" in capsys.readouterr().err


def _counting(monkeypatch, translator, fail_on: int | None = None) -> list[int]:
    """Count the streams evaluate opens (one per sentence); raise KeyboardInterrupt on number ``fail_on``."""
    calls: list[int] = []
    original = type(translator).new_stream

    def new_stream(*args, **kwargs):
        calls.append(1)
        if fail_on is not None and len(calls) == fail_on:
            raise KeyboardInterrupt
        return original(translator, *args, **kwargs)

    monkeypatch.setattr(translator, "new_stream", new_stream)
    return calls


def _options(data, output, **kwargs) -> EvaluateOptions:
    defaults = dict(source=str(data[0]), reference=str(data[1]), output=str(output), layouts="expost", ks="2",
                    no_offline=True)
    return EvaluateOptions(**{**defaults, **kwargs})


def test_resume_after_an_interrupt(monkeypatch, tmp_path, data, translator, loads, capsys):
    _counting(monkeypatch, translator, fail_on=3)
    assert cli.main(_args(data, tmp_path, "--layouts", "expost", "--ks", "2", "--no-offline")) == 130
    assert "rerun the same command to continue" in capsys.readouterr().err
    log = tmp_path / "expost-slot16.wait-2" / "instances.log"
    first = log.read_text(encoding="utf-8")
    assert [r["index"] for r in _log(log)] == [0, 1]
    calls = _counting(monkeypatch, translator)
    assert cli.main(_args(data, tmp_path, "--layouts", "expost", "--ks", "2", "--no-offline")) == 0
    assert len(calls) == 2  # only the two missing sentences were translated
    text = log.read_text(encoding="utf-8")
    assert text.startswith(first)
    assert [r["index"] for r in _log(log)] == [0, 1, 2, 3]
    assert [r["source"] for r in _log(log)] == SOURCES


def test_torn_last_line_is_redone(monkeypatch, tmp_path, data, translator):
    evaluate(translator, _options(data, tmp_path), progress=False)
    log = tmp_path / "expost-slot16.wait-2" / "instances.log"
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    log.write_text("".join(lines[:3]) + lines[3][: len(lines[3]) // 2], encoding="utf-8")  # killed mid-write
    assert [r["index"] for r in read_log(log)] == [0, 1, 2]
    calls = _counting(monkeypatch, translator)
    evaluate(translator, _options(data, tmp_path), progress=False)
    assert len(calls) == 1
    redone = log.read_text(encoding="utf-8").splitlines(keepends=True)
    assert redone[:3] == lines[:3] and len(redone) == 4
    assert {k: v for k, v in json.loads(redone[3]).items() if k not in ("elapsed", "wall_ms")} == \
           {k: v for k, v in json.loads(lines[3]).items() if k not in ("elapsed", "wall_ms")}
    # a broken line that is not the last one is damage, not a kill
    log.write_text(lines[0] + "{broken\n" + "".join(lines[2:]), encoding="utf-8")
    with pytest.raises(SimulmtError, match="line 2 is not a JSON object"):
        evaluate(translator, _options(data, tmp_path), progress=False)


def test_changed_settings_are_refused(monkeypatch, tmp_path, data, translator, loads, capsys):
    evaluate(translator, _options(data, tmp_path, lines=2), progress=False)
    calls = _counting(monkeypatch, translator)
    assert cli.main(_args(data, tmp_path, "--layouts", "expost", "--ks", "2", "--no-offline", "--target-lang", "fr")) == 1
    err = capsys.readouterr().err
    assert "written with other settings" in err and "target_lang: 'de' there, 'fr' now" in err and "Traceback" not in err
    # the record holds what the model computes with, so a model loaded in another dtype is refused too
    bf16 = Translator(copy.deepcopy(translator.model).to(torch.bfloat16), translator.tokenizer, name=translator.name)
    with pytest.raises(SimulmtError, match="dtype: 'float32' there, 'bfloat16' now"):
        evaluate(bf16, _options(data, tmp_path), progress=False)
    other = tmp_path.parent / f"{tmp_path.name}-ref.de"
    other.write_text("\n".join(REFERENCES[::-1]) + "\n", encoding="utf-8")
    with pytest.raises(SimulmtError, match="reference_sha256"):
        evaluate(translator, _options((data[0], other), tmp_path), progress=False)
    with pytest.raises(SimulmtError, match="already holds 2 finished sentences"):
        evaluate(translator, _options(data, tmp_path, lines=1), progress=False)
    assert calls == []
    evaluate(translator, _options(data, tmp_path), progress=False)  # more lines: continues
    assert len(calls) == 2
    (tmp_path / "expost-slot16.wait-2" / "config.json").unlink()
    with pytest.raises(SimulmtError, match="no config.json"):
        evaluate(translator, _options(data, tmp_path), progress=False)


def test_dtype_auto_is_recorded_as_what_it_became(tmp_path, data, translator, loads, capsys):
    """``--dtype auto`` resolves on the machine: the record says the dtype the model computes with, so a run made
    with float32 continues under auto where auto means float32 (the tiny translator here)."""
    evaluate(translator, _options(data, tmp_path, lines=2), progress=False)
    assert cli.main(_args(data, tmp_path, "--layouts", "expost", "--ks", "2", "--no-offline", "--dtype", "auto")) == 0
    assert loads[-1]["dtype"] == "auto" and translator.dtype == "float32"
    assert json.loads((tmp_path / "expost-slot16.wait-2" / "config.json").read_text())["dtype"] == "float32"
    assert EvaluateOptions(source="s", reference="r", output="o").dtype == "float32"  # measurements: the same on every machine


def test_misaligned_files_are_an_error_before_loading(tmp_path, data, loads, capsys):
    short = tmp_path / "short.de"
    short.write_text("\n".join(REFERENCES[:3]) + "\n", encoding="utf-8")
    assert cli.main(_args((data[0], short), tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert "not line-aligned" in err and "has 4 lines" in err and "has 3" in err
    assert loads == [] and not (tmp_path / "out").exists()
    with pytest.raises(SimulmtError, match="not line-aligned"):
        evaluate(None, _options((data[0], short), tmp_path / "out"))
    assert cli.main(_args(data, tmp_path / "out", "--lines", "9")) == 2
    assert "more lines than the test set has (4)" in capsys.readouterr().err


def test_a_line_that_is_not_utf8_is_an_error_before_loading(tmp_path, data, loads, capsys):
    """A bad line in the source or the reference names the file and the line; nothing is translated (a skipped
    line would shift every later pair)."""
    bad = tmp_path / "latin1.de"
    bad.write_bytes("\n".join(REFERENCES[:2]).encode() + b"\nGr\xfc\xdfe\n" + REFERENCES[3].encode() + b"\n")
    for files in ((bad, data[1]), (data[0], bad)):
        assert cli.main(_args(files, tmp_path / "out")) == 2
        err = capsys.readouterr().err
        assert f"{bad}: line 3 is not valid UTF-8 (byte 0xfc at column 3: invalid start byte)" in err
        assert loads == [] and not (tmp_path / "out").exists() and "Traceback" not in err


def test_test_sets_split_lines_by_the_one_rule(tmp_path):
    """CRLF, a BOM and a U+2028 inside a line: 2 lines each, aligned (splitlines() would find 3 in the source)."""
    source, reference = tmp_path / "src", tmp_path / "ref"
    source.write_bytes("\ufeffA man\u2028rides .\r\nA dog .\r\n".encode())
    reference.write_bytes(b"Ein Mann reitet .\nEin Hund .\n")
    test_set = read_test_set(source, reference)
    assert test_set.sources == ["A man\u2028rides .", "A dog ."] and len(test_set.references) == 2


@pytest.mark.parametrize("args, message", [
    (["--layouts", "expost,nope"], "unknown layout(s) nope"),
    (["--policies", "offline"], "offline is not a grid policy"),
    (["--policies", "wait-k", "--ks", "0,2"], "--ks: every value must be at least 1"),
    (["--policies", "read-n", "--ns", "x"], "--ns takes comma-separated whole numbers"),
    (["--lines", "0"], "--lines must be at least 1"),
    (["--ms-per-word", "0"], "--ms-per-word must be a positive number"),
])
def test_option_errors_exit_2(tmp_path, data, loads, capsys, args, message):
    assert cli.main(_args(data, tmp_path, *args)) == 2
    assert message in capsys.readouterr().err and loads == []


def test_read_n_and_python_api(tmp_path, data, translator):
    results = evaluate(translator, _options(data, tmp_path, policies="read-n", ns="2", layouts="expost,gpe",
                                            phi=64, lines=2), progress=False)
    assert [r.name for r in results] == ["expost-slot16.read-2", "gpe-phi64.read-2"]
    assert results[1].scores["signature"]["phi"] == 64 and results[1].scores["signature"]["n"] == 2
    rescored, is_grid = score_path(tmp_path)
    assert is_grid and [r.scores for r in rescored] == [r.scores for r in results]


def test_a_failed_sentence_is_recorded_and_reported(monkeypatch, tmp_path, data, translator, loads, capsys):
    original = type(translator).new_stream
    calls: list[int] = []

    def new_stream(*args, **kwargs):
        calls.append(1)
        made = original(translator, *args, **kwargs)
        if len(calls) == 2:
            def fail(words, finished=False):
                raise SimulmtError("the sentence does not fit in the context")
            made.push = fail
        return made

    monkeypatch.setattr(translator, "new_stream", new_stream)
    assert cli.main(_args(data, tmp_path, "--layouts", "expost", "--ks", "2", "--no-offline")) == 1
    err = capsys.readouterr().err
    assert "sentence 1: the sentence does not fit" in err and "1 sentence(s) could not be translated" in err
    rows = _log(tmp_path / "expost-slot16.wait-2" / "instances.log")
    assert rows[1]["error"] == "the sentence does not fit in the context" and rows[1]["prediction"] == ""
    assert json.loads((tmp_path / "expost-slot16.wait-2" / "scores.json").read_text())["failed"] == 1


def test_two_processes_never_share_a_run(tmp_path, data, translator):
    import fcntl

    run = tmp_path / "expost-slot16.wait-2"
    run.mkdir()
    with open(run / ".lock", "a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(SimulmtError, match="another process is writing"):
            evaluate(translator, _options(data, tmp_path), progress=False)


def test_batch_size_gives_the_same_log_and_says_so_in_the_signature(tmp_path, data, translator):
    one = evaluate(translator, _options(data, tmp_path / "one", layouts="expost,prefix", ks="1,2"), progress=False)
    many = evaluate(translator, _options(data, tmp_path / "many", layouts="expost,prefix", ks="1,2", batch_size=3),
                    progress=False)
    for a, b in zip(one, many):
        strip = lambda rows: [{k: v for k, v in r.items() if k not in ("elapsed", "wall_ms")} for r in rows]  # noqa
        assert strip(_log(a.directory / "instances.log")) == strip(_log(b.directory / "instances.log"))
        assert a.scores["BLEU"] == b.scores["BLEU"] and a.scores["LAAL"] == b.scores["LAAL"]
        assert b.scores["signature"]["batch_size"] == 3 and "elapsed:in-engine,batch:3" in \
            b.scores["signature"]["latency"]
        assert a.scores["signature"]["batch_size"] == 1 and "in-engine" not in a.scores["signature"]["latency"]
        assert "prompt:shared" in a.scores["signature"]["latency"]  # *_CA: a run computes its prompt once


def test_a_line_longer_than_max_words_is_refused_before_loading(tmp_path, data, loads, capsys):
    source, reference = tmp_path / "long.en", tmp_path / "long.de"
    source.write_text("A short line .\n" + " ".join(["word"] * 300) + "\n", encoding="utf-8")
    reference.write_text("Eine kurze Zeile .\nWort\n", encoding="utf-8")
    args = ["evaluate", "--source", str(source), "--reference", str(reference), "--output", str(tmp_path / "o")]
    assert cli.main(args) == 2
    assert "line 2 of" in capsys.readouterr().err and not loads
    assert cli.main(args + ["--max-words", "0"]) == 2
    assert "--max-words must be at least 1" in capsys.readouterr().err


def test_decoding_rules_are_run_options_recorded_and_their_early_ends_scored(tmp_path, data, translator, loads):
    output = tmp_path / "ban"
    assert cli.main(_args(data, output, "--layouts", "expost", "--ks", "1", "--no-offline", "--early-end", "ban",
                          "--no-repeat-ngram", "0")) == 0
    run = output / "expost-slot16.wait-1"
    config = json.loads((run / "config.json").read_text())
    assert config["decode"]["early_end"] == "ban" and config["decode"]["no_repeat_ngram"] == 0
    records = _log(run / "instances.log")
    assert all(r["early_ends"] == [] for r in records)  # none proposed under "ban"
    scores = json.loads((run / "scores.json").read_text())
    assert scores["early_ends_per_word_first_slot"] == 0 and scores["signature"]["decode"]["early_end"] == "ban"
    default = tmp_path / "read"
    assert cli.main(_args(data, default, "--layouts", "expost", "--ks", "1", "--no-offline")) == 0
    scores = json.loads((default / "expost-slot16.wait-1" / "scores.json").read_text())
    early = sum(len(r["early_ends"]) for r in _log(default / "expost-slot16.wait-1" / "instances.log"))
    assert sum(scores["early_end_causes"].values()) == early
    assert cli.main(_args(data, tmp_path / "x", "--no-repeat-ngram", "1")) == 2


def test_early_end_rates_golden():
    from simulmt.evaluation.scores import early_end_rates

    instances = [  # 5 words, 2 after a new slot; early ends: 1 in the first slot, 1 after a new slot
        {"delays": [1, 2, 3, 4, 5], "header_words": 2, "early_ends": [[1, "end", False], [4, "repeat", True]]},
        # 3 words, none after a new slot; one early end in the first slot
        {"delays": [2, 3, 3], "header_words": 0, "early_ends": [[0, "newline", False]]},
    ]
    rates = early_end_rates(instances)
    assert rates["early_ends_per_word_first_slot"] == pytest.approx(2 / 6)  # 2 ends over 8 - 2 words
    assert rates["early_ends_per_word_new_slot"] == pytest.approx(1 / 2)
    assert rates["early_end_causes"] == {"end": 1, "newline": 1, "repeat": 1}
    assert rates["early_end_places_per_word_first_slot"] == pytest.approx(2 / 6)  # each at a place of its own
    assert rates["sentences_with_early_end"] == 2
    assert early_end_rates([{**instances[1]}])["early_ends_per_word_new_slot"] is None  # no word after a new slot
    assert early_end_rates([{"delays": [1]}]) == {}  # a log from before they were recorded
    stalled = {"delays": [1, 2, 3, 4], "header_words": 2,  # proposed 3 times at word 3 (after a new slot), twice at 1
               "early_ends": [[1, "end", False], [1, "end", False], [3, "end", True], [3, "repeat", True],
                              [3, "end", True]]}
    again = early_end_rates([stalled])
    assert again["early_ends_per_word_new_slot"] == pytest.approx(3 / 2)
    assert again["early_end_places_per_word_new_slot"] == pytest.approx(1 / 2)
    assert again["early_end_places_per_word_first_slot"] == pytest.approx(1 / 2)


def test_score_prefix_scores_a_runs_first_lines_as_evaluate_does(tmp_path, data, translator, loads, capsys):
    """benchmarks/score_prefix.py: the first N sentences of a run, plain or gzipped log, scored as evaluate scores
    a run of N lines; fewer sentences than N is an error."""
    import gzip

    from helpers import load_benchmark

    prefix = load_benchmark("score_prefix")
    assert cli.main(_args(data, tmp_path / "all", "--layouts", "expost", "--ks", "1", "--no-offline")) == 0
    assert cli.main(_args(data, tmp_path / "two", "--layouts", "expost", "--ks", "1", "--no-offline",
                          "--lines", "2")) == 0
    run, short = tmp_path / "all" / "expost-slot16.wait-1", tmp_path / "two" / "expost-slot16.wait-1"
    packed = tmp_path / "packed"
    packed.mkdir()
    (packed / "instances.log.gz").write_bytes(gzip.compress((run / "instances.log").read_bytes()))
    capsys.readouterr()
    assert prefix.main(["--lines", "2", str(run), str(packed)]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    expected = json.loads((short / "scores.json").read_text())
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1:4] == [f"{expected[m]:.4g}" for m in ("BLEU", "chrF", "LAAL")]
    with pytest.raises(SystemExit, match="fewer than 99"):
        prefix.main(["--lines", "99", str(run)])


def test_threads_pins_torch_and_a_bad_count_is_refused(tmp_path, data, translator, monkeypatch, capsys):
    import torch

    before = torch.get_num_threads()
    monkeypatch.setattr(cli, "_load_translator", lambda **kwargs: translator)
    try:
        assert cli.main(_args(data, tmp_path / "one", "--layouts", "expost", "--ks", "1", "--no-offline",
                              "--threads", "1")) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    capsys.readouterr()
    assert cli.main(_args(data, tmp_path / "zero", "--threads", "0")) != 0
    assert "--threads must be at least 1, got 0" in capsys.readouterr().err
