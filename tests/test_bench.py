"""``simulmt bench`` on a tiny random model: the JSON's ratios follow from its own per-sentence records."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest

from helpers import SOURCE, tiny_translator
from simulmt import cli
from simulmt.bench import command as bench
from simulmt.translator import Translator

SENTENCES = [SOURCE, "Where is the train station?", "My brother works in a hospital in Berlin."]
LAYOUTS = ("expost", "prefix", "conversation")


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[dict, Path]:
    result = bench.benchmark(tiny_translator("llama"), SENTENCES, LAYOUTS, ("wait-k",), k=3)
    directory = tmp_path_factory.mktemp("bench")
    data, image = bench.write_outputs(result, directory)
    return json.loads(data.read_text(encoding="utf-8")), image


def _totals_ratio(runs: list[dict], reference: list[dict], key: str) -> float:
    return sum(r[key] for r in runs) / sum(r[key] for r in reference)


def _per_token_ratio(runs: list[dict], reference: list[dict]) -> float:
    mine = sum(r["wall_ms"] for r in runs) / sum(r["target_tokens"] for r in runs)
    ref = sum(r["wall_ms"] for r in reference) / sum(r["target_tokens"] for r in reference)
    return mine / ref


def test_every_configuration_is_measured_on_every_sentence(written):
    data, _ = written
    names = [c["name"] for c in data["configurations"]]
    assert names == ["offline", "expost/wait-3", "prefix/wait-3", "conversation/wait-3"]
    assert [s["source"] for s in data["sentences"]] == SENTENCES and data["skipped"] == []
    for config in data["configurations"]:
        assert len(config["runs"]) == len(config["same_output_offline_runs"]) == len(SENTENCES)
        for run in config["runs"]:
            assert run["tokens_fed"] > 0 and run["flops"] > 0 and run["wall_ms"] > 0
    assert "model:tiny-llama" in data["signature"] and "k:3" in data["signature"]


def test_ratios_are_computed_from_the_per_sentence_records(written):
    data, _ = written
    offline = data["configurations"][0]["runs"]
    for config in data["configurations"]:
        runs, same = config["runs"], config["same_output_offline_runs"]
        for ratios, reference in ((config["vs_offline"], offline), (config["vs_offline_same_output"], same)):
            assert ratios["tokens_fed"] == pytest.approx(_totals_ratio(runs, reference, "tokens_fed"))
            assert ratios["gflops"] == pytest.approx(_totals_ratio(runs, reference, "flops"))
            assert ratios["wall_ms_per_target_token"] == pytest.approx(_per_token_ratio(runs, reference))
        gflops = sorted(r["flops"] / 1e9 for r in runs)
        assert config["summary"]["gflops"]["median"] == pytest.approx(gflops[1])  # 3 sentences
        assert config["summary"]["gflops"]["min"] == pytest.approx(gflops[0])
        assert config["summary"]["tokens_fed"]["total"] == sum(r["tokens_fed"] for r in runs)


def test_offline_is_the_unit(written):
    data, _ = written
    offline = data["configurations"][0]
    for ratios in (offline["vs_offline"], offline["vs_offline_same_output"]):
        assert ratios == {"tokens_fed": 1.0, "gflops": 1.0, "wall_ms_per_target_token": 1.0}


def test_same_output_replays_write_the_streamed_words_and_feed_each_token_once(written):
    data, _ = written
    for config in data["configurations"]:
        for run, replay in zip(config["runs"], config["same_output_offline_runs"]):
            assert replay["prediction"] == run["prediction"]
            assert replay["target_tokens"] == run["target_tokens"]
            assert replay["forward_calls"] <= run["forward_calls"]
            assert replay["tokens_fed"] <= run["tokens_fed"]  # streaming never feeds less than offline


def test_prefix_recompute_feeds_more_than_expost(written):
    data, _ = written
    by_name = {c["name"]: c for c in data["configurations"]}
    expost, prefix = by_name["expost/wait-3"], by_name["prefix/wait-3"]
    assert sum(r["tokens_fed"] for r in prefix["runs"]) > sum(r["tokens_fed"] for r in expost["runs"])
    # with the output length factored out, too
    assert prefix["vs_offline_same_output"]["tokens_fed"] > expost["vs_offline_same_output"]["tokens_fed"]


def test_the_box_plot_is_written(written):
    _, image = written
    assert image.name == "bench.png" and image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert image.stat().st_size > 10_000


def test_a_sentence_that_fails_is_left_out_of_every_configuration():
    tiny = tiny_translator("llama")
    translator = Translator(tiny.model, tiny.tokenizer, name="tiny-llama")
    translator.runner.max_positions = 160
    long_line = " ".join(["The weather is nice today."] * 20)
    result = bench.benchmark(translator, [long_line, SENTENCES[1]], ("expost",), ("wait-k",), line_numbers=[4, 7])
    assert [s["line"] for s in result.skipped] == [4] and "context" in result.skipped[0]["error"]
    assert [s["line"] for s in result.sentences] == [7]
    assert all(len(r.runs) == len(r.same_output) == 1 for r in result.results)


def test_the_command(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cli, "_load_translator", lambda **kwargs: tiny_translator("llama"))
    source = tmp_path / "source.en"
    source.write_text("\n".join([SENTENCES[1], "", SENTENCES[2], SENTENCES[0]]) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    code = cli.main(["bench", "--source", str(source), "--lines", "2", "--layouts", "expost,gpe", "--policy",
                     "wait-k,read-n", "--k", "2", "--n", "2", "--output", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    assert "free decoding vs offline" in printed and "same output" in printed and "gpe/read-2" in printed
    data = json.loads((out / "bench.json").read_text(encoding="utf-8"))
    assert [s["line"] for s in data["sentences"]] == [1, 3]  # the first 2 non-empty lines
    assert len(data["configurations"]) == 1 + 2 * 2 and (out / "bench.png").exists()
    assert all(math.isfinite(c["vs_offline"]["gflops"]) for c in data["configurations"])


@pytest.mark.parametrize("args, message", [
    ([], "--source FILE is required"),
    (["--source", "x", "--layouts", "expost,nope"], "unknown layout 'nope'"),
    (["--source", "x", "--policy", "offline"], "offline decoding is always measured"),
    (["--source", "x", "--lines", "0"], "--lines must be at least 1"),
    (["--source", "/nonexistent/file"], "cannot read the source file /nonexistent/file"),
    (["--source", "x", "--streams", "1,0"], "--streams takes positive stream counts"),
    (["--source", "x", "--streams", "one"], "--streams takes comma-separated integers"),
])
def test_invalid_options_exit_2_before_loading(monkeypatch, capsys, args, message):
    monkeypatch.setattr(cli, "_load_translator", lambda **kwargs: pytest.fail("the model must not load"))
    assert cli.main(["bench", *args]) == 2
    assert message in capsys.readouterr().err


def test_a_used_line_that_is_not_utf8_is_an_error_before_loading(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(cli, "_load_translator", lambda **kwargs: pytest.fail("the model must not load"))
    source = tmp_path / "source.en"
    source.write_bytes(b"\xef\xbb\xbf" + SENTENCES[0].encode() + b"\r\n\nna\xefve\n")
    assert bench.read_sentences(str(source), 1) == ([SENTENCES[0]], [1])  # only the lines used are decoded
    assert cli.main(["bench", "--source", str(source), "--lines", "2"]) == 2
    assert f"{source}: line 3 is not valid UTF-8 (byte 0xef at column 3" in capsys.readouterr().err


def test_report_prints_both_comparisons(written):
    result = bench.benchmark(tiny_translator("llama"), SENTENCES[1:2], ("expost",), ("wait-k",))
    out = io.StringIO()
    bench.print_report(result, out)
    text = out.getvalue()
    assert "1. free decoding" in text and "2. same output" in text and "x1.00" in text and "signature:" in text


def test_streams_mode_reports_throughput_latency_and_memory_per_stream_count(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cli, "_load_translator", lambda **kwargs: tiny_translator("llama"))
    source = tmp_path / "source.en"
    source.write_text("\n".join(SENTENCES * 3) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    code = cli.main(["bench", "--source", str(source), "--lines", "8", "--layouts", "expost", "--streams", "1,4",
                     "--k", "2", "--output", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    assert "| streams | target tok/s | x 1 stream |" in printed and "plain loop tok/s" in printed
    data = json.loads((out / "bench-streams.json").read_text(encoding="utf-8"))
    one, four = data["points"]
    assert (one["streams"], four["streams"]) == (1, 4) and one["sentences"] == four["sentences"] == 8
    # the same sentences, the same greedy output, fewer forwards when batched
    assert one["target_tokens"] == four["target_tokens"] > 0 and four["forwards"] < one["forwards"]
    assert four["cache_peak_mb"] > one["cache_peak_mb"] > 0
    assert 0 < one["ms_per_word_p50"] <= one["ms_per_word_p95"]
    assert one["plain_tokens_per_s"] > 0 and data["settings"]["policy"] == "wait-k"
    # what it computed per target token: the target and the source, and a row of logits per target token at least
    for point in (one, four):
        assert point["tokens_computed"] > point["target_tokens"] and point["logit_rows"] >= point["target_tokens"]
    assert "tokens / target token" in printed and "LM head rows / target token" in printed
    assert "engine / plain" in printed
    # the rounds with every stream live: all of them with one stream; with four, all but the drain at the end
    assert one["full_target_tokens"] == one["target_tokens"] and one["full_rounds"] > 0
    assert 0 < four["full_target_tokens"] < four["target_tokens"] and 0 < four["full_seconds"] < four["seconds"]
    assert four["tokens_per_s_full"] == pytest.approx(four["full_target_tokens"] / four["full_seconds"])
    assert "every stream live: tok/s" in printed


@pytest.mark.parametrize("replays", [False, True])
def test_streams_mode_times_no_graph_recording(monkeypatch, replays):
    """On a runner that replays CUDA graphs each stream count runs untimed until a run records no graph, then
    timed; elsewhere every count runs once."""
    from types import SimpleNamespace

    from simulmt.bench import throughput

    tr = tiny_translator("llama")
    static = SimpleNamespace(graphs=True, recorded=0)
    if replays:
        monkeypatch.setattr(tr.runner, "static", static)
    monkeypatch.setattr(tr, "translate_many", lambda *a, **kw: None)
    runs = []

    def measure(translator, sentences, count, kwargs):
        runs.append(count)
        if len(runs) <= 2:  # the first two runs record graphs (the store grew in the first), then none
            static.recorded += 1
        return throughput.StreamsPoint(streams=count, sentences=1, seconds=1.0, target_tokens=1, target_words=1,
                                       forwards=1, ms_per_word_p50=1.0, ms_per_word_p95=1.0, cache_peak_mb=1.0,
                                       tokens_computed=1, logit_rows=1)
    monkeypatch.setattr(throughput, "measure", measure)
    points = throughput.measure_all(tr, SENTENCES[:2], [1, 4], {}, plain=False)
    assert [p.streams for p in points] == [1, 4]
    # with graphs: untimed runs until one records nothing, then the timed one (at most three untimed)
    assert runs == ([1, 1, 1, 1, 4, 4] if replays else [1, 4])
