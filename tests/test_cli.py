"""The command line, in process, on a tiny random model (no network, no real model)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import time
import sys
from pathlib import Path

import pytest

from simulmt import cli
from simulmt.errors import ModelNotFoundError
from simulmt.core.policies import wait_k_delays
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
    (["--max-words", "0"], "--max-words must be at least 1"),
    (["--k", "three"], "invalid int value"),
    (["--target-lang", "xx"], "unknown language 'xx'"),
    (["--source-lang", "Klingon"], "unknown language 'Klingon'"),
    (["--asr-pause-ms", "-5"], "--asr-pause-ms must be at least 0"),
    (["--asr-policy", "agree"], "invalid choice: 'agree'"),
    (["--asr-beam", "0"], "--asr-beam must be at least 1"),
    (["--asr-later-step-ms", "500"], "--asr-later-step-ms must be 0 (off) or within 1000..12000 ms"),
    (["--asr-later-step-ms", "-1"], "--asr-later-step-ms must be 0 (off) or within"),
])
def test_argument_errors_exit_2_before_loading(loads, capsys, input_file, args, message):
    assert cli.main(["translate", *args, str(input_file)]) == 2
    err = capsys.readouterr().err
    assert "simulmt translate: error:" in err and message in err
    assert loads == []


@pytest.mark.parametrize("args, message", [
    (["--layout", "prefix", "--slot", "8"], "slot=8 is an option of expost"),
    (["--policy", "read-n", "--k", "5"], "k=5 is an option of wait-k"),
    (["--layout", "expost", "--phi", "64"], "phi=64 is an option of gpe"),
    (["--policy", "wait-k", "--tau", "0.3"], "tau=0.3 is an option of learned"),
])
def test_an_option_the_layout_and_policy_do_not_take_is_an_error(loads, capsys, input_file, args, message):
    assert cli.main(["translate", *args, str(input_file)]) == 2
    err = capsys.readouterr().err
    assert message in err and "takes" in err
    assert loads == []


def test_stream_options_fill_defaults_and_name_what_they_take():
    from simulmt.core.stream_options import StreamOptions

    options = StreamOptions("gpe", "read-n", phi=64)
    assert options.taken() == ("n", "phi")
    assert options.session_kwargs() == {"layout": "gpe", "policy": "read-n", "k": 3, "n": 3, "tau": 0.5, "slot": 16,
                                        "phi": 64}
    assert StreamOptions("expost", "learned", tau=0.3, slot=8).given() == {"tau": 0.3, "slot": 8}
    with pytest.raises(cli.SimulmtError, match="prefix with policy offline takes none"):
        StreamOptions("prefix", "offline", slot=8)
    with pytest.raises(cli.SimulmtError, match="at least 1"):
        StreamOptions(k=0)


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
                          dtype="auto", head_vocabulary=None)]
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


def _stdin(text: str | bytes) -> None:
    """Standard input as the CLI sees it: bytes under a text wrapper (the CLI reads ``sys.stdin.buffer``)."""
    data = text if isinstance(text, bytes) else (text + "\n").encode("utf-8")
    sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")


@pytest.fixture(autouse=True)
def _restore_stdin():
    saved = sys.stdin
    yield
    sys.stdin = saved


def test_context_overflow_is_reported_per_line(loads, capsys, tmp_path):
    long_line = " ".join(["weather"] * 600)
    path = tmp_path / "long.txt"
    path.write_text(f"{SENTENCES[0]}\n{long_line}\n{SENTENCES[1]}\n", encoding="utf-8")
    # one sentence of 600 words (--max-words 1000): wait-3 fails mid-stream
    assert cli.main(["translate", "--jsonl", "--max-words", "1000", str(path)]) == 1
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
    assert cli.main(["translate", "--policy", "offline", "--max-words", "1000", str(path)]) == 1
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
    from simulmt.demo.text import SENTENCES as DEMO

    for sentence in DEMO:
        assert sentence in out
    assert out.count("READ ") == sum(len(s.split()) for s in DEMO)
    assert "WRITE" in out and "delay 2" in out and "total" in out
    assert "greedy decoding on cpu (float32 weights)" in out and loads[0]["dtype"] == "auto"


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


# ---- bad input: not UTF-8 ----------------------------------------------------------------------------------------
BAD_LINE = b"Hello \xff\xfe world."
BAD_MESSAGE = "line 2 is not valid UTF-8 (byte 0xff at column 7: invalid start byte)"


def test_a_line_that_is_not_utf8_is_reported_and_the_others_translated(loads, capsys, tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(SENTENCES[0].encode() + b"\n" + BAD_LINE + b"\n" + SENTENCES[1].encode() + b"\n")
    assert cli.main(["translate", "--jsonl", str(path)]) == 1
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["error"] for row in rows] == [None, BAD_MESSAGE, None]
    assert rows[1]["prediction"] == "" and rows[1]["delays"] == [] and rows[1]["source"] == "Hello \ufffd\ufffd world."
    assert rows[0]["prediction"] and rows[2]["prediction"]


def test_standard_input_bytes_crlf_and_a_byte_order_mark(loads, capsys, translator):
    _stdin(b"\xef\xbb\xbf" + SENTENCES[0].encode() + b"\r\n" + BAD_LINE + b"\r\n" + SENTENCES[1].encode() + b"\r\n")
    assert cli.main(["translate"]) == 1
    captured = capsys.readouterr()
    expected = [translator.translate(s).prediction for s in SENTENCES]
    assert captured.out.split("\n") == [expected[0], "", expected[1], ""]  # BOM and CR are not translated
    assert f"simulmt: {BAD_MESSAGE}\n" in captured.err and "1 of 3 lines could not be translated" in captured.err
    assert "Traceback" not in captured.err


# ---- long lines: translated sentence by sentence -----------------------------------------------------------------
TALK = ["The weather is nice today.", "Where is the train station?", "My brother works in a hospital in Berlin.",
        "The children are playing in the garden."]


def test_a_long_line_is_translated_sentence_by_sentence(loads, capsys, tmp_path, translator):
    path = tmp_path / "talk.txt"
    path.write_text(" ".join(TALK) + "\n", encoding="utf-8")
    assert cli.main(["translate", "--jsonl", "--k", "2", str(path)]) == 0
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    parts = [translator.translate(s, k=2) for s in TALK]
    assert row["source"] == " ".join(TALK) and row["source_length"] == 25 and row["error"] is None
    assert row["prediction"] == " ".join(p.prediction for p in parts)
    offsets = [0, 5, 10, 18]  # source words of the sentences before
    assert row["delays"] == [d + o for p, o in zip(parts, offsets) for d in p.delays]
    assert row["delays"] == sorted(row["delays"]) and max(row["delays"]) <= 25
    # one talk on one cache row: the sentences after the first find the prompt there (no context by default)
    assert row["tokens_fed"] == sum(p.tokens_fed for p in parts) - (len(parts) - 1) * len(translator.fmt.prompt)


def test_a_sentence_longer_than_max_words_is_cut(loads, capsys, tmp_path, monkeypatch):
    path = tmp_path / "run-on.txt"
    path.write_text(" ".join(["weather"] * 120) + "\n", encoding="utf-8")  # too long for the tiny model's context
    assert cli.main(["translate", "--jsonl", "--policy", "offline", "--max-words", "1000", str(path)]) == 1
    assert "context" in json.loads(capsys.readouterr().out)["error"]
    monkeypatch.setattr(cli, "_stderr_is_terminal", lambda: True)  # the progress bar counts words
    assert cli.main(["translate", "--jsonl", "--max-words", "12", str(path)]) == 0
    captured = capsys.readouterr()
    [row] = [json.loads(line) for line in captured.out.splitlines()]
    assert row["error"] is None and row["source_length"] == 120 and row["prediction"]
    assert row["delays"] == sorted(row["delays"]) and row["delays"][-1] == 120
    assert "120/120" in captured.err and "word" in captured.err


def test_a_40000_word_line_starts_producing_output_at_once(translator, monkeypatch):
    """The first target word comes after the first sentence is read, not after 40,000 words are."""
    opened = []
    session = translator.talk_session
    monkeypatch.setattr(translator, "talk_session", lambda **kwargs: opened.append(session(**kwargs)) or opened[-1])

    class FirstWord(Exception):
        pass

    def stop(word):
        raise FirstWord(word.text)

    start = time.perf_counter()
    with pytest.raises(FirstWord):
        cli.translate_line(translator, " ".join(TALK[:1] * 8000), cli.TranslateOptions(), on_word=stop)
    assert len(opened) == 1 and time.perf_counter() - start < 5
    assert not opened[0].sentences and len(opened[0].source_words) <= len(TALK[0].split())  # still the first


def _translate_counting(translator, text: str, **options) -> tuple[cli.Translation, list[list]]:
    """translate_line, with the written words of each sentence (their token ids) collected."""
    sentences: list[list] = [[]]
    result = cli.translate_line(translator, text, cli.TranslateOptions(**options),
                                on_word=lambda word: sentences[-1].append(word),
                                on_sentence=lambda _: sentences.append([]))
    return result, sentences[:-1]


def test_generation_is_bounded_per_sentence(translator):
    from simulmt.core.session import DecodeConfig

    bounds = DecodeConfig()
    result, sentences = _translate_counting(translator, " ".join(TALK * 2), policy="offline")
    assert len(sentences) == 8 and result.error is None
    for words, source in zip(sentences, TALK * 2):
        assert len(words) <= bounds.max_len_a * len(source.split()) + bounds.max_len_b
        assert all(len(word.tokens) <= bounds.max_tokens_per_word for word in words)


@pytest.mark.slow
def test_a_2000_word_line_finishes_with_bounded_generation(translator):
    from simulmt.core.session import DecodeConfig

    bounds = DecodeConfig()
    text = " ".join(["weather garden station coffee"] * 500)  # 2,000 words, no sentence end: cut at 16
    result, sentences = _translate_counting(translator, text, max_words=16)
    assert len(sentences) == 125 and result.source_length == 2000 and result.error is None
    for words in sentences:
        assert len(words) <= bounds.max_len_a * 16 + bounds.max_len_b
        assert all(len(word.tokens) <= bounds.max_tokens_per_word for word in words)
    assert result.delays == sorted(result.delays) and result.delays[-1] == 2000


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_batch_size_prints_exactly_what_one_stream_prints(loads, capsys, tmp_path, source):
    """--batch-size N: the same lines, in the same order, as --batch-size 1 (an empty line, a line that is not
    UTF-8, a line of several sentences, a line too long for the context included)."""
    lines = [SENTENCES[0].encode(), b"", b"Hello \xff world.", (SENTENCES[1] + " " + SENTENCES[0]).encode(),
             " ".join(["weather"] * 600).encode(), b"Where is the train station?", SENTENCES[1].encode()]
    data = b"\n".join(lines) + b"\n"
    path = tmp_path / "mixed.txt"
    path.write_bytes(data)
    outputs = {}
    for batch in ("1", "3"):
        args = ["translate", "--jsonl", "--max-words", "1000", "--batch-size", batch, "--k", "2"]
        if source == "stdin":
            _stdin(data)
        else:
            args.append(str(path))
        assert cli.main(args) == 1  # two lines fail: not UTF-8, too long for the context
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        outputs[batch] = [(r["source"], r["prediction"], r["delays"], r["tokens_fed"], r["error"]) for r in rows]
    assert len(outputs["1"]) == len(lines)
    assert outputs["3"] == outputs["1"]
    assert [bool(row[4]) for row in outputs["1"]] == [False, False, True, False, True, False, False]


def test_batch_size_must_be_positive(loads, capsys, input_file):
    assert cli.main(["translate", "--batch-size", "0", str(input_file)]) == 2
    assert "--batch-size must be at least 1" in capsys.readouterr().err


def test_dtype_defaults_serve_users_fast_and_measure_the_same_everywhere():
    """translate, demo and serve default to auto (float16-packed on a CPU, bfloat16 on a GPU); evaluate and bench
    to float32, so their numbers do not depend on the machine unless asked."""
    from simulmt.bench.command import BenchOptions
    from simulmt.option_fields import DTYPES
    from simulmt.service.server import ServeOptions

    assert cli.TranslateOptions().dtype == cli.DemoOptions().dtype == ServeOptions().dtype == "auto"
    assert BenchOptions(source="s").dtype == "float32"
    assert "auto" in DTYPES
    parser, _ = cli.build_parser()
    assert parser.parse_args(["translate", "--dtype", "auto"]).dtype == "auto"


# ---- files that cannot be written: one line, no traceback, before the model loads --------------------------------
def _one_error_line(err: str, expected: str) -> None:
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert err.strip().splitlines() == [expected], err


@pytest.fixture
def output_inputs(tmp_path) -> dict[str, list[str]]:
    """Each command that writes an --output folder, with valid inputs and a model that does not exist: a model
    loaded before the output is checked would be the error reported instead."""
    source = tmp_path / "src.txt"
    source.write_text(f"{SENTENCES[0]}\n", encoding="utf-8")
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(f"{SENTENCES[0]}\tDas Wetter ist heute schön.\n", encoding="utf-8")
    model = ["--model", str(tmp_path / "no-such-model")]
    return {
        "evaluate": ["evaluate", "--source", str(source), "--reference", str(source), *model],
        "bench": ["bench", "--source", str(source), *model],
        "finetune": ["finetune", "--train-tsv", str(pairs), *model],
        "rl": ["rl", "--train-source", str(source), "--train-target", str(source), *model],
        "finetune-speech": ["finetune-speech", "--corpus", str(source), *model],
    }


PREFIX = {"evaluate": "simulmt", "bench": "simulmt", "finetune": "simulmt finetune", "rl": "simulmt rl",
          "finetune-speech": "simulmt finetune-speech"}


@pytest.mark.parametrize("command", list(PREFIX))
@pytest.mark.parametrize("case", ["a file", "under a file"])
def test_an_output_folder_that_cannot_be_made_is_one_line_before_the_model_loads(loads, capsys, tmp_path,
                                                                                  output_inputs, command, case):
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    output = afile if case == "a file" else afile / "out"
    assert cli.main([*output_inputs[command], "--output", str(output)]) == 1
    reason = ("exists and is not a directory" if case == "a file"
              else f"cannot be created: {afile} is not a directory")
    _one_error_line(capsys.readouterr().err, f"{PREFIX[command]}: error: --output {output} {reason}")
    assert loads == [] and afile.read_text() == "not a folder\n"


@pytest.mark.parametrize("ids,message", [
    ("t1\n", "has 1 lines, fewer than the 2 source lines"),
    ("t1\nt2\nt1\n", None),  # (three ids for two lines: the third is not read)
    ("t1\n\n", "empty"),
])
def test_a_docids_file_that_does_not_fit_is_refused_before_the_model_loads(loads, capsys, tmp_path, ids, message):
    (tmp_path / "src").write_text("A man.\nTwo dogs.\n", encoding="utf-8")
    (tmp_path / "docids").write_text(ids, encoding="utf-8")
    args = ["evaluate", "--source", str(tmp_path / "src"), "--reference", str(tmp_path / "src"), "--docids",
            str(tmp_path / "docids"), "--output", str(tmp_path / "runs"), "--ks", "3", "--layouts", "expost",
            "--no-offline"]
    if message is None:  # consecutive lines of each talk in the lines evaluated: it runs
        assert cli.main(args) == 0 and len(loads) == 1
        return
    assert cli.main(args) == 2
    assert message in capsys.readouterr().err and not loads  # said before any model was loaded
    (tmp_path / "docids").write_text("t1\nt2\nt1\n", encoding="utf-8")
    (tmp_path / "src").write_text("A man.\nTwo dogs.\nA cat.\n", encoding="utf-8")
    assert cli.main(args) == 2
    assert "talk 't1' comes back at line 3" in capsys.readouterr().err and not loads

def test_the_speech_recipe_of_finetune_checks_its_output_too(loads, capsys, tmp_path, output_inputs):
    (tmp_path / "afile").write_text("")
    args = ["finetune", "--recipe", "speech-align", *output_inputs["finetune-speech"][1:]]
    assert cli.main([*args, "--output", str(tmp_path / "afile")]) == 1
    _one_error_line(capsys.readouterr().err,
                    f"simulmt finetune-speech: error: --output {tmp_path / 'afile'} exists and is not a directory")


def test_a_read_only_folder_is_refused_before_the_model_loads(loads, capsys, tmp_path, output_inputs, monkeypatch):
    import simulmt.output_dir

    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    real_access = os.access
    # root writes into read-only folders: the permission check is what is tested, so it answers as for a user
    monkeypatch.setattr(simulmt.output_dir.os, "access",
                        lambda path, mode: False if os.fspath(path) == str(folder) and mode & os.W_OK
                        else real_access(path, mode))
    try:
        assert cli.main([*output_inputs["evaluate"], "--output", str(folder / "runs")]) == 1
        _one_error_line(capsys.readouterr().err,
                        f"simulmt: error: --output {folder / 'runs'} cannot be created: {folder} is not writable")
        assert cli.main([*output_inputs["finetune"], "--output", str(folder)]) == 1
        _one_error_line(capsys.readouterr().err,
                        f"simulmt finetune: error: --output {folder}: the directory is not writable")
    finally:
        folder.chmod(0o755)
    assert loads == []


def test_check_output_dir(tmp_path, monkeypatch):
    from simulmt import output_dir
    from simulmt.output_dir import check_output_dir

    assert check_output_dir(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"  # creatable
    assert not (tmp_path / "new").exists()  # and nothing created
    assert check_output_dir(tmp_path) == tmp_path  # an existing folder: what it holds is the command's business
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(cli.SimulmtError, match="is a broken symbolic link"):
        check_output_dir(tmp_path / "dangling")
    checked = []
    monkeypatch.setattr(output_dir.os, "access", lambda path, mode: checked.append(path) or False)
    with pytest.raises(cli.SimulmtError, match=f"^--output {tmp_path}: the directory is not writable$"):
        check_output_dir(tmp_path)
    with pytest.raises(cli.SimulmtError, match=f"^--dir {tmp_path / 'a' / 'b'} cannot be created: {tmp_path} is not "
                                               f"writable$"):
        check_output_dir(tmp_path / "a" / "b", "--dir")
    assert checked == [tmp_path, tmp_path]


def test_a_file_error_mid_run_is_one_line(loads, capsys, tmp_path, output_inputs, monkeypatch):
    import errno

    from simulmt.evaluation import command

    def disk_full(translator, options):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "runs" / "instances.log"))

    monkeypatch.setattr(command, "evaluate", disk_full)
    assert cli.main([*output_inputs["evaluate"], "--output", str(tmp_path / "runs")]) == 1
    _one_error_line(capsys.readouterr().err,
                    f"simulmt: error: No space left on device: {tmp_path / 'runs' / 'instances.log'}")
    assert len(loads) == 1


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    from helpers import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny-model"))


def _translate_process(model: Path, stdout) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "simulmt", "translate", "--model", str(model), "--adapter", "none",
                             "--dtype", "float32"], stdin=subprocess.PIPE, stdout=stdout, stderr=subprocess.PIPE,
                            cwd=ROOT)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_standard_output_on_a_full_disk_is_one_line(tiny_model_dir):
    with open("/dev/full", "w") as full:
        proc = _translate_process(tiny_model_dir, full)
        _, err = proc.communicate(f"{SENTENCES[0]}\n".encode(), timeout=300)
    assert proc.returncode == 1
    lines = [line for line in err.decode().splitlines() if line.strip() and not line.startswith("Loading weights")]
    _one_error_line("\n".join(lines), "simulmt: error: cannot write the output: No space left on device")


def test_a_closed_pipe_ends_quietly(tiny_model_dir):
    read, write = os.pipe()
    proc = _translate_process(tiny_model_dir, write)
    os.close(write)
    os.close(read)  # nobody reads: the first line written is a broken pipe
    _, err = proc.communicate("\n".join(SENTENCES * 50).encode() + b"\n", timeout=300)
    text = err.decode()
    assert proc.returncode == 1 and "Traceback" not in text and "Exception ignored" not in text, text
    assert "error" not in text, text


def test_the_commands_collect_cyclic_garbage_less_often(capsys):
    """``simulmt``'s commands raise the garbage collector's thresholds for their process (the engine's host time:
    simulmt.core.execution.tune_collector); ``tune_collector`` says what it replaced, so it can be put back."""
    import gc

    from simulmt.core.execution import COLLECTOR_THRESHOLDS, tune_collector

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        assert cli.main(["translate", "--help"]) == 0
        assert gc.get_threshold() == COLLECTOR_THRESHOLDS
        assert tune_collector((700, 10, 10)) == COLLECTOR_THRESHOLDS and gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*before)
