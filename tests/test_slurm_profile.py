"""profiles/slurm without a cluster: site settings, and the paper grid's requests (Snakemake dry-run).

The dry-run builds the full paper DAG (config/config.yaml) through the SLURM
profile and turns each job's resources into the sbatch call the installed
snakemake-executor-plugin-slurm would make, so the tests see what SLURM
would be asked for: a whole 4-GPU node per pretraining phase, one GPU per
fine-tune, CPUs only for corpus preparation, nothing for network rules.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "profiles" / "slurm" / "config.yaml"
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
NETWORK_RULES = {"fetch_dataset", "fetch_model", "fetch_url", "fetch_task_hub", "push_release"}


def _parse_profile(env: dict) -> dict:
    """The profile as Snakemake reads it (YTE rendered, with ``env`` as the environment)."""
    from snakemake.profiles import ProfileConfigFileParser

    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(env)
        with open(PROFILE) as f:
            return dict(ProfileConfigFileParser().parse(f))
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLMDETOUR_SLURM_", "SLURM_"))}
    env.update(extra)
    return env


def test_profile_has_no_site_settings_of_its_own(tmp_path):
    parsed = _parse_profile(_clean_env(CLMDETOUR_SLURM_SITE=str(tmp_path / "absent.yaml")))
    assert parsed["executor"] == "slurm" and int(parsed["retries"]) >= 1
    assert not any(k in parsed for k in ("slurm-qos", "slurm-status-command", "slurm-partition-config"))
    assert not [r for r in parsed["default-resources"] if r.startswith(("slurm_partition=", "slurm_account="))]
    # every entry of the profile is commented
    lines = PROFILE.read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^[a-z?][\w\-\[\]\"' ()]*:", line) and not line.startswith("__"):
            assert lines[i - 1].lstrip().startswith("#"), f"profiles/slurm/config.yaml line {i + 1} has no comment"


def test_site_file_and_environment(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("partition: gpu_h100\naccount: abc@h100\nqos: qos_gpu-t3\nstatus_command: squeue\n")
    parsed = _parse_profile(_clean_env(CLMDETOUR_SLURM_SITE=str(site)))
    assert {"slurm_partition=gpu_h100", "slurm_account=abc@h100"} <= set(parsed["default-resources"])
    assert parsed["slurm-qos"] == "qos_gpu-t3" and parsed["slurm-status-command"] == "squeue"
    # an environment variable wins over the file
    parsed = _parse_profile(_clean_env(CLMDETOUR_SLURM_SITE=str(site), CLMDETOUR_SLURM_PARTITION="other"))
    assert "slurm_partition=other" in parsed["default-resources"]
    assert "slurm_partition=gpu_h100" not in parsed["default-resources"]


def test_site_file_with_unknown_key_is_refused(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("partiton: gpu\n")
    with pytest.raises(Exception, match=r"site\.yaml: expected a mapping with keys among .*partiton"):
        _parse_profile(_clean_env(CLMDETOUR_SLURM_SITE=str(site)))


# --- the paper grid, dry-run -----------------------------------------------------------------------


class _Resources(dict):
    """A job's resources with attribute access, as the plugin reads them."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _value(text: str):
    return int(text) if re.fullmatch(r"-?\d+", text) else text


def _dry_run_jobs(output: str) -> list[dict]:
    """Every job block of a dry-run: rule, kind (rule / localrule), threads, resources, outputs."""
    jobs = []
    for m in re.finditer(r"^(rule|localrule) (\w+):\n((?:    .*\n)+)", output, flags=re.MULTILINE):
        body = dict(re.findall(r"^    (\w+): (.*)$", m.group(3), flags=re.MULTILINE))
        res = _Resources()
        for item in (body.get("resources") or "").split(", "):
            if "=" in item:
                key, val = item.split("=", 1)
                res[key] = _value(val)
        jobs.append({"kind": m.group(1), "rule": m.group(2), "threads": int(body.get("threads", 1)),
                     "resources": res, "outputs": (body.get("output") or "").split(", ")})
    return jobs


