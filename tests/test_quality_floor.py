"""A phase that wrecks its model stops (issue 65 item 3): the held-out loss at a phase's end against the unigram
entropy of the same held-out rows (clmdetour.training.quality); one line, no traceback, no model."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPO, tiny_phase1_section

from clmdetour.training.quality import QualityFloorError, check_quality_floor, quality_floor_record, unigram_entropy


def test_unigram_entropy_of_the_rows():
    assert unigram_entropy([{"input_ids": [1, 1, 1, 1]}]) == 0.0
    assert math.isclose(unigram_entropy([{"input_ids": [0, 1]}, {"input_ids": [2, 3]}]), math.log(4))
    p = np.array([0.5, 0.25, 0.25])
    assert math.isclose(unigram_entropy([{"input_ids": [5, 5, 6, 7]}]), float(-(p * np.log(p)).sum()))
    with pytest.raises(ValueError, match="no token"):
        unigram_entropy([])


def test_the_floor_stops_a_loss_above_the_limit_and_names_the_keys():
    check_quality_floor(2.52, 5.41, 1.0, "clm-detour/phase1", "phase1", "clm-detour")  # the demo's default
    check_quality_floor(9.0, 5.41, None, "x/phase1", "phase1", "x")  # no floor
    with pytest.raises(QualityFloorError) as e:
        check_quality_floor(6.09, 5.41, 1.0, "clm-detour/phase1", "phase1", "clm-detour")  # the demo at lr 0.3
    line = str(e.value)
    assert "\n" not in line and line.startswith("clm-detour/phase1: the held-out loss at the phase's end, 6.09 ")
    assert "pretraining.quality_floor.phase1" in line and "pretraining.optimizer.lr" in line
    with pytest.raises(QualityFloorError):
        check_quality_floor(math.nan, 5.41, 1.0, "x/decay", "decay", "x")
    assert quality_floor_record(2.0, 4.0, 1.0) == {"unigram_entropy": 4.0, "unigram_fraction": 1.0, "limit": 4.0,
                                                   "ratio": 0.5}


def test_the_floor_is_out_of_the_run_hash_and_out_of_the_base_build():
    from clmdetour.config import base_build_section, load_yaml, validate_config
    from clmdetour.config.phase import training_loop_section

    cfg = validate_config(load_yaml(REPO / "config/config.yaml"))
    assert cfg["pretraining"]["quality_floor"] == {"decay": None, "phase1": None}  # off: reduced sizes end above
    assert "quality_floor" not in training_loop_section({"quality_floor": {"decay": 1.0}, "lr": 1})
    cfg["base_model"]["build"] = {"pretrain_tokens": 1, "lr": 1e-3, "warmup_tokens": 0, "masking_rate": 0.3, "seed": 0}
    assert "quality_floor" not in base_build_section(cfg)


@pytest.mark.slow  # one training subprocess of 10 tiny steps
def test_a_phase_under_its_floor_writes_no_model_and_prints_one_line(tmp_path, tiny_model_dir, demo_texts):
    section = tiny_phase1_section(tmp_path, tiny_model_dir, demo_texts, 64)
    section.update(tokens=64 * 8 * 10, global_batch_sequences=8, micro_batch_sequences=8, checkpoint_interval="5ba",
                   log_interval_steps=1, checkpoint_root=str(tmp_path / "ckpt"), valid_sequences=4, warmup_tokens=0,
                   quality_floor={"phase1": 0.01, "decay": 0.01})  # a floor no tiny model reaches
    out = tmp_path / "phase"
    cmd = [sys.executable, "-m", "clmdetour.training.cli", "--variant", "v", "--input-model", str(tiny_model_dir),
           "--corpus", str(tmp_path / "corpus"), "--output-dir", str(out), "--section", json.dumps(section)]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 1, r.stderr[-3000:]
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and re.match(r"error: v/phase1: the held-out loss at the phase's end, [0-9.]+ nats per "
                                         r"token, is above 0.01 x the unigram entropy", errors[0]), errors
    assert "Traceback" not in r.stderr
    assert not (out / "model").exists() and not (out / "run.json").exists()
