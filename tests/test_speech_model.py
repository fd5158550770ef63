"""The speech translator end to end on tiny random models: audio pieces -> streaming encoder -> adapter ->
embedded source units -> words with delays in ms; the same as encoding the whole utterance at once and streaming
its blocks (what training sees), batched or not."""

from __future__ import annotations

import json
from argparse import Namespace
from dataclasses import replace

import numpy as np
import pytest
import torch
from transformers import WhisperConfig, WhisperFeatureExtractor
from transformers.models.whisper.modeling_whisper import WhisperEncoder

from helpers import through_simuleval_agent, tiny_interleaved_translator, tiny_translator
from simulmt.core.engine import Engine, run_batched
from simulmt.core.policies import WaitK
from simulmt.errors import SimulmtError
from simulmt.speech.adapter import SpeechAdapter, SpeechAdapterConfig
from simulmt.speech.model import SpeechTranslator, block_delays_ms
from simulmt.speech.streaming_encoder import StreamingEncoderConfig


def tiny_speech(arch: str = "llama", block_ms: int = 320) -> SpeechTranslator:
    torch.manual_seed(0)
    encoder = WhisperEncoder(WhisperConfig(d_model=16, encoder_layers=2, encoder_attention_heads=2,
                                           encoder_ffn_dim=32, num_mel_bins=80, max_source_positions=1500)).eval()
    tr = tiny_interleaved_translator(arch)
    adapter = SpeechAdapter(SpeechAdapterConfig(encoder_dim=16, llm_dim=tr.model.config.hidden_size, hidden=24))
    return SpeechTranslator(tr, encoder, WhisperFeatureExtractor(feature_size=80), adapter,
                            StreamingEncoderConfig(block_ms=block_ms, left_context_ms=640))


