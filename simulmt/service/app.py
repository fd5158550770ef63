"""``simulmt serve``: the live translation service, a Starlette (ASGI) app served by uvicorn.

Why Starlette + uvicorn: both are small, well kept and standard; Starlette gives WebSockets, routes and static files
without a framework around them, and uvicorn is the reference ASGI server. The model never runs on the event loop:
the hub (``hub.py``) owns it in a thread of its own and serves every client's stream in one forward per round.

Routes:

* ``WS /v1/stream?layout=expost&policy=wait-k&k=3``: one live stream (a talk). Query options have the names and
  defaults of ``simulmt translate`` (``layout``, ``policy``, ``k``, ``n``, ``slot``, ``phi``, ``source_lang``,
  ``target_lang``; the languages must be the server's) plus ``token``.
  client -> server: ``{"type": "text", "text": "..."}`` (any piece of text: a trailing partial word waits for
  the next space), ``{"type": "boundary"}`` (the sentence is over), ``{"type": "end"}`` (the input is over).
  server -> client: ``{"type": "word", "text", "delay" (source words read, over the whole stream), "elapsed_ms"
  (since the stream opened), "sentence"}`` for every target word as it is written; ``{"type": "sentence",
  "index", "source", "translation", "delays"}`` when a sentence is complete; ``{"type": "error", "message"}`` for
  bad input (the stream goes on). After ``end``: the remaining words and sentences, then a normal close (1000).
* ``GET /health``: ``{"status": "ok", "model", "dtype", "streams", "max_streams"}``.
* ``GET /metrics``: Prometheus text format.
* ``GET /``: the live-caption page (static HTML + JS, no build step).

Shutting down (SIGTERM or Ctrl-C: ``drain()``): ``/health`` answers 503 ``{"status": "draining"}`` at once (a load
balancer stops sending clients), new clients are closed with 1013, and every open stream gets an error message and
a close with 1001 ("going away") and the reason, instead of a dropped connection; then the server exits.

Limits: a refused client (``--max-streams`` reached) is closed with 1013 and the reason; a bad token with 1008; a
frame over ``max_frame_bytes``, invalid JSON, an unknown type or field get an error message; a client silent for
``idle_timeout`` seconds before its ``end`` is closed (1000, "idle timeout"); a client that vanishes has its
streams freed at once.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from dataclasses import dataclass, fields
from pathlib import Path

from simulmt.core.layouts import LAYOUTS
from simulmt.core.policies import POLICIES
from simulmt.core.prompt_format import language_name
from simulmt.errors import SimulmtError

STATIC = Path(__file__).with_name("static")
MESSAGE_FIELDS = {"text": {"type", "text"}, "boundary": {"type"}, "end": {"type"}}
SHUTDOWN_REASON = "server shutting down: reconnect to continue"


@dataclass(frozen=True)
class StreamOptions:
    """The options of one stream, from the WebSocket's query string (names and defaults of ``simulmt translate``)."""

    layout: str = "expost"
    policy: str = "wait-k"
    k: int = 3
    n: int = 3
    slot: int = 16
    phi: int = 256
    source_lang: str = "en"
    target_lang: str = "de"

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
                    raise SimulmtError(f"option {name} must be an integer, got {value!r}") from None
            else:
                values[name] = value
        options = cls(**values)
        if options.layout not in LAYOUTS:
            raise SimulmtError(f"unknown layout {options.layout!r}; choose one of: {', '.join(LAYOUTS)}")
        if options.policy not in POLICIES:
            raise SimulmtError(f"unknown policy {options.policy!r}; choose one of: {', '.join(POLICIES)}")
        for name in ("k", "n", "slot", "phi"):
            if getattr(options, name) < 1:
                raise SimulmtError(f"option {name} must be at least 1, got {getattr(options, name)}")
        for side, served in (("source_lang", translator.source_lang), ("target_lang", translator.target_lang)):
            if language_name(getattr(options, side)) != language_name(served):
                raise SimulmtError(f"this server translates {language_name(translator.source_lang)} into "
                                   f"{language_name(translator.target_lang)}; {side}={getattr(options, side)!r} "
                                   f"is not served")
        return options

    def session_kwargs(self) -> dict:
        return dict(layout=self.layout, policy=self.policy, k=self.k, n=self.n, slot=self.slot, phi=self.phi)


