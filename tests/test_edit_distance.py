"""The Levenshtein distance the recogniser's WER and LocalAgreement's letter alignment share: golden values by hand."""

from simulmt.speech.ctc import token_error_rate
from simulmt.speech.edit_distance import edit_distance, prefix_distances


def test_edit_distance_golden_values():
    assert edit_distance("kitten", "sitting") == 3  # k->s, e->i, + g
    assert edit_distance("", "abc") == 3 and edit_distance("abc", "") == 3
    assert edit_distance("towardsa", "towarda") == 1  # the re-heard "towards a" (one letter deleted)
    assert edit_distance(["a", "man", "is"], ["a", "man", "is"]) == 0
    assert edit_distance(["two", "dogs"], ["2", "dogs", "run"]) == 2  # a substitution and an insertion


def test_prefix_distances_are_the_distances_to_every_prefix_at_once():
    # "towardsa" against the prefixes of "towardalarge": "" (8 deletions) ... "towarda" (1) ... "towardalarge" (5)
    # (by hand: each letter of "toward" one edit nearer; "towarda" one deletion; then "sa" against "al", "ala", ...)
    assert prefix_distances("towardsa", "towardalarge") == [8, 7, 6, 5, 4, 3, 2, 1, 2, 2, 3, 4, 5]
    assert prefix_distances("", "ab") == [0, 1, 2] and prefix_distances("ab", "") == [2]


def test_token_error_rate_is_edits_over_reference_words():
    # one substitution (b -> x) and one deletion (d) over 4 words; then 3 insertions over 1 word
    assert token_error_rate([["a", "b", "c", "d"]], [["a", "x", "c"]]) == 0.5
    assert token_error_rate([["a"]], [["a", "b", "c", "d"]]) == 3.0
    assert token_error_rate([["a", "b"], ["c", "d"]], [["a", "b"], []]) == 0.5  # over the corpus: 2 edits / 4
    assert token_error_rate([], []) == 0.0
