"""One fine-tuning job end to end on a tiny local ModernBERT (CPU, fp32)."""
import json

import pytest
from helpers_finetune import job_settings

from clmdetour.config import ConfigError
from clmdetour.evaluation.grid import finetune_task_params, task_section
from clmdetour.finetune import inputs, records
from clmdetour.finetune import run as R
from clmdetour.finetune.job import FinetuneJob
from clmdetour.io import read_json
from clmdetour.tasks.contract import TaskDataError, load_task_data
from clmdetour.tasktypes import TASK_TYPES
from clmdetour.tasktypes.ner import WORD_COUNT_KEYS

FT = {"lr_grid": [2e-3], "epochs": 2, "batch_size": 8, "warmup_ratio": 0.1, "weight_decay": 1e-5, "betas": [0.9, 0.98], "eps": 1e-6}
RECORD_KEYS = {"model", "task", "seed", "metrics", "dev_metric", "hyperparameters", "versions", "wall_time_s", "status"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, demo_tokenizer):
    from helpers import tiny_modernbert

    return tiny_modernbert(demo_tokenizer, tmp_path_factory.mktemp("m") / "model", hidden_size=32, num_layers=2)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    from helpers_finetune import demo_task_rows, write_task_folder

    root = tmp_path_factory.mktemp("tasks")
    out = {}
    for kind, metric in (("ner", "f1_micro"), ("multiclass", "f1_macro"), ("multilabel", "f1_macro")):
        rows = demo_task_rows(kind, 56, seed=11, noise=0.1)
        out[kind] = write_task_folder(root / kind, kind, kind, {"train": rows[:40], "dev": rows[40:48], "test": rows[48:]}, metric)
    return out


def _cfg(kind, max_length=64):
    return {"type": kind, "metric": "f1_micro" if kind == "ner" else "f1_macro", "max_length": max_length,
            "seeds": 2, "finetune": FT}


def _run(model_dir, tasks, kind, tmp_path, seeds, **kw):
    outputs = {s: tmp_path / kind / f"seed{s}.json" for s in seeds}
    return R.run_task(FinetuneJob.from_params(model="tiny", task=kind, model_dir=model_dir, task_dir=tasks[kind], task_config=_cfg(kind),
                      settings=job_settings(ner_context_tokens=8, attn_implementation="auto"), outputs=outputs, threads=1, **kw)), outputs


def test_seed_alone_equals_seed_among_others(model_dir, tasks, tmp_path):
    together, _ = _run(model_dir, tasks, "ner", tmp_path / "a", [0, 1])
    alone, outputs = _run(model_dir, tasks, "ner", tmp_path / "b", [1])
    assert all(r["status"] == "ok" for r in together + alone)
    assert alone[0]["metrics"] == together[1]["metrics"]
    assert alone[0]["dev_history"] == together[1]["dev_history"]
    assert together[0]["dev_history"] != together[1]["dev_history"]  # the seed does change the run
    rec = read_json(outputs[1])
    assert RECORD_KEYS <= set(rec) and rec["hyperparameters"]["max_length"] == 64
    assert 0.0 <= rec["metrics"]["f1_micro"] <= 1.0 and "f1_macro" in rec["metrics"]
    # documents longer than 64 tokens became several windows, none truncated away
    assert rec["data"]["model_inputs"]["test"] > rec["data"]["examples"]["test"]
    assert rec["data"]["truncated"] == {"train": 0, "dev": 0, "test": 0}
    for key in WORD_COUNT_KEYS:  # words inside another word's token, counted apart (test_finetune_subtokens.py)
        assert set(rec["data"][key]) == {"train", "dev", "test"}


@pytest.mark.parametrize("kind", ["multiclass", "multilabel"])
def test_classification_records(model_dir, tasks, tmp_path, kind):
    _records, outputs = _run(model_dir, tasks, kind, tmp_path, [3])
    rec = read_json(outputs[3])
    assert rec["status"] == "ok" and rec["metric"] == "f1_macro" and rec["seed"] == 3
    assert rec["best_epoch"] in (1, 2) and rec["dev_metric"] == max(rec["dev_history"])
    assert rec["attention"]["implementation"] == "sdpa" and rec["attention"]["requested"] == "auto"  # CPU: unchecked sdpa
    assert rec["data"]["truncated"]["train"] > 0  # demo cases exceed 64 tokens: inputs truncated, not dropped
    if kind == "multilabel":
        assert 0 < rec["metrics"]["threshold"] < 1 and rec["metrics"]["threshold"] == rec["dev_metrics"]["threshold"]


