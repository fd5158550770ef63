"""Layout properties: positions that never move, tokens fed once, recompute counted, slots placed as specified."""

from __future__ import annotations

import pytest
import torch

from helpers import SOURCE, TARGET, forced_tokens, tiny_translator
from simulmt.core.layouts import Conversation, Expost, GroupPositions, NaiveReuse, PrefixRecompute, make_layout
from simulmt.errors import SimulmtError
from simulmt.core.placed import PlacedToken, Role, common_prefix_length, labels_for
from simulmt.core.policies import Scheduled, WaitK, wait_k_delays
from simulmt.core.prompt_format import PromptFormat
from simulmt.core.session import StreamingSession

X, Y = len(SOURCE.split()), len(TARGET.split())

# A hand-made format: prompt of 3 tokens, 2-token markers, end token 9.
FMT = PromptFormat(prompt=(1, 2, 3), target_opener=(4, 5), turn_end=(9,), user_header=(6, 7), end_id=9,
                   stop_ids=frozenset({9}), source_first_space=False, target_first_space=False, chat=True)


def _layout_run(layout, events):
    state = layout.start(FMT)
    for kind, arg in events:
        if kind == "read":
            layout.read(state, arg)
        elif kind == "open":
            layout.open_target(state)
        else:
            layout.write(state, arg, 0)
    return state


def test_expost_positions_by_hand():
    """slot 4, prompt 0-2: slot 1 = 3..6, opener at 7-8, target from 9; an overflowing unit opens slot 2."""
    events = [("read", (10, 11)), ("open", None), ("write", 20), ("read", (12,)), ("read", (13, 14))]
    state = _layout_run(Expost(slot=4), events)
    got = [(t.token_id, t.position, t.role) for t in state.tokens]
    assert got == [
        (1, 0, Role.PROMPT), (2, 1, Role.PROMPT), (3, 2, Role.PROMPT),
        (10, 3, Role.SOURCE), (11, 4, Role.SOURCE),
        (4, 7, Role.TARGET_MARKER), (5, 8, Role.TARGET_MARKER),
        (12, 5, Role.SOURCE),  # fits in slot 1: joins the cache after the opener, position inside the slot
        (20, 9, Role.TARGET),  # the last target token is deferred past the new source, its position unchanged
        (9, 10, Role.SOURCE_MARKER), (6, 11, Role.SOURCE_MARKER), (7, 12, Role.SOURCE_MARKER),  # new slot
        (13, 13, Role.SOURCE), (14, 14, Role.SOURCE),  # slot 2 = 13..16
    ]
    Expost(slot=4).open_target(state)
    assert [t.position for t in state.tokens[-2:]] == [17, 18]  # opener of slot 2 at slot start + L


def test_expost_positions_marks_a_new_slot_by_positions_only():
    """expost-positions (issue 42, E3), the same events: slot 2 follows the output with no header; the last target
    token is deferred past it and labelled with the next target token, which goes on after the slot (no opener);
    a unit that comes before that target text grows slot 2, and the target moves past it."""
    from simulmt.core.layouts import ExpostPositions

    layout = ExpostPositions(slot=4)
    events = [("read", (10, 11)), ("open", None), ("write", 20), ("read", (12,)), ("read", (13, 14))]
    state = _layout_run(layout, events)
    got = [(t.token_id, t.position, t.role) for t in state.tokens]
    assert got[:8] == [(1, 0, Role.PROMPT), (2, 1, Role.PROMPT), (3, 2, Role.PROMPT), (10, 3, Role.SOURCE),
                       (11, 4, Role.SOURCE), (4, 7, Role.TARGET_MARKER), (5, 8, Role.TARGET_MARKER),
                       (12, 5, Role.SOURCE)]
    assert got[8:] == [(13, 10, Role.SOURCE), (14, 11, Role.SOURCE),  # slot 2 = 10..13, right after t1 (9)
                       (20, 9, Role.TARGET)]  # t1 deferred past it, its position unchanged
    assert state.new_slots == 1 and not any(t.role is Role.SOURCE_MARKER for t in state.tokens)
    layout.open_target(state)  # nothing to open: t1 is the query
    assert state.tokens[-1] == PlacedToken(20, 9, Role.TARGET, 0)
    layout.read(state, (15, 16, 17))  # no target after slot 2 yet: it grows to 10..17
    assert [(t.token_id, t.position) for t in state.tokens[-4:]] == [(15, 12), (16, 13), (17, 14), (20, 9)]
    assert layout.placed_write(state, 21, 1).position == 18  # after the slot, as expost's opener would be
    layout.write(state, 21, 1)
    layout.read(state, (18,))  # fits slot 2: placed inside it, t2 deferred
    layout.write_end(state, 9)
    assert [(t.token_id, t.position) for t in state.tokens[-3:]] == [(18, 15), (21, 18), (9, 19)]
    labels = labels_for(state.tokens)
    assert labels[state.tokens.index(PlacedToken(20, 9, Role.TARGET, 0))] == 21  # the token before a new slot
    assert labels[-2] == 9 and state.new_slots == 1
    positions = [t.position for t in state.tokens]
    assert len(set(positions)) == len(positions)  # no two tokens share a position


