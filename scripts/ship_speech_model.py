"""Copy a trained speech model (``simulmt finetune --recipe speech-policy``'s OUT/model, or a ``speech-ctc --ctc-head
free`` run's, which reads the words its CTC head spells) into the package.

    python scripts/ship_speech_model.py RUN_DIR LLM_ADAPTER_NAME [--stage-runs ALIGN_DIR SIMUL_DIR] [--ctc-run DIR]

Writes ``simulmt/speech/models/gemma-3-270m-easist-en-de/``: ``speech.json`` naming the packaged LLM and the shipped
LLM adapter (``LLM_ADAPTER_NAME``, a key of ``simulmt.adapters.SHIPPED``) instead of the run's paths, the speech
adapter (weights in bfloat16: half the size; cast back to float32 on load), the encoder's trained layers if any (in
float32: they are the encoder's own weights, kept exact), the policy head, the CTC head of a model that reads spelled
words (weights in bfloat16 too), and each stage's ``training.json`` (``training-ctc.json`` when a ctc stage ran,
``training-align.json``, ``training-simul.json``, ``training-policy.json``; RUN_DIR's is named after its stage).
The data card ``README.md`` is written by hand from those records and the evaluation runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from simulmt.adapters import SHIPPED, save_bfloat16_weights
from simulmt.core.learned_policy import HEAD_FILE
from simulmt.speech.adapter import ADAPTER_FILE, CONFIG_FILE
from simulmt.speech.ctc import HEAD_CONFIG, HEAD_WEIGHTS
from simulmt.speech.encoder_top import ENCODER_CONFIG, ENCODER_FILE
from simulmt.speech.model import SHIPPED_SPEECH_MODEL, SPEECH_FILE


def ship(run: Path, llm_adapter: str, stage_runs: dict[str, Path]) -> Path:
    if llm_adapter not in SHIPPED:
        raise SystemExit(f"{llm_adapter!r} is not a shipped LLM adapter ({', '.join(SHIPPED)})")
    model = run / "model"
    if not (model / SPEECH_FILE).is_file():
        raise SystemExit(f"no speech model in {model} (is the run finished?)")
    target = SHIPPED_SPEECH_MODEL
    target.mkdir(parents=True, exist_ok=True)
    card = json.loads((model / SPEECH_FILE).read_text())
    card.update(model=SHIPPED[llm_adapter], adapter=llm_adapter)
    (target / SPEECH_FILE).write_text(json.dumps(card, indent=2) + "\n")
    shutil.copyfile(model / CONFIG_FILE, target / CONFIG_FILE)
    save_bfloat16_weights(model / ADAPTER_FILE, target / ADAPTER_FILE)
    for stale in (HEAD_FILE, ENCODER_FILE, ENCODER_CONFIG, HEAD_CONFIG, HEAD_WEIGHTS):
        (target / stale).unlink(missing_ok=True)  # a file of the model shipped before must not stay
    for name in (HEAD_FILE, ENCODER_FILE, ENCODER_CONFIG, HEAD_CONFIG):
        if (model / name).is_file():
            shutil.copyfile(model / name, target / name)
    if (model / HEAD_WEIGHTS).is_file():
        save_bfloat16_weights(model / HEAD_WEIGHTS, target / HEAD_WEIGHTS)
    for stale in target.glob("training-*.json"):
        stale.unlink()
    last = json.loads((run / "training.json").read_text()).get("stage", "policy")
    for stage, directory in {**stage_runs, last: run}.items():
        if (directory / "training.json").is_file():
            shutil.copyfile(directory / "training.json", target / f"training-{stage}.json")
    return target


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="the speech-policy (or free-head speech-ctc) run directory (holds "
                                               "model/ and training.json)")
    parser.add_argument("llm_adapter", help="the shipped LLM adapter the speech model runs on")
    parser.add_argument("--stage-runs", nargs=2, type=Path, metavar=("ALIGN_DIR", "SIMUL_DIR"),
                        help="the align and simul runs, whose training.json records are copied too")
    parser.add_argument("--ctc-run", type=Path, metavar="DIR", help="the ctc run before align, if one ran")
    args = parser.parse_args()
    stages = {"ctc": args.ctc_run} if args.ctc_run else {}
    stages.update(dict(zip(("align", "simul"), args.stage_runs)) if args.stage_runs else {})
    print(ship(args.run, args.llm_adapter, stages))
