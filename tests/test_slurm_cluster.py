"""The SLURM profile on a real SLURM cluster: slurmctld + two slurmd + munged on localhost.

Starts a two-node cluster (both nodes on this host, each with its own slurmd) whose
4 GPUs per node are placeholder files (tests/slurm/),
runs the reduced demo DAG (config/slurm-test.yaml) locally, then through
``--profile profiles/slurm`` with only the settings a user gives for their site
(partition, account, status command), and checks that

1. every non-local job went through sbatch, to the user's partition and
   account, with the GPU request of its rule, and that its results equal the
   local run's (corpus, tokenizer and packed-data hashes identical;
   pretraining losses and evaluation metrics within 1e-6; same thread counts);
2. a pretraining phase whose job is too short to finish saves a checkpoint
   before the SLURM time limit, exits, and the retried job resumes from it
   (its first step is the saved step + 1); one signalled with ``scancel --signal=TERM``
   saves the step it is on, exits 75 and its retry resumes there;
3. a phase with ``cluster.pretrain_nodes: 2`` gets a 2-node allocation, starts one
   launcher per node through ``srun`` with the rendezvous taken from SLURM's
   environment (master: the first node's host name, port from the job id), runs
   world size 2 over gloo, and ends with the local one-process run's loss.

The three cluster runs go side by side (fixture ``runs``). Root only (slurmd
starts jobs; Debian's slurm-wlm and munge are installed with apt-get when
missing); skipped, saying why, elsewhere. On a laptop:
``sudo .venv/bin/python -m pytest -m slurm -s tests/test_slurm_cluster.py`` (docs/slurm.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SLURM_DIR = REPO / "tests" / "slurm"
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
CONFIGS = ["config/config.yaml", "config/demo.yaml", "config/slurm-test.yaml"]
# The reduced DAG: a few jobs of every rule kind (19 cluster jobs: demo_corpus, base_init, build_base,
# a text and a token job per corpus shard (3), prepare_corpus, pretrain_phase1, pretrain_decay, 2 demo_task_source, 2 prepare_task,
# 2 finetune, layer_drift) and a local target rule.
TARGETS = [
    "pretrain_clm_detour",
    "results/eval/clm-detour/emea/seed0.json",
    "results/eval/demo-base/diamed/seed0.json",
    "results/analysis/clm-detour/layer_drift.tsv",
]
# (rule, wildcard values joined by "_"): how the plugin names each job's log folder.
EXPECTED_JOBS = {
    ("demo_corpus", ""), ("base_init", ""), ("build_base", ""), ("prepare_corpus", ""),
    *((f"corpus_shard_{kind}", f"{source}-00000") for kind in ("text", "tokens")
      for source in ("scientific_articles", "clinical_cases", "drug_leaflets")),
    ("pretrain_phase1", "clm-detour"), ("pretrain_decay", "clm-detour"),
    ("demo_task_source", "quaero"), ("demo_task_source", "diamed"),
    ("prepare_task", "emea"), ("prepare_task", "diamed"),
    ("finetune", "clm-detour_emea"), ("finetune", "demo-base_diamed"),
    ("layer_drift", "clm-detour"),
}
PARTITION, ACCOUNT = "gpu", "clmdetour-test"
# What a user passes for a cluster without an accounting database; the short first
# status check only makes the test quicker.
STATUS_ARGS = ["--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "2"]
RUN_TIMEOUT_S = 1200
NODES = 2
NODE_CPUS = 2  # per node: 4 in all, whatever the machine has

pytestmark = pytest.mark.slurm


def _why_no_slurm() -> str | None:
    """Why this machine cannot run the SLURM tests, or None when it can (after installing SLURM)."""
    if os.name != "posix" or os.geteuid() != 0:
        return "needs root: slurmd runs jobs as their owner and SLURM/munge are installed with apt-get"
    if shutil.which("slurmctld") and shutil.which("munged") and shutil.which("sbatch"):
        return None
    if not shutil.which("apt-get"):
        return "SLURM is not installed and apt-get is unavailable to install Debian's slurm-wlm and munge"
    r = subprocess.run(["bash", str(SLURM_DIR / "install_slurm.sh")], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        return f"apt-get could not install slurm-wlm and munge: {(r.stderr or r.stdout).strip()[-500:]}"
    return None


def _consecutive_free_ports(n: int, start: int = 21000) -> list[int]:
    """``n`` consecutive TCP ports from ``start`` on that are free now."""
    for first in range(start, 60000, n):
        try:
            socks = []
            for port in range(first, first + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return list(range(first, first + n))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {n} consecutive free TCP ports")


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """A running 2-node cluster on this host; yields the environment its clients need. Stops only its own daemons."""
    why = _why_no_slurm()
    if why:
        pytest.skip(why)
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        pytest.fail("snakemake-executor-plugin-slurm is not installed in this environment (pip install "
                    "'snakemake-executor-plugin-slurm>=2.7.1')")
    state = tmp_path_factory.mktemp("slurm-state")
    ports = _consecutive_free_ports(1 + NODES)  # slurmctld, then the nodes' slurmd (consecutive ports)
    # 2 x 2 CPUs declared (whatever the machine has) so that the cluster runs share the nodes
    # instead of queueing behind each other's 2-CPU phase jobs.
    env = dict(os.environ, CLMDETOUR_TEST_PARTITION=PARTITION, CLMDETOUR_TEST_CTLD_PORT=str(ports[0]),
               CLMDETOUR_TEST_SLURMD_PORT=str(ports[1]), CLMDETOUR_TEST_CPUS=str(NODE_CPUS),
               CLMDETOUR_TEST_NODES=str(NODES))
    t0 = time.time()
    r = subprocess.run(["bash", str(SLURM_DIR / "start_cluster.sh"), str(state)], env=env, capture_output=True,
                       text=True, timeout=120, check=False)
    if r.returncode == 2:  # another SLURM installation on this machine
        pytest.skip(r.stderr.strip().splitlines()[-1])
    assert r.returncode == 0, f"start_cluster.sh failed:\n{r.stdout}\n{r.stderr}"
    print(f"\n[slurm] cluster started in {time.time() - t0:.1f} s (state {state})")
    client_env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "CLMDETOUR_SLURM_"))}
    client_env["SLURM_CONF"] = str(state / "slurm.conf")
    try:
        yield {"env": client_env, "state": state}
    finally:
        subprocess.run(["bash", str(SLURM_DIR / "stop_cluster.sh"), str(state)], timeout=120, check=False)
        pids = [p for p in (state / "pids").glob("*")] if (state / "pids").exists() else []
        assert not pids, f"daemons left running: {[p.name for p in pids]}"


def _workdir(path: Path) -> Path:
    """A fresh working directory that sees the repository's workflow, config, profiles and code."""
    path.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "workflow", "config", "profiles", "src"):
        (path / name).symlink_to(REPO / name)
    return path


