"""Latency and quality metrics: hand-computed golden values, edge cases, and a cross-check with SimulEval.

Notation: D = delays (source words read when each target word was written), |X| = source length,
|Y| = target length used by the metric (reference length when given for AL/AP), "step" = |X| / |Y|.
"""

from __future__ import annotations

import json
import random
import sys
import types

import pytest

from simulmt.errors import SimulmtError
from simulmt.metrics import (
    LATENCY_METRICS,
    average_lagging,
    average_proportion,
    average_token_delay,
    bleu,
    chrf,
    comet,
    computation_aware_delays,
    differentiable_average_lagging,
    end_offset,
    latency_scores,
    length_adaptive_average_lagging,
    reference_length,
    start_offset,
)

approx = pytest.approx


def all_metrics(delays, source_length, reference_length=None):
    return {name: f(delays, source_length, reference_length) for name, f in LATENCY_METRICS.items()}


# --- golden values ---------------------------------------------------------------------------------

def test_basic_example():
    # D = [2, 3, 4, 4], |X| = 4, |Y| = 4, step = 1.
    # AL: tau = 3 (first D >= 4 is the 3rd), AL = ((2-0) + (3-1) + (4-2)) / 3 = 6/3 = 2.0
    # LAAL: max(4, 4) = 4, same as AL = 2.0
    # AP = (2+3+4+4) / (4*4) = 13/16 = 0.8125
    # DAL: D' = [2, max(3, 2+1)=3, max(4, 3+1)=4, max(4, 4+1)=5],
    #      DAL = ((2-0) + (3-1) + (4-2) + (5-3)) / 4 = 8/4 = 2.0
    # ATD: target chunks [2] [3] [4 4]; target end times T = [3, 4, 5, 6]
    #      (T_t = max(D_t, T_{t-1}) + 1); aligned source a(t) = min(t - max(0, Y<c - X<c), D_t):
    #      t1: min(1, 2)=1; t2: Y<=1, X<=2 -> min(2, 3)=2; t3: Y<=2, X<=3 -> min(3, 4)=3; t4: min(4, 4)=4
    #      ATD = ((3-1) + (4-2) + (5-3) + (6-4)) / 4 = 2.0
    # StartOffset = 2, EndOffset = 4 - 4 = 0
    expected = {"AL": 2.0, "LAAL": 2.0, "AP": 0.8125, "DAL": 2.0, "ATD": 2.0, "StartOffset": 2.0, "EndOffset": 0.0}
    assert all_metrics([2, 3, 4, 4], 4) == approx(expected)
    assert all_metrics([2, 3, 4, 4], 4, 4) == approx(expected)  # reference of the same length: no change
    assert all(isinstance(v, float) for v in all_metrics([2, 3, 4, 4], 4).values())
    assert start_offset([2, 3, 4, 4], 4) == 2.0 and end_offset([2, 3, 4, 4], 4) == 0.0  # the functions, directly


def test_prediction_longer_than_reference_al_vs_laal():
    # D = [1, 2, 3, 3, 3, 3], |X| = 3, 6 predicted words, reference of 4 words.
    # tau = 3 (D_3 = 3 = |X|).
    # AL with reference: step = 3/4 = 0.75, AL = ((1-0) + (2-0.75) + (3-1.5)) / 3 = 3.75/3 = 1.25
    # AL without reference: step = 3/6 = 0.5, AL = ((1-0) + (2-0.5) + (3-1)) / 3 = 4.5/3 = 1.5
    # LAAL: step = 3/max(6, 4) = 0.5 -> 1.5: over-generation does not lower the lag
    d, x = [1, 2, 3, 3, 3, 3], 3
    assert average_lagging(d, x, 4) == approx(1.25)
    assert average_lagging(d, x) == approx(1.5)
    assert length_adaptive_average_lagging(d, x, 4) == approx(1.5)
    assert length_adaptive_average_lagging(d, x) == approx(1.5)
    # AP = sum(D) / (|X| |Y|) = 15 / (3*4) = 1.25 with the reference length, 15 / (3*6) = 5/6 without
    assert average_proportion(d, x, 4) == approx(1.25)
    assert average_proportion(d, x) == approx(5 / 6)
    # DAL ignores the reference: step = 3/6 = 0.5, D' = [1, 2, 3, 3.5, 4, 4.5],
    # DAL = (1 + 1.5 + 2 + 2 + 2 + 2) / 6 = 10.5/6 = 1.75
    assert differentiable_average_lagging(d, x, 4) == approx(1.75)
    assert differentiable_average_lagging(d, x) == approx(1.75)
    # ATD: chunks [1] [2] [3 3 3 3]; T = [2, 3, 4, 5, 6, 7]; a = [1, 2, 3, 3, 3, 3]
    #      ATD = (1 + 1 + 1 + 2 + 3 + 4) / 6 = 12/6 = 2.0
    assert average_token_delay(d, x, 4) == approx(2.0)


