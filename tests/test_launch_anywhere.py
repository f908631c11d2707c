"""Every job runs the environment it is in (issue 64): no launch detail in a rule, container jobs that run the
image's Python, the driver checked where the job runs, and an install that verifies its PyTorch build.

The slow tests use the shared finished demo (conftest ``demo_run``): dry runs started four ways plan nothing, and
three jobs run through a stand-in ``apptainer`` (tests/container/apptainer) whose "image" is a separate venv with
its own clmdetour, in a mount namespace where the host venv and the checkout's ``src/`` are hidden.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from helpers import REPO, clean_env, jobs

from clmdetour.runtime import driver
from clmdetour.training.phase_job import PhaseJob, PhaseJobError

DEMO_CONFIGS = [str(REPO / "config/config.yaml"), str(REPO / "config/demo.yaml")]


def _job(**over) -> PhaseJob:
    values = {"variant": "clm-detour", "phase": "decay", "input_model": "results/pretrain/clm detour/phase1/model",
              "corpus_dir": "results/corpus", "output_dir": "results/pretrain/clm-detour/decay",
              "section": '{"lr": 0.0002, "note": "a $HOME; b"}', "allow_repeat": True,
              "previous_run": "results/pretrain/clm-detour/phase1/run.json", "gpus": 4, "nodes": 1, "threads": 16, "cpus_per_node": 64,
              "log": "logs/x.log"}
    values.update(over)
    return PhaseJob(**values)


def test_phase_command_uses_the_jobs_own_interpreter_and_one_argument_per_value():
    cmd = _job().command()
    assert cmd[0] == sys.executable  # the interpreter of the process the job runs, never one fixed at planning
    assert cmd[1:8] == ["-m", "clmdetour.training.launch", "--gpus", "4", "--nodes", "1", "--"]
    assert cmd[cmd.index("--input-model") + 1] == "results/pretrain/clm detour/phase1/model"
    assert cmd[cmd.index("--section") + 1] == '{"lr": 0.0002, "note": "a $HOME; b"}'
    assert cmd[-4:] == ["--allow-repeat", "true", "--previous-run", "results/pretrain/clm-detour/phase1/run.json"]
    assert "--previous-run" not in _job(phase="phase1", previous_run=None, allow_repeat=False).command()


def test_multi_node_phase_starts_one_launcher_per_node_and_needs_srun():
    cmd = _job(nodes=2).command(python="/opt/venv/bin/python")
    assert cmd[:8] == ["srun", "--overlap", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--cpus-per-task=64",
                       "--kill-on-bad-exit=1", "/opt/venv/bin/python"]
    _job(nodes=1).check_can_start(which=lambda name: None)  # one node: no srun needed
    with pytest.raises(PhaseJobError, match=r"pretrain_nodes is 2.*srun is not on PATH.*Several nodes in a "):
        _job(nodes=2).check_can_start(which=lambda name: None)
    _job(nodes=2).check_can_start(which=lambda name: "/usr/bin/srun")


def test_phase_environment_is_offline_with_the_rules_threads():
    env = _job(threads=7).environment({"PATH": "/bin", "HF_HUB_OFFLINE": "0"})
    assert env["PATH"] == "/bin" and env["CLMDETOUR_THREADS"] == "7"
    assert env["HF_HUB_OFFLINE"] == env["HF_DATASETS_OFFLINE"] == env["TRANSFORMERS_OFFLINE"] == "1"


def test_no_rule_holds_an_interpreter_path_or_a_shell_command():
    """The launch details that differ between equivalent launches never reach a rule's code."""
    text = "\n".join(p.read_text() for p in [REPO / "Snakefile", *sorted((REPO / "workflow/rules").glob("*.smk"))])
    assert "sys.executable" not in text and "shell:" not in text and "PYTHON" not in text


