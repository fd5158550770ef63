"""A head vocabulary (simulmt.core.head_vocabulary): the LM head computes the kept tokens and each stream's source
tokens read, nothing else. It changes the output only where the full head would choose another token: with every
token kept nothing changes; otherwise every written token is kept or read, and batched == one stream, guesses on ==
off hold as without it."""

from __future__ import annotations

import copy
import functools

import numpy as np
import pytest
import torch

from helpers import (SOURCE, TARGET, run_interleaved_alone, run_interleaved_batched, tiny_interleaved_translator,
                     tiny_translator)
from simulmt.core.head_vocabulary import HeadVocabulary, ShortlistHead, read_source_ids
from simulmt.core.layouts import Expost, GroupPositions, PrefixRecompute
from simulmt.core.learned_policy import Learned, PolicyHead
from simulmt.core.packed_linear import PackedLinear, fbgemm_available, pack_linears
from simulmt.core.placed import PlacedToken, Role
from simulmt.core.policies import WaitK
from simulmt.errors import SimulmtError
from simulmt.translator import Translator
from tiny_models import CORPUS, set_execution

SOURCES = [line for line in CORPUS if line.split()][:6]
LAYOUTS = [(Expost(slot=4), WaitK(1)), (Expost(slot=16), WaitK(3)), (PrefixRecompute(), WaitK(2)),
           (GroupPositions(phi=300), WaitK(2))]


def kept_ids(tr) -> tuple[int, ...]:
    """A small vocabulary: the tokens of the German sentence (a random model will want others)."""
    return tuple(sorted(set(tr.tokenizer(TARGET, add_special_tokens=False)["input_ids"])))


@functools.lru_cache(maxsize=None)
def shortlisted(arch: str = "llama", every: bool = False) -> Translator:
    tr = tiny_translator(arch)
    ids = tuple(range(tr.runner.compute.vocab)) if every else kept_ids(tr)
    return Translator(tr.model, tr.tokenizer, name=tr.name, head_vocabulary=HeadVocabulary(ids, "test"))


def finite_ids(logits: torch.Tensor) -> set[int]:
    return set(torch.isfinite(logits).nonzero()[:, 0].tolist())


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_every_token_kept_changes_nothing(arch):
    full, every = tiny_translator(arch), shortlisted(arch, every=True)
    for layout, policy in LAYOUTS:
        a = full.session(layout, policy, record=True)
        b = every.session(layout, policy, record=True)
        a.run(SOURCE)
        b.run(SOURCE)
        ra, rb = a.result(), b.result()
        assert (rb.prediction, rb.delays) == (ra.prediction, ra.delays)
        for p, q in zip(a.proposals, b.proposals):
            assert p.token == q.token
            assert torch.allclose(p.logits, q.logits, atol=1e-5 * max(1.0, float(p.logits.abs().max())))


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
@pytest.mark.parametrize("moved", [False, True])
@pytest.mark.parametrize("layout,policy", LAYOUTS)
def test_only_kept_tokens_and_the_source_read_get_logits(monkeypatch, arch, moved, layout, policy):
    tr = shortlisted(arch)
    set_execution(monkeypatch, tr, moved_guesses=moved)
    kept = set(tr.runner.shortlist.keep.tolist())
    assert set(kept_ids(tr)) <= kept
    session = tr.session(layout, policy, record=True)
    session.run(SOURCE)
    assert session.result().prediction  # it writes (from the kept tokens)
    saw_extra = False
    spelled = set()
    for p in session.proposals:
        read = read_with_spellings(session, p.context)
        assert finite_ids(p.logits) == kept | read  # exactly these, and every one of them
        assert p.token in kept | read
        saw_extra |= bool(read - kept)
        spelled |= read - {t.token_id for t in p.context if t.role is Role.SOURCE}
    assert saw_extra  # the source read brought tokens the kept set lacks
    assert spelled  # and its words' other spellings tokens of their own


