"""Property tests (hypothesis) on the tiny model: no input crashes simulmt, generation stays bounded, and a live
session never reaches an inconsistent state.

* any text (control characters, NUL, RTL marks, emoji, combining marks, 500-character tokens without spaces,
  whitespace-only) through ``Translator.session`` gives a consistent translation or a ``SimulmtError``;
* any lines of bytes (some not UTF-8, long lines, CRLF) through ``simulmt translate`` (``main([...])``) give one
  JSON row per line, each a translation or a clear error, exit code 0 or 1, never a traceback;
* any sequence of push / advance / result calls on a session keeps delays non-decreasing and within the words
  pushed, refuses a push after the source finished, and ends the sentence once the source is finished.

Every example decodes with a random model, so example counts are small (the file runs in seconds) and no example
database is written; a failure prints the example, and ``@reproduce_failure`` if hypothesis needs it.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from helpers import tiny_interleaved_translator
from simulmt import cli
from simulmt.errors import SimulmtError
from simulmt.core.layouts import LAYOUTS
from simulmt.core.session import DecodeConfig

TINY = tiny_interleaved_translator("llama")  # every layout, the interleaved one included
BOUNDS = DecodeConfig()
POLICIES = ("wait-k", "read-n", "offline")


def few(n: int):
    return settings(max_examples=n, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


# ---- inputs ------------------------------------------------------------------------------------------------------
ODD = ("\x00", "\x07", "\x1b[31m", "\u202e", "\u200f", "\u061c", "\u05e9\u05dc\u05d5\u05dd", "\U0001F600",
       "\U0001F1E9\U0001F1EA", "\U0001F469\u200d\U0001F4BB", "\ufeff", "\u2028", "e\u0301", "\u3000", "\r", "\x85",
       "x" * 500, "\U00012000" * 20)
WORD = st.one_of(st.text(st.characters(exclude_categories=("Cs",)), max_size=12), st.sampled_from(ODD))
TEXT = st.one_of(st.lists(WORD, max_size=8).map(" ".join), st.text(" \t\u3000\u2028\x0b\x0c", max_size=6))


def line_bytes() -> st.SearchStrategy[bytes]:
    """One input line: UTF-8 text (short, or long: 20-40 words), or random bytes; never a b"\\n" inside."""
    long_text = st.lists(WORD, min_size=20, max_size=40).map(" ".join)
    encoded = st.one_of(TEXT, long_text).map(lambda text: text.encode("utf-8", "surrogatepass"))
    return st.one_of(encoded, st.binary(max_size=16), encoded.map(lambda b: b + b"\r")).map(
        lambda b: b.replace(b"\n", b" "))


# ---- checks ------------------------------------------------------------------------------------------------------
def assert_consistent(result, source_words: int) -> None:
    assert result.error is None
    assert len(result.delays) == len(result.elapsed) == len(result.prediction.split())
    assert result.delays == sorted(result.delays) and all(0 <= d <= source_words for d in result.delays)
    assert result.elapsed == sorted(result.elapsed)
    assert result.source_length == source_words


def assert_bounded(written, source_words: int) -> None:
    """At most a * |X| + b target words (DecodeConfig), each at most max_tokens_per_word tokens."""
    assert len(written) <= BOUNDS.max_len_a * source_words + BOUNDS.max_len_b
    assert all(len(word.tokens) <= BOUNDS.max_tokens_per_word for word in written)


# ---- the session API ---------------------------------------------------------------------------------------------
@few(20)
@given(text=TEXT, layout=st.sampled_from(tuple(LAYOUTS)), policy=st.sampled_from(POLICIES))
def test_any_text_is_translated_or_refused_clearly(text, layout, policy):
    session = TINY.session(layout, policy, k=2, n=2)
    try:
        written = list(session.stream(text))
    except SimulmtError as exc:  # e.g. a 500-character token beyond the tiny model's context
        assert str(exc)
        return
    assert_consistent(session.result(), len(text.split()))
    assert_bounded(written, len(text.split()))


@settings(max_examples=3, deadline=None, database=None, phases=(Phase.generate,))  # no shrinking: any one fails
@given(text=st.tuples(st.text(max_size=5), st.characters(categories=("Cs",)), st.text(max_size=5)).map("".join))
def test_a_lone_surrogate_is_refused_clearly(text):
    with pytest.raises(SimulmtError):
        TINY.translate(text)


OPERATION = st.one_of(st.tuples(st.just("push"), st.lists(WORD, max_size=3), st.booleans()),
                      st.just(("advance",)), st.just(("result",)))


@few(20)
@given(operations=st.lists(OPERATION, max_size=10), last=st.lists(WORD, max_size=3),
       layout=st.sampled_from(tuple(LAYOUTS)), policy=st.sampled_from(POLICIES))
def test_a_live_session_stays_consistent(operations, last, layout, policy):
    """Random calls, then (unless the source finished already) the last words with ``finished=True``, an advance
    and a result: every sequence ends as a live sentence does."""
    session = TINY.session(layout, policy, k=2, n=2)
    pushed, finished, last_delay, written = 0, False, 0, []
    epilogue = [("push", last, True), ("advance",), ("result",)]
    try:
        for operation in operations + epilogue:
            if operation[0] == "push":
                _, words, finish = operation
                if finished:
                    with pytest.raises(SimulmtError, match="already finished"):
                        session.push(words, finished=finish)
                    continue
                session.push(words, finished=finish)
                pushed, finished = pushed + len(words), finish
            elif operation[0] == "advance":
                for word in session.advance():
                    assert last_delay <= word.delay <= pushed and word.index == len(written)
                    last_delay = word.delay
                    written.append(word)
                assert session.done == finished  # stops early only to wait for source
            else:
                result = session.result()
                assert_consistent(result, pushed)
                assert result.source == " ".join(session.source_words)
    except SimulmtError as exc:  # beyond the tiny model's context: a clear message, nothing else
        assert "context" in str(exc) or "position" in str(exc), exc
        return
    assert finished and session.done
    assert_bounded(written, pushed)


# ---- the command line --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def command_line_on_the_tiny_model():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli, "_load_translator", lambda **kwargs: TINY)
        yield


@few(8)
@given(lines=st.lists(line_bytes(), min_size=1, max_size=3), from_stdin=st.booleans(),
       layout=st.sampled_from(tuple(LAYOUTS)), policy=st.sampled_from(POLICIES))
def test_the_command_line_answers_every_line(command_line_on_the_tiny_model, tmp_path_factory, lines, from_stdin,
                                             layout, policy):
    data = b"".join(line + b"\n" for line in lines)
    args = ["translate", "--jsonl", "--max-words", "8", "--layout", layout, "--policy", policy,
            *{"wait-k": ["--k", "2"], "read-n": ["--n", "2"]}.get(policy, [])]  # (the option the policy takes)
    out, err, saved_stdin = io.StringIO(), io.StringIO(), sys.stdin
    if from_stdin:
        sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    else:
        path = tmp_path_factory.mktemp("input") / "lines.txt"
        path.write_bytes(data)
        args.append(str(path))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(args)
    finally:
        sys.stdin = saved_stdin
    rows = [json.loads(row) for row in out.getvalue().splitlines()]
    assert len(rows) == len(lines) and "Traceback" not in err.getvalue()
    assert code == (1 if any(row["error"] for row in rows) else 0)
    for number, (line, row) in enumerate(zip(lines, rows), 1):
        raw = line[:-1] if line.endswith(b"\r") else line
        try:
            text = (raw[3:] if number == 1 and raw.startswith(b"\xef\xbb\xbf") else raw).decode("utf-8")
        except UnicodeDecodeError:
            assert row["error"].startswith(f"line {number} is not valid UTF-8 (byte 0x")
            assert row["prediction"] == "" and row["delays"] == []
            continue
        assert row["source"] == " ".join(text.split())
        if row["error"] is None:
            assert_consistent(cli.Translation(**row), len(text.split()))
        else:  # a sentence beyond the tiny model's context
            assert "context" in row["error"] or "position" in row["error"], row["error"]
