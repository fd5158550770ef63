"""Long-form scores: a whole talk's output, resegmented to its reference sentences and scored as the field does.

Pure functions of plain lists, computed by the field's own libraries (the ``longform`` extra), not re-implemented:

* **OmniSTEval** (the IWSLT 2026 scorer): SoftSegmenter resegmentation of each talk's words to its reference
  sentences, then BLEU and chrF (sacrebleu, 13a) and LongYAAL, LongAL, LongLAAL on the resegmented sentences;
* **SimulStream** (IWSLT 2025's scorer): StreamLAAL, LAAL after mwerSegmenter resegmentation (``mweralign``).

Time: a text talk has no clock of its own, so a source word lasts ``ms_per_word`` (SimulEval's convention for the
computation-aware metrics). Reference sentence ``i`` of a talk covers its source line ``i``: it starts after the
earlier lines' words and lasts its own words. A target word written after ``d`` source words were read is emitted
at ``d * ms_per_word`` (computation-unaware). Computation-aware, the talk is replayed on a real-time clock
(:func:`realtime_emissions`): source word ``n`` arrives at ``n * ms_per_word``, the compute measured between the
stream's events (each read, each word written) advances the clock, and a read waits for its word to arrive; a word
is emitted at the clock's time when it was written. (Adding the compute since the talk began to ``d *
ms_per_word``, as the sentence-level ``*_CA`` do, would count an hour of compute against the last word of an
hour's talk although it ran while the talk was spoken.) The computation-unaware latencies are reported in source
words (as the short-form ones), the computation-aware ones (``*_CA``) in ms. LongYAAL counts no word emitted at or
after the end of the talk (its
definition: OmniSTEval's ``time_to_recording_end``); StreamLAAL and LongLAAL do.

COMET / XCOMET: OmniSTEval's ``comet`` extra with a checkpoint the user has (``comet_model``: a name its hub
resolves or a local path); not run in CI (no weights offline).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field

from simulmt.errors import SimulmtError

INSTALL = "pip install 'simulmt[longform]' (OmniSTEval, SimulStream, mweralign)"
SIGNATURE = ("OmniSTEval-{omni}|resegment:SoftSegmenter|BLEU:13a|StreamLAAL:SimulStream-{stream},mwerSegmenter|"
             "time:{ms:g}ms-per-source-word|CU:words|CA:ms,real-time-clock")


@dataclass(frozen=True)
class TalkOutput:
    """One talk: what was written and when, and what it is scored against."""

    name: str
    words: Sequence[str]  # the talk's translation, word by word
    delays: Sequence[float]  # per word: source words of the talk read when it was written
    elapsed: Sequence[float]  # per word: ms since the talk began
    line_words: Sequence[int]  # per reference sentence: the words of its source line
    references: Sequence[str]  # the reference sentences, in order
    sources: Sequence[str] = field(default=())  # the source lines (COMET only)
    read_elapsed: Sequence[float] = field(default=())  # per source word read: ms since the talk began (the
    # real-time clock of the computation-aware latency; without it, d * ms_per_word + elapsed)

    def __post_init__(self):
        if not (len(self.words) == len(self.delays) == len(self.elapsed)):
            raise SimulmtError(f"talk {self.name}: {len(self.words)} words, {len(self.delays)} delays and "
                               f"{len(self.elapsed)} elapsed times")
        if len(self.line_words) != len(self.references) or not self.references:
            raise SimulmtError(f"talk {self.name}: {len(self.references)} reference sentences for "
                               f"{len(self.line_words)} source lines")


def _libraries():
    try:
        import omnisteval
        from simulstream.metrics.scorers.latency.stream_laal import StreamLaal  # noqa: F401
    except ImportError as exc:
        raise SimulmtError(f"long-form scores need OmniSTEval and SimulStream ({exc.name} is missing): "
                           f"{INSTALL}") from None
    return omnisteval


def realtime_emissions(delays: Sequence[float], elapsed: Sequence[float], read_elapsed: Sequence[float],
                       ms_per_word: float) -> list[float]:
    """When each word would be emitted if the stream ran in real time: the stream's events (read of source word
    ``n`` at ``read_elapsed[n - 1]``, write of word ``j`` at ``elapsed[j]``, ms of compute since it began) replayed
    on a clock that compute advances and that a read holds until its word has arrived (``n * ms_per_word``)."""
    events = sorted([(e, 0, n) for n, e in enumerate(read_elapsed, 1)] + [(e, 1, j) for j, e in enumerate(elapsed)])
    clock, last, out = 0.0, 0.0, [0.0] * len(elapsed)
    for at, kind, which in events:
        clock += at - last
        last = at
        if kind == 0:
            clock = max(clock, which * ms_per_word)
        else:
            out[which] = clock
    return out


def emission_times(talk: TalkOutput, ms: float) -> tuple[list[float], list[float], list[tuple[float, float]], float]:
    """(emission CU, emission CA, (start, duration) per reference sentence, talk end), all in ms."""
    cu = [d * ms for d in talk.delays]
    ca = (realtime_emissions(talk.delays, talk.elapsed, talk.read_elapsed, ms) if talk.read_elapsed
          else [d * ms + e for d, e in zip(talk.delays, talk.elapsed)])
    spans, start = [], 0.0
    for n in talk.line_words:
        spans.append((start, n * ms))
        start += n * ms
    return cu, ca, spans, start


def resegment(talks: Sequence[TalkOutput], ms_per_word: float, lang: str | None = None):
    """OmniSTEval's SoftSegmenter resegmentation: its ``Instance`` per reference sentence, in order."""
    omnisteval = _libraries()
    Word = omnisteval.Word
    ref_words, hyp_words, segmentation, ref_sentences = [], [], [], []
    for doc, talk in enumerate(talks):
        cu, ca, spans, end = emission_times(talk, ms_per_word)
        words = []
        for seg, ((start, duration), reference) in enumerate(zip(spans, talk.references)):
            segmentation.append({"wav": talk.name, "doc_id": doc, "seg_id": seg, "offset": start,
                                 "duration": duration, "time_to_recording_end": end - start})
            ref_sentences.append(reference)
            words += [Word(w, seq_id=len(ref_sentences) - 1) for w in reference.strip().lower().split()]
        ref_words.append(words)
        hyp_words.append([Word(w, emission_cu=c, emission_ca=a) for w, c, a in zip(talk.words, cu, ca)])
    instances, _ = omnisteval.resegment(ref_words, hyp_words, segmentation, ref_sentences, char_level=False,
                                        lang=lang)
    return instances


