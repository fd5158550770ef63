"""EASiST's speech stages on tiny random models and a synthesised three-sentence corpus: align, simul and policy
each run, resume and hand their result to the next; the trained speech model translates audio with a learned
policy whose threshold moves the latency."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace

import pytest

import torch
from transformers import WhisperConfig, WhisperFeatureExtractor
from transformers.models.whisper.modeling_whisper import WhisperEncoder

from helpers import tiny_interleaved_translator
from simulmt.core.learned_policy import HEAD_FILE, Learned, PolicyHead
from simulmt.errors import SimulmtError
from simulmt.finetune.speech.options import SpeechTrainOptions
from simulmt.finetune.speech.train import block_delays, train_speech
from simulmt.speech.adapter import SpeechAdapter
from simulmt.speech.model import SPEECH_FILE, SpeechTranslator
from simulmt.speech.streaming_encoder import StreamingEncoderConfig

pytestmark = pytest.mark.skipif((shutil.which("espeak-ng") is None or shutil.which("sox") is None)
                                and not os.environ.get("CI"),
                                reason="needs espeak-ng and sox (apt-get install espeak-ng sox)")
SOURCES = ["A man rides a bike.", "Two dogs play in the park.", "The girl is reading a book outside."]
TARGETS = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Park.", "Das Mädchen liest draußen ein Buch."]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from simulmt.finetune.speech.synth import SynthOptions, synthesise_corpus

    folder = tmp_path_factory.mktemp("speech")
    (folder / "src.en").write_text("\n".join(SOURCES) + "\n")
    (folder / "tgt.de").write_text("\n".join(TARGETS) + "\n")
    return synthesise_corpus(folder / "src.en", folder / "tgt.de", folder / "corpus", SynthOptions(seed=1))


@pytest.fixture(scope="module")
def parts():
    torch.manual_seed(0)
    encoder = WhisperEncoder(WhisperConfig(d_model=16, encoder_layers=1, encoder_attention_heads=2,
                                           encoder_ffn_dim=32, num_mel_bins=80, max_source_positions=1500)).eval()
    return dict(translator=tiny_interleaved_translator("llama"), encoder=encoder,
                extractor=WhisperFeatureExtractor(feature_size=80))


def options(corpus, out, **kw) -> SpeechTrainOptions:
    base = dict(corpus=str(corpus), output=str(out), block_ms=320, left_context_ms=640, adapter_hidden=24, steps=4,
                batch_size=2, save_steps=2, lr=5e-3)
    base.update(kw)
    return SpeechTrainOptions(**base)


def test_block_delays_follow_the_words_end_times():
    available = [320.0, 640.0, 960.0, 1280.0]
    ends = [200.0, 700.0, 1000.0]  # word 1 ends in block 1, word 2 in block 3, word 3 in block 4
    assert block_delays([1, 1, 2, 3, 3], ends, available) == [1, 1, 3, 4, 4]
    assert block_delays([0], ends, available) == [1]  # at least one block


def test_the_simul_stage_mixes_wait_k_tails_into_its_read_n_chunks_with_k_mix(tmp_path):
    import random

    from simulmt.finetune.speech.train import SpeechItem, speech_example

    # 4 source words, one per block; 4 target words
    item = SpeechItem("u", [torch.zeros(2, 8)] * 4, [400.0, 800.0, 1200.0, 1600.0], "a b c d", "w x y z",
                      [300.0, 700.0, 1100.0, 1500.0])
    embeddings = [torch.zeros(1, 8)] * 4
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("")
    only_read_n = SpeechTrainOptions(corpus=str(manifest), stage="simul", speech_adapter="x", n_mix="4")
    mixed = SpeechTrainOptions(corpus=str(manifest), stage="simul", speech_adapter="x", n_mix="4", k_mix="1")
    rng = random.Random(0)
    assert {tuple(speech_example(item, embeddings, "simul", only_read_n.schedule, rng, "")[2])
            for _ in range(20)} == {(4, 4, 4, 4)}  # read-4: everything after the last block
    assert {tuple(speech_example(item, embeddings, "simul", mixed.schedule, rng, "")[2])
            for _ in range(40)} == {(4, 4, 4, 4), (1, 2, 3, 4)}  # and wait-1: a word per block
    with pytest.raises(SimulmtError, match="--k-mix takes integers"):
        SpeechTrainOptions(corpus=str(manifest), stage="simul", speech_adapter="x", k_mix="0")


def test_the_three_stages_and_the_trained_speech_model(corpus, parts, tmp_path):
    align = train_speech(options(corpus, tmp_path / "align", align_target="transcript"), progress=False, **parts)
    losses = [h["loss"] for h in align["loss_history"]]
    assert align["steps"] == 4 and len(losses) == 4 and losses[-1] < losses[0]
    model_dir = tmp_path / "align" / "model"
    assert (model_dir / SPEECH_FILE).is_file() and (tmp_path / "align" / "checkpoint.pt").is_file()
    assert len(list((tmp_path / "align" / "blocks").rglob("*.pt"))) == 3  # encoder blocks cached once

    simul = train_speech(options(corpus, tmp_path / "simul", stage="simul", speech_adapter=str(model_dir)),
                         progress=False, **parts)
    assert simul["steps"] == 4 and simul["loss_history"][0]["loss"] > 0
    policy = train_speech(options(corpus, tmp_path / "policy", stage="policy",
                                  speech_adapter=str(tmp_path / "simul" / "model"), n_mix="1,2"),
                          progress=False, **parts)
    assert policy["fit"]["rows"] > 5 and 0 < policy["fit"]["write_fraction"] < 1
    final = tmp_path / "policy" / "model"
    assert (final / HEAD_FILE).is_file()

    tr = parts["translator"]
    speech = SpeechTranslator(tr, parts["encoder"], parts["extractor"], SpeechAdapter.load(final),
                              StreamingEncoderConfig(320, 640))
    from simulmt.finetune.speech.synth import read_manifest

    audio = read_manifest(corpus)[2].read_audio()
    head = PolicyHead.load(final)
    eager = speech.translate(audio, "interleaved", Learned(0.0, head))
    patient = speech.translate(audio, "interleaved", Learned(1.0, head))
    blocks = len(speech.encode(audio))
    assert eager.delays and eager.delays[0] == 1
    assert patient.delays and set(patient.delays) == {blocks}
    assert eager.delays_ms[0] < patient.delays_ms[0] <= patient.duration_ms

    # a head on layer 0: speech frames through forwards that stop there on a READ, the same as whole forwards
    train_speech(options(corpus, tmp_path / "policy0", stage="policy", speech_adapter=str(tmp_path / "simul" / "model"),
                         n_mix="1,2", head_layer=0), progress=False, **parts)
    head0 = PolicyHead.load(tmp_path / "policy0" / "model")
    assert head0.layer == 0
    stopping = [speech.translate(audio, "interleaved", Learned(tau, head0)) for tau in (0.3, 0.5, 0.7)]
    runner = speech.translator.runner
    runner.execution = replace(runner.execution, stop_at_head=False)
    try:
        whole = [speech.translate(audio, "interleaved", Learned(tau, head0)) for tau in (0.3, 0.5, 0.7)]
    finally:
        runner.execution = replace(runner.execution, stop_at_head=True)
    assert [(r.prediction, r.delays) for r in stopping] == [(r.prediction, r.delays) for r in whole]
    card = json.loads((final / SPEECH_FILE).read_text())
    assert card["block_ms"] == 320 and card["encoder"] == "tiny.en"


def test_a_cut_run_resumes_to_the_same_result(corpus, parts, tmp_path):
    whole = train_speech(options(corpus, tmp_path / "whole"), progress=False, **parts)
    cut = options(corpus, tmp_path / "cut", max_minutes=1e-6)
    first = train_speech(cut, progress=False, **parts)
    assert first["stopped_by_time_limit"] and first["steps"] == 1
    assert not (tmp_path / "cut" / "model").exists()
    resumed = train_speech(options(corpus, tmp_path / "cut", resume=True), progress=False, **parts)
    assert resumed["steps"] == 4
    assert [h["loss"] for h in resumed["loss_history"]] == pytest.approx(
        [h["loss"] for h in whole["loss_history"]], rel=1e-4)
    with pytest.raises(SimulmtError, match="already holds"):
        train_speech(options(corpus, tmp_path / "whole"), progress=False, **parts)
    with pytest.raises(SimulmtError, match="--speech-adapter"):
        options(corpus, tmp_path / "x", stage="simul")


def test_the_speech_stages_are_finetune_recipes(monkeypatch, tmp_path, capsys):
    """``simulmt finetune --recipe speech-align|speech-simul|speech-policy`` runs finetune-speech's stage with the
    same options; a text recipe is untouched."""
    from simulmt import cli
    from simulmt.finetune.speech import train as speech_train

    seen = []
    monkeypatch.setattr(speech_train, "train_speech", lambda o: seen.append(o) or {"stage": o.stage})
    m = str(tmp_path / "manifest.jsonl")
    assert cli.main(["finetune", "--recipe", "speech-align", "--corpus", m, "--steps", "7"]) == 0
    assert cli.main(["finetune", "--corpus", m, "--recipe=speech-simul", "--speech-adapter", "A"]) == 0
    assert cli.main(["finetune", "--recipe", "speech-policy", "--corpus", m, "--speech-adapter", "A",
                     "--head-labels", "oracle"]) == 0
    assert cli.main(["finetune", "--recipe", "speech-ctc", "--corpus", m, "--held-out", "5"]) == 0
    assert [(o.stage, o.corpus) for o in seen] == [("align", m), ("simul", m), ("policy", m), ("ctc", m)]
    assert seen[3].held_out == 5
    assert seen[0].steps == 7 and seen[1].speech_adapter == "A" and seen[2].head_labels == "oracle"
    capsys.readouterr()
    assert cli.main(["finetune", "--recipe", "speech-simul", "--corpus", m]) == 2  # simul needs --speech-adapter
    assert "--speech-adapter" in capsys.readouterr().err
    assert cli._route_speech_recipe(["finetune", "--recipe", "expost"]) == ["finetune", "--recipe", "expost"]


def test_speech_json_names_folders_relative_to_the_model(tmp_path, monkeypatch):
    """A speech model folder moves with its checkout: the LLM adapter and model folders it names are stored
    relative to it (and found from it); packaged names and shipped adapters stay names."""
    from simulmt.speech.model import _adapter_of
    from simulmt.finetune.speech.train import _relative

    adapter = tmp_path / "runs" / "head" / "adapter"
    adapter.mkdir(parents=True)
    final = tmp_path / "runs" / "sp-policy" / "model"
    final.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert _relative("runs/head/adapter", final) == "../../head/adapter"
    assert _relative("gemma-3-270m", final) == "gemma-3-270m"
    assert _adapter_of(final, "../../head/adapter") == str(final / "../../head/adapter")
    assert _adapter_of(final, "gemma-3-270m-interleaved-en-de") == "gemma-3-270m-interleaved-en-de"


def test_the_ctc_stage_spells_the_transcript_cheaply_and_hands_its_adapter_to_align(corpus, parts, tmp_path):
    """``--stage ctc``: the adapter alone learns, with CTC against the LLM's own token embeddings, to spell the
    transcript; a held-out utterance is scored, not trained on; a cut run resumes to the same losses (the blank and
    scale too); the align stage starts from its adapter."""
    from simulmt.speech.ctc import CTCScorer, token_error_rate

    run = options(corpus, tmp_path / "ctc", stage="ctc", steps=30, lr=2e-2, held_out=1)
    card = train_speech(run, progress=False, **parts)
    losses = [h["loss"] for h in card["loss_history"]]
    assert card["steps"] == 30 and card["held_out"] == 1 and losses[-1] < 0.5 * losses[0]
    assert 0.0 <= card["held_out_token_error_rate"] and card["held_out_examples"][0]["reference"] == SOURCES[2]
    tok = parts["translator"].tokenizer
    assert card["vocabulary"] == len({t for s in SOURCES[:2] for t in tok(s, add_special_tokens=False)["input_ids"]})
    assert (tmp_path / "ctc" / "model" / SPEECH_FILE).is_file()
    # the frozen LLM read the held-out utterance and wrote a transcript, scored against the real one
    assert card["held_out_transcripts"][0]["reference"] == SOURCES[2]
    written = card["held_out_transcripts"][0]["llm_writes"]
    ids = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    assert card["held_out_transcript_token_error_rate"] == pytest.approx(
        token_error_rate([ids(SOURCES[2])], [ids(written)]), abs=1e-4)

    cut = train_speech(options(corpus, tmp_path / "cut", stage="ctc", steps=30, lr=2e-2, held_out=1,
                               max_minutes=1e-6), progress=False, **parts)
    assert cut["stopped_by_time_limit"] and cut["steps"] == 1
    resumed = train_speech(options(corpus, tmp_path / "cut", stage="ctc", steps=30, lr=2e-2, held_out=1,
                                   resume=True), progress=False, **parts)
    assert [h["loss"] for h in resumed["loss_history"]] == pytest.approx(losses, rel=1e-4)

    align = train_speech(options(corpus, tmp_path / "align", speech_adapter=str(tmp_path / "ctc" / "model"),
                                 held_out=1), progress=False, **parts)
    assert align["steps"] == 4 and align["utterances"] == 2 and "held_out_transcript_token_error_rate" in align
    with pytest.raises(SimulmtError, match="--held-out"):
        options(corpus, tmp_path / "x", stage="simul", speech_adapter="A", held_out=1)  # ctc and align only
    with pytest.raises(SimulmtError, match="leaves no utterance"):
        train_speech(options(corpus, tmp_path / "y", stage="ctc", held_out=3), progress=False, **parts)

    # the metric and the scorer on their own
    assert token_error_rate([[1, 2, 3]], [[1, 2, 3]]) == 0.0
    assert token_error_rate([[1, 2, 3]], [[1, 3]]) == pytest.approx(1 / 3)  # a deletion
    assert token_error_rate([[1, 2, 3], [4]], [[1, 2, 9, 3], []]) == pytest.approx(2 / 4)  # an insertion, a deletion
    scorer = CTCScorer([7, 9], torch.eye(3)[1:])  # token 7 -> (0,1,0), 9 -> (0,0,1); the blank learns from zero
    with torch.no_grad():
        scorer.scale.fill_(10.0)
        frames = torch.tensor([[0, 1, 0], [0, 1, 0], [-1, -1, -1], [0, 0, 1], [0, 1, 0]], dtype=torch.float)
    assert scorer.greedy(frames) == [7, 9, 7]  # repeats merged, the blank frame dropped


def card_vocab(card, parts) -> list[int]:
    """The ctc stage's vocabulary: the training transcripts' token ids, sorted."""
    tok = parts["translator"].tokenizer
    train = SOURCES[: len(SOURCES) - card["held_out"]]
    return sorted({t for text in train for t in tok(text, add_special_tokens=False)["input_ids"]})


def test_a_free_ctc_head_trains_resumes_and_travels_with_the_model(corpus, parts, tmp_path):
    """``--ctc-head free``: the adapter learns against a linear layer of its own instead of the LLM's rows (the rows
    give only its size), a cut run resumes to the same losses (the free layer is in the checkpoint), the model
    folder holds the adapter and the head and reads the words the head spells, and the option is refused outside
    the ctc stage."""
    from simulmt.speech.ctc import CTCScorer

    run = options(corpus, tmp_path / "free", stage="ctc", ctc_head="free", steps=30, lr=2e-2, held_out=1)
    card = train_speech(run, progress=False, **parts)
    losses = [h["loss"] for h in card["loss_history"]]
    assert card["options"]["ctc_head"] == "free" and losses[-1] < 0.5 * losses[0]
    tied = train_speech(options(corpus, tmp_path / "tied", stage="ctc", steps=30, lr=2e-2, held_out=1),
                        progress=False, **parts)
    assert [h["loss"] for h in tied["loss_history"]] != pytest.approx(losses)  # another scorer, other losses
    state = torch.load(tmp_path / "free" / "checkpoint.pt", weights_only=False)
    assert set(state["extra"]) == {"free.weight", "free.bias"}  # no LLM rows, no blank row, no scale
    # the free head travels with the model, which reads the words it spells; a tied run's model reads embeddings
    assert sorted(p.name for p in (tmp_path / "free" / "model").iterdir()) == sorted(
        [p.name for p in (tmp_path / "tied" / "model").iterdir()] + ["ctc_head.json", "ctc_head.safetensors"])
    assert json.loads((tmp_path / "free" / "model" / SPEECH_FILE).read_text())["reads"] == "ctc-words"
    assert json.loads((tmp_path / "tied" / "model" / SPEECH_FILE).read_text())["reads"] == "embeddings"
    # the LLM's transcript check reads the adapter's frames as its embeddings: a tied run only
    assert "held_out_token_error_rate" in card and "held_out_transcript_token_error_rate" not in card
    assert "held_out_transcript_token_error_rate" in tied
    saved = CTCScorer.load(tmp_path / "free" / "model")
    assert saved.vocab == card_vocab(card, parts) and torch.equal(saved.free.weight, state["extra"]["free.weight"])

    cut = train_speech(options(corpus, tmp_path / "cut", stage="ctc", ctc_head="free", steps=30, lr=2e-2,
                               held_out=1, max_minutes=1e-6), progress=False, **parts)
    assert cut["stopped_by_time_limit"] and cut["steps"] == 1
    resumed = train_speech(options(corpus, tmp_path / "cut", stage="ctc", ctc_head="free", steps=30, lr=2e-2,
                                   held_out=1, resume=True), progress=False, **parts)
    assert [h["loss"] for h in resumed["loss_history"]] == pytest.approx(losses, rel=1e-4)

    with pytest.raises(SimulmtError, match="--ctc-head"):
        options(corpus, tmp_path / "x", stage="align", ctc_head="free")
    with pytest.raises(ValueError, match="unknown CTC head"):
        CTCScorer([7], torch.eye(2)[1:], head="tide")
    scorer = CTCScorer([7, 9], torch.zeros(2, 3), head="free")  # the rows' values do not matter, their size does
    assert scorer(torch.randn(4, 3)).shape == (4, 3) and not hasattr(scorer, "rows")


def test_the_encoders_top_layers_train_with_the_adapter_and_travel_with_the_model(corpus, parts, tmp_path):
    """``--encoder-layers 1``: the state below the encoder's last layer is cached per window, the last layer
    trains with the adapter (the caller's encoder untouched), a cut run resumes to the same losses, the model folder
    keeps the trained layer, and what it streams is what training computed; a later stage keeps it."""
    import copy

    from simulmt.speech.encoder_top import ENCODER_FILE, EncoderTop, apply_tuned, tuned_first_layer
    from simulmt.speech.streaming_encoder import encode_utterance
    from simulmt.finetune.speech.synth import read_manifest
    from simulmt.finetune.speech.train import item_blocks, load_items

    torch.manual_seed(3)
    base = WhisperEncoder(WhisperConfig(d_model=16, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=32,
                                        num_mel_bins=80, max_source_positions=1500)).eval()
    before = copy.deepcopy(base.state_dict())
    run = dict(translator=parts["translator"], encoder=base, extractor=parts["extractor"])
    kw = dict(encoder_layers=1, encoder_lr=5e-3, steps=6, held_out=1)
    card = train_speech(options(corpus, tmp_path / "align", **kw), progress=False, **run)
    losses = [h["loss"] for h in card["loss_history"]]
    assert card["steps"] == 6 and losses[-1] < losses[0] and "held_out_transcript_token_error_rate" in card
    assert all(torch.equal(v, base.state_dict()[k]) for k, v in before.items())  # the caller's encoder
    assert [p.name for p in (tmp_path / "align" / "blocks").iterdir()] == ["tiny.en-320-640-below1"]
    model = tmp_path / "align" / "model"
    assert (model / ENCODER_FILE).is_file() and tuned_first_layer(model) == 1

    tuned = copy.deepcopy(base)
    apply_tuned(tuned, model)
    assert not torch.equal(tuned.layers[1].fc1.weight, base.layers[1].fc1.weight)
    assert torch.equal(tuned.layers[0].fc1.weight, base.layers[0].fc1.weight)  # below the trained layer: frozen
    opts = options(corpus, tmp_path / "align", **kw)
    items = load_items(opts, base, parts["extractor"], until_layer=1)  # from the cache
    config = StreamingEncoderConfig(320, 640)
    with torch.no_grad():
        trained = item_blocks(items[0], EncoderTop(tuned, 1))
    streamed = encode_utterance(read_manifest(corpus)[0].read_audio(), config, tuned, parts["extractor"])
    assert all(torch.equal(a, b) for a, b in zip(trained, streamed, strict=True))

    cut = train_speech(options(corpus, tmp_path / "cut", max_minutes=1e-6, **kw), progress=False, **run)
    assert cut["stopped_by_time_limit"] and cut["steps"] == 1
    resumed = train_speech(options(corpus, tmp_path / "cut", resume=True, **kw), progress=False, **run)
    assert [h["loss"] for h in resumed["loss_history"]] == pytest.approx(losses, rel=1e-4)

    simul = train_speech(options(corpus, tmp_path / "simul", stage="simul", speech_adapter=str(model)),
                         progress=False, **run)  # the encoder frozen now, as align left it
    assert simul["steps"] == 4 and tuned_first_layer(tmp_path / "simul" / "model") == 1
    (cache,) = (tmp_path / "simul" / "blocks").iterdir()
    assert cache.name.startswith("tiny.en-320-640-") and "below" not in cache.name  # named by the tuned weights
    assert (tmp_path / "simul" / "model" / ENCODER_FILE).read_bytes() == (model / ENCODER_FILE).read_bytes()
    with pytest.raises(SimulmtError, match="has 2 layers"):
        train_speech(options(corpus, tmp_path / "z", encoder_layers=3), progress=False, **run)
    with pytest.raises(SimulmtError, match="--encoder-layers"):
        options(corpus, tmp_path / "x", stage="policy", speech_adapter="A", encoder_layers=1)


def test_the_adapter_checks_read_a_runs_held_out_utterances(corpus, parts, tmp_path):
    """benchmarks/speech_adapter_checks.py: the align loss with own, another's and no audio, and translations read
    from text, from the transcript's embeddings and from a free ctc head's best path, on a run's held-out part."""
    from helpers import load_benchmark

    checks = load_benchmark("speech_adapter_checks")
    ctc = options(corpus, tmp_path / "ctc", stage="ctc", ctc_head="free", steps=6, lr=2e-2, held_out=2)
    train_speech(ctc, progress=False, **parts)
    align = options(corpus, tmp_path / "align", speech_adapter=str(tmp_path / "ctc" / "model"), held_out=2)
    train_speech(align, progress=False, **parts)

    use = checks.audio_use(tmp_path / "align", **parts)
    assert use["utterances"] == 2
    losses = [use[f"loss_{name}_audio"] for name in ("own", "other", "none")]
    assert all(loss > 0 for loss in losses) and len(set(losses)) == 3  # three different readings
    for source in ("text", "oracle", "best-path"):
        out = checks.translate(tmp_path / "ctc", source, **parts)
        assert out["utterances"] == 2 and 0.0 <= out["bleu"] <= 100.0
        assert [e["reference"] for e in out["examples"]] == TARGETS[1:]
    with pytest.raises(SimulmtError, match="best-path"):
        checks.translate(tmp_path / "align", "best-path", **parts)  # an align run has no ctc head
    with pytest.raises(SimulmtError, match="align run"):
        checks.audio_use(tmp_path / "ctc", **parts)
    # spell: the ctc run's model's words for every utterance, as parallel text (training part and held-out part)
    from simulmt.speech.ctc import CTCScorer
    from simulmt.speech.spelled_words import SpelledWords, spelled_words, word_start_ids

    report = checks.spell(tmp_path / "ctc", tmp_path / "spelled", **parts)
    tok = parts["translator"].tokenizer
    scorer = CTCScorer.load(tmp_path / "ctc" / "model")
    adapter = SpeechAdapter.load(tmp_path / "ctc" / "model")
    _, _, items, _ = checks.load_run(tmp_path / "ctc", **parts)
    expected = [" ".join(spelled_words(lambda: SpelledWords(scorer, tok.decode, word_start_ids(tok, scorer.vocab)),
                                       [adapter(b).detach() for b in item.blocks])[0]) for item in items]
    for name, part in (("train", slice(0, 1)), ("held-out", slice(1, 3))):
        written = (tmp_path / "spelled" / f"{name}.en").read_text().splitlines()
        assert written == [e for e in expected[part] if e]
        assert len((tmp_path / "spelled" / f"{name}.de").read_text().splitlines()) == len(written)
        assert report[name]["written"] + report[name]["spelled_nothing"] == len(range(3)[part])
        assert report[name]["word_error_rate"] >= 0


def test_shipping_a_model_that_reads_spelled_words(corpus, parts, tmp_path, monkeypatch):
    """scripts/ship_speech_model.py on a free-head ctc run: the packaged LLM and adapter by name, the speech adapter
    and the CTC head in bfloat16 (they load back into float32 modules), the run's card named after its stage, and
    nothing left of a model shipped before."""
    import importlib.util
    from pathlib import Path

    from simulmt.speech.ctc import CTCScorer

    run = tmp_path / "ctc"
    train_speech(options(corpus, run, stage="ctc", ctc_head="free", steps=2, held_out=1), progress=False, **parts)
    spec = importlib.util.spec_from_file_location("ship", Path(__file__).parents[1] / "scripts/ship_speech_model.py")
    ship = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ship)
    target = tmp_path / "shipped"
    target.mkdir()
    (target / HEAD_FILE).write_text("an old model's policy head")
    (target / "training-policy.json").write_text("{}")
    monkeypatch.setattr(ship, "SHIPPED_SPEECH_MODEL", target)
    assert ship.ship(run, "gemma-3-270m-interleaved-en-de", {}) == target
    card = json.loads((target / SPEECH_FILE).read_text())
    assert card["reads"] == "ctc-words" and card["adapter"] == "gemma-3-270m-interleaved-en-de"
    assert sorted(p.name for p in target.iterdir()) == ["ctc_head.json", "ctc_head.safetensors", SPEECH_FILE,
                                                        "speech_adapter.json", "speech_adapter.safetensors",
                                                        "training-ctc.json"]
    shipped, trained = CTCScorer.load(target), CTCScorer.load(run / "model")
    assert shipped.free.weight.dtype == torch.float32 and shipped.vocab == trained.vocab
    assert torch.allclose(shipped.free.weight, trained.free.weight, rtol=1e-2, atol=1e-3)  # bfloat16's precision
    assert SpeechAdapter.load(target).proj.weight.dtype == torch.float32