def test_prediction_shorter_than_reference():
    # D = [2, 4], |X| = 4, reference of 4 words: step = 1, tau = 2, AL = ((2-0) + (4-1)) / 2 = 2.5
    # LAAL: max(2, 4) = 4 -> the same 2.5; without reference step = 2: AL = ((2-0) + (4-2)) / 2 = 2.0
    assert average_lagging([2, 4], 4, 4) == approx(2.5)
    assert length_adaptive_average_lagging([2, 4], 4, 4) == approx(2.5)
    assert average_lagging([2, 4], 4) == approx(2.0)


def test_delays_at_and_after_the_source_end():
    # Everything written after reading the whole source: D = [4, 4, 4], |X| = 4: tau = 1, AL = 4 - 0 = 4
    assert average_lagging([4, 4, 4], 4) == approx(4.0)
    assert length_adaptive_average_lagging([4, 4, 4], 4) == approx(4.0)
    # The words after tau do not count: D = [1, 4, 4, 4], |X| = 4, |Y| = 4: tau = 2,
    # AL = ((1-0) + (4-1)) / 2 = 2.0
    assert average_lagging([1, 4, 4, 4], 4) == approx(2.0)
    # Delays beyond the source (only possible with time-based delays): D = [1, 5, 6], |X| = 4, |Y| = 3,
    # step 4/3, tau = 2 (5 >= 4): AL = (1 + (5 - 4/3)) / 2 = 7/3; EndOffset = 6 - 4 = 2
    assert average_lagging([1, 5, 6], 4) == approx(7 / 3)
    assert end_offset([1, 5, 6], 4) == approx(2.0)
    # First delay beyond the source: SimulEval returns D_1 as AL and LAAL: D = [5, 6], |X| = 4 -> 5
    assert average_lagging([5, 6], 4) == approx(5.0)
    assert length_adaptive_average_lagging([5, 6], 4, 1) == approx(5.0)


def test_one_word_source():
    # D = [1, 1, 1], |X| = 1, |Y| = 3 (no reference)
    # AL: tau = 1 -> AL = 1 - 0 = 1; LAAL = 1; AP = 3 / (1*3) = 1
    # DAL: step = 1/3, D' = [1, 4/3, 5/3], DAL = (1 + (4/3 - 1/3) + (5/3 - 2/3)) / 3 = 1
    # ATD: one chunk, T = [2, 3, 4], a = min(t, 1) = 1: ATD = (1 + 2 + 3) / 3 = 2
    assert all_metrics([1, 1, 1], 1) == approx(
        {"AL": 1.0, "LAAL": 1.0, "AP": 1.0, "DAL": 1.0, "ATD": 2.0, "StartOffset": 1.0, "EndOffset": 0.0})


def test_one_word_target():
    # D = [3], |X| = 5, reference of 4 words.
    # AL = LAAL = DAL = 3 - 0 = 3 (tau = 1); AP = 3 / (5*4) = 0.15 with the reference, 3/5 without
    # ATD: T_1 = 3 + 1 = 4, a = min(1, 3) = 1 -> 3; EndOffset = 3 - 5 = -2
    assert all_metrics([3], 5, 4) == approx(
        {"AL": 3.0, "LAAL": 3.0, "AP": 0.15, "DAL": 3.0, "ATD": 3.0, "StartOffset": 3.0, "EndOffset": -2.0})
    assert average_proportion([3], 5) == approx(0.6)


def test_atd_chunks():
    # D = [1, 1, 1, 3], |X| = 3: chunks [1 1 1] [3]; T = [2, 3, 4, 5]
    # t1..t3 in chunk 1: a = min(t, 1) = 1 -> 1, 2, 3
    # t4 in chunk 2: Y<c = 3, X<c = 1 -> a = min(4 - 2, 3) = 2 -> 5 - 2 = 3
    # ATD = (1 + 2 + 3 + 3) / 4 = 2.25
    assert average_token_delay([1, 1, 1, 3], 3) == approx(2.25)
    # Writing before reading anything: D = [0, 0, 2], |X| = 2: chunks [0 0] [2]; T = [1, 2, 3]
    # t1, t2: a = min(t, 0) = 0 -> 1, 2; t3: Y<c = 2, X<c = 0 -> a = min(3 - 2, 2) = 1 -> 3 - 1 = 2
    # ATD = (1 + 2 + 2) / 3 = 5/3
    assert average_token_delay([0, 0, 2], 2) == approx(5 / 3)
    # AL for the same: step 2/3, tau = 3: (0 + (0 - 2/3) + (2 - 4/3)) / 3 = 0
    assert average_lagging([0, 0, 2], 2) == approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="non-decreasing"):
        average_token_delay([2, 1], 3)
    with pytest.raises(ValueError, match="whole-word"):
        average_token_delay([1.5, 2], 3)


