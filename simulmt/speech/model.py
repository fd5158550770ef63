"""Speech in, text out: a streaming speech encoder + the speech adapter + a text translator, as one model.

    audio pieces --StreamingEncoder--> encoder blocks (final) --SpeechAdapter--> embeddings per block
                 --Stream.push_embedded--> placed source tokens that carry embeddings --Engine--> target words

A source unit is a block of audio (``StreamingEncoderConfig.block_ms``), or, for a model that reads the words its
CTC head spells (``reads="ctc-words"``, simulmt.speech.spelled_words), a word as for text. Over blocks, every policy
counts blocks where it counts words for text (wait-k: write word j once k + j - 1 blocks are read; a learned policy
decides after each block). A word's delay in ms is the audio time at which the last unit read before it became
available (``BlockSpan.available_ms``; a spelled word's: that of the block that completed it); the
computation-aware delay adds the wall time spent so far (encoder, adapter, CTC head, LLM).

Loading: ``SpeechTranslator.load(folder)`` reads a speech model folder (``speech.json``: the LLM, its adapter,
the speech encoder and the block configuration; the speech adapter's weights; the encoder's trained top layers and
the policy head, if any; the CTC head of a model that reads spelled words).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from simulmt.core.placed import Role
from simulmt.core.learned_policy import HEAD_FILE, Learned, PolicyHead
from simulmt.core.session import StreamingSession, Translation, WrittenWord
from simulmt.errors import SimulmtError
from simulmt.speech.adapter import SpeechAdapter
from simulmt.speech.ctc import CTCScorer
from simulmt.speech.encoder_top import apply_tuned
from simulmt.speech.spelled_words import SpelledWords, spelled_words, word_start_ids
from simulmt.speech.streaming_encoder import (EncodedBlock, StreamingEncoder, StreamingEncoderConfig,
                                              encode_utterance, utterance_spans)

SPEECH_FILE = "speech.json"
READS = ("embeddings", "ctc-words")  # what the LLM reads: the adapter's embeddings, or the words its CTC head spells
#: the speech model that ships inside the package (gemma-3-270m En->De; its data card: README.md there)
SHIPPED_SPEECH_MODEL = Path(__file__).resolve().parent / "models" / "gemma-3-270m-easist-en-de"


def default_speech_model() -> Path:
    """The shipped speech model's folder, or a clear error when this installation lacks it."""
    if not (SHIPPED_SPEECH_MODEL / SPEECH_FILE).is_file():
        raise SimulmtError(f"no speech model given and the shipped one is missing ({SHIPPED_SPEECH_MODEL}): pass "
                           f"--speech-model DIR (simulmt finetune-speech's OUT/model)")
    return SHIPPED_SPEECH_MODEL


@dataclass
class SpeechTranslation(Translation):
    """A ``Translation`` whose source units are audio blocks or spelled words (``unit``): ``delays`` in units,
    ``delays_ms`` in audio time, ``duration_ms`` the audio's length, ``encoder_ms`` / ``adapter_ms`` the compute
    spent on them (the adapter's includes the CTC head's), ``heard`` the words a CTC head spelled ("" for blocks)."""

    delays_ms: list[float] = field(default_factory=list)
    duration_ms: float = 0.0
    encoder_ms: float = 0.0
    adapter_ms: float = 0.0
    unit: str = "blocks"
    heard: str = ""


@dataclass(frozen=True)
class SpeechModelCard:
    """``speech.json``: what a speech model folder is made of."""

    model: str  # the LLM (a packaged name, a directory or a hub id)
    adapter: str | None  # the LLM's LoRA adapter (relative to the folder, or absolute), with the markers
    encoder: str  # the speech encoder: a packaged Whisper name ("tiny.en", "base") or a CTranslate2 folder
    block_ms: int = 640
    left_context_ms: int = 5120
    lookahead_ms: int = 0
    source_lang: str = "en"
    target_lang: str = "de"
    reads: str = "embeddings"  # one of READS
    layout: str = "interleaved"  # what it was trained for: the defaults of every tool that runs it
    policy: str = "wait-k"
    tau: float = 0.5

    def __post_init__(self):
        from simulmt.core.layouts import LAYOUTS
        from simulmt.core.policies import POLICIES

        if self.reads not in READS:
            raise SimulmtError(f"{SPEECH_FILE}: reads is {self.reads!r}; this simulmt knows {', '.join(READS)}")
        if self.layout not in LAYOUTS or self.policy not in POLICIES or not 0.0 <= self.tau <= 1.0:
            raise SimulmtError(f"{SPEECH_FILE}: layout {self.layout!r}, policy {self.policy!r}, tau {self.tau}: "
                               f"layouts are {', '.join(LAYOUTS)}; policies {', '.join(POLICIES)}; tau in 0..1")

    @property
    def stream_config(self) -> StreamingEncoderConfig:
        return StreamingEncoderConfig(self.block_ms, self.left_context_ms, self.lookahead_ms)


