"""The one line reader: split at "\\n" only, strict UTF-8 per line, CRLF and a BOM handled, bad lines named."""

from __future__ import annotations

import io

import pytest

from simulmt.errors import SimulmtError
from simulmt.text.text_input import (Line, check_text, decode_line, read_lines, read_text_lines, require_text,
                                     split_lines, stream_lines)


def texts(lines: list[Line]) -> list[str | None]:
    return [line.text for line in lines]


@pytest.mark.parametrize("data, expected", [
    (b"", []),
    (b"\n", [""]),
    (b"a\nb", ["a", "b"]),  # no final line break
    (b"a\nb\n", ["a", "b"]),  # a final line break makes no empty last line
    (b"a\n\nb\n\n", ["a", "", "b", ""]),
    (b"a\r\nb\r\n", ["a", "b"]),  # CRLF
    (b"a\rb\n", ["a\rb"]),  # a lone CR is no line break
    ("a\u2028b\x0cc\x1cd\x85e\n".encode(), ["a\u2028b\x0cc\x1cd\x85e"]),  # nor are these (str.splitlines splits)
    (b"\xef\xbb\xbfThe cat\n\xef\xbb\xbfsat\n", ["The cat", "\ufeffsat"]),  # a BOM is dropped on line 1 only
    (b"a\x00b\n", ["a\x00b"]),  # NUL is a character
])
def test_split_lines(data, expected):
    assert texts(split_lines(data)) == expected
    assert texts(list(stream_lines(io.BytesIO(data)))) == expected  # standard input reads the same
    assert [line.number for line in split_lines(data)] == list(range(1, len(expected) + 1))


@pytest.mark.parametrize("raw, number, message", [
    (b"Hello \xff\xfe world.", 3, "line 3 is not valid UTF-8 (byte 0xff at column 7: invalid start byte)"),
    (b"caf\xe9 au lait", 1, "line 1 is not valid UTF-8 (byte 0xe9 at column 4: invalid continuation byte)"),
    (b"end \xe2\x82", 2, "line 2 is not valid UTF-8 (byte 0xe2 at column 5: unexpected end of data)"),
    (b"\xef\xbb\xbfab\x80", 1, "line 1 is not valid UTF-8 (byte 0x80 at column 6: invalid start byte)"),  # BOM counted
    (b"\xed\xa0\x80", 4, "line 4 is not valid UTF-8 (byte 0xed at column 1: invalid continuation byte)"),  # surrogate
])
def test_a_line_that_is_not_utf8_is_an_error_of_that_line(raw, number, message):
    line = decode_line(raw, number)
    assert line.text is None and line.error == message and line.number == number
    assert "\ufffd" in line.shown  # reports show the line with replacement characters


def test_one_bad_line_leaves_the_others_alone():
    lines = split_lines(b"good one\nHello \xff world.\r\nanother good one\n")
    assert texts(lines) == ["good one", None, "another good one"]
    assert lines[1].error.startswith("line 2 is not valid UTF-8 (byte 0xff at column 7")
    assert lines[1].shown == "Hello \ufffd world."


def test_require_text_names_the_file_and_the_line(tmp_path):
    path = tmp_path / "src.en"
    path.write_bytes(b"fine\nna\xefve\n")
    with pytest.raises(SimulmtError, match=r"the source file .*src\.en: line 2 is not valid UTF-8 \(byte 0xef at "
                                           r"column 3.*iconv"):
        read_text_lines(path, "source")
    assert require_text(split_lines(b"a\nb\n"), "x") == ["a", "b"]
    with pytest.raises(SimulmtError, match="cannot read the source file .*missing"):
        read_lines(tmp_path / "missing", "source")


def test_check_text_refuses_lone_surrogates():
    assert check_text("caf\u00e9 \U0001F600 \u202eabc", "w") == "caf\u00e9 \U0001F600 \u202eabc"
    surrogate_escaped = b"caf\xe9".decode("utf-8", errors="surrogateescape")
    with pytest.raises(SimulmtError, match=r"word 2 is not valid text: .*U\+DCE9 at character 4"):
        check_text(surrogate_escaped, "word 2")
