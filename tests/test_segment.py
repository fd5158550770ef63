"""Sentence splitting of long lines, and the merge of per-sentence translations (hand-computed cases)."""

from __future__ import annotations

import time

import pytest

from simulmt.errors import SimulmtError
from simulmt.core.sentence_ends import ends_sentence
from simulmt.core.translation import merge_translations
from simulmt.text.segment import split_sentences
from simulmt.core.session import Translation


def split(text: str, max_words: int = 64) -> list[str]:
    return [" ".join(s) for s in split_sentences(text.split(), max_words)]


@pytest.mark.parametrize("text, expected", [
    ("", []),
    ("no end mark at all", ["no end mark at all"]),
    ("One. Two! Three? Four… Five", ["One.", "Two!", "Three?", "Four…", "Five"]),
    ('He said "stop." Then he left.', ['He said "stop."', "Then he left."]),  # closing quote after the mark
    ("(It rained.) We stayed.", ["(It rained.)", "We stayed."]),
    ("Is it ? Yes .", ["Is it ?", "Yes ."]),  # tokenized text: a lone mark ends the sentence
    ("It costs 3.5 euros. Fine.", ["It costs 3.5 euros.", "Fine."]),  # never inside a word
    ("Dr. Smith met Mr. Jones. They talked.", ["Dr. Smith met Mr. Jones.", "They talked."]),
    ("See Fig. 3 and No. 5 in Jan. 2020. Done.", ["See Fig. 3 and No. 5 in Jan. 2020.", "Done."]),
    ("J. R. R. Tolkien wrote it. Yes.", ["J. R. R. Tolkien wrote it.", "Yes."]),  # initials
    ("The U.S. Army came. Then e.g. Bob.", ["The U.S. Army came.", "Then e.g. Bob."]),
    ("Am 3. Oktober war es. Gut.", ["Am 3. Oktober war es.", "Gut."]),  # an ordinal
    ("Born in 1990. Then school.", ["Born in 1990.", "Then school."]),
    ("Wait... then go. And... Stop.", ["Wait... then go.", "And...", "Stop."]),  # lower case next: no end
    ("Wow! really? yes.", ["Wow! really? yes."]),
    ("他来了。 我走了。", ["他来了。", "我走了。"]),
    ('"Why?" "Because."', ['"Why?"', '"Because."']),  # an opening quote before the next word
])
def test_split_sentences(text, expected):
    assert split(text) == expected


def test_ends_sentence_needs_the_next_word():
    assert ends_sentence("Dr.", None)  # at the end of the input every mark ends the sentence
    assert not ends_sentence("Dr.", "Smith")
    assert ends_sentence("today.", "The")
    assert not ends_sentence("today.", "the")
    assert not ends_sentence("today", "The")


def test_long_sentences_are_cut_at_the_bound():
    words = [f"w{i}" for i in range(10)]
    assert split_sentences(words, 4) == [words[:4], words[4:8], words[8:]]
    assert split_sentences(["Go.", "B", "c", "d", "e", "f."], 3) == [["Go."], ["B", "c", "d"], ["e", "f."]]
    with pytest.raises(SimulmtError, match="max_words must be at least 1"):
        split_sentences(words, 0)


def test_a_talk_on_one_line_splits_at_once():
    sentence = "So the question is what we do now , and why it matters to us . "
    words = (sentence * 3000).split()[:40_000]
    words[20_000:20_000] = ["x"] * 1000  # a run of 1,000 words without a sentence end
    start = time.perf_counter()
    sentences = split_sentences(words, max_words=64)
    assert time.perf_counter() - start < 0.5
    assert [w for s in sentences for w in s] == words  # nothing lost, nothing added, in order
    # 2,500 sentences of 16 words; the run of x: 15 cuts of 64, its last 40 words open the next sentence
    assert max(map(len, sentences)) == 64 and len(sentences) == 2500 + 15


def part(source: str, prediction: str, delays: list[int], elapsed: list[float], wall_ms: float, tokens: int,
         error: str | None = None) -> Translation:
    return Translation(source, prediction, delays, elapsed, tokens, 10.0 * tokens, "expost(slot=16)", "wait-2",
                       16, "tiny", source_length=len(source.split()), forward_calls=tokens // 2, cache_crops=1,
                       refed_tokens=2, wall_ms=wall_ms, error=error)


def test_merge_translations_counts_over_the_whole_line():
    parts = [part("A b c .", "W x y z", [2, 3, 4, 4], [1.0, 2.0, 3.0, 3.5], 4.0, 10),
             part("D e .", "U v", [2, 3], [0.5, 1.5], 2.0, 6),
             part("F g h i .", "T", [5], [9.0], 10.0, 8)]
    merged = merge_translations(parts)
    assert merged.source == "A b c . D e . F g h i ." and merged.source_length == 12
    assert merged.prediction == "W x y z U v T"
    assert merged.delays == [2, 3, 4, 4, 4 + 2, 4 + 3, 7 + 5]  # offset by the source words of earlier sentences
    assert merged.elapsed == [1.0, 2.0, 3.0, 3.5, 4.5, 5.5, 15.0]  # offset by their wall time
    assert merged.wall_ms == 16.0 and merged.tokens_fed == 24 and merged.flops == 240.0
    assert (merged.forward_calls, merged.cache_crops, merged.refed_tokens) == (5 + 3 + 4, 3, 6)
    assert (merged.layout, merged.policy, merged.slot, merged.model, merged.error) == (
        "expost(slot=16)", "wait-2", 16, "tiny", None)


def test_merge_keeps_the_other_sentences_of_a_failed_one():
    parts = [part("A b .", "X y", [1, 3], [1.0, 2.0], 3.0, 4),
             part("C d e .", "", [], [], 5.0, 7, error="too long for the context"),
             part("F .", "Z", [1], [0.5], 1.0, 3)]
    merged = merge_translations(parts)
    assert merged.prediction == "X y Z" and merged.delays == [1, 3, 8] and merged.elapsed == [1.0, 2.0, 8.5]
    assert merged.error == "sentence 2 of 3 (source words 4-7): too long for the context"


def test_the_same_error_of_several_sentences_is_said_once():
    parts = [part("A .", "", [], [], 1.0, 2, error="overflow"), part("B .", "", [], [], 1.0, 2, error="overflow"),
             part("C .", "X", [1], [0.5], 1.0, 2), part("D .", "", [], [], 1.0, 2, error="overflow"),
             part("E .", "", [], [], 1.0, 2, error="other")]
    assert merge_translations(parts).error == ("sentences 1-2, 4 of 5: overflow; "
                                               "sentence 5 of 5 (source words 9-10): other")


def test_merge_of_one_sentence_is_that_sentence():
    one = part("A b .", "X y", [1, 3], [1.0, 2.0], 3.0, 4)
    assert merge_translations([one]) == one
    with pytest.raises(ValueError):
        merge_translations([])
