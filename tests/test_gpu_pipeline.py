"""benchmarks/gpu_pipeline.py (issue "gpu-proven", item 4): the CPU rehearsal of the one-GPU DAG and of the
kill -9 resume check passes, and its verdicts come from the run's own files (planted records that say the
wrong thing fail)."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from helpers import REPO, clean_env


def _load():
    spec = importlib.util.spec_from_file_location("gpu_pipeline", REPO / "benchmarks/gpu_pipeline.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_pipeline"] = mod  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


gp = _load()

GPU_LOG = ("launch: /usr/bin/python3 -m composer.cli.launcher -n 1 -m clmdetour.training.cli --variant clm-detour\n"
           "2026-01-01 00:00:00,000 INFO clmdetour.training.attention_check: attention: flex_attention (auto on CUDA)\n"
           "2026-01-01 00:00:01,000 INFO composer.trainer.trainer: Using precision Precision.AMP_BF16\n")
CPU_LOG = ("launch: 1 GPU(s) requested but no CUDA device is visible; running one CPU process\n"
           "launch: /x/python -m clmdetour.training.cli --variant clm-detour\n"
           "2026-01-01 00:00:00,000 INFO clmdetour.training.attention_check: attention: sdpa (auto on CPU is sdpa)\n"
           "2026-01-01 00:00:01,000 INFO composer.trainer.trainer: Using precision Precision.FP32\n")


def _gpu_run(**over) -> dict:
    run = {"device": {"type": "gpu", "count": 1, "name": "NVIDIA H200"}, "precision": "amp_bf16", "steps": 12,
           "attention": {"requested": "auto", "candidate": "flex_attention", "implementation": "flex_attention",
                         "reason": "auto on CUDA without flash-attn is flex_attention"},
           "compile": {"enabled": True, "requested": "auto", "first_step_s": 31.5}}
    run.update(over)
    return run


def test_a_gpu_phase_record_passes_and_each_wrong_field_fails_its_check():
    assert gp.phase_checks("pretrain_phase1", _gpu_run(), GPU_LOG, gp.GPU_EXPECT)["passed"]
    cases = {
        "device_ok": _gpu_run(device={"type": "cpu", "count": 1, "name": "cpu"}),
        "precision_ok": _gpu_run(precision="fp32"),
        "attention_ok": _gpu_run(attention={"candidate": "flex_attention", "implementation": "sdpa",
                                            "reason": "flex_attention failed its check; fell back to sdpa"}),
        "compile_ok": _gpu_run(compile={"enabled": False, "requested": "auto"}),
    }
    for check, run in cases.items():
        entry = gp.phase_checks("pretrain_phase1", run, GPU_LOG, gp.GPU_EXPECT)
        assert entry[check] is False and not entry["passed"], check
    # the log is read too: a job whose Composer trainer ran in fp32, or that went through no GPU launcher
    assert not gp.phase_checks("pretrain_phase1", _gpu_run(), GPU_LOG.replace("AMP_BF16", "FP32"),
                               gp.GPU_EXPECT)["precision_ok"]
    assert gp.phase_checks("pretrain_phase1", _gpu_run(), CPU_LOG, gp.GPU_EXPECT)["launch_ok"] is False


def test_cpu_expectations_and_the_log_facts():
    run = _gpu_run(device={"type": "cpu", "count": 1, "name": "cpu"}, precision="fp32",
                   attention={"candidate": "sdpa", "implementation": "sdpa", "reason": "auto on CPU is sdpa"},
                   compile={"enabled": False, "requested": "auto"})
    entry = gp.phase_checks("pretrain_decay", run, CPU_LOG, gp.CPU_EXPECT)
    assert entry["passed"] and entry["log"]["launch_gpu"] is False
    assert not gp.phase_checks("pretrain_decay", _gpu_run(), CPU_LOG, gp.CPU_EXPECT)["passed"]
    facts = gp.log_facts(GPU_LOG)
    assert facts["launch_gpu"] is True and facts["composer_precision"] == "amp_bf16"
    assert facts["attention_line"].startswith("attention: flex_attention")
    assert gp.log_facts("")["launch_gpu"] is None  # build_base runs in the Snakemake job, without the launcher


def test_a_finetune_record_on_the_wrong_device_fails():
    record = {"seed": 0, "status": "ok", "device": "gpu", "hyperparameters": {"precision": "amp_bf16"},
              "attention": {"candidate": "flex_attention", "implementation": "sdpa", "reason": "fell back: NaN rows"}}
    assert gp.finetune_checks("finetune m/t", record, "", gp.GPU_EXPECT)["passed"]  # a recorded fallback is data
    assert not gp.finetune_checks("finetune m/t", dict(record, device="cpu"), "", gp.GPU_EXPECT)["passed"]
    assert not gp.finetune_checks("finetune m/t", dict(record, status="failed"), "", gp.GPU_EXPECT)["passed"]
    no_reason = dict(record, attention={"implementation": "sdpa"})
    assert not gp.finetune_checks("finetune m/t", no_reason, "", gp.GPU_EXPECT)["attention_ok"]


def test_missing_records_fail_the_dag_checks(tmp_path):
    checks = gp.collect_job_checks(tmp_path, gp.CPU_EXPECT)
    assert [c["job"] for c in checks] == ["build_base", "pretrain_phase1", "pretrain_decay", "finetune"]
    assert not any(c["passed"] for c in checks) and all("error" in c for c in checks)


def test_loss_comparison_and_resume_verdict():
    ref = {s: 6.0 - 0.1 * s for s in range(1, 9)}
    same = dict(ref)
    ok = gp.compare_losses(ref, same, 3, gpu=False)
    assert ok["losses_ok"] and ok["steps_compared_after_resume"] == 5 and ok["max_abs_diff_after_resume"] == 0
    off = {**ref, 7: ref[7] * (1 + 1e-4)}
    assert not gp.compare_losses(ref, off, 3, gpu=False)["losses_ok"]
    assert gp.compare_losses(ref, off, 3, gpu=True)["losses_ok"]  # 5e-4 nats: inside bf16's 2e-2
    assert not gp.compare_losses(ref, {s: v for s, v in ref.items() if s != 8}, 3, gpu=False)["losses_ok"]
    killed = {"killed": True, "checkpoint_at_kill": "ep0-ba3-rank0.pt"}
    run = {"resume": {"resume_from": "ep0-ba3-rank0.pt", "restart": False, "skipped": []}, "resumed_from_step": 3,
           "steps": 8}
    assert gp.resume_verdict(run, killed, 8)["resume_ok"]
    assert not gp.resume_verdict(dict(run, resume={"resume_from": None, "restart": True}, resumed_from_step=0),
                                 killed, 8)["resume_ok"]
    assert not gp.resume_verdict(run, dict(killed, checkpoint_at_kill="ep0-ba6-rank0.pt"), 8)["resume_ok"]
    assert not gp.resume_verdict(run, dict(killed, killed=False), 8)["resume_ok"]


def test_kill_group_kills_the_launcher_and_its_child(tmp_path):
    """Composer's launcher starts the training process as its child: SIGKILL must reach both."""
    pid_file = tmp_path / "child.pid"
    code = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
            f"open({str(pid_file)!r}, 'w').write(str(c.pid)); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    deadline = time.time() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.time() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    assert gp.kill_group(proc)
    assert proc.returncode == -9
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


