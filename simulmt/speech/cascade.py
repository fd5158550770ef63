"""Speech translation as a cascade: the streaming recogniser (``recognizer.py``: Whisper + LocalAgreement) feeds
its confirmed words to a text translator (any layout and policy), as they are confirmed.

    audio pieces -> StreamingRecognizer -> confirmed words (each with the audio time it was confirmed at)
                 -> one talk-level stream (simulmt.core.talk: it cuts sentences at the recogniser's punctuation,
                    at a pause of ``pause_ms`` between two words, or at ``max_words``; ``Stream.push`` with the
                    update that confirmed each word as its arrival)
                 -> translated words

The words a transcript confirms arrive together (one arrival): a learned policy decides once per update. A target
word's delay is in source words over the whole talk, and in ms (``delays_ms``) it is the time its last source word
was confirmed. ``elapsed`` counts the recogniser's compute with the LLM's, so computation-aware latency (``*_CA``)
includes both. Memory is bounded for audio of any length: the recogniser's buffer is bounded (``trim_ms``) and
the talk's cache row holds its context window and one sentence (at most ``max_words`` words); what carries over
from one sentence to the next is the recogniser's prompt (the last confirmed words) and the context the window
asks for (none by default).

``CascadeTranslator`` has the interface of ``SpeechTranslator`` (the EASiST model in ``model.py``): ``session``,
``translate``, ``translate_iter``, so every tool (translate --audio, evaluate --source-audio, bench --audio, demo
--audio, the SimulEval agent) runs either.
"""

from __future__ import annotations

import time
from dataclasses import asdict

import numpy as np

from simulmt.core.stream import Translation, WrittenWord
from simulmt.errors import SimulmtError
from simulmt.core.sentence_ends import DEFAULT_MAX_WORDS
from simulmt.speech.model import SpeechTranslation, play, policy_for_speech
from simulmt.speech.recognizer import ConfirmedWord, RecognizerOptions, StreamingRecognizer, Whisper, as_float_audio


DEFAULT_PAUSE_MS = 1000.0  # a silence between heard words that ends a sentence (hesitations are shorter)

class CascadeTranslator:
    unit = "words"
    learned_decides = "once per recogniser update"  # (the run config of a learned speech run says it)

    def __init__(self, translator, whisper: Whisper, options: RecognizerOptions | None = None,
                 max_words: int = DEFAULT_MAX_WORDS, pause_ms: float = DEFAULT_PAUSE_MS):
        self.translator, self.whisper = translator, whisper
        self.options = options or whisper.options
        self.max_words = max_words
        self.pause_ms = pause_ms  # a silence this long between two heard words ends the sentence there

    @classmethod
    def load(cls, model: str | None = None, adapter: str | None = "auto", *, asr: RecognizerOptions | None = None,
             source_lang: str = "en", target_lang: str = "de", max_words: int = DEFAULT_MAX_WORDS,
             pause_ms: float = DEFAULT_PAUSE_MS, **load_kwargs) -> "CascadeTranslator":
        from simulmt.models import DEFAULT_MODEL
        from simulmt.translator import Translator

        from simulmt.core.prompt_format import language_code

        asr = asr or RecognizerOptions(language=language_code(source_lang))
        if asr.language != language_code(source_lang):
            raise SimulmtError(f"the recogniser hears {asr.language!r} but the translator's source is {source_lang!r}")
        translator = Translator.load(model or DEFAULT_MODEL, adapter, source_lang=source_lang,
                                     target_lang=target_lang, **load_kwargs)
        device = translator.runner.device.type
        return cls(translator, Whisper(asr, device="cuda" if device == "cuda" else "cpu"), asr, max_words, pause_ms)

    @property
    def name(self) -> str:
        return f"{self.translator.name} + whisper {self.options.model}"

    @property
    def dtype(self) -> str:
        return self.translator.dtype

    @property
    def head_vocabulary(self) -> str | None:
        return self.translator.head_vocabulary

    @property
    def piece_ms(self) -> float:
        """How much audio a live caller feeds at a time: one recogniser step."""
        return float(self.options.step_ms)

    # ---- live ------------------------------------------------------------------------------------------------
    def session(self, layout: str = "expost", policy: str = "wait-k", **kwargs) -> "CascadeSession":
        """A live recording; ``kwargs``: the stream's options, and ``window`` (a ``ContextWindow``: earlier pairs
        of the talk as context)."""
        window = kwargs.pop("window", None)
        self.translator.check_stream(layout, policy, **kwargs)  # options that cannot work fail now
        kwargs = dict(kwargs)
        policy = self._policy(policy, kwargs)
        return CascadeSession(self, dict(layout=layout, policy=policy, **kwargs,
                                         **({"window": window} if window is not None else {})))

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
        """Recordings (``wav.read_audio``) -> results in input order (an unreadable file: a result with ``error`` set).
        ``batch_size`` 1: each file as a live stream; more: each file's recognition first, then the sentences of up to
        ``batch_size`` files' on one engine (the same words and delays; ``elapsed``: the engine's time plus the
        recogniser's compute up to the update that confirmed the word's last source word)."""
        from simulmt.speech.wav import read_audio

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

    def recognise(self, audio: np.ndarray) -> tuple[list[ConfirmedWord], list[float], float, list[int]]:
        """The confirmed words of a recording fed in steps, the recogniser's compute (seconds) after each update,
        the audio's duration in ms, and where the speaker paused (``pause_ms``: after how many of the words)."""
        recognizer = StreamingRecognizer(self.whisper, self.options)
        step = int(16 * self.options.step_ms)
        words: list[ConfirmedWord] = []
        spent: list[float] = []
        pauses: list[int] = []
        for start in range(0, len(audio), step):
            before = recognizer.updates
            got = recognizer.push(audio[start:start + step])
            words += got
            pauses += [len(words) - len(got) + i for i in recognizer.pauses]
            if recognizer.updates > before:
                spent.append(recognizer.seconds)
        words += recognizer.finish()
        spent.append(recognizer.seconds)
        return words, spent, 1000.0 * len(audio) / 16000, pauses

    def _translate_batched(self, paths, batch_size: int, layout: str, policy: str, **kwargs):
        from simulmt.core.engine import Engine, run_ordered
        from simulmt.speech.wav import read_audio

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
                    words, spent, duration, pauses = self.recognise(as_float_audio(read_audio(path)))
                    facts.update(words=words, spent=spent, duration=duration)
                    talk = self.translator.new_talk(layout, policy, max_words=self.max_words, **kwargs)
                    push_heard(talk, words, None, self.pause_ms, finished=True, pauses=pauses)
                    facts["sentences"].append(talk)
                    owner[id(talk)] = facts
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
        merged = facts["sentences"][0].result() if facts["sentences"] else merge_sentences([], [], layout, policy)
        asr_ms = [1000.0 * spent[min(words[d - 1].update, len(spent) - 1)] if d else 0.0 for d in merged.delays]
        merged.elapsed = [round(e + a, 3) for e, a in zip(merged.elapsed, asr_ms)]
        return SpeechTranslation(**{**asdict(merged), "source": facts["path"]},
                                 delays_ms=[words[d - 1].confirmed_ms if d else 0.0 for d in merged.delays],
                                 duration_ms=facts["duration"], encoder_ms=round(1000.0 * (spent[-1] if spent else 0),
                                                                                 3),
                                 adapter_ms=0.0, unit=self.unit, heard=" ".join(w.text for w in words))