def read_with_spellings(stream, context) -> set[int]:
    """The source tokens in ``context`` and those of their words' other spellings (head_vocabulary.py)."""
    source = [t for t in context if t.role is Role.SOURCE]
    return {t.token_id for t in source} | {i for t in source for i in stream.source_spellings(t.unit)}


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
@pytest.mark.parametrize("layout,policy", LAYOUTS)
def test_batched_equals_one_stream_with_a_head_vocabulary(arch, layout, policy):
    tr = shortlisted(arch)
    one = [tr.translate(s, layout, policy) for s in SOURCES]
    batched = tr.translate_many(SOURCES, layout, policy, batch_size=4)
    assert [(r.prediction, r.delays) for r in batched] == [(r.prediction, r.delays) for r in one]
    full = tiny_translator(arch).translate_many(SOURCES, layout, policy, batch_size=4)
    assert [r.prediction for r in batched] != [r.prediction for r in full]  # it does restrict the random model
    assert sum(r.flops for r in batched) < sum(r.flops for r in full)  # and its FLOPs count the smaller head


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
@pytest.mark.parametrize("switches", [dict(moved_guesses=True), dict(read_ahead=False), dict(alternatives=2)])
def test_guesses_change_nothing_with_a_head_vocabulary(monkeypatch, arch, switches):
    tr = shortlisted(arch)
    kept_guesses = 0
    for layout, policy in LAYOUTS:
        for batch in (1, 3):  # (alternatives are fed by a forward of one stream only)
            set_execution(monkeypatch, tr, speculate=False)
            off = tr.translate_many(SOURCES, layout, policy, batch_size=batch)
            set_execution(monkeypatch, tr, speculate=True, **switches)
            on = tr.translate_many(SOURCES, layout, policy, batch_size=batch)
            monkeypatch.undo()
            assert [(r.prediction, r.delays) for r in on] == [(r.prediction, r.delays) for r in off]
            kept_guesses += sum(r.speculated_kept for r in on)
    assert kept_guesses > 0  # guesses were fed and used


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_source_tokens_left_out_of_the_kept_set_come_back_as_read(arch):
    """Every token kept but the source's: each is computed as a read source token (row by row) once it is read,
    and before that it may not be chosen. So the output equals the full head's wherever the full head's choice was
    already read, and the logits of every token computed equal the full head's."""
    full = tiny_translator(arch)
    source_ids = set(full.tokenizer(SOURCE, add_special_tokens=False)["input_ids"])
    ids = tuple(i for i in range(full.runner.compute.vocab) if i not in source_ids)
    tr = Translator(full.model, full.tokenizer, head_vocabulary=HeadVocabulary(ids, "all but the source"))
    a = full.session(Expost(slot=16), WaitK(3), record=True)
    b = tr.session(Expost(slot=16), WaitK(3), record=True)
    a.run(SOURCE)
    b.run(SOURCE)
    extras = 0
    for p, q in zip(a.proposals, b.proposals):
        if p.context != q.context:
            break
        read = read_with_spellings(b, q.context)
        finite = torch.isfinite(q.logits)
        assert finite_ids(q.logits) == set(ids) | read
        assert torch.allclose(q.logits[finite], p.logits[finite], atol=1e-4 * max(1.0, float(p.logits.abs().max())))
        extras += len(read & source_ids)
        if p.token not in source_ids - read:
            assert q.token == p.token
    assert extras > 0


def _hidden(rows: int, width: int) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(rows, width)


def test_shortlist_head_computes_what_the_full_head_does():
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=True)
    vocabulary = HeadVocabulary((1, 4, 9, 30), "test")
    short = ShortlistHead(head, vocabulary, 50, softcap=5.0)
    hidden = _hidden(3, 16)
    full = torch.tanh(head(hidden) / 5.0) * 5.0
    extras = [np.array([2, 4, 49]), np.array([], dtype=np.int64), np.array([0])]
    out = short(hidden, extras)
    for row, more in enumerate([{2, 49}, set(), {0}]):
        ids = sorted({1, 4, 9, 30} | more)
        assert finite_ids(out[row]) == set(ids)
        assert torch.allclose(out[row, ids], full[row, ids], atol=1e-5)
    assert short.size == 4


