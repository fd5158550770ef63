"""Layouts: how the placed tokens of a stream are ordered and numbered. A small explicit registry."""

from __future__ import annotations

from simulmt.errors import SimulmtError
from simulmt.core.layouts.base import Layout, LayoutState
from simulmt.core.layouts.conversation import Conversation
from simulmt.core.layouts.expost import Expost
from simulmt.core.layouts.gpe import GroupPositions
from simulmt.core.layouts.naive import NaiveReuse
from simulmt.core.layouts.prefix import PrefixRecompute

LAYOUTS: dict[str, type[Layout]] = {
    "expost": Expost,
    "prefix": PrefixRecompute,
    "naive": NaiveReuse,
    "conversation": Conversation,
    "gpe": GroupPositions,
}


def make_layout(name: str, *, slot: int = 16, phi: int = 256) -> Layout:
    if name not in LAYOUTS:
        raise SimulmtError(f"unknown layout {name!r}; choose one of: {', '.join(LAYOUTS)}")
    if name == "expost":
        return Expost(slot=slot)
    if name == "gpe":
        return GroupPositions(phi=phi)
    return LAYOUTS[name]()


__all__ = ["LAYOUTS", "Layout", "LayoutState", "make_layout", "Expost", "PrefixRecompute", "NaiveReuse",
           "Conversation", "GroupPositions"]
