"""A KV cache for many streams: one row per stream, each row's keys contiguous from index 0, explicit lengths.

Per layer, keys and values are (rows, kv heads, capacity, head dim). Row r holds its stream's placed tokens in time
order at indices 0 .. length[r]-1, so a key's index in the row is its index in the stream's own placed list, and
the visibility rule and sliding windows (index distance) are the same as for one stream alone::

    capacity  0 1 2 3 4 5 6 7 8 9
    row 0     p p s s m t t . . .      length 7
    row 1     p p s m t . . . . .      length 5
    row 2     p p s s s s m t t .      length 9

Per-row rollback is a length: ``crop(row, keep)`` sets ``length[row] = keep``; the keys beyond it are stale and
are overwritten by the next write (and masked until then). No holes, no compaction, no copy (one exception,
``move``: a guess's alternative that the layout placed takes the guess's slot, one key per layer; stream.py).

A forward is packed, never padded: every new token is a query of its own, in the batch dimension, with Q = 1.
Stream r feeding Q_r tokens contributes Q_r query rows that all map to cache row r (``prepare``)::

    queries (N = sum Q_r, 1)    cache row    writes index     attends over (mask: causal in the row + the rule)
    q0  stream 0, token 0       0            7                row 0, keys 0..7
    q1  stream 1, token 0       1            5                row 1, keys 0..5
    q2  stream 1, token 1       1            6                row 1, keys 0..6   (sees q1's key: written first)
    q3  stream 1, token 2       1            7                row 1, keys 0..7

Each layer's ``update`` first writes all the new keys/values, then returns, for every query, the keys of its
cache row (a view when every row feeds exactly one token, the decode case; a gather otherwise), so a stream that
reads (feeds its new source tokens and the rolled-back target token) costs its own tokens only, not the widest
row's times the batch. Only each stream's last query needs logits: the engine applies the LM head to those.

Streams join and leave at any time: ``add_row`` appends a row, ``remove_row`` drops one and shrinks the capacity
to what the remaining rows use, so a finished stream's memory is released at once (one copy of the cache per
stream that leaves).

Why not transformers' continuous batching (packed single row + paged cache): our streams do not only append.
Source tokens join a row after its target tokens with smaller position ids, a source query must not see the
target keys cached before it, and every word boundary crops one token. A single packed row would need a
block-diagonal mask over all streams' keys (quadratic in the total) for the eager/SDPA paths we use on CPU;
one query per batch row over its own stream's keys keeps every mask a (1, K) row and makes a crop free.

**Stable storage** (``stable=True``, for CUDA graphs: static_decoder.py). A captured graph reads and writes the
store at fixed addresses, so rows must not move. Each logical row then lives in a physical *slot* of the store;
a row that leaves frees its slot for the next stream (no copy, no shrinking) and the store is reallocated only to
grow (more slots, or twice the capacity), which gives it a new ``generation`` (unique across caches). One extra
slot past the others is scratch: a static-shape forward's padding queries write there. The store is kept when
the last row leaves, and when the cache is dropped it goes back to its ``pool`` (the runner's ``StaticDecoder``)
for the next cache of the same model, with the graphs recorded on it. It never shrinks: a GPU keeps its peak store
(the most rows at once, the longest row's capacity) for the engines that follow. Logical rows, lengths and
``target_side`` behave exactly as without it.

The object is duck-typed for Hugging Face attention layers: they call ``update(keys, values, layer_idx)`` and
attend over what it returns, with the 4-D masks the engine passes.
"""

from __future__ import annotations

import itertools
import weakref

import numpy as np
import torch

_GENERATIONS = itertools.count()  # unique across caches: a static decoder's graphs belong to one store


