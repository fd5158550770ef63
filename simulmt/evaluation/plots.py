"""The quality-latency plot of an evaluation grid: BLEU against LAAL, one curve per layout/policy family.

Two panels share the BLEU axis: LAAL in source words (the policy's latency, the same for every layout at a given
k) and computation-aware LAAL in seconds (which adds the wall time the model spent, so the layouts' costs show).
The offline run is a dashed horizontal line. matplotlib is imported here only, and drawn without pyplot (no global
backend state): a ``Figure`` rendered by the Agg canvas.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path


def plot_bleu_laal(points: Sequence[dict], path: Path, title: str = "") -> None:
    """``points``: dicts with ``family``, ``label`` (e.g. ``k=3``), ``offline`` (bool), ``BLEU``, ``LAAL`` (source
    words) and ``LAAL_CA`` (ms). Points of a family are joined in order of LAAL."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 5.2), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, 2, sharey=True)
    panels = ((axes[0], "LAAL", 1.0, "LAAL (source words)"),
              (axes[1], "LAAL_CA", 1000.0, "computation-aware LAAL (s)"))
    families = list(dict.fromkeys(p["family"] for p in points if not p["offline"]))
    markers = "os^Dv<>p*h"
    for ax, key, scale, xlabel in panels:
        right = max((p[key] / scale for p in points if not p["offline"] and _finite(p[key])), default=1.0)
        for i, family in enumerate(families):
            curve = sorted((p for p in points if p["family"] == family and _finite(p[key], p["BLEU"])),
                           key=lambda p: p[key])
            if not curve:
                continue
            xs, ys = [p[key] / scale for p in curve], [p["BLEU"] for p in curve]
            (line,) = ax.plot(xs, ys, marker=markers[i % len(markers)], linewidth=1.6, markersize=6, label=family)
            for p, x, y in zip(curve, xs, ys):
                ax.annotate(p["label"], (x, y), textcoords="offset points", xytext=(5, 5), fontsize=9,
                            color=line.get_color())
        for p in points:
            if p["offline"] and _finite(p["BLEU"]):
                ax.axhline(p["BLEU"], color="0.35", linestyle="--", linewidth=1.2,
                           label=f"offline (BLEU {p['BLEU']:.1f})")
        ax.set_xlabel(xlabel)
        ax.grid(True, alpha=0.3)
        ax.set_xlim(0, max(right, 0.0) * 1.12 or 1.0)  # room for the labels of the last points
    axes[0].set_ylabel("BLEU")
    axes[0].legend(loc="best", fontsize=9)
    if title:
        figure.suptitle(title, fontsize=11)
    figure.savefig(path, format="png")


def _finite(*values) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)
