"""ExPosST whose later slots see the target of earlier slots (issue 42, E2: the paper's visibility at slot
boundaries).

``expost`` never lets a source-side query see a target-side key: a new slot's header and source are computed
from the prompt and the earlier source only. In the paper's slot-segmented sequence only target rows are masked,
so a later slot's source follows, and sees, the target written before it. Here a new slot's header and source see
every target key placed before the slot began, and still never the target written in their own slot while they
arrive (a unit that fits its slot after target text was written there): ``Visibility(earlier_slots=True)``,
visibility.py. Positions, slots and headers are ``expost``'s.

    time order:  p s1 m t1 t2 | u s2 m' t3 ...      u, s2 (slot 2) see t1, t2 (slot 1); s1 never sees t1

Measured (docs/slot-boundaries.md): no better than ``expost`` at the same budget, so expost keeps its rule.
"""

from __future__ import annotations

from simulmt.core.layouts.expost import Expost
from simulmt.core.visibility import Visibility


class ExpostSeesEarlier(Expost):
    name = "expost-sees-earlier"
    visibility = Visibility(source_sees_target=False, earlier_slots=True)

    def describe(self) -> str:
        return f"expost-sees-earlier(slot={self.slot})"
