"""Whisper's loops (simulmt/speech/repetition.py): which transcripts loop, and what is kept of a loop."""

from __future__ import annotations

import zlib

import pytest

from simulmt.speech.repetition import (COMPRESSION_LIMIT, collapse_loops, compression_ratio, degenerate,
                                      repetitiveness)

SENTENCE = "Two men in uniforms are playing football in the snow.".split()


def kept(text: str) -> str:
    words = text.split()
    return " ".join(words[i] for i in collapse_loops(words))


def test_compression_ratio_is_whispers():
    text = "Hello. " * 40
    assert compression_ratio(text) == len(text.encode()) / len(zlib.compress(text.encode()))
    assert compression_ratio("") == 0.0


def test_a_loop_is_degenerate_and_a_sentence_is_not():
    assert not degenerate(SENTENCE, 3000)
    assert not degenerate([], 1000)
    assert not degenerate("Hello? Hello? Hello? Oh, hello.".split(), 3000)
    assert compression_ratio(" ".join(SENTENCE)) < COMPRESSION_LIMIT
    assert degenerate(["Hello."] * 40, 2000)  # both tests: compression and words per second
    assert compression_ratio(" ".join(["Hello."] * 40)) > COMPRESSION_LIMIT
    looped = (" ".join(SENTENCE) + " ") * 6
    assert degenerate(looped.split(), 30000)  # a sentence written six times: compression alone
    assert degenerate(SENTENCE * 2, 1000)  # 20 distinct-enough words in one second: the rate alone
    assert not degenerate(SENTENCE * 2, 4000)


@pytest.mark.parametrize("text, expected", [
    ("Hello? Hello? Hello? Hello? Oh, hello.", "Hello? Hello? Hello? Hello? Oh, hello."),  # people say it 4 times
    ("no, no, no, no", "no, no, no, no"),
    ("Hello. " * 40 + "I didn't know you were there.", "Hello. Hello. Hello. I didn't know you were there."),
    ("Hello. hello Hello? HELLO. (hello) Hi.", "Hello. hello Hello? Hi."),  # without case and punctuation
    ("This is Diane. And I'm Sheila. And I'm Sheila. And I'm Sheila. And I'm Sheila. And I'm Sheila. And I'm",
     "This is Diane. And I'm Sheila. And I'm Sheila. And I'm Sheila. And I'm"),
    ("a b a b a b a b a b c", "a b a b a b c"),
    ("", ""),
])
def test_a_loop_of_five_or_more_keeps_its_first_three_copies(text, expected):
    assert kept(text) == expected


def test_loops_are_compared_as_local_agreement_compares_words():
    from simulmt.speech.local_agreement import TimedWord, word_key

    assert word_key("«Hello!»") == word_key("hello") == TimedWord("(Hello)", 0, 1).key
    with pytest.raises(ValueError, match="keep"):
        collapse_loops(["x"] * 6, keep=0)
    with pytest.raises(ValueError, match="keep"):
        collapse_loops(["x"] * 6, loop=3, keep=3)


def test_collapse_returns_positions_in_order_and_keeps_everything_without_a_loop():
    assert collapse_loops(SENTENCE) == list(range(len(SENTENCE)))
    words = ["x"] * 10 + SENTENCE
    positions = collapse_loops(words)
    assert positions == [0, 1, 2] + list(range(10, 10 + len(SENTENCE)))
    assert collapse_loops(["x"] * 10, keep=1) == [0]
    assert collapse_loops(["x"] * 3, loop=3, keep=1) == [0] and collapse_loops(["x"] * 2, loop=3, keep=1) == [0, 1]
    long_unit = "one two three four five six seven eight nine".split()
    assert collapse_loops(long_unit * 5) == list(range(45))  # a nine-word unit is longer than looked for


def test_the_less_repetitive_transcript_is_the_smaller():
    looped, fine = ["Hello."] * 40, "Hello? Hello? Oh, hello.".split()
    assert repetitiveness(fine, 2000) < repetitiveness(looped, 2000)
    assert min((looped, fine), key=lambda t: repetitiveness(t, 2000)) is fine
    assert repetitiveness(["a"] * 6, 0)[0] and repetitiveness(["a"] * 60, 0)[0]  # both degenerate (no audio):
    assert repetitiveness(["a"] * 6, 0) < repetitiveness(["a"] * 60, 0)  # the compression ratio decides
