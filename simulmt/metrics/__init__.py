"""Latency and quality metrics for simultaneous translation: pure functions of plain lists.

Latency metrics follow SimulEval 1.1.4's definitions exactly (see :mod:`simulmt.metrics.latency`);
quality metrics use sacrebleu's corpus API (see :mod:`simulmt.metrics.quality`).
"""

from simulmt.metrics.latency import (
    COMPUTATION_AWARE_METRICS,
    DEFAULT_MS_PER_SOURCE_UNIT,
    LATENCY_METRICS,
    average_lagging,
    average_proportion,
    average_token_delay,
    computation_aware_delays,
    differentiable_average_lagging,
    end_offset,
    latency_scores,
    length_adaptive_average_lagging,
    reference_length,
    start_offset,
)
from simulmt.metrics.quality import DEFAULT_COMET_MODEL, bleu, chrf, comet

__all__ = [
    "COMPUTATION_AWARE_METRICS", "DEFAULT_COMET_MODEL", "DEFAULT_MS_PER_SOURCE_UNIT", "LATENCY_METRICS",
    "average_lagging", "average_proportion", "average_token_delay", "bleu", "chrf", "comet",
    "computation_aware_delays", "differentiable_average_lagging", "end_offset", "latency_scores",
    "length_adaptive_average_lagging", "reference_length", "start_offset",
]
