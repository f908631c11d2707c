"""The GPU benchmark as a run that cannot fail (issue "gpu-certain"): the plan fits the device time, a row stopped
at its deadline keeps what it measured and leaves no process, every row's GPU-size arithmetic holds, the
fine-tuning micro-batch is planned under the memory cap, and the projection's rates come from one data file."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import REPO

sys.path.insert(0, str(REPO))

from benchmarks import gpu, gpu_finetune, gpu_plan, proctree

# ----------------------------------------------------------------------------------------------- the plan


def test_the_plan_fits_the_documented_device_time():
    plan = gpu_plan.make_plan()
    assert 1 <= len(plan.commands) <= gpu_plan.MAX_COMMANDS
    for c in plan.commands:
        assert c.total_s <= gpu_plan.COMMAND_LIMIT_S, (c.number, c.total_s)
        assert c.rows_s <= c.budget_s
    first = plan.command(1).rows
    # what has never run on a GPU goes first: the decay, the Snakemake run, the 8,192-token project rows
    for row in ("pretrain/decay-flex", "pipeline", "finetune/ner-8192/project", "finetune/doc-8192/project"):
        assert row in first, row
    assert "pretrain/clm-flex" in plan.command(2).rows
    planned = [r for c in plan.commands for r in c.rows] + list(plan.left_out)
    assert sorted(planned) == sorted(gpu_plan.EXPECTED_S)  # every row is planned or said to be left out
    assert set(gpu_plan.PROVES) == set(gpu_plan.EXPECTED_S) == set(gpu.ROWS)
    text = gpu_plan.format_plan(plan)
    assert "DOES NOT FIT" not in text and "bash .gpu-wheels/run.sh --command 1" in text
    for row in plan.left_out:
        assert f"--only {row}" in text
    with pytest.raises(ValueError, match="--command 3"):
        plan.command(3)


def test_a_row_starts_only_when_its_whole_expected_time_fits(tmp_path):
    assert gpu_plan.fits("pipeline", 170) and not gpu_plan.fits("pipeline", 169)
    assert gpu_plan.row_deadline_s("pipeline", 1000) == 170 * gpu_plan.OVERRUN + gpu_plan.OVERRUN_S
    assert gpu_plan.row_deadline_s("pipeline", 180) == 180  # never past what is left
    a = gpu.parse_args(["--dry", "--budget-s", "100", "--out-dir", str(tmp_path), "--only", "pretrain/clm-flex"])
    written = []
    rows = gpu.run_rows(a, a.only, lambda rs: written.append([dict(r) for r in rs]))
    assert rows == [{"metric": "pretrain/clm-flex", "skipped": "time budget: 100 s left, 110 s expected"}]
    assert written[-1] == rows


def test_plan_and_command_on_the_command_line(tmp_path, capsys):
    assert gpu.main(["--plan"]) == 0
    out = capsys.readouterr().out
    assert "command 1: bash .gpu-wheels/run.sh --command 1" in out and "command 2:" in out
    a = gpu.parse_args(["--command", "2", "--out-dir", str(tmp_path)])
    assert a.only == list(gpu_plan.make_plan().command(2).rows) and a.stem == "gpu-c2"
    with pytest.raises(SystemExit):
        gpu.parse_args(["--command", "1", "--only", "pipeline"])
    with pytest.raises(SystemExit):
        gpu.parse_args(["--command", "7"])


# ---------------------------------------------------------------------------------- a row stopped in time

_ROW = textwrap.dedent('''
    import json, subprocess, sys, time
    from pathlib import Path
    row_dir = Path(sys.argv[1])
    # a grandchild in its own process group and session, as Snakemake and Composer's launcher start theirs
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    (row_dir / "child.pid").write_text(str(child.pid))
    (row_dir / "partial.json").write_text(json.dumps({"steps": 3, "first_step_s": 1.5, "tokens_per_s": 1234.0}))
    time.sleep(300)
''')


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


@pytest.mark.slow  # a row process stopped at its deadline: 4 s (the unit stage keeps its 5-minute budget)
def test_a_stopped_row_keeps_its_partial_result_and_leaves_no_process(tmp_path, monkeypatch):
    monkeypatch.setitem(gpu_plan.EXPECTED_S, "finetune/cls-512/trainer", (2, "test"))
    monkeypatch.setattr(gpu_plan, "OVERRUN_S", 1.0)
    script = tmp_path / "row.py"
    script.write_text(_ROW)
    pids = {}

    def command(name, row_dir, deadline, a):
        pids["row_dir"] = row_dir
        return [sys.executable, str(script), str(row_dir)]

    a = gpu.parse_args(["--dry", "--budget-s", "60", "--out-dir", str(tmp_path), "--only", "finetune/cls-512/trainer"])
    a.log_path.write_text("")
    real_stop = proctree.stop_marked

    def stop_and_note(marker, root=None, grace_s=5.0):
        pids["child"] = int((pids["row_dir"] / "child.pid").read_text())
        pids["root"] = root
        return real_stop(marker, root, grace_s)

    monkeypatch.setattr(proctree, "stop_marked", stop_and_note)
    t0 = time.monotonic()
    rows = gpu.run_rows(a, a.only, lambda rs: None, command=command)
    assert time.monotonic() - t0 < 30
    (row,) = rows
    assert row["stopped"].startswith("deadline of 4 s") and row["tokens_per_s"] == 1234.0 and row["steps"] == 3
    assert "error" not in row and "processes_left" not in row
    assert not gpu.row_failed(row)
    assert not _alive(pids["child"]) and not _alive(pids["root"])
    assert not pids["row_dir"].exists()  # the row's scratch is removed
    assert "STOPPED at its deadline" in gpu.markdown_table(rows)


def test_stop_marked_ends_processes_that_left_the_tree(tmp_path):
    """A process re-parented away from the row (its parent exited) is still found by the marker."""
    import subprocess

    marker = proctree.new_marker()
    pid_file = tmp_path / "orphan.pid"
    code = ("import subprocess, sys; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], "
            f"start_new_session=True); open({str(pid_file)!r}, 'w').write(str(c.pid))")
    env = dict(os.environ, **{proctree.MARKER_KEY: marker})
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)  # the parent exits at once
    orphan = int(pid_file.read_text())
    assert _alive(orphan) and orphan in proctree.marked(marker)
    assert proctree.stop_marked(marker, grace_s=2.0) == []
    assert not _alive(orphan)


def test_a_stopped_pretraining_row_reports_its_logged_steps(tmp_path):
    log = tmp_path / "x" / "ckpt" / "train_log.jsonl"
    log.parent.mkdir(parents=True)
    lines = [{"step": i + 1, "tokens": 1000 * (i + 1), "elapsed_s": 10.0 + i, "peak_memory_gib": 50.0 + i}
             for i in range(5)]
    lines[0]["first_step_s"] = 10.0
    log.write_text("\n".join(json.dumps(x) for x in lines) + "\n{\"step\": 6, \"tok")  # the last line cut by the kill
    part = gpu.read_partial(tmp_path, skip=2)
    assert part["steps"] == 5 and part["first_step_s"] == 10.0 and part["peak_memory_gib"] == 54.0
    assert part["tokens_per_s"] == pytest.approx(2000 / 2)
    assert gpu.read_partial(tmp_path / "nothing", 2) is None


def test_exit_status_counts_failures_not_stops():
    assert gpu.row_failed({"metric": "x", "error": "exit 1"})
    assert not gpu.row_failed({"metric": "x", "stopped": "deadline", "steps": 0})
    assert gpu.row_failed({"metric": "pipeline", "dag": {"passed": False}})
    assert not gpu.row_failed({"metric": "pipeline", "dag": {"passed": True}, "stopped": "deadline"})


# ------------------------------------------------------------------------------- rows at their GPU sizes


@pytest.mark.parametrize("name", [n for n in gpu.ROWS if n.startswith("pretrain/")])
def test_pretraining_rows_at_gpu_sizes(name):
    spec = gpu.pretrain_spec(name, dry=False)
    assert spec["seq_len"] == 8192 and spec["steps"] >= spec["skip"] + 2
    section = spec["section"]
    assert section["tokens"] == spec["steps"] * spec["batch"] * 8192 == spec["corpus_rows"] * 8192
    assert section["warmup_tokens"] <= section["tokens"]
    mb = spec["micro_batch_estimate"]
    assert spec["batch"] % mb == 0 and spec["estimate_gib"] <= 72.0
    if name.endswith("-flex"):  # the planned rows: FlexAttention, compiled, the largest divisor under the cap
        assert section["attn_implementation"] == "flex_attention" and section["compile"] is True
        assert mb == 12  # 24 would be over 72 GiB; the H200 run chose 12 too
        assert gpu.pretrain_spec(name, dry=False, memory_limit_gib=40.0)["micro_batch_estimate"] < mb


def test_model_parameters_count_the_150m_base():
    # 136M: the "150M" of the model card counts the tied decoder twice (parameters() yields a shared tensor once)
    assert 130e6 < gpu.model_parameters(gpu.BASE_150M) < 160e6


@pytest.mark.parametrize("shape", list(gpu_finetune.SHAPES))
def test_finetuning_rows_at_gpu_sizes(shape):
    spec = gpu_finetune.shape_spec(shape, dry=False, model_sizes=gpu.finetune_sizes(False))
    assert spec["steps"] >= spec["steps_needed"], spec  # enough steps for the clock (the old doc-8192 had 3 < 4)
    plan = spec["memory"]
    assert spec["batch_size"] % plan["micro_batch_sequences"] == 0 and plan["estimate_gib"] <= 72.0
    if spec["max_length"] == 8192:  # batch 16 x 8,192 tokens does not fit 72 GiB: gradient accumulation
        assert plan["micro_batch_sequences"] < spec["batch_size"] and "gradient accumulation" in plan["how"]
    else:
        assert plan["micro_batch_sequences"] == spec["batch_size"]


# ------------------------------------------------------------------------------- the fine-tuning memory plan


def test_finetune_micro_batch_plan():
    from clmdetour.config import ConfigError
    from clmdetour.finetune.memory import plan_finetune_micro_batch

    sizes = {"parameters": 150_000_000, "hidden_size": 768, "intermediate_size": 1152, "num_layers": 22}
    at_8192 = plan_finetune_micro_batch(sizes, 8192, 16, 72.0, 2)
    assert at_8192.micro_batch_sequences == 8 and at_8192.requested == 16 and at_8192.estimate_gib <= 72
    assert plan_finetune_micro_batch(sizes, 512, 16, 72.0, 2).micro_batch_sequences == 16
    assert plan_finetune_micro_batch(sizes, 8192, 16, 72.0, 4).micro_batch_sequences == 4  # fp32 activations
    with pytest.raises(ConfigError, match="max_length 8192.*memory_limit_gib"):
        plan_finetune_micro_batch(sizes, 8192, 16, 3.0, 2)


def test_train_one_seed_refuses_a_micro_batch_that_does_not_divide_the_batch(tmp_path):
    from clmdetour.finetune import loop

    with pytest.raises(ValueError, match="micro-batch 3 does not divide the batch size 4"):
        loop.train_one_seed(0, model_dir=str(tmp_path), tokenizer=None, task=None, data={"train": None},
                           finetune=type("F", (), {"batch_size": 4})(), lr=1e-4, settings=None, device="cpu",
                           precision="fp32", micro_batch=3)


# ------------------------------------------------------------------------------------------ the rates file


def test_the_rates_file_feeds_the_projection_with_its_provenance():
    from clmdetour.pipeline import rates
    from clmdetour.pipeline.cost import MEASURED_RATES

    stored = rates.read_rates()
    assert set(stored) == set(MEASURED_RATES) == set(rates.RATE_ROWS)
    for kind, entry in stored.items():
        assert MEASURED_RATES[kind].tokens_per_s == entry["tokens_per_s"]
        assert entry["commit"] in MEASURED_RATES[kind].source and entry["device"] in MEASURED_RATES[kind].source
        assert MEASURED_RATES[kind].measured is entry["measured"]
    assert not stored["finetune_8192"]["measured"]  # an estimate until a device run: the projection says so
    assert "ESTIMATE" in MEASURED_RATES["finetune_8192"].source


def _device_run(tmp_path: Path, **over) -> Path:
    result = {"dry": False, "device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "date": "2026-12-24T10:00:00",
              "commit": "abc1234", "rows": [
                  {"metric": "pretrain/decay-flex", "tokens_per_s": 250000.0, "attention": "flex_attention",
                   "micro_batch_sequences": 12},
                  {"metric": "finetune/doc-8192/project", "tokens_per_s": 120000.0, "stopped": "deadline of 65 s",
                   "steps": 4},
                  {"metric": "pretrain/clm-flex", "error": "exit 1"}]}
    result.update(over)
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(result))
    return path


def test_the_update_command_rewrites_measured_rates_only(tmp_path, capsys):
    from clmdetour.pipeline import rates

    target = tmp_path / "gpu_rates.json"
    target.write_text(rates.RATES_FILE.read_text())
    before = rates.read_rates(target)
    new = rates.update_from_benchmark([_device_run(tmp_path)], target)
    assert set(new) == {"masked", "finetune_8192"}  # the errored CLM row measures nothing
    after = rates.read_rates(target)
    assert after["masked"]["tokens_per_s"] == 250000.0 and after["masked"]["device"] == "NVIDIA H100 80GB HBM3"
    assert after["masked"]["date"] == "2026-12-24" and after["masked"]["commit"] == "abc1234"
    assert after["finetune_8192"]["measured"] is True and "STOPPED" in after["finetune_8192"]["what"]
    assert after["causal"] == before["causal"] and after["finetune_512"] == before["finetune_512"]
    with pytest.raises(ValueError, match="--dry run"):
        rates.update_from_benchmark([_device_run(tmp_path, dry=True)], target)
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert rates.main(["update", str(bad)]) == 1
    assert "bad.json: not valid JSON" in capsys.readouterr().err


def test_merge_joins_two_commands_with_ratios_across_them(tmp_path):
    one = {"dry": False, "device": "H100", "torch": "2.11", "rows": [
        {"metric": "finetune/ner-8192/project", "tokens_per_s": 100.0, "sequences_per_s": 6.0},
        {"metric": "pipeline", "dag": {"passed": True}}]}
    two = {"dry": False, "device": "H100", "torch": "2.11", "rows": [
        {"metric": "pretrain/clm-flex", "tokens_per_s": 300.0},
        {"metric": "finetune/ner-8192/trainer", "tokens_per_s": 50.0, "sequences_per_s": 3.0}]}
    (tmp_path / "c1.json").write_text(json.dumps(one))
    (tmp_path / "c2.json").write_text(json.dumps(two))
    out = gpu.merge_results([tmp_path / "c1.json", tmp_path / "c2.json"], tmp_path / "merged")
    merged = json.loads(out.read_text())
    names = [r["metric"] for r in merged["rows"]]
    assert names == sorted(names, key=gpu_plan.PRIORITY.index)
    ner = next(r for r in merged["rows"] if r["metric"] == "finetune/ner-8192/project")
    assert ner["ratio_vs_transformers_trainer"] == 2.0
    assert "Projected GPU-hours" in merged["paper_projection"]
    (tmp_path / "c3.json").write_text(json.dumps(dict(two, dry=True)))
    with pytest.raises(ValueError, match="mixed"):
        gpu.merge_results([tmp_path / "c1.json", tmp_path / "c3.json"], tmp_path / "m2")


# ----------------------------------------------------------------------------------------- the kit's shadows


def test_the_kit_lists_what_it_replaces_and_never_carries_torch(monkeypatch):
    from benchmarks import kit

    installed = {"transformers": "5.17.0", "huggingface-hub": "1.33.0", "torch": "2.11.0+cu130"}

    def version(name):
        if name not in installed:
            raise kit.md.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(kit.md, "version", version)
    replaced, refused = kit.shadows(["transformers==5.24.0", "huggingface-hub==1.33.0", "seqeval==1.2.2"])
    assert replaced == ["transformers: 5.17.0 (the machine's) -> 5.24.0 (the kit's)"] and refused == []
    _, refused = kit.shadows(["torch==2.14.1", "nvidia-cublas-cu12==12.8.4.1", "triton==3.5.0"])
    assert len(refused) == 3 and all("PROVIDED" in r for r in refused)


def test_the_fetched_pins_carry_no_provided_distribution():
    from benchmarks import kit

    assert not [n for n in kit.kit_names() if kit.is_provided(n)]
