"""Sentence-level latency metrics for simultaneous translation, as plain functions of lists.

Every metric has the signature ``metric(delays, source_length, reference_length=None) -> float``:

* ``delays[j]`` is the number of source units (words) read when target word ``j`` (0-based) was
  written.  For the computation-aware variants the delays are times in ms instead, see
  :func:`computation_aware_delays`.
* ``source_length`` is ``|X|``, the number of source units (in ms for computation-aware delays).
* ``reference_length`` is ``|Y*|``, the number of reference words, or ``None``.

The definitions are exactly those of SimulEval 1.1.4 (``simuleval/evaluator/scorers/latency_scorer.py``)
for text input and text output with ``--eval-latency-unit word``:

* ``|Y|``, the target length used by AL and AP, is the reference length when a reference is given
  (SimulEval's default; ``--no-use-ref-len`` turns it off), otherwise the prediction length
  ``len(delays)``.  LAAL uses ``max(len(delays), |Y|)``.  DAL always uses ``len(delays)``; ATD and the
  offsets do not use any target length.
* SimulEval counts reference words as ``len(reference.split(" "))`` (a split on single spaces, so
  repeated spaces count extra empty words); :func:`reference_length` does the same.
* ``tau`` (AL, LAAL) is the 1-based index of the first target word whose delay is ``>= |X|``
  (SimulEval's docstring says ``D_i = |X|``, its code uses ``>=``), or ``len(delays)`` if no word
  reaches the end of the source.  If the very first delay is already beyond the source
  (``delays[0] > |X|``, which only computation-aware delays can do), AL and LAAL are ``delays[0]``.
* An empty prediction has no delays.  SimulEval skips such sentences (with a warning) when it
  averages over the corpus, so they do not count at all.  The sentence-level functions here raise
  ``ValueError`` for empty delays; :func:`latency_scores` skips those sentences like SimulEval and
  raises :class:`~simulmt.errors.SimulmtError` if no sentence is left (SimulEval would crash on the
  mean of an empty list).
* Corpus scores are the plain mean of the sentence scores.  SimulEval rounds its printed table to
  3 decimals; nothing is rounded here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import pairwise
from statistics import mean

from simulmt.errors import SimulmtError

logger = logging.getLogger(__name__)

#: Duration of one source word assumed by default for the computation-aware metrics: 300 ms,
#: the virtual length SimulEval 1.1.4's ATD gives a source word of speech input.
DEFAULT_MS_PER_SOURCE_UNIT = 300.0

LatencyMetric = Callable[[Sequence[float], float, "int | None"], float]


def _check(delays: Sequence[float], source_length: float, reference_length: int | None = None) -> None:
    if len(delays) == 0:
        raise ValueError("latency is undefined for an empty prediction (no delays); "
                         "SimulEval skips such sentences, as latency_scores does")
    if not source_length > 0:
        raise ValueError(f"source_length must be positive, got {source_length!r}")
    if reference_length is not None and reference_length < 1:
        raise ValueError(f"reference_length must be at least 1 or None, got {reference_length!r}")


def _target_length(delays: Sequence[float], reference_length: int | None) -> int:
    """``|Y|`` as SimulEval uses it for AL and AP: the reference length if given, else the prediction length."""
    return len(delays) if reference_length is None else reference_length


def _lagging(delays: Sequence[float], source_length: float, target_length: float) -> float:
    """The AL/LAAL sum, with target words spaced ``source_length / target_length`` source units apart."""
    if delays[0] > source_length:
        return float(delays[0])
    tau = next((j + 1 for j, d in enumerate(delays) if d >= source_length), len(delays))
    rate = target_length / source_length  # gamma: target words per source unit
    return float(sum(delays[j] - j / rate for j in range(tau)) / tau)


def average_lagging(delays: Sequence[float], source_length: float, reference_length: int | None = None) -> float:
    r"""Average Lagging (AL), Ma et al. 2019, "STACL" (https://arxiv.org/abs/1810.08398).

    .. math::

        AL = \frac{1}{\tau} \sum_{i=1}^{\tau} \left( D_i - (i - 1) \frac{|X|}{|Y|} \right),
        \qquad \tau = \min \{ i : D_i \ge |X| \} \ (\text{or } |Y^\text{pred}| \text{ if none})

    SimulEval conventions: ``|Y|`` is ``reference_length`` when given, else ``len(delays)``;
    if ``delays[0] > |X|`` the result is ``delays[0]``.
    Example: delays [2, 3, 4, 4], |X| = 4, |Y| = 4: tau = 3, AL = ((2-0) + (3-1) + (4-2)) / 3 = 2.0.
    """
    _check(delays, source_length, reference_length)
    return _lagging(delays, source_length, _target_length(delays, reference_length))


def length_adaptive_average_lagging(delays: Sequence[float], source_length: float,
                                    reference_length: int | None = None) -> float:
    r"""Length-Adaptive Average Lagging (LAAL), Papi et al. 2022, "Over-Generation Cannot Be Rewarded"
    (https://arxiv.org/abs/2206.05807); first used in the CUNI-KIT IWSLT 2022 system.

    AL with the target spacing taken from the longer of prediction and reference, so that
    over-generation does not lower the lag:

    .. math::

        LAAL = \frac{1}{\tau} \sum_{i=1}^{\tau} \left( D_i - (i - 1) \frac{|X|}{\max(|Y^\text{pred}|, |Y^*|)} \right)

    Same ``tau`` and ``delays[0] > |X|`` rule as :func:`average_lagging`.  Without a reference,
    ``|Y*| = |Y^pred|`` and LAAL equals AL.
    """
    _check(delays, source_length, reference_length)
    return _lagging(delays, source_length, max(len(delays), _target_length(delays, reference_length)))


def average_proportion(delays: Sequence[float], source_length: float, reference_length: int | None = None) -> float:
    r"""Average Proportion (AP), Cho & Esipova 2016, "Can neural machine translation do simultaneous
    translation?" (https://arxiv.org/abs/1606.02012).

    .. math::

        AP = \frac{1}{|X| \, |Y|} \sum_{i=1}^{|Y^\text{pred}|} D_i

    SimulEval convention: the sum runs over all predicted words, but ``|Y|`` in the denominator is
    ``reference_length`` when given (else ``len(delays)``), so with a reference AP is not bounded by 1.
    """
    _check(delays, source_length, reference_length)
    return float(sum(delays) / (source_length * _target_length(delays, reference_length)))


def differentiable_average_lagging(delays: Sequence[float], source_length: float,
                                   reference_length: int | None = None) -> float:
    r"""Differentiable Average Lagging (DAL), Arivazhagan et al. 2019, "Monotonic Infinite Lookback
    Attention for Simultaneous Machine Translation" (https://arxiv.org/abs/1906.05218).

    .. math::

        D'_1 = D_1, \quad D'_i = \max\left(D_i, D'_{i-1} + \frac{|X|}{|Y|}\right), \qquad
        DAL = \frac{1}{|Y|} \sum_{i=1}^{|Y|} \left( D'_i - (i - 1) \frac{|X|}{|Y|} \right)

    SimulEval convention: ``|Y|`` is always the prediction length ``len(delays)`` (the reference is
    ignored) and there is no ``tau`` cut-off: every predicted word counts.
    """
    _check(delays, source_length, reference_length)
    rate = len(delays) / source_length
    total = 0.0
    previous = 0.0
    for j, d in enumerate(delays):
        current = d if j == 0 else max(d, previous + 1 / rate)
        total += current - j / rate
        previous = current
    return float(total / len(delays))


def average_token_delay(delays: Sequence[float], source_length: float, reference_length: int | None = None) -> float:
    r"""Average Token Delay (ATD), Kano et al. 2023, "Average Token Delay: A Latency Metric for
    Simultaneous Translation" (https://arxiv.org/abs/2211.13173), for text input and text output
    exactly as SimulEval 1.1.4 computes it when it runs a text-to-text agent.

    Time is virtual: reading or writing one word takes 1 time unit (SimulEval's text convention,
    ``SRC_TOKEN_LEN = TGT_TOKEN_LEN = 1``).  Source word ``s`` ends at time ``s``.  Target word ``t``
    ends at ``T_t = max(D_t, T_{t-1}) + 1`` (``T_0 = 0``): it is written once its source is read and
    the previous word is finished.  Consecutive target words with the same delay form one chunk;
    chunk ``c`` is written after reading source words up to ``D`` of that chunk.  For target word
    ``t`` in chunk ``c``, with ``X_<c`` source words and ``Y_<c`` target words in earlier chunks,

    .. math::

        a(t) = \min\left(t - \max(0, Y_{<c} - X_{<c}),\ D_t\right), \qquad
        ATD = \frac{1}{|Y|} \sum_{t=1}^{|Y|} \left( T_t - a(t) \right)

    (the source time of ``a(t) = 0`` is 0).  ``source_length`` and ``reference_length`` are not used,
    as in SimulEval.  The delays must be non-decreasing non-negative whole numbers of words (as they
    always are for text input); computation-aware ATD is not provided (SimulEval's ATD-CA on text
    input uses all-zero compute times, i.e. equals ATD).

    Note: SimulEval re-scoring a log (``--score-only``) treats the instances as speech input
    (300 ms source words, 0-length target words), which gives different numbers; this function
    mirrors the live text-to-text evaluation.  For speech input (delays in ms) use
    :func:`average_token_delay_ms`.
    """
    _check(delays, source_length, reference_length)
    previous = 0
    for d in delays:
        if d < previous or d != int(d):
            raise ValueError(f"ATD needs non-decreasing whole-word delays, got {list(delays)!r}")
        previous = d
    delays = [int(d) for d in delays]
    total = 0
    end_time = 0  # T_{t-1}
    chunk_delay = None  # delay of the current chunk
    read_before = 0  # X_<c: source words read before the current chunk
    written_before = 0  # Y_<c: target words written in chunks before the current one
    for t, d in enumerate(delays, start=1):
        if d != chunk_delay:
            read_before = 0 if chunk_delay is None else chunk_delay
            written_before = t - 1
            chunk_delay = d
        end_time = max(d, end_time) + 1
        aligned = min(t - max(0, written_before - read_before), d)
        total += end_time - aligned
    return float(total / len(delays))


#: Virtual length in ms of one source word of speech input in SimulEval 1.1.4's ATD (its ``SRC_TOKEN_LEN``).
SPEECH_ATD_SOURCE_WORD_MS = 300.0


def average_token_delay_ms(delays_ms: Sequence[float], elapsed_ms: Sequence[float] | None = None) -> float:
    r"""Average Token Delay (ATD, Kano et al. 2023, https://arxiv.org/abs/2211.13173) in ms for speech input
    and text output, exactly as SimulEval 1.1.4 computes ``ATD`` (and, given ``elapsed_ms``, ``ATD_CA``) for a
    speech-to-text agent, or when it rescores a log (``--score-only``).

    * ``delays_ms[t-1]``: ms of audio read when target word ``t`` was written (SimulEval's ``delays``).
    * ``elapsed_ms[t-1]``: wall-clock ms from the start of the sentence to the moment word ``t`` was written,
      cumulative (simulmt's ``elapsed``; SimulEval's own ``elapsed`` is ``delays_ms + elapsed_ms``).  ``None``
      gives ATD; a list gives the computation-aware ATD_CA.

    SimulEval uses nothing else: neither the source length nor the sizes of the segments actually read.  The
    source is cut into chunks at the distinct delays ``u_1 < ... < u_C`` (``u_0 = 0``): chunk ``c`` is the audio
    ``(u_{c-1}, u_c]``, split into virtual source words of 300 ms (:data:`SPEECH_ATD_SOURCE_WORD_MS`), the last
    one shorter if 300 does not divide ``u_c - u_{c-1}``; ``E_s`` is the end time of source word ``s``
    (``E_0 = 0``).  Target chunk ``c`` is the words written with delay ``u_c``.  Target words last 0 ms, so word
    ``t`` ends at

    .. math::

        T_t = \max(D_t, T_{t-1}) + C_t, \qquad T_0 = 0,

    with ``C_t = 0`` for ATD and ``C_t = e_t - e_{t-1}`` (``e_0 = 0``, ``e = elapsed_ms``) for ATD_CA: the
    compute spent since the previous word.  Word ``t`` in chunk ``c``, with ``X_{<c}`` source words and
    ``Y_{<c}`` target words in earlier chunks, is aligned with source word

    .. math::

        a(t) = \min\left(t - \max(0, Y_{<c} - X_{<c}),\ X_{\le c}\right), \qquad
        ATD = \frac{1}{|Y|} \sum_{t=1}^{|Y|} \left( T_t - E_{a(t)} \right).

    Example: delays [640, 640, 1280], no compute.  Source chunks: (0, 640] = words ending at 300, 600, 640;
    (640, 1280] = 940, 1240, 1280.  Words 1, 2 (chunk 1, X_<1 = Y_<1 = 0) align with source words 1, 2
    (E = 300, 600); word 3 (chunk 2, X_<2 = 3, Y_<2 = 2) with word min(3 - 0, 6) = 3 (E = 640).
    ATD = ((640 - 300) + (640 - 600) + (1280 - 640)) / 3 = 340.

    The delays must be non-negative and non-decreasing (SimulEval's chunking assumes it; it always holds for a
    stream).  An empty prediction raises ``ValueError``: SimulEval skips such sentences.
    """
    if len(delays_ms) == 0:
        raise ValueError("latency is undefined for an empty prediction (no delays); SimulEval skips such sentences")
    if elapsed_ms is not None and len(elapsed_ms) != len(delays_ms):
        raise ValueError(f"{len(delays_ms)} delays but {len(elapsed_ms)} elapsed times")
    if delays_ms[0] < 0 or any(b < a for a, b in pairwise(delays_ms)):
        raise ValueError(f"ATD needs non-negative, non-decreasing delays, got {list(delays_ms)!r}")
    source_end = [0.0]  # source_end[s]: end time in ms of virtual source word s (1-based); 0 for s = 0
    token_delays = []
    end_time = 0.0  # T_{t-1}
    wall_before = 0.0  # e_{t-1}
    chunk_delay = None  # u_c of the current chunk
    read_before = written_before = 0  # X_<c, Y_<c
    for t, delay in enumerate(delays_ms, start=1):
        if delay != chunk_delay:  # a new chunk: the source words of (previous delay, delay]
            read_before, written_before = len(source_end) - 1, t - 1
            whole, rest = divmod(delay - (0 if chunk_delay is None else chunk_delay), SPEECH_ATD_SOURCE_WORD_MS)
            for length in [SPEECH_ATD_SOURCE_WORD_MS] * int(whole) + ([rest] if rest != 0 else []):
                source_end.append(source_end[-1] + length)
            chunk_delay = delay
        compute = 0.0
        if elapsed_ms is not None:
            compute, wall_before = elapsed_ms[t - 1] - wall_before, elapsed_ms[t - 1]
        end_time = max(delay, end_time) + compute
        aligned = min(t - max(0, written_before - read_before), len(source_end) - 1)
        token_delays.append(end_time - source_end[aligned])
    return float(mean(token_delays))


def start_offset(delays: Sequence[float], source_length: float, reference_length: int | None = None) -> float:
    """Start offset (SimulEval's ``StartOffset``): source read before the first word, ``D_1``."""
    _check(delays, source_length, reference_length)
    return float(delays[0])


def end_offset(delays: Sequence[float], source_length: float, reference_length: int | None = None) -> float:
    """End offset (SimulEval's ``EndOffset``) for text output: ``D_{|Y|} - |X|``.

    It is 0 when the last word is written after the whole source was read, negative if earlier.
    """
    _check(delays, source_length, reference_length)
    return float(delays[-1] - source_length)


def computation_aware_delays(delays: Sequence[float], elapsed_ms: Sequence[float],
                             ms_per_source_unit: float) -> list[float]:
    """Computation-aware delays in ms: ``delays[j] * ms_per_source_unit + elapsed_ms[j]``.

    This mirrors SimulEval's ``elapsed`` for (speech) input, whose j-th value is the position in the
    source stream in ms when word j was written plus the wall-clock ms since the agent started on
    the sentence.  The whole source is available at once in a simulation, so that wall-clock time is
    the computation spent so far.  Here:

    * ``elapsed_ms[j]`` is the wall-clock ms from the start of the sentence (first source unit fed)
      to the moment word j was emitted: cumulative, not per word (``Translation.elapsed``);
    * the source is assumed to arrive at a constant rate of ``ms_per_source_unit`` ms per source
      unit (:data:`DEFAULT_MS_PER_SOURCE_UNIT` = 300 ms per word by default in :func:`latency_scores`).

    Feed the result, with ``source_length * ms_per_source_unit`` as the source length, to any metric
    of this module except ATD to get its computation-aware variant (AL-CA, LAAL-CA, ...), in ms.
    SimulEval itself refuses computation-aware latency on text input (its text elapsed times are 0).
    """
    if len(delays) != len(elapsed_ms):
        raise ValueError(f"{len(delays)} delays but {len(elapsed_ms)} elapsed times")
    if not ms_per_source_unit > 0:
        raise ValueError(f"ms_per_source_unit must be positive, got {ms_per_source_unit!r}")
    return [d * ms_per_source_unit + e for d, e in zip(delays, elapsed_ms)]


def reference_length(reference: str) -> int:
    """Reference length in words as SimulEval counts it: ``len(reference.split(" "))``."""
    return len(reference.split(" "))


#: SimulEval's metric names -> sentence-level functions.
LATENCY_METRICS: dict[str, LatencyMetric] = {
    "AL": average_lagging,
    "LAAL": length_adaptive_average_lagging,
    "AP": average_proportion,
    "DAL": differentiable_average_lagging,
    "ATD": average_token_delay,
    "StartOffset": start_offset,
    "EndOffset": end_offset,
}

#: Metrics that have a computation-aware (``_CA``) variant here.
COMPUTATION_AWARE_METRICS = tuple(name for name in LATENCY_METRICS if name != "ATD")


def latency_scores(instances: Iterable[Mapping], metrics: Iterable[str] | None = None, *,
                   use_ref_len: bool = True, computation_aware: bool = False,
                   ms_per_source_unit: float = DEFAULT_MS_PER_SOURCE_UNIT) -> dict[str, float]:
    """Corpus latency: the mean over sentences of each sentence-level metric, as SimulEval reports it.

    Each instance is a mapping with ``delays`` (list), ``source_length`` (int), ``reference``
    (str or None) and ``prediction`` (str; not used for latency: SimulEval takes the prediction
    length from ``len(delays)``), plus ``elapsed`` (ms since the sentence started, per target word)
    when ``computation_aware``.

    * ``metrics``: names from :data:`LATENCY_METRICS` (default: all of them).
    * ``use_ref_len``: pass the reference length (``len(reference.split(" "))``) to the metrics when
      the instance has a reference, as SimulEval does unless ``--no-use-ref-len``.
    * ``computation_aware``: also report ``NAME_CA`` for every requested metric except ATD, computed
      on :func:`computation_aware_delays` with a source of ``source_length * ms_per_source_unit`` ms.

    Sentences with an empty prediction (no delays) are skipped with a warning, as in SimulEval.
    """
    names = list(LATENCY_METRICS) if metrics is None else list(metrics)
    unknown = [n for n in names if n not in LATENCY_METRICS]
    if unknown:
        raise SimulmtError(f"unknown latency metric(s) {unknown}; known: {', '.join(LATENCY_METRICS)}")
    ca_names = [n for n in names if n in COMPUTATION_AWARE_METRICS] if computation_aware else []
    per_metric: dict[str, list[float]] = {n: [] for n in names}
    per_metric.update({f"{n}_CA": [] for n in ca_names})
    skipped = 0
    for index, ins in enumerate(instances):
        delays = list(ins["delays"])
        if not delays:
            skipped += 1
            logger.warning("instance %d has an empty prediction: skipped in the latency scores", index)
            continue
        source_length = ins["source_length"]
        reference = ins.get("reference")
        ref_len = reference_length(reference) if use_ref_len and reference is not None else None
        for name in names:
            per_metric[name].append(LATENCY_METRICS[name](delays, source_length, ref_len))
        if ca_names:
            elapsed = ins.get("elapsed")
            if elapsed is None:
                raise ValueError(f"instance {index} has no 'elapsed' times for the computation-aware metrics")
            ca_delays = computation_aware_delays(delays, elapsed, ms_per_source_unit)
            for name in ca_names:
                per_metric[f"{name}_CA"].append(
                    LATENCY_METRICS[name](ca_delays, source_length * ms_per_source_unit, ref_len))
    if not any(per_metric.values()) and names:
        raise SimulmtError("no latency to report: every prediction is empty"
                           if skipped else "no latency to report: there are no instances")
    return {name: float(mean(values)) if values else math.nan for name, values in per_metric.items()}