def read_card(folder: str | Path) -> SpeechModelCard:
    """A speech model folder's ``speech.json``, or a clear error."""
    path = Path(folder) / SPEECH_FILE
    if not path.is_file():
        raise SimulmtError(f"not a speech model folder (no {SPEECH_FILE}): {folder}")
    try:
        return SpeechModelCard(**json.loads(path.read_text()))
    except (TypeError, ValueError) as exc:  # an unknown or missing field, invalid JSON
        raise SimulmtError(f"{path} is not a speech model card: {exc}") from None


def _adapter_of(folder: Path, adapter: str | None) -> str:
    """speech.json's LLM adapter: none, a folder (absolute, or relative to the speech model's), or a shipped
    adapter's name."""
    if adapter is None:
        return "none"
    path = Path(adapter) if Path(adapter).is_absolute() else folder / adapter
    return str(path) if path.exists() else adapter


class SpeechTranslator:
    decide_per_block = True  # a learned policy decides on the last word each block brings (False: after every word)

    @property
    def learned_decides(self) -> str:
        """When a learned policy decides (a run directory of the other kind is not resumed)."""
        return "once per block" if self.decide_per_block else "after every word"

    def __init__(self, translator, encoder, extractor, adapter: SpeechAdapter,
                 config: StreamingEncoderConfig = StreamingEncoderConfig(), speller: CTCScorer | None = None):
        if adapter.config.llm_dim != translator.model.get_input_embeddings().weight.shape[1]:
            raise SimulmtError(f"the speech adapter gives {adapter.config.llm_dim}-dim embeddings but the LLM's are "
                               f"{translator.model.get_input_embeddings().weight.shape[1]}-dim")
        if adapter.config.encoder_dim != encoder.config.d_model:
            raise SimulmtError(f"the speech adapter takes {adapter.config.encoder_dim}-dim frames but the encoder "
                               f"gives {encoder.config.d_model}-dim ones")
        self.translator, self.encoder, self.extractor = translator, encoder, extractor
        if speller is not None and speller.free is None:
            raise SimulmtError("a speech model reads the words of a free CTC head (--ctc-head free), not a tied one")
        if speller is not None and speller.free.in_features != adapter.config.llm_dim:
            raise SimulmtError(f"the CTC head takes {speller.free.in_features}-dim frames but the speech adapter "
                               f"gives {adapter.config.llm_dim}-dim ones")
        self.adapter, self.config = adapter.eval(), config
        self.speller = None if speller is None else speller.eval()  # set: the LLM reads the words it spells
        self.word_starts = frozenset() if speller is None else word_start_ids(translator.tokenizer, speller.vocab)

    @classmethod
    def load(cls, folder: str | Path, **load_kwargs) -> "SpeechTranslator":
        from simulmt.speech.whisper_ct2 import whisper_encoder
        from simulmt.translator import Translator

        folder = Path(folder)
        if not (folder / SPEECH_FILE).is_file():
            raise SimulmtError(f"not a speech model folder (no {SPEECH_FILE}): {folder}")
        card = read_card(folder)
        model = str(folder / card.model) if (folder / card.model).is_dir() else card.model  # a folder beside it
        translator = Translator.load(model, adapter=_adapter_of(folder, card.adapter), source_lang=card.source_lang,
                                     target_lang=card.target_lang, **load_kwargs)
        encoder, extractor = whisper_encoder(card.encoder)
        apply_tuned(encoder, folder)  # the encoder layers trained with the adapter, if any
        if (folder / HEAD_FILE).is_file():  # the speech policy head (trained on blocks) replaces a text one
            translator.policy_head = PolicyHead.load(folder)
        speller = CTCScorer.load(folder) if card.reads == "ctc-words" else None
        speech = cls(translator, encoder, extractor, SpeechAdapter.load(folder), card.stream_config, speller)
        speech.card = card
        return speech

    card: SpeechModelCard | None = None  # what load() read (None: built from parts)

    @property
    def card_defaults(self) -> dict:
        """The layout, policy and tau the model was trained for: the defaults of every tool that runs it."""
        card = self.card or SpeechModelCard(model="", adapter=None, encoder="")
        return {"layout": card.layout, "policy": card.policy, "tau": card.tau}

    @property
    def piece_ms(self) -> float:
        """How much audio a live caller feeds at a time: one encoder block."""
        return float(self.config.block_ms)

    # ---- blocks -> embeddings --------------------------------------------------------------------------------
    @torch.no_grad()
    def embed(self, blocks: list[torch.Tensor]) -> list[torch.Tensor]:
        """Encoder blocks -> the LLM-space embeddings of each (the adapter on each block alone)."""
        return [self.adapter(b).float() for b in blocks]

    def spelling(self) -> SpelledWords:
        """A fresh utterance's spelling state (a model that reads spelled words)."""
        return SpelledWords(self.speller, self.translator.tokenizer.decode, self.word_starts)

    def encode(self, audio: np.ndarray) -> list[torch.Tensor]:
        """A whole utterance's encoder blocks, exactly those streaming gives (training uses this)."""
        return encode_utterance(audio, self.config, self.encoder, self.extractor)

    @property
    def unit(self) -> str:
        """What a policy counts on this model's source side: "blocks" of audio, or the "words" its CTC head spells."""
        return "blocks" if self.speller is None else "words"

    @property
    def name(self) -> str:
        return f"{self.translator.name}+speech({self.encoder.config.d_model}-dim encoder)"

    @property
    def dtype(self) -> str:
        """What the LLM computes with (the encoder and the adapter stay as loaded)."""
        return self.translator.dtype

    def translate_iter(self, paths, batch_size: int = 1, **kwargs):
        """``Translator.translate_iter`` for recordings (``wav.read_audio``), results in input order; a file that fails
        gives a result with ``error`` set. ``batch_size`` 1: one utterance at a time, fed as a live stream (so *_CA
        measures what one live stream costs); more: that many utterances advanced together on the model
        (``_translate_batched``: the same predictions and delays)."""
        from simulmt.speech.wav import read_audio

        layout, policy = kwargs.pop("layout", "interleaved"), kwargs.pop("policy", "wait-k")
        if batch_size > 1:
            yield from self._translate_batched(paths, batch_size, layout, policy, **kwargs)
            return
        for path in paths:
            try:
                result = self.translate(read_audio(path), layout, policy, **kwargs)
                result.source = str(path)  # the log names the file (the blocks' times are in the delays)
                yield result
            except SimulmtError as exc:
                yield SpeechTranslation(source=str(path), prediction="", delays=[], elapsed=[], tokens_fed=0,
                                        flops=0.0, layout=str(layout), policy=str(policy), slot=None,
                                        error=str(exc))

    def _translate_batched(self, paths, batch_size: int, layout: str, policy: str, **kwargs):
        """Up to ``batch_size`` utterances at a time on one engine (:func:`simulmt.core.engine.run_ordered`).
        Each file is encoded whole into exactly the blocks streaming gives (``encode``), and its stream reads them
        as its policy asks, so predictions and delays equal the live path's (tests/test_speech_model.py). A
        word's ``elapsed`` is its stream's time in the engine (sharing forwards with the others) plus the encoder
        and adapter time of the blocks read before it (the utterance's time, pro rata over its blocks; a spelled
        word counts the blocks up to the one that completed it)."""
        from simulmt.core.engine import Engine, run_ordered
        from simulmt.speech.wav import read_audio

        facts: dict[int, dict] = {}  # id(stream) -> path, per unit: available ms and blocks read; the compute
        engine = Engine(self.translator.runner)
        kwargs = dict(kwargs)
        policy = self._policy(policy, kwargs)  # (takes k, n, tau out of kwargs)

        def streams():
            for path in paths:
                stream = self.translator.new_stream(layout, policy, **kwargs)
                facts[id(stream)] = dict(path=str(path), available=[], blocks_read=[], blocks=0, duration=0.0,
                                         encoder_ms=0.0, adapter_ms=0.0)
                started = time.perf_counter()
                try:
                    audio = read_audio(path)
                    begun = time.perf_counter()
                    blocks = self.encode(audio)
                    encoded = time.perf_counter()
                    embeddings = self.embed(blocks)
                    spans = utterance_spans(self.config, len(audio), self.encoder.config.max_source_positions)
                    available = [span.available_ms for span in spans]
                    if self.speller is not None:  # units are the words the CTC head spells
                        words, arrivals = spelled_words(self.spelling, embeddings, end=len(blocks))
                        completed = [min(b, len(blocks) - 1) for b in arrivals]  # (the end: in the last block)
                        available, blocks_read = [available[b] for b in completed], [b + 1 for b in completed]
                    else:
                        blocks_read = list(range(1, len(available) + 1))
                    facts[id(stream)] = dict(path=str(path), available=available, blocks_read=blocks_read,
                                             blocks=len(blocks), duration=len(audio) / 16.0,
                                             encoder_ms=1000 * (encoded - begun),
                                             adapter_ms=1000 * (time.perf_counter() - encoded))
                    if self.speller is not None:
                        stream.push(words, finished=True, arrivals=arrivals)
                    else:
                        stream.push_embedded(embeddings, finished=True, labels=[
                            f"[{b.start_ms / 1000:.2f}-{b.end_ms / 1000:.2f}s]" for b in spans])
                except SimulmtError as exc:
                    stream.error = exc
                spent = time.perf_counter() - started
                for other in engine.streams:  # their clocks exclude this file's reading and encoding
                    if other.t0 is not None:
                        other.t0 += spent
                yield stream

        for stream in run_ordered(streams(), engine, batch_size):
            f = facts.pop(id(stream))
            base = stream.result()
            per_block = (f["encoder_ms"] + f["adapter_ms"]) / f["blocks"] if f["blocks"] else 0.0
            elapsed = [round(e + per_block * (f["blocks_read"][d - 1] if d else 0), 3)
                       for e, d in zip(base.elapsed, base.delays)]
            yield SpeechTranslation(**{**asdict(base), "source": f["path"], "elapsed": elapsed},
                                    delays_ms=[f["available"][d - 1] if d else 0.0 for d in base.delays],
                                    duration_ms=f["duration"], encoder_ms=round(f["encoder_ms"], 3),
                                    adapter_ms=round(f["adapter_ms"], 3), unit=self.unit,
                                    heard=base.source if self.speller is not None else "")

    # ---- streaming -------------------------------------------------------------------------------------------
    def session(self, layout: str = "interleaved", policy: str = "wait-k", **kwargs) -> "SpeechSession":
        kwargs = dict(kwargs)
        policy = self._policy(policy, kwargs)  # (takes k, n, tau out of kwargs)
        return SpeechSession(self, self.translator.session(layout, policy, **kwargs))

    def _policy(self, policy, kwargs: dict):
        """The policy (by name: with ``k``/``n``/``tau`` taken from ``kwargs``); a learned one decides once per
        block of audio, on the last word the block brought (``decide_per_block``; EASiST's rule)."""
        return policy_for_speech(self.translator, policy, kwargs, per_arrival=self.decide_per_block)

    def translate(self, audio: np.ndarray, layout: str = "interleaved", policy: str = "wait-k", *,
                  piece_ms: float | None = None, **kwargs) -> SpeechTranslation:
        """Translate one utterance (16 kHz mono, int16 or float32), fed in pieces of ``piece_ms`` (default: one
        block) as a live stream would be."""
        return play(self.session(layout, policy, **kwargs), audio, piece_ms or self.config.block_ms)


