"""Issue checkable-scores item 4: a task target typed with '-' (prepare_task_fracco-30) stops planning with one
line naming the target to type, where Snakemake's own error named no rule."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import REPO, clean_env


@pytest.mark.slow  # Snakemake planning in a subprocess: 3 s (the unit stage keeps its 5-minute budget)
def test_a_dash_in_a_task_target_gets_did_you_mean(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "prepare_task_fracco-30", "--snakefile",
                           str(REPO / "Snakefile"), "--directory", str(tmp_path), "--cores", "1", "--configfiles",
                           str(REPO / "config/config.yaml"), str(REPO / "config/demo.yaml")],
                          cwd=tmp_path, capture_output=True, text=True, env=clean_env(), timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert ("no target 'prepare_task_fracco-30': named targets write '-' as '_'; did you mean "
            "prepare_task_fracco_30?") in out


def test_every_dashed_task_has_its_suggestion():
    from clmdetour.config import load_yaml, validate_config
    from clmdetour.pipeline import Pipeline

    config = validate_config(load_yaml(REPO / "config" / "config.yaml"))
    misspelt = Pipeline(config).misspelt_task_targets()
    assert misspelt["prepare_task_fracco-30"] == "prepare_task_fracco_30"
    assert all("-" in typed and "-" not in target for typed, target in misspelt.items())
    assert "prepare_task_emea" not in misspelt  # nothing to misspell
