"""SeqPO-SiMT's multi-step process: the conversation layout in which a step may write nothing.

At step t the model has read source chunks 1..t and its own translations of steps 1..t-1 and writes the translation
of step t, possibly empty (Xu et al.: the model decides how much to write, so it learns when to wait). Served with
``ReadN(m)``: read m words, open an assistant turn, let the model write until it ends the turn::

    prompt | x1 | opener y1 <end_of_turn> | user x2 | opener <end_of_turn> | user x3 | opener y3 ...
                                                      ^ an empty step: the end proposed at once is kept

``conversation`` takes such an opener back (nothing was written, so nothing is said); here the turn is closed
with the end token the model proposed, so the decision to wait is a token of the sequence: training (warm-up or
policy optimisation) sees it, labels it and can make it more or less likely. Append-only, cache reused.
"""

from __future__ import annotations

from simulmt.core.layouts.base import LayoutState
from simulmt.core.layouts.conversation import Conversation


class SeqPO(Conversation):
    name = "seqpo"

    def read(self, state: LayoutState, unit: tuple[int, ...]) -> None:
        if state.opened and not state.target_written:  # an empty step: close its turn, keep the decision
            state.target_written = True
        super().read(state, unit)