def parse_message(text: str, max_bytes: int) -> dict:
    """A client frame -> a checked message; a ``SimulmtError`` says what is wrong with it."""
    if len(text.encode("utf-8", errors="replace")) > max_bytes:
        raise SimulmtError(f"frame over {max_bytes} bytes; send text in smaller pieces")
    try:
        message = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SimulmtError(f"invalid JSON: {exc.msg} at character {exc.pos}") from None
    if not isinstance(message, dict) or message.get("type") not in MESSAGE_FIELDS:
        raise SimulmtError('a message is a JSON object with "type": "text", "boundary" or "end"')
    extra = sorted(set(message) - MESSAGE_FIELDS[message["type"]])
    if extra:
        raise SimulmtError(f"unknown field(s) {', '.join(extra)} in a {message['type']!r} message")
    if message["type"] == "text" and not isinstance(message.get("text"), str):
        raise SimulmtError('a "text" message needs "text": a string')
    return message


def create_app(hub, *, token: str | None = None, max_frame_bytes: int = 65536, idle_timeout: float = 300.0):
    from starlette.applications import Starlette
    from starlette.responses import FileResponse, JSONResponse, PlainTextResponse
    from starlette.routing import Route, WebSocketRoute
    from starlette.websockets import WebSocket, WebSocketDisconnect

    draining = asyncio.Event()  # set by drain(): every stream closes with a reason, new ones are refused
    open_streams: set[int] = set()

    def authorised(scope_headers: dict, query: dict) -> bool:
        if token is None:
            return True
        given = query.get("token") or scope_headers.get("authorization", "").removeprefix("Bearer ").strip()
        return hmac.compare_digest(given.encode(), token.encode())

    async def stream(ws: WebSocket) -> None:
        query = dict(ws.query_params)
        await ws.accept()
        if not authorised(dict(ws.headers), query):
            await ws.close(code=1008, reason="a valid token is required (query token=... or a Bearer header)")
            return
        try:
            options = StreamOptions.from_query(query, hub.translator)
        except SimulmtError as exc:
            await ws.send_json({"type": "error", "message": str(exc)})
            await ws.close(code=1008, reason="invalid options")
            return
        if draining.is_set():
            await ws.close(code=1013, reason=SHUTDOWN_REASON)
            return
        client_id = hub.admit()
        if client_id is None:
            await ws.close(code=1013, reason=f"server busy: {hub.max_streams} streams (--max-streams) are open")
            return
        open_streams.add(client_id)
        loop = asyncio.get_running_loop()
        outbox: asyncio.Queue = asyncio.Queue()
        hub.send("open", client_id, (options.session_kwargs(), lambda m: loop.call_soon_threadsafe(outbox.put_nowait, m)))

        async def forward() -> None:
            while True:
                message = await outbox.get()
                if message["type"] == "end":
                    await ws.close(code=1000)
                    return
                await ws.send_json(message)

        sender = asyncio.create_task(forward())
        stopping = asyncio.create_task(draining.wait())
        try:
            while not sender.done():
                receive = asyncio.create_task(ws.receive_text())
                done, _ = await asyncio.wait({receive, sender, stopping}, timeout=idle_timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
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
                try:
                    message = parse_message(receive.result(), max_frame_bytes)
                except SimulmtError as exc:
                    await ws.send_json({"type": "error", "message": str(exc)})
                    continue
                hub.send(message["type"], client_id, message.get("text"))
                if message["type"] == "end":  # nothing more to read: wait for the last words, then close
                    await sender
                    break
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            sender.cancel()
            stopping.cancel()
            hub.release(client_id)
            open_streams.discard(client_id)

    async def health(request) -> JSONResponse:
        return JSONResponse({"status": "draining" if draining.is_set() else "ok", "model": hub.translator.name,
                             "dtype": hub.translator.dtype,
                             "streams": hub.metrics.clients, "max_streams": hub.max_streams},
                            status_code=503 if draining.is_set() else 200)

    async def drain(timeout: float = 5.0) -> None:
        """Close every stream with 1001 and the reason, refuse new ones; return when all are closed (or after
        ``timeout`` seconds)."""
        draining.set()
        deadline = asyncio.get_running_loop().time() + timeout
        while open_streams and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)

    async def metrics(request) -> PlainTextResponse:
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
        ):
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", f"{name} {value}"]
        return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

    async def page(request) -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    app = Starlette(routes=[WebSocketRoute("/v1/stream", stream), Route("/health", health),
                            Route("/metrics", metrics), Route("/", page)])
    app.state.drain = drain
    return app