def stream_laal(talks: Sequence[TalkOutput], ms_per_word: float) -> tuple[float, float]:
    """SimulStream's StreamLAAL (computation-unaware, computation-aware), in ms."""
    _libraries()
    from simulstream.metrics.readers import OutputWithDelays, ReferenceSentenceDefinition
    from simulstream.metrics.scorers.latency import LatencyScoringSample
    from simulstream.metrics.scorers.latency.stream_laal import StreamLaal

    samples = []
    for talk in talks:
        cu, ca, spans, _ = emission_times(talk, ms_per_word)
        refs = [ReferenceSentenceDefinition(r, start, duration) for r, (start, duration) in
                zip(talk.references, spans)]
        samples.append(LatencyScoringSample(talk.name, OutputWithDelays(" ".join(talk.words), cu, ca), refs))
    scores = StreamLaal(argparse.Namespace(latency_unit="word")).score(samples)
    return scores.ideal_latency, scores.computational_aware_latency


def longform_scores(talks: Sequence[TalkOutput], ms_per_word: float = 300.0, lang: str | None = None,
                    comet_model: str | None = None) -> dict:
    """BLEU, chrF, StreamLAAL, LongYAAL, LongAL, LongLAAL (and their ``_CA`` variants) of whole talks, the
    resegmented hypotheses (one per reference sentence, in order) and the signature. ``lang``: the target
    language for OmniSTEval's Moses tokenisation before alignment (None: whitespace). ``comet_model``: also
    COMET through OmniSTEval (needs ``unbabel-comet`` and that checkpoint)."""
    if not talks:
        raise SimulmtError("no talks to score")
    if not ms_per_word > 0:
        raise SimulmtError(f"ms_per_word must be positive, got {ms_per_word}")
    omnisteval = _libraries()
    instances = resegment(talks, ms_per_word, lang)
    sources = [s for t in talks for s in t.sources] if comet_model else None
    if comet_model and len(sources) != len(instances):
        raise SimulmtError("COMET needs every talk's source lines")
    kwargs = {"compute_comet": True, "comet_model": comet_model, "source_sentences": sources} if comet_model else {}
    scores, _, _ = omnisteval.evaluate_instances(instances, compute_quality=True, compute_latency=True,
                                                 is_longform=True, bleu_tokenizer="13a", **kwargs)
    stream_cu, stream_ca = stream_laal(talks, ms_per_word)
    out = {"BLEU": scores["bleu"], "chrF": scores["chrf"],
           "StreamLAAL": stream_cu / ms_per_word, "LongYAAL": scores["long_yaal"] / ms_per_word,
           "LongAL": scores["long_al"] / ms_per_word, "LongLAAL": scores["long_laal"] / ms_per_word,
           "StreamLAAL_CA": stream_ca, "LongYAAL_CA": scores["ca_long_yaal"],
           "LongAL_CA": scores["ca_long_al"], "LongLAAL_CA": scores["ca_long_laal"]}
    if comet_model:
        out["COMET"] = scores["comet"]
    from importlib.metadata import version

    return {**out, "resegmented": [i.prediction for i in instances],
            "signature": SIGNATURE.format(omni=version("omnisteval"), stream=version("simulstream"),
                                          ms=ms_per_word)}


__all__ = ["INSTALL", "TalkOutput", "emission_times", "longform_scores", "realtime_emissions", "resegment",
           "stream_laal"]
