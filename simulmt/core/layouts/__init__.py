"""Layouts: how the placed tokens of a stream are ordered and numbered. A small explicit registry."""

from __future__ import annotations

from simulmt.core.registry import build
from simulmt.core.layouts.base import Layout, LayoutState
from simulmt.core.layouts.conversation import Conversation
from simulmt.core.layouts.expost import Expost
from simulmt.core.layouts.expost_positions import ExpostPositions
from simulmt.core.layouts.expost_sees_earlier import ExpostSeesEarlier
from simulmt.core.layouts.gpe import GroupPositions
from simulmt.core.layouts.gpe_overlap import GroupPositionsOverlap
from simulmt.core.layouts.interleaved import Interleaved
from simulmt.core.layouts.naive import NaiveReuse
from simulmt.core.layouts.prefix import PrefixRecompute
from simulmt.core.layouts.seqpo import SeqPO
from simulmt.core.layouts.simulmask import SimulMask, SimulMaskStock

LAYOUTS: dict[str, type[Layout]] = {
    "expost": Expost,
    "expost-positions": ExpostPositions,
    "expost-sees-earlier": ExpostSeesEarlier,
    "prefix": PrefixRecompute,
    "naive": NaiveReuse,
    "conversation": Conversation,
    "gpe": GroupPositions,
    "gpe-overlap": GroupPositionsOverlap,
    "simulmask": SimulMask,
    "simulmask-stock": SimulMaskStock,
    "seqpo": SeqPO,
    "interleaved": Interleaved,
}


def make_layout(name: str, **options) -> Layout:
    """``make_layout("expost", slot=8, phi=64)`` -> ``Expost(slot=8)``: each layout takes the options it has."""
    return build(LAYOUTS, "layout", name, options)


__all__ = ["LAYOUTS", "Layout", "LayoutState", "make_layout", "Expost", "ExpostPositions", "ExpostSeesEarlier",
           "PrefixRecompute", "NaiveReuse", "Conversation", "GroupPositions", "GroupPositionsOverlap", "SimulMask",
           "SimulMaskStock", "SeqPO", "Interleaved"]
