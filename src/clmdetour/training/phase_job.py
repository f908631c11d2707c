"""One pretraining phase job as Snakemake runs it: the launcher's command, built where the job runs.

The rules ``pretrain_phase1`` and ``pretrain_decay`` are ``script:`` rules (workflow/scripts/pretrain_phase.py):
Snakemake chooses the interpreter of a script when the job runs (the venv's that runs Snakemake, or the image's
``python`` under a container), so no interpreter path, working-directory spelling or other launch detail is part
of a rule's code or params, and the same plan comes out however Snakemake was started (``.venv/bin/snakemake``,
``python -m snakemake``, an activated venv, a moved checkout). The script turns the rule's params into a
:class:`PhaseJob` and replaces itself (``exec``) with::

    [srun ... one launcher per node]  <this interpreter> -m clmdetour.training.launch --gpus G --nodes K -- \\
        -m clmdetour.training.cli --variant V --input-model M --corpus C --output-dir O --section S ...

with the offline variables and ``CLMDETOUR_THREADS`` set and stdout/stderr in the rule's log, as the shell rules
did before (the interpreter is ``sys.executable`` of the job's own process: the image's inside an image).

Several nodes (``cluster.pretrain_nodes`` > 1) start ``srun`` from inside the job's environment: inside a
container image that needs the site's SLURM client in the image (docs/slurm.md, "Several nodes in a container");
its absence is one line, before anything starts.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass

from clmdetour.errors import ExpectedError
from clmdetour.smk import OFFLINE_VARS
from clmdetour.training.multinode import srun_prefix

#: The phase of each pretraining rule.
RULE_PHASE = {"pretrain_phase1": "phase1", "pretrain_decay": "decay"}


class PhaseJobError(ExpectedError, RuntimeError):
    """The job cannot start its launcher here (a multi-node phase without ``srun``); the message says why."""


@dataclass(frozen=True)
class PhaseJob:
    """What one phase job runs, from its rule's params and files.

    Attributes:
        variant: the variant (``clm-detour``, ...).
        phase: ``phase1`` or ``decay``.
        input_model: the HF folder the phase starts from.
        corpus_dir: the prepared corpus (``train/``, ``valid/``, ``manifest.json``).
        output_dir: ``results/pretrain/{variant}/{phase}``.
        section: the phase's resolved config, as one JSON object (``clmdetour.training.cli --section``).
        allow_repeat: ``corpus.allow_repeat``.
        previous_run: phase 1's ``run.json`` for a decay, else None.
        gpus: GPUs per node (``cluster.pretrain_gpus``).
        nodes: nodes of the phase (``cluster.pretrain_nodes``).
        threads: CPU threads per node (the job's ``threads``), given to the phase as ``CLMDETOUR_THREADS``.
        cpus_per_node: the CPUs each node's launcher gets from ``srun`` (the rule's ``cpus_per_task`` resource,
            what sbatch asked for; several nodes only).
        log: the rule's log file (stdout and stderr of the launcher and the phase).
    """

    variant: str
    phase: str
    input_model: str
    corpus_dir: str
    output_dir: str
    section: str
    allow_repeat: bool
    previous_run: str | None
    gpus: int
    nodes: int
    threads: int
    cpus_per_node: int
    log: str

    @classmethod
    def from_rule(cls, snakemake) -> PhaseJob:
        """The job of the ``snakemake`` object a ``script:`` rule is given (rules pretrain_phase1, pretrain_decay):
        the corpus is the folder of ``input.manifest``, the output folder that of ``output.run``.

        Raises:
            KeyError: a rule other than the two pretraining rules.
        """
        phase = RULE_PHASE[snakemake.rule]
        return cls(variant=snakemake.wildcards.variant, phase=phase, input_model=str(snakemake.input.model),
                   corpus_dir=os.path.dirname(str(snakemake.input.manifest)),
                   output_dir=os.path.dirname(str(snakemake.output.run)),
                   section=snakemake.params.section, allow_repeat=bool(snakemake.params.allow_repeat),
                   previous_run=str(snakemake.input.previous_run) if phase == "decay" else None,
                   gpus=int(snakemake.params.gpus), nodes=int(snakemake.params.nodes),
                   threads=int(snakemake.threads),
                   cpus_per_node=int(snakemake.resources.get("cpus_per_task", snakemake.threads)),
                   log=str(snakemake.log[0]))

    def command(self, python: str | None = None) -> list[str]:
        """The command line the job execs: ``srun`` words for several nodes, then ``python -m
        clmdetour.training.launch ... -- -m clmdetour.training.cli ...`` (one argument per value: a path or a
        config string with spaces or shell characters stays one argument).

        Args:
            python: the interpreter (default: ``sys.executable``, this job's own).
        """
        cmd = srun_prefix(self.nodes, self.cpus_per_node).split()
        cmd += [python or sys.executable, "-m", "clmdetour.training.launch", "--gpus", str(self.gpus),
                "--nodes", str(self.nodes), "--", "-m", "clmdetour.training.cli", "--variant", self.variant,
                "--input-model", self.input_model, "--corpus", self.corpus_dir, "--output-dir", self.output_dir,
                "--section", self.section, "--allow-repeat", "true" if self.allow_repeat else "false"]
        if self.previous_run:
            cmd += ["--previous-run", self.previous_run]
        return cmd

    def environment(self, environ: dict[str, str] | None = None) -> dict[str, str]:
        """The launcher's environment: ``environ`` (default ``os.environ``) with the Hugging Face offline
        variables (compute nodes usually have no internet) and ``CLMDETOUR_THREADS`` set."""
        env = dict(os.environ if environ is None else environ)
        env.update({var: "1" for var in OFFLINE_VARS})
        env["CLMDETOUR_THREADS"] = str(self.threads)
        return env

    def check_can_start(self, which=shutil.which) -> None:
        """Refuse, in one line, a multi-node phase where ``srun`` is not on ``PATH`` (a container image without
        the site's SLURM client).

        Raises:
            PhaseJobError: naming the node count, the image marker if any, and the fix.
        """
        if self.nodes > 1 and which("srun") is None:
            from clmdetour.runtime.driver import in_image

            where = "inside this container image" if in_image() else "on this node"
            raise PhaseJobError(
                f"{self.variant} {self.phase}: cluster.pretrain_nodes is {self.nodes}, which starts one launcher per "
                f"node with srun, but srun is not on PATH {where}; bind the site's SLURM client into the image "
                "(docs/slurm.md, 'Several nodes in a container') or set cluster.pretrain_nodes: 1")


def exec_phase(job: PhaseJob) -> None:
    """Replace this process by the job's launcher, its stdout and stderr appended to ``job.log``.

    Never returns. Raises:
        PhaseJobError: as :meth:`PhaseJob.check_can_start` (before the log is touched).
        OSError: the log cannot be opened, or the command cannot be executed.
    """
    job.check_can_start()
    cmd = job.command()
    fd = os.open(job.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.execvpe(cmd[0], cmd, job.environment())
