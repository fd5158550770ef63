"""The engine: many streams advanced together, one batched forward per round, same results as one at a time.

    round:  every active stream steps (model-free: policy, layout, sampler) until it needs something
            -> words written, NEEDS_SOURCE (it waits), DONE / error (it leaves, its cache row is freed at once)
            -> NEEDS_MODEL: a ForwardRequest (keep the first N cached tokens, feed these placed tokens)
            all requests of the round are served by ONE forward over the batched cache (``BatchKVCache``):
            per-row crop (a length), every new token a packed query with its own position id and its mask from
            the same visibility rule, the logits (and last hidden state) of each stream's last token and of the
            tokens it fed as a guess of what its layout places next (a read-ahead guess: of its last token
            alone, ``ForwardRequest.inner_answers``; stream.py; alternatives to a guess sit
            at its position, masked from it, and one the layout places is moved into its slot; a forward shared by
            several streams feeds none: their rows would cost every stream); the LM head runs
            only on the rows that ask for logits (a learned policy's decision asks only if it writes).
            A learned policy whose head reads an inner layer: the forward stops at that layer when every stream in
            it reads on (layer_split.py); their rows are cropped back and fed again, whole, in their next forward.
            With ``guess_rows`` set, a crowded forward (that many rows or more without its guesses) feeds no
            guess at all: on a CPU its matrix products cost by the row, so a guess costs more than the round it
            may save. The outputs are the same; the tokens fed and forwards counted then depend on the batch, so
            only the service sets it (evaluation logs are the same for every batch size).

A new stream whose first request starts with a prompt the engine has computed before takes that prompt's keys and
values from the engine's ``PromptCache`` (prompt_cache.py) instead of computing them again.

Streams join (``add``) and leave (``remove``, or by finishing) between rounds. A stream's clock (its words'
``elapsed``) starts when it joins, so in a batched run elapsed is the wall time the stream spent in the engine,
sharing each forward with the other rows (not the time it waited in a queue before joining). A stream's decoding never depends
on the other rows: its positions, mask and cache row are its own, so its predictions, delays and logits equal
those of the stream run alone (tests/test_engine.py, float32, logits within 1e-5).

The model side is one call, ``ModelRunner.forward_packed(queries, cache, wants)`` over plain named tensors (one
query per batch row: packed_forward.py), so another runtime (llama.cpp's batch API has explicit positions, sequence
ids and position-range removal) can serve the same streams later.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from itertools import accumulate
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from simulmt.core.batch_cache import BatchKVCache
from simulmt.core.head_scores import HeadScores
from simulmt.core.head_vocabulary import read_source_ids
from simulmt.core.packed_forward import PackedQueries, Wants
from simulmt.core.prompt_cache import PromptCache, SharedPrompt, prompt_key
from simulmt.errors import SimulmtError
from simulmt.core.runner import ModelRunner
from simulmt.core.requests import RequestDecisions
from simulmt.core.stream import ForwardRequest, Status, Stream, WrittenWord
from simulmt.core.visibility import key_distances, slot_starts, visible_rows


@dataclass
class Event:
    """What happened to one stream in a round."""

    stream: Stream
    words: list[WrittenWord]
    status: Status
    error: SimulmtError | None = None


def _columns(tokens: list) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Placed tokens' ids, positions and target-side flags as three tensors (through numpy: ``torch.tensor`` of a
    Python list costs about five times as much, per token and forward)."""
    ids, positions, roles = list(zip(*tokens))[:3]
    n = len(tokens)
    return (torch.from_numpy(np.fromiter(ids, np.int64, n)), torch.from_numpy(np.fromiter(positions, np.int64, n)),
            torch.from_numpy(np.fromiter((r.target_side for r in roles), np.bool_, n)))


def _without_guesses(request: ForwardRequest) -> ForwardRequest:
    """The request without the guessed tokens after its list. A learned policy's decision asked for logits only for
    its guesses (``logits_if``): without them it needs none."""
    if not request.speculative:
        return request
    return replace(request, tokens=request.tokens[:len(request.tokens) - request.speculative], speculative=0,
                   logits=request.logits and request.logits_if is None, logits_if=None, replaces=None)


