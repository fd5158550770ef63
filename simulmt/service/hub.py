"""The hub: every client's live stream advanced by ONE engine on ONE model, in a thread of its own.

The web side (``app.py``, asyncio) never touches the model: it turns a client's frames into commands (``open``,
``text``, ``boundary``, ``end``, ``close``) on a thread-safe queue. The hub's thread applies them and runs engine
rounds while any stream needs the model; each round's words go back to their client through the client's
``sink`` (a thread-safe callback), in order::

    client frames -> app (asyncio) -> commands queue -> hub thread: LiveText -> words -> Talk.push
                                                                    engine.step() (one forward, all streams)
    client socket <- app (asyncio) <- sink(message) <- words, sentences, errors

A client's talk is one ``Talk`` stream (simulmt.core.talk, as ``translate`` and ``evaluate --docids`` use): one
row of the engine for the whole talk, cut into sentences where a sentence ends (``LiveText``'s boundaries, and the
talk's own rule, the same) or at ``max_words``, each sentence given the earlier pairs the hub's ``window`` asks for
(none by default), so memory and context stay bounded for hours. The words a client sends wait in its intake
(``Client.pending``) and enter its talk while the talk holds fewer than ``max_words`` words not yet read by a
sentence: one client flooding text cannot stall the others (its talk is one row of each forward, whatever it
sent). ``Backlog`` counts the words a client sent and the words the hub took: while it is full the web side keeps
the client's further text unsplit, and stops reading its socket when that is full too (back-pressure,
``app.py``). A word over ``max_word_tokens`` tokens is dropped with an error. Each sentence is reported
(``sentence``) after its last word, before the next sentence's first.

A client that goes away has its talk removed at once (its cache row is freed) and its intake emptied.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from simulmt.core.engine import Engine
from simulmt.core.prompt_format import word_tokens
from simulmt.core.stream import Status
from simulmt.core.talk import ContextWindow, Talk
from simulmt.core.translation import Translation
from simulmt.errors import SimulmtError
from simulmt.text.live_text import Boundary, LiveText, Rejected, Word
from simulmt.service.limits import MAX_WORD_CHARS, MAX_WORD_TOKENS

Sink = Callable[[dict], None]
Action = Word | Boundary | Rejected


@dataclass
class Backlog:
    """Words a client sent (counted by whoever splits its text) and words the hub took from its intake (into a
    stream, or dropped): each count is written by one thread only, so either thread may read the difference."""

    sent: int = 0
    taken: int = 0

    @property
    def waiting(self) -> int:
        return self.sent - self.taken


@dataclass
class Client:
    id: int
    options: dict  # layout, policy, k, n, tau, slot, phi
    sink: Sink
    live: LiveText
    backlog: Backlog = field(default_factory=Backlog)
    pending: deque[Action] = field(default_factory=deque)  # the intake: taken while its talk's queue is short
    t0: float = field(default_factory=time.perf_counter)
    talk: Talk | None = None  # from the client's first word
    done: deque[tuple[int, Translation]] = field(default_factory=deque)  # finished sentences not reported yet:
    # (the talk's target words before the next sentence, its translation)
    words_before: int = 0  # source words of the sentences reported
    sentence_index: int = 0
    ending: bool = False  # the client sent "end": close once its talk is finished


@dataclass
class Metrics:
    clients: int = 0
    clients_total: int = 0
    refused_total: int = 0
    words_in_total: int = 0
    words_out_total: int = 0
    sentences_total: int = 0
    forwards_total: int = 0
    rows_total: int = 0
    forward_seconds_total: float = 0.0
    queue_seconds_total: float = 0.0  # time commands waited before the hub applied them
    commands_total: int = 0


# Rows from which a shared forward feeds no guesses (CPU; Gemma-3-270M, float16-packed, 2 threads, expost wait-3:
# guesses gain 5-7% at ~5 rows a forward, break even at ~10, cost 9% at ~23)
CROWDED_ROWS = 16


class Hub:
    def __init__(self, translator, max_streams: int = 16, max_words: int = 64,
                 window: ContextWindow = ContextWindow(), max_word_chars: int = MAX_WORD_CHARS,
                 max_word_tokens: int = MAX_WORD_TOKENS):
        self.translator = translator
        self.max_streams = max_streams
        self.max_words = max_words
        self.window = window  # the earlier pairs of a client's talk each sentence sees
        self.max_word_chars = max_word_chars
        self.max_word_tokens = max_word_tokens
        # on a CPU, a shared forward of CROWDED_ROWS rows or more feeds no guesses (engine.py): the same words, fewer
        # rows computed (+9% target tokens/s at 16 full-speed streams, measured; evaluation does not do this, its
        # logs count tokens fed per sentence and must not depend on the batch)
        self.engine = Engine(translator.runner,
                             guess_rows=CROWDED_ROWS if translator.runner.device.type == "cpu" else None)
        self.clients: dict[int, Client] = {}
        self.owner: dict[int, Client] = {}  # id(talk) -> client
        self.metrics = Metrics()
        self._commands: queue.Queue = queue.Queue()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # guards the count of admitted clients
        self._admitted = 0
        self._thread = threading.Thread(target=self._run, name="simulmt-hub", daemon=True)
        self._stopping = False
        self._joined = False

    # ---- called from any thread --------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._commands.put(("stop", None, None, time.perf_counter()))
        self._thread.join(timeout=10)

    def admit(self) -> int | None:
        """A client id, or None when ``max_streams`` clients are connected (``release`` gives the place back)."""
        with self._lock:
            if self._admitted >= self.max_streams:
                self.metrics.refused_total += 1
                return None
            self._admitted += 1
            return next(self._ids)

    def release(self, client_id: int) -> None:
        """The client's connection is gone: its streams leave the engine, its place is free."""
        self.send("close", client_id)
        with self._lock:
            self._admitted -= 1

    def send(self, kind: str, client_id: int, payload=None) -> None:
        """``open`` (payload: (options, sink) or (options, sink, backlog)), ``text`` (payload: str, split here),
        ``words`` (payload: actions of a ``LiveText`` the caller keeps, their words counted in its ``Backlog``),
        ``boundary``, ``end``, ``close``."""
        self._commands.put((kind, client_id, payload, time.perf_counter()))

    def call(self, fn: Callable[[], object]) -> Future:
        """Run ``fn`` on the hub's thread (which owns the model and the tokenizer) between rounds; its result or
        exception comes back in the future."""
        future: Future = Future()
        self._commands.put(("call", None, (fn, future), time.perf_counter()))
        return future

    def live_text(self) -> LiveText:
        """A ``LiveText`` with this hub's bounds, for a caller that splits a client's text itself (``words``)."""
        return LiveText(self.max_words, self.max_word_chars)

    # ---- the hub's thread ----------------------------------------------------------------------------------------
    def _run(self) -> None:
        busy = False
        while not self._stopping:
            try:  # wait for a command only when no stream needs the model
                command = self._commands.get_nowait() if busy else self._commands.get()
            except queue.Empty:
                command = None
            while command is not None:
                self._apply(*command)
                try:
                    command = self._commands.get_nowait()
                except queue.Empty:
                    command = None
            self._joined = False
            busy = (self._round() or self._joined) if self.engine.streams else False

    def _apply(self, kind: str, client_id: int, payload, queued_at: float) -> None:
        self.metrics.commands_total += 1
        self.metrics.queue_seconds_total += time.perf_counter() - queued_at
        if kind == "stop":
            return
        if kind == "call":
            fn, future = payload
            try:
                future.set_result(fn())
            except Exception as exc:  # handed to the caller, who raises it
                future.set_exception(exc)
            return
        if kind == "open":
            options, sink, *backlog = payload
            self.clients[client_id] = Client(client_id, options, sink, self.live_text(), *backlog)
            self.metrics.clients = len(self.clients)
            self.metrics.clients_total += 1
            return
        client = self.clients.get(client_id)
        if client is None:
            return
        if kind == "close":
            self._drop(client)
            return
        if client.ending:
            if kind == "words":  # counted by the caller: taken, as nothing will be done with them
                client.backlog.taken += words_in(payload)
            client.sink({"type": "error", "message": "the input has ended; no more text is taken"})
            return
        if kind == "words":  # split by the caller, and counted in its Backlog
            actions = payload
        else:  # split here
            actions = (client.live.feed(payload) if kind == "text" else
                       client.live.boundary() if kind == "boundary" else client.live.end())
            client.backlog.sent += words_in(actions)
            client.ending = kind == "end"
        client.pending.extend(actions)
        self._feed(client)

    def _feed(self, client: Client) -> None:
        """Take the client's pending words into its talk while the talk holds fewer than ``max_words`` words that no
        sentence has read yet; once the client ended and all is taken, the talk's source is finished."""
        while client.pending and (client.talk is None or len(client.talk.queue) < self.max_words):
            action = client.pending.popleft()
            try:
                self._act(client, action)
            except SimulmtError as exc:
                client.sink({"type": "error", "message": str(exc)})
            finally:
                client.backlog.taken += words_in([action])
        if client.ending and not client.pending and client.id in self.clients:
            if client.talk is None:  # it said nothing
                self._finish(client)
            elif not client.talk.talk_finished:
                client.talk.push([], finished=True)
                self._joined = True  # its last sentence ends: one more round

    def _act(self, client: Client, action: Action) -> None:
        if isinstance(action, Rejected):
            raise SimulmtError(action.reason)
        if isinstance(action, Boundary):
            if client.talk is not None:
                client.talk.cut()
                self._joined = True
            return
        if len(action.text) * 4 > self.max_word_tokens:  # a character is at most 4 byte tokens: else it fits
            tokens = len(word_tokens(self.translator.tokenizer, action.text, True))
            if tokens > self.max_word_tokens:
                raise SimulmtError(f"the word {action.text[:24]!r}... is {tokens} tokens, over the limit of "
                                   f"{self.max_word_tokens}; dropped")
        self.metrics.words_in_total += 1
        if client.talk is None:
            talk = self.translator.new_talk(**client.options, window=self.window, max_words=self.max_words)
            talk.on_sentence = lambda part: client.done.append((talk.words_before, part))
            talk.keep = False  # (reported as they end: a talk of hours keeps no history)
            client.talk = talk
            self.owner[id(talk)] = client
            self.engine.add(talk)
        client.talk.push([action.text])
        self._joined = True  # it has not been stepped since: one more round

    def _round(self) -> bool:
        started = time.perf_counter()
        forwards = self.engine.stats.forwards
        events = self.engine.step()
        if self.engine.stats.forwards > forwards:
            self.metrics.forwards_total += 1
            self.metrics.rows_total += self.engine.stats.last_batch
            self.metrics.forward_seconds_total += time.perf_counter() - started
        for event in events:
            client = self.owner.get(id(event.stream))
            if client is None:
                continue
            self._send_words(client, event.words)
            self._report(client)
            if event.status is Status.DONE:  # the talk is over (or failed as a whole)
                if event.error is not None:
                    client.sink({"type": "error", "message": str(event.error)})
                self._finish(client)
        for client in list(self.clients.values()):  # its talk read words: room for more
            if client.pending or client.ending:
                self._feed(client)
        return any(e.status is Status.NEEDS_MODEL for e in events)

    def _send_words(self, client: Client, words) -> None:
        """The talk's words, each after the report of every sentence before it."""
        now = (time.perf_counter() - client.t0) * 1000.0
        for word in words:
            while client.done and word.index >= client.done[0][0]:
                self._sentence_done(client, client.done.popleft()[1])
            for piece in word.text.split():
                client.sink({"type": "word", "text": piece, "delay": word.delay, "elapsed_ms": round(now, 1),
                             "sentence": client.sentence_index})
                self.metrics.words_out_total += 1

    def _report(self, client: Client) -> None:
        while client.done:
            self._sentence_done(client, client.done.popleft()[1])

    def _sentence_done(self, client: Client, result: Translation) -> None:
        if result.error is not None:
            client.sink({"type": "error", "message": f"sentence {client.sentence_index}: {result.error}"})
        delays = [client.words_before + d for d in result.delays]
        client.sink({"type": "sentence", "index": client.sentence_index, "source": result.source,
                     "translation": result.prediction, "delays": delays})
        self.metrics.sentences_total += 1
        client.words_before += result.source_length
        client.sentence_index += 1

    def _finish(self, client: Client) -> None:
        self._report(client)
        client.sink({"type": "end"})
        self._drop(client)

    def _drop(self, client: Client) -> None:
        talk = client.talk
        if talk is not None:
            self.owner.pop(id(talk), None)
            if any(s is talk for s in self.engine.streams):
                self.engine.remove(talk)  # its cache row is freed at once
        client.talk = None
        client.backlog.taken += words_in(client.pending)
        client.pending.clear()
        self.clients.pop(client.id, None)
        self.metrics.clients = len(self.clients)


def words_in(actions) -> int:
    """How many of a LiveText's actions are words (what a Backlog counts)."""
    return sum(isinstance(a, Word) for a in actions)
