"""Long-form evaluation (``simulmt evaluate --docids``): whole talks as one stream each, scored by OmniSTEval
(resegmented BLEU, chrF, LongYAAL, ...) and SimulStream (StreamLAAL), never re-implemented:

* the scores of a hand-made fixture are those of OmniSTEval's and SimulStream's own commands run on the files the
  run writes for them (and the LongYAAL of a talk checked by hand);
* a run's talks are those of the docids file, each translated as ``Translator.translate_talks`` does;
* it resumes a talk at a time; bad docids are errors before the model loads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import tiny_translator, write_test_set
from simulmt import cli
from simulmt.core.talk import ContextWindow
from simulmt.errors import SimulmtError
from simulmt.evaluation.run_dir import read_log
from simulmt.evaluation.talks import LONGFORM, read_talks, score_talk_run
from simulmt.metrics.longform import TalkOutput, longform_scores

pytest.importorskip("omnisteval", reason="the longform extra (setup.sh installs it)")
BIN = Path(sys.executable).parent

SOURCES = ["The weather is nice today.", "The children are playing.", "Where is the station?",
           "I like coffee.", "My brother works in Berlin.", "We go to the cinema tonight."]
REFERENCES = ["Das Wetter ist heute schön.", "Die Kinder spielen.", "Wo ist der Bahnhof?",
              "Ich mag Kaffee.", "Mein Bruder arbeitet in Berlin.", "Wir gehen heute Abend ins Kino."]
DOCIDS = ["talk1", "talk1", "talk1", "talk2", "talk2", "talk2"]

# hand-made: two talks, their words written after these many source words, at these ms since the talk began
FIXTURE = [
    TalkOutput("a", "I am here now. This is a nice example. Thank you.".split(),
               [2, 3, 4, 4, 6, 6, 7, 8, 9, 11, 12], [10.0 * i for i in range(11)], [4, 5, 3],
               ["I am here now.", "This is a good example.", "Thank you."]),
    TalkOutput("b", "Good morning all. Today we speak about simultaneous translation.".split(),
               [2, 3, 3, 5, 6, 7, 8, 9, 9], [5.0 * i for i in range(9)], [3, 6],
               ["Good morning everyone.", "Today we talk about streaming translation."]),
]


def test_longyaal_of_a_hand_made_fixture_by_hand():
    scores = longform_scores(FIXTURE, ms_per_word=300.0)
    # talk a, sentence 1 (words 0-4): delays 2,3,4,4 against 4 reference words: YAAL = mean(2-0, 3-1, 4-2, 4-3)
    # = 1.75; sentence 2 (offset 4, 5 words): 2,2,3,4,5 -> 1.2; sentence 3 (offset 9, length 3): 2 (the word at
    # the talk's end, 12, is not counted); talk b: 2 and 5/3. Mean of the five.
    assert scores["LongYAAL"] == pytest.approx((1.75 + 1.2 + 2 + 2 + 5 / 3) / 5)
    assert scores["resegmented"] == ["I am here now.", "This is a nice example.", "Thank you.", "Good morning all.",
                                     "Today we speak about simultaneous translation."]
    assert scores["BLEU"] > 30 and scores["StreamLAAL"] > 0 and scores["LongYAAL_CA"] > scores["LongYAAL"] * 300


def write_run(folder: Path, talks: list[TalkOutput], ms: float = 300.0) -> Path:
    """A long-form run directory holding ``talks`` (what ``simulmt evaluate --docids`` writes)."""
    folder.mkdir(parents=True)
    config = {"run": "expost-slot16.wait-3", "model": "m", "adapter": "auto", "dtype": "float32", "source_lang": "en",
              "target_lang": "en", "layout": "expost", "policy": "wait-k", "k": 3, "n": None, "tau": None,
              "slot": 16, "phi": None, "simulmt": "0", "source": "src", "reference": "ref", "lines": len(talks),
              "ms_per_word": ms, "batch_size": 1, "docids": "ids", "context_pairs": 3, "context_tokens": 384}
    (folder / "config.json").write_text(json.dumps(config))
    with open(folder / "instances.log", "w") as f:
        for i, t in enumerate(talks):
            f.write(json.dumps({"index": i, "source": t.name, "prediction": " ".join(t.words), "delays": t.delays,
                                "elapsed": t.elapsed, "line_words": t.line_words, "references": t.references,
                                "tokens_fed": 10, "flops": 1e9, "wall_ms": 5.0}) + "\n")
    return folder


def _command(name: str, *args: str, cwd: Path) -> str:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([str(BIN / name), *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout + done.stderr


def test_scores_equal_omnisteval_and_simulstream_run_on_the_files_written_for_them(tmp_path):
    run = write_run(tmp_path / "run", FIXTURE)
    result = score_talk_run(run)
    assert json.loads((run / "scores.json").read_text())["LongYAAL"] == result.scores["LongYAAL"]
    folder = run / LONGFORM
    assert (folder / "resegmented.txt").read_text().splitlines()[1] == "This is a nice example."
    _command("omnisteval", "longform", "--speech_segmentation", "segmentation.yaml", "--ref_sentences_file",
             "references.txt", "--hypothesis_file", "hypotheses.jsonl", "--word_level", "--lang", "en", "--bleu_tokenizer", "13a",
             "--output_folder", "omni", cwd=folder)
    rows = (folder / "omni" / "scores.tsv").read_text().splitlines()[1:]
    found = {name: float(value) for name, value in (row.split("\t") for row in rows)}
    ms, close = 300.0, dict(abs=1e-4)  # (the file has 4 decimals)
    assert found["BLEU"] == pytest.approx(result.scores["BLEU"], **close)
    assert found["chrF"] == pytest.approx(result.scores["chrF"], **close)
    assert found["LongYAAL (CU)"] / ms == pytest.approx(result.scores["LongYAAL"], **close)
    assert found["LongLAAL (CU)"] / ms == pytest.approx(result.scores["LongLAAL"], **close)
    assert found["LongYAAL (CA)"] == pytest.approx(result.scores["LongYAAL_CA"], **close)
    out = _command("simulstream_score_latency", "--scorer", "stream_laal", "--eval-config", "simulstream.yaml",
                   "--log-file", "simulstream.jsonl", "--reference", "references.txt", "--audio-definition",
                   "segmentation.yaml", cwd=folder)
    line = next(x for x in out.splitlines() if "LatencyScores" in x)
    ideal = float(line.split("ideal_latency=")[1].split(",")[0])
    aware = float(line.split("computational_aware_latency=")[1].split(")")[0])
    assert ideal * 1000 / ms == pytest.approx(result.scores["StreamLAAL"], rel=1e-3)
    assert aware * 1000 == pytest.approx(result.scores["StreamLAAL_CA"], rel=1e-3)


@pytest.fixture(scope="module")
def translator():
    return tiny_translator("llama", True)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path, Path]:
    folder = tmp_path_factory.mktemp("talks")
    source, reference = write_test_set(folder, SOURCES, REFERENCES)
    docids = folder / "docids"
    docids.write_text("\n".join(DOCIDS) + "\n")
    return source, reference, docids


def _args(data, output, *extra) -> list[str]:
    return ["evaluate", "--source", str(data[0]), "--reference", str(data[1]), "--docids", str(data[2]),
            "--output", str(output), "--ks", "2", "--no-offline", *extra]


def test_evaluate_docids_streams_each_talk_and_scores_it_long_form(tmp_path, data, translator, loads, capsys):
    output = tmp_path / "out"
    assert cli.main(_args(data, output, "--layouts", "expost,prefix", "--context-pairs", "2", "--batch-size",
                          "2")) == 0
    table = capsys.readouterr().out
    assert "StreamLAAL" in table and "LongYAAL" in table and "whole talks" in table
    for run, layout in (("expost-slot16.wait-2", "expost"), ("prefix.wait-2", "prefix")):
        records = read_log(output / run / "instances.log")
        assert [r["source"] for r in records] == ["talk1", "talk2"]
        expected = list(translator.translate_talks([SOURCES[:3], SOURCES[3:]], layout, "wait-k", k=2,
                                                   window=ContextWindow(2, 384)))
        assert [r["prediction"] for r in records] == [t.prediction for t in expected]
        assert [r["delays"] for r in records] == [t.delays for t in expected]
        assert records[0]["references"] == REFERENCES[:3] and records[1]["line_words"] == [3, 5, 6]
        scores = json.loads((output / run / "scores.json").read_text())
        for key in ("BLEU", "chrF", "StreamLAAL", "LongYAAL", "StreamLAAL_CA", "LongYAAL_CA"):
            assert isinstance(scores[key], float), key
        assert scores["talks"] == 2 and scores["sentences"] == 6 and scores["signature"]["context_pairs"] == 2
        assert (output / run / LONGFORM / "hypotheses.jsonl").is_file()
    assert "StreamLAAL" in (output / "results.md").read_text()
    # rerun: nothing to do, the same scores; other context settings are refused
    before = (output / "prefix.wait-2" / "scores.json").read_text()
    assert cli.main(_args(data, output, "--layouts", "expost,prefix", "--context-pairs", "2")) == 0
    assert json.loads((output / "prefix.wait-2" / "scores.json").read_text())["BLEU"] == json.loads(before)["BLEU"]
    assert cli.main(_args(data, output, "--layouts", "prefix", "--context-pairs", "1")) == 1
    assert "context_pairs" in capsys.readouterr().err


def test_docids_errors(tmp_path):
    ids = tmp_path / "ids"
    ids.write_text("a\na\nb\na\n")
    with pytest.raises(SimulmtError, match="consecutive"):
        read_talks(ids, 4)
    with pytest.raises(SimulmtError, match="fewer"):
        read_talks(ids, 5)
    ids.write_text("a\n\nb\n")
    with pytest.raises(SimulmtError, match="empty"):
        read_talks(ids, 3)
    ids.write_text("x\nx\ny\n")
    talks, _, _ = read_talks(ids, 3)
    assert [(t.name, t.start, t.end) for t in talks] == [("x", 0, 2), ("y", 2, 3)]


def test_talk_shards_are_whole_talks_balanced_by_source_words(tmp_path):
    from simulmt.evaluation.talks import talk_shard_bounds
    from simulmt.evaluation.testset import TestSet

    lines = [" ".join(["w"] * n) for n in (10, 10, 30, 5, 5, 5, 40, 1, 1, 2)]
    ids = tmp_path / "ids"
    ids.write_text("a\na\nb\nc\nc\nc\nd\ne\nf\nf\n")
    talks, _, _ = read_talks(ids, len(lines))  # words per talk: a 20, b 30, c 15, d 40, e 1, f 3 (109)
    test_set = TestSet(sources=lines, references=lines, source_path=Path("s"), reference_path=Path("r"),
                       source_sha256="", reference_sha256="")
    for shards in range(1, 8):
        blocks = [talk_shard_bounds(talks, test_set, i, shards) for i in range(1, shards + 1)]
        assert blocks[0][0] == 0 and blocks[-1][1] == len(talks)
        assert all(a[1] == b[0] and a[0] <= a[1] for a, b in zip(blocks, blocks[1:]))
    # a talk goes where its middle word is: 2 shards of 54.5 words: a, b (middles 10, 35) | c, d, e, f
    assert [talk_shard_bounds(talks, test_set, i, 2) for i in (1, 2)] == [(0, 2), (2, 6)]
    assert [talk_shard_bounds(talks, test_set, i, 3) for i in (1, 2, 3)] == [(0, 2), (2, 3), (3, 6)]
    one = [talk_shard_bounds(talks[3:4], test_set, i, 2) for i in (1, 2)]
    assert one == [(0, 0), (0, 1)]  # one talk: its middle word is in shard 2's half, shard 1 has none


def test_two_talk_shards_merge_into_the_single_process_run(tmp_path, data, translator, loads, capsys):
    """``--shard I/N`` with ``--docids``: each shard streams its whole talks; the last to finish merges them into
    the run one process writes (the same records, timings aside; the same scores and signature)."""
    single, sharded = tmp_path / "single", tmp_path / "sharded"
    run = "expost-slot16.wait-2"
    assert cli.main(_args(data, single, "--layouts", "expost", "--context-pairs", "2")) == 0
    assert cli.main(_args(data, sharded, "--layouts", "expost", "--context-pairs", "2", "--shard", "2/2")) == 0
    assert "shards 1/2 not finished yet" in capsys.readouterr().err and not (sharded / run).exists()
    assert [r["source"] for r in read_log(sharded / "shards" / "2-of-2" / run / "instances.log")] == ["talk2"]
    assert cli.main(_args(data, sharded, "--layouts", "expost", "--context-pairs", "2", "--shard", "1/2")) == 0
    assert "merged 2 shards" in capsys.readouterr().err

    def untimed(path: Path) -> list[dict]:
        return [{k: v for k, v in r.items() if k not in ("elapsed", "wall_ms", "read_elapsed")}
                for r in read_log(path / run / "instances.log")]

    assert untimed(sharded) == untimed(single) and [r["index"] for r in untimed(sharded)] == [0, 1]
    a, b = (json.loads((d / run / "scores.json").read_text()) for d in (single, sharded))
    assert {k: v for k, v in a.items() if "_CA" not in k and k != "wall_ms"} == \
           {k: v for k, v in b.items() if "_CA" not in k and k != "wall_ms"}  # (the signature included)
    assert (sharded / run / LONGFORM / "hypotheses.jsonl").is_file() and (sharded / "results.md").is_file()


def test_the_computation_aware_clock_overlaps_compute_with_the_talk():
    from simulmt.metrics.longform import realtime_emissions

    # word 1 arrives at 300 ms, word 2 at 600, word 3 at 900; the stream reads 1 and 2 (1 ms), writes a word
    # (4 ms later), reads 3, and spends 500 ms on the next word: a read waits for its word, compute adds up
    assert realtime_emissions([2, 3], [5.0, 506.0], [0.0, 1.0, 6.0], 300.0) == [604.0, 1400.0]
    # compute slower than speech: the clock falls behind the talk and stays behind
    assert realtime_emissions([1, 2], [400.0, 800.0], [0.0, 400.0], 300.0) == [700.0, 1100.0]


def test_news_headlines_start_documents():
    """benchmarks/news_docids.py: a line that does not end a sentence (a headline) opens a new document, so
    context for training never crosses from one article to the next; an empty line does not."""
    from helpers import load_benchmark

    document_ids = load_benchmark("news_docids").document_ids
    lines = ["Food: Where European inflation slipped up", "The zoom in food prices is the force.",
             "Official forecasts predicted 3 percent, Bloomberg said.", "", "Government crisis coming, says Gallup",
             "Fidesz support shot up \"in early December.\"", "Dr. Smith agreed."]
    assert document_ids(lines) == ["doc0"] * 4 + ["doc1"] * 3
    assert document_ids(["No headline first.", "Then one", "And its text."]) == ["doc0", "doc1", "doc1"]


def test_joined_pairs_stay_inside_an_article_and_under_the_length():
    """benchmarks/joined_pairs.py: consecutive pairs of one article joined; a group that would cross into the next
    article, is too long, or has a line before its last that does not end a sentence (a headline) is skipped one
    line at a time; strided sampling keeps a failed group's first line when asked."""
    from helpers import load_benchmark

    bench = load_benchmark("joined_pairs")
    sources = ["Headline one", "A b.", "C d.", "E f.", "Headline two", "G h.", "I j k l m n.", "O p.", "Q \"r?\"",
               "S t."]
    targets = [s.upper() for s in sources]
    docs = ["d0"] * 4 + ["d1"] * 6
    pairs = bench.joined(sources, targets, docs, 1, 10, 2, 4)
    # "E f." + "Headline two" crosses articles, "Headline two" + "G h." starts at a headline, "I j k l m n." + "O p."
    # is too long: all skipped; a quoted question ends a sentence
    assert pairs == [("A b. C d.", "A B. C D."), ("O p. Q \"r?\"", "O P. Q \"R?\"")]
    assert bench.joined(sources, targets, docs, 1, 1, 2, 4) == pairs[:1]  # at most ``count``
    assert bench.joined(sources, targets, docs, 0, 10, 3, 100)[0] == ("A b. C d. E f.", "A B. C D. E F.")
    # a group at lines 1, 4, 7: the one at 4 starts at a headline
    assert bench.strided(sources, targets, docs, 1, 3, 3, 2, 100, False) == (
        [("A b. C d.", "A B. C D."), ("O p. Q \"r?\"", "O P. Q \"R?\"")], 2)
    kept, groups = bench.strided(sources, targets, docs, 1, 3, 3, 2, 100, True)
    assert kept[1] == ("Headline two", "HEADLINE TWO") and len(kept) == 3 and groups == 2
    assert bench.ends_sentence("He said \u201cno.\u201d ") and bench.ends_sentence("Er sagte: \u00bbNein.\u00ab")
    assert not bench.ends_sentence("Headline: one")
    assert bench.strided(sources, targets, docs, 7, 3, 5, 2, 100, True) == ([("O p. Q \"r?\"", "O P. Q \"R?\"")], 1)
    # (the corpus ends: no group at line 10 and beyond)


