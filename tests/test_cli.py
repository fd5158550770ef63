"""The command line, in process, on a tiny random model (no network, no real model)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulmt import cli
from simulmt.errors import ModelNotFoundError
from simulmt.policies import wait_k_delays
from simulmt.translator import Translator
from tiny_models import make_model, make_tokenizer

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = ["The weather is nice today.", "The children are playing in the garden."]


@pytest.fixture(scope="module")
def translator() -> Translator:
    tok = make_tokenizer()
    return Translator(make_model("llama", len(tok)), tok, name="tiny-llama")


@pytest.fixture
def input_file(tmp_path) -> Path:
    path = tmp_path / "input.txt"
    path.write_text(f"{SENTENCES[0]}\n\n{SENTENCES[1]}\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("args, message", [
    (["--layout", "nope"], "invalid choice: 'nope'"),
    (["--policy", "wait-x"], "invalid choice: 'wait-x'"),
    (["--k", "0"], "--k must be at least 1"),
    (["--n", "0"], "--n must be at least 1"),
    (["--slot", "0"], "--slot must be at least 1"),
    (["--phi", "0"], "--phi must be at least 1"),
    (["--k", "three"], "invalid int value"),
    (["--target-lang", "xx"], "unknown language 'xx'"),
    (["--source-lang", "Klingon"], "unknown language 'Klingon'"),
])
def test_argument_errors_exit_2_before_loading(loads, capsys, input_file, args, message):
    assert cli.main(["translate", *args, str(input_file)]) == 2
    err = capsys.readouterr().err
    assert "simulmt translate: error:" in err and message in err
    assert loads == []


def test_options_validate_on_their_own():
    with pytest.raises(cli.SimulmtError, match="unknown layout"):
        cli.TranslateOptions(layout="nope")
    with pytest.raises(cli.SimulmtError, match="unknown policy"):
        cli.TranslateOptions(policy="nope")
    assert cli.TranslateOptions(source_lang="German", target_lang="fr").target_lang == "fr"


def test_missing_input_file_is_an_argument_error(loads, capsys, tmp_path):
    assert cli.main(["translate", str(tmp_path / "missing.txt")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert loads == []


def test_model_not_found_exits_1_without_traceback(monkeypatch, capsys, input_file):
    def load(**kwargs):
        raise ModelNotFoundError(f"Could not load model '{kwargs['model']}'. Tried: nothing")

    monkeypatch.setattr(cli, "_load_translator", load)
    assert cli.main(["translate", "--model", "no-such-model", str(input_file)]) == 1
    err = capsys.readouterr().err
    assert "Could not load model 'no-such-model'" in err and "Traceback" not in err


def test_real_loader_offline_bogus_name(monkeypatch, capsys, input_file):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert cli.main(["translate", "--model", "nobody/no-such-model-xyz", str(input_file)]) == 1
    err = capsys.readouterr().err
    assert "Could not load model 'nobody/no-such-model-xyz'" in err and "Traceback" not in err


def test_jsonl(loads, capsys, input_file):
    k = 2
    assert cli.main(["translate", "--policy", "wait-k", "--k", str(k), "--jsonl", "--target-lang", "German",
                     str(input_file)]) == 0
    assert loads == [dict(model=None, adapter="auto", source_lang="en", target_lang="German", device=None,
                          dtype="float32")]
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 3
    for row in rows:
        assert {"source", "prediction", "delays", "elapsed", "tokens_fed", "flops", "layout", "policy"} <= row.keys()
        assert row["error"] is None
        assert len(row["delays"]) == len(row["elapsed"]) == len(row["prediction"].split())
        assert row["layout"] == "expost(slot=16)" and row["policy"] == "wait-2"
    empty = rows[1]
    assert empty["source"] == "" and empty["prediction"] == "" and empty["tokens_fed"] == 0
    for row, source in zip((rows[0], rows[2]), SENTENCES):
        assert row["source"] == source and row["prediction"] and row["tokens_fed"] > 0 and row["flops"] > 0
        assert row["delays"] == wait_k_delays(k, len(source.split()), len(row["delays"]))


def _stdin(text: str) -> None:
    sys.stdin = io.StringIO(text + "\n")


@pytest.fixture(autouse=True)
def _restore_stdin():
    saved = sys.stdin
    yield
    sys.stdin = saved


def test_context_overflow_is_reported_per_line(loads, capsys, tmp_path):
    long_line = " ".join(["weather"] * 600)
    path = tmp_path / "long.txt"
    path.write_text(f"{SENTENCES[0]}\n{long_line}\n{SENTENCES[1]}\n", encoding="utf-8")
    assert cli.main(["translate", "--jsonl", str(path)]) == 1  # wait-3: fails mid-stream
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert len(rows) == 3
    assert "context" in rows[1]["error"] and rows[1]["prediction"] == "" and rows[1]["delays"] == []
    assert rows[1]["source_length"] == 600
    assert rows[0]["prediction"] and rows[0]["error"] is None
    assert rows[2]["prediction"] and rows[2]["error"] is None


def test_context_overflow_plain_output(loads, capsys, tmp_path):
    path = tmp_path / "long.txt"
    path.write_text(" ".join(["weather"] * 600) + f"\n{SENTENCES[0]}\n", encoding="utf-8")
    assert cli.main(["translate", "--policy", "offline", str(path)]) == 1
    captured = capsys.readouterr()
    lines = captured.out.split("\n")
    assert lines[0] == "" and lines[1] and lines[2:] == [""]
    assert "line 1:" in captured.err and "context" in captured.err and "1 of 2 lines" in captured.err


def test_plain_output_one_line_per_input_line(loads, capsys, input_file):
    assert cli.main(["translate", str(input_file)]) == 0
    out = capsys.readouterr().out
    lines = out.split("\n")
    assert len(lines) == 4 and lines[3] == ""  # three lines, each ending with a newline
    assert lines[0] and lines[1] == "" and lines[2]


def test_stdin_and_live_terminal_output(loads, capsys, monkeypatch, translator):
    monkeypatch.setattr(cli, "_stdout_is_terminal", lambda: True)
    _stdin(f"{SENTENCES[0]}\n   \n{SENTENCES[1]}")
    assert cli.main(["translate", "--layout", "prefix", "--policy", "read-n", "--n", "2"]) == 0
    lines = capsys.readouterr().out.split("\n")
    expected = [translator.translate(s, "prefix", "read-n", n=2).prediction for s in SENTENCES]
    assert lines == [expected[0], "", expected[1], ""]


def test_demo(loads, capsys):
    assert cli.main(["demo", "--k", "2"]) == 0
    out = capsys.readouterr().out
    assert "NOT fine-tuned" in out
    assert loads and loads[0]["model"] == cli.DEFAULT_MODEL
    from simulmt.demo import SENTENCES as DEMO

    for sentence in DEMO:
        assert sentence in out
    assert out.count("READ ") == sum(len(s.split()) for s in DEMO)
    assert "WRITE" in out and "delay 2" in out and "total" in out


def test_demo_with_an_adapter_names_it_and_drops_the_notice(loads, translator, monkeypatch, capsys):
    monkeypatch.setattr(translator, "adapter", "my-lora", raising=False)
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    assert loads[0]["adapter"] == "auto"  # the shipped adapter unless told otherwise
    assert "adapter my-lora" in out and "NOT fine-tuned" not in out
    assert out.strip().splitlines()[-1].startswith("total")  # ends with the one-line summary


def test_version_subprocess():
    proc = subprocess.run([sys.executable, "-m", "simulmt", "--version"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0
    assert proc.stdout.strip().startswith("simulmt ")
