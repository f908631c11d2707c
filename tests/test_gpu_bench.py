"""benchmarks/gpu.py: the table's arithmetic (fast) and every row's ``--dry`` run on the CPU (slow)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import REPO

sys.path.insert(0, str(REPO))

from benchmarks import gpu


def _row(name, tokens, seqs=None, **kw):
    return dict(metric=name, tokens_per_s=tokens, sequences_per_s=seqs, **kw)


def test_ratios_pair_each_row_with_its_own_reference():
    rows = [_row("pretrain/clm-flex", 300.0), _row("pretrain/trainer-mlm", 100.0),
            _row("finetune/ner-8192/project", 50.0, 4.0), _row("finetune/ner-8192/trainer", 80.0, 2.0),
            _row("finetune/cls-512/project", 50.0, 9.0), {"metric": "pretrain/decay-flex", "skipped": "time budget"}]
    gpu.add_ratios(rows)
    assert rows[0]["ratio_vs_transformers_trainer"] == 3.0
    # fine-tuning rows compare sequences/s with the Trainer row of the same task shape
    assert rows[2]["ratio_vs_transformers_trainer"] == 2.0
    assert "ratio_vs_transformers_trainer" not in rows[4]  # its Trainer row did not run: no ratio invented
    table = gpu.markdown_table(rows)
    assert "| pretrain/decay-flex |" in table and "skipped (time budget)" in table
    assert table.count("\n") == len(rows) + 2


def test_an_unknown_row_is_refused():
    with pytest.raises(SystemExit):
        gpu.parse_args(["--dry", "--only", "pretrain/nope"])


#: One row of each kind the benchmark runs (a planned pretraining phase with its same-process replan, the project's
#: fine-tuning path at long and short inputs, the transformers Trainer reference for the ratio): the other rows
#: run the same code at other sizes or attention settings, and each is built at GPU sizes without a model in
#: tests/test_gpu_plan.py. All rows on the CPU took 120 s of CI's slow stage; these take about a third.
DRY_ROWS = ["pretrain/decay-flex", "finetune/ner-8192/project", "finetune/doc-8192/project", "finetune/doc-8192/trainer"]


@pytest.mark.slow
def test_every_kind_of_row_runs_dry_each_in_its_own_process(tmp_path):
    """``gpu.sh --dry``'s rows at tiny sizes on the CPU, each in a fresh process (the pipeline row has its own
    test: tests/test_gpu_pipeline.py)."""
    assert set(DRY_ROWS) <= set(gpu.ROWS)
    names = DRY_ROWS
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu.py"), "--dry", "--budget-s", "900",
                           "--out-dir", str(tmp_path), "--only", *names], check=False, cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "gpu-dry.json").read_text())
    rows = {r["metric"]: r for r in result["rows"]}
    assert set(rows) == set(names)
    for name, r in rows.items():
        assert r["tokens_per_s"] > 0 and r["mfu"] is None, name  # no MFU invented on the CPU
    # the decay row planned again in its own process, to the micro-batch it trained with
    assert rows["pretrain/decay-flex"]["same_process_replan"]["same_as_fresh"] is True
    # every fine-tuning row records the attention it used and why; the project's rows ran the project's path
    for name in names:
        if name.startswith("finetune/"):
            assert rows[name]["attention"] == "sdpa" and rows[name]["attention_reason"], name
            assert rows[name]["steps"] >= 4 and rows[name]["train_inputs"] > 0
    assert rows["finetune/ner-8192/project"]["attention_reason"] == "auto on CPU is sdpa"
    assert "ratio_vs_transformers_trainer" in rows["finetune/doc-8192/project"]
    # the projection of the paper grid is in the Markdown table
    assert "Projected GPU-hours" in (tmp_path / "gpu-dry.md").read_text()
