"""The ``similarity`` task type (a pair of texts -> a score): reader, contract, metrics, trivial baseline,
and one fine-tuning job end to end on a tiny local ModernBERT (CPU, fp32)."""

from __future__ import annotations

import json
import math
import random

import pytest
from helpers_finetune import job_settings

from clmdetour.evaluation.trivial import trivial_baseline
from clmdetour.tasks.contract import TaskDataError, load_task_data, write_task
from clmdetour.tasks.formats import read_table
from clmdetour.tasktypes import TASK_TYPES, get_task_type
from clmdetour.tasktypes.records import FormatError
from clmdetour.tasktypes.similarity import correlation_scores

SIM = get_task_type("similarity")
FT = {"lr_grid": [3e-3], "epochs": 3, "batch_size": 8, "warmup_ratio": 0.1, "weight_decay": 1e-5,
      "betas": [0.9, 0.98], "eps": 1e-6}


def _pairs(n: int, seed: int) -> list[dict]:
    """Pairs of demo sentences whose score is the Jaccard overlap of their word sets (learnable from text)."""
    from clmdetour.demo.generator import generate_case

    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a = generate_case(rng).text.split(".")[0]
        words = a.split()
        keep = rng.random()
        b_words = [w for w in words if rng.random() < keep] or words[:1]
        b_words += generate_case(rng).text.split()[: max(1, int((1 - keep) * 8))]
        b = " ".join(b_words)
        sa, sb = set(a.lower().split()), set(b.lower().split())
        rows.append({"id": f"p{seed}-{i}", "text": a, "text_pair": b, "score": len(sa & sb) / len(sa | sb)})
    return rows


def _task_folder(root, rows=None):
    rows = rows or _pairs(72, seed=5)
    splits = {"train": rows[:48], "dev": rows[48:60], "test": rows[60:]}
    write_task(root, splits, TASK_TYPES["similarity"].labels_record("sts", [], None), {"task": "sts"})
    return root


def test_registered_with_its_contract():
    assert TASK_TYPES["similarity"] is SIM
    assert list(SIM.features()) == ["id", "text", "text_pair", "score"]
    rec = TASK_TYPES["similarity"].labels_record("sts", [], None)
    assert rec["metric"] == "spearman" and rec["labels"] == []


def test_correlation_scores_match_their_definitions():
    gold = [0.1, 0.4, 0.35, 0.8, 0.9]
    s = correlation_scores(gold, [0.2, 0.3, 0.5, 0.7, 1.0])
    assert s["spearman"] == pytest.approx(0.9)  # one swapped pair out of five ranks: 1 - 6*2/(5*24)
    assert correlation_scores(gold, [-g for g in gold])["pearson"] == pytest.approx(-1.0)
    assert math.isnan(correlation_scores(gold, [0.5] * 5)["spearman"])  # a constant has no correlation
    with pytest.raises(ValueError, match="equal-length"):
        correlation_scores([1.0], [1.0])


def test_reader_takes_two_texts_and_a_score_from_jsonl_and_tsv(tmp_path):
    fields = {"text_field": "s1", "text_pair_field": "s2", "label_field": "sim", "id_field": None}
    (tmp_path / "a.jsonl").write_text(json.dumps({"id": "x", "s1": "Le patient tousse.", "s2": "Toux.", "sim": "0.75"}) + "\n")
    row = read_table(tmp_path / "a.jsonl", "jsonl", TASK_TYPES["similarity"], fields)[0]
    assert (row["text"], row["text_pair"], row["score"]) == ("Le patient tousse.", "Toux.", 0.75)
    (tmp_path / "a.tsv").write_text("id\ts1\ts2\tsim\nx\tune fièvre\tfièvre\t2\ny\tdeux\ttrois\tbeaucoup\n")
    with pytest.raises(FormatError, match=r"a\.tsv:3: similarity score 'sim' must be a finite number, got 'beaucoup'"):
        read_table(tmp_path / "a.tsv", "tsv", TASK_TYPES["similarity"], fields)
    (tmp_path / "b.jsonl").write_text(json.dumps({"s1": "a", "sim": 1}) + "\n")
    with pytest.raises(FormatError, match=r"b\.jsonl:1: field 's2' \(text_pair_field\) missing"):
        read_table(tmp_path / "b.jsonl", "jsonl", TASK_TYPES["similarity"], fields)


def test_contract_round_trip_and_trivial_is_undefined(tmp_path):
    folder = _task_folder(tmp_path / "sts")
    data = load_task_data(folder, "sts")
    assert data.task_type.name == "similarity" and data.labels == ["score"] and data.metric == "spearman"
    triv = trivial_baseline(folder, "sts")
    assert math.isnan(triv.score) and "train mean" in triv.prediction
    bad = json.loads((folder / "labels.json").read_text())
    bad["metric"] = "f1_macro"
    (folder / "labels.json").write_text(json.dumps(bad))
    with pytest.raises(TaskDataError, match=r"labels\.json: metric 'f1_macro' is not one of \('spearman', 'pearson'\)"):
        load_task_data(folder, "sts")


def test_one_finetuning_job_end_to_end(tmp_path, demo_tokenizer):
    from helpers import tiny_modernbert

    from clmdetour.finetune.job import FinetuneJob
    from clmdetour.finetune.run import run_task

    model = tiny_modernbert(demo_tokenizer, tmp_path / "model", hidden_size=32, num_layers=2)
    folder = _task_folder(tmp_path / "sts")
    outputs = {0: tmp_path / "seed0.json"}
    cfg = {"type": "similarity", "metric": "spearman", "max_length": 48, "seeds": 1, "finetune": FT}
    (rec,) = run_task(FinetuneJob.from_params(model="tiny", task="sts", model_dir=model, task_dir=folder, task_config=cfg,
                      settings=job_settings(attn_implementation="auto"), outputs=outputs, threads=1))
    assert rec["status"] == "ok" and rec["task_type"] == "similarity" and rec["metric"] == "spearman"
    assert set(rec["metrics"]) == {"spearman", "pearson"}
    assert all(-1.0 <= v <= 1.0 for v in rec["metrics"].values() if not math.isnan(v))
    assert len(rec["dev_history"]) == 3 and rec["dev_metric"] == max(h for h in rec["dev_history"] if not math.isnan(h))
    assert json.loads(outputs[0].read_text())["seed"] == 0
    from clmdetour.evaluation.rescore import rescore_record

    rescored = rescore_record(outputs[0], task_data=load_task_data(folder, "sts"))
    assert rescored.ok, rescored.problems
    assert rescored.recomputed["test"]["spearman"] == pytest.approx(rec["metrics"]["spearman"], nan_ok=True)