def _sbatch_call(job: dict) -> str:
    """The sbatch command line the installed plugin builds for one dry-run job."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    res = job["resources"]
    fake = SimpleNamespace(resources=res, threads=job["threads"], name=job["rule"], wildcards={})
    params = {"run_uuid": "RUN", "slurm_logfile": "LOG", "comment_str": "rule", "workdir": "WD",
              "account": f" -A {res['slurm_account']}" if res.get("slurm_account") else "",
              "partition": f" -p {res['slurm_partition']}" if res.get("slurm_partition") else ""}
    settings = SimpleNamespace(requeue=False, no_requeue=False, qos=None, reservation=None)
    return get_submit_command(fake, params, settings=settings) + set_gres_string(fake)


@pytest.fixture(scope="module")
def paper_dry_run(tmp_path_factory):
    return _dry_run(tmp_path_factory.mktemp("paper"))


def _dry_run(tmp, extra_args=(), extra_config=()):
    """``snakemake --profile profiles/slurm -n all`` of the paper DAG in a scratch copy, with user tasks faked."""
    import snakemake_executor_plugin_slurm  # noqa: F401  (pinned in requirements/base.txt: missing is a failure)
    work = tmp / "work"
    work.mkdir()
    for name in ("Snakefile", "workflow", "config", "profiles", "src"):
        (work / name).symlink_to(REPO / name)
    # Tasks whose files the user provides point at small fixtures (a dry run needs only their files to exist).
    fixtures = {}
    for task, line in (("distemist", '{"id": "%s", "text": "t", "labels": ["a"]}'),
                       ("meddialog", '{"id": "%s", "text": "t", "label": "a"}'),
                       ("diamed", '{"id": "%s", "text": "t", "label": "a"}')):
        folder = tmp / "fixtures" / task
        folder.mkdir(parents=True)
        for split in ("train", "dev", "test"):
            (folder / f"{split}.jsonl").write_text(line % split + "\n")
        fixtures[task] = folder
    tasks = "{" + ", ".join(f"{t}: {{path: {p}}}" for t, p in fixtures.items()) + "}"
    env = _clean_env(CLMDETOUR_SLURM_SITE=str(tmp / "absent.yaml"), CLMDETOUR_SLURM_PARTITION="h100",
                     CLMDETOUR_SLURM_ACCOUNT="abc@h100")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    r = subprocess.run([SNAKEMAKE, "--profile", "profiles/slurm", "-n", "all", *extra_args, "--config",
                        f"tasks={tasks}", *extra_config], cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False)
    wall = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    print(f"\n[slurm profile] paper DAG dry-run: {wall:.1f} s wall, {cpu:.1f} s CPU")
    return {"jobs": _dry_run_jobs(r.stdout), "wall_s": wall, "cpu_s": cpu, "stdout": r.stdout}


def test_paper_dag_builds_in_a_few_seconds(paper_dry_run):
    # CPU time of the whole `snakemake -n all` (start-up, config validation, DAG of ~110 jobs);
    # wall time also waits for other processes on a shared machine.
    assert paper_dry_run["cpu_s"] < 10, paper_dry_run["cpu_s"]
    assert paper_dry_run["wall_s"] < 60, paper_dry_run["wall_s"]


def test_pretraining_phases_take_a_whole_4_gpu_node(paper_dry_run):
    phases = [j for j in paper_dry_run["jobs"] if j["rule"] in ("pretrain_phase1", "pretrain_decay")]
    assert len(phases) == 11  # 5 phase-1 jobs (clm-long-decay reuses clm-detour's) + 6 decays
    # the freeze-scope ablation: its own phase 1, embeddings frozen with layers 0-7
    assert any(o.startswith("results/pretrain/clm-freeze-low-emb/phase1/") for j in phases for o in j["outputs"])
    assert '"freeze": ["embeddings", "0-7"]' in _paper_pipeline().phase_section_json("clm-freeze-low-emb", "phase1")
    for job in phases:
        assert job["kind"] == "rule"
        res = job["resources"]
        assert (res["gpu"], res["gpu_model"], res["cpus_per_task"]) == (4, "h100", 64), res
        assert (res["mem_mb"], res["runtime"]) == (480_000, 2880), res
        call = _sbatch_call(job)
        assert "--gpus=h100:4" in call and "--cpus-per-task=64" in call and "--mem 480000" in call, call
        assert "-t 2880" in call and "-p h100" in call and "-A abc@h100" in call, call
        # One task: Composer's launcher starts the 4 GPU processes inside it. A task per GPU
        # (--ntasks-per-gpu, which the plugin adds when a rule sets `tasks`) would also ask
        # for 4 x 64 CPUs.
        assert "--ntasks-per-gpu" not in call and "--ntasks=" not in call, call


def test_each_finetune_job_takes_one_gpu_and_runs_all_seeds(paper_dry_run):
    jobs = [j for j in paper_dry_run["jobs"] if j["rule"].startswith("finetune")]
    # 8 tasks x 10 models (6 variants, the base, 3 reference models) = 80 jobs, each writing its
    # 9 seed records: 720 runs in 80 SLURM jobs.
    assert len(jobs) == 80
    assert all(len([o for o in j["outputs"] if re.search(r"/seed\d+\.json$", o)]) == 9 for j in jobs)
    for job in jobs:
        res = job["resources"]
        assert job["kind"] == "rule" and res["gpu"] == 1, res
        call = _sbatch_call(job)
        assert re.search(r"--gpus=(\w+:)?1\b", call) and f"--cpus-per-task={job['threads']}" in call, call
        assert "--ntasks-per-gpu" not in call and "-p h100" in call, call


def test_corpus_preparation_takes_cpus_only(paper_dry_run):
    """The merge is one small job; every shard job is its own SLURM job, sized from the config (issue 40)."""
    [job] = [j for j in paper_dry_run["jobs"] if j["rule"] == "prepare_corpus"]
    call = _sbatch_call(job)
    assert "--gpus" not in call and "--ntasks=1" in call and "--cpus-per-task=1" in call, call
    assert "--mem 32000" in call and "-t 240" in call, call
    shard_jobs = [j for j in paper_dry_run["jobs"] if j["rule"] in ("corpus_shard_text", "corpus_shard_tokens")]
    assert len(shard_jobs) == 2 * 64  # 4 Hub sources x corpus.hub_shards, a text and a token job each
    for job in shard_jobs:
        call = _sbatch_call(job)
        assert "--gpus" not in call and "--cpus-per-task=4" in call and "--mem 8000" in call and "-t 120" in call, call


def test_every_cluster_job_goes_to_the_users_partition_and_account(paper_dry_run):
    # (Whether a rule is local is not visible in a dry-run: Snakemake prints every job as
    # "rule"; the cluster test sees local rules run as "localrule".)
    jobs = [j for j in paper_dry_run["jobs"] if j["rule"] not in NETWORK_RULES and j["rule"] != "all"]
    assert jobs
    for job in jobs:
        assert (job["resources"].get("slurm_partition"), job["resources"].get("slurm_account")) == ("h100", "abc@h100")


# --- several nodes per phase (cluster.pretrain_nodes) ------------------------------------------------


@pytest.fixture(scope="module")
def two_node_dry_run(tmp_path_factory):
    return _dry_run(tmp_path_factory.mktemp("two-nodes"), extra_config=["cluster={pretrain_nodes: 2}"])


def test_two_node_phases_ask_for_two_nodes_and_start_one_launcher_per_node(two_node_dry_run):
    """The dry test of a 2-node job: the sbatch request, the srun layout, and each node's launcher line."""
    from clmdetour.training.launch import build_command
    from clmdetour.training.multinode import slurm_rendezvous

    phases = [j for j in two_node_dry_run["jobs"] if j["rule"] in ("pretrain_phase1", "pretrain_decay")]
    assert len(phases) == 11
    for job in phases:
        res = job["resources"]
        assert (res["nodes"], res["gres"], res["cpus_per_task"], res["mem_mb"]) == (2, "gpu:h100:4", 64, 480_000)
        # the plugin's `gpu` is a total per job (GRES counts per node); `mpi` keeps the plugin from wrapping
        # the job in a 1-node `srun -n1`; tasks_per_gpu 0 from adding --ntasks-per-gpu
        assert "gpu" not in res and (res["mpi"], res["tasks"], res["tasks_per_gpu"]) == ("srun", 2, 0)
        call = _sbatch_call(job)
        assert "--nodes=2" in call and "--gres=gpu:h100:4" in call and "--cpus-per-task=64" in call, call
        assert "--mem 480000" in call and "--gpus" not in call and "--ntasks=2" in call, call
        assert "--ntasks-per-gpu" not in call, call
    # what the job's script execs (clmdetour.training.phase_job), from the rule's launch params and threads
    shells = [" ".join(_phase_job(["cluster={pretrain_nodes: 2}"], job).command(python="/image/python"))
              for job in phases]
    for cmd in shells:
        srun, launcher = cmd.split(" -m clmdetour.training.launch ", 1)
        assert srun == ("srun --overlap --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=64 "
                        "--kill-on-bad-exit=1 /image/python"), srun
        assert launcher.startswith("--gpus 4 --nodes 2 -- -m clmdetour.training.cli "), launcher
    # What each node's launcher then execs, in the environment srun gives its task.
    lines = []
    for procid in (0, 1):
        env = {"SLURM_JOB_ID": "777", "SLURM_PROCID": str(procid), "SLURM_NTASKS": "2",
               "SLURM_STEP_NODELIST": "h100-[07-08]"}
        rdv = slurm_rendezvous(2, env, scontrol="/nonexistent/scontrol")
        lines.append(build_command(4, 4, ["-m", "clmdetour.training.cli"], 2, rdv.node_rank, rdv.master_addr,
                                   rdv.master_port))
    print("\n[slurm profile] 2-node phase:", shells[0][:200], "...")
    for line in lines:
        print("[slurm profile] node launcher:", " ".join(line[1:]))
    for rank, line in enumerate(lines):
        assert " ".join(line[1:]) == (f"-m composer.cli.launcher -n 4 --world_size 8 --node_rank {rank} --base_rank "
                                      f"{4 * rank} --master_addr h100-07 --master_port 20777 -m clmdetour.training.cli")


