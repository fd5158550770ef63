"""Training and dev data: sentence pairs from plain files, TSV, JSONL or a Hugging Face dataset; laid-out examples.

Sources of pairs (exactly one for training):

* ``--train-source F --train-target F``: two aligned text files, one sentence a line;
* ``--train-tsv F``: ``source<TAB>target`` per line;
* ``--train-jsonl F``: one JSON object per line with the fields ``--source-field`` / ``--target-field``
  (default ``source`` / ``target``), or a ``translation`` object keyed by language code;
* ``--train-dataset ID``: a Hugging Face dataset (needs the ``datasets`` package and hub access), split
  ``--dataset-split``, same fields as JSONL.

Pairs with an empty side are skipped (and counted). ``ExampleDataset`` holds the laid-out examples as small
arrays (ids, positions, target-side flags, labels); examples longer than ``--max-length`` are dropped, never cut
(a cut sequence would lose its end token and its schedule).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from simulmt.errors import SimulmtError
from simulmt.core.examples import IGNORE, TrainingExample
from simulmt.core.prompt_format import source_units, word_tokens
from simulmt.core.talk import ContextWindow, context_prompts
from simulmt.core.visibility import slot_starts
from simulmt.text.text_input import read_lines, require_text
from simulmt.finetune.pretokenized import Pretokenized


@dataclass(frozen=True)
class Pair:
    source: str
    target: str
    document: str = ""  # the talk or article it belongs to (context comes from the pairs before it in it)
    context_target: str | None = None  # what a later pair's context shows as this pair's target (None: ``target``),
    # e.g. the model's own translation, as a talk's context holds at inference (it may be empty)


@dataclass
class PairStats:
    read: int = 0
    empty: int = 0


def _read_lines(path: str | Path, what: str) -> list[str]:
    """simulmt.text.text_input's rule: split at "\\n" only, strict UTF-8; a bad line is an error naming file and
    line."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise SimulmtError(f"{what}: file not found: {p}")
    return require_text(read_lines(p, what), f"{what}: {p}")


def _clean(pairs: Iterable[tuple[str, str]], limit: int | None, stats: PairStats) -> list[Pair]:
    """Whitespace-normalised pairs, empty ones skipped, up to ``limit`` pairs (``pairs`` is consumed lazily)."""
    out = []
    for source, target, *rest in pairs:
        if limit is not None and len(out) >= limit:
            break
        stats.read += 1
        source, target = " ".join(source.split()), " ".join(target.split())
        if not source or not target:
            stats.empty += 1
            continue
        out.append(Pair(source, target, *rest[:1], *(" ".join(c.split()) for c in rest[1:])))
    return out


def parallel_files(source: str, target: str, limit: int | None = None, what: str = "training data",
                   stats: PairStats | None = None, docids: str | None = None,
                   context_target: str | None = None) -> list[Pair]:
    """``docids``: a file naming each line's document (line-aligned), for training with context;
    ``context_target``: the target side the context pairs show (line-aligned; ``Pair.context_target``)."""
    src, tgt = _read_lines(source, f"{what} source"), _read_lines(target, f"{what} target")
    if len(src) != len(tgt):
        raise SimulmtError(f"{what}: {source} has {len(src)} lines but {target} has {len(tgt)}; "
                           f"the two files must be aligned line by line")
    columns = [src, tgt]
    for path, name in ((docids, "docids"), (context_target, "context target")):
        if path is None:
            continue
        lines = _read_lines(path, f"{what} {name}")
        if len(lines) != len(src):
            raise SimulmtError(f"{what}: {path} has {len(lines)} lines but {source} has {len(src)}")
        columns.append([i.strip() for i in lines] if name == "docids" else lines)
    if docids is None and context_target is not None:
        columns.insert(2, [""] * len(src))  # (one document: the pairs in order)
    return _clean(list(zip(*columns)), limit, stats or PairStats())


def tsv_file(path: str, limit: int | None = None, stats: PairStats | None = None) -> list[Pair]:
    rows = []
    for number, line in enumerate(_read_lines(path, "training TSV"), 1):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) != 2:
            raise SimulmtError(f"{path}:{number}: expected 'source<TAB>target' (2 columns), found {len(cols)}")
        rows.append((cols[0], cols[1]))
    return _clean(rows, limit, stats or PairStats())


def _fields(record, source_field: str, target_field: str, source_lang: str, target_lang: str,
            where: str) -> tuple[str, str]:
    if not isinstance(record, dict):
        raise SimulmtError(f"{where}: expected a JSON object, found {type(record).__name__}")
    if source_field in record and target_field in record:
        return str(record[source_field]), str(record[target_field])
    tr = record.get("translation")
    if isinstance(tr, dict) and source_lang in tr and target_lang in tr:
        return str(tr[source_lang]), str(tr[target_lang])
    raise SimulmtError(f"{where}: no '{source_field}'/'{target_field}' fields (nor a 'translation' object with "
                       f"'{source_lang}'/'{target_lang}'); fields present: {', '.join(map(str, record)) or 'none'}. "
                       f"Use --source-field / --target-field")


