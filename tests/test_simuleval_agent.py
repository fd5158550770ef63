"""The SimulEval agent, driven by SimulEval 1.1.4's own evaluator, states objects and command line (tiny model).

SimulEval is not a dependency of simulmt (it pins old tools): ``setup.sh`` installs it into ``.simuleval/`` with
``--no-deps``, and ``conftest.py`` puts that folder on ``sys.path``, so these tests run in CI. They skip (with the
reason printed, ``-rs``) only where SimulEval is absent, e.g. a checkout that did not run ``setup.sh``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from conftest import SIMULEVAL_DIR, without_simuleval
from helpers import tiny_translator
from simulmt.errors import SimulmtError
from simulmt.core.policies import wait_k_delays

HAVE_SIMULEVAL = importlib.util.find_spec("simuleval") is not None
needs_simuleval = pytest.mark.usefixtures("simuleval_installed")


@pytest.fixture
def simuleval_installed():
    if not HAVE_SIMULEVAL:
        without_simuleval("SimulEval is not importable: run setup.sh, which installs SimulEval 1.1.4 into .simuleval/")
ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["The weather is nice today .", "Where is the train station ?",
           "My brother works in a hospital in Berlin and my sister in Hamburg ."]
REFERENCES = ["Das Wetter ist heute schön .", "Wo ist der Bahnhof ?",
              "Mein Bruder arbeitet in einem Krankenhaus in Berlin und meine Schwester in Hamburg ."]


def test_without_simuleval_the_import_says_what_to_install(monkeypatch):
    """Runs with or without SimulEval: where it is installed, it is hidden (a ``None`` in ``sys.modules`` makes its
    import fail, also for submodules already imported); monkeypatch puts everything back afterwards."""
    for name in [name for name in sys.modules if name == "simuleval" or name.startswith("simuleval.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "simuleval", None)
    monkeypatch.delitem(sys.modules, "simulmt.evaluation.simuleval_agent", raising=False)
    with pytest.raises(ImportError, match="needs SimulEval 1.1.4") as caught:
        importlib.import_module("simulmt.evaluation.simuleval_agent")
    assert isinstance(caught.value, SimulmtError)
    import simulmt  # noqa: F401  (the package itself never needs SimulEval)


def _agent(**settings):
    from simulmt.evaluation.simuleval_agent import SimulmtAgent

    return SimulmtAgent(Namespace(**settings), translator=tiny_translator("llama"))


def _evaluate(agent, tmp_path: Path, sources=SOURCES, references=REFERENCES):
    """SimulEval's own sentence-level evaluator over files, as its command line builds it."""
    from simuleval import options

    tmp_path.mkdir(parents=True, exist_ok=True)
    from simuleval.evaluator import SentenceLevelEvaluator

    (tmp_path / "src").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (tmp_path / "tgt").write_text("\n".join(references) + "\n", encoding="utf-8")
    argv = ["--source", str(tmp_path / "src"), "--target", str(tmp_path / "tgt"), "--no-progress-bar",
            "--output", str(tmp_path / "out")]
    parser = options.general_parser()
    options.add_evaluator_args(parser)
    options.add_scorer_args(parser, argv)
    options.add_dataloader_args(parser, argv)
    args = parser.parse_args(argv)
    args.source_type = args.target_type = "text"
    evaluator = SentenceLevelEvaluator.from_args(args)
    evaluator(agent)
    return evaluator


@needs_simuleval
@pytest.mark.parametrize("layout", ["expost", "prefix", "conversation"])
@pytest.mark.parametrize("k", [1, 3])
def test_simuleval_records_the_wait_k_delays_of_our_sessions(tmp_path, layout, k):
    agent = _agent(layout=layout, policy="wait-k", k=k)
    evaluator = _evaluate(agent, tmp_path)
    assert len(agent.translations) == len(SOURCES)
    for index, source in enumerate(SOURCES):
        instance, ours = evaluator.instances[index], agent.translations[index]
        assert instance.prediction == ours.prediction and ours.prediction
        assert instance.delays == ours.delays == wait_k_delays(k, len(source.split()), len(ours.delays))
    logged = [json.loads(line) for line in (tmp_path / "out" / "instances.log").read_text().splitlines()]
    assert [entry["delays"] for entry in logged] == [t.delays for t in agent.translations]
    assert (tmp_path / "out" / "scores.tsv").exists()


