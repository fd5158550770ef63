"""Input text: files and standard input read as lines of strict UTF-8, by one rule for every command.

The rule (``simulmt translate``, ``evaluate``, ``bench``, ``finetune`` data and the SimulEval agent's files):

* the bytes are split at ``b"\\n"`` only; a ``"\\r"`` just before it is dropped, so CRLF files read the same. A
  form feed, U+2028, U+0085 or a lone ``"\\r"`` inside a line are characters of the line, not line breaks
  (``str.splitlines`` would split there, and source and reference would drift out of alignment);
* a final line break does not make an empty last line; an empty file has no lines;
* a UTF-8 byte-order mark at the start of the first line is dropped;
* each line is decoded as strict UTF-8 on its own. A line that does not decode becomes a :class:`Line` with
  ``text=None`` and ``error="line 3 is not valid UTF-8 (byte 0xff at column 7: invalid start byte)"`` (the
  column counts bytes from 1, as ``cut -b`` does); the other lines are unaffected.

What a bad line costs is the caller's choice: ``simulmt translate`` reports it (JSON ``error`` or stderr) and
translates the other lines, exit code 1; ``evaluate``, ``bench`` and ``finetune`` stop before the model loads with
the file and the line (:func:`require_text`), because a skipped line would break the alignment of source and
reference.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from simulmt.errors import SimulmtError

BOM = b"\xef\xbb\xbf"
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Line:
    number: int  # 1-based
    text: str | None  # None: the line is not valid UTF-8
    error: str | None = None  # why ``text`` is None
    raw: bytes = b""  # the line's bytes (without "\n", "\r" and the BOM)

    @property
    def shown(self) -> str:
        """The text, or for an undecodable line its bytes with U+FFFD in place of the bad ones (for reports)."""
        return self.text if self.text is not None else self.raw.decode("utf-8", errors="replace")


def decode_line(raw: bytes, number: int) -> Line:
    """One line's bytes (without its ``"\\n"``) -> :class:`Line`; ``number`` is 1-based."""
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    skipped = 0
    if number == 1 and raw.startswith(BOM):
        raw, skipped = raw[len(BOM):], len(BOM)
    try:
        return Line(number, raw.decode("utf-8"), None, raw)
    except UnicodeDecodeError as exc:
        message = (f"line {number} is not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column "
                   f"{exc.start + skipped + 1}: {exc.reason})")
        return Line(number, None, message, raw)


def split_lines(data: bytes) -> list[Line]:
    """The lines of a whole file's bytes."""
    if not data:
        return []
    pieces = data.split(b"\n")
    if data.endswith(b"\n"):
        pieces.pop()
    return [decode_line(piece, number) for number, piece in enumerate(pieces, 1)]


def stream_lines(stream: BinaryIO) -> Iterator[Line]:
    """The lines of a binary stream (``sys.stdin.buffer``), each as soon as it is complete (typed interactively
    too)."""
    for number, raw in enumerate(iter(stream.readline, b""), 1):
        yield decode_line(raw[:-1] if raw.endswith(b"\n") else raw, number)


def read_lines(path: str | Path, what: str = "input") -> list[Line]:
    """The lines of a file; a file that cannot be read is a :class:`SimulmtError` naming it."""
    try:
        return split_lines(Path(path).expanduser().read_bytes())
    except OSError as exc:
        raise SimulmtError(f"cannot read the {what} file {path}: {exc.strerror or exc}") from None


def require_text(lines: Iterable[Line], where: str | Path) -> list[str]:
    """The texts of ``lines``; the first undecodable one is a :class:`SimulmtError` naming ``where`` and the line."""
    texts = []
    for line in lines:
        if line.text is None:
            raise SimulmtError(f"{where}: {line.error}. Re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8) "
                               f"or fix that line")
        texts.append(line.text)
    return texts


def read_text_lines(path: str | Path, what: str = "input") -> list[str]:
    """The lines of a file that must be UTF-8 throughout (a bad line is an error naming the file and the line)."""
    return require_text(read_lines(path, what), f"the {what} file {path}")


def check_text(text: str, where: str) -> str:
    """``text`` unchanged if it is valid Unicode text; a lone surrogate (what undecodable bytes become when a file
    is read with ``errors="surrogateescape"``, as Python reads stdin under a C locale) is a :class:`SimulmtError`."""
    found = _SURROGATE.search(text)
    if found:
        raise SimulmtError(f"{where} is not valid text: it holds the lone surrogate U+{ord(found.group()):04X} at "
                           f"character {found.start() + 1} (bytes that were not UTF-8, decoded with "
                           f"errors='surrogateescape'); read the input as UTF-8")
    return text


__all__ = ["BOM", "Line", "check_text", "decode_line", "read_lines", "read_text_lines", "require_text",
           "split_lines", "stream_lines"]
