"""``simulmt serve``: the live translation service, a Starlette (ASGI) app served by uvicorn.

Why Starlette + uvicorn: both are small, well kept and standard; Starlette gives WebSockets, routes and static files
without a framework around them, and uvicorn is the reference ASGI server. The model never runs on the event loop:
the hub (``hub.py``) owns it in a thread of its own and serves every client's stream in one forward per round.

Routes:

* ``WS /v1/stream?layout=expost&policy=wait-k&k=3``: one live stream (a talk). Query options have the names and
  defaults of ``simulmt translate`` (``layout``, ``policy``, ``k``, ``n``, ``tau``, ``slot``, ``phi``,
  ``source_lang``, ``target_lang``; the languages must be the server's) plus ``token``. They are checked against
  the model at connect (the learned policy needs a head, the interleaved layout its markers, a slot / phi must fit
  the model's positions): options that cannot work get an error message and a close with 1008.
  client -> server: ``{"type": "text", "text": "..."}`` (any piece of text: a trailing partial word waits for
  the next space), ``{"type": "boundary"}`` (the sentence is over), ``{"type": "end"}`` (the input is over); or
  audio: binary frames of 16-bit little-endian mono PCM at ``audio_rate`` Hz (query option, default 16000), heard
  by a streaming recogniser of the client's own (``audio.py``), whose confirmed words come back as ``{"type":
  "heard", "text", "audio_ms"}`` and are translated as text would be.
  server -> client: ``{"type": "word", "text", "delay" (source words read, over the whole stream), "elapsed_ms"
  (since the stream opened), "sentence"}`` for every target word as it is written; ``{"type": "sentence",
  "index", "source", "translation", "delays"}`` when a sentence is complete; ``{"type": "error", "message"}`` for
  bad input (the stream goes on). After ``end``: the remaining words and sentences, then a normal close (1000).
* ``GET /health``: ``{"status": "ok", "model", "dtype", "streams", "max_streams"}`` (with a token set, a request
  without it gets only ``status``).
* ``GET /metrics``: Prometheus text format (with a token set: only with the token, ``Authorization: Bearer T``).
* ``GET /``: the live-caption page (static HTML + JS, no build step).

Shutting down (SIGTERM or Ctrl-C: ``drain()``): ``/health`` answers 503 ``{"status": "draining"}`` at once (a load
balancer stops sending clients), new clients are closed with 1013, and every open stream gets an error message and
a close with 1001 ("going away") and the reason, instead of a dropped connection; then the server exits.

Who may connect (``guard.py``): the Host and Origin of every request are checked (a foreign web page cannot drive
a loopback server), then the token; failed tokens are logged and rate-limited per address.

Limits: a refused client (``--max-streams`` reached) is closed with 1013 and the reason; a bad token with 1008; a
frame over ``max_frame_bytes``, a binary frame, invalid JSON (too deep, a number too long), an unknown type or
field, a word over the character or token bound get an error message and the stream goes on; a frame over 4x
``max_frame_bytes`` is closed by the server (1009, "message too big") before it is read; a client silent for
``idle_timeout`` seconds before its ``end`` is closed (1000, "idle timeout"); a client that vanishes has its
streams and its waiting words freed at once. An unexpected failure is logged with its traceback and the client is
closed with 1011 and a reason.

Intake (back-pressure): the words a client sent wait in its intake until its sentences read them; while more than
``max_backlog`` of its words wait (or more than ``max_backlog_total`` of all clients', and some of its own), its
socket is not read, so TCP slows the client down and the server's memory stays bounded (a client's backlog is at
most ``max_backlog`` words plus one frame). A client's talk is one row of the engine and takes at most
``max_words`` of its words ahead of its current sentence, so a client that floods delays the others by a bounded
amount (``benchmarks/serve_attack.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field, fields
from pathlib import Path

from simulmt.core.layouts import LAYOUTS
from simulmt.core.policies import POLICIES
from simulmt.core.prompt_format import language_name
from simulmt.core.stream_options import DEFAULTS, StreamOptions as checked_options
from simulmt.errors import SimulmtError
from simulmt.text.live_text import LiveText
from simulmt.service.audio import AudioIntake
from simulmt.service.guard import Access, FailedTokens, Guard, given_token, same_token
from simulmt.service.hub import Backlog, words_in
from simulmt.service.limits import MAX_BACKLOG, MAX_BUFFER_CHARS

log = logging.getLogger("simulmt.serve")
STATIC = Path(__file__).with_name("static")
BACKLOG_POLL = 0.02  # seconds between looks at a paused client's backlog
SLICE_CHARS = 4096  # text handed to the hub at a time: a frame's words enter the hub's intake in slices
MESSAGE_FIELDS = {"text": {"type", "text"}, "boundary": {"type"}, "end": {"type"}}
SHUTDOWN_REASON = "server shutting down: reconnect to continue"


@dataclass(frozen=True)
class StreamOptions:
    """The options of one stream, from the WebSocket's query string (names and defaults of ``simulmt translate``)."""

    layout: str = "expost"
    policy: str = "wait-k"
    k: int = DEFAULTS["k"]
    n: int = DEFAULTS["n"]
    tau: float = DEFAULTS["tau"]
    slot: int = DEFAULTS["slot"]
    phi: int = DEFAULTS["phi"]
    source_lang: str = "en"
    target_lang: str = "de"
    audio_rate: int = 16000  # the sample rate of the client's binary audio frames (resampled to 16 kHz)

    @classmethod
    def from_query(cls, query: dict[str, str], translator) -> "StreamOptions":
        known = {f.name: f.type for f in fields(cls)}
        unknown = sorted(set(query) - set(known) - {"token"})
        if unknown:
            raise SimulmtError(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(known)}")
        values = {}
        for name, value in query.items():
            if name == "token":
                continue
            if known[name] in ("int", int):
                try:
                    values[name] = int(value)
                except ValueError:
                    raise SimulmtError(f"option {name} must be an integer, got {value[:40]!r}") from None
            elif known[name] in ("float", float):
                try:
                    values[name] = float(value)
                except ValueError:
                    raise SimulmtError(f"option {name} must be a number, got {value[:40]!r}") from None
            else:
                values[name] = value
        options = cls(**values)
        if options.layout not in LAYOUTS:
            raise SimulmtError(f"unknown layout {options.layout!r}; choose one of: {', '.join(LAYOUTS)}")
        if options.policy not in POLICIES:
            raise SimulmtError(f"unknown policy {options.policy!r}; choose one of: {', '.join(POLICIES)}")
        # the layout and policy take the options given (an option they do not take is an error naming theirs)
        checked_options(options.layout, options.policy,
                        **{name: values[name] for name in ("k", "n", "tau", "slot", "phi") if name in values})
        if not 8000 <= options.audio_rate <= 192000:
            raise SimulmtError(f"option audio_rate must be within 8000..192000 Hz, got {options.audio_rate}")
        for side, served in (("source_lang", translator.source_lang), ("target_lang", translator.target_lang)):
            if language_name(getattr(options, side)) != language_name(served):
                raise SimulmtError(f"this server translates {language_name(translator.source_lang)} into "
                                   f"{language_name(translator.target_lang)}; {side}={getattr(options, side)!r} "
                                   f"is not served")
        return options

    def session_kwargs(self) -> dict:
        return dict(layout=self.layout, policy=self.policy, k=self.k, n=self.n, tau=self.tau, slot=self.slot,
                    phi=self.phi)