class CascadeSession:
    """One live recording: ``push_audio`` pieces as they arrive, ``finish``; each yields the words written (their
    ``delay``: source words read over the whole recording). The confirmed words go to one ``Talk`` stream (the
    talk-level stream of ``translate`` and ``evaluate --docids``: it cuts the sentences, keeps the context the
    ``window`` asks for) on an engine of its own."""

    def __init__(self, owner: CascadeTranslator, session_kwargs: dict):
        self.owner, self.kwargs = owner, session_kwargs
        self.recognizer = StreamingRecognizer(owner.whisper, owner.options)
        self.talk = owner.translator.talk_session(max_words=owner.max_words, **session_kwargs)
        self.heard: list[ConfirmedWord] = []  # every confirmed word, in order
        self.t0: float | None = None

    def push_audio(self, samples: np.ndarray):
        """More audio (16 kHz mono, int16 or float); yields the words it let the translator write."""
        self._start()
        yield from self._take(self.recognizer.push(samples), finished=False)

    def finish(self):
        """The end of the audio; yields the last words."""
        self._start()
        yield from self._take(self.recognizer.finish(), finished=True)

    def _start(self) -> None:
        if self.t0 is None:
            self.t0 = time.perf_counter()
            self.talk.t0 = self.t0  # elapsed counts from the first audio, the recogniser's compute included

    def _take(self, confirmed: list[ConfirmedWord], finished: bool):
        before = self.heard[-1] if self.heard else None
        self.heard += confirmed
        pauses = () if finished else self.recognizer.pauses  # where the speaker paused (voice activity)
        if confirmed or finished or pauses:
            push_heard(self.talk, confirmed, before, self.owner.pause_ms, finished, pauses=pauses)
        yield from self.talk.advance()

    def target_tokens(self) -> int:
        """Target tokens placed so far, over every sentence."""
        return self.talk.target_tokens_before + (0 if self.talk.done_talk else len(self.talk.target_tokens))

    def heard_words(self) -> list[str]:
        """The words the recogniser confirmed so far."""
        return [w.text for w in self.heard]

    def delay_ms(self, word: WrittenWord) -> float:
        """The audio time at which the last source word read before ``word`` was confirmed."""
        return self.heard[word.delay - 1].confirmed_ms if word.delay else 0.0

    def result(self) -> SpeechTranslation:
        merged = self.talk.result()
        return SpeechTranslation(**asdict(merged), delays_ms=[self.heard[d - 1].confirmed_ms if d else 0.0
                                                              for d in merged.delays],
                                 duration_ms=self.recognizer.received_ms,
                                 encoder_ms=round(1000.0 * self.recognizer.seconds, 3), adapter_ms=0.0,
                                 unit="words", heard=" ".join(w.text for w in self.heard))


def push_heard(talk, words: list[ConfirmedWord], before: ConfirmedWord | None, pause_ms: float,
               finished: bool, pauses=()) -> None:
    """Confirmed words into a talk (each with the update that confirmed it as its arrival); a silence of
    ``pause_ms`` or more between two words (the recogniser's times) ends the sentence there, where the recogniser
    gave no punctuation (a pause is how a speaker ends one). ``pauses``: where the recogniser's voice activity
    heard a pause, as positions in ``words`` (i: after the first i words): the sentence ends there too, without
    waiting for the next word."""
    group: list[ConfirmedWord] = []
    for i, word in enumerate(words):
        if i in pauses or (before is not None and word.start_ms - before.end_ms >= pause_ms):
            if group:
                talk.push([w.text for w in group], arrivals=[w.update for w in group])
                group = []
            talk.cut()
        group.append(word)
        before = word
    if group or finished:
        talk.push([w.text for w in group], finished=finished, arrivals=[w.update for w in group] or None)
    if len(words) in pauses and not finished:
        talk.cut()


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
