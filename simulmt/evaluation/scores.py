"""``scores.json``: a pure function of a run's ``instances.log`` and its ``config.json`` (``simulmt score`` redoes
it without the model): BLEU and chrF with their signatures, the latency metrics and their computation-aware
variants, the cost counters."""

from __future__ import annotations

from pathlib import Path
from statistics import mean

from simulmt.errors import SimulmtError
from simulmt.metrics import DEFAULT_MS_PER_SOURCE_UNIT, LATENCY_METRICS, bleu, chrf, latency_scores
from simulmt.metrics.latency import average_token_delay_ms
from simulmt.evaluation.run_dir import CONFIG, LOG, SCORES, _read_json, _write_json, read_log
from simulmt.evaluation.runs import RunResult, RunSpec

LATENCY_SIGNATURE = ("SimulEval-1.1.4-definitions|unit:word|ref_len:yes|empty:skipped|"
                     "CA:delay*{ms:g}ms+elapsed,ms")
SPEECH_LATENCY_SIGNATURE = ("SimulEval-1.1.4-definitions|unit:ms-of-audio|ref_len:yes|empty:skipped|"
                            "CA:delay+elapsed,ms")  # delays are already ms of audio: no source rate is assumed


def _with_speech_atd(latency: dict[str, float], instances: list[dict]) -> dict[str, float]:
    """``latency`` with ATD and ATD_CA (ms) of speech instances added, in the order text runs report their metrics.

    Both are SimulEval 1.1.4's speech-input ATD (:func:`~simulmt.metrics.latency.average_token_delay_ms`) on each
    sentence's ``delays`` (ms of audio), ATD_CA also on its ``elapsed`` (wall ms), averaged over the sentences
    with a prediction (SimulEval skips empty ones; ``latency_scores`` has already refused a corpus of only those).
    """
    scored = [ins for ins in instances if ins["delays"]]
    latency = {**latency, "ATD": mean(average_token_delay_ms(ins["delays"]) for ins in scored),
               "ATD_CA": mean(average_token_delay_ms(ins["delays"], ins["elapsed"]) for ins in scored)}
    order = [*LATENCY_METRICS, *(f"{name}_CA" for name in LATENCY_METRICS)]
    return {name: latency[name] for name in order if name in latency}


def early_end_rates(instances: list[dict]) -> dict:
    """Ends proposed before the source finished (each a READ), per target word written, inside a sentence's first
    slot or turn and after a new one, and by cause (logs from before these were recorded: nothing). A stream that
    wants to end proposes it again after every read until the source is finished, so the ``places`` rates count each
    place in the target (its words written so far) once per sentence: how often the model stalls, not how long."""
    if not instances or "early_ends" not in instances[0]:
        return {}
    words = sum(len(ins["delays"]) for ins in instances)
    after = sum(ins["header_words"] for ins in instances)
    ends = [e for ins in instances for e in ins["early_ends"]]
    causes = {}
    for _, cause, _ in ends:
        causes[cause] = causes.get(cause, 0) + 1
    later = sum(1 for e in ends if e[2])
    places = [place for ins in instances for place in {(e[0], bool(e[2])) for e in ins["early_ends"]}]
    places_later = sum(1 for _, new_slot in places if new_slot)
    return {"early_ends_per_word_first_slot": (len(ends) - later) / max(1, words - after),
            "early_ends_per_word_new_slot": later / after if after else None,
            "early_end_places_per_word_first_slot": (len(places) - places_later) / max(1, words - after),
            "early_end_places_per_word_new_slot": places_later / after if after else None,
            "early_end_causes": dict(sorted(causes.items())),
            "sentences_with_early_end": sum(bool(ins["early_ends"]) for ins in instances)}