def test_a_talk_run_shows_progress_in_source_words_as_sentences_finish(tmp_path, data, translator):
    """With talks batched, a talk's lines are logged only when the whole talk is done; the progress bar counts the
    source words of every finished sentence of any talk instead, and ends at the test set's word count."""
    import io

    from simulmt.evaluation.grid import evaluate
    from simulmt.evaluation.options import EvaluateOptions

    seen = []
    original = translator.translate_talks

    def watched(*args, on_sentence=None, **kwargs):
        def counted(done):
            seen.append(done.source_length)
            on_sentence(done)
        return original(*args, on_sentence=counted, **kwargs)

    translator.translate_talks = watched
    err = io.StringIO()
    try:
        evaluate(translator, EvaluateOptions(source=str(data[0]), reference=str(data[1]), docids=str(data[2]),
                                             output=str(tmp_path / "out"), layouts="expost", ks="2", no_offline=True,
                                             batch_size=2), progress=True, err=err)
    finally:
        translator.translate_talks = original
    total = sum(len(line.split()) for line in SOURCES)
    assert len(seen) >= 2 and sum(seen) == total  # (a talk cuts its own sentences: not one per line)
    assert f"{total}/{total}" in err.getvalue() and "word" in err.getvalue() and "2/2 talks" in err.getvalue()