def _squeue_jobs(env: dict) -> dict[str, dict]:
    """Every job slurmctld remembers (MinJobAge = 1 h): id -> state, partition, account, GPUs, exit code."""
    fields = ["JobID", "State", "Partition", "Account", "tres-per-job", "NumCPUs", "NumTasks", "Exit_Code", "Name"]
    out = subprocess.run(["squeue", "-h", "--states=all", "-O", ",".join(f"{f}:|" for f in fields)], env=env,
                         capture_output=True, text=True, check=True).stdout
    jobs = {}
    for line in out.splitlines():
        values = [v.strip() for v in line.split("|")][: len(fields)]
        jobs[values[0]] = dict(zip(fields, values))
    return jobs


def _submitted(output: str) -> dict[str, str]:
    """Snakemake job id -> SLURM job id, from the plugin's 'has been submitted with SLURM jobid' lines."""
    return dict(re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+)", output))


def _job_blocks(output: str) -> list[tuple[str, str, str]]:
    """(kind, rule, snakemake job id) of every job Snakemake started; kind is 'rule' or 'localrule'."""
    return re.findall(r"^(rule|localrule) (\w+):\n(?:    .*\n)*?    jobid: (\d+)", output, flags=re.MULTILINE)


class _Background:
    """A snakemake run started now and waited for later."""

    def __init__(self, workdir: Path, args: list[str], env: dict, name: str):
        self.workdir, self.name = workdir, name
        self._out = open(workdir / f"{name}.out", "w")  # noqa: SIM115 (the child process writes to it until the test ends)
        self._t0 = time.time()
        self._proc = subprocess.Popen([SNAKEMAKE, *args], cwd=workdir, env=env, stdout=self._out,
                                      stderr=subprocess.STDOUT, text=True)
        self.seconds: float | None = None
        self.stdout = ""
        self._ended: float | None = None
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        self._proc.wait()
        self._ended = time.time()

    def wait(self) -> _Background:
        """Wait for the run (at most RUN_TIMEOUT_S); assert that it succeeded."""
        if self.seconds is None:
            try:
                rc = self._proc.wait(timeout=RUN_TIMEOUT_S)
            finally:
                self.stop()
            self.seconds = (self._ended or time.time()) - self._t0
            self.stdout = (self.workdir / f"{self.name}.out").read_text()
            assert rc == 0, f"{self.name}: snakemake failed after {self.seconds:.0f} s:\n{self.stdout[-6000:]}"
            print(f"[slurm] {self.name}: {self.seconds:.1f} s")
        return self

    def stop(self) -> None:
        if self._proc.poll() is None:  # only the process this object started
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._out.close()


