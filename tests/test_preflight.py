"""Raw and silent launches answered in one line at planning (issue 65 item 6): --cores 0, another user's
.snakemake, a local model folder that does not exist, heads that do not divide the hidden size, a hash split
that leaves no train."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
from helpers import REPO, clean_env

from clmdetour.config import ConfigError, deep_merge, load_yaml, validate_config
from clmdetour.pipeline.preflight import cores_problem, missing_model_paths, snakemake_folder_problem

DEMO = [str(REPO / "config/config.yaml"), str(REPO / "config/demo.yaml")]


def _demo() -> dict:
    return deep_merge(load_yaml(DEMO[0]), load_yaml(DEMO[1]))


def test_cores_zero_is_refused_and_a_cluster_run_is_not():
    assert "--cores 0: no job could ever start" in cores_problem(0)
    assert cores_problem(None) is None and cores_problem(1) is None


def test_a_snakemake_folder_this_user_cannot_write_is_named(tmp_path):
    assert snakemake_folder_problem(tmp_path) is None  # none yet
    (tmp_path / ".snakemake").mkdir()
    assert snakemake_folder_problem(tmp_path) is None
    if os.geteuid() == 0:
        pytest.skip("root writes everywhere: the unwritable case needs another user")
    (tmp_path / ".snakemake").chmod(0o500)
    try:
        assert "this user cannot write it" in snakemake_folder_problem(tmp_path)
    finally:
        (tmp_path / ".snakemake").chmod(0o700)


def test_missing_local_model_folders_are_named_by_key(tmp_path):
    cfg = validate_config(_demo())
    cfg["reference_models"] = {"mine": {"path": "models/mine"}, "hub": {"hub_id": "org/x"}}
    lines = missing_model_paths(cfg, tmp_path)
    assert len(lines) == 1 and lines[0].startswith("reference_models.mine.path: 'models/mine' does not exist")
    (tmp_path / "models" / "mine").mkdir(parents=True)
    assert missing_model_paths(cfg, tmp_path) == []


def test_heads_that_do_not_divide_the_hidden_size_are_refused_at_planning():
    cfg = _demo()
    cfg["base_model"]["build"]["hidden_size"] = 100
    cfg["base_model"]["build"]["num_attention_heads"] = 3
    with pytest.raises(ConfigError, match=r"base_model\.build\.num_attention_heads: 3 does not divide "
                                          r"base_model\.build\.hidden_size 100 .* use 2 or 4 heads"):
        validate_config(cfg)


def test_a_hash_split_that_leaves_no_train_is_refused():
    cfg = _demo()
    task = next(iter(cfg["tasks"]))
    cfg["tasks"][task] = deep_merge(copy.deepcopy(cfg["tasks"][task]),
                                    {"split": {"policy": "hash", "dev_fraction": 0.6, "test_fraction": 0.6}})
    with pytest.raises(ConfigError, match=rf"tasks\.{task}\.split\.dev_fraction \(0\.6\) \+ tasks\.{task}\.split"
                                          r"\.test_fraction \(0\.6\) = 1\.2 leaves no document for train"):
        validate_config(cfg)


def test_the_workflow_says_it_in_one_line(tmp_path):
    base = [sys.executable, "-m", "snakemake", "-n", "--snakefile", str(REPO / "Snakefile"), "--directory",
            str(tmp_path), "--configfiles", *DEMO]
    r = subprocess.run([*base, "--cores", "0"], cwd=tmp_path, env=clean_env(), capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode != 0 and "--cores 0: no job could ever start" in r.stdout + r.stderr
    r = subprocess.run([*base, "--cores", "1", "--config", "reference_models={mine: {path: nowhere/model}}"],
                       cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=300, check=False)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "reference_models.mine.path: 'nowhere/model' does not exist" in out, out[-2000:]
    assert "MissingInputException" not in out
