"""The token pieces a layout is assembled from: prompt, role markers, end tokens, source units, target words.

Markers come from the tokenizer's chat template when it has one (rendered once with placeholder messages and cut
at the placeholders), and from plain-text markers otherwise::

    chat  : <bos><start_of_turn>user\\n{instruction}\\n | src | <end_of_turn>\\n<start_of_turn>model\\n | tgt
             | <end_of_turn> | \\n<start_of_turn>user\\n | src ...
    plain : <bos>{instruction}\\nEnglish: | src | \\nGerman: | tgt | <eos> | \\nEnglish: | src ...

Pieces: ``prompt`` | source | ``target_opener`` | target | ``turn_end`` | ``user_header`` | source ...

The markers are the only control tokens: source and target text is encoded with ``text_ids``, which spells a
special token's string found in it (``<end_of_turn>``, ``<|im_end|>``, ...) with ordinary pieces.

The interleaved layout (EASiST) uses the prompt and two marker tokens instead of the turn markers, when the tokenizer
has them (``simulmt.core.markers.add_interleaved_markers``)::

    interleaved: <bos><start_of_turn>user\n{instruction}\n | src | <|end-of-read|> | tgt | <|end-of-write|> | src ...
                 ... | src | <|end-of-read|> | tgt | <|end-of-translation|>

A third marker, ``<|end-of-translation|>``, ends the translation when the tokenizer has it (adapters trained since
it was added); without it the translation ends with ``<|end-of-write|>``, as every chunk does.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass, replace

from simulmt.errors import SimulmtError
from simulmt.core.vocabulary import memo, remember, special_token_ids

LANGUAGES = {
    "en": "English", "de": "German", "fr": "French", "es": "Spanish", "it": "Italian", "nl": "Dutch",
    "ro": "Romanian", "pt": "Portuguese", "cs": "Czech", "pl": "Polish", "ru": "Russian", "uk": "Ukrainian",
    "zh": "Chinese", "ja": "Japanese", "ko": "Korean", "ar": "Arabic", "tr": "Turkish", "sv": "Swedish",
}


def language_name(code_or_name: str) -> str:
    """'de' or 'German' -> 'German'; anything else is a clear error."""
    key = code_or_name.strip()
    if key.lower() in LANGUAGES:
        return LANGUAGES[key.lower()]
    for name in LANGUAGES.values():
        if name.lower() == key.lower():
            return name
    known = ", ".join(f"{c} ({n})" for c, n in LANGUAGES.items())
    raise SimulmtError(f"unknown language {code_or_name!r}; known languages: {known}")


def language_code(language: str) -> str:
    """'en' or 'English' -> 'en' (what Whisper takes)."""
    name = language_name(language)
    return next(code for code, known in LANGUAGES.items() if known == name)


@dataclass(frozen=True)
class PromptFormat:
    prompt: tuple[int, ...]  # opening of the sequence, up to the first source token
    target_opener: tuple[int, ...]  # closes the source side, opens the target side
    turn_end: tuple[int, ...]  # ends a target segment (predicted in turn-based layouts)
    user_header: tuple[int, ...]  # opens a new source turn / slot after target text
    end_id: int  # the token that ends the translation (predicted)
    stop_ids: frozenset[int]  # any of these proposed by the model ends the segment or the sentence
    source_first_space: bool  # does the first source word need a leading space (text before it has none)?
    target_first_space: bool  # same for the first target word after the target opener
    chat: bool  # built from a chat template?
    end_of_read: int | None = None  # ``<|end-of-read|>``: the interleaved layout's "now write" marker (forced)
    end_of_write: int | None = None  # ``<|end-of-write|>``: ends an interleaved target chunk (predicted)
    end_of_translation: int | None = None  # ``<|end-of-translation|>``: ends the interleaved translation (predicted)


END_OF_READ, END_OF_WRITE, END_OF_TRANSLATION = "<|end-of-read|>", "<|end-of-write|>", "<|end-of-translation|>"


def _ids(tokenizer, text: str) -> tuple[int, ...]:
    """Markup the prompt format itself writes (the chat template's turns, the instruction): special-token strings
    in it are the special tokens. Never for text that comes from a speaker, a client or a corpus: ``text_ids``."""
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])


def text_ids(tokenizer, text: str) -> tuple[int, ...]:
    """Token ids of ``text`` as plain text: the source, target words, transcripts. A special token's string in it
    (``<end_of_turn>``, ``<|im_end|>``, ``<eos>``, an interleaved marker) is spelled with ordinary pieces, never
    encoded as the control token, so text cannot close the user turn or open a new one. Text without such
    strings gets exactly the ids a plain encode gives (``split_special_tokens`` only skips special tokens;
    ordinary added tokens such as Gemma's newline runs still apply).

    Checked: a result holding a control id (``special_token_ids`` but ``<unk>``, which unknown characters become
    in a tokenizer without byte fallback) comes from a tokenizer that ignores or refuses ``split_special_tokens``,
    or from an added token that is markup but not flagged special; the text is then encoded without the
    tokenizer's added tokens, with a warning (once per tokenizer), or refused with a ``SimulmtError`` where that
    is impossible. (So the check cannot see a tokenizer ignoring the option match its unk string, e.g. SmolLM2's
    ``<|endoftext|>``; ``split_special_tokens`` itself spells it out.)"""
    try:
        ids = tuple(tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])
        why = ("split_special_tokens=True did not keep them out (added tokens not flagged special, or a tokenizer "
               "that ignores the option)")
    except (TypeError, ValueError) as exc:  # e.g. MistralCommonBackend refuses split_special_tokens
        ids = tuple(tokenizer(text, add_special_tokens=False)["input_ids"])
        why = f"it does not support split_special_tokens ({exc})"
    found = _controls_in(tokenizer, ids)
    if not found:
        return ids
    plain = _without_added_tokens(tokenizer, text)
    names = ", ".join(sorted({str(tokenizer.convert_ids_to_tokens(i)) for i in found}))
    if plain is None or _controls_in(tokenizer, plain):
        raise SimulmtError(f"the tokenizer ({type(tokenizer).__name__}) encodes the text {text!r} with control "
                           f"tokens ({names}) and cannot encode it as plain text: {why}; remove them from the text")
    if _first_warning(tokenizer):
        print(f"simulmt: warning: the tokenizer ({type(tokenizer).__name__}) encoded control tokens ({names}) in "
              f"source or target text: {why}; such text is encoded without the tokenizer's added tokens",
              file=sys.stderr)
    return plain


_CONTROLS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # tokenizer -> (control ids, ids known)
_WARNED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _first_warning(tokenizer) -> bool:
    try:
        if tokenizer in _WARNED:
            return False
        _WARNED[tokenizer] = True
    except TypeError:  # not a weak key: warn every time
        pass
    return True


def _controls_in(tokenizer, ids: tuple[int, ...]) -> set[int]:
    """The control ids among ``ids``. The set is cached per tokenizer and computed again when an id beyond those
    known when it was computed shows up (tokens added since, e.g. ``add_interleaved_markers``)."""
    try:
        cached = _CONTROLS.get(tokenizer)
    except TypeError:  # a tokenizer that cannot be a weak key: no cache
        return (special_token_ids(tokenizer) - {tokenizer.unk_token_id}).intersection(ids)
    if cached is None or any(i >= cached[1] for i in ids):
        controls = special_token_ids(tokenizer) - {tokenizer.unk_token_id}
        cached = (controls, max([len(tokenizer), *[i + 1 for i in controls]]))
        _CONTROLS[tokenizer] = cached
    return cached[0].intersection(ids)


def _without_added_tokens(tokenizer, text: str) -> tuple[int, ...] | None:
    """``text`` through a fast tokenizer's normalizer, pre-tokenizer and model only: no added token, special or
    not, is matched. None for a tokenizer without a ``tokenizers`` backend."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "model"):
        return None
    if backend.normalizer is not None:
        text = backend.normalizer.normalize_str(text)
    splits = [text] if backend.pre_tokenizer is None else [s for s, _ in backend.pre_tokenizer.pre_tokenize_str(text)]
    return tuple(token.id for split in splits for token in backend.model.tokenize(split))


def _instruction(source_lang: str, target_lang: str) -> str:
    return f"Translate the following {source_lang} text into {target_lang}."


def build_format(tokenizer, source_lang: str = "en", target_lang: str = "de", use_chat_template: bool = True) -> PromptFormat:
    src, tgt = language_name(source_lang), language_name(target_lang)
    if use_chat_template and getattr(tokenizer, "chat_template", None):
        fmt = _chat_format(tokenizer, src, tgt)
    else:
        fmt = _plain_format(tokenizer, src, tgt)
    return with_interleaved_markers(fmt, tokenizer)


def marker_id(tokenizer, token: str) -> int | None:
    """The id of a whole-token marker such as ``<|end-of-read|>``, or None if the vocabulary lacks it."""
    token_id = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(token_id, int) or (token_id == tokenizer.unk_token_id and token != tokenizer.unk_token):
        return None
    return token_id


def with_interleaved_markers(fmt: PromptFormat, tokenizer) -> PromptFormat:
    """Fill in the interleaved layout's markers when the tokenizer has them (``simulmt.core.markers`` adds
    them); ``<|end-of-write|>`` (and ``<|end-of-translation|>``) then also end a segment wherever proposed."""
    eor, eow = marker_id(tokenizer, END_OF_READ), marker_id(tokenizer, END_OF_WRITE)
    if eor is None or eow is None:
        return fmt
    eot = marker_id(tokenizer, END_OF_TRANSLATION)
    return replace(fmt, end_of_read=eor, end_of_write=eow, end_of_translation=eot,
                   stop_ids=fmt.stop_ids | {eow} | ({eot} if eot is not None else set()))


def _plain_format(tokenizer, src: str, tgt: str) -> PromptFormat:
    bos = (tokenizer.bos_token_id,) if tokenizer.bos_token_id is not None else ()
    eos = tokenizer.eos_token_id
    if eos is None:
        raise SimulmtError("the tokenizer has no eos token: the translation end cannot be predicted")
    return PromptFormat(
        prompt=bos + _ids(tokenizer, f"{_instruction(src, tgt)}\n{src}:"),
        target_opener=_ids(tokenizer, f"\n{tgt}:"),
        turn_end=(eos,),
        user_header=_ids(tokenizer, f"\n{src}:"),
        end_id=eos,
        stop_ids=frozenset({eos}),
        source_first_space=True,
        target_first_space=True,
        chat=False,
    )


_U1, _T1, _U2 = "XQSRCONEQX", "XQTGTONEQX", "XQSRCTWOQX"


def _chat_format(tokenizer, src: str, tgt: str) -> PromptFormat:
    render = lambda msgs: tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)  # noqa: E731
    one = render([{"role": "user", "content": _U1}])
    two = render([{"role": "user", "content": _U1}, {"role": "assistant", "content": _T1},
                  {"role": "user", "content": _U2}])
    head, _, opener = one.partition(_U1)
    try:
        head2, rest = two.split(_U1)
        opener2, rest = rest.split(_T1)
        between, opener3 = rest.split(_U2)
    except ValueError:
        raise SimulmtError("the tokenizer's chat template does not render user/assistant turns in a way simulmt "
                           "understands; pass use_chat_template=False to use plain-text markers") from None
    if head2 != head or opener2 != opener or opener3 != opener or not between:
        raise SimulmtError("the tokenizer's chat template renders turns inconsistently (e.g. a template that "
                           "rewrites earlier assistant turns); pass use_chat_template=False for plain markers")
    between_ids = _ids(tokenizer, between)
    end_id = between_ids[0]
    prompt_text = head + _instruction(src, tgt) + "\n"
    prompt = _ids(tokenizer, prompt_text)
    stops = {end_id}
    if tokenizer.eos_token_id is not None:
        stops.add(tokenizer.eos_token_id)
    return PromptFormat(
        prompt=prompt,
        target_opener=_ids(tokenizer, opener),
        turn_end=(end_id,),
        user_header=between_ids[1:],
        end_id=end_id,
        stop_ids=frozenset(stops),
        source_first_space=not prompt_text[-1:].isspace(),
        target_first_space=not opener[-1:].isspace(),
        chat=True,
    )


def source_units(tokenizer, fmt: PromptFormat, words: list[str], first_index: int = 0) -> list[tuple[int, ...]]:
    """Token ids of each source word (``words`` start at word ``first_index`` of the sentence), plain text
    (``text_ids``). Every word but the sentence's first carries its leading space."""
    table = memo(tokenizer, "source_units")  # (a word's ids depend on its text alone)
    texts = [(" " if (first_index + i > 0 or fmt.source_first_space) else "") + w for i, w in enumerate(words)]
    return [table.get(t) or remember(table, t, text_ids(tokenizer, t)) for t in texts]


def newline_ids(tokenizer) -> frozenset[int]:
    """Ids of the vocabulary pieces that hold a line break: with plain markers a base model ends the target line
    with one (and would go on with a new "English:" line)."""
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    return frozenset(i for i, p in enumerate(pieces)
                     if p and i not in special and ("\n" in p or "Ċ" in p or p == "<0x0A>"))


def word_tokens(tokenizer, word: str, leading_space: bool) -> tuple[int, ...]:
    """Token ids of a target word (plain text: ``text_ids``)."""
    return text_ids(tokenizer, (" " if leading_space else "") + word)
