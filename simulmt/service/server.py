"""``simulmt serve``: options, checks and the uvicorn server around the hub and the app."""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from simulmt.core.talk import ContextWindow
from simulmt.errors import SimulmtError
from simulmt.service.limits import MAX_BACKLOG, MAX_BUFFER_CHARS, MAX_WORD_CHARS, MAX_WORD_TOKENS
from simulmt.service.guard import MIN_TOKEN_LENGTH, TOKEN_ENV, Access, is_loopback, read_token
from simulmt.option_fields import asr_beam_field, asr_pause_ms_field, asr_policy_field
from simulmt.option_fields import (adapter_field, context_pairs_field, context_tokens_field, device_field,
                                    dtype_field, head_vocabulary_field, language_field, model_field)
from simulmt.core.prompt_format import language_name

HELP = "serve live translation: a WebSocket per stream, many streams on one model, a live-caption page"
DESCRIPTION = ("Serve simultaneous translation over WebSockets (/v1/stream), with /health, /metrics and a "
               "live-caption page at /. Every client's stream is advanced by one engine on one model.")


@dataclass(frozen=True)
class ServeOptions:
    host: str = field(default="127.0.0.1", metadata={
        "help": "address to bind; anything but loopback needs a token (--token-file or $SIMULMT_TOKEN)"})
    port: int = field(default=8000, metadata={"help": "port (0: any free port)"})
    model: str | None = model_field()
    adapter: str = adapter_field()
    source_lang: str = language_field("en", "source")
    target_lang: str = language_field("de", "target")
    max_streams: int = field(default=16, metadata={"help": "concurrent streams; the next client is refused"})
    token_file: str | None = field(default=None, metadata={
        "help": "a file holding the token clients must give (query token=... or 'Authorization: Bearer ...'); "
                f"or set ${TOKEN_ENV}; at least {MIN_TOKEN_LENGTH} characters", "metavar": "FILE"})
    token: str | None = field(default=None, metadata={
        "help": "the token itself (visible to other users in ps: prefer --token-file or $" + TOKEN_ENV + ")",
        "metavar": "T"})
    allow_origin: str = field(default="", metadata={
        "help": "web origins allowed besides the server's own pages, comma-separated "
                "(e.g. https://captions.example.org)", "metavar": "ORIGINS"})
    allow_host: str = field(default="", metadata={
        "help": "Host names served besides loopback names (a loopback server refuses others: DNS rebinding), "
                "comma-separated; * for any", "metavar": "NAMES"})
    max_words: int = field(default=64, metadata={"help": "a sentence is cut after this many source words"})
    context_pairs: int = context_pairs_field("a client's talk is one stream")
    context_tokens: int = context_tokens_field()
    idle_timeout: float = field(default=300.0, metadata={"help": "close a client silent for this many seconds"})
    max_frame_bytes: int = field(default=65536, metadata={"help": "largest client frame"})
    max_backlog: int = field(default=MAX_BACKLOG, metadata={
        "help": "words of a client handed to the model's thread and waiting there; more wait unsplit"})
    max_buffer_chars: int = field(default=MAX_BUFFER_CHARS, metadata={
        "help": "characters of a client's text read ahead of its translation; past it its socket is not read "
                "(back-pressure). The server's bounds: these times --max-streams"})
    max_word_chars: int = field(default=MAX_WORD_CHARS, metadata={
        "help": "longest source word in characters; a longer one is dropped with an error"})
    max_word_tokens: int = field(default=MAX_WORD_TOKENS, metadata={
        "help": "longest source word in tokens; a longer one is dropped with an error"})
    asr_model: str = field(default="tiny.en", metadata={
        "help": "the recogniser for clients that send audio (binary frames): a packaged Whisper (tiny.en; base) "
                "or a CTranslate2 folder; none: text only", "metavar": "NAME|DIR|none"})
    asr_workers: int = field(default=2, metadata={"help": "threads that run recognisers (audio clients share them)"})
    asr_pause_ms: int = asr_pause_ms_field('')
    asr_policy: str = asr_policy_field('')
    asr_beam: int = asr_beam_field('')
    device: str | None = device_field()
    dtype: str = dtype_field("auto")
    head_vocabulary: str | None = head_vocabulary_field()
    replicas: int = field(default=1, metadata={
        "help": "serve N model replicas (processes) behind HAProxy on --host:--port, supervised (README, "
                "\"Scaling out\")", "metavar": "N"})
    balancer_dir: str | None = field(default=None, metadata={
        "help": "--replicas: where haproxy.cfg, prometheus.yml and replicas.json are written (default: a new "
                "temporary directory)", "metavar": "DIR"})

    def __post_init__(self):
        if self.context_pairs < 0 or self.context_tokens < 0:
            raise SimulmtError("--context-pairs and --context-tokens must be at least 0")
        for name in ("max_streams", "max_words", "max_frame_bytes", "replicas", "max_backlog",
                     "max_buffer_chars", "max_word_chars", "max_word_tokens", "asr_workers"):
            if getattr(self, name) < 1:
                raise SimulmtError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.asr_pause_ms < 0:
            raise SimulmtError(f"--asr-pause-ms must be at least 0 (0: off), got {self.asr_pause_ms}")
        if self.asr_beam < 1:
            raise SimulmtError(f"--asr-beam must be at least 1, got {self.asr_beam}")
        if not 0 <= self.port <= 65535:
            raise SimulmtError(f"--port must be in 0..65535, got {self.port}")
        if not (math.isfinite(self.idle_timeout) and self.idle_timeout > 0):
            raise SimulmtError(f"--idle-timeout must be a positive number of seconds, got {self.idle_timeout}")
        if self.token is not None and self.token_file is not None:
            raise SimulmtError("give the token once: --token-file or --token, not both")
        token = self.resolved_token()  # read and checked (length, white space) whatever the host
        if not is_loopback(self.host) and not token:
            raise SimulmtError(f"binding {self.host} (not loopback) needs a token (--token-file FILE or "
                               f"${TOKEN_ENV}): anyone who can reach it could use the model")
        self.access()  # --allow-origin / --allow-host are checked here
        language_name(self.source_lang)
        language_name(self.target_lang)

    def resolved_token(self) -> str | None:
        return read_token(self.token, self.token_file)

    def access(self) -> Access:
        return Access.for_server(self.host, self.allow_host, self.allow_origin)