def test_empty_prediction_and_bad_lengths():
    for f in LATENCY_METRICS.values():
        with pytest.raises(ValueError, match="empty prediction"):
            f([], 4, 4)
        with pytest.raises(ValueError, match="source_length"):
            f([1], 0)
        with pytest.raises(ValueError, match="reference_length"):
            f([1], 3, 0)


def test_reference_length_counts_like_simuleval():
    assert reference_length("Das Wetter ist schön") == 4
    assert reference_length("a  b") == 3  # split(" "): a double space counts an empty word
    assert reference_length("") == 1


# --- corpus level ----------------------------------------------------------------------------------

def test_latency_scores_is_the_mean_and_skips_empty_predictions():
    a = {"delays": [2, 3, 4, 4], "source_length": 4, "reference": "w x y z", "prediction": "a b c d"}
    # reference of 4 words, prediction of 6: AL with reference = 1.25, without = 1.5 (see above)
    b = {"delays": [1, 2, 3, 3, 3, 3], "source_length": 3, "reference": "w x y z", "prediction": "a b c d e f"}
    empty = {"delays": [], "source_length": 5, "reference": "w x", "prediction": ""}
    scores = latency_scores([a, b, empty])
    # AL = mean(2.0, 1.25) = 1.625; LAAL = mean(2.0, 1.5) = 1.75; AP = mean(0.8125, 1.25) = 1.03125
    assert scores == approx({"AL": 1.625, "LAAL": 1.75, "AP": 1.03125, "DAL": (2.0 + 1.75) / 2,
                             "ATD": 2.0, "StartOffset": 1.5, "EndOffset": 0.0})
    no_ref = latency_scores([a, b, empty], ["AL", "AP"], use_ref_len=False)
    # AL = mean(2.0, 1.5) = 1.75; AP = mean(13/16, 15/18)
    assert no_ref == approx({"AL": 1.75, "AP": (13 / 16 + 15 / 18) / 2})
    assert latency_scores([dict(b, reference=None)], ["AL"]) == approx({"AL": 1.5})
    with pytest.raises(SimulmtError, match="every prediction is empty"):
        latency_scores([empty])
    with pytest.raises(SimulmtError, match="unknown latency metric"):
        latency_scores([a], ["XYZ"])


def test_computation_aware():
    # D = [1, 2, 2], elapsed = [10, 25, 25] ms, 100 ms per source word:
    # CA delays = [1*100 + 10, 2*100 + 25, 2*100 + 25] = [110, 225, 225]; |X| = 2 words = 200 ms
    assert computation_aware_delays([1, 2, 2], [10, 25, 25], 100) == [110, 225, 225]
    # AL-CA (no reference): step = 200/3 ms, tau = 2 (225 >= 200): (110 + (225 - 200/3)) / 2 = 805/6
    assert average_lagging([110, 225, 225], 200) == approx(805 / 6)
    ins = {"delays": [1, 2, 2], "elapsed": [10, 25, 25], "source_length": 2, "reference": None, "prediction": "a b c"}
    scores = latency_scores([ins], computation_aware=True, ms_per_source_unit=100)
    assert scores["AL_CA"] == approx(805 / 6)
    assert scores["StartOffset_CA"] == approx(110.0)
    assert scores["EndOffset_CA"] == approx(25.0)  # 225 - 200
    assert "ATD_CA" not in scores and "ATD" in scores
    # Non-CA AL for the same: step 2/3, tau = 2: (1 + (2 - 2/3)) / 2 = 7/6
    assert scores["AL"] == approx(7 / 6)
    with pytest.raises(ValueError, match="elapsed"):
        latency_scores([dict(ins, elapsed=None)], computation_aware=True)
    with pytest.raises(ValueError, match="elapsed"):
        computation_aware_delays([1, 2], [1.0], 100)


# --- quality ---------------------------------------------------------------------------------------

def test_bleu_identical_and_known_value():
    refs = ["the cat sat on the mat", "a quick brown fox jumps over the dog"]
    score, sig = bleu(refs, refs)
    assert score == approx(100.0)
    assert "nrefs:1" in sig and "tok:13a" in sig
    # hyp has one extra word: 7 vs 6 words, BP = 1; n-gram precisions 6/7, 5/6, 4/5, 3/4
    # BLEU = 100 * (6/7 * 5/6 * 4/5 * 3/4) ** (1/4) = 100 * (3/7) ** 0.25 = 80.91
    score, _ = bleu(["the cat sat on the mat today"], ["the cat sat on the mat"])
    assert score == approx(100 * (3 / 7) ** 0.25, abs=1e-6)
    # multiple reference streams
    score, sig = bleu(["the cat sat on the mat"], [["a dog"], ["the cat sat on the mat"]])
    assert score == approx(100.0) and "nrefs:2" in sig
    _, sig = bleu(refs, refs, tokenize="intl")
    assert "tok:intl" in sig
    with pytest.raises(SimulmtError, match="tokenizer"):
        bleu(refs, refs, tokenize="nope")
    with pytest.raises(ValueError, match="references"):
        bleu(refs, refs[:1])