@needs_simuleval
def test_read_n_delays_agree_too(tmp_path):
    agent = _agent(layout="expost", policy="read-n", read_n=2)
    evaluator = _evaluate(agent, tmp_path)
    for index, ours in enumerate(agent.translations):
        assert evaluator.instances[index].delays == ours.delays
        assert all(d % 2 == 0 or d == len(SOURCES[index].split()) for d in ours.delays)


@needs_simuleval
def test_sessions_live_in_the_states_objects(tmp_path):
    """Two sentences interleaved word by word, each with its own states object, give what they give alone."""
    from simuleval.data.segments import EmptySegment, TextSegment

    agent = _agent(layout="expost", policy="wait-k", k=2)
    alone = _evaluate(agent, tmp_path, SOURCES[:2], REFERENCES[:2])
    words = [s.split() for s in SOURCES[:2]]
    states = [agent.build_states(), agent.build_states()]
    output: list[list[str]] = [[], []]
    for step in range(max(map(len, words)) + 1):
        for i in (0, 1):
            if states[i].target_finished:
                continue
            segment = (TextSegment(index=step, content=words[i][step], finished=step == len(words[i]) - 1)
                       if step < len(words[i]) else EmptySegment(finished=True))
            out = agent.pushpop(segment, states[i])
            output[i] += out.content.split() if not out.is_empty else []
    assert all(s.target_finished for s in states)
    assert [" ".join(o) for o in output] == [alone.instances[0].prediction, alone.instances[1].prediction]


@needs_simuleval
def test_an_empty_source_line_gives_an_empty_translation():
    from simuleval.data.segments import EmptySegment

    agent = _agent()
    out = agent.pushpop(EmptySegment(finished=True))
    assert out.finished and out.content == ""
    assert [t.prediction for t in agent.translations] == [""]  # one record per sentence, empty ones included


@needs_simuleval
def test_invalid_settings_fail_before_the_model_loads():
    from simulmt.evaluation.simuleval_agent import SimulmtAgent

    with pytest.raises(SimulmtError, match="unknown layout 'nope'"):
        SimulmtAgent(Namespace(layout="nope", model="/nonexistent"))
    with pytest.raises(SimulmtError, match="wait-k needs k >= 1"):
        SimulmtAgent(Namespace(k=0, model="/nonexistent"))


