"""ATD for speech input (delays in ms of audio): the pure function, its computation-aware variant, SimulEval 1.1.4's
own ATD scorer on the same speech instances, and ``simulmt evaluate --source-audio``'s scores.json."""

from __future__ import annotations

import json
import random
from statistics import mean

import pytest
from pytest import approx

from simulmt.evaluation.scores import score_instances
from simulmt.metrics.latency import SPEECH_ATD_SOURCE_WORD_MS, average_token_delay_ms


# --- hand-computed -------------------------------------------------------------------------------------------------

def test_source_words_of_300_ms_and_chunks_at_the_distinct_delays():
    assert SPEECH_ATD_SOURCE_WORD_MS == 300.0
    # delays [640, 640, 1280]: source chunks (0, 640] -> words ending at 300, 600, 640 and (640, 1280] -> 940,
    # 1240, 1280. Target words last 0 ms, so T = D = [640, 640, 1280].
    # words 1, 2 (chunk 1, X_<1 = Y_<1 = 0): a = min(t, 3) = 1, 2 -> E = 300, 600
    # word 3 (chunk 2, X_<2 = 3, Y_<2 = 2): a = min(3 - max(0, 2 - 3), 6) = 3 -> E = 640
    # ATD = ((640 - 300) + (640 - 600) + (1280 - 640)) / 3 = (340 + 40 + 640) / 3 = 340
    assert average_token_delay_ms([640, 640, 1280]) == approx(340.0)


def test_more_target_than_source_words_in_a_chunk():
    # delays [500, 500, 500, 1000]: source (0, 500] -> 300, 500; (500, 1000] -> 800, 1000
    # chunk 1 (X_<1 = Y_<1 = 0): a = min(t, 2) = 1, 2, 2 -> 500 - 300, 500 - 500, 500 - 500 = 200, 0, 0
    # chunk 2 (X_<2 = 2, Y_<2 = 3): a = min(4 - max(0, 3 - 2), 4) = 3 -> E_3 = 800 -> 1000 - 800 = 200
    # ATD = (200 + 0 + 0 + 200) / 4 = 100
    assert average_token_delay_ms([500, 500, 500, 1000]) == approx(100.0)


def test_fewer_target_than_source_words_aligns_with_earlier_source():
    # delays [1000, 2000]: source (0, 1000] -> 300, 600, 900, 1000; (1000, 2000] -> 1300, 1600, 1900, 2000
    # word 1 (chunk 1): a = min(1, 4) = 1 -> 1000 - 300 = 700
    # word 2 (chunk 2, X_<2 = 4, Y_<2 = 1): a = min(2 - max(0, 1 - 4), 8) = 2 -> E_2 = 600 -> 2000 - 600 = 1400
    # ATD = (700 + 1400) / 2 = 1050
    assert average_token_delay_ms([1000, 2000]) == approx(1050.0)


def test_a_word_before_any_audio_and_a_short_last_piece():
    # delays [0, 700]: chunk 1 (0, 0] has no source word: a = min(1, 0) = 0 -> E_0 = 0 -> 0 - 0 = 0
    # chunk 2 (0, 700] -> 300, 600, 700; X_<2 = 0, Y_<2 = 1: a = min(2 - 1, 3) = 1 -> 700 - 300 = 400
    # ATD = (0 + 400) / 2 = 200
    assert average_token_delay_ms([0, 700]) == approx(200.0)
    # uneven block ends, as simulmt logs them (available_ms = end + 2.5, the last capped at the duration):
    # [642.5, 1282.5, 1500]: source 300, 600, 642.5 | 942.5, 1242.5, 1282.5 | 1500
    # word 1: a = 1 -> 642.5 - 300 = 342.5; word 2 (X_<2 = 3, Y_<2 = 1): a = min(2, 6) = 2 -> 1282.5 - 600 = 682.5
    # word 3 (X_<3 = 6, Y_<3 = 2): a = min(3, 7) = 3 -> 1500 - 642.5 = 857.5;  ATD = 1882.5 / 3 = 627.5
    assert average_token_delay_ms([642.5, 1282.5, 1500]) == approx(627.5)