def test_one_node_phases_keep_the_single_task_request(paper_dry_run):
    phases = [j for j in paper_dry_run["jobs"] if j["rule"] == "pretrain_phase1"]
    for job in phases:
        cmd = " ".join(_phase_job([], job).command(python="/image/python"))
        assert cmd.startswith("/image/python -m clmdetour.training.launch --gpus 4 --nodes 1 -- "), cmd


def _paper_pipeline(config_overrides: list[str] = (), files: tuple[str, ...] = ("config.yaml",)):
    """clmdetour.pipeline.Pipeline of config/<files> merged in order, with ``--config``-style overrides
    (KEY=YAML)."""
    import yaml

    from clmdetour.config import deep_merge, load_yaml, validate_config
    from clmdetour.pipeline import Pipeline

    cfg = {}
    for name in files:
        cfg = deep_merge(cfg, load_yaml(REPO / "config" / name))
    for item in config_overrides:
        key, value = item.split("=", 1)
        cfg = deep_merge(cfg, {key: yaml.safe_load(value)})
    return Pipeline(validate_config(cfg))


def _phase_job(config_overrides: list[str], job: dict):
    """The PhaseJob the pretraining rule's script builds for a dry-run job (its variant, phase and threads), with
    the params pretrain.smk gives it (PHASE_LAUNCH: cluster.pretrain_gpus and pretrain_nodes)."""
    from clmdetour.pipeline import paths
    from clmdetour.training.phase_job import RULE_PHASE, PhaseJob

    pipeline = _paper_pipeline(config_overrides)
    cluster = pipeline.config["cluster"]
    phase = RULE_PHASE[job["rule"]]
    variant = job["outputs"][0].split("/")[2]
    return PhaseJob(variant=variant, phase=phase, input_model="m", corpus_dir=paths.CORPUS_DIR,
                    output_dir=paths.phase_dir(variant, phase), section=pipeline.phase_section_json(variant, phase),
                    allow_repeat=False, previous_run=None, gpus=cluster["pretrain_gpus"],
                    nodes=cluster["pretrain_nodes"], threads=job["threads"],
                    cpus_per_node=job["resources"]["cpus_per_task"], log="log")