def test_driver_advice_inside_an_image_is_a_rebuild():
    refusal, _ = driver.driver_problem((13, 0), (12, 8), "a pretraining job on 4 GPU(s)", image=True)
    assert "rebuild the image with --build-arg TORCH_CUDA=cu128" in refusal and "setup.sh" not in refusal
    refusal, _ = driver.driver_problem((13, 0), (12, 8), "x", image=False)
    assert "CLMDETOUR_TORCH_CUDA=cu128 bash scripts/setup.sh" in refusal
    assert driver.in_image({"APPTAINER_CONTAINER": "/img.sif"}) and driver.in_image({"CLMDETOUR_IMAGE": "1"})
    assert not driver.in_image({"PATH": "/bin"})


def test_planning_leaves_the_driver_check_to_the_jobs_when_a_container_is_set():
    note = driver.container_driver_note("clmdetour.sif")
    assert "clmdetour.sif" in note and "each GPU job" in note
    common = (REPO / "workflow/rules/common.smk").read_text()
    assert 'if config.get("container"):\n        logger.info(container_driver_note(' in common


@pytest.mark.parametrize(("requested", "version", "cuda", "ok"), [
    ("cpu", "2.14.1+cu130", "13.0", False), ("cpu", "2.14.1+cpu", None, True), ("cu128", "2.14.1+cu128", "12.8", True),
    ("cu128", "2.14.1+cu130", "13.0", False), ("cu126", "2.14.1+cpu", None, False), ("", "2.14.1", "13.0", True)])
def test_build_mismatch_compares_the_installed_build_with_the_request(requested, version, cuda, ok):
    line = driver.build_mismatch(requested, version, cuda, "https://download.pytorch.org/whl/" + requested)
    assert (line is None) == ok
    if not ok:
        assert f"CLMDETOUR_TORCH_CUDA={requested}" in line and version in line and "\n" not in line


