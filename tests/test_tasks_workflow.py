"""tasks.smk: input functions fail only the targets that need a missing user task (Snakemake dry-runs)."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _snakefile(tmp_path):
    """A workflow of common.smk + tasks.smk only (the stage under test), run in tmp_path."""
    sf = tmp_path / "Snakefile"
    sf.write_text(
        f'configfile: "{REPO}/config/config.yaml"\n'
        f'include: "{REPO}/workflow/rules/common.smk"\n'
        f'include: "{REPO}/workflow/rules/tasks.smk"\n', encoding="utf-8")
    return sf


def _dry(tmp_path, *args):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(_snakefile(tmp_path)), "-d", str(tmp_path), "-n",
           "--cores", "1", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_missing_user_task_fails_only_its_target(tmp_path):
    fixture = tmp_path / "fixture"
    fixture.mkdir()
    for split in ("train", "dev", "test"):
        (fixture / f"{split}.jsonl").write_text(f'{{"id": "{split}", "text": "t", "label": "a"}}\n', encoding="utf-8")
    r = _dry(tmp_path, "results/tasks/diamed")
    assert r.returncode != 0
    assert "task 'diamed' needs files you must provide" in r.stderr + r.stdout
    assert "resources/datasets/diamed/train.jsonl" in r.stderr + r.stdout
    # another task is unaffected, and the user task works once pointed at files (as dry-run tests do)
    r = _dry(tmp_path, "results/tasks/emea", "results/tasks/diamed", "--config", f"tasks={{diamed: {{path: {fixture}}}}}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "fetch_url" in r.stdout and "prepare_task" in r.stdout


def test_unknown_task_names_the_configured_tasks(tmp_path):
    r = _dry(tmp_path, "results/tasks/nosuch")
    assert r.returncode != 0
    assert "task 'nosuch' is not in config tasks" in r.stderr + r.stdout


def test_pretrain_all_does_not_need_user_tasks():
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "pretrain_all"], cwd=REPO,
                       capture_output=True, text=True, timeout=180, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-2000:]  # a workflow that fails to load is a failure, not a skip
