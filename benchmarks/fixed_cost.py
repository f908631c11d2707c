"""Benchmark 7: a training process's fixed cost, from interpreter start to the first training step.

A demo fine-tune as the ``finetune`` rule runs it: ``workflow/scripts/finetune.py``
itself (``runpy``, given the params, inputs, outputs and log that Snakemake
would give it for the demo config), in a fresh interpreter per repeat, on the demo's
base model shape (``config/demo.yaml`` ``base_model.build``, untrained
weights: the cost before the first step does not depend on them) and the
demo EMEA task (``clmdetour.demo.tasks`` sources, built by the project's
task code with the demo config's entry). Each child records, with
``time.perf_counter``:

- ``import composer``: the interpreter's first statement imports Composer
  (which imports torch, torchmetrics, torchvision, ...): Composer's cost;
- ours: from the end of that import to the start of the first training step
  (Composer's ``BATCH_START`` event of the first batch): the rule script's
  imports and set-up, reading and tokenising the task, loading the model, building the
  Composer model, optimizer, scheduler and ``Trainer``, and Composer's
  ``fit`` set-up.

The child stops once that first step ends (``os._exit``; nothing is written).
No module is replaced: the child only wraps Composer's ``Engine.run_event``
to read the clock. Goal (issue 31): ours <= 2 s on 2 idle cores (the
fine-tune rule's 2 threads); the row reports the median of 5 repeats.
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

from benchmarks.common import REPO, Row, median_range

GOAL_S = 2.0
TASK = "emea"
THREADS = 2  # the finetune rule's threads on the local profile (profiles/local: 2 cores)


def demo_config() -> dict:
    """The paper config with the ``config/demo.yaml`` overlay (as ``snakemake --configfile config/demo.yaml``)."""
    from clmdetour.config import _deep_merge, load_yaml, validate_config

    return validate_config(_deep_merge(load_yaml(REPO / "config" / "config.yaml"), load_yaml(REPO / "config" / "demo.yaml")))


def prepare(root: Path) -> dict:
    """Write the demo base model, the demo EMEA task folder and the rule's params under ``root``.

    Returns:
        The child's job: ``model_dir``, ``task_dir``, ``task_config``, ``settings``, ``seeds``, ``outputs``.
    """
    from clmdetour.demo.base import init_model_dir
    from clmdetour.demo.generator import generate_corpus
    from clmdetour.demo.tasks import write_demo_source
    from clmdetour.evaluation.grid import finetune_settings, finetune_task_params, task_seeds
    from clmdetour.tasks.contract import write_task
    from clmdetour.tasks.prepare import build_task

    config = demo_config()
    build = dict(config["base_model"]["build"], num_layers=config["base_model"]["num_layers"])
    texts = [d["text"] for d in generate_corpus(300, seed=config["demo"]["seed"])]
    init_model_dir(build, texts, root / "model")
    demo = config["demo"]
    spec = dict(config["tasks"][TASK])
    source = root / "sources" / Path(spec["path"]).name  # results/demo/tasks/quaero -> quaero
    write_demo_source(source.name, source, seed=demo["seed"], n_train=demo["task_train_examples"],
                      n_dev=demo["task_eval_examples"], n_test=demo["task_eval_examples"])
    spec["path"] = str(source)
    rows, labels_json, manifest = build_task(TASK, spec)
    write_task(root / "tasks" / TASK, rows, labels_json, manifest)
    seeds = task_seeds(config, TASK)
    return {"model_dir": str(root / "model"), "task_dir": str(root / "tasks" / TASK),
            "task_config": finetune_task_params(config, TASK), "settings": finetune_settings(config), "seeds": seeds,
            "outputs": {str(s): str(root / "out" / f"seed{s}.json") for s in seeds}, "log": str(root / "finetune.log")}


def child(job_path: str, result_path: str) -> None:
    """The timed process (run as ``python benchmarks/fixed_cost.py JOB RESULT``); see the module docstring."""
    import time

    t_start = time.perf_counter()
    import composer  # noqa: F401  (timed: Composer's import)

    t_composer = time.perf_counter()
    from composer.core import Engine, Event

    marks: dict[str, float] = {}
    run_event = Engine.run_event

    def timed_run_event(self, event, *args, **kwargs):
        if event == Event.BATCH_START and "first_step_start" not in marks:
            marks["first_step_start"] = time.perf_counter()
        out = run_event(self, event, *args, **kwargs)
        if event == Event.BATCH_END and "first_step_end" not in marks:
            marks["first_step_end"] = time.perf_counter()
            Path(result_path).write_text(json.dumps({
                "import_composer_s": t_composer - t_start, "to_first_step_s": marks["first_step_start"] - t_composer,
                "first_step_s": marks["first_step_end"] - marks["first_step_start"],
                "modules": len(sys.modules)}))
            os._exit(0)
        return out

    Engine.run_event = timed_run_event
    # The finetune rule's own script, given what Snakemake would give it.
    job = json.loads(Path(job_path).read_text())
    smk = SimpleNamespace(
        wildcards=SimpleNamespace(model="demo-base", task=TASK),
        input=SimpleNamespace(model=job["model_dir"], task=job["task_dir"]),
        output=[job["outputs"][str(s)] for s in job["seeds"]], log=[job["log"]],
        params=SimpleNamespace(task=json.dumps(job["task_config"]), settings=json.dumps(job["settings"], sort_keys=True),
                               seeds=json.dumps(job["seeds"]), model_max_length=0),
        resources=SimpleNamespace(gpu=0), threads=THREADS)
    runpy.run_path(str(REPO / "workflow" / "scripts" / "finetune.py"), init_globals={"snakemake": smk}, run_name="__main__")
    raise RuntimeError("the fine-tune ended without a training step")


def measure(job_path: Path, result_path: Path, threads: int = THREADS) -> dict:
    """One fresh interpreter running :func:`child`; its timings (seconds).

    Raises:
        RuntimeError: the child failed (its stderr's tail in the message).
    """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS=str(threads))
    result_path.unlink(missing_ok=True)
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), str(job_path), str(result_path)],
                          check=False, capture_output=True, text=True, env=env, cwd=str(REPO))
    if proc.returncode != 0 or not result_path.exists():
        log = Path(json.loads(job_path.read_text())["log"])
        tail = (proc.stderr + (log.read_text(encoding="utf-8") if log.exists() else ""))[-800:]
        raise RuntimeError(f"fixed-cost child failed (exit {proc.returncode}): {tail}")
    return json.loads(result_path.read_text())


def run(workdir: Path, quick: bool = False, log=print) -> list[Row]:
    """Median of 5 fresh processes (2 with ``--quick``): Composer's import, and ours after it; two Rows."""
    repeats = 2 if quick else 5
    root = Path(tempfile.mkdtemp(dir=workdir, prefix="fixed-cost-"))
    try:
        job = prepare(root)
        job_path = root / "job.json"
        job_path.write_text(json.dumps(job))
        results = []
        for r in range(repeats):
            results.append(measure(job_path, root / "result.json"))
            log(f"  repeat {r + 1}/{repeats}: import composer {results[-1]['import_composer_s']:.2f} s, "
                f"then to the first step {results[-1]['to_first_step_s']:.2f} s")
        imp, imp_range = median_range([x["import_composer_s"] for x in results])
        ours, ours_range = median_range([x["to_first_step_s"] for x in results])
        details = {"task": TASK, "model": "config/demo.yaml base_model.build (untrained)", "threads": THREADS,
                   "first_step_s": statistics.median(x["first_step_s"] for x in results),
                   "modules_loaded": results[-1]["modules"]}
        return [
            Row(benchmark="7 fixed cost", metric="import composer (Composer's)", unit="s", ours=imp, reference=None,
                ratio=None, ratio_meaning="-", goal="-", goal_met=None, repeats=repeats, ours_range=imp_range,
                details=details),
            Row(benchmark="7 fixed cost", metric="end of import composer -> first fine-tuning step", unit="s",
                ours=ours, reference=None, ratio=None, ratio_meaning="-", goal=f"<= {GOAL_S} s", goal_met=ours <= GOAL_S,
                repeats=repeats, ours_range=ours_range, details=details),
        ]
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2])