@pytest.mark.skipif(not fbgemm_available(), reason="float16-packed weights need torch's fbgemm backend")
@pytest.mark.parametrize("tied", [True, False])
def test_shortlist_of_a_packed_head_computes_what_the_packed_head_does(tied):
    torch.manual_seed(0)
    embeddings = torch.nn.Embedding(60, 16)
    linear = torch.nn.Linear(16, 60, bias=False)
    if tied:
        linear.weight.data = embeddings.weight.data.clone()
    packed = PackedLinear(linear)
    short = ShortlistHead(packed, HeadVocabulary((3, 5, 8), "test"), 60, embeddings=embeddings)
    assert (short.rows is embeddings.weight) == tied  # a tied head's extra rows come from the embedding table
    hidden = _hidden(2, 16)
    full = packed(hidden)
    out = short(hidden, [np.array([10, 59]), np.array([5])])
    assert finite_ids(out[0]) == {3, 5, 8, 10, 59} and finite_ids(out[1]) == {3, 5, 8}
    assert torch.allclose(out[0, [3, 5, 8, 10, 59]], full[0, [3, 5, 8, 10, 59]], atol=1e-4)


@pytest.mark.skipif(not fbgemm_available(), reason="float16-packed weights need torch's fbgemm backend")
def test_a_packed_model_with_every_token_kept_writes_the_same():
    tr = tiny_translator("llama")
    model = copy.deepcopy(tr.model)
    pack_linears(model)
    packed = Translator(model, tr.tokenizer)
    every = Translator(model, tr.tokenizer, head_vocabulary=HeadVocabulary(tuple(range(tr.runner.compute.vocab))))
    for layout, policy in LAYOUTS[:2]:
        assert [r.prediction for r in every.translate_many(SOURCES, layout, policy, batch_size=3)] == \
            [r.prediction for r in packed.translate_many(SOURCES, layout, policy, batch_size=3)]


def test_read_source_ids_counts_what_each_answer_follows():
    def src(i):
        return PlacedToken(i, i, Role.SOURCE, 0)

    def tgt(i):
        return PlacedToken(i, 100 + i, Role.TARGET, 0)

    cached = (PlacedToken(1, 0, Role.PROMPT), src(10), src(11), tgt(50))
    fed = (tgt(51), src(12), tgt(52), tgt(53))  # the list's last token, a guess (a source token, a target token),
    # and one alternative to the guess's last token
    got = read_source_ids(cached, 3, fed, [-4, -3, -2, -1], lambda unit: ())
    assert [set(g.tolist()) for g in got] == [{10, 11}, {10, 11, 12}, {10, 11, 12}, {10, 11, 12}]
    assert set(read_source_ids(cached, 1, fed, [-1], lambda unit: ())[0].tolist()) == {12}  # only the cache kept counts
    spellings = {0: (20, 21)}.get  # (every source token above is of unit 0)
    got = read_source_ids(cached, 1, fed, [-4, -3], lambda unit: spellings(unit, ()))
    assert [set(g.tolist()) for g in got] == [set(), {12, 20, 21}]


def test_source_spellings_are_the_word_with_and_without_its_space_and_capitalised():
    from simulmt.core.head_vocabulary import source_spellings
    from simulmt.core.prompt_format import word_tokens

    tr = tiny_translator("llama")
    tok = tr.tokenizer
    word = next(w for w in SOURCE.split()[1:] if w[:1].islower())
    unit = word_tokens(tok, word, True)
    expected = {i for form in (word, word[:1].upper() + word[1:]) for space in (False, True)
                for i in word_tokens(tok, form, space)} - set(unit)
    assert set(source_spellings(tok, unit)) == expected and expected
    quoted = word_tokens(tok, f'"{word}",', True)  # its first letter is upper-cased, not its first character
    capital = word_tokens(tok, f'"{word[:1].upper() + word[1:]}",', True)
    assert set(capital) != set(quoted) and set(capital) <= set(source_spellings(tok, quoted)) | set(quoted)
    session = tr.session(Expost(slot=16), WaitK(3))
    session.push(SOURCE.split())
    assert session.source_spellings(1) == source_spellings(tok, session.units[1])
    assert session.source_spellings(len(session.units)) == ()  # (no such unit)


