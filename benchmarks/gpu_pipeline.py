"""A tiny DAG on one GPU, end to end, and a ``kill -9`` resume check of one phase (issue "gpu-proven", item 4).

Two parts, each run in subprocesses in a fresh scratch folder (``tempfile.mkdtemp``; never the
repository's ``results/``), removed at the end:

1. **dag**: ``python -m snakemake --snakefile <repo>/Snakefile --directory <scratch>/work ...
   results/eval_table.tsv`` on ``config/config.yaml config/demo.yaml config/gpu-smoke.yaml``: the demo's
   base build, phase 1 (CLM) and decay (MLM) of clm-detour, one fine-tune (clm-detour x meddialog, one
   seed, one learning rate) and the evaluation table. Then every training job's run record
   (``run.json``, ``seed{N}.json``) and log are read and checked: the device (the GPU visible, its
   name), the precision (bf16 on the GPU), the attention back-end (FlexAttention or flash-attention-2
   for pretraining on the GPU; whatever fine-tuning chose, with its recorded reason) and whether the
   encoder was compiled where planned (pretraining on the GPU; fine-tuning never compiles).
2. **resume**: clm-detour's phase 1 run as the ``pretrain_phase1`` rule runs it
   (``python -m clmdetour.training.launch --gpus 1 -- -m clmdetour.training.cli ...`` with the section
   the config files resolve to), on the DAG's base model and corpus, longer and with frequent
   checkpoints: once uninterrupted (the reference loss curve of its ``train_log.jsonl``), then in a
   fresh folder started, killed with SIGKILL as soon as its first checkpoint is complete
   (``latest-rank0.pt`` points at it), and run again: the rerun must resume from the newest complete
   checkpoint (``run.json``'s ``resume`` and ``resumed_from_step``) and its per-step losses must equal
   the reference's (CPU fp32: relative 1e-5; GPU bf16: absolute 2e-2, see :data:`GPU_LOSS_TOL`).

``--dry`` runs both on the CPU at smaller sizes (an overlay written to the scratch folder: sequence
64, batch 8) with CPU expectations (fp32, sdpa, not compiled); the GPU is hidden from it
(``CUDA_VISIBLE_DEVICES=``). The result JSON (``--out``, written atomically) has one entry per part with
``passed``, its wall time (s) and its checks; a part not started because ``--budget-s`` was spent is
listed in ``skipped``. The exit status is 0 whether or not the parts passed (a failure is data) and
non-zero only when this script itself crashes.

Usage::

    python benchmarks/gpu_pipeline.py --out gpu_pipeline.json             # one GPU (estimated 4-5 min)
    python benchmarks/gpu_pipeline.py --dry --out gpu_pipeline-dry.json   # the CPU rehearsal (2 shared cores: 2-4 min)

Caches that would go to ``$HOME`` (Snakemake's source cache, Triton, TorchInductor, CUDA's JIT cache,
Hugging Face) are pointed into the scratch folder; the Hub is offline (``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))

from clmdetour.modeling.attention import AUTO_PREFERENCE, BACKENDS, REFERENCE

CONFIG_FILES = ["config/config.yaml", "config/demo.yaml", "config/gpu-smoke.yaml"]
TARGET = "results/eval_table.tsv"
VARIANT = "clm-detour"

#: The --dry overlay (merged after CONFIG_FILES): the same DAG at CPU sizes. Tokens; a step is 8 x 64:
#: base build 8 steps, phase 1 8 steps (one pass), decay 4 steps.
DRY_OVERLAY = {
    "base_model": {"build": {"pretrain_tokens": 4096, "warmup_tokens": 512}},
    "demo": {"corpus_documents": 300, "base_documents": 150, "task_train_examples": 48, "task_eval_examples": 24},
    "corpus": {"seq_len": 64, "train_tokens": 4096},
    "pretraining": {"global_batch_sequences": 8, "micro_batch_sequences": 8, "checkpoint_interval": "4ba",
                    "phase1": {"tokens": 4096, "warmup_tokens": 1024}, "decay": {"tokens": 2048}},
    "tasks": {"meddialog": {"max_length": 64}},
}

#: Part 2's length (optimizer steps) and checkpoint interval (batches), per mode. On the GPU a step of the
#: tiny model takes milliseconds: 60 steps leave the poller (10 ms) far more than enough time to kill the
#: run between its first checkpoint and its end.
RESUME_STEPS = {"gpu": 60, "cpu": 8}
RESUME_INTERVAL = {"gpu": 10, "cpu": 3}
#: Loss tolerance of the resumed run against the uninterrupted one. CPU fp32: the same arithmetic in the
#: same order, so relative 1e-5 (measured: 0.0). GPU bf16 autocast: CUDA kernels that accumulate with
#: atomics (e.g. the embedding backward) are not bitwise reproducible from run to run, and bf16 keeps
#: about 3 significant digits, so two runs may drift apart over tens of steps; 2e-2 nats absolute is the
#: bound the attention self-check already accepts between two back-ends (PARITY_TOLERANCE_NATS in
#: clmdetour.modeling.attention). The result also reports the difference over the steps the killed run
#: trained before its checkpoint (the same steps, no resume involved): the run-to-run noise floor.
CPU_LOSS_RTOL = 1e-5
GPU_LOSS_TOL = 2e-2
POLL_S = 0.01
DEFAULT_BUDGET_S = 330.0
GRACE_S = 60.0


@dataclass(frozen=True)
class Expect:
    """What every training job's records must say in one mode (``gpu`` or ``cpu``).

    Attributes:
        mode: ``gpu`` or ``cpu``.
        precision: the Composer precision a job must record (``amp_bf16`` on the GPU, ``fp32`` on the CPU).
        pretrain_attention: attention back-ends a pretraining job may end on (no fallback to sdpa on the GPU).
        pretrain_compiled: whether a pretraining job's encoder must be compiled (``compile: auto``).
    """

    mode: str
    precision: str
    pretrain_attention: tuple[str, ...]
    pretrain_compiled: bool


#: On the GPU a phase ends on a GPU back-end ``auto`` prefers (flash_attention_2 or flex_attention), on the CPU on sdpa.
GPU_EXPECT = Expect("gpu", "amp_bf16", tuple(n for n in AUTO_PREFERENCE if BACKENDS[n].needs_gpu), True)
CPU_EXPECT = Expect("cpu", "fp32", (REFERENCE,), False)


@dataclass
class Context:
    """One run of this script: interpreter, mode, scratch folder, child environment and time budget (s)."""

    python: str
    dry: bool
    scratch: Path
    env: dict
    deadline: float
    cores: int
    config_files: list[str] = field(default_factory=list)

    @property
    def work(self) -> Path:
        """The Snakemake working directory (``results/``, ``logs/``, ``checkpoints/`` of the DAG)."""
        return self.scratch / "work"

    @property
    def expect(self) -> Expect:
        """The mode's expectations."""
        return CPU_EXPECT if self.dry else GPU_EXPECT

    def remaining_s(self) -> float:
        """Seconds left before the budget's deadline (negative once spent)."""
        return self.deadline - time.time()

    def timeout_s(self) -> float:
        """Time limit (s) of a subprocess started now: what is left of the budget plus :data:`GRACE_S`, so a
        part started just before the deadline still gets that long and the script ends by about the
        budget plus two grace periods."""
        return max(0.0, self.remaining_s()) + GRACE_S


