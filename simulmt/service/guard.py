"""Who may use the service: the Host and Origin of every request, the token, and failed tokens rate-limited.

A browser sends the ``Origin`` of the page that opens a WebSocket or fetches a URL, and the ``Host`` it connects to;
a page on another site can open a WebSocket to a loopback server (cross-site WebSocket hijacking) or reach it under
a name of its own that resolves to 127.0.0.1 (DNS rebinding). So, before any route runs:

* **Host**: a loopback server answers only under loopback names (``localhost``, ``127.0.0.1``, ``[::1]``) and the
  names given with ``--allow-host`` (``*``: any); a server bound elsewhere answers any Host unless ``--allow-host``
  names some (it needs a token anyway).
* **Origin**: absent (not a browser: curl, Python clients) is accepted; otherwise it must be the request's own
  origin (``http(s)://`` + its Host, the page the server itself serves) or one given with ``--allow-origin``.
  ``Origin: null`` (sandboxed frames, files) is refused.

A refused request gets 403 with the reason (an HTTP request) or a refused handshake (HTTP 403, a WebSocket).
Every HTTP answer carries security headers: a content security policy that lets the page run only its own script
(by hash) and connect only to its own origin, no framing, no sniffing, no referrer.

The token (``--token-file``, ``$SIMULMT_TOKEN`` or ``--token``): at least ``MIN_TOKEN_LENGTH`` characters, no
white space. Clients give it as ``Authorization: Bearer T`` (the scheme in any case) or the query ``token=T``;
a bare ``Authorization: T`` is not a token. Each failure is logged with the peer's address, and an address with
``MAX_FAILURES`` failures in ``FAILURE_WINDOW`` seconds is refused without a comparison until the window has moved
on (a wrong guess costs the guesser time; the lock-out holds for that address only).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import logging
import os
import re
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from simulmt.errors import SimulmtError

log = logging.getLogger("simulmt.serve")

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
MIN_TOKEN_LENGTH = 16
MAX_FAILURES = 10
FAILURE_WINDOW = 60.0
TOKEN_ENV = "SIMULMT_TOKEN"


# ---- Host and Origin -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Access:
    hosts: frozenset[str] | None  # host names served (lower case, no port); None: any
    origins: frozenset[str]  # origins allowed besides the request's own, as scheme://host[:port]

    @classmethod
    def for_server(cls, bind_host: str, allow_host: str = "", allow_origin: str = "") -> "Access":
        extra_hosts = {h.strip().lower().strip("[]") for h in allow_host.split(",") if h.strip()}
        origins = frozenset(_origin(o) for o in allow_origin.split(",") if o.strip())
        if "*" in extra_hosts:
            return cls(None, origins)
        if is_loopback(bind_host):
            return cls(LOOPBACK_NAMES | extra_hosts | {bind_host.lower().strip("[]")}, origins)
        return cls((extra_hosts | {bind_host.lower().strip("[]")}) if extra_hosts else None, origins)

    def refusal(self, headers: dict[str, str]) -> str | None:
        """Why a request with these headers (names in lower case) is refused, or None."""
        host = headers.get("host", "").strip().lower()
        if self.hosts is not None and host and _hostname(host) not in self.hosts:  # (none: not a browser)
            return (f"Host {host or '(none)'!r} is not served here (a loopback server answers loopback names; "
                    f"add names with --allow-host)")
        origin = headers.get("origin")
        if origin is None:
            return None
        parts = urlsplit(origin.strip().lower())
        if parts.scheme in ("http", "https") and parts.netloc == host and host:
            return None
        if origin.strip().lower().rstrip("/") in self.origins:
            return None
        return f"Origin {origin!r} is not allowed (the server's own pages are; add others with --allow-origin)"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _origin(text: str) -> str:
    parts = urlsplit(text.strip().lower())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
        raise SimulmtError(f"--allow-origin takes origins such as https://captions.example.org, got {text.strip()!r}")
    return f"{parts.scheme}://{parts.netloc}"


def _hostname(host: str) -> str:
    if host.startswith("["):  # [::1]:8000
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


# ---- the token -----------------------------------------------------------------------------------------------------
def read_token(token: str | None, token_file: str | None) -> str | None:
    """The server's token: ``--token-file``, else ``--token``, else ``$SIMULMT_TOKEN``; checked."""
    if token_file is not None:
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise SimulmtError(f"--token-file {token_file}: cannot read it ({exc})") from None
    elif token is None:
        token = os.environ.get(TOKEN_ENV) or None
    if token is not None:
        if len(token) < MIN_TOKEN_LENGTH or re.search(r"\s", token) or not token.isprintable():
            raise SimulmtError(f"the token must be at least {MIN_TOKEN_LENGTH} printable characters without "
                               f"white space (e.g. python -c 'import secrets; print(secrets.token_urlsafe(24))')")
    return token