@dataclass
class Served:
    """What one packed forward did, per request in row order (``Engine._forward``): what ``serve`` hands on."""

    requests: list[tuple[Stream, ForwardRequest]]  # as served (a shared forward feeds no alternatives, ...)
    rows: list[int]  # each request's cache row
    shared: list[int]  # prompt tokens copied from the prompt cache instead of computed
    counts: list[int]  # tokens computed
    pairs: list[int]  # visible keys summed over each request's computed queries (FLOPs)
    answered: list[int]  # answers (rows of logits / features) per request
    got: list[bool]  # which requests got logits (a ``logits_if`` may say no: no LM head row)
    logits: torch.Tensor | None  # (rows that got logits, vocab); None: the forward stopped at ``layer``
    hidden: torch.Tensor | None  # the features of every answer, when some stream wants them
    to_store: list[tuple[int, tuple, int]]  # (row, prompt key, length): prompts to keep after the forward
    layer: int | None  # the policy head's layer the features come from (None: the last hidden state)
    scores: HeadScores | None  # the policy heads' p(WRITE) of the answers' features, for every row at once when
    # first asked (head_scores.py); None: no stream in the forward has a head and features of its own


@dataclass
class EngineStats:
    forwards: int = 0
    rows: int = 0  # stream rows served, summed over forwards
    tokens: int = 0  # tokens computed (packed: no padding; shared prompt tokens are not computed)
    shared_tokens: int = 0  # prompt tokens copied from the prompt cache instead of computed
    logit_rows: int = 0  # rows of the LM head computed (with a large vocabulary, a row costs more than a token)
    stopped: int = 0  # forwards that stopped at a policy head's inner layer
    peak_cache_bytes: int = 0
    batch_sizes: Counter = field(default_factory=Counter)  # rows per forward -> forwards (bounded: a long-running
    # service keeps one count per batch size, not one entry per forward)
    last_batch: int = 0  # rows of the latest forward


