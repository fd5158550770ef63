"""SeqPO-SiMT's fused reward (paper eq. 2), for one group of B trajectories of the same source sentence::

    q_i = (q^_i - mean(q^)) / std(q^)              quality, normalised within the group
    L_i = max(m, (L^_i - mean(L^)) / std(L^))       latency, normalised, then truncated at the chunk size m
    r_i = lambda * q_i - L_i                        lambda = 2 by default

Pure functions of plain lists (``std`` is the population standard deviation; a group whose values are all equal
normalises to zeros). The truncation is written in the paper exactly so, and with a chunk size m >= 2 it makes L
the constant m for almost every group (a normalised value is rarely above 2): latency then no longer steers the
policy. ``truncation="raw"`` truncates the raw latency instead (L^ below m is impossible to improve on with
m-word chunks), then normalises: L_i = z(max(m, L^_i)). Both are offered; the paper's is the default.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from simulmt.errors import SimulmtError

TRUNCATIONS = ("paper", "raw")


def normalise(values: Sequence[float]) -> list[float]:
    """(v - mean) / std within the group; all zeros when the values do not vary."""
    if not values:
        raise SimulmtError("cannot normalise an empty group")
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    if std < 1e-12:
        return [0.0] * len(values)
    return [(v - mean) / std for v in values]


def fused_rewards(qualities: Sequence[float], latencies: Sequence[float], chunk: int, lam: float = 2.0,
                  truncation: str = "paper") -> list[float]:
    """r_i = lam * q_i - L_i for a group (``qualities`` e.g. chrF or BLEU per trajectory, ``latencies`` AL or
    LAAL in source words, ``chunk`` the m of the m-word chunks)."""
    if len(qualities) != len(latencies):
        raise SimulmtError(f"{len(qualities)} quality scores but {len(latencies)} latency scores")
    if truncation not in TRUNCATIONS:
        raise SimulmtError(f"unknown latency truncation {truncation!r}; choose one of: {', '.join(TRUNCATIONS)}")
    q = normalise(qualities)
    if truncation == "paper":
        lat = [max(chunk, z) for z in normalise(latencies)]
    else:
        lat = normalise([max(chunk, value) for value in latencies])
    return [lam * qi - li for qi, li in zip(q, lat)]


# ---- per-trajectory scores -------------------------------------------------------------------------------------
QUALITY_METRICS, LATENCY_METRICS = ("chrf", "bleu", "comet"), ("AL", "LAAL")


def quality_scores(hypotheses: Sequence[str], references: Sequence[str], sources: Sequence[str],
                   metric: str = "chrf") -> list[float]:
    """Sentence-level quality of each hypothesis: sacrebleu chrF or BLEU (effective order), or COMET when
    ``unbabel-comet`` and its checkpoint are installed locally (a clear error otherwise)."""
    if metric not in QUALITY_METRICS:
        raise SimulmtError(f"unknown quality metric {metric!r}; choose one of: {', '.join(QUALITY_METRICS)}")
    if metric == "comet":
        from simulmt.metrics.quality import comet_sentences

        return comet_sentences(hypotheses, references, sources)
    import sacrebleu

    if metric == "chrf":
        return [sacrebleu.sentence_chrf(h, [r]).score for h, r in zip(hypotheses, references)]
    return [sacrebleu.sentence_bleu(h, [r]).score for h, r in zip(hypotheses, references)]


def latency_score(delays: Sequence[float], source_length: int, reference: str, metric: str = "AL") -> float:
    """AL or LAAL (source words) of one trajectory; a trajectory that wrote nothing lags the whole source."""
    from simulmt.metrics.latency import average_lagging, length_adaptive_average_lagging, reference_length

    if metric not in LATENCY_METRICS:
        raise SimulmtError(f"unknown latency metric {metric!r}; choose one of: {', '.join(LATENCY_METRICS)}")
    if not delays:
        return float(source_length)
    scorer = average_lagging if metric == "AL" else length_adaptive_average_lagging
    return scorer(delays, source_length, reference_length(reference))
