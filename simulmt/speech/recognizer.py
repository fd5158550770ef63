"""A streaming recogniser: Whisper (faster-whisper over CTranslate2) on a growing, bounded audio buffer.

Audio arrives in pieces (16 kHz mono). After every ``step_ms`` of new audio the buffer is transcribed again, with
word timestamps, and ``LocalAgreement`` (``local_agreement.py``) confirms the words on which the last ``agreement``
transcripts agree. A confirmed word is final: it goes to the translator at once, and its time is the audio time
at which it was confirmed (``confirmed_ms``: the audio received by then), which is what its translation waits for.
``finish`` confirms the rest.

Bounded: when the buffer is longer than ``trim_ms`` it is cut at the end of the last confirmed segment that ends a
sentence (else of the last confirmed segment: Whisper times segments, a safe place to cut), so it stays near a
sentence or two; the words confirmed before the buffer
go in the decoder's prompt (their last ``prompt_chars`` characters), which is all that carries over. A buffer that
reaches ``max_buffer_ms`` (Whisper's 30 s window) without any confirmed word to cut at is cut anyway, its words
confirmed as they stand. With ``vad`` (silero VAD, shipped in faster-whisper) silence in the buffer is skipped
before decoding. ``seconds`` counts the recogniser's compute (for computation-aware latency).

Pauses (``pause_ms``, voice_activity.py): silero VAD decides every 32 ms window as it arrives. When the audio has
been silent for ``pause_ms`` after speech, the speaker has paused: the next update confirms every word it hears at
once (no agreement to wait for: nothing more will be said of them), the buffer starts after the pause, and the
push says where (``pauses``: a talk can end its sentence there instead of waiting for the next word). An update
whose buffer holds no speech and no word waiting is not transcribed (the buffer is dropped): silence costs no
decoding. Updates come every ``step_ms`` of audio however it is cut into pieces. With ``later_step_ms``, once a
sentence's first ``fast_words`` words are confirmed an update transcribes only after ``later_step_ms`` of audio
since the last transcript, until a transcript begins the next sentence (a translation's first word waits for its
source's first words; the rest come later, with a quarter fewer transcripts: docs/speech-recogniser.md); every
update still listens for a pause.

Confirmed words reach the translator as a text writes them (``written_words.py``): with ``spell_numbers``
(English) Whisper's "2" is "two", with ``capitalise_starts`` a recording's first word (and the first after a pause)
has a capital.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from simulmt.errors import SimulmtError
from simulmt.core.sentence_ends import ends_sentence
from simulmt.speech.align_att import AlignAtt
from simulmt.speech.local_agreement import LocalAgreement, TimedWord
from simulmt.speech.repetition import FALLBACK_PENALTY, collapse_loops, degenerate, repetitiveness
from simulmt.speech.voice_activity import Silero, VoiceActivity
from simulmt.speech.wav import RATE
from simulmt.speech.written_words import written_words

DEFAULT_PAUSE_MS = 700  # RecognizerOptions.pause_ms, and every tool's --asr-pause-ms (docs/speech-recogniser.md)
POLICIES = ("local-agreement", "alignatt")  # RecognizerOptions.policy
SPEECH_PAD_MS = 200  # at a pause, the audio decoded runs this far past the last speech window
SILENT_TAIL = 400  # samples of silence after a buffer: its last log-mel frames are those of the buffer followed by
# silence (one STFT window; window_padding "silence")
WINDOW_PADDINGS = ("silence", "zeros")  # RecognizerOptions.window_padding
DEFAULT_POLICY = "local-agreement"  # RecognizerOptions.policy, and every tool's --asr-policy


@dataclass(frozen=True)
class RecognizerOptions:
    model: str = "tiny.en"  # a packaged Whisper name or a CTranslate2 folder
    language: str = "en"  # the source language (multilingual models: any Whisper language code)
    step_ms: int = 1000  # transcribe again after this much new audio
    later_step_ms: int = 0  # once fast_words words of a sentence are confirmed, transcribe after this much (0:
    # always step_ms; a sentence's first words come at step_ms, the rest later, with fewer transcripts)
    fast_words: int = 3  # (a wait-k translation's first word needs its source's first k words)
    policy: str = DEFAULT_POLICY  # which words are final: "local-agreement" (n transcripts agree) or "alignatt"
    # (a word whose cross-attention alignment ends margin_ms before the audio's end: align_att.py)
    agreement: int = 2  # LocalAgreement-n
    hold_ms: int = 0  # LocalAgreement: a word that ends this close to the end of the audio is not final yet
    agreement_lookback: int = 1  # LocalAgreement: the newest transcript may agree with any agreement-1 of the last
    # agreement-1+agreement_lookback ones (0: the consecutive ones before it, as published; measured in
    # docs/speech-recogniser.md: 1 confirms a line's third word 126 ms sooner at p95, the same WER and BLEU)
    agreement_cut_last: bool = False  # LocalAgreement: an earlier transcript's last word is no evidence (the audio may
    # have cut it)
    min_word_probability: float = 0.0  # LocalAgreement: a word the newest transcript gives a lower probability (its
    # tokens' product, the first one's case variants counted together) is not final yet, agreed or not (0: off)
    min_audio_ms: int = 1000  # no transcript of a buffer shorter than this (but at a pause or the end of the audio)
    margin_ms: int = 500  # AlignAtt: a word aligned this close to the end of the audio is not final yet
    trim_ms: int = 12000  # past this the buffer is cut after a confirmed word
    max_buffer_ms: int = 30000  # never longer (Whisper's window)
    prompt_chars: int = 200  # confirmed text before the buffer given to the decoder
    vad: bool = False  # skip silence in the buffer (silero VAD)
    word_timestamps: bool = False  # align every word (about twice the compute); else segments' times, spread
    window_ms: int = 10000  # a buffer up to this long is decoded in a window of this length (0: always 30 s)
    min_window_ms: int = 0  # else (not 0): in a window of whole seconds, a second past the buffer, at least this
    window_padding: str = "zeros"  # the window's frames after the audio: "zeros" (faster-whisper's padding) or
    # "silence" (Whisper's log-mel of the audio padded with zeros: the third word 150 ms sooner at p95, 0.26 BLEU
    # lower on flite's voices; docs/speech-recogniser.md); buffers decoded in the 30 s window (longer than
    # window_ms, window_ms 0, or vad) go through faster-whisper's padding either way
    compute_type: str = "int8"  # CTranslate2's weights on a CPU ("float32", "int8", ...); "default" on a GPU
    beam_size: int = 1  # the decoder's beam (1: greedy)
    threads: int = 0  # CTranslate2's CPU threads (0: its default)
    spell_numbers: bool = True  # English: a confirmed "2" is given as "two" ("Two" at a sentence's start), zero to
    # twelve, as a text writes them (spoken_numbers.py; other languages: as heard)
    capitalise_starts: bool = True  # a recording's first confirmed word, and the first after a pause, is given with
    # a capital (a transcript of the first second begins "two teams ..." now and then: written_words.py)
    pause_ms: int = DEFAULT_PAUSE_MS  # silence after speech this long (silero VAD) is a pause: its words are final
    # at once, the buffer starts after it, and the sentence ends there; silence alone is not transcribed (0: no VAD)

    def __post_init__(self):
        for name in ("step_ms", "agreement", "trim_ms", "max_buffer_ms", "beam_size"):
            if getattr(self, name) < 1:
                raise SimulmtError(f"recogniser option {name} must be at least 1, got {getattr(self, name)}")
        if self.policy not in POLICIES:
            raise SimulmtError(f"unknown recogniser policy {self.policy!r}; choose one of: {', '.join(POLICIES)}")
        if not 0.0 <= self.min_word_probability <= 1.0:
            raise SimulmtError(f"recogniser option min_word_probability must be within 0..1 (0: off), got "
                               f"{self.min_word_probability}")
        for name in ("margin_ms", "hold_ms", "min_audio_ms", "agreement_lookback"):
            if getattr(self, name) < 0:
                raise SimulmtError(f"recogniser option {name} must be at least 0, got {getattr(self, name)}")
        if self.pause_ms < 0:
            raise SimulmtError(f"recogniser option pause_ms must be at least 0 (0: off), got {self.pause_ms}")
        if not 0 <= self.min_window_ms <= self.window_ms or (self.min_window_ms and not self.window_ms):
            raise SimulmtError(f"recogniser option min_window_ms must be within 0..window_ms ({self.window_ms}), got "
                               f"{self.min_window_ms}")
        if self.window_padding not in WINDOW_PADDINGS:
            raise SimulmtError(f"unknown recogniser window_padding {self.window_padding!r}; choose one of: "
                               f"{', '.join(WINDOW_PADDINGS)}")
        if not 0 <= self.window_ms <= 30000:
            raise SimulmtError(f"recogniser option window_ms must be within 0..30000, got {self.window_ms}")
        if self.min_audio_ms > self.trim_ms:  # (a buffer is only cut after a transcript: it would grow unbounded)
            raise SimulmtError(f"recogniser option min_audio_ms ({self.min_audio_ms}) must not exceed trim_ms "
                               f"({self.trim_ms})")
        if self.later_step_ms and not self.step_ms <= self.later_step_ms <= self.trim_ms:
            raise SimulmtError(f"recogniser option later_step_ms must be 0 (off) or within step_ms..trim_ms "
                               f"({self.step_ms}..{self.trim_ms}), got {self.later_step_ms}")
        if self.fast_words < 0:
            raise SimulmtError(f"recogniser option fast_words must be at least 0, got {self.fast_words}")
        if not self.step_ms <= self.trim_ms <= self.max_buffer_ms <= 30000:
            raise SimulmtError(f"the recogniser needs step_ms <= trim_ms <= max_buffer_ms <= 30000, got "
                               f"{self.step_ms}, {self.trim_ms}, {self.max_buffer_ms}")


def agreement_label(options: RecognizerOptions = RecognizerOptions()) -> str:
    """How the recogniser decides which words are final, for run records: "LocalAgreement-2, lookback 1"."""
    if options.policy == "alignatt":
        return f"AlignAtt, margin {options.margin_ms} ms"
    extras = [f"lookback {options.agreement_lookback}"] if options.agreement > 1 else []  # (always for n > 1: runs
    # labelled "LocalAgreement-2" found re-heard confirmed words by time)
    extras += ["last word cut"] if options.agreement_cut_last else []
    return ", ".join([f"LocalAgreement-{options.agreement}", *extras])


@dataclass(frozen=True)
class ConfirmedWord:
    text: str
    start_ms: float
    end_ms: float
    confirmed_ms: float  # the audio received when it was confirmed
    update: int  # which transcript confirmed it (0, 1, ...; words of one update arrive together)


class Whisper:
    """A loaded Whisper model: ``transcribe(audio, prompt)`` -> words with times (ms from the audio's start)."""

    def __init__(self, options: RecognizerOptions = RecognizerOptions(), device: str = "cpu"):
        try:
            from faster_whisper import WhisperModel
        except ImportError:
            raise SimulmtError("the speech front end needs faster-whisper: pip install 'simulmt[speech]'") from None
        self.options = options
        source = whisper_folder(options.model)
        kwargs = {"files": source} if isinstance(source, dict) else {}
        compute_type = options.compute_type if device == "cpu" else "default"
        try:
            self.model = WhisperModel("in-memory" if kwargs else source, device=device, compute_type=compute_type,
                                      cpu_threads=options.threads, local_files_only=True, **kwargs)
        except (RuntimeError, ValueError, OSError) as exc:
            raise SimulmtError(f"cannot load the Whisper model {options.model!r}: {exc}") from None
        if not self.model.model.is_multilingual and options.language != "en":
            raise SimulmtError(f"the Whisper model {options.model!r} is English-only; for "
                               f"--source-lang {options.language} use a multilingual one (--asr-model base)")
        from faster_whisper.tokenizer import Tokenizer

        multilingual = self.model.model.is_multilingual
        self.tokenizer = Tokenizer(self.model.hf_tokenizer, multilingual, task="transcribe",
                                   language=options.language if multilingual else None)

    @property
    def voice_model(self) -> Silero:
        """The voice activity model that finds pauses (``pause_ms``): silero VAD, loaded once, shared by every stream
        of this model (each keeps its own state)."""
        if getattr(self, "_voice", None) is None:
            self._voice = Silero()
        return self._voice

    def transcribe(self, audio: np.ndarray, prompt: str = "") -> list[TimedWord]:
        """Decoding (greedy, or a beam of ``beam_size``) with the decoder's segment timestamps; a word's time is its
        segment's, spread over the segment's words by their length, unless ``word_timestamps`` aligns each word
        (cross-attention, slower). A transcript that loops is decoded again without the prompt and with repeats
        penalised (the less repetitive of the two is kept), and a loop left keeps its first copies (repetition.py;
        a segment end among the copies dropped moves to the last copy kept, so the buffer can still be cut there)."""
        window = self.options.window_ms
        aligned = self.options.word_timestamps or self.options.policy == "alignatt"
        if window and 1000.0 * len(audio) / RATE <= window and not self.options.vad:
            words = self._windowed(audio, prompt, aligned)
        else:
            words, audio_ms = self._full_window(audio, prompt, aligned), 1000.0 * len(audio) / RATE
            if degenerate([w.text for w in words], audio_ms):
                again = self._full_window(audio, "", aligned, FALLBACK_PENALTY)
                words = min((again, words), key=lambda heard: repetitiveness([w.text for w in heard], audio_ms))
        kept = collapse_loops([w.text for w in words])
        out = [words[i] for i in kept]
        for j, (i, after) in enumerate(zip(kept, kept[1:] + [len(words)])):
            if not out[j].ends_segment and any(w.ends_segment for w in words[i + 1:after]):
                out[j] = replace(out[j], ends_segment=True)
        return out

    def _full_window(self, audio: np.ndarray, prompt: str, aligned: bool,
                     repetition_penalty: float = 1.0) -> list[TimedWord]:
        """faster-whisper's decoding in Whisper's 30 s window (a longer buffer, or ``vad``)."""
        segments, _ = self.model.transcribe(
            audio, language=self.options.language, beam_size=self.options.beam_size, temperature=0.0,
            word_timestamps=aligned, condition_on_previous_text=False, initial_prompt=prompt or None,
            vad_filter=self.options.vad, without_timestamps=False, suppress_blank=True,
            repetition_penalty=repetition_penalty)
        words: list[TimedWord] = []
        for segment in segments:
            if aligned:
                timed = [("".join(w.word.split()), 1000.0 * w.start, 1000.0 * w.end) for w in segment.words or []]
            else:
                timed = _spread(segment.text.split(), 1000.0 * segment.start, 1000.0 * segment.end)
            timed = [t for t in timed if t[0]]  # one piece each, no spaces
            words += [TimedWord(text, start, end, ends_segment=i == len(timed) - 1)
                      for i, (text, start, end) in enumerate(timed)]
        return words

    def _windowed(self, audio: np.ndarray, prompt: str, aligned: bool = False) -> list[TimedWord]:
        """Decoding (greedy, or a beam of ``beam_size``) of ``audio`` in a ``window_ms`` window (log-mel frames
        padded to it, not to 30 s), with the decoder's segment timestamps; the same prompt and suppressed tokens as
        faster-whisper's decoding; the frames after the audio as ``window_padding`` says (``log_mel_window``).
        ``aligned``: each word's times from the cross-attention alignment of the transcript to the audio
        (CTranslate2's ``align``, as faster-whisper's word timestamps), not spread over its segment."""
        import ctranslate2

        tok, model = self.tokenizer, self.model
        frames = int(encoder_window_ms(self.options, 1000.0 * len(audio) / RATE) / 10)  # 10 ms a frame
        window, content = log_mel_window(model.feature_extractor, audio, frames, self.options.window_padding)
        encoded = model.model.encode(ctranslate2.StorageView.from_array(window[None]), to_cpu=False)
        audio_ms = 1000.0 * len(audio) / RATE
        segments = self._decode(encoded, prompt, audio_ms)

        def texts(decoded: list) -> list[str]:
            return [w for _, _, ids, _ in decoded for w in tok.decode(ids).split()]
        if degenerate(texts(segments), audio_ms):  # a loop (repetition.py): again without the prompt (which may
            # hold the loop), repeats penalised; the less repetitive of the two is kept
            again = self._decode(encoded, "", audio_ms, repetition_penalty=FALLBACK_PENALTY)
            segments = min((again, segments), key=lambda decoded: repetitiveness(texts(decoded), audio_ms))
        if aligned:
            return self._aligned(encoded, segments, content, audio_ms)
        return self._spread_words(segments)

    def _decode(self, encoded, prompt: str, audio_ms: float, repetition_penalty: float = 1.0) -> list:
        """The decoder's segments (``(start_ms, end_ms, token ids, token probabilities)``) for encoded audio, after
        ``prompt``; the probabilities are 1.0 unless ``word_probabilities`` is on."""
        tok, model = self.tokenizer, self.model
        previous = tok.encode(" " + prompt.strip())[-(224 - 1):] if prompt.strip() else []
        tokens = ([tok.sot_prev, *previous] if previous else []) + list(tok.sot_sequence)
        scored = self.word_probabilities
        result = model.model.generate(encoded, [tokens], beam_size=self.options.beam_size, max_length=448,
                                      suppress_blank=True, suppress_tokens=[-1], max_initial_timestamp_index=50,
                                      repetition_penalty=repetition_penalty, return_logits_vocab=scored)[0]
        ids = result.sequences_ids[0]
        probabilities = self._token_probabilities(ids, result.logits[0]) if scored else [1.0] * len(ids)
        segments, text, chances, start_ms = [], [], [], 0.0
        for token, chance in zip(ids, probabilities):
            if token >= tok.timestamp_begin:  # a timestamp: it ends the text before it, and starts what follows
                at_ms = min(audio_ms, 20.0 * (token - tok.timestamp_begin))
                if text:
                    segments.append((start_ms, at_ms, text, chances))
                    text, chances = [], []
                start_ms = at_ms
            elif token < tok.eot:
                text.append(token)
                chances.append(chance)
        if text:  # (cut off without a closing timestamp: it runs to the end of the audio)
            segments.append((start_ms, audio_ms, text, chances))
        return segments

    @property
    def word_probabilities(self) -> bool:
        """Are the words' probabilities computed (``TimedWord.probability``)? With ``min_word_probability``, or when
        asked (``want_probabilities``: a recording of the transcripts for replays). The decoder then returns every
        step's scores over the vocabulary: a little host work a token."""
        return self.options.min_word_probability > 0 or getattr(self, "want_probabilities", False)

    def _token_probabilities(self, ids: list[int], logits: list) -> list[float]:
        """Each generated token's probability under the decoder's scores at its step (softmax over the whole
        vocabulary, timestamps included), a word-initial token's case variant counted with it ("The" and "the":
        transcripts agree on words without case)."""
        chances = []
        for token, row in zip(ids, logits):
            scores = np.asarray(row, dtype=np.float32).ravel()
            if token >= len(scores):
                chances.append(1.0)
                continue
            exp = np.exp(scores - scores.max())
            variant = self._case_variant(token)
            chances.append(float((exp[token] + (exp[variant] if variant is not None else 0.0)) / exp.sum()))
        return chances

    def _case_variant(self, token: int) -> int | None:
        """The one token that is ``token``'s text with its first letter's case swapped (" The" -> " the"), if any."""
        cache = self.__dict__.setdefault("_variants", {})
        if token not in cache:
            text = self.tokenizer.decode([token]) if token < self.tokenizer.eot else ""
            stripped = text.lstrip()
            found = None
            if stripped[:1].isalpha():
                swapped = text[:len(text) - len(stripped)] + stripped[0].swapcase() + stripped[1:]
                encoded = self.tokenizer.encode(swapped)
                found = encoded[0] if len(encoded) == 1 and encoded[0] != token else None
            cache[token] = found
        return cache[token]

    def _spread_words(self, segments: list) -> list[TimedWord]:
        """The words of the decoded segments (``(start, end, token ids, probabilities)``), timed by spreading each
        segment's time over its words."""
        words: list[TimedWord] = []
        for start, end, ids, chances in segments:
            texts = self.tokenizer.decode(ids).split()
            timed = _spread(texts, start, max(start, end))
            chance = self._word_chances(ids, chances, len(texts))
            timed = [(*t, p) for t, p in zip(timed, chance) if t[0]]
            words += [TimedWord(text, s, e, ends_segment=i == len(timed) - 1, probability=p)
                      for i, (text, s, e, p) in enumerate(timed)]
        return words

    def _word_chances(self, ids: list[int], chances: list[float], count: int) -> list[float]:
        """The probability of each of the ``count`` words ``ids`` decode to: the product of its tokens' (a token
        belongs to the word its text ends in; one of punctuation alone is left out, as words are compared without
        it; 1.0 for each word when they are not computed)."""
        words = [1.0] * count
        if not self.word_probabilities or not count:
            return words
        for j, chance in enumerate(chances):
            if not any(c.isalnum() for c in self.tokenizer.decode([ids[j]])):
                continue
            index = min(count, max(1, len(self.tokenizer.decode(ids[:j + 1]).split()))) - 1
            words[index] *= chance
        return words


    def _aligned(self, encoded, segments: list, frames: int, audio_ms: float) -> list[TimedWord]:
        """The words of the decoded segments (``(start, end, token ids, probabilities)``), each timed by the
        cross-attention alignment of the whole transcript to the first ``frames`` mel frames (dynamic time warping
        over Whisper's alignment heads); punctuation joins the word before it. A segment's last word ends a
        segment."""
        tokens = [t for _, _, ids, _ in segments for t in ids]
        if not tokens:
            return []
        try:
            found = self.model.find_alignment(self.tokenizer, [tokens], encoded, frames)[0]
        except IndexError:  # no alignment (faster-whisper fails on an empty one, e.g. a few frames of audio)
            return self._spread_words(segments)
        ends = set(np.cumsum([len(ids) for _, _, ids, _ in segments]).tolist())  # token counts at segment ends
        chances = [c for _, _, _, cs in segments for c in cs]  # (1.0 each without word_probabilities)
        words: list[TimedWord] = []
        count = 0
        for item in found:
            chance = float(np.prod([chances[k] for k in range(count, count + len(item["tokens"]))
                                    if any(c.isalnum() for c in self.tokenizer.decode([tokens[k]]))]))
            count += len(item["tokens"])
            text = item["word"].strip()
            start, end = min(audio_ms, 1000.0 * float(item["start"])), min(audio_ms, 1000.0 * float(item["end"]))
            if not text:
                continue
            if words and (not item["word"].startswith(" ") or all(c in _PUNCTUATION for c in text)):
                last = words[-1]  # (a piece of the word before, or its punctuation)
                words[-1] = TimedWord(last.text + text, last.start_ms, max(last.end_ms, end), count in ends,
                                      last.probability * chance)
                continue
            words.append(TimedWord(text, start, end, count in ends, chance))
        return words


def encoder_window_ms(options: RecognizerOptions, audio_ms: float) -> int:
    """The window a buffer of ``audio_ms`` (at most ``window_ms``) is decoded in: ``window_ms``, or with
    ``min_window_ms`` the whole seconds a second past the audio, at least ``min_window_ms`` (Whisper invents words
    in a window much shorter than its training's: 7 s heard flite's voices as well as 10 s, 5 s did not;
    docs/speech-recogniser.md)."""
    if not options.min_window_ms:
        return options.window_ms
    return min(options.window_ms, max(options.min_window_ms, 1000 * (math.ceil(audio_ms / 1000) + 1)))


def log_mel_window(feature_extractor, audio: np.ndarray, frames: int, padding: str = "zeros") -> tuple[np.ndarray, int]:
    """Whisper's scaled log-mel frames of ``audio`` in a window of ``frames`` (10 ms each), and how many of them
    hold the audio. ``padding``: "zeros" fills the rest with 0 (faster-whisper's padding, and openai-whisper's
    ``transcribe``: in Whisper's scaling a fixed level, log10 power -4, not silence); "silence" with what Whisper's
    log-mel gives audio padded with zeros (as its training saw a short recording: the floor, log10 power 8 below
    the loudest frame's and at least -10; the buffer's last frames computed with silence after it), the same
    frames as Whisper's log-mel of the padded audio (tested)."""
    silence = padding == "silence"
    features = feature_extractor(np.pad(audio, (0, SILENT_TAIL)) if silence else audio)[:, :frames]
    floor = max(float(features.max()) - 2.0, -1.5) if features.size else -1.5  # ((max - 8 + 4) / 4, (-10 + 4) / 4)
    window = np.full((features.shape[0], frames), floor if silence else 0.0, dtype=np.float32)
    window[:, :features.shape[1]] = features
    return window, min(frames, len(audio) // feature_extractor.hop_length + 1)


_PUNCTUATION = set(".,!?;:\"'»«“”‘’…-—)(")


def _spread(words: list[str], start_ms: float, end_ms: float) -> list[tuple[str, float, float]]:
    """A segment's words with times spread over it by their length (characters + 1)."""
    weights = [len(w) + 1 for w in words]
    total, out, at = sum(weights) or 1, [], start_ms
    for word, weight in zip(words, weights):
        step = (end_ms - start_ms) * weight / total
        out.append((word, at, at + step))
        at += step
    return out


def whisper_folder(name: str):
    """A packaged Whisper name -> its CTranslate2 folder (or, for a model split across packages, a dict of its
    files in memory); a folder -> itself."""
    from pathlib import Path

    from simulmt.speech.whisper_ct2 import PACKAGED_WHISPER, whisper_model_files

    if name not in PACKAGED_WHISPER:
        if not (Path(name) / "model.bin").is_file():
            raise SimulmtError(f"no Whisper model {name!r}: give a packaged name ({', '.join(PACKAGED_WHISPER)}) "
                               f"or a CTranslate2 Whisper folder (with model.bin)")
        return str(name)
    files = whisper_model_files(name)  # raises with the pip command when the package is missing
    folders = {Path(p).parent for p in files}
    if len(folders) == 1 and (next(iter(folders)) / "model.bin").is_file():
        return str(next(iter(folders)))
    return _in_memory(files)


def _in_memory(files) -> dict:
    """A model whose model.bin is split over packages: the joined bytes and the small files, by name."""
    from pathlib import Path

    parts = [Path(p) for p in files]  # in order (whisper_model_files)
    found = {"model.bin": b"".join(p.read_bytes() for p in parts)}
    for folder in dict.fromkeys(p.parent for p in parts):  # config, tokenizer, vocabulary: beside a part
        for path in sorted(folder.iterdir()):
            if path.suffix in (".json", ".txt") and path.name not in found:
                found[path.name] = path.read_bytes()
    return found


@dataclass
class StreamingRecognizer:
    """One audio stream: ``push`` pieces, ``finish``; each returns the words it confirmed."""

    whisper: Whisper
    options: RecognizerOptions = field(default_factory=RecognizerOptions)
    buffer: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    offset_ms: float = 0.0  # the audio time of the buffer's first sample
    received_ms: float = 0.0
    since_update: int = 0  # samples since the last update
    updates: int = 0
    seconds: float = 0.0  # recogniser compute
    before_buffer: list[str] = field(default_factory=list)  # confirmed words before the buffer (the prompt)
    pauses: list[int] = field(default_factory=list)  # where the speaker paused, as positions in the words the last
    # ``push`` returned (i: after the first i; a sentence ends there)
    pause_count: int = 0  # pauses heard so far
    words_since_pause: int = 0  # words confirmed since the last pause (a pause after none is not counted)
    words_in_sentence: int = 0  # words confirmed since the last pause or sentence end (later_step_ms)
    next_sentence_begun: bool = False  # the newest transcript's words not confirmed yet begin the next sentence
    decoded_ms: float = 0.0  # the audio received at the last update that could transcribe (later_step_ms)
    last_heard: str | None = None  # the last confirmed word as Whisper wrote it (None: the next one starts a
    # sentence, at the start and after a pause: written_words)

    def __post_init__(self):
        self.agreement = (AlignAtt(margin_ms=self.options.margin_ms) if self.options.policy == "alignatt"
                          else LocalAgreement(self.options.agreement, hold_ms=self.options.hold_ms,
                                             lookback=self.options.agreement_lookback,
                                             min_probability=self.options.min_word_probability,
                                             cut_last=self.options.agreement_cut_last))
        self.voice: VoiceActivity | None = None
        if self.options.pause_ms:
            model = getattr(self.whisper, "voice_model", None)
            if model is None:
                raise SimulmtError(f"pause_ms needs a voice activity model; {type(self.whisper).__name__} has none")
            self.voice = VoiceActivity(model)

    def push(self, samples: np.ndarray) -> list[ConfirmedWord]:
        """More audio -> the words confirmed by the updates it completes: one after every ``step_ms`` of audio,
        however the audio comes in pieces (a long piece is several steps; with ``later_step_ms`` some updates only
        listen for a pause)."""
        samples = as_float_audio(samples)
        step = max(1, RATE * self.options.step_ms // 1000)
        out: list[ConfirmedWord] = []
        self.pauses = []
        while len(samples):
            piece, samples = samples[:step - self.since_update], samples[step - self.since_update:]
            if self.voice is not None:
                started = time.perf_counter()
                self.voice.push(piece)
                self.seconds += time.perf_counter() - started
            self.buffer = np.concatenate([self.buffer, piece])
            self.received_ms += 1000.0 * len(piece) / RATE
            self.since_update += len(piece)
            if self.since_update >= step:
                paused_before = self.pause_count
                out += self._update(final=False)
                if self.pause_count > paused_before:
                    self.pauses.append(len(out))
        return out

    def step_now_ms(self) -> int:
        """The audio between transcripts now: ``step_ms``, or ``later_step_ms`` once ``fast_words`` words of the
        sentence being spoken are confirmed and no transcript has begun the next one."""
        later = self.options.later_step_ms and self.words_in_sentence >= self.options.fast_words \
            and not self.next_sentence_begun
        return self.options.later_step_ms if later else self.options.step_ms

    def finish(self) -> list[ConfirmedWord]:
        self.pauses = []
        return self._update(final=True) if len(self.buffer) else []

    def _update(self, final: bool) -> list[ConfirmedWord]:
        started = time.perf_counter()
        self.since_update = 0
        paused = False
        if self.voice is not None and not final:
            if not self.voice.speech_since(self.offset_ms) and not any(self.agreement.history[-1:]):
                self._drop_silence()  # nothing said since the buffer began, nothing heard waiting: no decoding
                self.seconds += time.perf_counter() - started
                return []
            paused = self.voice.trailing_silence_ms() >= self.options.pause_ms
        if not final and not paused and self.received_ms - self.decoded_ms < self.step_now_ms() - 0.5:
            self.seconds += time.perf_counter() - started
            return []  # (later_step_ms: not yet; a pause is still heard at every step)
        self.decoded_ms = self.received_ms
        if not final and not paused and 1000.0 * len(self.buffer) / RATE < self.options.min_audio_ms:
            self.seconds += time.perf_counter() - started
            return []  # too little audio yet: a transcript of half a second invents its first word
        prompt = " ".join(self.before_buffer)[-self.options.prompt_chars:]
        audio = self.buffer
        if paused:  # decode the speech, not the silence after it (where Whisper invents words: measured, loops)
            speech_end_ms = self.voice.heard_ms - self.voice.trailing_silence_ms()
            audio = self.buffer[:max(0, int((speech_end_ms + SPEECH_PAD_MS - self.offset_ms) * RATE / 1000))]
        words = [replace(w, start_ms=w.start_ms + self.offset_ms, end_ms=w.end_ms + self.offset_ms)
                 for w in (self.whisper.transcribe(audio, prompt) if len(audio) else [])]
        if paused:
            words = [w for w in words if w.start_ms < speech_end_ms]
        confirmed = self.agreement.update(words, self.offset_ms + 1000.0 * len(audio) / RATE)
        if final or paused:  # the audio is over, or the speaker paused: what is heard now is final
            confirmed += self.agreement.flush()
        elif 1000.0 * len(self.buffer) / RATE >= self.options.max_buffer_ms and not confirmed:
            confirmed += self.agreement.flush(but_last=True)  # the window is full and nothing agreed: take it as
            # it stands, but the last word (the audio may cut it)
        out = [ConfirmedWord(text, w.start_ms, w.end_ms, self.received_ms, self.updates)
               for w, text in zip(confirmed, self._written([w.text for w in confirmed]))]
        self.updates += 1
        self.words_since_pause += len(out)
        self.words_in_sentence, self.next_sentence_begun = sentence_progress(
            self.words_in_sentence, confirmed, self.agreement.history[-1] if self.agreement.history else [],
            ended=paused or final)
        if paused and self.words_since_pause:
            self.pause_count, self.words_since_pause = self.pause_count + 1, 0
        self._trim(final or paused)
        if paused:  # the next utterance is decoded on its own: a prompt of what came before the pause invites
            self.before_buffer = []  # Whisper to say it again (measured: loops of the last words on one voice)
            self.last_heard = None  # (the talk ends its sentence at a pause)
        self.seconds += time.perf_counter() - started
        return out

    def _written(self, texts: list[str]) -> list[str]:
        """Confirmed words as the translator gets them (``spell_numbers``: English only; ``capitalise_starts``)."""
        texts, self.last_heard = written_words(
            texts, self.last_heard, spell_numbers=self.options.spell_numbers and self.options.language == "en",
            capitalise_starts=self.options.capitalise_starts)
        return texts

    def _drop_silence(self) -> None:
        """The buffer holds silence only: it goes (the confirmed words before it stay the prompt)."""
        self.offset_ms += 1000.0 * len(self.buffer) / RATE
        self.buffer = self.buffer[:0]
        self.voice.forget_before(self.offset_ms)

    def _trim(self, final: bool) -> None:
        """Cut the buffer after a confirmed word once it is longer than ``trim_ms`` (all of it at the end)."""
        length_ms = 1000.0 * len(self.buffer) / RATE
        if final:
            cut_ms = self.offset_ms + length_ms
        elif length_ms <= self.options.trim_ms:
            return
        else:
            inside = [w for w in self.agreement.confirmed if w.end_ms > self.offset_ms]
            if not inside:
                if length_ms < self.options.max_buffer_ms:
                    return
                cut_ms = self.offset_ms + length_ms - self.options.trim_ms  # nothing confirmed: drop the oldest
            else:
                safe = [w for w in inside if w.ends_segment]  # a segment end: no word is cut in two
                if not safe:
                    if length_ms < self.options.max_buffer_ms:
                        return
                    safe = inside
                ends = [w for w in safe if ends_sentence(w.text, "X")]
                cut_ms = (ends or safe)[-1].end_ms
        cut = int(round((cut_ms - self.offset_ms) * RATE / 1000.0))
        self.buffer = self.buffer[max(0, cut):]
        self.offset_ms = cut_ms
        self.before_buffer = [w.text for w in self.agreement.confirmed if w.end_ms <= cut_ms][-60:]
        self.agreement.in_buffer = sum(1 for w in self.agreement.confirmed if w.end_ms > cut_ms)
        self.agreement.confirmed = self.agreement.confirmed[-60:]  # bounded: only the tail is ever compared
        if self.voice is not None:
            self.voice.forget_before(cut_ms)


def sentence_progress(words_in_sentence: int, confirmed: list[TimedWord], pending: list[TimedWord],
                      ended: bool) -> tuple[int, bool]:
    """After an update (``later_step_ms``): how many words of the sentence being spoken are confirmed (after
    ``confirmed``, what the update confirmed, as Whisper wrote them; 0 when the audio ``ended`` or paused), and
    whether the newest transcript's words not confirmed yet (``pending``: the agreement's last history) end that
    sentence and begin the next (then its first words are near, and ``step_ms`` is back; Whisper ends six in ten
    partial transcripts with a full stop, so a sentence end with no word after it says nothing)."""
    ends = [i for i, w in enumerate(confirmed) if ends_sentence(w.text, "X")]
    count = 0 if ended else (len(confirmed) - 1 - ends[-1] if ends else words_in_sentence + len(confirmed))
    return count, any(ends_sentence(w.text, after.text) for w, after in zip(pending, pending[1:]))


def as_float_audio(samples: np.ndarray) -> np.ndarray:
    """16 kHz mono as float32 in [-1, 1] (int16 samples are scaled)."""
    samples = np.asarray(samples)
    if samples.ndim != 1:
        raise SimulmtError(f"audio must be mono (one channel): got an array of shape {samples.shape}")
    if samples.dtype == np.int16:
        return samples.astype(np.float32) / 32768.0
    if samples.dtype.kind != "f":
        raise SimulmtError(f"audio samples must be int16 or float, got {samples.dtype}")
    return samples.astype(np.float32, copy=False)