def parse_message(text: str, max_bytes: int) -> dict:
    """A client frame -> a checked message; a ``SimulmtError`` says what is wrong with it."""
    if len(text.encode("utf-8", errors="replace")) > max_bytes:
        raise SimulmtError(f"frame over {max_bytes} bytes; send text in smaller pieces")
    try:
        message = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SimulmtError(f"invalid JSON: {exc.msg} at character {exc.pos}") from None
    except RecursionError:
        raise SimulmtError("invalid JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise SimulmtError(f"invalid JSON: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str) \
            or message["type"] not in MESSAGE_FIELDS:
        raise SimulmtError('a message is a JSON object with "type": "text", "boundary" or "end"')
    extra = sorted(set(message) - MESSAGE_FIELDS[message["type"]])
    if extra:
        raise SimulmtError(f"unknown field(s) {', '.join(extra)} in a {message['type']!r} message")
    if message["type"] == "text" and not isinstance(message.get("text"), str):
        raise SimulmtError('a "text" message needs "text": a string')
    return message


@dataclass
class Intake:
    """One client's text on the web side: messages read from its socket and not yet handed to the hub (``inbox``,
    ``chars`` of text in all), split into words here by ``live`` a slice at a time, counted in ``backlog``."""

    live: LiveText
    inbox: deque = field(default_factory=deque)  # [kind, text, offset]: a message, and how far it was handed on
    chars: int = 0
    backlog: Backlog = field(default_factory=Backlog)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def put(self, kind: str, text: str) -> None:
        self.inbox.append([kind, text, 0])
        self.chars += len(text)
        self.arrived.set()

    def next_piece(self) -> tuple[list, str]:
        """The actions of the next slice of text (at most ``SLICE_CHARS``), or of a whole boundary / end message."""
        message = self.inbox[0]
        kind, text, offset = message
        if kind != "text":
            self.inbox.popleft()
            return (self.live.boundary() if kind == "boundary" else self.live.end()), kind
        piece = text[offset:offset + SLICE_CHARS]
        message[2] += len(piece)
        if message[2] >= len(text):
            self.inbox.popleft()
        self.chars -= len(piece)
        return self.live.feed(piece), kind


