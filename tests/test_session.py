"""The streaming session: live input, bounds, bad input, and what it reports."""

from __future__ import annotations

import pytest

from helpers import SOURCE, tiny_translator
from tiny_models import set_execution
from simulmt.errors import SimulmtError
from simulmt.core.layouts import Expost
from simulmt.core.policies import ReadN, WaitK
from simulmt.core.runner import ContextOverflowError
from simulmt.core.session import DecodeConfig


def test_live_pushes_give_the_same_translation_as_a_whole_sentence(monkeypatch):
    tr = tiny_translator("gemma3")
    ahead = tr.translate(SOURCE, "expost", WaitK(2), slot=4)
    set_execution(monkeypatch, tr, read_ahead=False)  # given whole, a read's source is at hand (stream.py)
    whole = tr.translate(SOURCE, "expost", WaitK(2), slot=4)
    monkeypatch.undo()
    session = tr.session("expost", WaitK(2), slot=4)
    words, streamed = SOURCE.split(), []
    for i, w in enumerate(words):
        session.push([w], finished=False)
        streamed += [x.text for x in session.advance()]
        assert session.state.units_read == i + 1  # never reads what has not arrived
    session.push([], finished=True)
    streamed += [x.text for x in session.advance()]
    live = session.result()
    assert live.prediction == whole.prediction == " ".join(streamed)
    assert live.delays == whole.delays and live.tokens_fed == whole.tokens_fed
    assert (ahead.prediction, ahead.delays) == (whole.prediction, whole.delays)
    assert ahead.forward_calls <= live.forward_calls == whole.forward_calls


def test_read_n_waits_for_source_when_the_model_ends_a_segment():
    tr = tiny_translator("llama")
    session = tr.session("conversation", ReadN(3))
    session.push(SOURCE.split()[:2])
    assert list(session.advance()) == [] and session.state.units_read == 2  # needs 3 units before writing
    session.push(SOURCE.split()[2:], finished=True)
    list(session.advance())
    assert session.done


def test_empty_line_gives_an_empty_prediction_without_a_model_call():
    for text in ("", "   "):
        result = tiny_translator("llama").translate(text)
        assert result.prediction == "" and result.delays == [] and result.tokens_fed == 0


def test_target_length_is_bounded_whatever_the_model_does():
    tr = tiny_translator("phi3")
    config = DecodeConfig(max_len_a=1.0, max_len_b=2, max_tokens_per_word=3)
    result = tr.translate("one two three", "expost", WaitK(1), config=config)
    assert len(result.prediction.split()) <= 1.0 * 3 + 2
    session = tr.session("expost", WaitK(1), config=config)
    session.run("one two three")
    assert all(len(w.tokens) <= 3 for w in session.written)


def test_a_stream_longer_than_the_context_is_refused_clearly():
    tr = tiny_translator("llama")  # 512 positions
    with pytest.raises(ContextOverflowError, match="context of 512"):
        tr.translate(" ".join(["garden"] * 400), "expost", WaitK(3))


def test_pushing_after_the_end_is_an_error():
    session = tiny_translator("llama").session()
    session.push(["a"], finished=True)
    with pytest.raises(SimulmtError, match="already finished"):
        session.push(["b"])


def test_the_result_says_how_it_was_made():
    result = tiny_translator("llama").translate(SOURCE, Expost(slot=8), WaitK(4))
    assert (result.layout, result.policy, result.slot) == ("expost(slot=8)", "wait-4", 8)
    assert result.source_length == len(SOURCE.split()) and result.model == "tiny-llama"
    assert result.tokens_fed > 0 and result.flops > 0 and result.forward_calls > 0
    assert len(result.elapsed) == len(result.delays) and result.elapsed == sorted(result.elapsed)
    assert set(result.to_json()) >= {"source", "prediction", "delays", "elapsed", "tokens_fed", "flops", "layout",
                                     "policy"}


def test_flops_count_the_lm_head_only_where_logits_are_computed():
    tr = tiny_translator("llama")
    c = tr.runner.compute
    assert c.flops(10, 0, 1) == 2 * c.non_embedding_params * 10 + 2 * c.hidden * c.vocab
    assert c.flops(1, 5, 0) == 2 * c.non_embedding_params + 4 * c.layers * c.attention_width * 5