def child_env(scratch: Path, dry: bool, base: dict | None = None) -> dict:
    """The environment of every subprocess: offline, ``src/`` importable, and each cache that defaults to
    ``$HOME`` (Snakemake, Triton, TorchInductor, CUDA JIT, Hugging Face, torch hub) under ``scratch``.
    With ``dry`` the GPU is hidden (``CUDA_VISIBLE_DEVICES=``). With ``CLMDETOUR_COMPILE_CACHE`` set (``gpu.sh``
    sets it), TorchInductor's and Triton's caches are that shared folder's: the DAG's jobs and the resume runs
    compile the same graphs, which the second process loads instead of compiling."""
    env = dict(os.environ if base is None else base)
    cache = scratch / "cache"
    paths = {"XDG_CACHE_HOME": cache / "xdg", "TRITON_CACHE_DIR": cache / "triton", "TRITON_HOME": cache / "triton-home",
             "TORCHINDUCTOR_CACHE_DIR": cache / "inductor", "CUDA_CACHE_PATH": cache / "cuda", "HF_HOME": cache / "hf",
             "TORCH_HOME": cache / "torch", "MPLCONFIGDIR": cache / "mpl", "TMPDIR": scratch / "tmp"}
    shared = env.get("CLMDETOUR_COMPILE_CACHE")
    if shared:
        paths.update(TRITON_CACHE_DIR=Path(shared) / "triton", TORCHINDUCTOR_CACHE_DIR=Path(shared) / "inductor")
    for key, path in paths.items():
        path.mkdir(parents=True, exist_ok=True)
        env[key] = str(path)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               HF_HUB_DISABLE_PROGRESS_BARS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, [env.get("PYTHONPATH")])])
    if dry:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL, wait_s: float = 10.0) -> bool:
    """Send ``sig`` to the process group of ``proc`` (started by us with ``start_new_session=True``, so the
    group id is its pid: Composer's launcher and its training child die together) and reap it.

    Returns:
        True when no process of the group is left after ``wait_s`` seconds.
    """
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        return False
    end = time.time() + wait_s
    while time.time() < end:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


