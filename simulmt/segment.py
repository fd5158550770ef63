"""Sentences of a long line: split a word list at sentence ends, cut any sentence at a word bound; merge back.

A line may hold more than a sentence (a talk pasted on one line, 40,000 words). Translated as one stream it would
run for hours before it ran out of the model's context. So a line is split into sentences, each sentence is
translated on its own (bounded: at most ``max_words`` source words, so at most ``a * max_words + b`` target words
of at most ``max_tokens_per_word`` tokens each, see :class:`simulmt.core.session.DecodeConfig`), and the sentences'
translations are merged into the line's (:func:`merge_translations`), with delays counted over the whole line as
a stream would see them.

Where a sentence ends (:func:`ends_sentence`): a word whose text, after any closing quotes or brackets, ends in
``. ! ? …`` (or a CJK full stop), unless

* the next word starts with a lower-case letter ("e.g. this", "... and then"), or
* the period is that of a known abbreviation ("Dr.", "Mr.", "No.", "Jan.", "z.B."), of an initial ("J."), of a
  dotted abbreviation ("U.S.", "e.g.") or of a number of at most two digits (an ordinal: "am 3. Mai").

Numbers such as "3.5" never split: the splitter works on whole words. A missed split only makes a longer
sentence, and every sentence is cut at ``max_words`` anyway; a wrong split cuts a sentence in two, so the rules
lean towards not splitting. The decision at a word needs the next word (or the end of the input), so a live
stream makes it one word late.
"""

from __future__ import annotations

from collections.abc import Sequence

from simulmt.errors import SimulmtError
from simulmt.core.session import Translation

DEFAULT_MAX_WORDS = 64
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


def split_sentences(words: Sequence[str], max_words: int = DEFAULT_MAX_WORDS) -> list[list[str]]:
    """``words`` (of one line) -> sentences, each at most ``max_words`` words; no words lost, none added."""
    if max_words < 1:
        raise SimulmtError(f"max_words must be at least 1, got {max_words}")
    sentences, current = [], []
    for i, word in enumerate(words):
        current.append(word)
        following = words[i + 1] if i + 1 < len(words) else None
        if len(current) >= max_words or ends_sentence(word, following):
            sentences.append(current)
            current = []
    if current:
        sentences.append(current)
    return sentences


def merge_translations(parts: Sequence[Translation]) -> Translation:
    """The translations of a line's consecutive sentences -> the line's translation.

    Predictions and sources are joined with spaces. Delays are offset by the source words of the earlier sentences
    (a word written after 2 words of the second sentence, whose first sentence had 7, has delay 9), ``elapsed`` by
    their wall time; counters and wall time are summed. A sentence that failed (``error``) contributes its source
    words and its cost but no target words; the line's ``error`` says which sentence failed and why.
    """
    if not parts:
        raise ValueError("merge_translations needs at least one translation")
    if len(parts) == 1:
        return parts[0]
    delays: list[int] = []
    elapsed: list[float] = []
    failed: dict[str, list[tuple[int, int, int]]] = {}  # error -> (sentence, first word, last word) of each
    words_before, ms_before = 0, 0.0
    for number, part in enumerate(parts, 1):
        delays += [d + words_before for d in part.delays]
        elapsed += [round(e + ms_before, 3) for e in part.elapsed]
        if part.error:
            failed.setdefault(part.error, []).append((number, words_before + 1, words_before + part.source_length))
        words_before += part.source_length
        ms_before += part.wall_ms
    errors = [_which_sentences(where, len(parts)) + f": {error}" for error, where in failed.items()]
    first = parts[0]
    return Translation(
        source=" ".join(p.source for p in parts if p.source),
        prediction=" ".join(p.prediction for p in parts if p.prediction),
        delays=delays, elapsed=elapsed,
        tokens_fed=sum(p.tokens_fed for p in parts), flops=sum(p.flops for p in parts),
        layout=first.layout, policy=first.policy, slot=first.slot, model=first.model,
        source_length=words_before, forward_calls=sum(p.forward_calls for p in parts),
        cache_crops=sum(p.cache_crops for p in parts), refed_tokens=sum(p.refed_tokens for p in parts),
        speculated=sum(p.speculated for p in parts), speculated_kept=sum(p.speculated_kept for p in parts),
        wall_ms=round(ms_before, 3), error="; ".join(errors) or None)


def _which_sentences(where: list[tuple[int, int, int]], total: int) -> str:
    """``sentence 2 of 5 (source words 8-14)``, or for several with the same error ``sentences 1-3, 5 of 5``."""
    if len(where) == 1:
        number, first, last = where[0]
        return f"sentence {number} of {total} (source words {first}-{last})"
    runs: list[list[int]] = []
    for number, _, _ in where:
        if runs and runs[-1][1] == number - 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return "sentences " + ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs) + f" of {total}"


__all__ = ["ABBREVIATIONS", "DEFAULT_MAX_WORDS", "ends_sentence", "merge_translations", "split_sentences"]
