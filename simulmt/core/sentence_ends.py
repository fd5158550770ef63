"""Where a sentence ends in a stream of words, decided at a word with the next word in view.

A word whose text, after any closing quotes or brackets, ends in ``. ! ? …`` (or a CJK full stop) ends a sentence,
unless

* the next word starts with a lower-case letter ("e.g. this", "... and then"), or
* the period is that of a known abbreviation ("Dr.", "Mr.", "No.", "Jan.", "z.B."), of an initial ("J."), of a
  dotted abbreviation ("U.S.", "e.g.") or of a number of at most two digits (an ordinal: "am 3. Mai").

Numbers such as "3.5" never split: the rule works on whole words. A missed split only makes a longer sentence
(every sentence is cut at ``max_words`` anyway); a wrong split cuts a sentence in two, so the rule leans towards
not splitting. The decision at a word needs the next word (or the end of the input), so a live stream makes it one
word late. Used by a talk (talk.py), the line splitter (simulmt.text.segment), the live text reader and the recogniser.
"""

from __future__ import annotations

DEFAULT_MAX_WORDS = 64  # a sentence is cut after this many words when no end was found
TERMINALS = (".", "!", "?", "…", "。", "！", "？", "‼", "⁇", "⁈", "⁉")
CLOSERS = "\"'”’»›)]}」』"
OPENERS = "\"'“‘«‹([{「『¿¡"
# lower case, without the final period; abbreviations that (nearly) never end a sentence
ABBREVIATIONS = frozenset("""
    mr mrs ms mx dr prof rev hon sr st mt gen col lt sgt capt cmdr gov sen rep pres supt
    no nos nr fig figs vol vols ch chap sec art p pp para approx ca cf vs viz al
    jan feb mar apr jun jul aug sep sept oct nov dec
    bzw vgl ggf usw hr fr mme mlle
""".split())


def has_terminal(text: str) -> bool:
    """Does ``text`` (a word, or a vocabulary piece) end in a sentence's terminal, closing quotes after it allowed?
    The mark alone, without the context ``ends_sentence`` weighs."""
    return text.rstrip(CLOSERS).endswith(TERMINALS)


def ends_sentence(word: str, next_word: str | None) -> bool:
    """Does a sentence end after ``word``? ``next_word``: the word after it, None at the end of the input."""
    core = word.rstrip(CLOSERS)
    if not core.endswith(TERMINALS):
        return False
    if next_word is None:
        return True
    following = next_word.lstrip(OPENERS)
    if following[:1].islower():
        return False
    if core.endswith(".") and not core.endswith(".."):  # a single period (an ellipsis "..." ends like "…")
        stem = core[:-1].lstrip(OPENERS)
        if stem.lower() in ABBREVIATIONS:
            return False
        if len(stem) == 1 and stem.isalpha():  # an initial
            return False
        if "." in stem and all(0 < len(piece) <= 2 and piece.isalpha() for piece in stem.split(".")):
            return False  # U.S., e.g., z.B., a.m.
        if stem.isdigit() and len(stem) <= 2:  # an ordinal
            return False
    return True



__all__ = ["ABBREVIATIONS", "CLOSERS", "DEFAULT_MAX_WORDS", "OPENERS", "TERMINALS", "ends_sentence", "has_terminal"]
