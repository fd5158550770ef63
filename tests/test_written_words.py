"""Confirmed words as a text writes them (simulmt/speech/written_words.py): golden cases."""

from simulmt.speech.written_words import capitalised, written_words


def test_capitalised_changes_the_first_letter_only():
    assert [capitalised(w) for w in ["two", "iPhone", "Über", "été", "", "2", "'tis", "東京"]] == \
        ["Two", "IPhone", "Über", "Été", "", "2", "'tis", "東京"]


def test_a_sentences_first_word_gets_a_capital_and_the_rest_keep_their_case():
    words = "a man rides. two children play? the end! and then".split()
    assert written_words(words) == (["A", "man", "rides.", "Two", "children", "play?", "The", "end!", "And",
                                     "then"], False)
    assert written_words(words, capitalise_starts=False) == (words, False)


def test_the_sentence_start_carries_over_between_calls():
    assert written_words(["park."]) == (["Park."], True)  # (the word after it starts a sentence)
    assert written_words(["two", "men"], sentence_start=False) == (["two", "men"], False)
    assert written_words(["two", "men"], sentence_start=True) == (["Two", "men"], False)
    assert written_words([], sentence_start=False) == ([], False)


def test_small_numbers_are_spelled_before_the_capital():
    words = ["2", "men", "and", "1", "dog.", "3", "cats", "and", "13", "birds."]
    assert written_words(words, spell_numbers=True) == (
        ["Two", "men", "and", "one", "dog.", "Three", "cats", "and", "13", "birds."], True)
    assert written_words(words) == (["2", "men", "and", "1", "dog.", "3", "cats", "and", "13", "birds."], True)
