"""The batch plan of a pretraining phase: its global batch split over the ranks, the micro-batch and the
gradient accumulation, with the one division rule (:func:`plan_batch`).

The rule is used twice with the same arithmetic: at planning (:func:`check_batch_division`, the ranks
planned from ``cluster``; its refusals name the config keys) and by the phase job
(:func:`clmdetour.training.phase.batch_arithmetic`, the world size it runs with; its section holds values
only, so its refusals name the section keys). Units: sequences of ``corpus.seq_len`` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from clmdetour.config.load import ConfigError
from clmdetour.config.phase import phase_key


@dataclass(frozen=True)
class BatchPlan:
    """Sequences per optimizer step of one phase (checked by :func:`plan_batch`).

    Attributes:
        global_batch: sequences per optimizer step over all ranks (``global_batch_sequences``).
        ranks: training processes (nodes x GPUs per node; the world size).
        micro_batch: sequences per forward pass per rank, or None while ``micro_batch_sequences`` is
            ``auto`` (chosen at run time: :func:`clmdetour.training.memory.plan_memory`).
    """

    global_batch: int
    ranks: int
    micro_batch: int | None

    @property
    def per_device(self) -> int:
        """Sequences per rank per optimizer step."""
        return self.global_batch // self.ranks

    @property
    def grad_accum(self) -> int | None:
        """Forward passes per rank per optimizer step (None while the micro-batch is ``auto``)."""
        return None if self.micro_batch is None else self.per_device // self.micro_batch

    def with_micro_batch(self, micro_batch: int) -> BatchPlan:
        """This plan with ``micro_batch`` chosen (the ``auto`` planner's choice, a divisor of :attr:`per_device`).

        Raises:
            ConfigError: ``micro_batch`` does not divide the per-device batch (the job's wording).
        """
        return plan_batch(self.global_batch, micro_batch, self.ranks)

    def as_dict(self) -> dict:
        """``{"global", "micro", "per_device", "grad_accum"}`` (sequences; the run record's batch figures)."""
        return {"global": self.global_batch, "micro": self.micro_batch, "per_device": self.per_device,
                "grad_accum": self.grad_accum}


class BatchWording:
    """How a refusal of the division rule names its numbers: the phase job's wording (its ``--section``
    holds values, not the keys that set them, and it knows only the world size it runs with)."""

    def micro_over_global(self, global_batch: int, micro_batch: int) -> str | None:
        """The refusal of a micro-batch larger than the global batch, or None where the per-device refusal
        (:meth:`micro_does_not_divide`) says it (the job)."""
        return None

    def ranks_do_not_divide(self, global_batch: int, ranks: int) -> str:
        """The refusal of a global batch that the ranks do not divide."""
        return f"global_batch_sequences={global_batch} is not divisible by the world size {ranks}"

    def micro_does_not_divide(self, micro_batch: int, global_batch: int, ranks: int) -> str:
        """The refusal of a micro-batch that does not divide the per-device batch (``global_batch // ranks``)."""
        return (f"per-device batch {global_batch // ranks} (= {global_batch} / {ranks} devices) is not a multiple of "
                f"micro_batch_sequences={micro_batch}")


@dataclass(frozen=True)
class PlanningWording(BatchWording):
    """The wording at planning: the keys that set the values (:func:`clmdetour.config.phase.phase_key`) and
    the cluster keys that give the ranks.

    Attributes:
        where: the phase's key path (``pretraining.variants.{variant}.{phase}``).
        global_key, micro_key: the keys that set ``global_batch_sequences`` and ``micro_batch_sequences``.
        nodes, gpus: ``cluster.pretrain_nodes`` and ``cluster.pretrain_gpus`` as configured.
    """

    where: str
    global_key: str
    micro_key: str
    nodes: int
    gpus: int

    def micro_over_global(self, global_batch: int, micro_batch: int) -> str | None:
        """Planning says it first, naming the phase (before the ranks are counted)."""
        return (f"{self.where}: global_batch_sequences ({global_batch}) is smaller than micro_batch_sequences "
                f"({micro_batch})")

    def ranks_do_not_divide(self, global_batch: int, ranks: int) -> str:
        """Naming the key that set the global batch and the cluster keys that give the ranks."""
        return (f"{self.global_key} ({global_batch}) is not divisible by cluster.pretrain_nodes x "
                f"cluster.pretrain_gpus = {self.nodes} x {self.gpus} = {ranks} devices; choose a global batch that "
                f"is a multiple of {ranks} or another node/GPU count")

    def micro_does_not_divide(self, micro_batch: int, global_batch: int, ranks: int) -> str:
        """Naming the key that set the micro-batch, the per-device batch and how it was computed."""
        per_device = global_batch // ranks
        return (f"{self.micro_key} ({micro_batch}) does not divide the per-device batch {per_device} "
                f"(= {self.global_key} {global_batch} / (cluster.pretrain_nodes x cluster.pretrain_gpus = "
                f"{self.nodes} x {self.gpus})); choose a divisor of {per_device}")


def plan_batch(global_batch: int, micro_batch: int | str | None, ranks: int,
               wording: BatchWording | None = None) -> BatchPlan:
    """The batch plan of a phase, refusing one that does not divide (the division rule, written once).

    The global batch must divide by the ranks, and a numeric micro-batch must divide the per-device batch
    (gradient accumulation = per-device / micro); ``auto`` (or None) leaves the micro-batch to the run.
    Example: 3 nodes x 4 GPUs give 384 / 12 = 32 sequences per device, which a micro-batch of 12 does not divide.

    Args:
        global_batch: sequences per optimizer step over all ranks.
        micro_batch: sequences per forward pass per rank, ``auto`` or None.
        ranks: training processes.
        wording: how refusals name the numbers (default: the phase job's, :class:`BatchWording`).

    Raises:
        ConfigError: in the order checked, a micro-batch above the global batch (planning's wording only),
            a global batch the ranks do not divide, a micro-batch that does not divide the per-device batch.
    """
    wording = wording or BatchWording()
    micro = None if micro_batch in ("auto", None) else micro_batch
    over = wording.micro_over_global(global_batch, micro) if micro is not None and global_batch < micro else None
    if over:
        raise ConfigError(over)
    if global_batch % ranks:
        raise ConfigError(wording.ranks_do_not_divide(global_batch, ranks))
    if micro is not None and (global_batch // ranks) % micro:
        raise ConfigError(wording.micro_does_not_divide(micro, global_batch, ranks))
    return BatchPlan(global_batch, ranks, micro)


def pretrain_devices(config: dict) -> int:
    """Training processes of a pretraining phase as planned: ``cluster.pretrain_nodes x cluster.pretrain_gpus``.

    A CPU phase (``pretrain_gpus: 0``) counts one process per node.
    """
    cluster = config.get("cluster") or {}
    return cluster.get("pretrain_nodes", 1) * max(cluster.get("pretrain_gpus", 4), 1)


def check_batch_division(config: dict, variant: str, phase: str, section: dict) -> BatchPlan:
    """The batch plan of one resolved phase at planning (:func:`plan_batch` over :func:`pretrain_devices`).

    Returns:
        The plan (its micro-batch None while ``auto``: chosen at run time).

    Raises:
        ConfigError: naming the keys involved and their values.
    """
    cluster = config.get("cluster") or {}
    wording = PlanningWording(
        where=f"pretraining.variants.{variant}.{phase}",
        global_key=phase_key(config, variant, phase, "global_batch_sequences"),
        micro_key=phase_key(config, variant, phase, "micro_batch_sequences"),
        nodes=cluster.get("pretrain_nodes", 1), gpus=cluster.get("pretrain_gpus", 4))
    return plan_batch(section["global_batch_sequences"], section["micro_batch_sequences"], pretrain_devices(config),
                      wording)
