"""Issue 59 item 3: one typed settings object from the rule's params to the loop, and the fine-tune job's modules
each with one concern (no dict form, no casts of a setting, nothing overwritten after construction)."""
import ast
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers_finetune import job_settings

from clmdetour.config import ConfigError
from clmdetour.finetune.job import FinetuneJob
from clmdetour.settings import FinetuneSettings
from clmdetour.tasks.settings import TaskSettings

REPO = Path(__file__).resolve().parents[1]
FINETUNE = REPO / "src" / "clmdetour" / "finetune"
TASK = {"type": "multiclass", "metric": "f1_macro", "max_length": 64, "seeds": 2,
        "finetune": {"lr_grid": [1e-4, 3e-4], "epochs": 2, "batch_size": 4, "warmup_ratio": 0.1,
                     "betas": [0.9, 0.98], "eps": 1e-6, "weight_decay": 1e-5}}


def _rule(tmp_path, seeds=(0, 1), outputs=None, task=TASK):
    """A stand-in for Snakemake's ``snakemake`` object of a ``finetune`` job, as the rule fills it."""
    outs = outputs if outputs is not None else [str(tmp_path / f"seed{s}.json") for s in seeds]
    return SimpleNamespace(
        wildcards=SimpleNamespace(model="clm-detour", task="diamed"),
        input=SimpleNamespace(model="results/pretrain/clm-detour/decay/model", task="results/tasks/diamed"),
        params=SimpleNamespace(task=json.dumps(task), settings=json.dumps(job_settings()), seeds=json.dumps(list(seeds)),
                               model_max_length="0"),
        output=outs, resources=SimpleNamespace(gpu=1), threads=16,
        config={"pretraining": {"checkpoint_root": str(tmp_path / "ckpt"), "memory_limit_gib": 70}})


def test_the_rule_builds_one_typed_job(tmp_path):
    job = FinetuneJob.from_rule(_rule(tmp_path, seeds=(3, 1)))
    assert isinstance(job.task_settings, TaskSettings) and isinstance(job.settings, FinetuneSettings)
    assert job.seeds == [1, 3] and job.outputs[3] == tmp_path / "seed3.json"  # seed i -> output i, run in order
    assert job.scratch_dir == tmp_path / "ckpt" / "finetune" / "clm-detour" / "diamed"
    assert job.model_max_length is None and job.gpus == 1 and job.memory_limit_gib == 70.0
    assert job.task_settings.finetune.betas == (0.9, 0.98)
    assert job.task_settings.as_dict() == TASK  # the params hashed and recorded are the ones given, unchanged


def test_the_job_takes_no_dict_form(tmp_path):
    rule = _rule(tmp_path)
    with pytest.raises(TypeError, match="task_settings: a TaskSettings, not dict"):
        FinetuneJob(model="m", task="t", model_dir=".", task_dir=".", task_settings=TASK,
                    settings=FinetuneSettings.from_dict(job_settings()), outputs={0: "x"})
    with pytest.raises(ConfigError, match="2 seeds for 1 outputs"):
        FinetuneJob.from_rule(SimpleNamespace(**dict(vars(rule), output=rule.output[:1])))


@pytest.mark.parametrize(("key", "value", "message"), [
    ("batch_size", 2.5, r"tasks\.diamed\.finetune\.batch_size: 2\.5 is not a whole number"),
    ("epochs", 0, r"tasks\.diamed\.finetune\.epochs: 0 is not a number > 0"),
    ("betas", [0.9], r"tasks\.diamed\.finetune\.betas: \[0\.9\] is not two numbers"),
    ("weight_decay", "1e-5", r"tasks\.diamed\.finetune\.weight_decay: '1e-5' is not a number >= 0"),
    ("warmup_ratio", True, r"tasks\.diamed\.finetune\.warmup_ratio: True is not a number"),
])
def test_a_finetune_value_of_the_wrong_kind_is_refused_naming_its_key(tmp_path, key, value, message):
    task = dict(TASK, finetune=dict(TASK["finetune"], **{key: value}))
    with pytest.raises(ConfigError, match=message):
        FinetuneJob.from_rule(_rule(tmp_path, task=task))


def _casts_of_settings(tree: ast.AST) -> list[str]:
    """``int(...)``/``float(...)``/``str(...)`` calls whose argument reads a settings attribute
    (``finetune.x``, ``settings.x``, ``task_settings.x``, ``job.x``)."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "float", "str")
                and node.args and isinstance(node.args[0], ast.Attribute)):
            root = node.args[0]
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in ("finetune", "settings", "task_settings", "job"):
                found.append(ast.unparse(node))
    return found


def test_no_setting_is_cast_or_overwritten_in_the_fine_tune_modules():
    for path in sorted(FINETUNE.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert _casts_of_settings(tree) == [], path.name
        overwritten = [ast.unparse(t) for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets
                       if isinstance(t, ast.Attribute) and t.attr == "metric" and ast.unparse(t.value) != "self"]
        assert overwritten == [], path.name
    planted = ast.parse("def f(finetune):\n    return int(finetune.batch_size)\n")
    assert _casts_of_settings(planted) == ["int(finetune.batch_size)"]  # the search finds a cast


def test_run_task_takes_the_job_and_the_script_reads_no_params():
    import inspect

    from clmdetour.finetune.run import run_task

    params = list(inspect.signature(run_task).parameters.values())
    assert [p.name for p in params] == ["job"] and params[0].annotation in ("FinetuneJob", FinetuneJob)
    script = (REPO / "workflow" / "scripts" / "finetune.py").read_text(encoding="utf-8")
    assert "FinetuneJob.from_rule(snakemake)" in script and "json.loads" not in script


#: Each module of the fine-tune job and its one concern: the names it defines (a name in two is a failure).
CONCERNS = {
    "job.py": {"FinetuneJob"},
    "inputs.py": {"PreparedTask", "prepare_task_inputs", "hyperparameters_record", "job_memory_plan"},
    "loop.py": {"train_one_seed", "task_model", "dev_selector", "loss_trace", "train_loss_summary", "predict_logits"},
    "finished.py": {"FinishedRuns", "stored_run_problem", "finished_runs_key"},
    "records.py": {"seed_record", "write_seed_record", "exit_status", "sweep_record", "diverged"},
    "sweep.py": {"choose_lr"},
    "run.py": {"run_task", "sweep_seeds", "job_lr_choice"},
}


def test_each_concern_is_defined_in_its_module_only():
    defined = {}
    for path in sorted(FINETUNE.glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined.setdefault(node.name, []).append(path.name)
    for module, names in CONCERNS.items():
        for name in names:
            assert defined.get(name) == [module], (name, defined.get(name))
