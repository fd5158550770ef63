"""simulmt inside the IWSLT harness: a SimulStream speech processor that runs a simulmt speech translator.

SimulStream (``simulstream`` on PyPI, the IWSLT 2026 simultaneous track's harness) feeds a processor audio chunks
of a whole talk and logs what it writes; ``simulstream_score_latency`` / ``simulstream_score_quality`` and
OmniSTEval score the log. This processor hears each chunk with simulmt's streaming recogniser and translates what
it confirms with one talk-level stream (``CascadeTranslator.session``: simulmt.core.talk), so a simulmt system runs
under ``simulstream_inference`` unchanged::

    # talk.yaml
    type: simulmt.evaluation.simulstream_processor.SimulmtProcessor
    speech_chunk_size: 1.0          # seconds of audio per chunk
    model: gemma-3-270m             # any simulmt model (a folder, a packaged name); adapter: auto
    layout: expost
    policy: wait-k
    k: 3
    context_pairs: 0                # earlier pairs of the talk as context (an adapter trained with them)
    detokenizer_type: simuleval     # (the scorers' settings: words, as this processor writes them)
    latency_unit: word

    simulstream_inference --speech-processor-config talk.yaml --wav-list-file wavs.txt \
        --metrics-log-file log.jsonl

Options (besides ``type`` and ``speech_chunk_size``): ``model``, ``adapter``, ``asr_model`` (tiny.en, base, or a
CTranslate2 folder), ``asr_step_ms``, ``asr_pause_ms``, ``asr_policy``, ``asr_beam``, ``asr_later_step_ms``,
``source_lang``, ``target_lang``, ``layout``, ``policy``,
``k``, ``n``, ``tau``, ``slot``, ``phi``, ``context_pairs``, ``context_tokens``, ``max_words``, ``device``, ``dtype``,
``head_vocabulary`` (text files, comma-separated: the text model's LM head over their tokens and the source heard).
The tokens it writes are words; ``tokens_to_string`` joins them with spaces.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

try:
    from simulstream.server.speech_processors import SpeechProcessor
    from simulstream.server.speech_processors.incremental_output import IncrementalOutput
except ImportError as exc:  # pragma: no cover - the longform extra
    raise ImportError("the SimulStream processor needs simulstream: pip install 'simulmt[longform]'") from exc

from simulmt.core.prompt_format import language_code
from simulmt.core.stream_options import DEFAULTS, StreamOptions
from simulmt.core.talk import ContextWindow
from simulmt.errors import SimulmtError

STREAM_OPTIONS = ("k", "n", "tau", "slot", "phi")


def _option(config: SimpleNamespace, name: str, default=None):
    return getattr(config, name, default)


class SimulmtProcessor(SpeechProcessor):
    _loaded: dict = {}  # the translator of each configuration, loaded once per process (``load_model``)

    @classmethod
    def _key(cls, config: SimpleNamespace) -> tuple:
        if isinstance(_option(config, "head_vocabulary"), (list, tuple)):  # (YAML: a list of files)
            config.head_vocabulary = ",".join(map(str, config.head_vocabulary))
        return tuple(_option(config, name) for name in (
            "model", "adapter", "asr_model", "asr_step_ms", "asr_pause_ms", "asr_policy", "asr_beam",
            "asr_later_step_ms", "source_lang",
            "target_lang", "max_words", "device", "dtype", "head_vocabulary"))

    @classmethod
    def load_model(cls, config: SimpleNamespace) -> None:
        from simulmt.core.sentence_ends import DEFAULT_MAX_WORDS
        from simulmt.speech.loading import load_speech

        key = cls._key(config)
        if key not in cls._loaded:
            translator, _ = load_speech(None, model=_option(config, "model"), adapter=_option(config, "adapter", "auto"),
                                        asr_model=_option(config, "asr_model", "tiny.en"),
                                        asr_step_ms=int(_option(config, "asr_step_ms", 1000)),
                                        asr_pause_ms=_option(config, "asr_pause_ms"),
                                        asr_policy=_option(config, "asr_policy"),
                                        asr_beam=int(_option(config, "asr_beam", 1)),
                                        asr_later_step_ms=int(_option(config, "asr_later_step_ms", 0)),
                                        source_lang=_option(config, "source_lang", "en"),
                                        target_lang=_option(config, "target_lang", "de"),
                                        max_words=int(_option(config, "max_words", DEFAULT_MAX_WORDS)),
                                        device=_option(config, "device"), dtype=_option(config, "dtype", "auto"),
                                        head_vocabulary=_option(config, "head_vocabulary"))
            cls._loaded[key] = translator

    def __init__(self, config: SimpleNamespace):
        super().__init__(config)
        self.translator = self._loaded.get(self._key(config))
        if self.translator is None:
            raise SimulmtError("SimulmtProcessor.load_model(config) must run before the processor is built "
                               "(simulstream's build_speech_processor does)")
        given = {name: getattr(config, name) for name in STREAM_OPTIONS if getattr(config, name, None) is not None}
        options = StreamOptions(_option(config, "layout", "expost"), _option(config, "policy", "wait-k"), **given)
        self.session_kwargs = {"layout": options.layout, "policy": options.policy,
                               **{name: options.value(name) for name in DEFAULTS},
                               "window": ContextWindow(int(_option(config, "context_pairs", 0)),
                                                       int(_option(config, "context_tokens", 384)))}
        self.session = self.translator.session(**self.session_kwargs)

    def _output(self, words) -> IncrementalOutput:
        tokens = [w.text for w in words]
        return IncrementalOutput(tokens, self.tokens_to_string(tokens), [], "")

    def process_chunk(self, waveform: np.ndarray) -> IncrementalOutput:
        """A chunk of 16 kHz audio (float32 in [-1, 1]): the words it let the translator write."""
        return self._output(list(self.session.push_audio(np.asarray(waveform, dtype=np.float32))))

    def end_of_stream(self) -> IncrementalOutput:
        return self._output(list(self.session.finish()))

    def set_source_language(self, language: str) -> None:
        if language and language_code(language) != language_code(self.translator.translator.source_lang):
            raise SimulmtError(f"this processor's translator hears {self.translator.translator.source_lang!r}, not "
                               f"{language!r}: set source_lang in its config")

    def set_target_language(self, language: str) -> None:
        if language and language_code(language) != language_code(self.translator.translator.target_lang):
            raise SimulmtError(f"this processor's translator writes {self.translator.translator.target_lang!r}, not "
                               f"{language!r}: set target_lang in its config")

    def tokens_to_string(self, tokens: list[str]) -> str:
        return " ".join(tokens)

    def clear(self) -> None:
        """The talk is over: the next one starts afresh."""
        self.session = self.translator.session(**self.session_kwargs)
