"""The service's bounds on what one client may send, in one place (``simulmt serve`` options of the same names).

* ``MAX_BACKLOG``: words of a client handed to the hub and waiting for its sentences to read them; past it the
  client's text waits on the web side, unsplit.
* ``MAX_BUFFER_CHARS``: characters of a client's text read from its socket and not yet handed to the hub; past it
  its socket is not read (back-pressure), so a client that floods is slowed down by TCP instead of growing the
  server's memory. A whole talk sent at once (a 10,000-word talk is ~60,000 characters) fits; while a client's
  socket is not read its WebSocket pings are not answered either, so only a client far ahead of the model waits.
* The server's bounds are these times ``--max-streams``.
* ``MAX_WORD_CHARS`` / ``MAX_WORD_TOKENS``: the longest source word; a longer one is dropped with an error (a word
  without spaces would otherwise grow without bound, and cost every stream the time to tokenize it).
"""

from simulmt.text.live_text import DEFAULT_MAX_WORD_CHARS

MAX_BACKLOG = 256
MAX_BUFFER_CHARS = 1_000_000
MAX_WORD_CHARS = DEFAULT_MAX_WORD_CHARS
MAX_WORD_TOKENS = 64