@pytest.fixture(scope="module")
def large_dry_run(tmp_path_factory):
    return _dry_run(tmp_path_factory.mktemp("large"), ["--configfiles", "config/config.yaml", "config/large.yaml"],
                    ["base_model={hub_id: placeholder/large-model}"])


def test_large_overlay_plans_every_job_with_its_resources(large_dry_run, paper_dry_run):
    jobs = large_dry_run["jobs"]
    rules = sorted({j["rule"] for j in jobs})
    assert rules == sorted({j["rule"] for j in paper_dry_run["jobs"]})  # the whole DAG
    phases = [j for j in jobs if j["rule"] in ("pretrain_phase1", "pretrain_decay")]
    assert len(phases) == 11
    for job in phases:
        assert (job["resources"]["nodes"], job["resources"]["gres"], job["resources"]["runtime"]) == \
            (2, "gpu:h100:4", 2880)
    assert "resources/models/large-base" in large_dry_run["stdout"]
    assert all(j["resources"]["runtime"] == 480 for j in jobs if j["rule"] == "finetune")
    large = _paper_pipeline(["base_model={hub_id: placeholder/large-model}"], files=("config.yaml", "large.yaml"))
    assert '"freeze": ["embeddings", "0-9"]' in large.phase_section_json("clm-freeze-low-emb", "phase1")
    section = large.phase_section_json("clm-freeze-low", "phase1")
    assert '"freeze": ["0-9"]' in section and '"micro_batch_sequences": "auto"' in section, section


def test_large_overlay_without_hub_id_stops_naming_the_key(tmp_path):
    import snakemake_executor_plugin_slurm  # noqa: F401  (pinned in requirements/base.txt: missing is a failure)
    work = tmp_path / "work"
    work.mkdir()
    for name in ("Snakefile", "workflow", "config", "profiles", "src"):
        (work / name).symlink_to(REPO / name)
    r = subprocess.run([SNAKEMAKE, "--profile", "profiles/slurm", "-n", "all", "--configfiles", "config/config.yaml",
                        "config/large.yaml"], cwd=work, capture_output=True, text=True, timeout=300,
                       env=_clean_env(CLMDETOUR_SLURM_SITE=str(tmp_path / "absent.yaml")), check=False)
    assert r.returncode != 0 and "base_model.hub_id is null" in r.stdout + r.stderr, r.stderr[-2000:]
