"""simulmt evaluate --shard I/N (issue 16): the shards of a grid merge into exactly what one process writes, a
killed shard loses nothing, and shards of another split are never mixed in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import tiny_translator, write_test_set
from simulmt import cli
from simulmt.errors import SimulmtError
from simulmt.evaluation.grid import evaluate, shard_bounds
from simulmt.evaluation.options import EvaluateOptions
from simulmt.evaluation.run_dir import TIMING_KEYS

SOURCES = ["The weather is nice today.", "The children are playing in the garden.", "",
           "Where is the train station?", "A man rides a bike."]
REFERENCES = ["Das Wetter ist heute schön.", "Die Kinder spielen im Garten.", "", "Wo ist der Bahnhof?",
              "Ein Mann fährt Fahrrad."]
TIMING_SCORES = ("AL_CA", "LAAL_CA", "AP_CA", "DAL_CA", "ATD_CA", "StartOffset_CA", "EndOffset_CA", "wall_ms")


@pytest.fixture(scope="module")
def translator():
    return tiny_translator("llama", True)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path]:
    return write_test_set(tmp_path_factory.mktemp("data"), SOURCES, REFERENCES)


def options(data, output, **kwargs) -> EvaluateOptions:
    base = dict(source=str(data[0]), reference=str(data[1]), output=str(output), layouts="expost,prefix", ks="1,2",
                batch_size=2)
    return EvaluateOptions(**{**base, **kwargs})


@pytest.fixture(scope="module")
def single(tmp_path_factory, data, translator) -> Path:
    output = tmp_path_factory.mktemp("single")
    evaluate(translator, options(data, output), progress=False)
    return output


def log(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "instances.log").read_text(encoding="utf-8").splitlines()]


def untimed(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in records]


def assert_same_grid(merged: Path, single: Path) -> None:
    runs = sorted(p.name for p in single.iterdir() if (p / "instances.log").is_file())
    assert runs == sorted(p.name for p in merged.iterdir() if (p / "instances.log").is_file())
    assert len(runs) == 5
    for run in runs:
        a, b = log(single / run), log(merged / run)
        assert [r["index"] for r in b] == list(range(len(SOURCES)))
        assert untimed(a) == untimed(b), run
        sa, sb = (json.loads((d / run / "scores.json").read_text()) for d in (single, merged))
        assert {k: v for k, v in sa.items() if k not in TIMING_SCORES} == \
               {k: v for k, v in sb.items() if k not in TIMING_SCORES}, run  # incl. the signature
        assert json.loads((single / run / "config.json").read_text()) == \
               json.loads((merged / run / "config.json").read_text())


def test_blocks_cover_every_line_once():
    for lines in range(0, 12):
        for shards in range(1, 6):
            blocks = [shard_bounds(lines, i, shards) for i in range(1, shards + 1)]
            assert blocks[0][0] == 0 and blocks[-1][1] == lines
            assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
            assert max(e - s for s, e in blocks) - min(e - s for s, e in blocks) <= 1


def test_two_shards_merge_into_the_single_process_grid(tmp_path, data, translator, single, capsys):
    assert evaluate(translator, options(data, tmp_path, shard="2/2"), progress=False) == []  # the other waits
    assert "shards 1/2 not finished yet" in capsys.readouterr().err
    assert not (tmp_path / "offline").exists()
    results = evaluate(translator, options(data, tmp_path, shard="1/2"), progress=False)  # the last one merges
    assert len(results) == 5
    assert_same_grid(tmp_path, single)
    assert (tmp_path / "results.md").is_file() and (tmp_path / "bleu_laal.png").is_file()
    # a shard's own log is an ordinary run of its block: indices from 0, the first 2 sentences (of 5) in shard 1
    assert [r["source"] for r in log(tmp_path / "shards" / "1-of-2" / "prefix.wait-2")] == SOURCES[:2]


def test_a_killed_shard_loses_nothing(monkeypatch, tmp_path, data, translator, single):
    calls: list[int] = []
    original = type(translator).new_stream

    def new_stream(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt  # killed while translating its 4th sentence
        return original(translator, *args, **kwargs)

    monkeypatch.setattr(translator, "new_stream", new_stream)
    with pytest.raises(KeyboardInterrupt):
        evaluate(translator, options(data, tmp_path, shard="1/2"), progress=False)
    monkeypatch.undo()
    evaluate(translator, options(data, tmp_path, shard="2/2"), progress=False)
    assert not (tmp_path / "offline").exists()
    results = evaluate(translator, options(data, tmp_path, shard="1/2"), progress=False)  # restarted: continues
    assert len(results) == 5
    assert_same_grid(tmp_path, single)


def test_the_launcher_rank_picks_the_shard_and_bad_shards_are_refused(monkeypatch, data, tmp_path, capsys):
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "1")
    assert options(data, tmp_path).shard_of() == (2, 3)
    assert options(data, tmp_path, shard="1/4").shard_of() == (1, 4)  # an explicit shard wins
    monkeypatch.delenv("WORLD_SIZE")
    assert options(data, tmp_path).shard_of() is None
    for bad in ("0/2", "3/2", "two", "1/2/3"):
        with pytest.raises(SimulmtError, match="--shard"):
            options(data, tmp_path, shard=bad)
    assert cli.main(["evaluate", "--source", str(data[0]), "--reference", str(data[1]), "--output", str(tmp_path),
                     "--shard", "5/2"]) == 2
    assert "I must be in 1..N" in capsys.readouterr().err


def test_a_shard_of_another_split_of_the_lines_is_refused(tmp_path, data, translator):
    evaluate(translator, options(data, tmp_path, shard="2/2", lines=3, layouts="expost", ks="1", no_offline=True),
             progress=False)  # sentences 1..2 of 3
    with pytest.raises(SimulmtError, match="first_line"):  # of 5 lines, shard 2/2 is sentences 2..4: not continued
        evaluate(translator, options(data, tmp_path, shard="2/2", lines=5, layouts="expost", ks="1",
                                     no_offline=True), progress=False)