def create_app(hub, *, token: str | None = None, max_frame_bytes: int = 65536, idle_timeout: float = 300.0,
               access: Access | None = None, max_backlog: int = MAX_BACKLOG, max_buffer_chars: int = MAX_BUFFER_CHARS,
               failed_tokens: FailedTokens | None = None, asr=None, asr_workers: int = 2):
    """The ASGI app around ``hub``. ``access``: the Host / Origin rule (default: a loopback server's). Intake bounds:
    ``max_backlog`` words of a client in the hub, ``max_buffer_chars`` characters of its text read ahead of them;
    the server's bounds are these times the hub's ``max_streams``. ``asr``: a loaded recogniser model
    (``simulmt.speech.recognizer.Whisper``) for clients that send audio, run in ``asr_workers`` threads (None:
    audio is refused with a message)."""
    from starlette.applications import Starlette
    from starlette.responses import FileResponse, JSONResponse, PlainTextResponse
    from starlette.routing import Route, WebSocketRoute
    from starlette.websockets import WebSocket, WebSocketDisconnect

    access = access or Access.for_server("127.0.0.1")
    failed_tokens = failed_tokens or FailedTokens()
    asr_pool = ThreadPoolExecutor(asr_workers, thread_name_prefix="simulmt-asr") if asr is not None else None
    draining = asyncio.Event()  # set by drain(): every stream closes with a reason, new ones are refused
    open_streams: set[int] = set()
    intakes: dict[int, Intake] = {}  # client id -> what it sent and what is not taken yet

    def authorised(headers, query) -> bool:
        return token is None or same_token(given_token(dict(headers), dict(query)), token)

    def hub_full(intake: Intake) -> bool:
        """Hand no more of this client's words to the hub: its backlog there is full (or the server's, and it has
        words waiting)."""
        waiting = intake.backlog.waiting
        return waiting >= max_backlog or (
            waiting > 0 and sum(i.backlog.waiting for i in intakes.values()) >= max_backlog * hub.max_streams)

    def buffer_full(intake: Intake) -> bool:
        """Read no more of this client's socket (back-pressure): its read-ahead text is full (or the server's)."""
        return intake.chars >= max_buffer_chars or (
            intake.chars > 0 and sum(i.chars for i in intakes.values()) >= max_buffer_chars * hub.max_streams)

    async def stream(ws: WebSocket) -> None:
        query = dict(ws.query_params)
        await ws.accept()
        if token is not None:
            peer = ws.client.host if ws.client else "?"
            wait = failed_tokens.wait(peer)
            if wait:
                await ws.close(code=1008, reason=f"too many wrong tokens from this address; retry in {wait:.0f} s")
                return
            if not authorised(ws.headers, query):
                failed_tokens.failed(peer)
                await ws.close(code=1008, reason="a valid token is required (query token=... or a Bearer header)")
                return
        try:
            options = StreamOptions.from_query(query, hub.translator)
            await asyncio.wrap_future(hub.call(lambda: hub.translator.check_stream(**options.session_kwargs())))
        except SimulmtError as exc:
            await ws.send_json({"type": "error", "message": str(exc)})
            await ws.close(code=1008, reason="invalid options")
            return
        except Exception:
            log.exception("checking a stream's options failed")
            await ws.close(code=1011, reason="internal error (logged by the server)")
            return
        if draining.is_set():
            await ws.close(code=1013, reason=SHUTDOWN_REASON)
            return
        client_id = hub.admit()
        if client_id is None:
            await ws.close(code=1013, reason=f"server busy: {hub.max_streams} streams (--max-streams) are open")
            return
        open_streams.add(client_id)
        intake = intakes[client_id] = Intake(hub.live_text())
        loop = asyncio.get_running_loop()
        outbox: asyncio.Queue = asyncio.Queue()
        hub.send("open", client_id, (options.session_kwargs(),
                                     lambda m: loop.call_soon_threadsafe(outbox.put_nowait, m), intake.backlog))

        async def forward() -> None:
            with suppress(WebSocketDisconnect, OSError):  # the client is gone: nothing to tell it
                while True:
                    message = await outbox.get()
                    if message["type"] == "end":
                        await ws.close(code=1000)
                        return
                    await ws.send_json(message)

        async def feed() -> None:
            """The client's messages to the hub, in order, as fast as its sentences take its words."""
            while True:
                while not intake.inbox:
                    intake.arrived.clear()
                    await intake.arrived.wait()
                while hub_full(intake):
                    await asyncio.sleep(BACKLOG_POLL)
                actions, kind = intake.next_piece()
                intake.backlog.sent += words_in(actions)
                hub.send("words", client_id, actions)
                if kind == "end":
                    hub.send("end", client_id)
                    return

        audio: AudioIntake | None = None
        audio_task: asyncio.Task | None = None

        def start_audio() -> AudioIntake:
            nonlocal audio_task
            if asr is None:
                raise SimulmtError("this server takes no audio (started without a recogniser: --asr-model)")

            def heard(words) -> None:  # on the event loop: back to the client, and into its text intake
                for word in words:
                    outbox.put_nowait({"type": "heard", "text": word.text, "audio_ms": round(word.confirmed_ms)})
                intake.put("text", "".join(w.text + " " for w in words))

            started = AudioIntake(asr, options.audio_rate, asr_pool, heard, lambda: intake.put("end", ""),
                                  on_pause=lambda: intake.put("boundary", ""))
            audio_task = asyncio.create_task(started.run())
            return started

        sender = asyncio.create_task(forward())
        feeder = asyncio.create_task(feed())
        stopping = asyncio.create_task(draining.wait())
        try:
            while not sender.done():
                while (buffer_full(intake) or (audio is not None and audio.full)) and not (
                        sender.done() or stopping.done()):  # back-pressure: the socket is not read
                    await asyncio.sleep(BACKLOG_POLL)
                receive = asyncio.create_task(ws.receive())
                helpers = {feeder} | ({audio_task} if audio_task else set())
                done, _ = await asyncio.wait({receive, sender, stopping, *helpers}, timeout=idle_timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
                failed = [h for h in helpers if h in done and h.exception() is not None]
                if failed:
                    receive.cancel()
                    raise failed[0].exception()
                if sender in done:
                    receive.cancel()
                    break
                if stopping in done:
                    receive.cancel()
                    sender.cancel()
                    await ws.send_json({"type": "error", "message": SHUTDOWN_REASON})
                    await ws.close(code=1001, reason=SHUTDOWN_REASON)
                    break
                if not done:
                    receive.cancel()
                    await ws.send_json({"type": "error", "message": f"idle for {idle_timeout:g} s; closing"})
                    await ws.close(code=1000, reason="idle timeout")
                    break
                frame = receive.result()
                if frame["type"] == "websocket.disconnect":
                    break
                try:
                    if frame.get("bytes") is not None:  # audio: 16-bit mono PCM
                        if len(frame["bytes"]) > max_frame_bytes:
                            raise SimulmtError(f"frame over {max_frame_bytes} bytes; send audio in smaller pieces")
                        if audio is None:
                            audio = start_audio()
                        audio.put(frame["bytes"])
                        continue
                    message = parse_message(frame["text"], max_frame_bytes)
                except SimulmtError as exc:
                    await ws.send_json({"type": "error", "message": str(exc)})
                    continue
                if message["type"] == "end" and audio is not None:
                    audio.end()  # the recogniser's last words first; it ends the input then
                else:
                    intake.put(message["type"], message.get("text", ""))
                if message["type"] == "end":  # nothing more to read: wait for the last words, then close
                    helpers = {feeder} | ({audio_task} if audio_task else set())
                    while not (sender.done() or stopping.done()):
                        await asyncio.wait({sender, stopping, *(h for h in helpers if not h.done())},
                                           return_when=asyncio.FIRST_COMPLETED)
                        failed = [h for h in helpers if h.done() and h.exception() is not None]
                        if failed:
                            raise failed[0].exception()
                    if stopping.done() and not sender.done():
                        sender.cancel()
                        await ws.send_json({"type": "error", "message": SHUTDOWN_REASON})
                        await ws.close(code=1001, reason=SHUTDOWN_REASON)
                    break
        except (WebSocketDisconnect, OSError):
            pass  # the client went away (or its connection broke): its streams are freed below
        except Exception:
            log.exception("stream %d failed", client_id)
            with suppress(Exception):
                await ws.close(code=1011, reason="internal error (logged by the server)")
        finally:
            sender.cancel()
            feeder.cancel()
            stopping.cancel()
            if audio_task is not None:
                audio_task.cancel()
            hub.release(client_id)
            open_streams.discard(client_id)
            intakes.pop(client_id, None)

    async def health(request) -> JSONResponse:
        answer = {"status": "draining" if draining.is_set() else "ok"}
        if authorised(request.headers, {}):  # with a token set, the rest only with it
            answer |= {"model": hub.translator.name, "dtype": hub.translator.dtype, "streams": hub.metrics.clients,
                       "max_streams": hub.max_streams}
        return JSONResponse(answer, status_code=503 if draining.is_set() else 200)

    async def drain(timeout: float = 5.0) -> None:
        """Close every stream with 1001 and the reason, refuse new ones; return when all are closed (or after
        ``timeout`` seconds)."""
        draining.set()
        deadline = asyncio.get_running_loop().time() + timeout
        while open_streams and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)

    async def metrics(request) -> PlainTextResponse:
        if not authorised(request.headers, {}):
            failed_tokens.failed(request.client.host if request.client else "?")
            return PlainTextResponse("/metrics needs the token: Authorization: Bearer T\n", status_code=401,
                                     headers={"www-authenticate": "Bearer"})
        m = hub.metrics
        lines = []
        for name, kind, value, text in (
            ("simulmt_active_streams", "gauge", m.clients, "clients connected"),
            ("simulmt_streams_total", "counter", m.clients_total, "clients served"),
            ("simulmt_refused_total", "counter", m.refused_total, "clients refused (--max-streams)"),
            ("simulmt_source_words_total", "counter", m.words_in_total, "source words received"),
            ("simulmt_target_words_total", "counter", m.words_out_total, "target words sent"),
            ("simulmt_sentences_total", "counter", m.sentences_total, "sentences completed"),
            ("simulmt_forwards_total", "counter", m.forwards_total, "batched forwards"),
            ("simulmt_forward_rows_total", "counter", m.rows_total, "streams served, summed over forwards"),
            ("simulmt_forward_seconds_total", "counter", m.forward_seconds_total, "time in engine rounds"),
            ("simulmt_queue_seconds_total", "counter", m.queue_seconds_total, "time commands waited"),
            ("simulmt_commands_total", "counter", m.commands_total, "commands applied"),
            ("simulmt_backlog_words", "gauge", sum(i.backlog.waiting for i in intakes.values()),
             "clients' words handed to the model's thread, not yet taken by their sentences"),
            ("simulmt_buffered_chars", "gauge", sum(i.chars for i in intakes.values()),
             "clients' text read from their sockets, not yet handed on"),
        ):
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", f"{name} {value}"]
        return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

    async def page(request) -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    app = Starlette(routes=[WebSocketRoute("/v1/stream", stream), Route("/health", health),
                            Route("/metrics", metrics), Route("/", page)])
    app.state.drain = drain
    app.state.intakes = intakes  # each client's text not yet taken (for /metrics, and tests that watch the bounds)
    guarded = Guard(app, access, (STATIC / "index.html").read_text(encoding="utf-8"))
    guarded.state = app.state  # the server's drain on SIGTERM finds it here
    return guarded
