"""Policies are pure functions of the stream state; the delays they produce in real (greedy) streaming."""

from __future__ import annotations

import pytest
import torch

from helpers import SOURCE, tiny_translator
from simulmt.errors import SimulmtError
from simulmt.core.layouts import Conversation, Expost, GroupPositions, PrefixRecompute
from simulmt.core.policies import Action, Offline, ReadN, Scheduled, StreamState, WaitK, make_policy, wait_k_delays

X = len(SOURCE.split())
R, W = Action.READ, Action.WRITE


def test_wait_k_table():
    p = WaitK(3)
    assert [p.decide(StreamState(read, False, 0)) for read in range(5)] == [R, R, R, W, W]
    assert p.decide(StreamState(4, False, 2)) is R  # word 3 needs 3 + 3 - 1 = 5 units
    assert p.decide(StreamState(5, False, 2)) is W
    assert p.decide(StreamState(5, True, 9)) is W  # source finished: write to the end
    assert wait_k_delays(3, 5, 6) == [3, 4, 5, 5, 5, 5]


def test_read_n_table():
    p = ReadN(2, max_segment_words=3)
    assert p.decide(StreamState(0, False, 0)) is R
    assert p.decide(StreamState(1, False, 0, segment_reads=1)) is R
    assert p.decide(StreamState(2, False, 0, segment_reads=2)) is W
    assert p.decide(StreamState(2, False, 2, segment_reads=0, segment_words=2)) is W
    assert p.decide(StreamState(2, False, 3, segment_reads=0, segment_words=3)) is R  # the bound
    assert p.decide(StreamState(2, False, 1, segment_reads=0, segment_words=1, model_ended_segment=True)) is R
    assert p.decide(StreamState(3, True, 1, segment_reads=1)) is W
    assert ReadN(4).bound == 8


def test_offline_and_scheduled_tables():
    assert Offline().decide(StreamState(3, False, 0)) is R and Offline().decide(StreamState(3, True, 0)) is W
    s = Scheduled((2, 2, 4))
    assert [s.decide(StreamState(r, False, w)) for r, w in [(1, 0), (2, 0), (2, 2), (4, 2), (4, 3)]] == [R, W, R, W, R]


def test_bad_policy_arguments():
    for bad in (lambda: WaitK(0), lambda: ReadN(0), lambda: ReadN(2, 0), lambda: make_policy("wait-x")):
        with pytest.raises(SimulmtError):
            bad()


@pytest.mark.parametrize("layout", [Expost(slot=4), Expost(slot=16), PrefixRecompute(), GroupPositions(300),
                                    Conversation()], ids=lambda l: l.describe())
@pytest.mark.parametrize("k", [1, 3, 5])
def test_wait_k_delays_in_greedy_streaming(layout, k):
    result = tiny_translator("qwen2").translate(SOURCE, layout, WaitK(k))
    assert len(result.delays) == len(result.prediction.split()) > 0
    assert result.delays == [min(k + j, X) for j in range(len(result.delays))]


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("layout", [Expost(slot=4), Conversation()], ids=lambda l: l.describe())
def test_read_n_delays_are_multiples_of_n(layout, n):
    result = tiny_translator("llama").translate(SOURCE, layout, ReadN(n, max_segment_words=2))
    assert result.delays and all(d % n == 0 or d == X for d in result.delays)
    assert result.delays == sorted(result.delays)
    steps = sorted(set(result.delays))
    assert all(b - a <= n for a, b in zip([0] + steps, steps))  # n units at a time


def test_offline_writes_after_the_whole_source():
    result = tiny_translator("llama").translate(SOURCE, Expost(), Offline())
    assert result.delays and set(result.delays) == {X}


def test_a_learned_policy_per_arrival_reads_what_came_with_the_unit_before_asking_its_head():
    from simulmt.core.learned_policy import Learned, PolicyHead

    head = PolicyHead(torch.zeros(2, 4), torch.tensor([-5.0, 5.0]))  # p(WRITE) ~ 1
    features = torch.zeros(4)
    for per_arrival, waiting, expected in ((True, 2, Action.READ), (True, 0, Action.WRITE), (False, 2, Action.WRITE)):
        policy = Learned(0.5, head, per_arrival=per_arrival)
        state = StreamState(3, False, 1, segment_reads=1, features=features, source_waiting=waiting)
        assert policy.decide(state) is expected
        assert policy.consults_head(state) is (expected is Action.WRITE)
    # the end of a chunk, the start and a finished source do not depend on it
    arriving = Learned(0.5, head, per_arrival=True)
    assert arriving.decide(StreamState(3, True, 1, source_waiting=0)) is Action.WRITE
    assert arriving.decide(StreamState(3, False, 2, segment_words=1, source_waiting=2)) is Action.WRITE


def test_a_stream_counts_the_units_waiting_from_the_same_arrival():
    tr = tiny_translator("llama")
    stream = tr.new_stream("expost", WaitK(1))
    stream.push(["a", "b", "c"], arrivals=[0, 0, 1])
    stream.push(["d"])  # a new arrival of its own
    waiting = []
    for read in range(5):
        stream.state.units_read = read
        waiting.append(stream.stream_state().source_waiting)
    assert waiting == [0, 1, 0, 0, 0]
    with pytest.raises(SimulmtError, match="non-decreasing"):
        stream.push(["e", "f"], arrivals=[5, 4])
    with pytest.raises(SimulmtError, match="arrivals must number each"):
        stream.push(["e"], arrivals=[1])  # earlier than the words before it