@needs_simuleval
def test_the_simuleval_command_line(tmp_path):
    """``simuleval --agent-class simulmt.evaluation.simuleval_agent.SimulmtAgent ...`` on a tiny model saved to disk."""
    tiny = tiny_translator("llama")
    model_dir = tmp_path / "tiny"
    tiny.model.save_pretrained(model_dir)
    tiny.tokenizer.save_pretrained(model_dir)
    (tmp_path / "src").write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    (tmp_path / "tgt").write_text("\n".join(REFERENCES) + "\n", encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", ""), str(SIMULEVAL_DIR)])}
    done = subprocess.run(
        [sys.executable, "-m", "simuleval.cli", "--agent-class", "simulmt.evaluation.simuleval_agent.SimulmtAgent",
         "--source", str(tmp_path / "src"), "--target", str(tmp_path / "tgt"), "--output", str(tmp_path / "out"),
         "--model", str(model_dir), "--layout", "expost", "--policy", "wait-k", "--k", "2", "--read-n", "4",
         "--no-progress-bar"],
        capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    logged = [json.loads(line) for line in (tmp_path / "out" / "instances.log").read_text().splitlines()]
    assert len(logged) == len(SOURCES)
    for entry, source in zip(logged, SOURCES):
        assert entry["delays"] == wait_k_delays(2, len(source.split()), len(entry["delays"]))
    assert "LAAL" in (tmp_path / "out" / "scores.tsv").read_text()


@needs_simuleval
def test_agent_scores_equal_simulmt_evaluate(tmp_path):
    """The same sentences under SimulEval's evaluator with the agent and under ``simulmt evaluate``: the same
    predictions and delays, and the same BLEU, AL, LAAL, AP and DAL (SimulEval's own scorers on its side)."""
    from simulmt.evaluation.grid import evaluate
    from simulmt.evaluation.options import EvaluateOptions

    agent = _agent(layout="expost", policy="wait-k", k=2)
    evaluator = _evaluate(agent, tmp_path)
    options = EvaluateOptions(source=str(tmp_path / "src"), reference=str(tmp_path / "tgt"),
                              output=str(tmp_path / "grid"), layouts="expost", policies="wait-k", ks="2",
                              no_offline=True)
    [ours] = evaluate(tiny_translator("llama"), options, progress=False)
    logged = [json.loads(line) for line in (tmp_path / "grid" / ours.name / "instances.log").read_text().splitlines()]
    assert [r["prediction"] for r in logged] == [i.prediction for i in evaluator.instances.values()]
    assert [r["delays"] for r in logged] == [i.delays for i in evaluator.instances.values()]
    theirs = evaluator.results.iloc[0].to_dict()
    for name in ("BLEU", "AL", "LAAL", "AP", "DAL"):
        assert ours.scores[name] == pytest.approx(theirs[name], abs=1e-3), name


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


@needs_simuleval
def test_files_that_are_not_utf8_stop_the_command_before_the_model_loads(tmp_path):
    from simulmt.evaluation.simuleval_agent import SimulmtAgent

    good = _write(tmp_path / "good", "\n".join(SOURCES).encode() + b"\n")
    bad = _write(tmp_path / "bad", SOURCES[0].encode() + b"\nHello \xff\xfe world .\n")
    for source, target in ((bad, good), (good, bad)):
        with pytest.raises(SystemExit) as caught:
            SimulmtAgent.from_args(Namespace(source=source, target=target, model="/nonexistent"))
        message = str(caught.value.code)
        assert message.startswith("simulmt: error: the ") and bad in message
        assert "line 2 is not valid UTF-8 (byte 0xff at column 7: invalid start byte)" in message
    with pytest.raises(SimulmtError, match="Could not load model '/nonexistent'"):  # good files: on to the model
        SimulmtAgent.from_args(Namespace(source=good, target=good, model="/nonexistent"))


@needs_simuleval
def test_a_byte_order_mark_is_not_translated(tmp_path):
    """SimulEval keeps a file's BOM in the first word; the agent drops it, as ``simulmt evaluate`` does."""
    plain = _agent(layout="expost", policy="wait-k", k=2)
    _evaluate(plain, tmp_path / "plain")
    marked = _agent(layout="expost", policy="wait-k", k=2)
    evaluator = _evaluate(marked, tmp_path / "bom", ["\ufeff" + SOURCES[0], *SOURCES[1:]])
    assert evaluator.instances[0].source.startswith("\ufeffThe")  # SimulEval keeps the BOM it read
    assert [t.source for t in marked.translations] == SOURCES
    assert [(t.prediction, t.delays) for t in marked.translations] == [(t.prediction, t.delays)
                                                                      for t in plain.translations]


@needs_simuleval
def test_a_lone_surrogate_is_a_clear_error():
    from simuleval.data.segments import TextSegment

    agent = _agent()
    with pytest.raises(SimulmtError, match=r"source word 1 \('caf\\udce9'\) is not valid text: .*U\+DCE9"):
        agent.pushpop(TextSegment(index=0, content="caf\udce9", finished=True))


@needs_simuleval
def test_the_agent_takes_a_head_vocabulary(tmp_path):
    """``--head-vocabulary FILES`` reaches the translator the agent loads, and the agent writes what a translator
    loaded with the same files writes."""
    from argparse import ArgumentParser

    from helpers import save_tiny_model
    from simulmt import Translator
    from simulmt.evaluation.simuleval_agent import SimulmtAgent

    folder = save_tiny_model(tmp_path / "model")
    (tmp_path / "de.txt").write_text("\n".join(REFERENCES) + "\n", encoding="utf-8")
    parser = ArgumentParser()
    SimulmtAgent.add_args(parser)
    args = parser.parse_args(["--model", str(folder), "--adapter", "none", "--k", "2",
                              "--head-vocabulary", str(tmp_path / "de.txt")])
    agent = SimulmtAgent(args)
    assert agent.translator.head_vocabulary.startswith("de.txt: ")
    direct = Translator.load(str(folder), adapter="none", head_vocabulary=str(tmp_path / "de.txt"))
    evaluator = _evaluate(agent, tmp_path)
    expected = [direct.translate(s, "expost", "wait-k", k=2).prediction for s in SOURCES]
    assert [i.prediction for i in evaluator.instances.values()] == expected
    whole = Translator.load(str(folder), adapter="none").translate(SOURCES[2], "expost", "wait-k", k=2)
    assert whole.flops > direct.translate(SOURCES[2], "expost", "wait-k", k=2).flops  # (a shorter head)
    with pytest.raises(SimulmtError, match="nope.txt is not a file"):
        SimulmtAgent(parser.parse_args(["--model", str(folder), "--head-vocabulary", str(tmp_path / "nope.txt")]))