class BatchKVCache:
    def __init__(self, capacity: int = 64, stable: bool = False, pool=None):
        """``pool`` (stable only): where the store comes from and goes back to when the cache is dropped, so the
        next cache of the same model takes it, and the CUDA graphs recorded on it (``StaticDecoder``)."""
        self.capacity = max(1, capacity)
        self.stable = stable  # rows keep their place in the store (see the module's docstring)
        self.slots: list[int] = []  # physical slot of each row in the store (stable: any; else row i is slot i)
        self._free: list[int] = []  # stable: slots of rows that left, for the next rows
        self._meta = {"generation": next(_GENERATIONS)}  # (shared with the pool's finalizer)
        self.lengths: list[int] = []  # cached tokens per row
        self.target_side = np.zeros((0, self.capacity), dtype=bool)  # per key, for masks (numpy: the engine builds
        # its masks from it on the host, a microsecond an operation)
        self.keys: list[torch.Tensor | None] = []
        self.values: list[torch.Tensor | None] = []
        self.pool = pool if stable else None
        if self.pool is not None:
            weakref.finalize(self, self.pool.give, self.keys, self.values, self._meta)
        self._served: torch.Tensor | None = None  # (N,) cache row of each query of the forward under way
        self._served_rows: np.ndarray | None = None  # the same, for the host's masks
        self._write: torch.Tensor | None = None  # (N,) index each query writes its key to
        self._key_count = 0  # keys the forward's queries attend over
        self._indices_on: tuple[torch.device, torch.Tensor, torch.Tensor] | None = None  # see _on
        self._view = False  # every row feeds exactly one token, in row order: attention reads a view
        self._bound: tuple[torch.Tensor, torch.Tensor, int] | None = None  # see bind

    @property
    def generation(self) -> int:
        """A number of the store's tensors: a new one whenever they are reallocated, unique across caches."""
        return self._meta["generation"]

    # ---- rows ------------------------------------------------------------------------------------------------
    @property
    def rows(self) -> int:
        return len(self.lengths)

    @property
    def slot_count(self) -> int:
        """Physical slots of the store, the scratch slot not counted (stable)."""
        return self.keys[0].shape[0] - 1 if self.keys and self.keys[0] is not None else 0

    @property
    def allocated(self) -> int:
        """Stable: slots given out so far, to rows or back to the free list (the store holds them all)."""
        return len(self.slots) + len(self._free)

    @property
    def scratch(self) -> int:
        """The stable store's scratch slot: padding queries of a static-shape forward write there."""
        return self.slot_count

    def add_row(self) -> int:
        self.lengths.append(0)
        self.target_side = np.concatenate([self.target_side, np.zeros((1, self.capacity), dtype=bool)])
        if self.stable:  # slots 0 .. n-1 are the rows' and the free ones (n = allocated), the scratch slot is n
            slot = self._free.pop(0) if self._free else self.allocated
            self.slots.append(slot)
            if not self.layers_ready:
                if self.pool is not None:  # a dropped cache's store, if it is large enough
                    self._take_store()
            elif slot >= self.slot_count:  # (slot == allocated - 1 == slot_count: the store is full)
                self._reallocate(2 * self.slot_count, self.capacity)
            return self.rows - 1
        self.slots.append(self.rows - 1)
        for store in (self.keys, self.values):
            for i, t in enumerate(store):
                if t is not None:
                    store[i] = torch.cat([t, t.new_zeros((1, *t.shape[1:]))])
        return self.rows - 1

    def remove_row(self, row: int) -> None:
        """Drop a row (later rows move up by one) and shrink the capacity to what the other rows use."""
        kept = [r for r in range(self.rows) if r != row]
        keep = torch.tensor(kept, dtype=torch.long)
        del self.lengths[row]
        if self.stable:  # its slot is free for the next row; nothing moves
            self._free.append(self.slots.pop(row))
            self._free.sort()
            self.target_side = self.target_side[kept]
            return
        self.slots.pop()
        capacity = min(self.capacity, _grown(max(self.lengths, default=0)))
        self.target_side = self.target_side[kept, :capacity]
        for store in (self.keys, self.values):
            for i, t in enumerate(store):
                if t is not None:  # a fresh tensor: the old memory is freed
                    store[i] = t.index_select(0, keep.to(t.device))[:, :, :capacity].contiguous()
        self.capacity = capacity

    def move(self, row: int, source: int, target: int) -> None:
        """Copy the cached token at index ``source`` of a row to index ``target`` (a guessed alternative takes the
        place of the guess it stood in for; stream.py). The row's length is unchanged: crop it after."""
        if not 0 <= target < source < self.lengths[row]:
            raise ValueError(f"cannot move cached token {source} of row {row} to {target}: it holds "
                             f"{self.lengths[row]}")
        self.target_side[row, target] = self.target_side[row, source]
        slot = self.slots[row]
        for store in (self.keys, self.values):
            for t in store:
                if t is not None:
                    t[slot, :, target] = t[slot, :, source]

    def drop(self, row: int, index: int) -> None:
        """Take the cached token at ``index`` out of a row: the tokens after it move down by one (a guess that
        re-placed it after what a read placed is the layout's list now; stream.py)."""
        length = self.lengths[row]
        if not 0 <= index < length:
            raise ValueError(f"cannot drop cached token {index} of row {row}: it holds {length}")
        self.target_side[row, index:length - 1] = self.target_side[row, index + 1:length].copy()
        slot = self.slots[row]
        for store in (self.keys, self.values):
            for t in store:
                if t is not None:
                    t[slot, :, index:length - 1] = t[slot, :, index + 1:length].clone()
        self.lengths[row] = length - 1

    def crop(self, row: int, keep: int) -> None:
        if not 0 <= keep <= self.lengths[row]:
            raise ValueError(f"cannot keep {keep} cached tokens of row {row}: it holds {self.lengths[row]}")
        self.lengths[row] = keep

    # ---- shared prompts (prompt_cache.py) ---------------------------------------------------------------------
    def copy_in(self, row: int, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """An empty row takes ``keys``/``values`` (per layer (kv heads, L, head dim)) as its first L source-side keys."""
        if self.lengths[row] != 0:
            raise ValueError(f"row {row} is not empty: it holds {self.lengths[row]} cached tokens")
        length = keys[0].shape[1]
        if length > self.capacity:
            self._grow(_grown(length))
        for store, given in ((self.keys, keys), (self.values, values)):
            for layer, t in enumerate(given):
                store[layer][self.slots[row], :, :length] = t.to(store[layer].dtype)
        self.target_side[row, :length] = False
        self.lengths[row] = length

    def copy_out(self, row: int, length: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The first ``length`` keys and values of a row, per layer, as fresh tensors."""
        slot = self.slots[row]
        return ([t[slot, :, :length].clone() for t in self.keys], [t[slot, :, :length].clone() for t in self.values])

    @property
    def layers_ready(self) -> bool:
        """Every layer's store exists (after the first forward)."""
        return bool(self.keys) and all(t is not None for t in self.keys)

    # ---- one forward -----------------------------------------------------------------------------------------
    def prepare(self, rows: list[int], new_tokens: list[int], target_side: np.ndarray) -> torch.Tensor:
        """Lay out a packed forward: row ``rows[i]`` feeds ``new_tokens[i]`` tokens, one query each, in order;
        ``target_side`` (N,) bool flags them. Returns the (N,) key index of each query in its row."""
        need = max(self.lengths[r] + n for r, n in zip(rows, new_tokens))
        if need > self.capacity:
            self._grow(_grown(need))
        # index arithmetic on a few dozen numbers: numpy's operations cost a microsecond where torch's cost ten
        counts = np.array(new_tokens, dtype=np.int64)
        served = np.repeat(np.array(rows, dtype=np.int64), counts)
        firsts = np.array([self.lengths[r] for r in rows], dtype=np.int64)  # each row's first new key index, then
        # one up per query
        q_index = np.repeat(firsts - (np.cumsum(counts) - counts), counts) + np.arange(len(served))
        self._view = (not self.stable and len(served) == self.rows
                      and bool((served == np.arange(self.rows)).all()))
        self.target_side[served, q_index] = target_side
        self._served_rows = served
        served, q_index = torch.from_numpy(served), torch.from_numpy(q_index)
        self._served, self._write, self._key_count = served, q_index, need
        self._indices_on = None  # (device, served, write) there; see _on
        for r, n in zip(rows, new_tokens):
            self.lengths[r] += n
        return q_index

    def served_slots(self) -> torch.Tensor:
        """(N,) the store slot each query of the prepared forward reads and writes (its row's slot)."""
        return torch.tensor(self.slots, dtype=torch.long)[self._served] if self.stable else self._served

    def write_indices(self) -> torch.Tensor:
        """(N,) the key index each query of the prepared forward writes (in its row)."""
        return self._write

    def bind(self, slots: torch.Tensor, write: torch.Tensor, key_count: int) -> None:
        """A static-shape forward (static_decoder.py): ``update`` writes and reads through these tensors (on the
        store's device, padded queries included) and returns ``key_count`` keys per query, whatever the forward
        prepared. Bound until ``unbind``; a captured CUDA graph keeps reading these same tensors."""
        if not self.stable:
            raise ValueError("only a stable cache (BatchKVCache(stable=True)) serves static-shape forwards")
        self._bound = (slots, write, key_count)

    def unbind(self) -> None:
        self._bound = None

    def _on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The prepared forward's slots and key indices as index tensors on ``device`` (copied once per forward, not
        per layer: on a GPU each copy is a host-to-device transfer)."""
        if self._indices_on is None or self._indices_on[0] != device:
            self._indices_on = (device, self.served_slots().to(device), self._write.to(device))
        return self._indices_on[1], self._indices_on[2]

    def key_sides(self) -> np.ndarray:
        """(N, K) target-side flags of the keys each query of the prepared forward attends over."""
        return self.target_side[self._served_rows, : self._key_count]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        """Called by every attention layer with the (N, H, 1, D) new keys/values: write them, return (N, H, K, D)."""
        while len(self.keys) <= layer_idx:
            self.keys.append(None)
            self.values.append(None)
        out = []
        for store, new in ((self.keys, key_states), (self.values, value_states)):
            if store[layer_idx] is None:  # stable: every slot given out so far, then the scratch slot
                if self.stable:
                    with torch.inference_mode(False):  # ordinary tensors: the next engine may run without it
                        store[layer_idx] = new.new_zeros((self.allocated + 1, new.shape[1], self.capacity,
                                                          new.shape[3]))
                else:
                    store[layer_idx] = new.new_zeros((self.rows, new.shape[1], self.capacity, new.shape[3]))
            full = store[layer_idx]
            served, write, count = self._bound if self._bound is not None else (*self._on(full.device),
                                                                               self._key_count)
            full[served, :, write, :] = new[:, :, 0, :].to(full.dtype)
            window = full[:, :, :count]
            out.append(window if self._view else window.index_select(0, served))
        return out[0], out[1]

    def _grow(self, capacity: int) -> None:
        extra = capacity - self.capacity
        self.target_side = np.concatenate([self.target_side, np.zeros((self.rows, extra), dtype=bool)], axis=1)
        if self.stable:
            if self.layers_ready:
                self._reallocate(self.slot_count, capacity)
            self.capacity = capacity
            return
        for store in (self.keys, self.values):
            for i, t in enumerate(store):
                if t is not None:
                    store[i] = torch.cat([t, t.new_zeros((t.shape[0], t.shape[1], extra, t.shape[3]))], dim=2)
        self.capacity = capacity

    def _reallocate(self, slots: int, capacity: int) -> None:
        """Stable: a larger store (``slots`` slots plus scratch, ``capacity`` keys), every slot's keys copied."""
        old = self.slot_count
        for store in (self.keys, self.values):
            for i, t in enumerate(store):
                with torch.inference_mode(False):  # (see update)
                    grown = t.new_zeros((slots + 1, t.shape[1], capacity, t.shape[3]))
                grown[:old, :, : t.shape[2]] = t[:old]
                store[i] = grown
        self._meta["generation"] = next(_GENERATIONS)

    def _take_store(self) -> None:
        """Stable, before the first forward: take the pool's spare store (the same model's) if it has a slot for
        every row and the capacity (its old keys are stale: hidden, then overwritten, as after a crop)."""
        spare = self.pool.take(self.allocated, self.capacity)
        if spare is None:
            return
        keys, values, generation = spare
        self.keys[:], self.values[:] = keys, values  # in place: the finalizer holds these lists
        self._meta["generation"] = generation
        if keys[0].shape[2] > self.capacity:
            extra = keys[0].shape[2] - self.capacity
            self.target_side = np.concatenate([self.target_side, np.zeros((self.rows, extra), dtype=bool)], axis=1)
            self.capacity = keys[0].shape[2]

    # ---- what transformers may ask -----------------------------------------------------------------------------
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return max(self.lengths, default=0)

    def memory_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for store in (self.keys, self.values) for t in store if t is not None)


def _grown(needed: int) -> int:
    """Capacities grow in powers of two (amortised copies)."""
    capacity = 16
    while capacity < needed:
        capacity *= 2
    return capacity
