"""Fine-tuning test helpers (tests/ only): task folders and job settings (no network).

- :func:`demo_task_rows` / :func:`write_task_folder`: task folders in the
  ``results/tasks/{task}`` contract (``train``/``dev``/``test`` datasets,
  ``labels.json``, ``manifest.json``), built from the demo text generator.
- :func:`job_settings`: the fine-tune job's ``settings`` param as the paper config gives it.

The tokenizer and tiny-model builders live in helpers.py.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from helpers import REPO

from clmdetour.io import atomic_write_json

WORD_RE = re.compile(r"\w+|[^\w\s]")


def words_and_tags(text: str, entities: list[tuple[int, int, str]]) -> tuple[list[str], list[str]]:
    """Split ``text`` into words (``\\w+`` runs and single punctuation) with IOB2 tags from character spans."""
    words, tags = [], []
    previous = None
    for m in WORD_RE.finditer(text):
        ent = next((e for e in entities if e[0] <= m.start() < e[1]), None)
        words.append(m.group())
        if ent is None:
            tags.append("O")
        else:
            tags.append(("I-" if ent is previous else "B-") + ent[2])
        previous = ent
    return words, tags


def demo_task_rows(task_type: str, n: int, seed: int, noise: float = 0.0) -> list[dict]:
    """``n`` rows of a demo task of ``task_type`` from the demo generator.

    ner: clinical cases with entity groups; multiclass: ICD-10 chapter of a
    case; multilabel: ICD-O-3 morphology codes of oncology cases (or ``none``).
    ``noise``: fraction of classification labels replaced at random.
    """
    from clmdetour.demo.generator import generate_case

    rng = random.Random(seed)
    rows = []
    while len(rows) < n:
        doc = generate_case(rng)
        rid = f"{task_type}-{seed}-{len(rows):05d}"
        if task_type == "ner":
            words, tags = words_and_tags(doc.text, doc.entities)
            rows.append({"id": rid, "text": doc.text, "words": words, "tags": tags})
        elif task_type == "multiclass":
            label = f"chapter-{doc.labels.get('chapter', 0):02d}"
            rows.append({"id": rid, "text": doc.text, "label": label})
        else:
            labels = sorted(set(doc.labels.get("morphology") or [])) or ["none"]
            rows.append({"id": rid, "text": doc.text, "labels": labels})
    if noise and task_type != "ner":
        pool = sorted({r["label"] for r in rows} if task_type == "multiclass" else {l for r in rows for l in r["labels"]})
        for r in rows:
            if rng.random() < noise:
                if task_type == "multiclass":
                    r["label"] = rng.choice(pool)
                else:
                    r["labels"] = [rng.choice(pool)]
    return rows


def write_task_folder(out_dir: str | Path, task: str, task_type: str, splits: dict[str, list[dict]],
                      metric: str = "f1_micro") -> Path:
    """Write a task folder (``train``/``dev``/``test`` + ``labels.json`` + ``manifest.json``)."""
    from datasets import Dataset

    out_dir = Path(out_dir)
    for split, rows in splits.items():
        Dataset.from_list(rows).save_to_disk(str(out_dir / split))
    spec = {"task": task, "type": task_type, "metric": metric}
    all_rows = [r for rows in splits.values() for r in rows]
    if task_type == "ner":
        groups = sorted({t[2:] for r in all_rows for t in r["tags"] if t != "O"})
        spec["labels"] = groups
        spec["tags"] = ["O"] + [f"{p}-{g}" for g in groups for p in ("B", "I")]
    elif task_type == "multiclass":
        spec["labels"] = sorted({r["label"] for r in all_rows})
    else:
        spec["labels"] = sorted({l for r in all_rows for l in r["labels"]})
    atomic_write_json(out_dir / "labels.json", spec)
    atomic_write_json(out_dir / "manifest.json", {"task": task, "rows": {s: len(r) for s, r in splits.items()}})
    return out_dir


#: A task's ``finetune`` block as the schema fills it, with a two-point learning-rate grid.
FINETUNE_BLOCK = {"lr_grid": [1e-5, 3e-3], "epochs": 2, "batch_size": 8, "warmup_ratio": 0.1, "weight_decay": 1e-5,
                  "betas": [0.9, 0.98], "eps": 1e-6}


def task_settings(task_type: str, metric: str, max_length: int = 64, **finetune):
    """A :class:`clmdetour.tasks.settings.TaskSettings` of a task (no ``seeds``), its ``finetune`` block
    :data:`FINETUNE_BLOCK` with ``finetune`` applied."""
    from clmdetour.tasks.settings import TaskSettings

    return TaskSettings.from_dict({"type": task_type, "metric": metric, "max_length": max_length,
                                   "finetune": dict(FINETUNE_BLOCK, **finetune)})


def job_settings(**overrides) -> dict:
    """The fine-tune job's ``settings`` param as the paper config gives it (the schema's defaults of the
    ``evaluation`` keys that change results, :func:`clmdetour.evaluation.grid.finetune_settings`), with
    ``overrides`` applied."""
    from clmdetour.config import load_yaml, validate_config
    from clmdetour.evaluation.grid import finetune_settings as of_config

    config = validate_config(load_yaml(REPO / "config" / "config.yaml"))
    return dict(of_config(config), **overrides)