def _phase_tokens_per_s(train_log: Path) -> float:
    return max(json.loads(line)["tokens_per_s"] for line in train_log.read_text().splitlines() if line.strip())


STEP_TOKENS = 16 * 128  # demo global batch (sequences) x sequence length (tokens)


@pytest.fixture(scope="module")
def runs(slurm_cluster, tmp_path_factory):
    """The three runs of the module: the local reference, then both cluster runs side by side.

    1. ``local``: the reduced DAG without SLURM, alone on the machine, so that its CLM
       step speed (tokens/s) is an upper bound for the time-limit phase below.
    2. ``cluster``: the same DAG through ``--profile profiles/slurm``, with partition and
       account from a site file (what a user writes once for their site).
    3. ``timelimit``: a phase of the ``slow-clm`` variant, sized to outlast its first job,
       with partition and account from environment variables.
    Runs 2 and 3 share the 2-CPU test node; SLURM queues their jobs.
    """
    base = tmp_path_factory.mktemp("runs")
    local_env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    local = _Background(_workdir(base / "local"), [*TARGETS, "--cores", "2", "--configfiles", *CONFIGS],
                        local_env, "local").wait()

    site = base / "site.yaml"
    site.write_text(f"partition: {PARTITION}\naccount: {ACCOUNT}\n")
    cluster = _Background(_workdir(base / "cluster"),
                          ["--profile", "profiles/slurm", *TARGETS, "--configfiles", *CONFIGS, *STATUS_ARGS],
                          dict(slurm_cluster["env"], CLMDETOUR_SLURM_SITE=str(site)), "cluster")

    work = _workdir(base / "timelimit")
    # Inputs of a phase (demo base model, prepared corpus) from the local run, mtimes kept.
    for folder in ("results/demo", "results/base", "results/corpus"):
        shutil.copytree(local.workdir / folder, work / folder, symlinks=True)
    # The first job stops 90 s after it starts (10-40 s of which go to start-up): 180 s of
    # training at the fastest CLM step speed of the local run outlasts it even if the job runs up to
    # twice as fast as the local run did (a machine busier during the local run than during the job);
    # a retry has 15 minutes, enough to finish at a several times lower speed.
    speed = _phase_tokens_per_s(local.workdir / "results/pretrain/clm-detour/phase1/train_log.jsonl")
    tokens = max(30, int(speed * 180 / STEP_TOKENS)) * STEP_TOKENS
    overlay = work / "time-limit.yaml"
    # Phase 1 is one pass over corpus.train_tokens (planning checks it): the overlay raises it to
    # the phase's tokens, and --rerun-triggers mtime keeps the copied 8k-token corpus, which the phase then
    # reads many times over (a repeat warning, not an error): the phase only has to outlast its first job.
    overlay.write_text(
        "corpus:\n"
        f"  train_tokens: {tokens}\n"
        "pretraining:\n"
        "  checkpoint_margin_s: 90\n"
        "  checkpoint_interval: 100000ba     # no periodic checkpoint: only the time limit saves\n"
        "  variants:\n"
        f"    slow-clm: {{phase1: {{objective: clm, tokens: {tokens}}}}}\n"
        "cluster:\n"
        "  pretrain_runtime_min: 3\n"
    )
    print(f"[slurm] time-limit phase: {tokens} tokens ({tokens // STEP_TOKENS} steps) at <= {speed:.0f} tokens/s")
    # The first job gets the configured 3 minutes; a retry gets 15, so the run ends after one resume.
    timelimit = _Background(
        work, ["--profile", "profiles/slurm", "results/pretrain/slow-clm/phase1/run.json", "--configfiles", *CONFIGS,
               str(overlay), "--set-resources", "pretrain_phase1:runtime=3 if attempt == 1 else 15",
               "--rerun-triggers", "mtime", *STATUS_ARGS],
        dict(slurm_cluster["env"], CLMDETOUR_SLURM_PARTITION=PARTITION, CLMDETOUR_SLURM_ACCOUNT=ACCOUNT),
        "timelimit")
    timelimit.tokens = tokens

    # 4. ``twonode``: the local run's clm-detour phase 1 again, over both nodes.
    work = _workdir(base / "twonode")
    for folder in ("results/demo", "results/base", "results/corpus"):
        shutil.copytree(local.workdir / folder, work / folder, symlinks=True)
    overlay = work / "two-nodes.yaml"
    # 1 GPU per node: the 16-sequence batch is 8 per device, the slurm-test micro-batch
    overlay.write_text("cluster:\n  pretrain_nodes: 2\n  pretrain_gpus: 1\n")
    twonode = _Background(
        work, ["--profile", "profiles/slurm", "results/pretrain/clm-detour/phase1/run.json", "--configfiles", *CONFIGS,
               str(overlay), *STATUS_ARGS],
        {k: v for k, v in dict(slurm_cluster["env"], CLMDETOUR_SLURM_PARTITION=PARTITION,
                               CLMDETOUR_SLURM_ACCOUNT=ACCOUNT).items() if k not in ("MASTER_ADDR", "MASTER_PORT")},
        "twonode")
    # 5. ``sigterm``: a phase signalled with SIGTERM (scancel --signal=TERM, as preemption does) once it trains.
    work = _workdir(base / "sigterm")
    for folder in ("results/demo", "results/base", "results/corpus"):
        shutil.copytree(local.workdir / folder, work / folder, symlinks=True)
    # 120 steps: the signal comes at the first logged step, and the retry's job frees its node quickly
    term_tokens = 120 * STEP_TOKENS
    overlay = work / "sigterm.yaml"
    overlay.write_text(
        f"corpus:\n  train_tokens: {term_tokens}\n"
        "pretraining:\n"
        "  checkpoint_interval: 100000ba     # no periodic checkpoint: only the signal saves\n"
        f"  variants:\n    term-clm: {{phase1: {{objective: clm, tokens: {term_tokens}}}}}\n"
        "cluster:\n  pretrain_runtime_min: 15\n")
    sigterm = _Background(
        work, ["--profile", "profiles/slurm", "results/pretrain/term-clm/phase1/run.json", "--configfiles", *CONFIGS,
               str(overlay), "--rerun-triggers", "mtime", *STATUS_ARGS],
        dict(slurm_cluster["env"], CLMDETOUR_SLURM_PARTITION=PARTITION, CLMDETOUR_SLURM_ACCOUNT=ACCOUNT), "sigterm")
    sigterm.tokens = term_tokens
    signalled: dict = {}
    threading.Thread(target=_signal_once_training, daemon=True,
                     args=(sigterm, slurm_cluster["env"], "checkpoints/term-clm/phase1/*/train_log.jsonl", signalled)).start()
    try:
        yield {"local": local, "cluster": cluster, "timelimit": timelimit, "twonode": twonode, "sigterm": sigterm,
               "signalled": signalled}
    finally:
        cluster.stop()
        timelimit.stop()
        twonode.stop()
        sigterm.stop()