def test_expost_sees_earlier_shows_a_new_slot_the_target_of_earlier_slots():
    """expost-sees-earlier (issue 42, E2): a new slot's header and source see the target written before the slot
    began; a unit that fits a slot after target text sees none of its own slot's target; target rows are expost's."""
    from simulmt.core.layouts import ExpostSeesEarlier
    from simulmt.core.visibility import slot_starts

    events = [("read", (10, 11)), ("open", None), ("write", 20), ("read", (12,)), ("read", (13, 14)),
              ("open", None), ("write", 21), ("read", (15,))]
    state = _layout_run(ExpostSeesEarlier(slot=4), events)
    ids = [t.token_id for t in state.tokens]
    assert ids == [1, 2, 3, 10, 11, 4, 5, 12, 20, 9, 6, 7, 13, 14, 4, 5, 15, 21]  # expost's list
    seen = ExpostSeesEarlier.visibility.matrix(state.tokens)
    plain = Expost.visibility.matrix(state.tokens)
    header, fits_1, fits_2 = ids.index(9), ids.index(12), ids.index(15)
    target_1 = [i for i in range(header) if state.tokens[i].role.target_side]  # opener of slot 1 and t1
    assert slot_starts(state.tokens)[header:header + 5] == [header] * 5  # (each token of slot 2 begins nothing new)
    for q in range(header, header + 5):  # the header and slot 2's source: slot 1's target is visible now
        assert seen[q, target_1].all() and not plain[q, target_1].any()
    assert not seen[fits_1, target_1].any()  # 12 fits slot 1 after t1 was written there: t1 stays hidden
    slot_2_target = [i for i in range(header, fits_2) if state.tokens[i].role.target_side]  # opener of slot 2
    assert seen[fits_2, target_1].all() and not seen[fits_2, slot_2_target].any()
    targets = [i for i, t in enumerate(state.tokens) if t.role.target_side]
    assert torch.equal(seen[targets], plain[targets])  # target rows: expost's
    assert (seen != plain).sum() == 6 * len(target_1)  # nothing else changed


def test_expost_slot_grows_before_any_target():
    state = _layout_run(Expost(slot=2), [("read", (10, 11)), ("read", (12,)), ("open", None)])
    assert [t.position for t in state.tokens] == [0, 1, 2, 3, 4, 5, 7, 8]  # slot 3..6 (2 x L), opener at 7


def test_gpe_and_naive_and_prefix_positions_by_hand():
    events = [("read", (10,)), ("open", None), ("write", 20), ("read", (11,)), ("open", None), ("write", 21)]
    gpe = _layout_run(GroupPositions(phi=100), events)
    assert [(t.token_id, t.position) for t in gpe.tokens[3:]] == [(10, 3), (4, 100), (5, 101), (11, 4), (20, 102),
                                                                  (21, 103)]
    overlap = _layout_run(make_layout("gpe-overlap", phi=100), events)  # (phi is gpe's: not taken, fixed at 0)
    assert [(t.token_id, t.position) for t in overlap.tokens[3:]] == [(10, 3), (4, 0), (5, 1), (11, 4), (20, 2),
                                                                      (21, 3)]  # both groups from 0
    long = _layout_run(make_layout("gpe-overlap"), [("read", tuple(range(10, 400)))])  # never refused
    assert long.tokens[-1].position == 3 + 389
    with pytest.raises(SimulmtError, match="past the target group"):
        _layout_run(GroupPositions(phi=100), [("read", tuple(range(10, 400)))])
    naive = _layout_run(NaiveReuse(), events)
    assert [(t.token_id, t.position) for t in naive.tokens[3:]] == [(10, 3), (4, 4), (5, 5), (11, 4), (20, 6),
                                                                    (21, 7)]  # 11 collides with the opener
    assert [t.position for t in NaiveReuse().training_view(naive.tokens)] == [0, 1, 2, 3, 5, 6, 4, 7, 8]
    prefix = _layout_run(PrefixRecompute(), events)
    assert [(t.token_id, t.position) for t in prefix.tokens] == [(1, 0), (2, 1), (3, 2), (10, 3), (11, 4), (4, 5),
                                                                 (5, 6), (20, 7), (21, 8)]