def jsonl_file(path: str, source_field: str = "source", target_field: str = "target", source_lang: str = "en",
               target_lang: str = "de", limit: int | None = None, stats: PairStats | None = None) -> list[Pair]:
    def rows() -> Iterator[tuple[str, str]]:
        for number, line in enumerate(_read_lines(path, "training JSONL"), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SimulmtError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
            yield _fields(record, source_field, target_field, source_lang, target_lang, f"{path}:{number}")

    return _clean(rows(), limit, stats or PairStats())


def hub_dataset(dataset_id: str, split: str = "train", source_field: str = "source", target_field: str = "target",
                source_lang: str = "en", target_lang: str = "de", limit: int | None = None,
                stats: PairStats | None = None) -> list[Pair]:
    """A Hugging Face dataset (``owner/name`` or ``owner/name:config``), for users with hub access."""
    try:
        import datasets
    except ImportError:
        raise SimulmtError(f"--train-dataset {dataset_id} needs the 'datasets' package (pip install datasets); "
                           f"or export the pairs to two text files / TSV / JSONL") from None
    name, _, config = dataset_id.partition(":")
    try:
        ds = datasets.load_dataset(name, config or None, split=split)
    except Exception as exc:  # noqa: BLE001 - any failure becomes one user message
        raise SimulmtError(f"could not load the dataset {dataset_id!r} (split {split!r}): {type(exc).__name__}: "
                           f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}") from exc
    rows = (_fields(dict(record), source_field, target_field, source_lang, target_lang, f"{dataset_id}[{split}][{i}]")
            for i, record in enumerate(ds))
    return _clean(rows, limit, stats or PairStats())


# ---- laid-out examples ---------------------------------------------------------------------------------------
@dataclass
class BuildStats:
    pairs: int = 0
    examples: int = 0
    too_long: int = 0  # examples dropped: longer than max_length
    unplaceable: int = 0  # pairs the layout refused (e.g. gpe: source group past phi)
    tokens: int = 0
    label_tokens: int = 0
    schedules: dict[str, int] = field(default_factory=dict)

    @property
    def average_length(self) -> float:
        return self.tokens / self.examples if self.examples else 0.0

    def to_json(self) -> dict:
        return {"pairs": self.pairs, "examples": self.examples, "dropped_too_long": self.too_long,
                "dropped_unplaceable": self.unplaceable, "tokens": self.tokens, "label_tokens": self.label_tokens,
                "average_length": round(self.average_length, 2), "schedules": dict(sorted(self.schedules.items()))}


class ExampleDataset(torch.utils.data.Dataset):
    """Laid-out training examples as arrays. Items: ``input_ids``, ``position_ids``, ``target_side``, ``slot_start``,
    ``labels``."""

    def __init__(self, items: list[dict[str, np.ndarray]], stats: BuildStats):
        self.items, self.stats = items, stats

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return self.items[i]


def encode(example: TrainingExample) -> dict[str, np.ndarray]:
    return {
        "input_ids": np.fromiter((t.token_id for t in example.tokens), dtype=np.int64, count=len(example)),
        "position_ids": np.fromiter((t.position for t in example.tokens), dtype=np.int64, count=len(example)),
        "target_side": np.fromiter((t.role.target_side for t in example.tokens), dtype=bool, count=len(example)),
        "slot_start": np.asarray(slot_starts(example.tokens), dtype=np.int32),  # (visibility.py: earlier_slots)
        "labels": np.asarray(example.labels, dtype=np.int64),
    }


def context_formats(layout, fmt, tokenizer, pairs: list[Pair], window: ContextWindow) -> list:
    """The prompt format of each pair when it is trained with context: the talk's rule (``context_prompts``) over
    the pairs before it in its document (``Pair.document``; the pairs in order), their targets (``context_target``
    where a pair has one) encoded as a stream writes them (each word with its leading space after the first)."""
    formats, document = [], []
    for i, pair in enumerate(pairs + [None]):
        if pair is None or (document and pair.document != pairs[i - 1].document):
            ids = [(tuple(t for unit in source_units(tokenizer, fmt, p.source.split()) for t in unit),
                    tuple(t for j, w in enumerate((p.target if p.context_target is None else p.context_target).split())
                          for t in word_tokens(tokenizer, w, j > 0 or fmt.target_first_space))) for p in document]
            formats += [replace(fmt, prompt=fmt.prompt + c) for c in context_prompts(layout, fmt, ids, window)]
            document = []
        if pair is not None:
            document.append(pair)
    return formats


def build_dataset(recipe, fmt, tokenizer, pairs: list[Pair], max_length: int, seed: int,
                  progress: bool = False, context: ContextWindow | None = None) -> ExampleDataset:
    """Lay out every pair with ``recipe`` and the prompt format ``fmt`` (deterministic for a seed: a resumed run
    rebuilds the same data); with ``context``, each pair's prompt holds the pairs before it in its document, as
    a talk's sentence's does (simulmt.core.talk)."""
    rng = random.Random(seed)
    stats, items = BuildStats(), []
    tokenizer = Pretokenized.for_pairs(tokenizer, pairs)  # every word encoded in one batched call
    formats = context_formats(recipe.layout(), fmt, tokenizer, pairs, context) if context else [fmt] * len(pairs)
    iterator = zip(pairs, formats)
    if progress:
        from tqdm import tqdm

        iterator = tqdm(iterator, total=len(pairs), desc=f"laying out {recipe.name} examples", unit="pair",
                        dynamic_ncols=True)
    for pair, pair_fmt in iterator:
        stats.pairs += 1
        try:
            examples, drawn = recipe.examples(pair_fmt, tokenizer, pair.source, pair.target, rng)
        except SimulmtError:
            if recipe.name != "gpe":
                raise
            stats.unplaceable += 1
            continue
        stats.schedules[drawn] = stats.schedules.get(drawn, 0) + 1
        for ex in examples:
            if len(ex) > max_length:
                stats.too_long += 1
                continue
            stats.examples += 1
            stats.tokens += len(ex)
            stats.label_tokens += sum(label != IGNORE for label in ex.labels)
            items.append(encode(ex))
    if not items:
        raise SimulmtError(f"no training example left: {stats.pairs} pairs, {stats.too_long} examples longer than "
                           f"--max-length {max_length}, {stats.unplaceable} refused by the layout")
    return ExampleDataset(items, stats)
