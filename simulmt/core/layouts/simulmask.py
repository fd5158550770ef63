"""SimulMask (Raffel et al.): the policy mask on the contiguous offline layout, with modified ALiBi.

SimulMask fine-tunes on ``prompt | whole source | opener | target`` with a mask that lets each target token see
only the source its policy had read, and serves with the KV cache reused. The placement is ``naive``'s (contiguous
positions of the whole sentence in training; at inference a source unit read after target text joins the cache
after it): what differs is how an ALiBi model measures distance (``simulmt.core.visibility.Distance``):

* ``simulmask``: the modified ALiBi. Distances are counted in SimulMask's training order (source side first,
  then target side) over the keys the query can see, so unread source adds no distance in training, as at
  inference where it is not in the cache yet. On ALiBi models (Bloom, Falcon-RW) training == streaming.
* ``simulmask-stock``: the paper's ablation, stock ALiBi in training (every key in between counts, unread source
  too): training and streaming disagree once source arrives after target text.

On models with position ids (RoPE) positions are ``naive``'s, which collide at reads (the ExPosST paper's "w/o
slot" ablation); it is served for comparison, and parity does not hold there.
"""

from __future__ import annotations

from simulmt.core.layouts.naive import NaiveReuse
from simulmt.core.visibility import Distance, Visibility


class SimulMask(NaiveReuse):
    name = "simulmask"
    visibility = Visibility(distance=Distance(order="sides", count="visible"))


class SimulMaskStock(NaiveReuse):
    name = "simulmask-stock"
    visibility = Visibility(distance=Distance(order="sides", count="all"))