class Started:
    """A subprocess started by :func:`start_logged`, its stdout and stderr going to a log file."""

    def __init__(self, cmd: list[str], cwd: Path, env: dict, log_path: Path):
        self.t0 = time.time()
        self.log = open(log_path, "w")  # noqa: SIM115 (the child writes to it until wait() closes it)
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def wait(self, timeout_s: float) -> dict:
        """Wait at most ``timeout_s`` seconds, then kill the group (:func:`kill_group`).

        Returns:
            ``{"rc", "wall_s", "timed_out"}`` (``rc`` None when it was killed for the timeout).
        """
        try:
            rc, timed_out = self.proc.wait(timeout=max(1.0, timeout_s)), False
        except subprocess.TimeoutExpired:
            kill_group(self.proc)
            rc, timed_out = None, True
        finally:
            self.log.close()
        return {"rc": rc, "wall_s": round(time.time() - self.t0, 2), "timed_out": timed_out}


def run_logged(cmd: list[str], cwd: Path, env: dict, log_path: Path, timeout_s: float) -> dict:
    """Run ``cmd`` in its own session, stdout and stderr to ``log_path``; kill its group after ``timeout_s`` s.

    Returns:
        ``{"rc", "wall_s", "timed_out"}`` (``rc`` None when it was killed for the timeout).
    """
    return Started(cmd, cwd, env, log_path).wait(timeout_s)