def _signal_once_training(run: _Background, env: dict, live_log: str, result: dict) -> None:
    """Send SIGTERM to the run's first SLURM job (``scancel --signal=TERM``: every process of its job
    steps, as preemption does) once its phase has logged a training step; fill ``result``."""
    deadline = time.time() + RUN_TIMEOUT_S
    while time.time() < deadline:
        logs = [p for p in run.workdir.glob(live_log) if p.stat().st_size]
        out = (run.workdir / f"{run.name}.out").read_text()
        ids = re.findall(r"has been submitted with SLURM jobid (\d+)", out)
        if logs and ids:
            r = subprocess.run(["scancel", "--signal=TERM", ids[0]], env=env, capture_output=True, text=True,
                               check=False)
            result.update(job=ids[0], rc=r.returncode, stderr=r.stderr, logged_lines=len(logs[0].read_text().splitlines()))
            return
        time.sleep(0.5)
    result.update(error="the phase never logged a step")


def test_demo_dag_through_sbatch_matches_local_run(slurm_cluster, runs):
    local, run = runs["local"], runs["cluster"].wait()
    workdir = run.workdir
    env = slurm_cluster["env"]
    print(f"[slurm] reduced DAG: local {local.seconds:.1f} s, through SLURM {run.seconds:.1f} s "
          "(beside the time-limit run)")

    # Every non-local job was submitted with sbatch and ran to completion on the user's partition/account.
    submitted = _submitted(run.stdout)
    blocks = _job_blocks(run.stdout)
    cluster_jobs = {jobid: rule for kind, rule, jobid in blocks if kind == "rule"}
    assert sorted(cluster_jobs.values()) == sorted(rule for rule, _ in EXPECTED_JOBS), blocks
    assert {kind for kind, rule, _ in blocks if rule == "pretrain_clm_detour"} == {"localrule"}
    assert set(cluster_jobs) == set(submitted), f"jobs without a SLURM job id: {set(cluster_jobs) - set(submitted)}"
    squeue = _squeue_jobs(env)
    for jobid, slurm_id in submitted.items():
        job = squeue[slurm_id]
        assert (job["State"], job["Partition"], job["Account"]) == ("COMPLETED", PARTITION, ACCOUNT), job
        assert job["Name"].startswith("clmdetour_"), job  # the profile's job-name prefix
        gpus = {"pretrain_phase1": "gres:gpu:h100:2", "pretrain_decay": "gres:gpu:h100:2", "finetune": "gres:gpu:1"}
        assert job["tres-per-job"] == gpus.get(cluster_jobs[jobid], "N/A"), (cluster_jobs[jobid], job)
        # One task per job (the launcher starts the GPU processes): no --ntasks-per-gpu.
        cpus = {"pretrain_phase1": "2", "pretrain_decay": "2"}
        expected_cpus = cpus.get(cluster_jobs[jobid], "1")
        assert (job["NumTasks"], job["NumCPUs"]) == ("1", expected_cpus), (cluster_jobs[jobid], job)
    # One SLURM log per job, logs/slurm/rule_{rule}/{wildcards}/{SLURM job id}.log (the profile's slurm-logdir).
    logs = [p.relative_to(workdir / "logs/slurm").parts for p in (workdir / "logs/slurm").glob("rule_*/**/*.log")]
    assert sorted(parts[-1].removesuffix(".log") for parts in logs) == sorted(submitted.values())
    assert {(parts[0].removeprefix("rule_"), "_".join(parts[1:-1])) for parts in logs} == EXPECTED_JOBS

    # The phases asked for 2 GPUs, got them from SLURM, saw no CUDA device and ran one CPU process.
    phase_log = (workdir / "logs/pretrain_phase1/clm-detour.log").read_text()
    assert "2 GPU(s) requested but no CUDA device is visible; running one CPU process" in phase_log
    for phase in ("phase1", "decay"):
        rec = json.loads((workdir / f"results/pretrain/clm-detour/{phase}/run.json").read_text())
        ref = json.loads((local.workdir / f"results/pretrain/clm-detour/{phase}/run.json").read_text())
        assert rec["world_size"] == 1 and rec["device"]["type"] == "cpu"
        assert rec["tokens"] == ref["tokens"] and rec["steps"] == ref["steps"]
        assert rec["valid_loss_end"] == pytest.approx(ref["valid_loss_end"], abs=1e-6)

    # Same results as the local run.
    manifest = json.loads((workdir / "results/corpus/manifest.json").read_text())
    ref_manifest = json.loads((local.workdir / "results/corpus/manifest.json").read_text())
    assert {"tokenizer", "train_token_ids", "valid_token_ids"} <= set(manifest["hashes"])
    assert manifest["hashes"] == ref_manifest["hashes"]
    for model, task in (("clm-detour", "emea"), ("demo-base", "diamed")):
        rec = json.loads((workdir / f"results/eval/{model}/{task}/seed0.json").read_text())
        ref = json.loads((local.workdir / f"results/eval/{model}/{task}/seed0.json").read_text())
        assert set(rec["metrics"]) == set(ref["metrics"]) and rec["metrics"]
        for name, value in ref["metrics"].items():
            assert rec["metrics"][name] == pytest.approx(value, abs=1e-6), (model, task, name)
        assert rec["dev_metric"] == pytest.approx(ref["dev_metric"], abs=1e-6)


