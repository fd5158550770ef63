"""What translates speech: the streaming recogniser feeding the text model (the default), or an end-to-end speech
model folder (EASiST, ``--speech-model``), with the stream defaults each was made for. One place for every tool
(translate --audio, evaluate --source-audio, bench --audio, demo --audio, the SimulEval agent)."""

from __future__ import annotations

from simulmt.core.prompt_format import language_code
from simulmt.core.sentence_ends import DEFAULT_MAX_WORDS
from simulmt.errors import SimulmtError


def trim_ms_for(step_ms: int) -> int:
    """The recogniser's ``trim_ms`` for a step: 12 s, or the step if longer."""
    return max(12000, step_ms)


def load_speech(speech_model: str | None, *, model: str | None = None, adapter: str = "auto",
                asr_model: str = "tiny.en", asr_step_ms: int = 1000, asr_pause_ms: int | None = None,
                asr_policy: str | None = None, asr_beam: int = 1, asr_later_step_ms: int = 0,
                source_lang: str = "en", target_lang: str = "de", max_words: int = DEFAULT_MAX_WORDS,
                **load_kwargs):
    """(what translates speech, its stream defaults): the recogniser feeding the text model (the default), or an
    end-to-end speech model folder with its card's layout, policy and tau. ``asr_pause_ms``, ``asr_policy``: the
    recogniser's ``pause_ms`` and ``policy`` (None: its defaults); ``asr_beam``: its ``beam_size``;
    ``asr_later_step_ms``: its ``later_step_ms``."""
    if speech_model is not None:
        from simulmt.speech.model import SpeechTranslator

        if load_kwargs.pop("head_vocabulary", None) is not None:
            raise SimulmtError("--head-vocabulary is for the text model behind the recogniser; an end-to-end "
                               "--speech-model computes its whole head")

        speech = SpeechTranslator.load(speech_model, **load_kwargs)
        return speech, speech.card_defaults
    from simulmt.speech.cascade import CascadeTranslator
    from simulmt.speech.recognizer import DEFAULT_PAUSE_MS, DEFAULT_POLICY, RecognizerOptions

    asr = RecognizerOptions(model=asr_model, step_ms=asr_step_ms, language=language_code(source_lang),
                            trim_ms=trim_ms_for(asr_step_ms), max_buffer_ms=30000,
                            pause_ms=DEFAULT_PAUSE_MS if asr_pause_ms is None else asr_pause_ms,
                            policy=DEFAULT_POLICY if asr_policy is None else asr_policy, beam_size=asr_beam,
                            later_step_ms=asr_later_step_ms)
    return CascadeTranslator.load(model, adapter, asr=asr, source_lang=source_lang, target_lang=target_lang,
                                  max_words=max_words, **load_kwargs), {}