def tail(path: Path, chars: int = 3000) -> str:
    """The last ``chars`` characters of a text file ('' when it does not exist)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except FileNotFoundError:
        return ""


def probe_device(python: str, env: dict) -> dict:
    """What the child interpreter sees: torch version, CUDA availability and the device name.

    Raises:
        RuntimeError: the interpreter cannot import torch (the message holds its stderr).
    """
    code = ("import json, torch; ok = torch.cuda.is_available(); print(json.dumps({'torch': torch.__version__, "
            "'cuda_available': ok, 'device_count': torch.cuda.device_count() if ok else 0, "
            "'device_name': torch.cuda.get_device_name() if ok else None}))")
    r = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{python} cannot import torch: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------- checks


def log_facts(text: str) -> dict:
    """Facts a training job's log states, independent of its run record.

    Returns:
        ``{"launch": the ``launch:`` line's command or None, "launch_gpu": whether it went through
        Composer's launcher on GPUs (``composer.cli.launcher``) / False when it fell back to the CPU /
        None without a launch line, "composer_precision": the last ``Using precision Precision.X``
        (lower case) or None, "attention_line": the last ``attention: ...`` line or None}``.
    """
    launch = re.findall(r"^launch: (.*)$", text, re.MULTILINE)
    launch_cmd = next((line for line in reversed(launch) if not line.startswith(("1 GPU", "error"))), None)
    launch_gpu = None
    if launch:
        launch_gpu = bool(launch_cmd and "composer.cli.launcher" in launch_cmd)
    prec = re.findall(r"Using precision Precision\.(\w+)", text)
    attn = re.findall(r"attention_check: (attention: .*)$", text, re.MULTILINE)
    return {"launch": launch_cmd, "launch_gpu": launch_gpu, "composer_precision": prec[-1].lower() if prec else None,
            "attention_line": attn[-1] if attn else None}


def _verdict(checks: dict) -> bool:
    return all(v is True for k, v in checks.items() if k.endswith("_ok"))


def phase_checks(job: str, run: dict, log_text: str, expect: Expect) -> dict:
    """Checks of one pretraining job (``build_base``, ``pretrain_phase1``, ``pretrain_decay``) from its
    ``run.json`` (``run``) and its log text.

    Returns:
        The job's entry: what the files say (device, precision, attention, compile) and one ``*_ok``
        boolean per expectation of ``expect``; ``passed`` is their conjunction.
    """
    device, attn, comp = run.get("device") or {}, run.get("attention") or {}, run.get("compile") or {}
    facts = log_facts(log_text)
    on_gpu = expect.mode == "gpu"
    entry = {"job": job, "record": "run.json", "device_type": device.get("type"), "device_name": device.get("name"),
             "precision": run.get("precision"), "attention": attn.get("implementation"),
             "attention_candidate": attn.get("candidate"), "attention_reason": attn.get("reason"),
             "compiled": comp.get("enabled"), "compile_requested": comp.get("requested"),
             "first_step_s": comp.get("first_step_s"), "steps": run.get("steps"), "log": facts}
    entry["device_ok"] = device.get("type") == expect.mode and (not on_gpu or bool(device.get("name")))
    entry["precision_ok"] = run.get("precision") == expect.precision and facts["composer_precision"] in (
        None, expect.precision)
    entry["attention_ok"] = (attn.get("implementation") in expect.pretrain_attention
                             and attn.get("implementation") == attn.get("candidate"))
    entry["compile_ok"] = comp.get("enabled") is expect.pretrain_compiled
    if facts["launch_gpu"] is not None:  # the phases go through clmdetour.training.launch (build_base does not)
        entry["launch_ok"] = facts["launch_gpu"] is on_gpu
    entry["passed"] = _verdict(entry)
    return entry


def finetune_checks(job: str, record: dict, log_text: str, expect: Expect) -> dict:
    """Checks of one fine-tune seed record (``results/eval/{model}/{task}/seed{N}.json``) and its job's log.

    The record keeps the device type only (``gpu``/``cpu``, no name); fine-tuning never compiles
    (``compiled`` is False by construction) and its attention back-end is recorded with its reason,
    checked only to be named (on the GPU FlexAttention is tried first and may fall back to sdpa).

    Returns:
        The job's entry, as :func:`phase_checks`.
    """
    hyper, attn = record.get("hyperparameters") or {}, record.get("attention") or {}
    facts = log_facts(log_text)
    entry = {"job": job, "record": f"seed{record.get('seed')}.json", "device_type": record.get("device"),
             "device_name": None, "precision": hyper.get("precision"), "attention": attn.get("implementation"),
             "attention_candidate": attn.get("candidate"), "attention_reason": attn.get("reason"),
             "compiled": False, "status": record.get("status"), "log": facts}
    entry["status_ok"] = record.get("status") == "ok"
    entry["device_ok"] = record.get("device") == expect.mode
    entry["precision_ok"] = hyper.get("precision") == expect.precision and facts["composer_precision"] in (
        None, expect.precision)
    entry["attention_ok"] = bool(attn.get("implementation")) and bool(attn.get("reason")) and (
        expect.mode == "gpu" or attn.get("implementation") == REFERENCE)
    entry["passed"] = _verdict(entry)
    return entry


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def collect_job_checks(work: Path, expect: Expect) -> list[dict]:
    """Every training job's checks, read from the DAG's files under ``work`` (Snakemake's working directory).

    A job whose record is missing gets ``passed: False`` and ``error``.
    """
    jobs = [("build_base", work / "results/base/run.json", work / "logs/build_base/build_base.log"),
            ("pretrain_phase1", work / f"results/pretrain/{VARIANT}/phase1/run.json",
             work / f"logs/pretrain_phase1/{VARIANT}.log"),
            ("pretrain_decay", work / f"results/pretrain/{VARIANT}/decay/run.json",
             work / f"logs/pretrain_decay/{VARIANT}.log")]
    out = []
    for job, record, log in jobs:
        if not record.exists():
            out.append({"job": job, "passed": False, "error": f"no record {record.relative_to(work)}"})
            continue
        out.append(phase_checks(job, json.loads(record.read_text()), _read(log), expect))
    seeds = sorted((work / "results/eval").glob("*/*/seed*.json"))
    if not seeds:
        out.append({"job": "finetune", "passed": False, "error": "no seed record under results/eval"})
    for seed in seeds:
        model, task = seed.parent.parent.name, seed.parent.name
        out.append(finetune_checks(f"finetune {model}/{task}", json.loads(seed.read_text()),
                                   _read(work / f"logs/finetune/{model}/{task}.log"), expect))
    return out


def read_table(path: Path) -> list[dict]:
    """The rows of a TSV table as dicts (empty cells None; numbers as floats where they parse)."""
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            parsed = {}
            for k, v in row.items():
                try:
                    parsed[k] = float(v) if v not in ("", None) and k != "model" else (v or None)
                except ValueError:
                    parsed[k] = v
            rows.append(parsed)
    return rows


def snakemake_counts(log_text: str) -> dict:
    """Jobs planned (``total`` of the job stats) and finished (``Finished jobid`` lines) in a Snakemake log."""
    total = re.search(r"^total\s+(\d+)\s*$", log_text, re.MULTILINE)
    return {"planned": int(total.group(1)) if total else None,
            "finished": len(re.findall(r"Finished jobid", log_text))}


# ---------------------------------------------------------------------------------------------- part 1


def snakemake_command(ctx: Context, targets: list[str]) -> list[str]:
    """The Snakemake command line of the DAG (``python -m snakemake``, the repository's Snakefile, the
    scratch working directory, one GPU as a resource, the greedy scheduler (the GPU kit carries pulp without the
    ILP scheduler's CBC binaries: benchmarks/kit.py SLIM), the config files, then ``targets`` after ``--``)."""
    return [ctx.python, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(ctx.work),
            "--cores", str(ctx.cores), "--resources", "gpu=1", "--rerun-incomplete", "--show-failed-logs",
            "--scheduler", "greedy",
            "--configfiles", *ctx.config_files, "--", *targets]


def part_dag(ctx: Context) -> dict:
    """Part 1: the tiny DAG to ``results/eval_table.tsv``, then the checks of every training job.

    Returns:
        ``{"passed", "wall_s", "rc", "jobs": {"planned", "finished"}, "checks": [...], "table": [rows],
        "table_ok"}`` (plus ``snakemake_log_tail`` when it failed).
    """
    ctx.work.mkdir(parents=True, exist_ok=True)
    log = ctx.scratch / "snakemake.log"
    run = run_logged(snakemake_command(ctx, [TARGET]), ctx.work, ctx.env, log, ctx.timeout_s())
    text = _read(log)
    result = {"command": "python -m snakemake ... " + TARGET, "config_files": [_short(f) for f in ctx.config_files],
              **run, "jobs": snakemake_counts(text), "checks": collect_job_checks(ctx.work, ctx.expect)}
    table = ctx.work / TARGET
    result["table"] = read_table(table) if table.exists() else []
    models = [r.get("model") for r in result["table"]]
    result["table_ok"] = VARIANT in models and all(
        isinstance(r.get("meddialog_mean"), float) and r.get("meddialog_n") == 1.0
        for r in result["table"] if r.get("model") == VARIANT)
    result["passed"] = bool(run["rc"] == 0 and result["table_ok"] and result["checks"]
                            and all(c["passed"] for c in result["checks"])
                            and result["jobs"]["planned"] == result["jobs"]["finished"])
    if not result["passed"]:
        result["snakemake_log_tail"] = tail(log)
    return result


def _short(path: str) -> str:
    p = Path(path)
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else p.name


# ---------------------------------------------------------------------------------------------- part 2


def resolved_config(files: list[str]) -> dict:
    """The config ``files`` merge to, validated as the workflow validates it (defaults filled).

    Raises:
        clmdetour.config.ConfigError: a file or the merge is invalid.
    """
    from clmdetour.config import deep_merge, load_yaml, validate_config

    merged: dict = {}
    for path in files:
        merged = deep_merge(merged, load_yaml(path))
    return validate_config(merged)


def resume_section(config: dict, steps: int, interval: int, checkpoint_root: Path) -> dict:
    """clm-detour's phase-1 section as the rule passes it (:func:`clmdetour.config.resolve_phase`), made
    ``steps`` optimizer steps long (tokens), with a checkpoint every ``interval`` batches under
    ``checkpoint_root`` and a log line every step."""
    from clmdetour.config import resolve_phase

    section = resolve_phase(config, VARIANT, "phase1")
    section.update(tokens=steps * section["global_batch_sequences"] * section["seq_len"],
                   checkpoint_interval=f"{interval}ba", checkpoint_root=str(checkpoint_root), log_interval_steps=1)
    return section


def phase_command(ctx: Context, config: dict, section: dict, out: Path) -> tuple[list[str], dict]:
    """The ``pretrain_phase1`` rule's command (``clmdetour.training.launch`` -> ``clmdetour.training.cli``)
    for ``section``, writing to ``out``, and its environment (``CLMDETOUR_THREADS`` as the rule sets it)."""
    from clmdetour.pipeline.paths import BUILT_BASE_DIR, CORPUS_DIR

    cluster = config["cluster"]
    gpus = int(cluster["pretrain_gpus"])
    threads = gpus * cluster["cpus_per_gpu"] if gpus else cluster["cpu_threads"]
    cmd = [ctx.python, "-m", "clmdetour.training.launch", "--gpus", str(gpus), "--nodes", "1", "--",
           "-m", "clmdetour.training.cli", "--variant", VARIANT, "--input-model", BUILT_BASE_DIR,
           "--corpus", CORPUS_DIR, "--output-dir", str(out), "--section", json.dumps(section, sort_keys=True),
           "--allow-repeat", "true" if config["corpus"]["allow_repeat"] else "false"]
    return cmd, dict(ctx.env, CLMDETOUR_THREADS=str(threads))


def ensure_phase_inputs(ctx: Context) -> dict | None:
    """The base model and the corpus part 2 trains on: part 1's, or built now (Snakemake) when part 1
    did not get that far. Returns None when they exist, else the build's ``run_logged`` result."""
    from clmdetour.pipeline.paths import BUILT_BASE_DIR, CORPUS_MANIFEST

    if (ctx.work / BUILT_BASE_DIR).exists() and (ctx.work / CORPUS_MANIFEST).exists():
        return None
    ctx.work.mkdir(parents=True, exist_ok=True)
    return run_logged(snakemake_command(ctx, [BUILT_BASE_DIR, CORPUS_MANIFEST]), ctx.work, ctx.env,
                      ctx.scratch / "snakemake-inputs.log", ctx.timeout_s())


def checkpoint_step(name: str) -> int | None:
    """The batch of a Composer checkpoint file name (``ep0-ba10-rank0.pt`` -> 10), or None."""
    m = re.search(r"-ba(\d+)-", name)
    return int(m.group(1)) if m else None


def latest_checkpoint(ckpt_root: Path) -> Path | None:
    """The complete checkpoint ``latest-rank0.pt`` points at under ``ckpt_root`` (Composer links it only
    once the file is written), or None."""
    for link in ckpt_root.glob(f"{VARIANT}/phase1/*/latest-rank0.pt"):
        if link.is_symlink():
            return link.parent / os.readlink(link)
    return None


def kill_after_first_checkpoint(cmd: list[str], cwd: Path, env: dict, ckpt_root: Path, log_path: Path,
                                timeout_s: float) -> dict:
    """Start ``cmd``, poll ``ckpt_root`` every :data:`POLL_S` s until its first checkpoint is complete, then
    SIGKILL its process group (:func:`kill_group`).

    Returns:
        ``{"killed", "killed_at_s", "first_checkpoint_seen", "checkpoint_at_kill" (file name of the newest
        complete checkpoint once the group is dead), "finished_first" (it ended before any checkpoint),
        "rc", "group_dead"}``.
    """
    run = Started(cmd, cwd, env, log_path)
    seen = None
    try:
        while time.time() - run.t0 < timeout_s and run.proc.poll() is None:
            seen = latest_checkpoint(ckpt_root)
            if seen is not None:
                break
            time.sleep(POLL_S)
        finished_first = run.proc.poll() is not None
    finally:
        group_dead = kill_group(run.proc)  # SIGKILL: the kill -9 under test (or the clean-up after an error)
        run.log.close()
    ckpt = latest_checkpoint(ckpt_root)
    return {"killed": seen is not None and not finished_first, "killed_at_s": round(time.time() - run.t0, 2),
            "first_checkpoint_seen": seen.name if seen else None, "checkpoint_at_kill": ckpt.name if ckpt else None,
            "finished_first": finished_first, "rc": run.proc.returncode, "group_dead": group_dead}


def read_losses(train_log: Path) -> dict[int, float]:
    """Step -> training loss (nats per token) of a phase's ``train_log.jsonl`` (the last line of a step wins)."""
    losses = {}
    for line in train_log.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            if row.get("loss") is not None:
                losses[int(row["step"])] = float(row["loss"])
    return losses


def compare_losses(reference: dict[int, float], resumed: dict[int, float], resume_step: int, gpu: bool) -> dict:
    """Per-step losses of the resumed run against the uninterrupted one.

    Args:
        reference, resumed: step -> loss (nats per token).
        resume_step: the step the rerun resumed from; later steps were trained by the rerun.
        gpu: tolerance :data:`GPU_LOSS_TOL` absolute (bf16), else :data:`CPU_LOSS_RTOL` relative (fp32).

    Returns:
        ``{"steps_compared_after_resume", "max_abs_diff_after_resume", "max_rel_diff_after_resume",
        "max_abs_diff_before_kill" (the killed run's own steps: the run-to-run noise), "tolerance",
        "missing_steps", "losses_ok"}``.
    """
    after = [s for s in sorted(reference) if s > resume_step]
    before = [s for s in sorted(reference) if s <= resume_step and s in resumed]
    missing = [s for s in sorted(reference) if s not in resumed]
    abs_after = [abs(resumed[s] - reference[s]) for s in after if s in resumed]
    rel_after = [d / max(abs(reference[s]), 1e-12) for d, s in zip(abs_after, [s for s in after if s in resumed])]
    abs_before = [abs(resumed[s] - reference[s]) for s in before]
    max_abs, max_rel = max(abs_after, default=None), max(rel_after, default=None)
    ok = bool(abs_after) and not missing and (max_abs <= GPU_LOSS_TOL if gpu else max_rel <= CPU_LOSS_RTOL)
    return {"steps_compared_after_resume": len(abs_after), "max_abs_diff_after_resume": max_abs,
            "max_rel_diff_after_resume": max_rel, "max_abs_diff_before_kill": max(abs_before, default=None),
            "tolerance": ({"abs": GPU_LOSS_TOL} if gpu else {"rel": CPU_LOSS_RTOL}), "missing_steps": missing,
            "losses_ok": ok}


def resume_verdict(run: dict, killed: dict, steps: int) -> dict:
    """What the rerun's ``run.json`` says about its resume, against the checkpoint left by the kill.

    Returns:
        ``{"resume" (run.json's field), "resumed_from_step", "checkpoint_step_at_kill", "steps",
        "resume_ok"}``: ok when the run resumed (``resume.resume_from`` names a file, no restart) from the
        newest checkpoint complete at the kill, strictly inside the run, and trained to ``steps``.
    """
    resume = run.get("resume") or {}
    at_kill = checkpoint_step(killed.get("checkpoint_at_kill") or "")
    named = checkpoint_step(resume.get("resume_from") or "")
    ok = (killed.get("killed") is True and resume.get("restart") is False and at_kill is not None
          and named == at_kill == run.get("resumed_from_step") and 0 < at_kill < steps and run.get("steps") == steps)
    return {"resume": resume, "resumed_from_step": run.get("resumed_from_step"), "checkpoint_step_at_kill": at_kill,
            "steps": run.get("steps"), "resume_ok": ok}


def part_resume(ctx: Context) -> dict:
    """Part 2: clm-detour's phase 1 uninterrupted, then killed with SIGKILL after its first checkpoint and
    rerun; the rerun must resume from that checkpoint and reproduce the reference losses.

    Returns:
        ``{"passed", "wall_s", "steps", "resume_step", "max_abs_diff", ...}`` (the logs' tails when it failed).
    """
    t0, mode = time.time(), ctx.expect.mode
    root = ctx.scratch / "resume"
    root.mkdir(parents=True, exist_ok=True)
    result: dict = {"inputs_built": ensure_phase_inputs(ctx)}
    config = resolved_config(ctx.config_files)
    steps, interval = RESUME_STEPS[mode], RESUME_INTERVAL[mode]
    dag_run = ctx.work / f"results/pretrain/{VARIANT}/phase1/run.json"
    if dag_run.exists():  # the section resolved here is the one the DAG's rule passed
        from clmdetour.config import resolve_phase

        result["section_equals_dag"] = json.loads(dag_run.read_text())["section"] == resolve_phase(
            config, VARIANT, "phase1")
    ref_cmd, env = phase_command(ctx, config, resume_section(config, steps, interval, root / "ref-ckpt"), root / "ref")
    reference = Started(ref_cmd, ctx.work, env, root / "ref.log")  # beside the killed run: they share nothing
    kill_cmd, env = phase_command(ctx, config, resume_section(config, steps, interval, root / "ckpt"), root / "run")
    try:
        result["killed"] = kill_after_first_checkpoint(kill_cmd, ctx.work, env, root / "ckpt", root / "killed.log",
                                                       ctx.timeout_s())
    finally:
        result["reference"] = reference.wait(ctx.timeout_s())
    result["run_json_after_kill"] = (root / "run/run.json").exists()
    result["rerun"] = run_logged(kill_cmd, ctx.work, env, root / "rerun.log", ctx.timeout_s())
    result.update(steps=steps, checkpoint_interval=f"{interval}ba", resume_step=None, max_abs_diff=None)
    if result["reference"]["rc"] == 0 and result["rerun"]["rc"] == 0:
        run = json.loads((root / "run/run.json").read_text())
        verdict = resume_verdict(run, result["killed"], steps)
        losses = compare_losses(read_losses(root / "ref/train_log.jsonl"), read_losses(root / "run/train_log.jsonl"),
                                verdict["resumed_from_step"] or 0, gpu=mode == "gpu")
        result.update(verdict, **losses, resume_step=verdict["resumed_from_step"],
                      max_abs_diff=losses["max_abs_diff_after_resume"],
                      device=run.get("device"), precision=run.get("precision"),
                      attention=(run.get("attention") or {}).get("implementation"),
                      compiled=(run.get("compile") or {}).get("enabled"))
    result["passed"] = bool(result.get("resume_ok") and result.get("losses_ok") and not result["run_json_after_kill"]
                            and result["killed"]["group_dead"] and result.get("section_equals_dag", True))
    if not result["passed"]:
        result["log_tails"] = {n: tail(root / f"{n}.log", 2000) for n in ("ref", "killed", "rerun")}
    result["wall_s"] = round(time.time() - t0, 2)
    return result


# ---------------------------------------------------------------------------------------------- main


def home_writes(home: Path, since: float, skip: Path, limit: int = 20, max_entries: int = 200_000) -> list[str]:
    """Files under ``home`` modified after ``since`` (``time.time()``), ``skip`` (this scratch) left out;
    at most ``limit`` paths, after looking at ``max_entries`` entries. Other users of the machine may
    write there too: this is a report, not a check."""
    found, seen = [], 0
    for dirpath, dirnames, filenames in os.walk(home):
        dirnames[:] = [d for d in dirnames if Path(dirpath, d) != skip and Path(dirpath, d) != REPO]
        for name in filenames:
            seen += 1
            p = Path(dirpath, name)
            try:
                if p.lstat().st_mtime > since:
                    found.append(str(p))
            except OSError:
                continue
            if len(found) >= limit or seen >= max_entries:
                return found
    return found


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry", action="store_true", help="CPU, tiny sizes, fp32 (the GPU is hidden)")
    p.add_argument("--out", default=None, help="result JSON (default benchmarks/results/gpu_pipeline[-dry].json)")
    p.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                   help="seconds after which no new part starts (the skipped ones are recorded)")
    p.add_argument("--python", default=sys.executable, help="interpreter of every subprocess")
    p.add_argument("--cores", type=int, default=None, help="Snakemake --cores (default: 2 with --dry, else up to 8)")
    p.add_argument("--logs", default=None, help="copy the runs' logs and records here before the scratch is removed")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder (its path is in the JSON)")
    return p.parse_args(argv)


def copy_logs(scratch: Path, dest: Path) -> None:
    """Copy the logs (``*.log``) and run records (``run.json``, ``seed*.json``, ``train_log.jsonl``, the
    tables) of ``scratch`` to ``dest``, keeping their relative paths."""
    keep = re.compile(r"(\.log|run\.json|seed\d+\.json|train_log\.jsonl|eval_table\.tsv|eval_runs\.tsv)$")
    for path in scratch.rglob("*"):
        rel = path.relative_to(scratch)
        if path.is_file() and not path.is_symlink() and keep.search(path.name) and "cache" not in rel.parts[:1]:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest / rel)


def run_parts(ctx: Context, budget_s: float, written=None) -> tuple[dict, list[dict]]:
    """Run the parts in order while the budget lasts; print one PASS/FAIL line per part; ``written(parts,
    skipped)`` after each part (the result JSON so far: a run stopped from outside keeps the parts it finished).

    Returns:
        ``(parts by name, skipped parts with the reason)``.
    """
    parts, skipped = {}, []
    for name, fn in (("dag", part_dag), ("resume", part_resume)):
        if ctx.remaining_s() <= 0:
            skipped.append({"part": name, "reason": f"budget of {budget_s:g} s spent"})
            print(f"gpu_pipeline {name}: SKIPPED (budget of {budget_s:g} s spent)", flush=True)
            continue
        t0 = time.time()
        try:
            parts[name] = fn(ctx)
        except Exception as e:  # noqa: BLE001 (a part's failure is data; the other part still runs)
            parts[name] = {"passed": False, "error": f"{type(e).__name__}: {e}",
                           "traceback": traceback.format_exc()[-3000:]}
        parts[name].setdefault("wall_s", round(time.time() - t0, 2))
        p = parts[name]
        extra = (f"{len(p.get('checks', []))} training jobs checked, {p.get('jobs', {}).get('finished')} jobs"
                 if name == "dag" else f"resumed at step {p.get('resume_step')}, max |dloss| {p.get('max_abs_diff')}")
        print(f"gpu_pipeline {name}: {'PASS' if p['passed'] else 'FAIL'} in {p['wall_s']:.0f} s ({extra})"
              + (f" error: {p['error']}" if "error" in p else ""), flush=True)
        if written:
            written(parts, skipped)
    return parts, skipped


def main(argv: list[str] | None = None) -> int:
    """Run both parts and write the result JSON; 0 whether they passed or not (see the module docstring).

    The JSON: ``mode``, ``python``, ``torch``, ``cuda_available``, ``device_name``, ``budget_s``, ``cores``,
    one object per part (``dag``, ``resume``), ``skipped`` (parts not started, with the reason),
    ``passed``, ``wall_s`` (s), ``home_writes`` and ``scratch_removed``.

    Raises:
        RuntimeError: the interpreter given by ``--python`` cannot import torch.
    """
    from clmdetour.io import atomic_write_json

    args = parse_args(argv)
    t0 = time.time()
    out = Path(args.out or REPO / f"benchmarks/results/gpu_pipeline{'-dry' if args.dry else ''}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="clmdetour-gpu-pipeline-")).resolve()
    env = child_env(scratch, args.dry)
    files = [str(REPO / f) for f in CONFIG_FILES]
    if args.dry:
        (scratch / "dry.yaml").write_text(json.dumps(DRY_OVERLAY, indent=1) + "\n")
        files.append(str(scratch / "dry.yaml"))
    cores = args.cores or (2 if args.dry else max(2, min(8, os.cpu_count() or 2)))
    ctx = Context(python=args.python, dry=args.dry, scratch=scratch, env=env, deadline=t0 + args.budget_s,
                  cores=cores, config_files=files)
    result = {"mode": "dry (CPU)" if args.dry else "gpu", "python": args.python, "budget_s": args.budget_s,
              "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "scratch": str(scratch), "cores": cores,
              "skipped": []}
    parts: dict = {}
    try:
        result.update(probe_device(args.python, env))
        if not args.dry and not result["cuda_available"]:
            result["skipped"] = [{"part": p, "reason": "no CUDA device visible (use --dry on a CPU)"}
                                 for p in ("dag", "resume")]
            print("gpu_pipeline: no CUDA device visible; both parts skipped (use --dry on a CPU)", flush=True)
        else:
            def written(done: dict, skipped: list) -> None:
                atomic_write_json(out, dict(result, **done, skipped=skipped, partial=True,
                                            wall_s=round(time.time() - t0, 2)))

            parts, result["skipped"] = run_parts(ctx, args.budget_s, written)
        if args.logs:
            copy_logs(scratch, Path(args.logs))
    finally:
        result.update(parts)
        result["home_writes"] = home_writes(Path.home(), t0, scratch)
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
        result["scratch_removed"] = not scratch.exists()
        result["wall_s"] = round(time.time() - t0, 2)
        result["passed"] = bool(parts) and not result["skipped"] and all(p.get("passed") for p in parts.values())
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(out, result)
    print(f"gpu_pipeline: {'PASS' if result['passed'] else 'FAIL'} in {result['wall_s']:.0f} s -> {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