def test_phase_checkpoints_before_time_limit_and_retry_resumes(slurm_cluster, runs):
    run = runs["timelimit"].wait()
    workdir, tokens, env = run.workdir, run.tokens, slurm_cluster["env"]

    slurm_ids = sorted(re.findall(r"has been submitted with SLURM jobid (\d+)", run.stdout), key=int)
    assert len(slurm_ids) >= 2, f"expected the phase job and a retry, got SLURM jobs {slurm_ids}"
    squeue = _squeue_jobs(env)
    states = [squeue[i]["State"] for i in slurm_ids]
    # FAILED (the phase's own exit), not TIMEOUT (killed by SLURM): it stopped before the limit.
    assert states == ["FAILED"] * (len(slurm_ids) - 1) + ["COMPLETED"], dict(zip(slurm_ids, states))
    first_log = (workdir / f"logs/slurm/rule_pretrain_phase1/slow-clm/{slurm_ids[0]}.log").read_text()
    assert "exit status 75" in first_log

    record = json.loads((workdir / "results/pretrain/slow-clm/phase1/run.json").read_text())
    events = [json.loads(line) for line in (workdir / record["checkpoint_dir"] / "time_limit.jsonl")
              .read_text().splitlines()]
    # Each job: a start record; each job but the last: a stop record (checkpoint saved, exit 75).
    expected = [(e, i) for i in slurm_ids[:-1] for e in ("start", "stop")] + [("start", slurm_ids[-1])]
    assert [(e["event"], e["job_id"]) for e in events] == expected
    assert events[0]["step"] == 0
    for stop, restart in zip(events[1::2], events[2::2]):
        assert stop["step"] > 0 and restart["step"] == stop["step"], (stop, restart)  # resumed at the saved step
        assert stop["time"] < stop["end_time"], "checkpoint written after the job's end time"
        assert stop["end_time"] - stop["margin_s"] - stop["time"] < 60, stop  # at most a step before the deadline
    assert record["resumed_from_step"] == events[-1]["step"] and record["tokens"] == tokens
    steps = [json.loads(line)["step"] for line in
             (workdir / "results/pretrain/slow-clm/phase1/train_log.jsonl").read_text().splitlines()]
    # Steps 1..saved from the first job, then saved + 1 .. from the retry: never from 1 again.
    assert steps == list(range(1, tokens // STEP_TOKENS + 1)), steps
    print(f"[slurm] time limit: SLURM jobs {slurm_ids}, checkpoints at steps "
          f"{[e['step'] for e in events[1::2]]} of {tokens // STEP_TOKENS}")


def test_two_node_phase_runs_one_launcher_per_node_and_matches_one_process(slurm_cluster, runs):
    local, run = runs["local"], runs["twonode"].wait()
    workdir, env = run.workdir, slurm_cluster["env"]
    slurm_ids = re.findall(r"has been submitted with SLURM jobid (\d+)", run.stdout)
    assert len(slurm_ids) == 1, run.stdout[-3000:]
    out = subprocess.run(["squeue", "-h", "--states=all", "-j", slurm_ids[0], "-O", "State:|,NumNodes:|,NodeList:|"],
                         env=env, capture_output=True, text=True, check=True).stdout
    state, n_nodes, nodelist = [v.strip() for v in out.split("|")[:3]]
    assert (state, n_nodes) == ("COMPLETED", "2"), out

    # One launcher per node, each with its node rank, the first node as master, the port from the job id.
    host = socket.gethostname().split(".")[0]
    log = (workdir / "logs/pretrain_phase1/clm-detour.log").read_text()
    launches = sorted(re.findall(r"^launch: .*?-m composer\.cli\.launcher (.*?) -m clmdetour", log, flags=re.MULTILINE))
    port = 20000 + int(slurm_ids[0]) % 20000
    assert launches == [f"-n 1 --world_size 2 --node_rank {r} --base_rank {r} --master_addr {host} "
                        f"--master_port {port}" for r in (0, 1)], (nodelist, launches)
    assert log.count("1 GPU(s) requested but no CUDA device is visible") == 2, log[-3000:]

    record = json.loads((workdir / "results/pretrain/clm-detour/phase1/run.json").read_text())
    ref = json.loads((local.workdir / "results/pretrain/clm-detour/phase1/run.json").read_text())
    assert (record["nodes"], record["world_size"]) == (2, 2)
    assert sorted((r["rank"], r["node_rank"]) for r in record["ranks"]) == [(0, 0), (1, 1)]
    # The same global batch as the local run's one process (gradient accumulation 2): the same result.
    assert record["steps"] == ref["steps"] and record["tokens"] == ref["tokens"]
    assert record["valid_loss_end"] == pytest.approx(ref["valid_loss_end"], abs=1e-5)
    print(f"[slurm] 2-node phase: SLURM job {slurm_ids[0]} on {nodelist}, {run.seconds:.0f} s, "
          f"valid loss {record['valid_loss_end']:.6f} (one process: {ref['valid_loss_end']:.6f})")


def test_sigterm_mid_phase_saves_the_step_and_the_retry_resumes(slurm_cluster, runs):
    """`scancel --signal=TERM` on a training phase's job: the phase saves the step it is on and stops (the
    job FAILED, not CANCELLED or killed), and Snakemake's retry resumes from that step."""
    run = runs["sigterm"].wait()
    sent = runs["signalled"]
    assert sent.get("rc") == 0, sent
    workdir, env = run.workdir, slurm_cluster["env"]
    slurm_ids = sorted(re.findall(r"has been submitted with SLURM jobid (\d+)", run.stdout), key=int)
    assert slurm_ids[0] == sent["job"] and len(slurm_ids) == 2, (slurm_ids, sent)
    states = [_squeue_jobs(env)[i]["State"] for i in slurm_ids]
    assert states == ["FAILED", "COMPLETED"], dict(zip(slurm_ids, states))
    # (the shell around the phase gets the signal too, so the job log shows a SIGTERM, not the phase's status 75;
    # the stop record below is the phase's own: it saved the step it was on)
    record = json.loads((workdir / "results/pretrain/term-clm/phase1/run.json").read_text())
    events = [json.loads(line) for line in (workdir / record["checkpoint_dir"] / "time_limit.jsonl")
              .read_text().splitlines()]
    stops = [e for e in events if e["event"] == "stop"]
    assert [(e["reason"], e["job_id"]) for e in stops] == [("SIGTERM", slurm_ids[0])], events
    assert 0 < stops[0]["step"] < record["steps"] and record["resumed_from_step"] == stops[0]["step"]
    assert record["tokens"] == run.tokens
    print(f"[slurm] SIGTERM: SLURM jobs {slurm_ids} ({states}), saved at step {stops[0]['step']} of {record['steps']}")