def score_instances(instances: list[dict], ms_per_word: float = DEFAULT_MS_PER_SOURCE_UNIT) -> dict:
    """Corpus scores of a run's instances (dicts as in instances.log), with the metrics' signatures.

    Speech instances (``delays_blocks`` or ``delays_words`` logged; delays in ms of audio) also get ATD and ATD_CA
    in ms, SimulEval 1.1.4's ATD for speech input (:func:`_with_speech_atd`); text instances get ATD in words and no
    ATD_CA."""
    if not instances:
        raise SimulmtError("no finished sentences to score")
    hypotheses = [ins["prediction"] for ins in instances]
    references = [ins["reference"] for ins in instances]
    bleu_score, bleu_signature = bleu(hypotheses, references)
    chrf_score, chrf_signature = chrf(hypotheses, references)
    # speech (units' delays logged besides those in ms of audio): ATD is SimulEval's speech-input ATD
    speech = "delays_blocks" in instances[0] or "delays_words" in instances[0]
    metrics = [m for m in LATENCY_METRICS if m != "ATD"] if speech else None
    latency = latency_scores(instances, metrics, computation_aware=True, ms_per_source_unit=ms_per_word)
    if speech:
        latency = _with_speech_atd(latency, instances)
    return {"BLEU": bleu_score, "chrF": chrf_score, **latency, **early_end_rates(instances),
            "tokens_fed": mean(ins.get("tokens_fed", 0) for ins in instances),
            "gflops": mean(ins.get("flops", 0.0) for ins in instances) / 1e9,
            "wall_ms": mean(ins.get("wall_ms", 0.0) for ins in instances),
            "sentences": len(instances),
            "empty_predictions": sum(not ins["delays"] for ins in instances),
            "failed": sum(bool(ins.get("error")) for ins in instances),
            "metric_signatures": {"BLEU": bleu_signature, "chrF": chrf_signature,
                                  "latency": SPEECH_LATENCY_SIGNATURE if speech
                                  else LATENCY_SIGNATURE.format(ms=ms_per_word)}}


def score_run(directory: Path, ms_per_word: float | None = None, write: bool = True) -> RunResult:
    """Recompute a run's scores.json from its instances.log and config.json alone."""
    directory = Path(directory)
    if not (directory / LOG).exists():
        raise SimulmtError(f"{directory} is not a run directory: it has no {LOG}")
    if not (directory / CONFIG).exists():
        raise SimulmtError(f"{directory} has no {CONFIG}, so its settings are unknown")
    config = _read_json(directory / CONFIG)
    if "docids" in config:  # whole talks: scored long-form
        from simulmt.evaluation.talks import score_talk_run

        return score_talk_run(directory, ms_per_word, write)
    ms = config.get("ms_per_word", DEFAULT_MS_PER_SOURCE_UNIT) if ms_per_word is None else ms_per_word
    instances = read_log(directory / LOG)
    try:
        scores = score_instances(instances, ms)
    except SimulmtError as exc:
        raise SimulmtError(f"{directory}: {exc}") from None
    metric_signatures = scores.pop("metric_signatures")
    batch = config.get("batch_size", 1)
    if batch > 1:  # computation-aware latency of a batched run: say what its elapsed times are
        share = "+encoder-share" if config.get("source_type") == "speech" else ""  # SpeechTranslator._translate_batched
        metric_signatures["latency"] += f"|elapsed:in-engine{share},batch:{batch}"
    if config.get("shared_prompt"):  # every sentence after the first took its prompt's keys/values from the cache
        metric_signatures["latency"] += "|prompt:shared"
    signature = {"model": config["model"], "adapter": config["adapter"], "dtype": config["dtype"],
                 "source_lang": config["source_lang"], "target_lang": config["target_lang"],
                 **{key: config[key] for key in ("layout", "policy", "k", "n", "slot", "phi")},
                 "simulmt": config["simulmt"], "source": config["source"], "reference": config["reference"],
                 "lines": len(instances), "complete": len(instances) == config["lines"], "ms_per_word": ms,
                 "batch_size": batch, "decode": config.get("decode"),
                 **metric_signatures}
    scores = {"run": config["run"], **scores, "signature": signature}
    if write:
        _write_json(directory / SCORES, scores)
    return RunResult(RunSpec.from_config(config), directory, config, scores)
