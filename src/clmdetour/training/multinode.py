"""Several nodes per pretraining phase on SLURM: the ``srun`` layout and each node's rendezvous values.

A multi-node phase job (``cluster.pretrain_nodes`` = K > 1) holds K nodes.
The rule's command starts one launcher per node::

    srun --overlap --nodes=K --ntasks=K --ntasks-per-node=1 --cpus-per-task=C --kill-on-bad-exit=1 \\
        PYTHON -m clmdetour.training.launch --gpus G --nodes K -- -m clmdetour.training.cli ...

(:func:`srun_prefix`). In each task, :func:`slurm_rendezvous` reads SLURM's
environment: the node rank is ``SLURM_PROCID`` (one task per node), the master
address the first host of ``SLURM_STEP_NODELIST`` (where task 0 runs), and the
master port is derived from ``SLURM_JOB_ID`` (:func:`master_port`), so two jobs
sharing a node do not collide. The launcher passes them to Composer's launcher
as its documented multi-node flags ``--world_size``, ``--node_rank``,
``--base_rank``, ``--master_addr``, ``--master_port``; torch.distributed's
TCP store on the master does the rendezvous.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass

PORT_BASE = 20000
PORT_SPAN = 20000
"""Master ports are ``PORT_BASE + job_id % PORT_SPAN``: 20000-39999, below Linux's ephemeral range (32768+ on some
systems overlaps; a collision needs two jobs whose ids differ by a multiple of 20000 on one master node)."""


class RendezvousError(RuntimeError):
    """SLURM's environment does not describe the multi-node step the launcher expects."""


@dataclass(frozen=True)
class Rendezvous:
    """Where one node's launcher sits in a multi-node phase.

    Attributes:
        nodes: nodes of the phase (K).
        node_rank: this node's rank, 0 .. K-1.
        master_addr: host name of node rank 0 (the TCP store).
        master_port: TCP port of the store.
    """

    nodes: int
    node_rank: int
    master_addr: str
    master_port: int


def master_port(job_id: str | int) -> int:
    """The rendezvous port of a SLURM job: ``20000 + job_id % 20000``.

    Every node of one job computes the same port; two jobs on one node get
    different ports unless their ids differ by a multiple of 20000.

    Raises:
        RendezvousError: ``job_id`` is not a number (array jobs: ``SLURM_JOB_ID`` is still numeric).
    """
    text = str(job_id).strip()
    if not text.isdigit():
        raise RendezvousError(f"SLURM_JOB_ID={job_id!r} is not a number: cannot derive the master port")
    return PORT_BASE + int(text) % PORT_SPAN


def expand_hostlist(hostlist: str, scontrol: str = "scontrol") -> list[str]:
    """Host names of a SLURM host list (``gpu[01-02],cpu3``), in order.

    Uses ``scontrol show hostnames`` when available; otherwise expands
    single-bracket ranges itself (``a[1-3,7]``).

    Raises:
        RendezvousError: an empty list, or one this function cannot expand without scontrol.
    """
    if not hostlist.strip():
        raise RendezvousError("empty SLURM node list")
    try:
        out = subprocess.run([scontrol, "show", "hostnames", hostlist], capture_output=True, text=True, check=True,
                             timeout=30).stdout.split()
        if out:
            return out
    except (OSError, subprocess.SubprocessError):
        pass
    hosts = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", hostlist):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if not m:
            hosts.append(part)
            continue
        prefix, body, suffix = m.groups()
        for item in body.split(","):
            lo, _, hi = item.partition("-")
            if hi and not (lo.isdigit() and hi.isdigit()):
                raise RendezvousError(f"cannot expand SLURM node list {hostlist!r} without scontrol")
            for i in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{prefix}{str(i).zfill(len(lo))}{suffix}")
    return hosts


def slurm_rendezvous(nodes: int, environ: dict | None = None, scontrol: str = "scontrol") -> Rendezvous:
    """This node's rendezvous values, from the environment of an ``srun`` task (one task per node).

    Args:
        nodes: nodes the rule asked for (``cluster.pretrain_nodes``).
        environ: environment to read (default ``os.environ``): ``SLURM_JOB_ID``,
            ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_STEP_NODELIST`` (else
            ``SLURM_JOB_NODELIST``); ``MASTER_ADDR`` and ``MASTER_PORT`` override the
            derived address (e.g. where node names do not resolve) and port.
        scontrol: the scontrol command (host-list expansion).

    Raises:
        RendezvousError: not inside an srun step, a task count that is not one per
            node, or a node list shorter than ``nodes``; the message says how to start it.
    """
    env = os.environ if environ is None else environ
    missing = [k for k in ("SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NTASKS") if not env.get(k)]
    if missing:
        raise RendezvousError(f"--nodes {nodes} needs one launcher per node started by srun "
                              f"(srun --nodes={nodes} --ntasks-per-node=1 ...); {', '.join(missing)} not set")
    ntasks, rank = int(env["SLURM_NTASKS"]), int(env["SLURM_PROCID"])
    if ntasks != nodes:
        raise RendezvousError(f"cluster.pretrain_nodes is {nodes} but the srun step has {ntasks} tasks; "
                              f"start exactly one task per node (--ntasks={nodes} --ntasks-per-node=1)")
    hosts = expand_hostlist(env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or "", scontrol)
    if len(hosts) < nodes:
        raise RendezvousError(f"cluster.pretrain_nodes is {nodes} but the step's node list has {len(hosts)}: {hosts}")
    port = int(env["MASTER_PORT"]) if env.get("MASTER_PORT") else master_port(env["SLURM_JOB_ID"])
    return Rendezvous(nodes=nodes, node_rank=rank, master_addr=env.get("MASTER_ADDR") or hosts[0], master_port=port)


def srun_prefix(nodes: int, cpus_per_task: int) -> str:
    """The ``srun`` words a multi-node phase command starts with ('' for one node).

    ``--overlap`` lets the step share the node that the executor's own job step
    holds; ``--kill-on-bad-exit=1`` ends every node's launcher when one fails;
    ``--cpus-per-task`` gives each launcher the node's CPUs (srun does not
    inherit sbatch's since SLURM 22.05).

    Args:
        nodes: ``cluster.pretrain_nodes``.
        cpus_per_task: CPUs per node (the rule's ``cpus_per_task``).
    """
    if nodes <= 1:
        return ""
    return " ".join(["srun", "--overlap", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
                     f"--cpus-per-task={cpus_per_task}", "--kill-on-bad-exit=1"]) + " "


def describe(cmd: list[str]) -> str:
    """A command line as a shell would show it."""
    return " ".join(shlex.quote(c) for c in cmd)
