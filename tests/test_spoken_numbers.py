"""Small numbers spelled out as a text writes them (simulmt/speech/spoken_numbers.py)."""

from simulmt.speech.spoken_numbers import spoken_number


def test_small_whole_numbers_are_spelled_out_and_capitalised_at_a_sentences_start():
    assert spoken_number("2", sentence_start=True) == "Two"
    assert spoken_number("2", sentence_start=False) == "two"
    assert spoken_number("0", sentence_start=False) == "zero"
    assert spoken_number("12", sentence_start=False) == "twelve"
    assert spoken_number("3,", sentence_start=False) == "three,"
    assert spoken_number("1.", sentence_start=False) == "one."


def test_other_words_and_numbers_are_left_as_written():
    for word in ("13", "100", "2:30", "1.5", "3rd", "4%", "$5", "2-year-old", "two", "Two", "a", "", "007x"):
        assert spoken_number(word, sentence_start=False) == word
    assert spoken_number("13", sentence_start=True) == "13"
