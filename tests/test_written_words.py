"""Confirmed words as a text writes them (simulmt/speech/written_words.py): golden cases."""

from simulmt.core.sentence_ends import ends_sentence
from simulmt.speech.written_words import capitalised, written_words


def test_capitalised_changes_the_first_letter_after_any_opener():
    assert [capitalised(w) for w in ["two", "iPhone", "Über", "été", "", "2", "“the", "¿qué", "(a", "東京"]] == \
        ["Two", "IPhone", "Über", "Été", "", "2", "“The", "¿Qué", "(A", "東京"]


def test_a_recordings_first_word_gets_a_capital_and_whisper_keeps_the_case_of_the_rest():
    words = "a man rides. two children play? the end! And then".split()
    assert written_words(words) == (["A", "man", "rides.", "two", "children", "play?", "the", "end!", "And",
                                     "then"], "then")
    assert written_words(words, capitalise_starts=False) == (words, "then")


def test_a_stray_stop_inside_a_sentence_is_not_a_start_where_the_talk_does_not_split():
    """Whisper's "device. standing": the talk keeps the sentence whole (the next word is lower case), so the word
    after the stop keeps its case (a capital there would make the talk split)."""
    words, _ = written_words(["the", "device.", "standing", "the...", "night"])
    assert words == ["The", "device.", "standing", "the...", "night"]
    assert not any(ends_sentence(a, b) for a, b in zip(words, words[1:]))


def test_the_word_before_carries_over_between_calls():
    assert written_words(["park."]) == (["Park."], "park.")
    assert written_words(["two", "men"], before="park.") == (["two", "men"], "men")  # (as Whisper wrote it)
    assert written_words(["two", "men"], before=None) == (["Two", "men"], "men")  # (a start, or after a pause)
    assert written_words([], before="men") == ([], "men")


def test_small_numbers_are_spelled_with_a_capital_where_a_sentence_starts():
    words = ["2", "men", "and", "1", "dog.", "3", "cats", "and", "13", "birds.", "Dr.", "4", "came."]
    assert written_words(words, spell_numbers=True) == (
        ["Two", "men", "and", "one", "dog.", "Three", "cats", "and", "13", "birds.", "Dr.", "four", "came."],
        "came.")
    assert written_words(words)[0] == words  # (numbers as written; the first "2" has no letter to capitalise)