def test_conversation_closes_turns_with_a_predicted_end():
    events = [("read", (10,)), ("open", None), ("write", 20), ("read", (11,)), ("open", None), ("write", 21)]
    state = _layout_run(Conversation(), events)
    assert [t.token_id for t in state.tokens] == [1, 2, 3, 10, 4, 5, 20, 9, 6, 7, 11, 4, 5, 21]
    assert [t.position for t in state.tokens] == list(range(14))
    labels = labels_for(state.tokens)
    assert labels[6] == 9  # the last target token of a turn predicts the end of turn
    assert labels[12] == 21 and labels[5] == 20


def test_labels_skip_source_placed_in_between():
    t = [PlacedToken(4, 0, Role.TARGET_MARKER), PlacedToken(20, 1, Role.TARGET, 0), PlacedToken(11, 9, Role.SOURCE),
         PlacedToken(21, 2, Role.TARGET, 0), PlacedToken(9, 3, Role.END)]
    assert labels_for(t) == [20, 21, -100, 9, -100]
    assert common_prefix_length(t, t[:3] + [PlacedToken(21, 5, Role.TARGET, 0)]) == 3


def test_bad_layout_arguments():
    with pytest.raises(SimulmtError, match="slot"):
        Expost(slot=0)
    with pytest.raises(SimulmtError, match="phi"):
        GroupPositions(phi=0)
    with pytest.raises(SimulmtError, match="unknown layout"):
        make_layout("nope")


class _Recorder(StreamingSession):
    """Remembers every (token id, word) -> position a target token had when it was fed."""

    def receive(self, *args, **kwargs):
        super().receive(*args, **kwargs)
        for t in self.fed:
            if t.role is Role.TARGET and t in self.state.tokens:  # (not a guess the layout did not place)
                self.seen.setdefault(self.target_index(t), set()).add(t.position)

    def target_index(self, tok):
        targets = [t for t in self.state.tokens if t.role is Role.TARGET]
        return next(i for i, t in enumerate(targets) if t == tok)


def _kept(session) -> int:
    """The placed tokens the cache row holds at the end (not a last guess the layout did not place)."""
    return common_prefix_length(session.fed, session.state.tokens)


def _free_run(layout, arch="llama", k=1):
    tr = tiny_translator(arch, chat=True)
    session = _Recorder(tr.runner, tr.tokenizer, tr.fmt, layout, WaitK(k), tr.vocabulary)
    session.seen = {}
    result = session.run(SOURCE)
    return session, result


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_expost_target_positions_never_change_and_tokens_are_fed_once(arch):
    session, result = _free_run(Expost(slot=4), arch)
    assert session.seen and all(len(p) == 1 for p in session.seen.values())
    # every placed token fed once, except one re-fed token per rollback (and guessed tokens the layout did not place)
    assert result.tokens_fed == _kept(session) + result.refed_tokens + result.speculated - result.speculated_kept
    assert result.refed_tokens == result.cache_crops
    assert 1 <= result.cache_crops <= len(result.delays)


def test_gpe_reuses_cache_like_expost():
    session, result = _free_run(GroupPositions(phi=300))
    assert all(len(p) == 1 for p in session.seen.values())
    assert result.tokens_fed == _kept(session) + result.refed_tokens + result.speculated - result.speculated_kept


def test_prefix_refeeds_the_target_prefix_at_every_read():
    """Teacher-forced wait-1: each read after target text re-feeds new source + opener + the whole target."""
    tr = tiny_translator("llama", chat=True)
    layout = PrefixRecompute()
    delays = wait_k_delays(1, X, Y)
    (*_, last) = tr.training_examples(layout, SOURCE, TARGET, delays)
    session = tr.session(layout, Scheduled(tuple(delays)), forced=forced_tokens(last, tr.fmt.end_id))
    result = session.run(SOURCE)
    opener = len(tr.fmt.target_opener)
    word_tokens = [sum(1 for t in last.tokens if t.role is Role.TARGET and t.unit == j) for j in range(Y)]
    written_before = [sum(word_tokens[:j]) for j in range(Y + 1)]
    source_tokens = sum(1 for t in last.tokens if t.role is Role.SOURCE)
    expected = len(tr.fmt.prompt) + source_tokens + opener + sum(word_tokens)  # everything once
    reads_after_text = [j for j in range(1, Y) if delays[j] > delays[j - 1]] + ([Y] if delays[-1] < X else [])
    expected += sum(opener + written_before[j] for j in reads_after_text)  # the recompute at every read
    assert result.tokens_fed == expected
    expost = tr.session(Expost(slot=16), Scheduled(tuple(delays)),
                        forced=forced_tokens(tr.training_examples(Expost(16), SOURCE, TARGET, delays)[0],
                                             tr.fmt.end_id)).run(SOURCE)
    assert expost.tokens_fed < result.tokens_fed
    assert expost.flops < result.flops