def given_token(headers: dict[str, str], query: dict[str, str]) -> str | None:
    """The token a client gave: the query's ``token``, or ``Authorization: Bearer T`` (the scheme in any case)."""
    if "token" in query:
        return query["token"]
    scheme, _, value = headers.get("authorization", "").strip().partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def same_token(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"), token.encode())


class FailedTokens:
    """Failed tokens per peer address: at most ``MAX_FAILURES`` in ``FAILURE_WINDOW`` seconds (then refused)."""

    def __init__(self, max_failures: int = MAX_FAILURES, window: float = FAILURE_WINDOW, clock=time.monotonic):
        self.max_failures, self.window, self.clock = max_failures, window, clock
        self.failures: dict[str, deque[float]] = {}

    def wait(self, address: str) -> float:
        """Seconds until ``address`` may try again (0: now)."""
        recent = self._recent(address)
        if len(recent) < self.max_failures:
            return 0.0
        return max(0.0, recent[0] + self.window - self.clock())

    def failed(self, address: str) -> None:
        recent = self._recent(address)
        recent.append(self.clock())
        log.warning("refused a wrong or missing token from %s (%d in the last %g s)", address, len(recent),
                    self.window)

    def _recent(self, address: str) -> deque[float]:
        if len(self.failures) > 10_000:  # bounded: forget addresses with nothing recent
            self.failures = {a: d for a, d in self.failures.items() if d and d[-1] > self.clock() - self.window}
        recent = self.failures.setdefault(address, deque())
        while recent and recent[0] <= self.clock() - self.window:
            recent.popleft()
        return recent


# ---- the middleware ------------------------------------------------------------------------------------------------
def content_security_policy(page: str) -> str:
    """The page may run its own inline scripts (by hash) and styles, connect to its own origin, nothing else."""
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'"
                      for s in re.findall(r"<script>(.*?)</script>", page, flags=re.S))
    return (f"default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; connect-src 'self'; "
            f"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


class Guard:
    """ASGI middleware: refuse a request whose Host or Origin is not allowed; add security headers to HTTP answers."""

    def __init__(self, app, access: Access, page: str):
        self.app, self.access = app, access
        self.headers = [(b"content-security-policy", content_security_policy(page).encode()),
                        (b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
                        (b"referrer-policy", b"no-referrer"), (b"cache-control", b"no-store")]

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        reason = self.access.refusal(headers)
        if reason is not None:
            peer = (scope.get("client") or ("?",))[0]
            log.warning("refused %s %s from %s: %s", scope["type"], scope.get("path"), peer, reason)
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008, "reason": reason[:120]})
                return
            body = (reason + "\n").encode()
            await send({"type": "http.response.start", "status": 403,
                        "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                    (b"content-length", str(len(body)).encode()), *self.headers]})
            await send({"type": "http.response.body", "body": body})
            return
        if scope["type"] == "websocket":
            return await self.app(scope, receive, send)

        async def with_headers(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *self.headers]}
            await send(message)

        return await self.app(scope, receive, with_headers)