class SpeechSession:
    """One live utterance: ``push_audio`` pieces as they arrive, ``finish``; each yields the words written."""

    def __init__(self, owner: SpeechTranslator, text: StreamingSession):
        self.owner, self.text = owner, text
        self.encoder = StreamingEncoder(owner.config, owner.encoder, owner.extractor)
        self.blocks: list[EncodedBlock] = []
        self.units_ms: list[float] = []  # per source unit pushed (a block, or a spelled word): when it was available
        self.spelling = None if owner.speller is None else owner.spelling()
        self.adapter_seconds = 0.0
        self.t0: float | None = None

    def _feed(self, blocks: list[EncodedBlock], finished: bool):
        if self.t0 is None:
            self.t0 = time.perf_counter()
        started = time.perf_counter()
        embeddings = self.owner.embed([b.frames for b in blocks])
        first = len(self.blocks)  # the index of the first of these blocks in the utterance
        self.blocks += blocks
        words: list[str] = []
        arrivals: list[int] = []  # per word: the block that brought it (the end: one past the last block)
        if self.spelling is not None:  # the units are the words the CTC head spells
            for i, (block, frames) in enumerate(zip(blocks, embeddings)):
                new = self.spelling.push(frames)
                words += new
                arrivals += [first + i] * len(new)
                self.units_ms += [block.available_ms] * len(new)
            if finished:  # the word left is complete at the end of the audio
                new = self.spelling.finish()
                words += new
                arrivals += [len(self.blocks)] * len(new)  # an arrival of its own, as in the batched path (which
                # cannot tell which blocks a live finish() brought): a learned policy may decide once more there
                self.units_ms += [self.blocks[-1].available_ms if self.blocks else 0.0] * len(new)
        self.adapter_seconds += time.perf_counter() - started
        if self.spelling is not None:
            if words or finished:
                self.text.push(words, finished=finished, arrivals=arrivals)
        elif blocks or finished:
            self.units_ms += [b.available_ms for b in blocks]
            self.text.push_embedded(embeddings, finished=finished,
                                    labels=[f"[{b.start_ms / 1000:.2f}-{b.end_ms / 1000:.2f}s]" for b in blocks])
        yield from self.text.advance()

    def push_audio(self, samples: np.ndarray):
        """More audio (16 kHz mono); yields the words it let the translator write."""
        if self.t0 is None:
            self.t0 = time.perf_counter()
            self.text.t0 = self.t0  # the words' elapsed times count from the first audio, encoder included
        blocks = self.encoder.push(samples)
        if blocks:
            yield from self._feed(blocks, finished=False)

    def finish(self):
        """The end of the audio; yields the last words."""
        yield from self._feed(self.encoder.finish(), finished=True)

    def heard_words(self) -> list[str]:
        """The source words read in so far (spelled by a CTC head; none for a model that reads blocks)."""
        return list(self.text.source_words) if self.spelling is not None else []

    def target_tokens(self) -> int:
        """Target tokens placed so far."""
        return sum(1 for t in self.text.state.tokens if t.role is Role.TARGET)

    def delay_ms(self, word: WrittenWord) -> float:
        """Audio time at which the last source unit read before ``word`` (a block, or the block that completed a
        spelled word) was available."""
        return self._units_ms(word.delay)

    def _units_ms(self, units_read: int) -> float:
        return self.units_ms[units_read - 1] if units_read else 0.0

    def result(self) -> SpeechTranslation:
        base = self.text.result()
        delays_ms = [self._units_ms(d) for d in base.delays]
        compute = self.encoder.compute
        return SpeechTranslation(**asdict(base), delays_ms=delays_ms, duration_ms=compute.audio_ms,
                                 encoder_ms=round(1000 * (compute.encoder_seconds + compute.feature_seconds), 3),
                                 adapter_ms=round(1000 * self.adapter_seconds, 3), unit=self.owner.unit,
                                 heard=base.source if self.spelling is not None else "")


def play(session, audio: np.ndarray, piece_ms: float):
    """Feed a recording to a live speech session in pieces of ``piece_ms``, as fast as the compute allows; its
    result."""
    step = int(16 * piece_ms)
    for start in range(0, len(audio), step):
        for _ in session.push_audio(audio[start:start + step]):
            pass
    for _ in session.finish():
        pass
    return session.result()


def policy_for_speech(translator, policy, kwargs: dict, per_arrival: bool = True):
    """The policy (by name: ``k``/``n``/``tau`` taken out of ``kwargs``); with ``per_arrival`` a learned one
    decides once per arrival of speech (a block, or a recogniser update), on its last unit (EASiST's rule)."""
    policy = translator.make_policy(policy, **{key: kwargs.pop(key) for key in ("k", "n", "tau") if key in kwargs})
    if isinstance(policy, Learned) and per_arrival and not policy.per_arrival:
        policy = replace(policy, per_arrival=True)
    return policy


def block_delays_ms(config: StreamingEncoderConfig, num_samples: int) -> list[float]:
    """``available_ms`` of every block of an utterance of ``num_samples`` (what ``delays`` in blocks map to)."""
    return [span.available_ms for span in utterance_spans(config, num_samples)]