def test_chrf():
    refs = ["the cat sat on the mat", "a quick brown fox"]
    score, sig = chrf(refs, refs)
    assert score == approx(100.0)
    assert "nrefs:1" in sig and "nc:6" in sig and "nw:0" in sig
    score, sig = chrf(refs, refs, word_order=2)  # chrF++
    assert score == approx(100.0) and "nw:2" in sig
    score, _ = chrf(["xyz"], ["abc"])  # no character n-gram in common
    assert score == approx(0.0)


def test_comet_needs_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "comet", None)  # makes `import comet` fail
    with pytest.raises(SimulmtError, match="unbabel-comet"):
        comet(["a"], ["a"], ["a"])


def test_comet_needs_a_local_model(monkeypatch):
    fake = types.ModuleType("comet")
    fake.load_from_checkpoint = lambda path: pytest.fail("must not load a model that is not local")
    monkeypatch.setitem(sys.modules, "comet", fake)
    with pytest.raises(SimulmtError, match="not available locally"):
        comet(["a"], ["a"], ["a"], model="simulmt-tests/no-such-comet-model")


# --- cross-check with SimulEval 1.1.4 --------------------------------------------------------------

def _sev_text_instance(sev, index, ins):
    t2t = sev.instance.TextToTextInstance(index, None, None)
    t2t.latency_unit = "word"
    t2t.source = [f"s{i}" for i in range(ins["source_length"])]
    t2t.reference = ins["reference"]
    t2t.delays = list(ins["delays"])
    t2t.elapsed = [0] * len(ins["delays"])
    t2t.prediction_list = ins["prediction"].split()
    return t2t


def _random_instance(rng):
    x = rng.randint(1, 10)
    y = rng.choice([0, 1, 1, 2, 3, 5, 8, 13])
    low = rng.choice([0, 1, 1, 1])
    delays = sorted(rng.randint(low, x) for _ in range(y))
    ref = None if rng.random() < 0.2 else " ".join(f"r{i}" for i in range(rng.randint(1, 12)))
    return {"delays": delays, "source_length": x, "reference": ref,
            "prediction": " ".join(f"p{i}" for i in range(y))}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_cross_check_with_simuleval(simuleval):
    rng = random.Random(1234)
    corpora = [[_random_instance(rng) for _ in range(rng.randint(1, 6))] for _ in range(150)]
    corpora = [c for c in corpora if any(i["delays"] for i in c)]
    for corpus in corpora:
        for use_ref_len in (True, False):
            ours = latency_scores(corpus, use_ref_len=use_ref_len)
            sev = {i: _sev_text_instance(simuleval, i, ins) for i, ins in enumerate(corpus)}
            for name, value in ours.items():
                theirs = simuleval.scorers[name](computation_aware=False, use_ref_len=use_ref_len)(sev)
                assert value == approx(theirs, rel=1e-12, abs=1e-12), (name, use_ref_len, corpus)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_cross_check_computation_aware_with_simuleval(simuleval):
    # SimulEval refuses CA on text input; its CA semantics come from speech input, where delays and
    # elapsed are in ms and elapsed = delay + wall-clock ms. A LogInstance carries exactly those lists.
    rng = random.Random(99)
    ms = 250.0
    for _ in range(60):
        ins = _random_instance(rng)
        if not ins["delays"] or ins["reference"] is None:
            continue
        compute = 0.0
        elapsed = []
        for _ in ins["delays"]:
            compute += rng.choice([0.0, 3.5, 40.0, 700.0])
            elapsed.append(compute)
        ins["elapsed"] = elapsed
        ours = latency_scores([ins], computation_aware=True, ms_per_source_unit=ms)
        log = simuleval.instance.LogInstance(json.dumps({
            "index": 0, "prediction": ins["prediction"], "reference": ins["reference"],
            "delays": [d * ms for d in ins["delays"]],
            "elapsed": computation_aware_delays(ins["delays"], elapsed, ms),
            "source_length": ins["source_length"] * ms}))
        for name, value in ours.items():
            if not name.endswith("_CA"):
                continue
            theirs = simuleval.scorers[name[:-3]](computation_aware=True, use_ref_len=True)({0: log})
            assert value == approx(theirs, rel=1e-12, abs=1e-9), (name, ins)