def test_head_vocabulary_from_texts(tmp_path):
    tok = tiny_translator("llama").tokenizer
    (tmp_path / "de.txt").write_text(TARGET + "\n\n", encoding="utf-8")
    vocabulary = HeadVocabulary.from_texts(tok, [tmp_path / "de.txt"])
    assert set(vocabulary.ids) == set(tok(TARGET, add_special_tokens=False)["input_ids"])
    assert vocabulary.origin == "de.txt"
    with pytest.raises(SimulmtError, match="not a file"):
        HeadVocabulary.from_texts(tok, [tmp_path / "missing.txt"])
    (tmp_path / "empty.txt").write_text("\n", encoding="utf-8")
    with pytest.raises(SimulmtError, match="no text"):
        HeadVocabulary.from_texts(tok, [tmp_path / "empty.txt"])
    with pytest.raises(SimulmtError, match="ids must lie"):
        ShortlistHead(torch.nn.Linear(4, 10), HeadVocabulary((3, 10)), 10)


def test_translator_load_and_the_cli_take_text_files(tmp_path, monkeypatch, capsys):
    from helpers import save_tiny_model
    from simulmt import cli

    folder = save_tiny_model(tmp_path / "model")
    (tmp_path / "de.txt").write_text(TARGET + "\n", encoding="utf-8")
    (tmp_path / "en.txt").write_text(SOURCE + "\n", encoding="utf-8")
    tr = Translator.load(str(folder), adapter="none", head_vocabulary=f"{tmp_path / 'de.txt'},{tmp_path / 'en.txt'}")
    target, source = tr.tokenizer([TARGET, SOURCE], add_special_tokens=False)["input_ids"]
    words = set(target) | set(source)
    kept = set(tr.runner.shortlist.keep.tolist())
    assert words <= kept and tr.tokenizer.eos_token_id in kept and len(kept) < tr.runner.compute.vocab
    assert tr.head_vocabulary.startswith(f"de.txt,en.txt: {len(kept)} tokens, sha256 ")

    calls = []

    def load(**kwargs):
        calls.append(kwargs)
        return Translator.load(str(folder), adapter="none", head_vocabulary=kwargs["head_vocabulary"])
    monkeypatch.setattr(cli, "_load_translator", load)
    (tmp_path / "in.txt").write_text(SOURCE + "\n", encoding="utf-8")
    assert cli.main(["translate", str(tmp_path / "in.txt"), "--head-vocabulary", str(tmp_path / "de.txt")]) == 0
    assert calls[0]["head_vocabulary"] == str(tmp_path / "de.txt")
    assert capsys.readouterr().out.strip()
    assert cli.main(["translate", str(tmp_path / "in.txt"), "--head-vocabulary", str(tmp_path / "nope.txt")]) == 1
    assert "nope.txt is not a file" in capsys.readouterr().err


def test_a_learned_policy_with_a_head_vocabulary_batched_as_alone():
    """A learned policy decides on the features during the forward and a READ takes no LM head row: the rows that
    get logits are a subset of the answers, and each keeps its own source tokens."""
    base = tiny_interleaved_translator("llama")
    tr = Translator(base.model, base.tokenizer, head_vocabulary=HeadVocabulary(kept_ids(base), "test"))
    kept = set(tr.runner.shortlist.keep.tolist())
    assert {tr.fmt.end_of_write, tr.fmt.end_of_translation} <= kept  # the layout's predicted markers stay
    torch.manual_seed(1)
    head = PolicyHead(torch.randn(2, tr.model.config.hidden_size), torch.zeros(2))
    jobs = [(SOURCES[i % len(SOURCES)], Learned(0.5, head) if i % 2 else WaitK(1 + i % 3)) for i in range(6)]
    alone = run_interleaved_alone(tr, jobs)
    streams = run_interleaved_batched(tr, jobs)
    for a, b in zip(alone, streams):
        ra, rb = a.result(), b.result()
        assert (rb.prediction, rb.delays) == (ra.prediction, ra.delays)
        for p, q in zip(a.proposals, b.proposals):
            read = read_with_spellings(b, q.context)
            assert p.token == q.token and finite_ids(q.logits) == kept | read