def test_computation_aware():
    # delays [640, 640, 1280], wall ms since the start [100, 150, 900]: compute C = [100, 50, 750]
    # T_1 = max(640, 0) + 100 = 740; T_2 = max(640, 740) + 50 = 790; T_3 = max(1280, 790) + 750 = 2030
    # aligned source ends as without compute: 300, 600, 640
    # ATD_CA = ((740 - 300) + (790 - 600) + (2030 - 640)) / 3 = (440 + 190 + 1390) / 3 = 2020 / 3
    assert average_token_delay_ms([640, 640, 1280], [100, 150, 900]) == approx(2020 / 3)
    assert average_token_delay_ms([640, 640, 1280], [0, 0, 0]) == average_token_delay_ms([640, 640, 1280])


def test_refusals():
    with pytest.raises(ValueError, match="empty prediction"):
        average_token_delay_ms([])
    with pytest.raises(ValueError, match="non-decreasing"):
        average_token_delay_ms([640, 320])
    with pytest.raises(ValueError, match="non-negative"):
        average_token_delay_ms([-1, 320])
    with pytest.raises(ValueError, match="elapsed"):
        average_token_delay_ms([640, 1280], [10.0])


# --- SimulEval 1.1.4's own scorer ----------------------------------------------------------------------------------