def audio(seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    return (0.3 * np.sin(2 * np.pi * (200 + 300 * t) * t) + 0.05 * rng.standard_normal(len(t))).astype(np.float32)


def test_streamed_audio_equals_the_whole_utterance_as_blocks():
    sp = tiny_speech()
    x = audio(2.3)
    streamed = sp.translate(x, "interleaved", WaitK(2), piece_ms=130)
    blocks = sp.embed(sp.encode(x))
    assert len(blocks) == len(block_delays_ms(sp.config, len(x))) == 8  # 2.3 s in 320 ms blocks
    assert all(b.shape[0] == sp.adapter.output_frames(16) for b in blocks[:-1])  # 16 encoder frames -> 4
    whole = sp.translator.session("interleaved", WaitK(2))
    whole.push_embedded(blocks, finished=True)
    list(whole.advance())
    assert streamed.prediction and streamed.prediction == whole.result().prediction
    assert streamed.delays == whole.result().delays and streamed.source_length == 8
    spans = block_delays_ms(sp.config, len(x))
    assert streamed.delays_ms == [spans[d - 1] for d in streamed.delays]
    assert streamed.delays_ms == sorted(streamed.delays_ms) and streamed.delays_ms[-1] <= 2300
    assert streamed.duration_ms == pytest.approx(2300) and streamed.encoder_ms > 0
    assert json.dumps(streamed.to_json())  # plain data


def test_speech_streams_batched_equal_one_at_a_time():
    sp = tiny_speech("gemma3")
    clips = [audio(s, seed) for seed, s in enumerate([1.7, 2.9, 1.1])]
    alone = [sp.translate(x, "interleaved", WaitK(3)) for x in clips]
    streams = []
    for x in clips:
        stream = sp.translator.new_stream("interleaved", WaitK(3))
        stream.push_embedded(sp.embed(sp.encode(x)), finished=True)
        streams.append(stream)
    engine = Engine(sp.translator.runner)
    run_batched(streams, engine, batch_size=2)  # the third stream joins later and shares the prompt
    assert engine.stats.shared_tokens > 0
    assert [(a.prediction, a.delays) for a in alone] == [(s.result().prediction, s.result().delays) for s in streams]


def test_mismatched_parts_are_refused():
    sp = tiny_speech()
    with pytest.raises(SimulmtError, match="32-dim"):
        SpeechTranslator(sp.translator, sp.encoder, sp.extractor,
                         SpeechAdapter(SpeechAdapterConfig(encoder_dim=16, llm_dim=8)))
    with pytest.raises(SimulmtError, match="takes 12-dim frames but the encoder gives 16-dim"):
        SpeechTranslator(sp.translator, sp.encoder, sp.extractor,
                         SpeechAdapter(SpeechAdapterConfig(encoder_dim=12, llm_dim=32)))
    with pytest.raises(SimulmtError, match="speech.json"):
        SpeechTranslator.load("/nonexistent")


def write_audio_set(folder, seconds=(1.3, 2.1)):
    """WAV files of ``seconds``, their list ``audio.list`` and two references ``ref.de``, in ``folder``."""
    from simulmt.speech.wav import write_wav

    names = []
    for i, s in enumerate(seconds):
        names.append(f"clip{i}.wav")
        write_wav(folder / names[-1], (audio(s, i) * 20000).astype(np.int16), 16000)
    (folder / "audio.list").write_text("\n".join(names) + "\n")
    (folder / "ref.de").write_text("Ein Mann fährt Fahrrad.\nZwei Hunde spielen im Park.\n")


def test_translate_audio_from_the_command_line(tmp_path, monkeypatch, capsys):
    """``simulmt translate --audio FILE --speech-model DIR``: words with their audio time, or one JSON object; other
    formats and rates are read as the same 16 kHz mono audio; bad files and missing options are clear errors."""
    from simulmt import cli
    from simulmt.speech import model as speech_model
    from simulmt.speech.wav import write_wav

    sp = tiny_speech()
    monkeypatch.setattr(speech_model.SpeechTranslator, "load", classmethod(lambda cls, folder, **kw: sp))
    wav = tmp_path / "clip.wav"
    write_wav(wav, (audio(1.5) * 20000).astype(np.int16), 16000)
    args = ["translate", "--audio", str(wav), "--speech-model", str(tmp_path), "--layout", "interleaved",
            "--policy", "wait-k", "--k", "2"]
    assert cli.main(args) == 0
    shown = capsys.readouterr().out
    assert "s audio |" in shown and "words from 1.50 s of audio" in shown
    assert cli.main(args + ["--jsonl"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["delays_ms"] and row["duration_ms"] == pytest.approx(1500) and len(row["delays"]) == len(
        row["prediction"].split())
    assert row == {**row, "layout": "interleaved", "policy": "wait-2"}
    # what users bring: the same clip as 16 kHz stereo FLAC (both channels the same): the same samples, the same row
    import av

    pcm = (audio(1.5) * 20000).astype(np.int16)
    with av.open(str(tmp_path / "clip.flac"), "w") as container:
        stream = container.add_stream("flac", rate=16000, layout="stereo")
        frame = av.AudioFrame.from_ndarray(np.repeat(pcm, 2).reshape(1, -1), format="s16", layout="stereo")
        frame.sample_rate = 16000
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    assert cli.main([*args[:2], str(tmp_path / "clip.flac"), *args[3:], "--jsonl"]) == 0
    flac = json.loads(capsys.readouterr().out)
    assert (flac["prediction"], flac["delays"], flac["duration_ms"]) == (row["prediction"], row["delays"],
                                                                         row["duration_ms"])
    write_wav(tmp_path / "8k.wav", np.zeros(800, np.int16), 8000)  # another rate: resampled
    assert cli.main(["translate", "--audio", str(tmp_path / "8k.wav"), "--speech-model", str(tmp_path)]) == 0
    assert "from 0.10 s of audio" in capsys.readouterr().out
    (tmp_path / "notes.txt").write_text("not a recording")
    assert cli.main(["translate", "--audio", str(tmp_path / "notes.txt"), "--speech-model", str(tmp_path)]) == 1
    assert "not an audio file FFmpeg can decode" in capsys.readouterr().err
    assert cli.main(["translate", "--audio", str(tmp_path / "missing.wav"), "--speech-model", str(tmp_path)]) == 1
    assert "not found" in capsys.readouterr().err
    assert cli.main(["translate", "--speech-model", str(tmp_path)]) == 2
    assert "give the recording with --audio" in capsys.readouterr().err


def test_evaluate_on_audio_scores_in_ms(tmp_path):
    """``simulmt evaluate --source-audio LIST``: the grid runs on WAV files; instances.log is SimulEval's speech
    log (delays and source length in ms of audio), *_CA adds the compute, and a missing file is named at once."""
    from simulmt.evaluation.grid import evaluate
    from simulmt.evaluation.options import EvaluateOptions
    from simulmt.evaluation.run_dir import read_log

    sp = tiny_speech()
    write_audio_set(tmp_path)
    options = EvaluateOptions(source_audio=str(tmp_path / "audio.list"), reference=str(tmp_path / "ref.de"),
                              output=str(tmp_path / "grid"), layouts="interleaved", ks="1,3", no_offline=True)
    results = evaluate(sp, options, progress=False)
    assert [r.spec.name for r in results] == ["interleaved.wait-1", "interleaved.wait-3"]
    run = tmp_path / "grid" / "interleaved.wait-1"
    records = read_log(run / "instances.log")
    assert [r["source_length"] for r in records] == pytest.approx([1300, 2100])
    assert all(r["delays"] == sorted(r["delays"]) and r["delays"][-1] <= r["source_length"] for r in records)
    assert all(len(r["delays"]) == len(r["delays_blocks"]) == len(r["prediction"].split()) for r in records)
    assert "source_type: speech" in (run / "config.yaml").read_text()
    scores = json.loads((run / "scores.json").read_text())
    wait3 = json.loads((tmp_path / "grid" / "interleaved.wait-3" / "scores.json").read_text())
    assert 0 < scores["AL"] < wait3["AL"] < 2100 and scores["AL_CA"] >= scores["AL"]
    # the page and the signature say ms of audio, not source words at an assumed rate
    assert scores["signature"]["latency"].startswith("SimulEval-1.1.4-definitions|unit:ms-of-audio|")
    assert "CA:delay+elapsed,ms" in scores["signature"]["latency"]
    page = (tmp_path / "grid" / "results.md").read_text()
    assert "latency in ms of audio" in page and "per source word" not in page
    batched = evaluate(sp, replace(options, output=str(tmp_path / "batched"), batch_size=2), progress=False)
    for one, two in zip(results, batched):  # the same words and delays; the signature says what elapsed is
        assert {k: v for k, v in one.scores.items() if not k.endswith("_CA") and k not in ("signature", "wall_ms")} == {
            k: v for k, v in two.scores.items() if not k.endswith("_CA") and k not in ("signature", "wall_ms")}
        assert two.scores["signature"]["latency"].endswith("|elapsed:in-engine+encoder-share,batch:2|prompt:shared")
        assert "prompt:shared" not in one.scores["signature"]["latency"]  # live: a session per file
    (tmp_path / "bad.list").write_text("clip0.wav\nnope.wav\n")
    with pytest.raises(SimulmtError, match="not found, e.g. line 2"):
        evaluate(sp, EvaluateOptions(source_audio=str(tmp_path / "bad.list"), reference=str(tmp_path / "ref.de"),
                                     output=str(tmp_path / "g2"), layouts="interleaved", ks="1", no_offline=True))
    with pytest.raises(SimulmtError, match="exactly one of --source"):
        EvaluateOptions(source="x", source_audio="y", reference="r", output="o")


def test_the_speech_demo(tmp_path, monkeypatch, capsys):
    """``simulmt demo --audio --speech-model DIR``: READ lines with audio times, WRITE lines with the word and when
    it was written; without a speech model, a clear message."""
    from simulmt import cli
    from simulmt.speech import model as speech_model

    sp = tiny_speech()
    loaded = []
    monkeypatch.setattr(speech_model.SpeechTranslator, "load",
                        classmethod(lambda cls, folder, **kw: loaded.append(folder) or sp))
    assert cli.main(["demo", "--audio", "--speech-model", str(tmp_path), "--k", "2"]) == 0
    shown = capsys.readouterr().out
    assert "READ  audio up to" in shown and "WRITE" in shown and "ms of recogniser/encoder per audio second" in shown
    assert loaded == [str(tmp_path)]


def test_the_speech_demo_defaults_to_the_recogniser_feeding_the_text_model(monkeypatch, capsys):
    """``simulmt demo --audio`` without a speech model: the Whisper recogniser's confirmed words (HEARD) are
    translated by the text model with the text defaults (expost)."""
    from simulmt import cli
    from simulmt.speech.cascade import CascadeTranslator
    from simulmt.speech.local_agreement import TimedWord
    from simulmt.speech.recognizer import RecognizerOptions

    class Words:  # hears "a man" in every second of audio
        options = RecognizerOptions(step_ms=500, trim_ms=4000, max_buffer_ms=8000, pause_ms=0)  # (no voice model)

        def transcribe(self, audio, prompt=""):
            return [TimedWord(w, 1000 * i, 1000 * i + 500, ends_segment=True)
                    for i in range(len(audio) // 16000) for w in ("a", "man")]

    made = []
    monkeypatch.setattr(CascadeTranslator, "load", classmethod(
        lambda cls, *a, **kw: made.append(kw) or cls(tiny_translator("llama"), Words(), Words.options)))
    assert cli.main(["demo", "--audio", "--k", "2"]) == 0
    shown = capsys.readouterr().out
    assert made and "HEARD a man" in shown and "WRITE" in shown and "expost" in shown


def test_the_simuleval_speech_agent_gives_what_the_session_gives():
    """SimulEval's speech segments (320 ms of float samples each) through the agent: the words it writes are the
    speech session's, and each is written no earlier than its block was available."""
    pytest.importorskip("simuleval", reason="SimulEval 1.1.4 (setup.sh puts it in .simuleval/)")
    from simulmt.evaluation.simuleval_speech_agent import SimulmtSpeechAgent

    sp = tiny_speech()
    agent = SimulmtSpeechAgent(Namespace(layout="interleaved", policy="wait-k", k=2), speech=sp)
    x = audio(2.0)
    written, sent = through_simuleval_agent(agent, x)
    alone = sp.translate(x, "interleaved", WaitK(2))
    assert " ".join(written) == alone.prediction == agent.translations[0].prediction
    assert all(s >= d - 1e-6 for s, d in zip(sent, alone.delays_ms))
    from simuleval.data.segments import SpeechSegment

    other = SimulmtSpeechAgent(Namespace(layout="interleaved", policy="wait-k", k=2), speech=sp)
    with pytest.raises(SimulmtError, match="at 44100 Hz with 1 channel.*takes 16 kHz mono"):  # SimulEval read the
        other.pushpop(SpeechSegment(content=x[:4410].tolist(), sample_rate=44100, finished=False))  # file as it is


def test_bench_on_audio_measures_rtf_and_streaming_against_offline(tmp_path, monkeypatch, capsys):
    """``simulmt bench --audio LIST``: offline, wait-k over blocks and the learned policy on the same files, each
    configuration's output replayed through offline decoding (same output), RTF and ms per token as totals."""
    from simulmt import cli
    from simulmt.core.learned_policy import PolicyHead
    from simulmt.speech import model as speech_model
    from simulmt.speech.wav import write_wav

    sp = tiny_speech()
    d = sp.translator.model.config.hidden_size
    sp.translator.policy_head = PolicyHead(torch.randn(2, d, generator=torch.Generator().manual_seed(1)),
                                           torch.zeros(2))
    monkeypatch.setattr(speech_model.SpeechTranslator, "load", classmethod(lambda cls, folder, **kw: sp))
    for i, seconds in enumerate([1.1, 1.7]):
        write_wav(tmp_path / f"c{i}.wav", (audio(seconds, i) * 20000).astype(np.int16), 16000)
    (tmp_path / "a.list").write_text("c0.wav\nc1.wav\n")
    assert cli.main(["bench", "--audio", str(tmp_path / "a.list"), "--speech-model", str(tmp_path), "--policy",
                     "wait-k,learned", "--k", "2", "--taus", "0.3,0.6", "--output", str(tmp_path / "b")]) == 0
    shown = capsys.readouterr().out
    assert "| wait-2 (blocks) |" in shown and "| learned tau=0.3 |" in shown and "| offline |" in shown
    bench = json.loads((tmp_path / "b" / "bench-speech.json").read_text())
    results = bench["results"]
    assert set(results) == {"offline", "wait-2 (blocks)", "learned tau=0.3", "learned tau=0.6"}
    mean = (results["learned tau=0.3"]["same_output_all_compute"]
            + results["learned tau=0.6"]["same_output_all_compute"]) / 2
    assert "| learned, mean of 2 thresholds (EASiST's figure) |" in shown and f"| {mean:.2f}x |" in shown
    for name, s in results.items():
        runs = bench["runs"][name]
        assert s["utterances"] == 2 and s["audio_s"] == pytest.approx(2.8)
        # the report rounds the RTF to 4 decimals: up to half a unit of the last one off
        assert s["rtf"] == pytest.approx(sum(r["wall_ms"] for r in runs) / 1000 / 2.8, rel=1e-3, abs=5.01e-5)
        assert s["target_tokens"] == sum(r["target_tokens"] for r in runs) > 0
        assert s["same_output"] > 0 and s["same_output_all_compute"] > 0
        assert s["forwards_per_token"] >= s["offline_replay_forwards_per_token"] > 0
    assert cli.main(["bench", "--audio", str(tmp_path / "a.list"), "--policy", "learned", "--taus", "0.3,x"]) == 2
    assert "--taus takes comma-separated numbers" in capsys.readouterr().err
    assert cli.main(["bench", "--audio", str(tmp_path / "a.list"), "--policy", "read-n"]) == 2
    assert "wait-k (over blocks, or a spelling model's words) or learned" in capsys.readouterr().err
    assert cli.main(["bench", "--audio", str(tmp_path / "none.wav"), "--speech-model", str(tmp_path)]) == 1
    assert "not found" in capsys.readouterr().err


def test_batched_files_give_the_live_path_s_words_delays_and_times(tmp_path):
    """``translate_iter(batch_size > 1)`` (what ``evaluate --source-audio --batch-size N`` runs) equals the live
    one-at-a-time path in everything but wall times; a file that cannot be read fails alone, in its place."""
    from simulmt.speech.wav import write_wav

    sp = tiny_speech("gemma3")
    paths = []
    for seed, seconds in enumerate([1.7, 2.9, 1.1, 2.2]):
        paths.append(tmp_path / f"u{seed}.wav")
        write_wav(paths[-1], (audio(seconds, seed) * 32767).astype(np.int16), 16000)
    paths.insert(2, tmp_path / "missing.wav")
    live = list(sp.translate_iter(paths, layout="interleaved", policy="wait-k", k=3))
    rows = []
    real_step = Engine.step
    with pytest.MonkeyPatch.context() as mp:  # batched: never the one-at-a-time path, several rows per forward
        mp.setattr(sp, "translate", lambda *a, **k: pytest.fail("the live path ran"))
        mp.setattr(Engine, "step", lambda self: (rows.append(len(self.streams)), real_step(self))[1])
        batched = list(sp.translate_iter(paths, batch_size=3, layout="interleaved", policy="wait-k", k=3))
    assert max(rows) == 3
    # a word's elapsed time counts its own stream's work, not the reading and encoding of files joining later:
    # each later file's encoding moves the clock on by 1000 s (a fake clock, so load on the machine cannot matter)
    import time as clock

    real_encode, real_clock, encoded, jumped = sp.encode, clock.perf_counter, [], [0.0]

    def slow_encode(x):
        encoded.append(1)
        if len(encoded) > 1:
            jumped[0] += 1000.0
        return real_encode(x)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sp, "encode", slow_encode)
        mp.setattr(clock, "perf_counter", lambda: real_clock() + jumped[0])
        first = next(iter(sp.translate_iter(paths[:3], batch_size=3, layout="interleaved", policy="wait-k", k=3)))
    assert len(encoded) == 2 and first.prediction == live[0].prediction  # (the third file is missing)
    assert 0 < first.elapsed[-1] < 500_000  # the jump would be 1,000,000 ms
    assert [b.source for b in batched] == [str(p) for p in paths]
    for a, b in zip(live, batched):
        assert (a.prediction, a.delays, a.delays_ms, a.source_length) == (b.prediction, b.delays, b.delays_ms,
                                                                          b.source_length)
        assert b.duration_ms == pytest.approx(a.duration_ms) and (a.error is None) == (b.error is None)
        assert b.elapsed == sorted(b.elapsed) and len(b.elapsed) == len(b.delays)
    assert batched[2].error and "not found" in batched[2].error and batched[2].prediction == ""
    assert all(b.prediction and b.encoder_ms > 0 for i, b in enumerate(batched) if i != 2)
    # the learned policy decides on hidden states the engine computes for several streams at once
    from simulmt.core.learned_policy import PolicyHead

    sp.translator.policy_head = PolicyHead(torch.randn(2, sp.translator.model.config.hidden_size,
                                                       generator=torch.Generator().manual_seed(3)), torch.zeros(2))
    live = list(sp.translate_iter(paths, layout="interleaved", policy="learned", tau=0.5))
    batched = list(sp.translate_iter(paths, batch_size=3, layout="interleaved", policy="learned", tau=0.5))
    assert [(a.prediction, a.delays) for a in live] == [(b.prediction, b.delays) for b in batched]
    assert len({tuple(a.delays) for a in live if a.delays}) > 1  # the head's decisions differ between files


def test_a_speech_run_of_the_learned_policy_says_when_it_decides(tmp_path, monkeypatch):
    """A learned speech run's config says whether it decided once per block or after every word, and a run
    directory written one way is not resumed the other way (its sentences would mix two policies)."""
    from simulmt.core.learned_policy import PolicyHead
    from simulmt.evaluation.grid import evaluate
    from simulmt.evaluation.options import EvaluateOptions
    from simulmt.speech.model import SpeechTranslator

    sp = tiny_speech()
    d = sp.translator.model.config.hidden_size
    sp.translator.policy_head = PolicyHead(torch.randn(2, d, generator=torch.Generator().manual_seed(1)),
                                           torch.zeros(2))
    write_audio_set(tmp_path)
    options = EvaluateOptions(source_audio=str(tmp_path / "audio.list"), reference=str(tmp_path / "ref.de"),
                              output=str(tmp_path / "grid"), layouts="interleaved", policies="learned", taus="0.5",
                              no_offline=True)
    evaluate(sp, options, progress=False)
    config = json.loads((tmp_path / "grid" / "interleaved.learned-0.5" / "config.json").read_text())
    assert config["learned_decides"] == "once per block"
    monkeypatch.setattr(SpeechTranslator, "decide_per_block", False)
    with pytest.raises(SimulmtError, match="learned_decides"):
        evaluate(sp, options, progress=False)
