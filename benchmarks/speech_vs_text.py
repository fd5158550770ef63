"""Speech vs text on the same sentences: BLEU against LAAL in ms, text delays placed at the audio's own word times.

    .venv/bin/python benchmarks/speech_vs_text.py --text runs/eval-text --speech runs/eval-speech \\
        --manifest runs/speech-test/manifest.jsonl [--plot docs/speech-results.png] [--markdown out.md]

``--text`` and ``--speech`` are ``simulmt evaluate`` output folders (one run folder per configuration) over the
same lines: the text side on the corpus's source text, the speech side on its synthesised audio
(``--source-audio``). A text run's delays are in source words; word d ends at ``words[d-1].end_ms`` in that
sentence's audio (the synthesiser's exact word times), so its LAAL in ms is what the text model's schedule would
cost if the words arrived as spoken: the latency the speech model competes with. Speech delays are already in ms
(the audio time of the last block read). Every LAAL here is ``simulmt.metrics``' LAAL over those ms delays, with
the sentence's audio duration as the source length, over the sentences both sides have.

Prints one markdown table (configuration, BLEU, LAAL ms, AL ms, StartOffset ms) and, per speech configuration,
the BLEU ratio to the text run of nearest LAAL (the speech issue's 0.7x target).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from simulmt.errors import SimulmtError
from simulmt.evaluation.run_dir import read_log
from simulmt.metrics.latency import latency_scores
from simulmt.metrics.quality import bleu

METRICS = ("LAAL", "AL", "StartOffset")


def word_times(manifest: Path) -> list[dict]:
    """Per line of the test set: the audio's duration and each source word's end time (ms)."""
    rows = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]
    return [{"ends": [w["end_ms"] for w in r["words"]], "duration": r.get("duration_ms") or r["words"][-1]["end_ms"],
             "source": r["source"]} for r in rows]


def runs(folder: Path) -> dict[str, list[dict]]:
    out = {}
    for run in sorted(p for p in folder.iterdir() if (p / "instances.log").is_file()):
        out[run.name] = read_log(run / "instances.log")
    if not out:
        raise SimulmtError(f"{folder}: no run folders (with instances.log)")
    return out


def text_in_ms(instances: list[dict], times: list[dict]) -> list[dict]:
    """Text instances with their word delays moved to the end times of those words in the audio."""
    out = []
    for ins in instances:
        t = times[ins["index"]]
        if len(t["ends"]) != len(ins["source"].split()):
            raise SimulmtError(f"line {ins['index'] + 1}: {len(ins['source'].split())} source words but the audio "
                               f"has {len(t['ends'])} word times")
        delays = [t["ends"][d - 1] if d > 0 else 0.0 for d in ins["delays"]]
        out.append({**ins, "delays": delays, "source_length": t["duration"]})
    return out


def speech_rows(instances: list[dict], times: list[dict]) -> list[dict]:
    return [{**ins, "source_length": times[ins["index"]]["duration"]} for ins in instances]


def score(instances: list[dict]) -> dict:
    hyps = [i["prediction"] for i in instances]
    refs = [i["reference"] for i in instances]
    return {"BLEU": bleu(hyps, refs)[0], **latency_scores(instances, METRICS), "sentences": len(instances)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--text", required=True, type=Path)
    parser.add_argument("--speech", required=True, type=Path)
    parser.add_argument("--manifest", required=True, type=Path)
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    times = word_times(args.manifest)
    text, speech = runs(args.text), runs(args.speech)
    common = set.intersection(*(set(i["index"] for i in r) for r in [*text.values(), *speech.values()]))
    keep = lambda rows: [r for r in rows if r["index"] in common]  # noqa: E731
    table = {}
    for name, rows in text.items():
        table[f"text {name}"] = score(text_in_ms(keep(rows), times))
    for name, rows in speech.items():
        table[f"speech {name}"] = score(speech_rows(keep(rows), times))
    lines = [f"{len(common)} sentences; LAAL, AL and StartOffset in ms of audio (text: at the audio's word times)", "",
             "| configuration | BLEU | LAAL ms | AL ms | StartOffset ms |", "|---|---:|---:|---:|---:|"]
    for name, s in table.items():
        lines.append(f"| {name} | {s['BLEU']:.2f} | {s['LAAL']:.0f} | {s['AL']:.0f} | {s['StartOffset']:.0f} |")
    texts = {k: v for k, v in table.items() if k.startswith("text ")}
    lines += ["", "| speech configuration | text run of nearest LAAL | BLEU ratio |", "|---|---|---:|"]
    for name, s in table.items():
        if name.startswith("speech ") and texts:
            near = min(texts, key=lambda k: abs(texts[k]["LAAL"] - s["LAAL"]))
            ratio = s["BLEU"] / texts[near]["BLEU"] if texts[near]["BLEU"] else float("nan")
            lines.append(f"| {name} | {near} (LAAL {texts[near]['LAAL']:.0f}) | {ratio:.2f}x |")
    report = "\n".join(lines)
    print(report)
    if args.markdown:
        args.markdown.write_text(report + "\n")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        groups: dict[str, list[tuple[float, float]]] = {}
        for name, s in table.items():
            side, run = name.split(" ", 1)
            policy = "learned" if ".learned" in run else ("offline" if "offline" in run else "wait-k")
            groups.setdefault(f"{side} {policy}", []).append((s["LAAL"], s["BLEU"]))
        for label, points in sorted(groups.items()):
            points.sort()
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o" if "text" in label else "s",
                    linestyle="-" if "learned" in label else "--", label=label)
        ax.set_xlabel("LAAL (ms of audio)")
        ax.set_ylabel("BLEU")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