def _speech_instance(rng: random.Random, index: int) -> dict:
    """A speech instance as simulmt logs it: blocks of ``block_ms`` (the last one shorter), delays in ms at block
    ends (+2.5 ms, as available_ms, or not), several words per block or none, wall ms rising."""
    block_ms = rng.choice([160, 320, 640, 1000])
    duration = rng.choice([block_ms * rng.randint(1, 8), rng.uniform(100, 6000)])
    blocks = max(1, int(-(-duration // block_ms)))
    reach = rng.choice([0.0, 2.5])
    ends = [min(block_ms * (b + 1) + reach, duration) for b in range(blocks)]
    delays, blocks_read, wall = [], [], []
    spent = 0.0
    start = rng.choice([0, 0, 1])  # a word may come before any audio (delay 0)
    for b in range(start, blocks + 1):
        for _ in range(rng.choice([0, 0, 1, 1, 2, 3, 5])):
            delays.append(0.0 if b == 0 else ends[b - 1])
            blocks_read.append(b)
            spent += rng.choice([0.0, 3.5, 40.0, 250.0, 1234.5])
            wall.append(spent)
    words = " ".join(f"w{i}" for i in range(len(delays)))
    return {"index": index, "prediction": words, "delays": delays, "elapsed": wall,
            "prediction_length": len(delays), "reference": "ein kleiner Satz", "source": f"clip{index}.wav",
            "source_length": duration, "delays_blocks": blocks_read}


def _simuleval_log(sev, ins: dict):
    """The instance as SimulEval holds it after a run: its ``elapsed`` is the audio time plus the wall time."""
    return sev.instance.LogInstance(json.dumps({
        **{k: ins[k] for k in ("index", "prediction", "delays", "reference", "source", "source_length")},
        "elapsed": [d + w for d, w in zip(ins["delays"], ins["elapsed"])]}))


def _simuleval_live(sev, ins: dict):
    """The instance as a live speech-to-text run holds it (no --output): a SpeechToTextInstance."""
    live = sev.instance.SpeechToTextInstance(ins["index"], None, None)
    live.latency_unit = "word"
    live.reference = ins["reference"]
    live.delays = list(ins["delays"])
    live.elapsed = [d + w for d, w in zip(ins["delays"], ins["elapsed"])]
    live.prediction_list = ins["prediction"].split()
    return live


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_sentences_equal_simulevals_atd(simuleval):
    rng = random.Random(2023)
    checked = 0
    for index in range(300):
        ins = _speech_instance(rng, 0)
        if not ins["delays"]:
            continue
        for build in (_simuleval_log, _simuleval_live):
            sev = {0: build(simuleval, ins)}
            assert average_token_delay_ms(ins["delays"]) == approx(
                simuleval.scorers["ATD"](computation_aware=False)(sev), rel=1e-12, abs=1e-9), ins
            assert average_token_delay_ms(ins["delays"], ins["elapsed"]) == approx(
                simuleval.scorers["ATD"](computation_aware=True)(sev), rel=1e-12, abs=1e-6), ins
        checked += 1
    assert checked > 200


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_score_instances_reports_simulevals_corpus_atd(simuleval):
    """score_instances on speech instances: ATD and ATD_CA are SimulEval's corpus ATD and ATD_CA (the mean over
    the sentences with a prediction; empty ones skipped), in the order of the text metrics."""
    rng = random.Random(7)
    for _ in range(30):
        corpus = [_speech_instance(rng, i) for i in range(rng.randint(1, 6))]
        if not any(ins["delays"] for ins in corpus):
            continue
        scores = score_instances(corpus, ms_per_word=1.0)
        sev = {i: _simuleval_log(simuleval, ins) for i, ins in enumerate(corpus)}
        assert scores["ATD"] == approx(simuleval.scorers["ATD"](computation_aware=False)(sev), rel=1e-12, abs=1e-9)
        assert scores["ATD_CA"] == approx(simuleval.scorers["ATD"](computation_aware=True)(sev), rel=1e-12, abs=1e-6)
        names = [k for k in scores if k.split("_")[0] in ("AL", "LAAL", "AP", "DAL", "ATD", "StartOffset",
                                                          "EndOffset")]
        assert names == ["AL", "LAAL", "AP", "DAL", "ATD", "StartOffset", "EndOffset", "AL_CA", "LAAL_CA", "AP_CA",
                         "DAL_CA", "ATD_CA", "StartOffset_CA", "EndOffset_CA"]


def test_text_instances_keep_word_atd_and_no_atd_ca():
    text = [{"index": 0, "prediction": "a b c d", "delays": [2, 3, 4, 4], "elapsed": [1.0, 2.0, 3.0, 4.0],
             "reference": "w x y z", "source_length": 4}]
    scores = score_instances(text)
    assert scores["ATD"] == 2.0 and "ATD_CA" not in scores  # tests/test_metrics.py's worked example


# --- simulmt evaluate --source-audio -------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_evaluate_on_audio_reports_atd_in_ms(tmp_path):
    from test_speech_model import tiny_speech, write_audio_set

    from simulmt.evaluation.grid import evaluate
    from simulmt.evaluation.options import EvaluateOptions
    from simulmt.evaluation.reports import table_rows
    from simulmt.evaluation.run_dir import read_log

    write_audio_set(tmp_path)
    options = EvaluateOptions(source_audio=str(tmp_path / "audio.list"), reference=str(tmp_path / "ref.de"),
                              output=str(tmp_path / "grid"), layouts="interleaved", ks="2", no_offline=True)
    [result] = evaluate(tiny_speech(), options, progress=False)
    records = [r for r in read_log(result.directory / "instances.log") if r["delays"]]
    assert records and all("delays_blocks" in r for r in records)
    scores = json.loads((result.directory / "scores.json").read_text())
    assert scores["ATD"] == approx(mean(average_token_delay_ms(r["delays"]) for r in records), rel=1e-12)
    assert scores["ATD_CA"] == approx(mean(average_token_delay_ms(r["delays"], r["elapsed"]) for r in records),
                                      rel=1e-12)
    assert 0 <= scores["ATD"] <= 2100 and scores["ATD_CA"] >= scores["ATD"]
    header, [row] = table_rows([result])
    assert row[header.index("ATD")] == format(scores["ATD"], ".2f")  # results.md's ATD column is filled