def test_child_env_keeps_caches_out_of_home(tmp_path):
    env = gp.child_env(tmp_path, dry=True, base={"PYTHONPATH": "/wheels", "HOME": "/home/u"})
    for key in ("XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH", "HF_HOME", "TMPDIR"):
        assert env[key].startswith(str(tmp_path)), key
    assert env["PYTHONPATH"].split(os.pathsep) == [str(REPO / "src"), "/wheels"]
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["HF_HUB_OFFLINE"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in gp.child_env(tmp_path, dry=False, base={})
    assert gp.snakemake_counts("total  12\nFinished jobid: 1\nFinished jobid: 0\n") == {"planned": 12, "finished": 2}


@pytest.mark.slow  # the DAG (12 jobs) and three training processes on the CPU: 2-4 minutes on 2 shared cores
def test_dry_run_passes_both_parts_from_the_runs_files(tmp_path, monkeypatch):
    # as on the GPU machine: no virtualenv on PATH, every subprocess started with this interpreter
    monkeypatch.setenv("PATH", clean_env()["PATH"])
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    out, logs = tmp_path / "gpu_pipeline.json", tmp_path / "logs"
    assert gp.main(["--dry", "--out", str(out), "--logs", str(logs), "--budget-s", "900"]) == 0
    result = json.loads(out.read_text())
    dag, resume = result["dag"], result["resume"]
    assert result["passed"] and dag["passed"] and resume["passed"], json.dumps(result, indent=1)[-4000:]
    assert result["scratch_removed"] and not result["skipped"]
    assert [c["job"] for c in dag["checks"]] == ["build_base", "pretrain_phase1", "pretrain_decay",
                                                 "finetune clm-detour/meddialog"]
    for c in dag["checks"]:
        assert (c["device_type"], c["precision"], c["attention"], c["compiled"]) == ("cpu", "fp32", "sdpa", False)
        assert c["log"]["composer_precision"] == "fp32"  # read from the job's log, not only its record
    assert dag["jobs"]["planned"] == dag["jobs"]["finished"] > 4
    assert [r["model"] for r in dag["table"]][:1] == ["clm-detour"]
    assert 0 < resume["resume_step"] < resume["steps"] and resume["max_rel_diff_after_resume"] <= 1e-5
    assert resume["killed"]["rc"] == -9 and not resume["run_json_after_kill"] and resume["section_equals_dag"]

    # the same checks on the copied files, one of them planted with a wrong device: that job fails
    work = logs / "work"
    assert all(c["passed"] for c in gp.collect_job_checks(work, gp.CPU_EXPECT))
    run_path = work / "results/pretrain/clm-detour/decay/run.json"
    run = json.loads(run_path.read_text())
    run["device"] = {"type": "gpu", "count": 1, "name": "NVIDIA H200"}
    run_path.write_text(json.dumps(run))
    checks = {c["job"]: c for c in gp.collect_job_checks(work, gp.CPU_EXPECT)}
    assert not checks["pretrain_decay"]["device_ok"] and not checks["pretrain_decay"]["passed"]
    assert checks["pretrain_phase1"]["passed"]
    shutil.rmtree(logs)