def test_verify_build_command_refuses_the_installed_torch_under_another_request():
    import torch

    other = "cpu" if torch.version.cuda else "cu130"
    r = subprocess.run([sys.executable, "-m", "clmdetour.runtime.driver", "verify-build", other, "https://idx/" + other],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert f"CLMDETOUR_TORCH_CUDA={other}" in r.stderr and torch.__version__ in r.stderr
    ok = subprocess.run([sys.executable, "-m", "clmdetour.runtime.driver", "verify-build", "", "https://pypi"],
                        capture_output=True, text=True, timeout=120, check=False)
    assert ok.returncode == 0, ok.stderr
    setup = (REPO / "scripts/setup.sh").read_text()
    assert '-m clmdetour.runtime.driver verify-build "$BUILD" "$INDEX"' in setup


def test_setup_stops_in_one_line_when_the_pytorch_index_is_unreachable(tmp_path):
    env = {**clean_env(), "CLMDETOUR_TORCH_CUDA": "cpu", "CLMDETOUR_TORCH_INDEX": "http://127.0.0.1:9/whl"}
    r = subprocess.run(["bash", str(REPO / "scripts/setup.sh"), str(tmp_path / "venv")], env=env,
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "http://127.0.0.1:9/whl/cpu" in r.stderr and "nothing installed" in r.stderr
    assert not (tmp_path / "venv").exists()


# --- the finished demo, launched four ways, and through a container ---------------------------------------------


def _dry_run(cmd: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([*cmd, "-n", "all", "--cores", "2", "--snakefile", str(cwd / "Snakefile") if
                           (cwd / "Snakefile").exists() else str(REPO / "Snakefile"), "--directory", str(cwd),
                           "--configfiles", *DEMO_CONFIGS], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.mark.slow
def test_the_finished_demo_plans_nothing_however_snakemake_is_started(demo_run, tmp_path):
    venv_bin = Path(sys.executable).parent
    base = clean_env()
    activated = {**base, "PATH": f"{venv_bin}:{base['PATH']}", "VIRTUAL_ENV": str(venv_bin.parent)}
    launches = {
        "venv snakemake": ([str(venv_bin / "snakemake")], base),
        "python -m snakemake": ([str(venv_bin / "python"), "-m", "snakemake"], base),
        "activated venv": (["snakemake"], activated),
    }
    for name, (cmd, env) in launches.items():
        r = _dry_run(cmd, demo_run, env)
        assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr, (name, (r.stdout + r.stderr)[-3000:])
    # a moved checkout: the same files under another folder, its own Snakefile (and interpreter path)
    moved = tmp_path / "moved checkout"
    moved.mkdir()
    for name in ("Snakefile", "workflow", "config", "profiles", "src"):
        shutil.copytree(REPO / name, moved / name, symlinks=True) if (REPO / name).is_dir() else \
            shutil.copy2(REPO / name, moved / name)
    r = subprocess.run([str(venv_bin / "python"), "-m", "snakemake", "-n", "all", "--cores", "2", "--snakefile",
                        str(moved / "Snakefile"), "--directory", str(demo_run), "--configfiles",
                        str(moved / "config/config.yaml"), str(moved / "config/demo.yaml")],
                       cwd=demo_run, env=base, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]


def _image(root: Path) -> Path:
    """A stand-in image: a separate venv (the base interpreter) whose clmdetour is its own copy of the checkout's
    src/ and workflow/ (as the Containerfile's /opt/clmdetour), and whose third-party packages are the host venv's,
    bound at IMAGE/packages by the stand-in (tests/container/apptainer)."""
    image = root / "image"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(image)], check=True, timeout=120)
    checkout = image / "opt-clmdetour"
    shutil.copytree(REPO / "src", checkout / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "workflow", checkout / "workflow", ignore=shutil.ignore_patterns("__pycache__"))
    (image / "packages").mkdir()
    site = Path(sysconfig.get_path("purelib", vars={"base": str(image), "platbase": str(image)}))
    (site / "standin-image.pth").write_text(f"{checkout / 'src'}\n{image / 'packages'}\n")
    return image


@pytest.mark.slow
def test_container_jobs_run_the_images_python_and_clmdetour(demo_run, tmp_path):
    """One pretraining job, one fine-tune and one script: rule of the finished demo, rerun with `container` set,
    through the stand-in apptainer: the host's venv and src/ are hidden from the jobs, so each job succeeds only
    on the image's interpreter and the image's clmdetour."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("the stand-in apptainer needs root and unshare (a private mount namespace)")
    work = tmp_path / "work"
    shutil.copytree(demo_run, work, symlinks=True, ignore=shutil.ignore_patterns("*.last-good", "locks"))
    image = _image(tmp_path)
    log = tmp_path / "standin.log"
    host_site = sysconfig.get_path("purelib")
    env = {**clean_env(), "STANDIN_LOG": str(log), "STANDIN_PACKAGES": host_site,
           "STANDIN_HIDE": f"{sys.prefix}:{REPO / 'src'}"}
    env["PATH"] = f"{REPO / 'tests/container'}:{env['PATH']}"
    # a decay whose model the table does not read (so nothing else is replanned), one fine-tune, the table
    targets = ["results/pretrain/clm-freeze-mid/decay/run.json", "results/eval/clm-detour/emea/seed0.json",
               "results/eval_table.tsv"]
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(work),
           "--cores", "2", "--configfiles", *DEMO_CONFIGS, "--software-deployment-method", "apptainer",
           "--config", f"container={image}", "--rerun-triggers", "mtime", "--forcerun", *targets, "--", *targets]
    r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-5000:]
    ran = jobs(out)
    assert {"pretrain_decay", "finetune", "eval_table"} <= set(ran), ran
    lines = log.read_text().splitlines()
    assert len(lines) >= 3 and all(line.startswith(f"{image}\t") for line in lines), lines
    assert all(str(sys.prefix) not in line for line in lines), lines  # no host interpreter in any job's command
    phase_log = (work / "logs/pretrain_decay/clm-freeze-mid.log").read_text()
    assert f"launch: {image}/bin/python" in phase_log, phase_log[:2000]