def test_a_talk_shard_without_talks_finishes_at_once(tmp_path, data, translator, loads, capsys):
    """One talk in two shards: shard 1 gets none (the talk's middle word is in shard 2's half); it finishes empty
    and the merge still writes the one-talk run."""
    run = tmp_path / "o" / "expost-slot16.wait-2"
    assert cli.main(_args(data, tmp_path / "o", "--lines", "3", "--layouts", "expost", "--shard", "1/2")) == 0
    assert "shards 2/2 not finished yet" in capsys.readouterr().err
    assert cli.main(_args(data, tmp_path / "o", "--lines", "3", "--layouts", "expost", "--shard", "2/2")) == 0
    assert [r["source"] for r in read_log(run / "instances.log")] == ["talk1"]
    assert json.loads((run / "scores.json").read_text())["talks"] == 1


def test_the_longform_table_has_a_row_per_run_with_its_scores(tmp_path, capsys):
    """benchmarks/longform_table.py: README's long-form table, read from the runs' scores.json."""
    from helpers import load_benchmark

    run = write_run(tmp_path / "grid" / "expost-slot16.wait-3", FIXTURE)
    scores = score_talk_run(run).scores
    table = load_benchmark("longform_table")
    table.main([f"shipped={tmp_path / 'grid'}", f"again={run}", "--complete"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and lines[0].startswith("| adapter | run | context | BLEU |")
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells[:4] == ["shipped", "expost-slot16.wait-3", "3 pairs / 384 tokens", f"{scores['BLEU']:.2f}"]
    assert cells[6] == f"{scores['LongYAAL']:.2f}" and cells[-2:] == ["2", "5"]
    assert lines[3].startswith("| again |")


def test_a_talk_cut_by_another_lines_is_never_continued_or_merged(tmp_path, data, translator, loads, capsys):
    """--lines 4 cuts talk 2 after its first line; a rerun with all 6 lines must not take that logged talk as
    finished (one process or a shard: the shard's config is the same, only its talks' lines differ)."""
    for extra, out in (((), "one"), (("--shard", "2/2"), "sharded")):
        assert cli.main(_args(data, tmp_path / out, "--lines", "4", "--layouts", "expost", *extra)) == 0
        capsys.readouterr()
        assert cli.main(_args(data, tmp_path / out, "--layouts", "expost", *extra)) == 1
        assert "'talk2' was logged with 1 lines" in capsys.readouterr().err


def test_a_talk_shard_of_another_split_is_refused(tmp_path, data, translator, loads, capsys):
    assert cli.main(_args(data, tmp_path, "--layouts", "expost", "--shard", "2/2")) == 0  # talk 2
    capsys.readouterr()
    assert cli.main(_args(data, tmp_path, "--layouts", "expost", "--shard", "2/3")) == 0  # another split: its own
    assert "not finished yet" in capsys.readouterr().err
    assert cli.main(_args(data, tmp_path, "--layouts", "expost", "--lines", "3", "--shard", "2/2")) == 1
    assert "first_line" in capsys.readouterr().err  # (of 3 lines, shard 2/2 starts at talk 0)


def test_docids_with_speech_is_refused(tmp_path, data, loads, capsys):
    wavs = tmp_path / "wavs.list"
    wavs.write_text("a.wav\n")
    assert cli.main(["evaluate", "--source-audio", str(wavs), "--reference", str(data[1]), "--docids",
                     str(data[2]), "--output", str(tmp_path / "o")]) == 2
    assert "speech talks are not scored long-form" in capsys.readouterr().err
    assert not loads