class Engine:
    def __init__(self, runner: ModelRunner, share_prompts: bool = True, guess_rows: int | None = None):
        self.runner = runner
        self.guess_rows = guess_rows  # a shared forward of this many rows or more (without guesses) feeds none
        # CUDA graphs (runner.static): rows fixed in the store, which comes from and goes back to the runner's pool
        self.cache = BatchKVCache(stable=runner.static is not None, pool=runner.static)
        self.prompts = PromptCache() if share_prompts else None  # prompt_cache.py
        self.streams: list[Stream] = []  # stream i owns row i of the cache
        self._rows: dict[int, int] = {}  # id(stream) -> its row
        self.stats = EngineStats()

    # ---- membership ------------------------------------------------------------------------------------------
    def add(self, stream: Stream) -> None:
        if id(stream) in self._rows:
            raise SimulmtError("this stream is already in the engine")
        if stream.fed:
            raise SimulmtError("a stream that was served by another engine cannot join this one")
        if stream.t0 is not None:  # the clock of a stream that waited in a queue starts when it joins
            stream.t0 = time.perf_counter()
        execution = self.runner.execution  # how it computes: as every stream of this runner (execution.py)
        if self.runner.alibi:  # its key distances count cache slots: an alternative is not in its guess's slot,
            execution = replace(execution, alternatives=0, moved_guesses=False)  # nor a re-placed token in its own
        stream.execution = execution
        self.streams.append(stream)
        self._rows[id(stream)] = len(self.streams) - 1
        self.cache.add_row()

    def remove(self, stream: Stream) -> None:
        """The stream leaves; its cache row is freed at once."""
        row = self._row(stream)
        del self.streams[row]
        self._rows = {id(s): i for i, s in enumerate(self.streams)}
        self.cache.remove_row(row)

    def _row(self, stream: Stream) -> int:
        row = self._rows.get(id(stream))
        if row is None:
            raise SimulmtError("this stream is not in the engine")
        return row

    # ---- rounds ----------------------------------------------------------------------------------------------
    def step(self) -> list[Event]:
        """One round: step every stream, serve every model request in one forward. Finished and failed streams
        leave the engine."""
        events, requests = [], []
        for stream in list(self.streams):
            try:
                step = stream.step()
            except SimulmtError as exc:
                events.append(Event(stream, [], Status.DONE, exc))
                self.remove(stream)
                continue
            events.append(Event(stream, step.words, step.status))
            if step.status is Status.NEEDS_MODEL:
                requests.append((stream, step.request))
            elif step.status is Status.DONE:
                self.remove(stream)
        if requests:
            self.serve(requests)
        return events

    def run(self) -> list[Event]:
        """Rounds until no stream needs the model (every stream waits for source or has left)."""
        events: list[Event] = []
        while True:
            round_events = self.step()
            events += round_events
            if not any(e.status is Status.NEEDS_MODEL for e in round_events):
                return events

    # ---- one batched forward ---------------------------------------------------------------------------------
    def serve(self, requests: list[tuple[Stream, ForwardRequest]]) -> None:
        """One packed forward: every new token of every request is a query row of its own (batch_cache.py). The
        cache's edits and the forward run in ``torch.inference_mode`` (no autograd bookkeeping: about 1 ms of a
        17 ms Gemma-3-270M decoder forward on a CPU; the same numbers); the streams receive ordinary tensors."""
        with torch.inference_mode() if self.runner.execution.inference_mode else torch.no_grad():
            done = self._forward(requests)
        if done.logits is None:  # stopped at the policy head's layer: every stream reads on, its tokens come again
            self._stopped(done)
            return
        pairs, hidden, logits = done.pairs, done.hidden, done.logits
        best = self._best_tokens(done.requests, done.got, done.answered, logits)
        logit_rows, answer = 0, 0  # where each stream's rows begin in ``logits`` and in ``hidden``
        for i, ((stream, request), n) in enumerate(zip(done.requests, done.counts)):
            answers, got, shared = done.answered[i], done.got[i], done.shared[i]
            flops = self.runner.compute.flops(n, pairs[i], answers * got)
            if shared:  # a stream's compute count is that of its whole request (prompt_cache.py)
                flops += self.runner.compute.flops(shared, shared * (shared + 1) // 2, 0)
            own = hidden is not None and stream.features_layer == done.layer  # (another layer's are not its own)
            stream.receive(logits if got else None, flops, hidden if own else None, served=request, best=best[i],
                           first=(logit_rows, answer), scores=done.scores if own else None)
            logit_rows += answers * got
            answer += answers
        self._count(done.rows, done.counts, done.shared)
        self.stats.logit_rows += logits.shape[0]
        for row, key, length in done.to_store if self.cache.layers_ready else ():  # (no store: no sharing)
            keys, values = self.cache.copy_out(row, length)
            self.prompts.put(key, SharedPrompt(keys, values))

    @staticmethod
    def _best_tokens(requests, got: list[bool], answered: list[int], logits: torch.Tensor) -> list:
        """Per request, the best tokens of its rows of logits (``Vocabulary.best``), found for all rows of the
        forward at once and copied to the host in one piece; None for a request without logits or whose sampler
        does not choose the best token (it looks at its logits itself)."""
        spans, start = [], 0
        for g, n in zip(got, answered):
            spans.append((start, start + n) if g else None)
            start += n if g else 0
        out: list = [None] * len(requests)
        groups: dict[int, list[int]] = {}  # requests by vocabulary (streams of one model may have prompt formats
        # with other end tokens)
        for i, (stream, _) in enumerate(requests):
            if spans[i] is not None and stream.forced is None and getattr(stream.sampler, "picks_best", False):
                groups.setdefault(id(stream.vocabulary), []).append(i)
        for members in groups.values():
            rows = [r for i in members for r in range(*spans[i])]
            part = logits if len(rows) == logits.shape[0] else logits[torch.tensor(rows, device=logits.device)]
            table = requests[members[0]][0].vocabulary.best(part).tolist()  # (a row's pair as a list: indexed alike)
            at = 0
            for i in members:
                n = spans[i][1] - spans[i][0]
                out[i], at = table[at:at + n], at + n
        return out

    def _stopped(self, done: Served) -> None:
        """A forward that stopped at the policy head's layer: each row back to what it kept; each stream gets its
        features."""
        answer = 0
        for i, ((stream, request), row, n) in enumerate(zip(done.requests, done.rows, done.counts)):
            self.cache.crop(row, request.keep)
            flops = self.runner.compute.flops(n, done.pairs[i], 0,
                                              layers=done.layer + 1)
            stream.receive(None, flops, done.hidden, served=request, stopped=True, first=(0, answer),
                           scores=done.scores)
            answer += done.answered[i]
        self._count(done.rows, done.counts, [0] * len(done.rows))
        self.stats.stopped += 1

    def _count(self, rows: list[int], counts: list[int], shared: list[int]) -> None:
        s = self.stats
        s.forwards += 1
        s.rows += len(rows)
        s.tokens += sum(counts)
        s.shared_tokens += sum(shared)
        s.batch_sizes[len(rows)] += 1
        s.last_batch = len(rows)
        s.peak_cache_bytes = max(s.peak_cache_bytes, self.cache.memory_bytes())

    def _forward(self, requests: list[tuple[Stream, ForwardRequest]]) -> Served:
        """The cache's edits and the forward of ``serve``, and what it did (``Served``)."""
        requests = sorted(requests, key=lambda sr: self._row(sr[0]))
        if len(requests) > 1:  # a shared forward: the alternatives' rows would cost every stream (measured), none fed
            requests = [(s, replace(r, tokens=r.tokens[:len(r.tokens) - r.alternatives], alternatives=0)
                         if r.alternatives else r) for s, r in requests]
            crowded = self.guess_rows is not None and sum(len(r.tokens) - r.speculative
                                                          for _, r in requests) >= self.guess_rows
            if crowded:  # no guesses (see guess_rows)
                requests = [(s, _without_guesses(r)) for s, r in requests]
        window = self.runner.window
        if window and any(r.replaces is not None and r.speculative > window for _, r in requests):
            requests = [(s, _without_guesses(r) if r.replaces is not None and r.speculative > window else r)
                        for s, r in requests]  # (a guess longer than a sliding window: its masks would not be exact)
        rows = [self._row(s) for s, _ in requests]
        for row, (_, request) in zip(rows, requests):
            if request.drop is not None and request.drop < request.keep:  # (else the crop drops it anyway)
                self.cache.drop(row, request.drop)
            if request.move is not None and request.move[1] < request.keep:  # (else the crop drops it anyway)
                self.cache.move(row, *request.move)
            self.cache.crop(row, request.keep)
        to_store: list[tuple[int, tuple, int]] = []  # (row, prompt key, length): prompts to keep after the forward
        shared = [self._share_prompt(row, request, to_store) for row, (_, request) in zip(rows, requests)]
        fed = [r.tokens[n:] for (_, r), n in zip(requests, shared)]  # what this forward computes, per request
        counts = [len(f) for f in fed]
        tokens = [t for f in fed for t in f]
        ids, positions, q_target = _columns(tokens)
        q_index = self.cache.prepare(rows, counts, q_target.numpy())
        # (index arithmetic on lists of a few dozen numbers goes through numpy: a microsecond an operation where
        # torch's cost ten, per forward)
        sees = np.repeat(np.array([s.layout.visibility.source_sees_target for s, _ in requests]), counts)
        visible = torch.from_numpy(visible_rows(q_index.numpy()[:, None], q_target.numpy()[:, None],
                                                self.cache.key_sides(), sees,
                                                self._target_before(requests, shared, counts))[:, 0])  # (N, K)
        request_ends = list(accumulate(counts))
        q_index = self._alternatives(requests, request_ends, q_index, visible)
        q_index = self._replaced(requests, request_ends, q_index, visible)
        distances = self._distances(requests, counts, visible, q_index, q_target) if self.runner.alibi else None
        answered = [r.answered for _, r in requests]  # the list's last query, each guess answered, the alternatives
        if all(r.inner_answers or r.speculative < 2 for _, r in requests):  # each request's last queries
            answers = np.array(answered, dtype=np.int64)
            last = torch.from_numpy(np.repeat(np.array(request_ends) - answers - (np.cumsum(answers) - answers),
                                              answers) + np.arange(int(answers.sum())))
        else:  # a read-ahead guess answered at its last token alone
            last = torch.tensor([end + at for (_, r), end in zip(requests, request_ends) for at in r.answer_offsets()])
        features = any(s.wants_features for s, _ in requests)
        layers = {s.features_layer for s, r in requests if s.wants_features and r.decides}
        if len(layers) > 1:
            raise SimulmtError(f"streams whose policy heads read different layers ({sorted(layers, key=str)}) cannot "
                               f"share an engine: run them in engines of their own")
        layer = next(iter(layers), None)  # the features are that layer's output (None: the last hidden state)
        heads = [getattr(s.policy, "head", None) if features and s.features_layer == layer else None
                 for s, _ in requests]  # whose p(WRITE) each request's answers want: those of every stream that gets
        # features of its own (``serve``): a stream may decide on any answer at its list's last token (expost's
        # decisions after the target is open come from a proposal's forward), and one product costs what a row does
        first = list(accumulate(answered[:-1], initial=0))  # each request's first answer
        # A READ may end the forward at the head's layer when every request decides there, and none computes the
        # prompt (it would be computed again; a prompt copied from the prompt cache is copied again)
        may_stop = layer is not None and all(r.reads_on is not None and (r.keep > 0 or n > 0)
                                             for (_, r), n in zip(requests, shared))
        conditional = any(r.logits and r.logits_if is not None for _, r in requests)
        got = [r.logits for _, r in requests]  # which requests get logits (a ``logits_if`` may say no: no LM head)
        scores = HeadScores(heads, answered) if any(h is not None for h in heads) else None
        decisions = RequestDecisions(requests, first, answered, may_stop, scores) if conditional or may_stop else None
        embedded = [s.embedding_of(t.token_id) for (s, _), f in zip(requests, fed) for t in f if t.token_id < 0
                    ] if len(tokens) and ids.numpy().min() < 0 else []  # (speech frames: ids < 0)
        extras = None
        if self.runner.shortlist is not None:  # each answered query's source tokens read (head_vocabulary.py)
            extras = [ids for s, r in requests for ids in read_source_ids(s.state.tokens, r.keep, r.tokens,
                                                                           r.answer_offsets(), s.source_spellings)]
        queries = PackedQueries(ids, positions, visible, q_index, last, distances,
                                torch.stack(embedded) if embedded else None, extras)
        wants = Wants(features, layer, None if all(got) else torch.tensor([g for g, n in zip(got, answered)
                                                                           for _ in range(n)]), decisions)
        logits, hidden, head_rows = self.runner.forward_packed(queries, self.cache, wants)
        if decisions is not None and head_rows is not None:
            got = head_rows[torch.tensor(first)].tolist()
        if scores is not None and hidden is not None:
            scores.of(hidden)  # (the features the decisions asked on, when the forward returns them: computed once)
        per_query = np.concatenate([[0], np.cumsum(visible.numpy().sum(axis=1))])  # visible keys (FLOPs)
        pairs = (per_query[request_ends] - per_query[np.array(request_ends) - counts]).tolist()  # per request
        return Served(requests, rows, shared, counts, pairs, answered, got, logits, hidden, to_store, layer, scores)

    @staticmethod
    def _target_before(requests, shared: list[int], counts: list[int]) -> np.ndarray | None:
        """(N, 1): below which key index each query, if source-side, sees target keys (layouts whose visibility
        has ``earlier_slots``; 0 for the others'), or None when no stream's layout has it. A request's fed tokens
        start at key ``keep + shared``; its guesses after the list (a new slot among them) count as placed."""
        if not any(s.layout.visibility.earlier_slots for s, _ in requests):
            return None
        out = []
        for (stream, request), n, count in zip(requests, shared, counts):
            if stream.layout.visibility.earlier_slots:
                out += slot_starts([*stream.state.tokens[:request.keep], *request.tokens], request.keep + n)
            else:
                out += [0] * count
        return np.array(out, dtype=np.int64)[:, None]

    def _share_prompt(self, row: int, request: ForwardRequest, to_store: list) -> int:
        """A new stream's first request: copy its prompt's keys and values into its row when the prompt cache has
        them (returns how many tokens need no computing), else note the prompt to keep after the forward."""
        if self.prompts is None or request.keep != 0:
            return 0
        key = prompt_key(request.tokens)
        if key is None or len(request.tokens) - len(key) < 1 + request.speculative + request.alternatives:
            return 0  # (every answered token must be computed)
        entry = self.prompts.get(key) if self.cache.layers_ready else None
        if entry is None:
            if not any(k == key for _, k, _ in to_store):
                to_store.append((row, key, len(key)))
            return 0
        self.cache.copy_in(row, entry.keys, entry.values)
        return entry.length

    @staticmethod
    def _alternatives(requests, ends: list[int], q_index: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        """Queries that are alternatives to a request's last guess (stream.py) see what that guess sees and
        themselves: not the guess, nor the alternatives before them (``visible`` is changed in place). Returns the
        key index each query is at for sliding windows: an alternative's is the guess's (it takes its place)."""
        if not any(r.alternatives for _, r in requests):
            return q_index
        at = q_index.clone()
        for (_, request), end in zip(requests, ends):
            n = request.alternatives
            if n:
                slot = int(q_index[end - n - 1])  # the guess they stand in for
                for q in range(end - n, end):
                    visible[q, slot:int(q_index[q])] = False
                at[end - n:end] = slot
        return at

    @staticmethod
    def _replaced(requests, ends: list[int], q_index: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        """A guess that re-places a cached token (``ForwardRequest.replaces``) does not see that token (``visible``
        is changed in place), and its queries sit one key index lower for sliding windows: where the guess is used
        the token leaves the row (``drop``), and every key before it is one index nearer. (Keys within the guess
        are then one index too near; the engine feeds no guess longer than the window.)"""
        if not any(r.replaces is not None and r.speculative for _, r in requests):
            return q_index
        at = q_index.clone()
        for (_, request), end in zip(requests, ends):
            if request.replaces is not None and request.speculative:
                first, last = end - request.alternatives - request.speculative, end - request.alternatives
                visible[first:last, request.replaces] = False
                at[first:last] -= 1
        return at

    def _distances(self, requests, counts, visible, q_index, q_target) -> torch.Tensor:
        """(N, K) ALiBi key distances of the packed queries, each by its own layout's rule (visibility.py)."""
        rows = torch.repeat_interleave(torch.tensor([self._row(s) for s, _ in requests]), torch.tensor(counts))
        k_valid = torch.arange(visible.shape[1])[None, :] < torch.tensor(self.cache.lengths)[rows][:, None]
        k_target = torch.from_numpy(self.cache.key_sides())
        rules = [s.layout.visibility.distance for (s, _), n in zip(requests, counts) for _ in range(n)]
        out = torch.zeros(visible.shape)
        for rule in set(rules):
            sel = torch.tensor([r == rule for r in rules])
            out[sel] = key_distances(rule, visible[sel][:, None], q_index[sel][:, None], q_target[sel][:, None],
                                     k_target[sel], k_valid[sel])[:, 0]
        return out


def run_ordered(streams: Iterable[Stream], engine: Engine, batch_size: int) -> Iterator[Stream]:
    """Run complete (already pushed) streams to their end, at most ``batch_size`` at a time, and yield each in
    input order as soon as it and every stream before it are finished (a failed one has ``error`` set). Streams
    are taken from ``streams`` lazily, as rows free up, so an input of any length runs in bounded memory."""
    if batch_size < 1:
        raise SimulmtError(f"batch size must be at least 1, got {batch_size}")
    source, exhausted = iter(streams), False
    pending: deque[Stream] = deque()  # taken from the input, not yet yielded, in input order
    while True:
        while pending and (pending[0].done or pending[0].error is not None):  # before taking more input
            yield pending.popleft()
        while not exhausted and len(engine.streams) < batch_size and len(pending) < 4 * batch_size:
            stream = next(source, None)
            if stream is None:
                exhausted = True
                break
            pending.append(stream)
            if not stream.done and stream.error is None:  # an empty line is done before it starts
                engine.add(stream)
        while pending and (pending[0].done or pending[0].error is not None):
            yield pending.popleft()
        if not engine.streams:
            if exhausted and not pending:
                return
            continue
        events = engine.step()
        for event in events:
            if event.error is not None:
                event.stream.error = event.error
        if all(e.status is Status.NEEDS_SOURCE for e in events):
            raise SimulmtError("run_ordered needs streams whose source is complete (push(..., finished=True))")


def run_batched(streams: list[Stream], engine: Engine, batch_size: int) -> list[Stream]:
    """``run_ordered`` to the end; returns the streams."""
    for _ in run_ordered(streams, engine, batch_size):
        pass
    return streams
