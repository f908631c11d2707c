"""What the end of a successful run says again: the warnings its outputs recorded (Snakefile ``onsuccess``)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from clmdetour.pipeline import paths


def run_warnings(root: str | Path = ".") -> list[str]:
    """The ``warnings`` lines of the corpus manifest (``results/corpus/manifest.json``) under ``root``, if any."""
    manifest = Path(root) / paths.CORPUS_MANIFEST
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [f"{paths.CORPUS_MANIFEST}: {w}" for w in data.get("warnings") or []]


def print_run_warnings(root: str | Path = ".", stream=None) -> int:
    """Print :func:`run_warnings` (stderr by default); returns how many."""
    lines = run_warnings(root)
    for line in lines:
        print(f"WARNING (recorded during the run): {line}", file=stream or sys.stderr)
    return len(lines)


#: The config key that sets each rule's ``mem_mb`` (rules not listed have a fixed request in their rule file).
MEM_KEYS = {"corpus_shard_text": "cluster.corpus_shard_mem_mb", "corpus_shard_tokens": "cluster.corpus_shard_mem_mb",
            "prepare_corpus": "cluster.corpus_mem_mb", "pretrain_phase1": "cluster.mem_mb_per_gpu",
            "pretrain_decay": "cluster.mem_mb_per_gpu", "finetune": "cluster.mem_mb_per_gpu",
            "layer_drift": "analysis.mem_mb", "stage_release": "release.mem_mb"}
#: What else lowers each rule's memory, besides more of it.
LOWER_MEMORY = {"corpus_shard_text": "a smaller corpus.shard_mb", "corpus_shard_tokens": "a smaller corpus.shard_mb",
                "prepare_corpus": "fewer corpus.sources or a smaller corpus.train_tokens",
                "finetune": "a smaller pretraining.memory_limit_gib (micro-batch)",
                "pretrain_phase1": "a smaller pretraining.memory_limit_gib (micro-batch)",
                "pretrain_decay": "a smaller pretraining.memory_limit_gib (micro-batch)"}

_ERROR_IN_RULE = re.compile(r"^Error in rule (\S+?):\s*$", re.MULTILINE)
_KILLED = re.compile(r"died with <Signals\.SIGKILL: 9>|exit status 137\b|returned non-zero exit status -9\b")


def killed_jobs(log_text: str) -> list[str]:
    """The rules of the jobs a Snakemake log says were killed by SIGKILL, in the log's order, once per job.

    Snakemake prints a failed job's exception (``RuleException:`` then Python's ``CalledProcessError``:
    ``Command '...' died with <Signals.SIGKILL: 9>.``) just before its ``Error in rule NAME:`` block; a shell
    that reports the kill says ``exit status 137`` (128 + 9). Read from Snakemake 9.27's log."""
    found = []
    for m in _ERROR_IN_RULE.finditer(log_text):
        cause = log_text.rfind("RuleException", 0, m.start())
        if cause >= 0 and _KILLED.search(log_text, cause, m.start()):
            found.append(m.group(1))
    return found


def killed_job_lines(log_text: str, mem_mb: dict[str, object]) -> list[str]:
    """One line per job killed by SIGKILL (:func:`killed_jobs`): its rule, its ``mem_mb``, "likely out of
    memory" and the key that changes it.

    Args:
        log_text: the run's Snakemake log.
        mem_mb: rule name -> its ``mem_mb`` resource (an int, or something else when it is computed per job).
    """
    lines = []
    for rule in killed_jobs(log_text):
        base = "finetune" if rule.startswith("finetune") else rule
        mem = mem_mb.get(rule)
        asked = f"mem_mb {mem}" if isinstance(mem, int) else "mem_mb computed per job"
        key = MEM_KEYS.get(base)
        fix = f"raise {key}" if key else f"give the rule {rule} more memory"
        lower = f", or use {LOWER_MEMORY[base]}" if base in LOWER_MEMORY else ""
        lines.append(f"rule {rule} ({asked}) was killed by SIGKILL: likely out of memory (the kernel's OOM "
                     f"killer on this machine, or the cluster's memory limit); {fix} (the job's request on a "
                     f"cluster; on one machine, free memory or run fewer jobs at once: --cores, "
                     f"--resources mem_mb=N){lower}")
    return lines


def print_killed_jobs(log_paths, mem_mb: dict[str, object], stream=None) -> int:
    """Print :func:`killed_job_lines` for the run's Snakemake log (the Snakefile's ``onerror`` gives ``log``: a
    path, or a list of them); returns how many. A missing or unreadable log prints nothing, and nothing here
    raises (an end hook must not hide the run's own error)."""
    paths = log_paths if isinstance(log_paths, list | tuple) else [log_paths]
    text = ""
    for path in paths:
        try:
            text += Path(path).read_text(encoding="utf-8", errors="replace") if path else ""
        except (OSError, TypeError):
            continue
    lines = killed_job_lines(text, mem_mb)
    for line in lines:
        print(f"error: {line}", file=stream or sys.stderr)
    return len(lines)
