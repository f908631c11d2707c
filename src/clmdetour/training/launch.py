"""Start a training entry point on the GPUs a job was given, or on the CPU.

``python -m clmdetour.training.launch --gpus N -- -m MODULE ARGS...`` runs
``python -m composer.cli.launcher -n N -m MODULE ARGS``, with
this same interpreter (never a ``composer`` found on ``PATH``; Composer's launcher starts
one process per GPU and sets the distributed environment; DDP). With
``--gpus 0`` or no visible CUDA device (e.g. a CPU node, or a SLURM test
cluster with fake GPU GRES) it runs ``python -m MODULE ARGS`` as a single
CPU process, or with ``--cpu-processes N`` (N > 1) N gloo processes through
Composer's launcher (the distributed tests on CPU). When at least one but
fewer than N GPUs are visible it stops with a message naming both numbers (a
4-GPU job silently running on 1 would take 4x longer and change the global
batch).

Multi-node (``--nodes K``, one launcher per node started by ``srun``, see
``clmdetour.training.multinode``): node rank, master address and master port
come from SLURM's environment unless ``--node-rank``/``--master-addr``/
``--master-port`` are given, and are forwarded to Composer's documented flags
``--world_size``, ``--node_rank``, ``--base_rank``, ``--master_addr``,
``--master_port``.
"""

from __future__ import annotations

import argparse
import os
import sys


class LaunchError(RuntimeError):
    """The job sees fewer GPUs than it asked for; the message names both numbers."""


def build_command(gpus: int, visible: int, target: list[str], nodes: int = 1, node_rank: int = 0,
                  master_addr: str | None = None, master_port: int | None = None,
                  cpu_processes: int = 1) -> list[str]:
    """The command line to exec (pure function, for tests).

    Args:
        gpus: GPUs requested by the rule (per node).
        visible: CUDA devices visible to this process.
        target: ``["-m", module, *args]``.
        nodes: nodes of the phase; each runs this launcher once.
        node_rank: this node's rank (0 .. nodes-1).
        master_addr, master_port: the rendezvous (TCP store) of node rank 0.
        cpu_processes: processes per node when no GPU is used (gloo); 1 runs
            the target directly, as one plain process.

    Raises:
        LaunchError: ``1 <= visible < gpus`` (the message names both numbers).
    """
    if gpus > 0 and visible > 0:
        if visible < gpus:
            raise LaunchError(f"launch: {gpus} GPU(s) requested (the rule's gpu resource: cluster.pretrain_gpus or "
                              f"cluster.finetune_gpus) but only {visible} visible (CUDA_VISIBLE_DEVICES="
                              f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); request the GPUs the job needs "
                              "from the scheduler, or lower the GPU count in the config")
        n = gpus
    else:
        n = cpu_processes  # no GPU: N gloo processes through Composer's launcher, 1 = one plain process
        if n <= 1 and nodes <= 1:
            return [sys.executable, *target]
    cmd = [sys.executable, "-m", "composer.cli.launcher", "-n", str(n)]
    if nodes > 1:
        cmd += ["--world_size", str(n * nodes), "--node_rank", str(node_rank), "--base_rank", str(n * node_rank)]
        if master_addr:
            cmd += ["--master_addr", master_addr]
    if master_port:
        cmd += ["--master_port", str(master_port)]
    return cmd + target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=int(os.environ.get("SLURM_NODEID", "0")))
    parser.add_argument("--master-addr", default=None)
    parser.add_argument("--master-port", type=int, default=None)
    parser.add_argument("--cpu-processes", type=int, default=1,
                        help="processes per node without a GPU (gloo through Composer's launcher); 1 = one plain process")
    parser.add_argument("target", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    target = args.target[1:] if args.target[:1] == ["--"] else args.target
    if args.cpu_processes < 1:
        parser.error(f"--cpu-processes must be >= 1, got {args.cpu_processes}")
    if args.nodes > 1 and args.master_addr is None:
        # One launcher per node under srun: rank, master address and port from SLURM's environment.
        from clmdetour.training.multinode import slurm_rendezvous

        rdv = slurm_rendezvous(args.nodes)
        args.node_rank, args.master_addr = rdv.node_rank, rdv.master_addr
        args.master_port = args.master_port or rdv.master_port
    visible = 0
    if args.gpus > 0:
        from clmdetour.runtime.driver import DriverError, check_driver

        try:  # before torch touches CUDA: a driver too old for the build shows no device, and the phase would run on CPU
            warning = check_driver(f"a pretraining job on {args.gpus} GPU(s)")
        except DriverError as e:
            sys.exit(f"error: {e}")
        if warning:
            print(f"launch: {warning}", file=sys.stderr)
        import torch

        visible = torch.cuda.device_count()
        if visible == 0:
            what = "one CPU process" if args.cpu_processes == 1 else f"{args.cpu_processes} CPU processes (gloo)"
            print(f"launch: {args.gpus} GPU(s) requested but no CUDA device is visible; running {what}",
                  file=sys.stderr)
    try:
        cmd = build_command(args.gpus, visible, target, args.nodes, args.node_rank, args.master_addr,
                            args.master_port, args.cpu_processes)
    except LaunchError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    print("launch:", " ".join(cmd), file=sys.stderr, flush=True)
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main()