def test_failing_seed_keeps_the_other_records(model_dir, tasks, tmp_path, monkeypatch):
    real = R.train_one_seed

    def flaky(seed, **kw):
        if seed == 1:
            raise RuntimeError("simulated out-of-memory")
        return real(seed, **kw)

    monkeypatch.setattr(R, "train_one_seed", flaky)
    outputs = [str(tmp_path / f"seed{s}.json") for s in (0, 1)]
    recs = R.run_task(FinetuneJob.from_params(model="tiny", task="multiclass", model_dir=model_dir, task_dir=tasks["multiclass"],
                         task_config=_cfg("multiclass"), settings=job_settings(attn_implementation="auto"),
                         outputs=dict(zip((0, 1), outputs)), threads=1))
    assert records.exit_status(recs) == 0 and records.exit_status(recs[1:]) == 1
    ok, failed = read_json(outputs[0]), read_json(outputs[1])
    assert ok["status"] == "ok" and ok["metrics"]["f1_macro"] >= 0
    assert failed["status"] == "failed" and failed["metrics"] is None and "simulated out-of-memory" in failed["error"]


def test_task_not_in_config_is_a_clear_error():
    config = {"tasks": {"emea": {"type": "ner"}, "diamed": {"type": "multiclass"}}}
    with pytest.raises(ConfigError, match=r"tasks\.emeaa: no such task.*\['diamed', 'emea'\]"):
        task_section(config, "emeaa")
    with pytest.raises(ConfigError, match="no such task"):
        finetune_task_params(config, "nope")


def test_task_folder_for_another_task_is_refused(tasks):
    with pytest.raises(TaskDataError, match="describes task 'ner', not 'emea'"):
        load_task_data(tasks["ner"], "emea")


def test_label_missing_from_label_set_names_file_and_row(tmp_path):
    from helpers_finetune import write_task_folder

    rows = [{"id": f"d{i}", "text": "t", "label": "a" if i % 2 else "b"} for i in range(4)]
    folder = write_task_folder(tmp_path / "t", "t", "multiclass", {"train": rows, "dev": rows, "test": rows}, "f1_macro")
    spec = read_json(folder / "labels.json")
    spec["labels"] = ["a"]
    (folder / "labels.json").write_text(json.dumps(spec))
    with pytest.raises(TaskDataError, match=r"train: row 'd0' has label 'b' not in labels.json"):
        load_task_data(folder, "t")


def test_no_token_type_ids_and_reference_model_limit():
    from transformers import CamembertConfig

    from clmdetour.finetune.data import PaddingCollator
    from clmdetour.finetune.model import model_token_limit

    batch = PaddingCollator(0, TASK_TYPES["multilabel"])([{"input_ids": [5, 6, 7], "labels": [0, 1]}, {"input_ids": [5], "labels": [1, 0]}])
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    assert batch["input_ids"].shape == (2, 8) and batch["attention_mask"][1].sum() == 1
    assert model_token_limit(CamembertConfig(max_position_embeddings=514, pad_token_id=1)) == 512


def test_task_data_carries_its_type_object_which_the_job_checks_once(tmp_path):
    """``TaskData.task_type`` is the registered type (no name to resolve again); the job compares its name
    with the task's settings before any model is read, and the collator keeps the same object."""
    from helpers_finetune import task_settings, write_task_folder

    from clmdetour.finetune.data import PaddingCollator
    from clmdetour.settings import FinetuneSettings

    rows = [{"id": f"d{i}", "text": "t", "label": "a" if i % 2 else "b"} for i in range(4)]
    folder = write_task_folder(tmp_path / "t", "t", "multiclass", {"train": rows, "dev": rows, "test": rows}, "f1_macro")
    data = load_task_data(folder, "t")
    assert data.task_type is TASK_TYPES["multiclass"] and not hasattr(data, "type")
    assert PaddingCollator(0, data.task_type).task is data.task_type
    settings = FinetuneSettings.from_dict(job_settings())
    with pytest.raises(TaskDataError, match=r"labels\.json: type 'multiclass' but tasks\.t\.type is 'multilabel'"):
        inputs.prepare_task_inputs("t", folder, task_settings("multilabel", "f1_macro"), tmp_path / "no-model", settings)
