"""The commands a user types work as written (issue first-commands).

- rules run with Snakemake's own interpreter, not a ``python`` found on ``PATH``;
- the paper and SLURM DAGs plan on a fresh checkout, leaving out user-provided
  tasks whose files are missing, with one warning;
- rule params are canonical: the merge order of config files reschedules nothing;
- an expected error in a ``script:`` rule reaches the rule's log and the terminal once.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, clean_env

SNAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]
PAPER = str(REPO / "config/config.yaml")
DEMO = str(REPO / "config/demo.yaml")
USER_TASKS = ("distemist", "meddialog", "diamed")
WARNING = "user-provided task(s) left out of the evaluation grid"


def _fresh_checkout(tmp_path: Path) -> Path:
    """A working directory laid out like a fresh clone (no resources/, no results/)."""
    root = tmp_path / "checkout"
    root.mkdir()
    for name in ("Snakefile", "workflow", "config", "profiles", "src"):
        (root / name).symlink_to(REPO / name)
    return root


def _run(args, cwd, timeout=300, env=None):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env or clean_env(), check=False)


def test_launcher_uses_this_interpreter_for_composer():
    from clmdetour.training.launch import build_command

    cmd = build_command(4, 4, ["-m", "clmdetour.training.cli"])
    assert cmd[:4] == [sys.executable, "-m", "composer.cli.launcher", "-n"] and cmd[4] == "4"
    assert build_command(4, 0, ["-m", "x"]) == [sys.executable, "-m", "x"]


@pytest.mark.slow  # a Snakemake run in a subprocess: 10 s (the unit stage keeps its 5-minute budget)
def test_rule_runs_without_the_venv_on_path(tmp_path, tiny_model_dir):
    """With no venv on PATH, a rule still runs with Snakemake's interpreter (random_init, a script:
    rule; the phases' shell: rules use the same interpreter, see the launcher test above)."""
    env = clean_env()
    env["PATH"] = "/usr/bin:/bin"  # no virtualenv, no `python` of the project's
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(f"base_model: {{path: {tiny_model_dir}}}\n"
                       "corpus: {seq_len: 128}\n"  # the tiny model's max_position_embeddings (checked at planning)
                       "reference_models: {random-init: {build: random-init, seed: 0}}\n")
    r = _run([*SNAKE, "--directory", str(tmp_path), "--cores", "1", "results/random-init/model",
              "--configfiles", PAPER, str(overlay)], cwd=tmp_path, env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert (tmp_path / "results/random-init/model/config.json").exists()


@pytest.mark.parametrize("cmd", [["-n", "all"], ["-n", "results/eval_table.tsv"],
                                 ["--profile", "profiles/slurm", "-n", "all"]],
                         ids=["all", "eval_table", "slurm_all"])
def test_paper_dags_plan_on_a_fresh_checkout(tmp_path, cmd):
    root = _fresh_checkout(tmp_path)
    env = clean_env()
    env["CLMDETOUR_SLURM_SITE"] = str(tmp_path / "absent-site.yaml")
    r = _run([sys.executable, "-m", "snakemake", *cmd], cwd=root, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert out.count(WARNING) == 1, out[-3000:]
    for task in USER_TASKS:  # each named with what to provide
        assert f"task {task!r} needs files you must provide" in out
    assert "finetune" in r.stdout and "eval_table" in r.stdout
    assert not any(f"task={t}" in r.stdout or f"results/tasks/{t}" in r.stdout for t in USER_TASKS)


def test_missing_user_tasks_error_restores_the_hard_error(tmp_path):
    root = _fresh_checkout(tmp_path)
    r = _run([sys.executable, "-m", "snakemake", "-n", "results/eval_table.tsv",
              "--config", "evaluation={missing_user_tasks: error}"], cwd=root)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert any(f"task {t!r} needs files you must provide" in out for t in USER_TASKS), out[-2000:]


def test_decontamination_against_a_missing_user_task_stops_only_corpus_targets(tmp_path):
    root = _fresh_checkout(tmp_path)
    cfg = ["--config", "corpus={decontaminate_against: [emea, meddialog]}"]
    r = _run([sys.executable, "-m", "snakemake", "-n", "pretrain_all", *cfg], cwd=root)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "corpus.decontaminate_against lists task 'meddialog'" in out and "write train.jsonl" in out
    r = _run([sys.executable, "-m", "snakemake", "-n", "results/tasks/emea", *cfg], cwd=root)
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]


def _job_params(workdir: Path, configfiles: list[str]) -> dict[str, list[str]]:
    r = _run([sys.executable, str(REPO / "tests/dump_params.py"), str(REPO), str(workdir), "all", *configfiles],
             cwd=workdir)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    line = next(l for l in r.stdout.splitlines() if l.startswith("PARAMS_JSON="))
    return json.loads(line.split("=", 1)[1])


def test_config_merge_order_never_changes_params(tmp_path):
    """The same overlays merged in two orders give identical params for every job of `all`."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = _job_params(tmp_path / "a", [PAPER, DEMO])
    b = _job_params(tmp_path / "b", [DEMO, PAPER, DEMO])  # same values, other key order
    assert set(a) == set(b) and len(a) > 50
    changed = sorted(k for k in a if a[k] != b[k])
    assert not changed, f"params differ with the merge order: {changed[:5]}"


def test_canonical_sorts_keys_and_keeps_values():
    from clmdetour.config import canonical

    x = {"b": {"y": 1, "x": (1, 2)}, "a": None}
    c = canonical(x)
    assert repr(c) == "{'a': None, 'b': {'x': [1, 2], 'y': 1}}"
    assert c == {"a": None, "b": {"x": [1, 2], "y": 1}}


def test_expected_error_reaches_log_and_terminal_once(tmp_path):
    """prepare_task (a script: rule) on a bad file: the message is in its log and on the terminal, once each."""
    folder = tmp_path / "meddialog"
    folder.mkdir()
    for split in ("train", "dev", "test"):
        (folder / f"{split}.jsonl").write_text('{"id": "a", "text": "t", "label": "x"}\n{"id": "b", "text": \n')
    r = _run([*SNAKE, "--directory", str(tmp_path), "--cores", "1", "--show-failed-logs", "results/tasks/meddialog",
              "--configfile", PAPER, "--config", f"tasks={{meddialog: {{path: {folder}}}}}"], cwd=tmp_path)
    assert r.returncode != 0
    log = (tmp_path / "logs/prepare_task/meddialog.log").read_text()
    lines = [l for l in log.splitlines() if l.startswith("error: ")]
    assert len(lines) == 1 and "train.jsonl" in lines[0], log[-2000:]
    terminal = r.stdout + r.stderr
    assert terminal.count(lines[0]) == 1, terminal[-3000:]
