"""The decoder at static shapes: a packed forward padded to a bucket of rows and keys, replayed as a CUDA graph.

On a GPU a small model's forward is host-bound: Gemma-3-270M's is ~2,000 kernels launched one by one from Python,
~45 ms of host time on a lent H200 for ~1 ms of GPU work (README, "What was checked on a GPU"). A CUDA graph
records those launches once and replays them with one call, but it replays fixed shapes at fixed addresses. So a
packed forward (batch_cache.py: N queries of one token, each over its own cache row's K keys) is padded:

    queries   N -> Nb, the next power of two (at most ``max_rows``; a larger forward runs as it is)
    keys      K -> the cache's capacity (a power of two: it doubles when a row needs more), so the graphs are
              one per row bucket while the capacity holds (a GPU idles through a small model's forward anyway)
    padding   a padded query has a zero embedding and position 0, writes its key to the cache's scratch slot, sees
              only that slot's first key, and its output row is dropped; a padded key is hidden from every query

and its inputs (input embeddings, positions, masks, each query's cache slot and key index) are copied into buffers
that belong to the bucket (Nb, capacity). The graph starts from the embeddings, so token ids and speech frames
(embeddings of their own, ``ModelRunner.embed``) go through the same graphs. The first forward of a bucket records
its graph; every later one copies its inputs in and replays it.

The cache must be stable (``BatchKVCache(stable=True)``: rows never move in the store), and the graphs are those
of its store (its ``generation``: a store reallocated to grow has new addresses, so its graphs are recorded again
on use). A dropped engine's store comes back here (``give``) and the next engine's cache takes it (``take``), so a
run of one-sentence sessions records its graphs once, not per sentence. The outputs are those of the plain forward
up to float rounding (more, masked keys in each sum).

Without ``graphs`` (or off CUDA) the same padded call runs eagerly: the tests check on a CPU that it gives what
the plain forward gives, which is what the graph replays. ALiBi models' masks carry a bias per head (alibi.py): their
buffers have a row per head. A model whose forward a graph cannot hold (a host synchronisation inside, say) is
found at its first recording: a warning says why, and its forwards run as they are from then on.
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass

import torch

from simulmt.core.batch_cache import BatchKVCache
from simulmt.core.packed_forward import PackedQueries

KEPT_STORES = 4  # stores whose graphs are kept (see _buckets)


def bucket(n: int) -> int:
    """The next power of two >= ``n``."""
    size = 1
    while size < n:
        size *= 2
    return size


@dataclass
class _Bucket:
    """One (rows, keys) shape: its input buffers, its graph and output once recorded."""

    embeds: torch.Tensor  # (Nb, 1, hidden)
    index: torch.Tensor  # (3, Nb): each query's position, cache slot and the key index it writes (one copy in)
    masks: dict[str, torch.Tensor]  # attention type -> (Nb, 1, 1, capacity); ALiBi: (Nb, heads, 1, capacity)
    graph: object = None  # torch.cuda.CUDAGraph once recorded
    out: torch.Tensor | None = None  # (Nb, 1, hidden): what the graph writes

    @property
    def positions(self) -> torch.Tensor:  # (Nb, 1), a view: the graph reads the buffer
        return self.index[0][:, None]

    @property
    def slots(self) -> torch.Tensor:
        return self.index[1]

    @property
    def write(self) -> torch.Tensor:
        return self.index[2]


class StaticDecoder:
    def __init__(self, runner, graphs: bool = True, max_rows: int = 512):
        self.runner = runner
        self.graphs = graphs and runner.device.type == "cuda"
        self.max_rows = max_rows
        self.buckets: OrderedDict[int, dict[tuple[int, int], _Bucket]] = OrderedDict()  # per store generation
        self.spare: tuple[list, list, int] | None = None  # a dropped cache's store (keys, values, generation)
        self.memory = torch.cuda.graph_pool_handle() if self.graphs else None  # one memory pool for all graphs
        self.recorded = 0  # graphs recorded so far
        self.served = 0  # forwards run at static shapes
        self.failed: str | None = None  # why a graph could not be recorded (then none is used)
        self._lock = threading.RLock()  # (a finalizer may give a store back while a forward holds it)

    def serves(self, cache, rows: int) -> bool:
        """Whether this forward can run at static shapes: a stable cache whose store exists (a cache's first forward
        makes it, unless the cache took a dropped one's), at most ``max_rows`` queries, and graphs that could be
        recorded (``failed``)."""
        return (self.failed is None and isinstance(cache, BatchKVCache) and cache.stable and cache.layers_ready
                and rows <= self.max_rows)

    def __call__(self, queries: PackedQueries, cache: BatchKVCache) -> torch.Tensor | None:
        """The packed forward of ``runner.forward_packed`` (packed_forward.py) -> (R, hidden) last hidden states of the
        queries ``last``, a fresh tensor; None if its graph could not be recorded (the model does something a graph
        cannot hold: ``failed`` says what, and the runner runs every forward as it is from then on). One forward at
        a time (engines on several threads share the buffers and the graphs' memory)."""
        ids, positions, visible, q_index, last = queries.ids, queries.positions, queries.visible, queries.q_index, \
            queries.last
        embedded, distances = queries.embedded, queries.distances
        n = visible.shape[0]
        rows, keys = bucket(n), cache.capacity
        # (copied before the replay, without waiting: on a GPU the host then launches the LM head while it runs)
        last = last.to(cache.keys[0].device, non_blocking=True)
        with self._lock:
            b = self._buckets(cache.generation).get((rows, keys)) or self._new_bucket(cache.generation, rows, keys)
            self.served += 1
            self._fill(b, ids, positions, visible, q_index, cache, n, rows, keys, embedded, distances)
            cache.bind(b.slots, b.write, keys)
            try:
                if not self.graphs:
                    out = self._run(b, cache)
                else:
                    if b.graph is None:
                        try:
                            self._record(b, cache)
                        except Exception as exc:  # noqa: BLE001 - any model code a recording refuses
                            self.failed = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                            warnings.warn(f"CUDA graphs are off for this model: its forward could not be recorded "
                                          f"({self.failed}); every forward runs eagerly", stacklevel=2)
                            return None
                    b.graph.replay()
                    out = b.out
            finally:
                cache.unbind()
            return out[:n, 0].index_select(0, last)  # (a copy: the next replay overwrites ``out``)

    # ---- stores ------------------------------------------------------------------------------------------------
    def give(self, keys: list, values: list, meta: dict) -> None:
        """A dropped stable cache's store (its finalizer calls this): kept for the next cache, one at a time."""
        if keys and all(t is not None for t in keys + values):
            with self._lock:
                self.spare = (keys, values, meta["generation"])

    def take(self, slots: int, capacity: int) -> tuple[list, list, int] | None:
        """The spare store if it has ``slots`` slots and ``capacity`` keys or more: its keys, values and generation;
        else None (the cache makes its own at its first forward)."""
        with self._lock:
            if self.spare is None:
                return None
            keys, values, generation = self.spare
            if keys[0].shape[0] - 1 < slots or keys[0].shape[2] < capacity:
                return None
            self.spare = None
            return keys, values, generation

    def _buckets(self, generation: int) -> dict[tuple[int, int], _Bucket]:
        """The buckets recorded on one store; those of the ``KEPT_STORES`` most recently used stores are kept (a
        store that grew or was dropped for good leaves its graphs behind: they are freed with them; more live engines
        than that, used in turn, record their graphs again)."""
        if generation not in self.buckets:
            self.buckets[generation] = {}
            while len(self.buckets) > KEPT_STORES:
                self.buckets.popitem(last=False)
        self.buckets.move_to_end(generation)
        return self.buckets[generation]

    # ---- buffers -----------------------------------------------------------------------------------------------
    def _new_bucket(self, generation: int, rows: int, keys: int) -> _Bucket:
        device, dtype = self.runner.device, self.runner.dtype
        table = self.runner.model.get_input_embeddings().weight
        heads = 1 if self.runner.alibi is None else len(self.runner.alibi.coefficients)  # ALiBi: a bias per head
        with torch.inference_mode(False):  # ordinary tensors: engines with and without inference mode share them
            b = _Bucket(embeds=torch.zeros(rows, 1, table.shape[1], dtype=table.dtype, device=device),
                        index=torch.zeros(3, rows, dtype=torch.long, device=device),
                        masks={kind: torch.zeros(rows, heads, 1, keys, dtype=dtype, device=device)
                               for kind in self.runner.attention_types})
        self._buckets(generation)[(rows, keys)] = b
        return b

    def _fill(self, b: _Bucket, ids, positions, visible, q_index, cache, n: int, rows: int, keys: int,
              embedded, distances) -> None:
        """Copy this forward's inputs into the bucket's buffers, padded (see the module's docstring)."""
        padded = torch.zeros(rows, keys, dtype=torch.bool)
        padded[:n, : visible.shape[1]] = visible
        padded[n:, 0] = True  # a padded query sees its scratch slot's first key (a row of all hidden keys is NaN)
        at = torch.zeros(rows, dtype=torch.long)
        at[:n] = q_index
        if distances is not None:  # ALiBi: each visible key's distance (a padded query's one key: 0)
            far = torch.zeros(rows, keys)
            far[:n, : distances.shape[1]] = distances
            distances = far
        masks = self.runner.row_masks(padded, at, distances, on_device=False)  # (copied once, into the buffers)
        masks = masks if isinstance(masks, dict) else {self.runner.attention_types[0]: masks}
        for kind, mask in masks.items():
            b.masks[kind].copy_(mask, non_blocking=True)
        index = torch.zeros(3, rows, dtype=torch.long)  # positions (padded: 0), slots (padded: scratch), writes (0)
        index[0, :n] = positions
        index[1] = cache.scratch
        index[1, :n] = cache.served_slots()
        index[2, :n] = cache.write_indices()
        b.index.copy_(index, non_blocking=True)
        b.embeds[:n].copy_(self.runner.embed(ids[:, None], embedded))
        b.embeds[n:].zero_()

    # ---- running -----------------------------------------------------------------------------------------------
    def _run(self, b: _Bucket, cache) -> torch.Tensor:
        masks = b.masks if len(b.masks) > 1 else next(iter(b.masks.values()))
        out = self.runner.decoder(inputs_embeds=b.embeds, position_ids=b.positions, attention_mask=masks,
                                  use_cache=True, **{self.runner.decoder_cache_arg: cache})
        return out.last_hidden_state

    def _record(self, b: _Bucket, cache) -> None:
        """Record the bucket's graph: one eager run on a side stream first (lazy initialisations may not happen
        during a recording), then the recording. Both write the forward's own keys, as the replay does again."""
        side = torch.cuda.Stream(self.runner.device)
        side.wait_stream(torch.cuda.current_stream(self.runner.device))
        with torch.cuda.stream(side):
            self._run(b, cache)
        torch.cuda.current_stream(self.runner.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # thread_local: other threads' engines may keep using the GPU while this thread records
        with torch.cuda.graph(graph, pool=self.memory, capture_error_mode="thread_local"):
            b.out = self._run(b, cache)
        b.graph = graph
        self.recorded += 1
