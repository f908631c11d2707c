"""A job killed by SIGKILL is reported with its rule, its mem_mb, "likely out of memory" and the key that
changes it (issue 65 item 4): read from the log Snakemake itself writes for such a job."""

from __future__ import annotations

import subprocess
import sys

from helpers import clean_env

from clmdetour.pipeline.summary import killed_job_lines, killed_jobs, print_killed_jobs

SNAKEFILE = """
rule corpus_shard_tokens:
    output: "out.txt"
    resources: mem_mb=8000
    script: "kill_me.py"

rule fine:
    output: "fine.txt"
    shell: "exit 3"
"""


def _snakemake_log_of_a_killed_job(tmp_path) -> str:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "kill_me.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    r = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--keep-going", "out.txt", "fine.txt"],
                       cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode != 0
    [log] = sorted((tmp_path / ".snakemake" / "log").glob("*.snakemake.log"))
    return log.read_text()


def test_a_job_killed_by_sigkill_is_named_with_its_memory_key(tmp_path, capsys):
    text = _snakemake_log_of_a_killed_job(tmp_path)
    assert killed_jobs(text) == ["corpus_shard_tokens"]  # the rule that exited 3 is not a kill
    [line] = killed_job_lines(text, {"corpus_shard_tokens": 8000})
    assert line.startswith("rule corpus_shard_tokens (mem_mb 8000) was killed by SIGKILL: likely out of memory")
    assert "raise cluster.corpus_shard_mem_mb" in line and "a smaller corpus.shard_mb" in line
    log = next((tmp_path / ".snakemake" / "log").glob("*.snakemake.log"))
    assert print_killed_jobs(log, {"corpus_shard_tokens": 8000}) == 1
    assert capsys.readouterr().err.startswith("error: rule corpus_shard_tokens (mem_mb 8000)")
    assert print_killed_jobs(tmp_path / "absent.log", {}) == 0
    assert print_killed_jobs([str(log)], {"corpus_shard_tokens": 8000}) == 1  # onerror's `log` is a list


def test_fine_tune_rules_of_any_seed_group_share_the_key():
    text = ("RuleException:\nCalledProcessError in file x, line 3:\nCommand 'x' died with <Signals.SIGKILL: 9>.\n"
            "Error in rule finetune_3seeds_from0:\n    jobid: 4\n")
    [line] = killed_job_lines(text, {"finetune_3seeds_from0": lambda w: 1})
    assert "(mem_mb computed per job)" in line and "raise cluster.mem_mb_per_gpu" in line