def run(options: ServeOptions, parser, load_translator: Callable) -> int:
    import uvicorn

    from simulmt.service.app import create_app
    from simulmt.service.hub import Hub

    logging.basicConfig(level=logging.WARNING, format="simulmt serve: %(message)s")  # refusals, failures
    try:
        token = options.resolved_token()  # checked at parse time; read again here, the file may have changed
    except SimulmtError as exc:
        print(f"simulmt: error: {exc}", file=sys.stderr)
        return 1
    if options.token is not None:
        print(f"simulmt serve: warning: a token on the command line is visible to other users (ps); prefer "
              f"--token-file FILE or ${TOKEN_ENV}", file=sys.stderr, flush=True)
    if options.replicas > 1:
        from simulmt.service.replicas import run_replicas

        return run_replicas(options)
    try:
        translator = load_translator(model=options.model, adapter=options.adapter, source_lang=options.source_lang,
                                     target_lang=options.target_lang, device=options.device, dtype=options.dtype,
                                     head_vocabulary=options.head_vocabulary)
    except SimulmtError as exc:
        print(f"simulmt: error: {exc}", file=sys.stderr)
        return 1
    asr = None
    if options.asr_model != "none":
        from simulmt.core.prompt_format import language_code
        from simulmt.speech.recognizer import RecognizerOptions, Whisper

        try:
            asr = Whisper(RecognizerOptions(model=options.asr_model, language=language_code(options.source_lang),
                                            pause_ms=options.asr_pause_ms, policy=options.asr_policy,
                                            beam_size=options.asr_beam),
                          device="cuda" if translator.runner.device.type == "cuda" else "cpu")
        except SimulmtError as exc:
            if options.asr_model != "tiny.en":  # asked for: it must work
                print(f"simulmt: error: {exc}", file=sys.stderr)
                return 1
            print(f"simulmt serve: audio is off ({exc}); text is served", file=sys.stderr, flush=True)
    hub = Hub(translator, max_streams=options.max_streams, max_words=options.max_words,
              window=ContextWindow(options.context_pairs, options.context_tokens),
              max_word_chars=options.max_word_chars, max_word_tokens=options.max_word_tokens)
    hub.start()
    app = create_app(hub, token=token, max_frame_bytes=options.max_frame_bytes, idle_timeout=options.idle_timeout,
                     access=options.access(), max_backlog=options.max_backlog,
                     max_buffer_chars=options.max_buffer_chars, asr=asr, asr_workers=options.asr_workers)
    print(f"simulmt serve: {translator.name} on http://{options.host}:{options.port}/ "
          f"(WebSocket /v1/stream, max {options.max_streams} streams)", file=sys.stderr, flush=True)
    server = graceful_server_class()(uvicorn.Config(app, host=options.host, port=options.port, log_level="warning",
                                                    ws_max_size=options.max_frame_bytes * 4))
    try:
        server.run()
    finally:
        hub.stop()
    return 0


def graceful_server_class():
    """uvicorn's ``Server`` whose first SIGTERM / Ctrl-C drains the app (``app.state.drain``: every stream closed
    with 1001 and a reason, /health 503) before the normal shutdown; a second signal exits at once. Stock uvicorn
    would close the WebSockets with a bare 1012."""
    import asyncio

    import uvicorn

    class Server(uvicorn.Server):
        draining: bool | None = None

        async def startup(self, sockets=None) -> None:
            self.loop = asyncio.get_running_loop()
            await super().startup(sockets=sockets)

        def handle_exit(self, sig, frame) -> None:
            drain = getattr(getattr(self.config.app, "state", None), "drain", None)
            if self.draining is not None or drain is None or not hasattr(self, "loop"):
                super().handle_exit(sig, frame)  # a second signal, or nothing to drain: uvicorn's own way
                return

            async def drain_then_exit() -> None:
                try:
                    await drain()
                finally:
                    self.should_exit = True

            self.draining = True  # called in a signal handler: hand the work to the loop (and wake it up)
            self.loop.call_soon_threadsafe(lambda: self.loop.create_task(drain_then_exit()))

    return Server
