"""simulmt inside the IWSLT harness: ``simulstream_inference`` runs simulmt's SimulStream processor on a short
talk (the packaged utterance twice, a pause between), and the log it writes is scored by SimulStream's
``simulstream_score_latency`` (StreamLAAL) and by OmniSTEval (BLEU, LongYAAL) from their own command lines.
Loopback only: a tiny random text model saved to disk, the packaged Whisper tiny.en."""

from __future__ import annotations

import json
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

from helpers import save_tiny_model

pytest.importorskip("simulstream", reason="the longform extra (setup.sh installs it)")
pytest.importorskip("faster_whisper", reason="the speech extra (setup.sh installs it)")
BIN = Path(sys.executable).parent
SAMPLES = Path(__file__).resolve().parents[1] / "simulmt" / "speech" / "samples"


def run(name: str, *args: str, cwd: Path) -> str:
    done = subprocess.run([str(BIN / name), *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done.stdout + done.stderr


def read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path)) as f:
        return np.frombuffer(f.readframes(f.getnframes()), dtype=np.int16)


def test_a_talk_runs_under_simulstream_inference_and_is_scored_by_the_harness(tmp_path):
    model = save_tiny_model(tmp_path / "tiny")
    utterance = read_wav(SAMPLES / "a_man_rides_a_bike.wav")
    pause = np.zeros(8000, dtype=np.int16)
    talk = np.concatenate([utterance, pause, utterance])
    with wave.open(str(tmp_path / "talk.wav"), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(16000)
        f.writeframes(talk.tobytes())
    (tmp_path / "wavs.txt").write_text("talk.wav\n")
    seconds = len(utterance) / 16000
    (tmp_path / "segments.yaml").write_text(
        f"- {{wav: talk.wav, offset: 0.0, duration: {seconds}}}\n"
        f"- {{wav: talk.wav, offset: {seconds + 0.5}, duration: {seconds}}}\n")
    (tmp_path / "references.txt").write_text("Ein Mann fährt im Park Fahrrad.\nEin Mann fährt im Park Fahrrad.\n")
    (tmp_path / "talk.yaml").write_text("\n".join([
        "type: simulmt.evaluation.simulstream_processor.SimulmtProcessor", "speech_chunk_size: 1.0",
        f"model: {model}", "adapter: none", "layout: expost", "policy: wait-k", "k: 2", "context_pairs: 1",
        "device: cpu", "dtype: float32", "detokenizer_type: simuleval", "latency_unit: word"]) + "\n")
    run("simulstream_inference", "--speech-processor-config", "talk.yaml", "--wav-list-file", "wavs.txt",
        "--metrics-log-file", "log.jsonl", cwd=tmp_path)
    lines = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()]
    chunks = [x for x in lines if "generated_tokens" in x]
    assert len(chunks) >= int(len(talk) / 16000)  # a line per second of audio, and the end of the stream
    written = [t for x in chunks for t in x["generated_tokens"]]
    assert written and all(x["total_audio_processed"] <= len(talk) / 16000 + 1e-6 for x in chunks)
    assert all(x["computation_time"] >= 0 for x in chunks)
    out = run("simulstream_score_latency", "--scorer", "stream_laal", "--eval-config", "talk.yaml", "--log-file",
              "log.jsonl", "--reference", "references.txt", "--audio-definition", "segments.yaml", cwd=tmp_path)
    line = next(x for x in out.splitlines() if "LatencyScores" in x)
    ideal = float(line.split("ideal_latency=")[1].split(",")[0])
    assert 0 < ideal < 2 * seconds + 1
    run("omnisteval", "longform", "--speech_segmentation", "segments.yaml", "--ref_sentences_file", "references.txt",
        "--hypothesis_file", "log.jsonl", "--hypothesis_format", "simulstream", "--simulstream_config_file",
        "talk.yaml", "--word_level", "--lang", "de", "--output_folder", "omni", cwd=tmp_path)
    scores = dict(row.split("\t") for row in (tmp_path / "omni" / "scores.tsv").read_text().splitlines()[1:])
    assert "BLEU" in scores and float(scores["LongYAAL (CU)"]) > 0


def test_the_processor_config_takes_a_head_vocabulary(monkeypatch):
    """``head_vocabulary`` in the processor's config reaches the text model's loading, and is part of what tells
    one loaded configuration from another."""
    from types import SimpleNamespace

    from simulmt.evaluation.simulstream_processor import SimulmtProcessor
    from simulmt.speech import loading

    seen = []
    monkeypatch.setattr(loading, "load_speech", lambda speech_model, **kwargs: (seen.append(kwargs), (object(), {}))[1])
    monkeypatch.setattr(SimulmtProcessor, "_loaded", {})
    SimulmtProcessor.load_model(SimpleNamespace(head_vocabulary="a.de,b.en"))
    SimulmtProcessor.load_model(SimpleNamespace())
    SimulmtProcessor.load_model(SimpleNamespace(head_vocabulary=["a.de", "b.en"]))  # (YAML's list: the same files)
    assert [kw["head_vocabulary"] for kw in seen] == ["a.de,b.en", None]
    assert len(SimulmtProcessor._loaded) == 2


def test_the_processor_config_takes_the_recognisers_later_step(monkeypatch):
    """``asr_later_step_ms`` in the processor's config reaches the recogniser (0, off, when not given), and tells
    one loaded configuration from another."""
    from types import SimpleNamespace

    from simulmt.evaluation.simulstream_processor import SimulmtProcessor
    from simulmt.speech import loading

    seen = []
    monkeypatch.setattr(loading, "load_speech", lambda speech_model, **kwargs: (seen.append(kwargs), (object(), {}))[1])
    monkeypatch.setattr(SimulmtProcessor, "_loaded", {})
    SimulmtProcessor.load_model(SimpleNamespace(asr_step_ms=500, asr_later_step_ms=1000))
    SimulmtProcessor.load_model(SimpleNamespace(asr_step_ms=500))
    assert [(kw["asr_step_ms"], kw["asr_later_step_ms"]) for kw in seen] == [(500, 1000), (500, 0)]
