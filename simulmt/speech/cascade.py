"""Speech translation as a cascade: the streaming recogniser (``recognizer.py``: Whisper + LocalAgreement) feeds
its confirmed words to a text translator (any layout and policy), as they are confirmed.

    audio pieces -> StreamingRecognizer -> confirmed words (each with the audio time it was confirmed at)
                 -> LiveText (sentence cuts: the recogniser's punctuation, or ``max_words``)
                 -> one text stream per sentence (``Stream.push`` with the update that confirmed each word as its
                    arrival) -> translated words

The words a transcript confirms arrive together (one arrival): a learned policy decides once per update. A target
word's delay is in source words over the whole talk, and in ms (``delays_ms``) it is the time its last source word
was confirmed. ``elapsed`` counts the recogniser's compute with the LLM's, so computation-aware latency (``*_CA``)
includes both. Memory is bounded for audio of any length: the recogniser's buffer is bounded (``trim_ms``) and
every sentence is a stream of its own (at most ``max_words`` words), so no context grows; what carries over from
one sentence to the next is only the recogniser's prompt (the last confirmed words).

``CascadeTranslator`` has the interface of ``SpeechTranslator`` (the EASiST model in ``model.py``): ``session``,
``translate``, ``translate_iter``, so every tool (translate --audio, evaluate --source-audio, bench --audio, demo
--audio, the SimulEval agent) runs either.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace

import numpy as np

from simulmt.core.stream import Translation, WrittenWord
from simulmt.errors import SimulmtError
from simulmt.live_text import Boundary, LiveText
from simulmt.segment import DEFAULT_MAX_WORDS
from simulmt.speech.model import SpeechTranslation, play, policy_for_speech
from simulmt.speech.recognizer import ConfirmedWord, RecognizerOptions, StreamingRecognizer, Whisper, as_float_audio


class CascadeTranslator:
    unit = "words"
    learned_decides = "once per recogniser update"  # (the run config of a learned speech run says it)

    def __init__(self, translator, whisper: Whisper, options: RecognizerOptions | None = None,
                 max_words: int = DEFAULT_MAX_WORDS):
        self.translator, self.whisper = translator, whisper
        self.options = options or whisper.options
        self.max_words = max_words

    @classmethod
    def load(cls, model: str | None = None, adapter: str | None = "auto", *, asr: RecognizerOptions | None = None,
             source_lang: str = "en", target_lang: str = "de", max_words: int = DEFAULT_MAX_WORDS,
             **load_kwargs) -> "CascadeTranslator":
        from simulmt.models import DEFAULT_MODEL
        from simulmt.translator import Translator

        from simulmt.core.prompt_format import language_code

        asr = asr or RecognizerOptions(language=language_code(source_lang))
        if asr.language != language_code(source_lang):
            raise SimulmtError(f"the recogniser hears {asr.language!r} but the translator's source is {source_lang!r}")
        translator = Translator.load(model or DEFAULT_MODEL, adapter, source_lang=source_lang,
                                     target_lang=target_lang, **load_kwargs)
        device = translator.runner.device.type
        return cls(translator, Whisper(asr, device="cuda" if device == "cuda" else "cpu"), asr, max_words)

    @property
    def name(self) -> str:
        return f"{self.translator.name} + whisper {self.options.model}"

    @property
    def dtype(self) -> str:
        return self.translator.dtype

    @property
    def piece_ms(self) -> float:
        """How much audio a live caller feeds at a time: one recogniser step."""
        return float(self.options.step_ms)

    # ---- live ------------------------------------------------------------------------------------------------
    def session(self, layout: str = "expost", policy: str = "wait-k", **kwargs) -> "CascadeSession":
        self.translator.check_stream(layout, policy, **kwargs)  # options that cannot work fail now
        kwargs = dict(kwargs)
        return CascadeSession(self, dict(layout=layout, policy=self._policy(policy, kwargs), **kwargs))

    def _policy(self, policy, kwargs: dict):
        """The policy (by name: ``k``/``n``/``tau`` taken out of ``kwargs``); a learned one decides once per
        recogniser update, on the last word it confirmed (as EASiST's decides once per block)."""
        return policy_for_speech(self.translator, policy, kwargs)

    def translate(self, audio: np.ndarray, layout: str = "expost", policy: str = "wait-k", *,
                  piece_ms: float | None = None, **kwargs) -> SpeechTranslation:
        """Translate a recording fed in pieces of ``piece_ms`` (default: the recogniser's step), as live audio
        would arrive (as fast as the compute allows)."""
        return play(self.session(layout, policy, **kwargs), audio, piece_ms or self.options.step_ms)

    def translate_iter(self, paths, batch_size: int = 1, **kwargs):
        """WAV files -> results in input order (an unreadable file: a result with ``error`` set). ``batch_size``
        1: each file as a live stream; more: each file's recognition first, then the sentences of up to
        ``batch_size`` files' on one engine (the same words and delays; ``elapsed``: the engine's time plus the
        recogniser's compute up to the update that confirmed the word's last source word)."""
        from simulmt.speech.translate_audio import read_audio

        layout, policy = kwargs.pop("layout", "expost"), kwargs.pop("policy", "wait-k")
        if batch_size > 1:
            yield from self._translate_batched(paths, batch_size, layout, policy, **kwargs)
            return
        for path in paths:
            try:
                result = self.translate(read_audio(path), layout, policy, **kwargs)
                result.source = str(path)
                yield result
            except SimulmtError as exc:
                yield _failed(str(path), layout, policy, str(exc))

    def recognise(self, audio: np.ndarray) -> tuple[list[ConfirmedWord], list[float], float]:
        """The confirmed words of a recording fed in steps, the recogniser's compute (seconds) after each update,
        and the audio's duration in ms."""
        recognizer = StreamingRecognizer(self.whisper, self.options)
        step = int(16 * self.options.step_ms)
        words: list[ConfirmedWord] = []
        spent: list[float] = []
        for start in range(0, len(audio), step):
            before = recognizer.updates
            words += recognizer.push(audio[start:start + step])
            if recognizer.updates > before:
                spent.append(recognizer.seconds)
        words += recognizer.finish()
        spent.append(recognizer.seconds)
        return words, spent, 1000.0 * len(audio) / 16000

    def _translate_batched(self, paths, batch_size: int, layout: str, policy: str, **kwargs):
        from simulmt.core.engine import Engine, run_ordered
        from simulmt.speech.translate_audio import read_audio

        self.translator.check_stream(layout, policy, **kwargs)
        kwargs = dict(kwargs)
        policy = self._policy(policy, kwargs)
        engine = Engine(self.translator.runner)
        files: list[dict] = []
        owner: dict[int, dict] = {}

        def streams():
            for path in paths:
                facts = dict(path=str(path), sentences=[], words=[], spent=[], duration=0.0, error=None)
                files.append(facts)
                started = time.perf_counter()
                try:
                    words, spent, duration = self.recognise(as_float_audio(read_audio(path)))
                    facts.update(words=words, spent=spent, duration=duration)
                    for sentence in cut_sentences([w.text for w in words], self.max_words):
                        stream = self.translator.new_stream(layout, policy, **kwargs)
                        chosen = words[sentence.start:sentence.stop]
                        stream.push([w.text for w in chosen], finished=True, arrivals=[w.update for w in chosen])
                        facts["sentences"].append(stream)
                        owner[id(stream)] = facts
                except SimulmtError as exc:
                    facts["error"] = str(exc)
                spent_here = time.perf_counter() - started
                for other in engine.streams:  # their clocks exclude this file's recognition
                    if other.t0 is not None:
                        other.t0 += spent_here
                yield from facts["sentences"]

        pending = 0
        for stream in run_ordered(streams(), engine, batch_size):
            owner.pop(id(stream))
            while pending < len(files) and all(s.done and id(s) not in owner for s in files[pending]["sentences"]):
                facts = files[pending]
                pending += 1
                if facts["error"] is not None:
                    yield _failed(facts["path"], layout, policy, facts["error"])
                    continue
                yield self._merged(facts, layout, policy)
        while pending < len(files):  # files without any sentence (silence) or failed before any
            facts = files[pending]
            pending += 1
            yield (_failed(facts["path"], layout, policy, facts["error"]) if facts["error"] is not None
                   else self._merged(facts, layout, policy))

    def _merged(self, facts: dict, layout: str, policy: str) -> SpeechTranslation:
        words, spent = facts["words"], facts["spent"]
        results, offsets = [], []
        offset = 0
        for stream in facts["sentences"]:
            results.append(stream.result())
            offsets.append(offset)
            offset += len(stream.source_words)
        merged = merge_sentences(results, offsets, layout, policy)
        asr_ms = [1000.0 * spent[min(words[d - 1].update, len(spent) - 1)] if d else 0.0 for d in merged.delays]
        merged.elapsed = [round(e + a, 3) for e, a in zip(merged.elapsed, asr_ms)]
        return SpeechTranslation(**{**asdict(merged), "source": facts["path"]},
                                 delays_ms=[words[d - 1].confirmed_ms if d else 0.0 for d in merged.delays],
                                 duration_ms=facts["duration"], encoder_ms=round(1000.0 * (spent[-1] if spent else 0),
                                                                                 3),
                                 adapter_ms=0.0, unit=self.unit, heard=" ".join(w.text for w in words))


class CascadeSession:
    """One live recording: ``push_audio`` pieces as they arrive, ``finish``; each yields the words written (their
    ``delay``: source words read over the whole recording)."""

    def __init__(self, owner: CascadeTranslator, session_kwargs: dict):
        self.owner, self.kwargs = owner, session_kwargs
        self.recognizer = StreamingRecognizer(owner.whisper, owner.options)
        self.live = sentence_cutter(owner.max_words)
        self.heard: list[ConfirmedWord] = []  # every confirmed word, in order
        self.text = None  # the current sentence's session
        self.results: list[Translation] = []
        self.offsets: list[int] = []  # source words before each finished sentence
        self.words_before = 0
        self.tokens_before = 0  # target tokens of the finished sentences
        self.t0: float | None = None

    def push_audio(self, samples: np.ndarray):
        """More audio (16 kHz mono, int16 or float); yields the words it let the translator write."""
        if self.t0 is None:
            self.t0 = time.perf_counter()
        yield from self._take(self.recognizer.push(samples), finished=False)

    def finish(self):
        """The end of the audio; yields the last words."""
        if self.t0 is None:
            self.t0 = time.perf_counter()
        yield from self._take(self.recognizer.finish(), finished=True)

    def _take(self, confirmed: list[ConfirmedWord], finished: bool):
        self.heard += confirmed
        actions = self.live.feed("".join(w.text + " " for w in confirmed))
        if finished:
            actions += self.live.end()
        by_text = iter(confirmed)  # LiveText gives a Word per confirmed word (one piece each, no length bound)
        batch: list[ConfirmedWord] = []
        for action in actions:
            if isinstance(action, Boundary):
                yield from self._push(batch, finished=False)
                batch = []
                yield from self._end_sentence()
                continue
            batch.append(next(by_text))
        yield from self._push(batch, finished=False)

    def _push(self, words: list[ConfirmedWord], finished: bool):
        if not words:
            return
        if self.text is None:
            self.text = self.owner.translator.session(**self.kwargs)
            self.text.t0 = self.t0  # elapsed counts from the first audio, the recogniser's compute included
        self.text.push([w.text for w in words], finished=finished, arrivals=[w.update for w in words])
        yield from self._offset(self.text.advance())

    def _end_sentence(self):
        if self.text is None:
            return
        self.text.push([], finished=True)
        yield from self._offset(self.text.advance())
        self.results.append(self.text.result())
        self.offsets.append(self.words_before)
        self.words_before += len(self.text.source_words)
        self.tokens_before += self._tokens(self.text)
        self.text = None

    @staticmethod
    def _tokens(text) -> int:
        from simulmt.core.placed import Role

        return sum(1 for t in text.state.tokens if t.role is Role.TARGET)

    def target_tokens(self) -> int:
        """Target tokens placed so far, over every sentence."""
        return self.tokens_before + (self._tokens(self.text) if self.text is not None else 0)

    def _offset(self, words):
        for word in words:
            yield replace(word, delay=word.delay + self.words_before if word.delay else 0)

    def heard_words(self) -> list[str]:
        """The words the recogniser confirmed so far."""
        return [w.text for w in self.heard]

    def delay_ms(self, word: WrittenWord) -> float:
        """The audio time at which the last source word read before ``word`` was confirmed."""
        return self.heard[word.delay - 1].confirmed_ms if word.delay else 0.0

    def result(self) -> SpeechTranslation:
        merged = merge_sentences(self.results, self.offsets, str(self.kwargs["layout"]),
                                 getattr(self.kwargs["policy"], "name", str(self.kwargs["policy"])))
        return SpeechTranslation(**asdict(merged), delays_ms=[self.heard[d - 1].confirmed_ms if d else 0.0
                                                              for d in merged.delays],
                                 duration_ms=self.recognizer.received_ms,
                                 encoder_ms=round(1000.0 * self.recognizer.seconds, 3), adapter_ms=0.0,
                                 unit="words", heard=" ".join(w.text for w in self.heard))


def sentence_cutter(max_words: int) -> LiveText:
    """Sentence cuts over the recogniser's words: its punctuation, or ``max_words`` (no bound on a word's length:
    the recogniser's words are a few tokens each)."""
    return LiveText(max_words, max_word_chars=1 << 30)


def cut_sentences(words: list[str], max_words: int) -> list[slice]:
    """The sentences the live path cuts a word sequence into, as slices of it."""
    live = sentence_cutter(max_words)
    actions = live.feed("".join(w + " " for w in words)) + live.end()
    cuts, start, index = [], 0, 0
    for action in actions:
        if isinstance(action, Boundary):
            if index > start:
                cuts.append(slice(start, index))
            start = index
        else:
            index += 1
    return cuts


def merge_sentences(results: list[Translation], offsets: list[int], layout: str, policy: str) -> Translation:
    """Consecutive sentences' results as one: predictions joined, delays over the whole recording."""
    merged = Translation(source=" ".join(r.source for r in results),
                         prediction=" ".join(r.prediction for r in results if r.prediction), delays=[], elapsed=[],
                         tokens_fed=0, flops=0.0, layout=results[0].layout if results else layout,
                         policy=results[0].policy if results else str(policy),
                         slot=results[0].slot if results else None, model=results[0].model if results else "")
    errors = []
    for result, offset in zip(results, offsets):
        merged.delays += [d + offset if d else 0 for d in result.delays]
        merged.elapsed += result.elapsed
        merged.source_length += result.source_length
        for name in ("tokens_fed", "flops", "forward_calls", "cache_crops", "refed_tokens", "speculated",
                     "speculated_kept", "stopped_forwards", "wall_ms"):
            setattr(merged, name, getattr(merged, name) + getattr(result, name))
        if result.error:
            errors.append(result.error)
    merged.error = "; ".join(errors) or None
    return merged


def _failed(path: str, layout, policy, error: str) -> SpeechTranslation:
    return SpeechTranslation(source=path, prediction="", delays=[], elapsed=[], tokens_fed=0, flops=0.0,
                             layout=str(layout), policy=str(policy), slot=None, error=error, unit="words")
